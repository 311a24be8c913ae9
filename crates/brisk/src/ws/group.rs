//! Named groups of WebSocket connections and broadcast.
//!
//! A group lives in each worker: it holds the ids of that worker's members. A broadcast
//! goes to the master as the message it is ([`Broadcast`](crate::ipc::Broadcast)), which
//! hands it to every other worker for their members; each worker encodes the frame once and
//! writes the same bytes to every member it holds, and compresses it once (no context
//! takeover, full window) if members that negotiated permessage-deflate are among them: at
//! most two encodings per worker, whatever the number of members ([`Delivery`]).
//!
//! Groups are named by [`GroupKey`]s: the app's groups, its keys and the channel protocol's
//! groups are apart, whatever names the app or its clients choose.
//!
//! Event streams (SSE responses of `brisk::ws::event_stream`) are members too
//! ([`Member::Stream`]): a text message reaches them as one `data:` event, encoded once per
//! broadcast; a close frame ends them; binary messages pass them by.

use std::cell::{Cell, RefCell};
use std::collections::{HashMap, HashSet};
use std::rc::Rc;

use bytes::Bytes;

use super::deflate::{Agreement, MAX_WINDOW_BITS};
use super::delivery::{Delivery, ForStreams};
use super::group_key::GroupKey;
use super::replay::{self, Replay};
use super::Message;
use crate::http::sse;
use crate::ipc::{Broadcast, Stamp};
use crate::runtime::context::{self as worker, running, WorkerCtx};
use crate::stats::Stats;

/// What is told of each group whose members change.
type OnChange = Rc<dyn Fn(&GroupKey)>;

/// A member of a group.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Member {
    /// A WebSocket connection, by its id.
    Socket(u64),
    /// An event stream, by its own number (see [`add_stream_with_id`]).
    Stream(u64),
}

/// A worker's groups, one of its context's parts: who is a member of what, the presence ids
/// of its sockets, and its event streams' queues.
#[derive(Default)]
pub(crate) struct Groups {
    registry: RefCell<Registry>,
    /// Told of each group whose members, or their presence ids, change (presence keeps its
    /// counts with it).
    on_change: RefCell<Option<OnChange>>,
    /// Each event stream's queue, by its number.
    streams: RefCell<HashMap<u64, sse::QueueTx>>,
    next_stream: Cell<u64>,
    /// The timer that ends a stream when its token expires, by the stream's number: deleted
    /// when the stream ends first, so that a client reconnecting leaves none behind.
    #[cfg(feature = "channels")]
    expiries: RefCell<HashMap<u64, crate::timer::TimerId>>,
}

#[derive(Default)]
struct Registry {
    members: HashMap<GroupKey, HashSet<Member>>,
    /// Each member that joined any group.
    joined: HashMap<Member, Joined>,
    /// The presence ids of sockets that have one.
    ids: HashMap<u64, Rc<str>>,
}

/// A member that joined groups.
struct Joined {
    /// Its groups, to leave them all on close.
    groups: Vec<GroupKey>,
    /// It takes the compressed frame of a broadcast.
    deflate: bool,
}

impl Groups {
    fn changed(&self, group: &GroupKey) {
        let f = self.on_change.borrow().clone();
        if let Some(f) = f {
            f(group);
        }
    }
}

/// Whether socket `conn` is in any group or has a presence id.
pub(crate) fn is_member(w: &WorkerCtx, conn: u64) -> bool {
    let groups = w.part::<Groups>();
    let r = groups.registry.borrow();
    r.joined.contains_key(&Member::Socket(conn)) || r.ids.contains_key(&conn)
}

