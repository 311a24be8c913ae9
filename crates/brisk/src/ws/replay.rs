//! What a worker keeps so that a WebSocket connection misses no broadcast of its groups:
//!
//! - **A connection handed over on a reload** (`docs/design/ws-handover.md`, sections 3 and
//!   4). Each worker numbers its own broadcasts ([`Stamp`]), the master those it delivers
//!   from other instances (the cluster bus), and each worker remembers the last number it
//!   has seen of every origin: when a connection leaves, those numbers (its watermark) say
//!   which broadcasts it has had. A new worker keeps every broadcast it sees, its own and
//!   relayed, from its start until the master says no connection will come to it any more;
//!   restoring a connection, it sends it those of its groups above its watermark, in the
//!   order it saw them. The relays' order makes this exact: the master relays to the old
//!   worker until the moment it relays to the new one instead, and tells the new worker to
//!   take a connection only after the broadcasts relayed to it before.
//! - **A connection still opening** ([`OpenWindow`]). Its client has the `101` answer (and
//!   may tell others it is in) before its `on_open` has joined the groups: an upgrade is
//!   served by tasks of their own, after the answer is written, and `on_open` may wait on a
//!   database before it joins. From the moment its answer is made until its `on_open` ends,
//!   the worker keeps what it delivers; each group the connection joins meanwhile first
//!   sends it that group's broadcasts since then ([`Replay::catch_up`]), so a client has every
//!   broadcast to its `on_open`'s groups made after its handshake was answered.

use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::time::{Duration, Instant};

use std::rc::Rc;

use super::delivery::Delivery;
use super::group_key::GroupKey;
use crate::ipc::Stamp;

/// The most bytes of broadcasts a worker keeps; past them it keeps none: group members
/// handed to it are closed (1012) rather than served with a gap, and connections opening
/// then are told so in the log (and counted in `broadcasts_dropped`).
pub(crate) const MAX_KEPT: usize = 64 << 20;

/// The longest an [`OpenWindow`] keeps broadcasts: an `on_open` that has not joined its
/// groups by then gets none of what came before (logged, and counted in
/// `broadcasts_dropped`), so one that never ends does not hold the worker's broadcasts.
pub(crate) const MAX_WINDOW_AGE: Duration = Duration::from_secs(10);

/// An open window: the index of the broadcast it starts at, and its own number.
type WindowKey = (u64, u64);

/// A broadcast kept for connections yet to come (or yet to join).
struct Kept {
    /// Its place among all broadcasts this worker has seen.
    index: u64,
    stamp: Stamp,
    group: GroupKey,
    delivery: Rc<Delivery>,
}

/// A connection in its `on_open`: its window and the groups it was caught up on.
struct Opening {
    window: WindowKey,
    caught_up: Vec<GroupKey>,
}

/// What a worker keeps of its broadcasts, one of its context's parts.
pub(crate) struct Replay(RefCell<State>);

struct State {
    /// This worker's origin (its pid).
    origin: u32,
    /// The number of its last broadcast.
    own: u64,
    /// The last number seen of each origin.
    seen: HashMap<u32, u64>,
    /// How many broadcasts this worker has seen (the index of the next one).
    next_index: u64,
    kept: VecDeque<Kept>,
    kept_bytes: usize,
    /// Whether broadcasts are kept for handovers (from the start until the master says stop).
    keeping: bool,
    /// More than [`MAX_KEPT`] came while keeping for handovers: what was kept is gone.
    overflowed: bool,
    /// The open windows, oldest first, with when each opened. One that lost what was kept
    /// for it ([`MAX_KEPT`], [`MAX_WINDOW_AGE`]) is taken out before its end.
    windows: BTreeMap<WindowKey, Instant>,
    /// The number of the next window.
    next_window: u64,
    /// The connections in their `on_open`, by id.
    opening: HashMap<u64, Opening>,
}

impl Default for Replay {
    /// A new worker's: it keeps every broadcast for connections handed to it, from its start.
    fn default() -> Self {
        Replay(RefCell::new(State {
            origin: std::process::id(),
            own: 0,
            seen: HashMap::new(),
            next_index: 0,
            kept: VecDeque::new(),
            kept_bytes: 0,
            keeping: true,
            overflowed: false,
            windows: BTreeMap::new(),
            next_window: 0,
            opening: HashMap::new(),
        }))
    }
}

