//! What a worker keeps so that a group member handed to it on a reload gets every broadcast
//! of its groups exactly once (`docs/design/ws-handover.md`, sections 3 and 4).
//!
//! Each worker numbers its own broadcasts ([`Stamp`]) and remembers the last number it has
//! seen of every origin: when a connection leaves, those numbers (its watermark) say which
//! broadcasts it has had. A new worker keeps every broadcast it sees, its own and relayed,
//! from its start until the master says no connection will come to it any more; restoring a
//! connection, it sends it those of its groups above its watermark, in the order it saw
//! them. The relays' order makes this exact: the master relays to the old worker until the
//! moment it relays to the new one instead, and tells the new worker to take a connection
//! only after the broadcasts relayed to it before.

use std::cell::RefCell;
use std::collections::{HashMap, VecDeque};
use std::rc::Rc;

use crate::ipc::{BroadcastFrames, Stamp};

/// The most bytes of broadcasts a new worker keeps; past them it keeps none, and group
/// members handed to it are closed (1012) rather than served with a gap.
const MAX_KEPT: usize = 64 << 20;

/// A broadcast kept for connections yet to come.
struct Kept {
    stamp: Stamp,
    group: Rc<str>,
    frames: BroadcastFrames,
}

struct Replay {
    /// This worker's origin (its pid).
    origin: u32,
    /// The number of its last broadcast.
    own: u64,
    /// The last number seen of each origin.
    seen: HashMap<u32, u64>,
    kept: VecDeque<Kept>,
    kept_bytes: usize,
    /// Whether broadcasts are kept (from the start until the master says stop).
    keeping: bool,
    /// More than [`MAX_KEPT`] came: what was kept is gone.
    overflowed: bool,
}

thread_local! {
    static REPLAY: RefCell<Replay> = RefCell::new(Replay {
        origin: std::process::id(),
        own: 0,
        seen: HashMap::new(),
        kept: VecDeque::new(),
        kept_bytes: 0,
        keeping: true,
        overflowed: false,
    });
}

impl Replay {
    fn note(&mut self, stamp: Stamp, group: &str, frames: &BroadcastFrames) {
        if stamp == Stamp::NONE {
            return;
        }
        let seen = self.seen.entry(stamp.origin).or_default();
        *seen = (*seen).max(stamp.seq);
        if !self.keeping {
            return;
        }
        self.kept_bytes += frames.len();
        if self.kept_bytes > MAX_KEPT {
            tracing::warn!(
                "more than {} MiB of broadcasts during a handover: WebSocket group members \
                 handed over from now on are closed with 1012",
                MAX_KEPT >> 20
            );
            self.stop_keeping();
            self.overflowed = true;
            return;
        }
        self.kept.push_back(Kept {
            stamp,
            group: Rc::from(group),
            frames: frames.clone(),
        });
    }

    fn stop_keeping(&mut self) {
        self.keeping = false;
        self.kept = VecDeque::new();
        self.kept_bytes = 0;
    }
}

/// Stamps a broadcast of this worker (the next number of its own) and notes it.
pub(crate) fn stamp_own(group: &str, frames: &BroadcastFrames) -> Stamp {
    REPLAY.with(|r| {
        let mut r = r.borrow_mut();
        r.own += 1;
        let stamp = Stamp {
            origin: r.origin,
            seq: r.own,
        };
        r.note(stamp, group, frames);
        stamp
    })
}

/// Notes a broadcast relayed from another worker, before it is delivered here.
pub(crate) fn note_relayed(stamp: Stamp, group: &str, frames: &BroadcastFrames) {
    REPLAY.with(|r| r.borrow_mut().note(stamp, group, frames));
}

/// The last number this worker has seen of each origin: a connection that leaves now has
/// had every broadcast of its groups up to these.
pub(crate) fn watermark() -> Vec<(u32, u64)> {
    REPLAY.with(|r| r.borrow().seen.iter().map(|(&o, &s)| (o, s)).collect())
}

/// No connection will be handed to this worker any more: keeps no more broadcasts.
pub(crate) fn stop_keeping() {
    REPLAY.with(|r| r.borrow_mut().stop_keeping());
}

/// The broadcasts of `groups` that a connection with `watermark` has not had, in the order
/// this worker saw them; `None` if they cannot be known (too many came, or this worker
/// stopped keeping them).
pub(crate) fn missed(groups: &[String], watermark: &[(u32, u64)]) -> Option<Vec<BroadcastFrames>> {
    REPLAY.with(|r| {
        let r = r.borrow();
        if r.overflowed || !r.keeping {
            return None;
        }
        let had: HashMap<u32, u64> = watermark.iter().copied().collect();
        let missed = r
            .kept
            .iter()
            .filter(|k| k.stamp.seq > had.get(&k.stamp.origin).copied().unwrap_or(0))
            .filter(|k| groups.iter().any(|g| **g == *k.group))
            .map(|k| k.frames.clone())
            .collect();
        Some(missed)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;

    fn frames(text: &'static str) -> BroadcastFrames {
        BroadcastFrames {
            plain: Bytes::from_static(text.as_bytes()),
            deflated: None,
        }
    }

    fn plain(list: Option<Vec<BroadcastFrames>>) -> Vec<&'static [u8]> {
        list.unwrap()
            .into_iter()
            .map(|f| &*Box::leak(f.plain.to_vec().into_boxed_slice()))
            .collect()
    }

    #[test]
    fn a_connection_gets_what_its_watermark_has_not_of_its_groups_in_order() {
        // In a thread of its own: a fresh worker's state.
        std::thread::spawn(|| {
            let other = Stamp { origin: 7, seq: 0 };
            note_relayed(Stamp { seq: 1, ..other }, "room", &frames("o1"));
            let mine = stamp_own("room", &frames("m1"));
            assert_eq!(mine.seq, 1);
            note_relayed(Stamp { seq: 2, ..other }, "other room", &frames("x"));
            note_relayed(Stamp { seq: 3, ..other }, "room", &frames("o3"));
            stamp_own("room", &frames("m2"));
            // From another instance: not numbered, not kept.
            note_relayed(Stamp::NONE, "room", &frames("bus"));

            let mut seen = watermark();
            seen.sort();
            assert_eq!(seen, [(7, 3), (mine.origin, 2)]);
            // A connection that had o1 and m1 (and x, not its group).
            let had = [(7, 2), (mine.origin, 1)];
            let groups = ["room".to_string()];
            assert_eq!(plain(missed(&groups, &had)), [&b"o3"[..], b"m2"]);
            // One that had nothing of this worker's own.
            assert_eq!(plain(missed(&groups, &[(7, 3)])), [&b"m1"[..], b"m2"]);
            stop_keeping();
            assert!(missed(&groups, &had).is_none(), "nothing kept any more");
        })
        .join()
        .unwrap();
    }
}