/// A new event stream, a member of each of `groups`: its number and the response that
/// carries it.
pub(crate) fn add_stream_with_id(
    w: &WorkerCtx,
    groups: &[GroupKey],
    keep_alive: Option<std::time::Duration>,
) -> (u64, http::Response<sse::EventStream>) {
    let part = w.part::<Groups>();
    let id = part.next_stream.replace(part.next_stream.get() + 1);
    let (tx, rx) = sse::queue();
    part.streams.borrow_mut().insert(id, tx);
    for group in groups {
        join(w, Member::Stream(id), group, None);
    }
    let release = sse::Release {
        id,
        release: release_stream,
        owner: std::thread::current().id(),
    };
    (id, sse::stream_response(rx, keep_alive, Some(release)))
}

/// Queues `event` on stream `id`; false when the stream has ended.
#[cfg(feature = "channels")]
pub(crate) fn stream_event_to(w: &WorkerCtx, id: u64, event: &Bytes) -> bool {
    send_to_stream(w, id, Some(event))
}

/// Ends stream `id` (after the events queued before).
pub(crate) fn end_stream(w: &WorkerCtx, id: u64) {
    send_to_stream(w, id, None);
}

/// Stream `id`'s response was dropped (its client left, or the response was never sent) on
/// the thread that made it: it leaves its groups now. Nothing once the worker is gone (its
/// groups went with it).
fn release_stream(id: u64) {
    let Some(w) = worker::current() else {
        return;
    };
    let removed = w
        .part::<Groups>()
        .streams
        .borrow_mut()
        .remove(&id)
        .is_some();
    if removed {
        stream_ended(&w, id);
    }
}

/// Stream `id` has ended: it leaves its groups, and its expiry timer goes.
fn stream_ended(w: &WorkerCtx, id: u64) {
    #[cfg(feature = "channels")]
    if let Some(timer) = take_expiry(w, id) {
        w.timers.del(timer);
    }
    leave_all(w, Member::Stream(id));
}

/// Records `timer` as the one that ends stream `id` at its token's expiry.
#[cfg(feature = "channels")]
pub(crate) fn set_expiry(w: &WorkerCtx, id: u64, timer: crate::timer::TimerId) {
    let part = w.part::<Groups>();
    if part.streams.borrow().contains_key(&id) {
        part.expiries.borrow_mut().insert(id, timer);
    } else {
        w.timers.del(timer);
    }
}

/// Forgets stream `id`'s expiry timer (it is firing, or the stream ended), answering it.
#[cfg(feature = "channels")]
pub(crate) fn take_expiry(w: &WorkerCtx, id: u64) -> Option<crate::timer::TimerId> {
    w.part::<Groups>().expiries.borrow_mut().remove(&id)
}

/// Queues `event` on stream `id` (`None`: a close, which ends it); false when the stream
/// ended, its client gone or too far behind.
fn send_to_stream(w: &WorkerCtx, id: u64, event: Option<&Bytes>) -> bool {
    let part = w.part::<Groups>();
    let sent = {
        let mut streams = part.streams.borrow_mut();
        let sent = match (streams.get(&id), event) {
            (Some(tx), Some(e)) => tx.try_send(e.clone()),
            _ => false,
        };
        if !sent {
            streams.remove(&id);
        }
        sent
    };
    if !sent {
        stream_ended(w, id);
    }
    sent
}

/// Has `f` called with each group whose members, or their presence ids, change in this
/// worker (presence keeps its counts with it).
#[cfg(feature = "redis")]
pub(crate) fn on_change(w: &WorkerCtx, f: OnChange) {
    *w.part::<Groups>().on_change.borrow_mut() = Some(f);
}

/// Adds `member` (which agreed to `deflate`, if any) to `group`.
pub(crate) fn join(w: &WorkerCtx, member: Member, group: &GroupKey, deflate: Option<Agreement>) {
    // The compressed frame suits members whose server window is the full one.
    let takes_deflated = deflate.is_some_and(|a| a.server_window_bits() == MAX_WINDOW_BITS);
    let part = w.part::<Groups>();
    let joined_now = {
        let mut r = part.registry.borrow_mut();
        let set = r.members.entry(group.clone()).or_default();
        let first = set.is_empty();
        if set.insert(member) {
            if first {
                w.group_membership(group.wire(), true);
            }
            let joined = r.joined.entry(member).or_insert_with(|| Joined {
                groups: Vec::new(),
                deflate: takes_deflated,
            });
            joined.groups.push(group.clone());
            true
        } else {
            false
        }
    };
    if joined_now {
        part.changed(group);
    }
    if let (true, Member::Socket(conn)) = (joined_now, member) {
        catch_up(w, conn, group);
    }
}