impl State {
    fn note(&mut self, stamp: Stamp, group: &GroupKey, delivery: &Rc<Delivery>) {
        if stamp != Stamp::NONE {
            let seen = self.seen.entry(stamp.origin).or_default();
            *seen = (*seen).max(stamp.seq);
        }
        let index = self.next_index;
        self.next_index += 1;
        if !self.windows.is_empty() {
            self.expire_windows(Instant::now());
        }
        if !self.keeping && self.windows.is_empty() {
            return;
        }
        self.kept_bytes += delivery.broadcast().len();
        if self.kept_bytes > MAX_KEPT {
            tracing::warn!(
                "more than {} MiB of broadcasts kept for WebSocket connections opening or \
                 handed over: those opening now may miss some, and group members handed \
                 over from now on are closed with 1012",
                MAX_KEPT >> 20
            );
            self.overflowed |= self.keeping;
            self.keeping = false;
            self.windows.clear();
            self.kept = VecDeque::new();
            self.kept_bytes = 0;
            return;
        }
        self.kept.push_back(Kept {
            index,
            stamp,
            group: group.clone(),
            delivery: delivery.clone(),
        });
    }

    /// Forgets what neither handovers nor open windows need.
    fn prune(&mut self) {
        if self.keeping {
            return;
        }
        let needed_from = self
            .windows
            .keys()
            .next()
            .map_or(u64::MAX, |&(from, _)| from);
        while self.kept.front().is_some_and(|k| k.index < needed_from) {
            let k = self.kept.pop_front().expect("checked");
            self.kept_bytes -= k.delivery.broadcast().len();
        }
    }

    /// Takes out the windows open for longer than [`MAX_WINDOW_AGE`] at `now`.
    fn expire_windows(&mut self, now: Instant) {
        let before = self.windows.len();
        while let Some(entry) = self.windows.first_entry() {
            if now.duration_since(*entry.get()) < MAX_WINDOW_AGE {
                break;
            }
            entry.remove();
        }
        if self.windows.len() < before {
            self.prune();
        }
    }

    fn close_window(&mut self, key: WindowKey) {
        self.windows.remove(&key);
        self.prune();
    }
}

impl Replay {
    /// Stamps a broadcast of this worker (the next number of its own) and notes it.
    pub(crate) fn stamp_own(&self, group: &GroupKey, delivery: &Rc<Delivery>) -> Stamp {
        let mut r = self.0.borrow_mut();
        r.own += 1;
        let stamp = Stamp {
            origin: r.origin,
            seq: r.own,
        };
        r.note(stamp, group, delivery);
        stamp
    }

    /// Notes a broadcast relayed from another worker (or instance), before it is delivered
    /// here.
    pub(crate) fn note_relayed(&self, stamp: Stamp, group: &GroupKey, delivery: &Rc<Delivery>) {
        self.0.borrow_mut().note(stamp, group, delivery);
    }

    /// The last number this worker has seen of each origin: a connection that leaves now has
    /// had every broadcast of its groups up to these.
    pub(crate) fn watermark(&self) -> Vec<(u32, u64)> {
        self.0.borrow().seen.iter().map(|(&o, &s)| (o, s)).collect()
    }

    /// No connection will be handed to this worker any more: keeps no more broadcasts for
    /// handovers.
    pub(crate) fn stop_keeping(&self) {
        let mut r = self.0.borrow_mut();
        r.keeping = false;
        r.prune();
    }

    /// The broadcasts of `groups` that a connection with `watermark` has not had, in the
    /// order this worker saw them; `None` if they cannot be known (too many came, or this
    /// worker stopped keeping them).
    pub(crate) fn missed(
        &self,
        groups: &[GroupKey],
        watermark: &[(u32, u64)],
    ) -> Option<Vec<Rc<Delivery>>> {
        let r = self.0.borrow();
        if r.overflowed || !r.keeping {
            return None;
        }
        let had: HashMap<u32, u64> = watermark.iter().copied().collect();
        let missed = r
            .kept
            .iter()
            // Broadcasts not numbered (`Stamp::NONE`) are never replayed.
            .filter(|k| k.stamp.seq > had.get(&k.stamp.origin).copied().unwrap_or(0))
            .filter(|k| groups.contains(&k.group))
            .map(|k| k.delivery.clone())
            .collect();
        Some(missed)
    }