/// Sends `conn`, joining `group` in its `on_open`, the broadcasts of `group` it missed since
/// its handshake was answered (`replay::OpenWindow`), before any that come after.
fn catch_up(w: &WorkerCtx, conn: u64, group: &GroupKey) {
    match w.part::<Replay>().catch_up(conn, group) {
        Some(missed) => {
            for delivery in &missed {
                deliver_to(w, conn, delivery);
            }
        }
        None => {
            Stats::add(&w.stats.broadcasts_dropped, 1);
            tracing::warn!(
                conn,
                %group,
                "a WebSocket connection joining in its on_open misses the broadcasts of its \
                 group since its handshake: its on_open took over {} s to join, or over {} \
                 MiB of broadcasts came meanwhile",
                replay::MAX_WINDOW_AGE.as_secs(),
                replay::MAX_KEPT >> 20
            );
        }
    }
}

/// Takes `member` out of `group`.
pub(crate) fn leave(w: &WorkerCtx, member: Member, group: &GroupKey) {
    let part = w.part::<Groups>();
    let (left, emptied) = {
        let mut r = part.registry.borrow_mut();
        let (mut left, mut emptied) = (false, false);
        if let Some(set) = r.members.get_mut(group) {
            left = set.remove(&member);
            if set.is_empty() {
                r.members.remove(group);
                emptied = true;
            }
        }
        if let Some(joined) = r.joined.get_mut(&member) {
            joined.groups.retain(|n| n != group);
            if joined.groups.is_empty() {
                r.joined.remove(&member);
            }
        }
        (left, emptied)
    };
    if left {
        part.changed(group);
    }
    if emptied {
        w.group_membership(group.wire(), false);
    }
}

/// Takes `member` out of all its groups, and forgets its presence id.
pub(crate) fn leave_all(w: &WorkerCtx, member: Member) {
    remove_member(w, member);
}

/// Takes socket `conn` out of all its groups, as [`leave_all`] does, and returns them and
/// its presence id (for the worker it moves to).
pub(crate) fn take_membership(w: &WorkerCtx, conn: u64) -> (Vec<GroupKey>, Option<String>) {
    let (groups, id) = remove_member(w, Member::Socket(conn));
    (groups, id.map(|id| id.to_string()))
}

/// Takes `member` out of all its groups and forgets its presence id; returns both.
fn remove_member(w: &WorkerCtx, member: Member) -> (Vec<GroupKey>, Option<Rc<str>>) {
    let part = w.part::<Groups>();
    let (groups, id, emptied) = {
        let mut r = part.registry.borrow_mut();
        let id = match member {
            Member::Socket(conn) => r.ids.remove(&conn),
            Member::Stream(_) => None,
        };
        let groups = (r.joined.remove(&member).map(|j| j.groups)).unwrap_or_default();
        let mut emptied = Vec::new();
        for name in &groups {
            if let Some(set) = r.members.get_mut(name) {
                set.remove(&member);
                if set.is_empty() {
                    r.members.remove(name);
                    emptied.push(name.clone());
                }
            }
        }
        (groups, id, emptied)
    };
    for name in &groups {
        part.changed(name);
    }
    for name in &emptied {
        w.group_membership(name.wire(), false);
    }
    (groups, id)
}

/// Gives socket `conn` the presence id `id` in every group it is or will be in.
pub(crate) fn set_presence_id(w: &WorkerCtx, conn: u64, id: &str) {
    let part = w.part::<Groups>();
    let groups = {
        let mut r = part.registry.borrow_mut();
        r.ids.insert(conn, Rc::from(id.replace('\n', " ")));
        let member = Member::Socket(conn);
        (r.joined.get(&member)).map_or_else(Vec::new, |j| j.groups.clone())
    };
    for name in &groups {
        part.changed(name);
    }
}

/// The presence ids of `group`'s members in this worker (each once, sorted).
#[cfg(feature = "redis")]
pub(crate) fn local_ids(w: &WorkerCtx, group: &GroupKey) -> Vec<String> {
    let part = w.part::<Groups>();
    let r = part.registry.borrow();
    let mut ids: Vec<String> = (r.members.get(group).into_iter().flatten())
        .filter_map(|member| match member {
            Member::Socket(conn) => r.ids.get(conn).map(|id| id.to_string()),
            Member::Stream(_) => None,
        })
        .collect();
    ids.sort_unstable();
    ids.dedup();
    ids
}

/// The groups of this worker in `space` whose names start with `prefix`, by name with their
/// members, sorted.
#[cfg(feature = "redis")]
pub(crate) fn local_groups(
    w: &WorkerCtx,
    space: super::group_key::Space,
    prefix: &str,
) -> Vec<(String, u64)> {
    let part = w.part::<Groups>();
    let r = part.registry.borrow();
    let mut groups: Vec<(String, u64)> = (r.members.iter())
        .filter(|(_, set)| !set.is_empty())
        .filter_map(|(key, set)| match key.parts() {
            (s, name) if s == space && name.starts_with(prefix) => {
                Some((name.to_string(), set.len() as u64))
            }
            _ => None,
        })
        .collect();
    groups.sort_unstable();
    groups
}

/// Members of `group` in this worker.
pub(crate) fn members_here(w: &WorkerCtx, group: &GroupKey) -> usize {
    let part = w.part::<Groups>();
    let r = part.registry.borrow();
    r.members.get(group).map_or(0, HashSet::len)
}

/// Members of the app's group `group` in this worker. Panics off a worker, saying so.
pub fn local_members(group: &str) -> usize {
    let w = running("brisk::ws::local_members");
    members_here(&w, &GroupKey::app(group))
}

/// Writes a broadcast to every local member of `group` (the compressed frame to sockets that
/// take it, an event to event streams); returns how many members took theirs. `group` is a
/// key's wire form (a topic the master relayed), or a key.
pub(crate) fn deliver_local(w: &WorkerCtx, group: &str, delivery: &Delivery) -> usize {
    let members: Vec<(Member, bool)> = {
        let part = w.part::<Groups>();
        let r = part.registry.borrow();
        let takes_deflated = |m: &Member| r.joined.get(m).is_some_and(|j| j.deflate);
        (r.members.get(group))
            .map(|s| s.iter().map(|m| (*m, takes_deflated(m))).collect())
            .unwrap_or_default()
    };
    let delivered = members
        .into_iter()
        .filter(|&(member, deflate)| match member {
            Member::Stream(id) => match delivery.for_streams() {
                ForStreams::Data(event) => send_to_stream(w, id, Some(event)),
                ForStreams::Close(last) => {
                    let sent = send_to_stream(w, id, Some(last));
                    end_stream(w, id);
                    sent
                }
                ForStreams::Nothing => false,
            },
            Member::Socket(id) => to_socket(w, id, deflate, delivery),
        })
        .count();
    Stats::add(&w.stats.broadcast_deliveries, delivered as u64);
    delivered
}

/// Writes a broadcast to member socket `id` alone (a connection handed over, or joining in
/// its `on_open`, which missed it); false if it could not take it.
pub(crate) fn deliver_to(w: &WorkerCtx, id: u64, delivery: &Delivery) -> bool {
    let member = Member::Socket(id);
    let deflate = {
        let part = w.part::<Groups>();
        let r = part.registry.borrow();
        r.joined.get(&member).is_some_and(|j| j.deflate)
    };
    to_socket(w, id, deflate, delivery)
}