    /// What connection `conn`, joining `group`, missed of it since its window opened, in
    /// order: empty when it has no window or was caught up on `group` already; `None` when
    /// what was kept for it is gone ([`MAX_KEPT`], [`MAX_WINDOW_AGE`]).
    pub(crate) fn catch_up(&self, conn: u64, group: &GroupKey) -> Option<Vec<Rc<Delivery>>> {
        let mut r = self.0.borrow_mut();
        if !r.opening.contains_key(&conn) {
            return Some(Vec::new());
        }
        r.expire_windows(Instant::now());
        let r = &mut *r;
        let opening = r.opening.get_mut(&conn).expect("checked");
        if opening.caught_up.iter().any(|g| g == group) {
            return Some(Vec::new());
        }
        opening.caught_up.push(group.clone());
        if !r.windows.contains_key(&opening.window) {
            return None;
        }
        let from = opening.window.0;
        let missed = r
            .kept
            .iter()
            .filter(|k| k.index >= from && k.group == *group)
            .map(|k| k.delivery.clone())
            .collect();
        Some(missed)
    }
}

/// The time from a WebSocket handshake's answer to the end of the connection's `on_open`:
/// while one is open, the worker keeps the broadcasts it delivers, and a group the
/// connection joins first sends it those of its own ([`Replay::catch_up`]). Dropping it
/// closes it.
pub(crate) struct OpenWindow {
    key: WindowKey,
    conn: Option<u64>,
    replay: Rc<Replay>,
}

impl OpenWindow {
    /// Opens a window at the current broadcast of `replay` (its worker's): call it before
    /// the `101` answer is made.
    pub(crate) fn begin(replay: Rc<Replay>) -> Self {
        let key = {
            let mut r = replay.0.borrow_mut();
            let key = (r.next_index, r.next_window);
            r.next_window += 1;
            r.windows.insert(key, Instant::now());
            key
        };
        OpenWindow {
            key,
            conn: None,
            replay,
        }
    }

    /// The window is connection `conn`'s (its id known once it is served).
    pub(crate) fn attach(&mut self, conn: u64) {
        self.conn = Some(conn);
        let opening = Opening {
            window: self.key,
            caught_up: Vec::new(),
        };
        self.replay.0.borrow_mut().opening.insert(conn, opening);
    }
}

impl std::fmt::Debug for OpenWindow {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "OpenWindow(from {})", self.key.0)
    }
}

impl Drop for OpenWindow {
    fn drop(&mut self) {
        let mut r = self.replay.0.borrow_mut();
        if let Some(conn) = self.conn {
            r.opening.remove(&conn);
        }
        r.close_window(self.key);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;

    fn room() -> GroupKey {
        GroupKey::app("room")
    }

    fn other_room() -> GroupKey {
        GroupKey::app("other room")
    }

    fn text(text: &'static str) -> Rc<Delivery> {
        Rc::new(Delivery::of_message(super::super::Message::text(text)))
    }

    fn plain(list: Option<Vec<Rc<Delivery>>>) -> Vec<&'static [u8]> {
        list.unwrap()
            .into_iter()
            .map(|d| &*Box::leak(d.broadcast().payload.to_vec().into_boxed_slice()))
            .collect()
    }