/// Writes one member socket's frame of a broadcast: the compressed one if it takes it, and a
/// close frame as its last.
fn to_socket(w: &WorkerCtx, id: u64, deflate: bool, delivery: &Delivery) -> bool {
    let frame = delivery.frame(deflate);
    match delivery.is_close() {
        // A close (`close_where`): the member's last frame.
        true => w.send_last_to(id, frame),
        false => w.send_raw_to(id, frame),
    }
}

/// Sends `msg` to every member of `group`, in this worker and in all others (through the
/// master). Returns how many members of this worker took it. Each worker encodes the frame
/// once, and once more compressed if members that negotiated permessage-deflate are among
/// its members, whatever their number. Panics off a worker, saying so.
///
/// ```no_run
/// # async fn f(ws: brisk::ws::WsConnection) {
/// ws.join("lobby");
/// brisk::ws::broadcast("lobby", brisk::ws::Message::text("hello, everyone"));
/// # }
/// ```
pub fn broadcast(group: &str, msg: Message) -> usize {
    let w = running("brisk::ws::broadcast");
    broadcast_to(&w, &GroupKey::app(group), msg)
}

/// Sends `msg` to every member of `group`, as [`broadcast`] does.
pub(crate) fn broadcast_to(w: &WorkerCtx, group: &GroupKey, msg: Message) -> usize {
    broadcast_delivery(w, group, Rc::new(Delivery::of_message(msg)))
}

/// Hands `delivery` to the members of `group` here and, through the master, everywhere else.
pub(crate) fn broadcast_delivery(w: &WorkerCtx, group: &GroupKey, delivery: Rc<Delivery>) -> usize {
    let stamp = w.part::<Replay>().stamp_own(group, &delivery);
    let delivered = deliver_local(w, group.wire(), &delivery);
    w.relay_broadcast(group.wire(), stamp, delivery.broadcast().clone());
    delivered
}

/// Delivers a broadcast another worker (or instance) made to `topic` to this worker's members
/// of that group, noted first for the connections still to come.
pub(crate) fn deliver_relayed(w: &WorkerCtx, topic: &str, stamp: Stamp, broadcast: Broadcast) {
    let group = GroupKey::from_wire(topic);
    let delivery = Rc::new(Delivery::new(broadcast));
    w.part::<Replay>().note_relayed(stamp, &group, &delivery);
    deliver_local(w, topic, &delivery);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_event_stream_is_a_member_until_its_response_is_dropped() {
        let w = crate::runtime::context::test_worker();
        let groups = [GroupKey::app("room:a"), GroupKey::key("user:ada")];
        let first = add_stream_with_id(&w, &groups, None).1;
        let second = add_stream_with_id(&w, &groups[..1], None).1;
        assert_eq!(local_members("room:a"), 2);
        assert_eq!(members_here(&w, &GroupKey::key("user:ada")), 1);
        drop(first);
        assert_eq!(local_members("room:a"), 1);
        assert_eq!(members_here(&w, &GroupKey::key("user:ada")), 0);
        assert_eq!(w.part::<Groups>().streams.borrow().len(), 1);
        drop(second);
        assert_eq!(local_members("room:a"), 0);
        assert_eq!(w.part::<Groups>().streams.borrow().len(), 0);
    }

    #[test]
    fn groups_are_the_workers_not_the_threads() {
        let first = crate::runtime::context::test_worker();
        let _stream = add_stream_with_id(&first, &[GroupKey::app("room")], None).1;
        assert_eq!(local_members("room"), 1);
        // Another worker on the same thread has groups of its own.
        let second = crate::runtime::context::test_worker();
        assert_eq!(local_members("room"), 0);
        assert_eq!(members_here(&first, &GroupKey::app("room")), 1);
        drop(second);
    }

    #[test]
    #[should_panic(expected = "brisk::ws::broadcast was called outside a Brisk worker")]
    fn a_broadcast_off_a_worker_says_so() {
        broadcast("room", Message::text("to nobody"));
    }
}