    #[test]
    fn a_connection_gets_what_its_watermark_has_not_of_its_groups_in_order() {
        {
            let replay = Replay::default();
            let note_relayed = |s, g: &GroupKey, d: &Rc<Delivery>| replay.note_relayed(s, g, d);
            let stamp_own = |g: &GroupKey, d: &Rc<Delivery>| replay.stamp_own(g, d);
            let watermark = || replay.watermark();
            let missed = |g: &[GroupKey], w: &[(u32, u64)]| replay.missed(g, w);
            let other = Stamp { origin: 7, seq: 0 };
            note_relayed(Stamp { seq: 1, ..other }, &room(), &text("o1"));
            let mine = stamp_own(&room(), &text("m1"));
            assert_eq!(mine.seq, 1);
            note_relayed(Stamp { seq: 2, ..other }, &other_room(), &text("x"));
            note_relayed(Stamp { seq: 3, ..other }, &room(), &text("o3"));
            stamp_own(&room(), &text("m2"));
            // From another instance: not numbered, not kept.
            note_relayed(Stamp::NONE, &room(), &text("bus"));

            let mut seen = watermark();
            seen.sort();
            assert_eq!(seen, [(7, 3), (mine.origin, 2)]);
            // A connection that had o1 and m1 (and x, not its group).
            let had = [(7, 2), (mine.origin, 1)];
            let groups = [room()];
            assert_eq!(plain(missed(&groups, &had)), [&b"o3"[..], b"m2"]);
            // One that had nothing of this worker's own.
            assert_eq!(plain(missed(&groups, &[(7, 3)])), [&b"m1"[..], b"m2"]);
            replay.stop_keeping();
            assert!(missed(&groups, &had).is_none(), "nothing kept any more");
        }
    }

    fn kept_len(replay: &Replay) -> usize {
        replay.0.borrow().kept.len()
    }

    #[test]
    fn a_connection_in_its_on_open_catches_up_once_per_group_on_what_came_since_its_answer() {
        {
            let replay = Rc::new(Replay::default());
            let note_relayed = |s, g: &GroupKey, d: &Rc<Delivery>| replay.note_relayed(s, g, d);
            let stamp_own = |g: &GroupKey, d: &Rc<Delivery>| replay.stamp_own(g, d);
            let catch_up = |c, g: &GroupKey| replay.catch_up(c, g);
            let kept_len = || kept_len(&replay);
            // A worker past its start: nothing kept for handovers.
            replay.stop_keeping();
            let other = Stamp { origin: 7, seq: 0 };
            note_relayed(Stamp { seq: 1, ..other }, &room(), &text("before"));
            assert_eq!(kept_len(), 0, "no window open: nothing kept");

            let mut first = OpenWindow::begin(replay.clone());
            note_relayed(Stamp { seq: 2, ..other }, &room(), &text("a1"));
            stamp_own(&other_room(), &text("x"));
            let mut second = OpenWindow::begin(replay.clone());
            note_relayed(Stamp::NONE, &room(), &text("bus"));
            first.attach(1);
            second.attach(2);
            let group = room();
            assert_eq!(plain(catch_up(1, &group)), [&b"a1"[..], b"bus"]);
            assert_eq!(plain(catch_up(1, &group)), Vec::<&[u8]>::new(), "once");
            assert_eq!(plain(catch_up(2, &group)), [&b"bus"[..]]);
            assert_eq!(plain(catch_up(3, &group)), Vec::<&[u8]>::new(), "no window");
            drop(first);
            assert_eq!(kept_len(), 1, "only what the second window needs");
            drop(second);
            assert_eq!(kept_len(), 0);

            // Too much for one window: it is told, not given a gap.
            let mut late = OpenWindow::begin(replay.clone());
            late.attach(4);
            let huge = Rc::new(Delivery::of_message(super::super::Message::binary(
                Bytes::from(vec![0u8; MAX_KEPT + 1]),
            )));
            note_relayed(Stamp { seq: 3, ..other }, &group, &huge);
            assert!(catch_up(4, &group).is_none());
            drop(late);
            // Too old: an on_open that has not joined in time.
            let mut slow = OpenWindow::begin(replay.clone());
            slow.attach(6);
            note_relayed(Stamp { seq: 4, ..other }, &group, &text("meanwhile"));
            assert_eq!(kept_len(), 1);
            (replay.0.borrow_mut()).expire_windows(Instant::now() + MAX_WINDOW_AGE);
            assert_eq!(kept_len(), 0, "nothing kept for an expired window");
            assert!(catch_up(6, &group).is_none());
            drop(slow);
            let mut next = OpenWindow::begin(replay.clone());
            note_relayed(Stamp { seq: 5, ..other }, &group, &text("after"));
            next.attach(5);
            assert_eq!(plain(catch_up(5, &group)), [&b"after"[..]]);
        }
    }
}
