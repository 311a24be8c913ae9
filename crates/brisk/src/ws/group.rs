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
use tokio::sync::mpsc;

use super::deflate::{Agreement, MAX_WINDOW_BITS};
use super::delivery::{Delivery, ForStreams};
use super::group_key::GroupKey;
use super::Message;
use crate::http::sse;
use crate::ipc::{Broadcast, Stamp};
use crate::runtime::context::{self as worker, WorkerCtx};
use crate::stats::Stats;

/// A member of a group.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Member {
    /// A WebSocket connection, by its id.
    Socket(u64),
    /// An event stream, by its own number (see [`add_stream_with_id`]).
    Stream(u64),
}

#[derive(Default)]
struct Groups {
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

/// Whether socket `conn` is in any group or has a presence id.
pub(crate) fn is_member(conn: u64) -> bool {
    GROUPS.with(|g| {
        let g = g.borrow();
        g.joined.contains_key(&Member::Socket(conn)) || g.ids.contains_key(&conn)
    })
}

thread_local! {
    static GROUPS: RefCell<Groups> = RefCell::new(Groups::default());
    static ON_CHANGE: Cell<Option<fn(&GroupKey)>> = const { Cell::new(None) };
    /// Each event stream's queue, by its number.
    static STREAMS: RefCell<HashMap<u64, mpsc::Sender<Bytes>>> = RefCell::new(HashMap::new());
    static NEXT_STREAM: Cell<u64> = const { Cell::new(0) };
}

/// A new event stream, a member of each of `groups`: its number and the response that
/// carries it.
pub(crate) fn add_stream_with_id(
    groups: &[GroupKey],
    keep_alive: Option<std::time::Duration>,
) -> (u64, http::Response<sse::EventStream>) {
    let id = NEXT_STREAM.replace(NEXT_STREAM.get() + 1);
    let (tx, rx) = mpsc::channel(sse::QUEUE);
    STREAMS.with(|s| s.borrow_mut().insert(id, tx));
    for group in groups {
        join(Member::Stream(id), group, None);
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
pub(crate) fn stream_event_to(id: u64, event: &Bytes) -> bool {
    send_to_stream(id, Some(event))
}

/// Ends stream `id` (after the events queued before).
pub(crate) fn end_stream(id: u64) {
    send_to_stream(id, None);
}

/// Stream `id`'s response was dropped (its client left, or the response was never sent): it
/// leaves its groups now. Nothing when the worker's thread-locals are already gone.
fn release_stream(id: u64) {
    let removed = STREAMS.try_with(|s| s.borrow_mut().remove(&id).is_some());
    if removed == Ok(true) && GROUPS.try_with(|_| ()).is_ok() {
        leave_all(Member::Stream(id));
    }
}

/// Queues `event` on stream `id` (`None`: a close frame, which ends it); false when the
/// stream ended, its client gone or too far behind.
fn send_to_stream(id: u64, event: Option<&Bytes>) -> bool {
    let sent = STREAMS.with(|s| {
        let mut s = s.borrow_mut();
        let sent = match (s.get(&id), event) {
            (Some(tx), Some(e)) => tx.try_send(e.clone()).is_ok(),
            _ => false,
        };
        if !sent {
            s.remove(&id);
        }
        sent
    });
    if !sent {
        leave_all(Member::Stream(id));
    }
    sent
}

/// Has `f` called with the name of each group whose members, or their presence ids, change
/// in this worker (presence keeps its counts with it).
#[cfg(feature = "redis")]
pub(crate) fn on_change(f: fn(&GroupKey)) {
    ON_CHANGE.set(Some(f));
}

fn changed(group: &GroupKey) {
    if let Some(f) = ON_CHANGE.get() {
        f(group);
    }
}

/// Adds `member` (which agreed to `deflate`, if any) to `group`.
pub(crate) fn join(member: Member, group: &GroupKey, deflate: Option<Agreement>) {
    // The compressed frame suits members whose server window is the full one.
    let takes_deflated = deflate.is_some_and(|a| a.server_window_bits() == MAX_WINDOW_BITS);
    let joined_now = GROUPS.with(|g| {
        let mut g = g.borrow_mut();
        let set = g.members.entry(group.clone()).or_default();
        let first = set.is_empty();
        if !set.insert(member) {
            return false;
        }
        if first {
            if let Some(w) = worker::current() {
                w.group_membership(group.wire(), true);
            }
        }
        changed(group);
        let joined = g.joined.entry(member).or_insert_with(|| Joined {
            groups: Vec::new(),
            deflate: takes_deflated,
        });
        joined.groups.push(group.clone());
        true
    });
    if let (true, Member::Socket(conn)) = (joined_now, member) {
        catch_up(conn, group);
    }
}

/// Sends `conn`, joining `group` in its `on_open`, the broadcasts of `group` it missed since
/// its handshake was answered (`replay::OpenWindow`), before any that come after.
fn catch_up(conn: u64, group: &GroupKey) {
    match super::replay::catch_up(conn, group) {
        Some(missed) => {
            for delivery in &missed {
                deliver_to(conn, delivery);
            }
        }
        None => {
            if let Some(w) = worker::current() {
                Stats::add(&w.stats.broadcasts_dropped, 1);
            }
            tracing::warn!(
                conn,
                %group,
                "a WebSocket connection joining in its on_open misses the broadcasts of its \
                 group since its handshake: its on_open took over {} s to join, or over {} \
                 MiB of broadcasts came meanwhile",
                super::replay::MAX_WINDOW_AGE.as_secs(),
                super::replay::MAX_KEPT >> 20
            );
        }
    }
}

/// Takes `member` out of `group`.
pub(crate) fn leave(member: Member, group: &GroupKey) {
    GROUPS.with(|g| {
        let mut g = g.borrow_mut();
        if let Some(set) = g.members.get_mut(group) {
            if set.remove(&member) {
                changed(group);
            }
            if set.is_empty() {
                g.members.remove(group);
                emptied(group);
            }
        }
        if let Some(joined) = g.joined.get_mut(&member) {
            joined.groups.retain(|n| n != group);
            if joined.groups.is_empty() {
                g.joined.remove(&member);
            }
        }
    });
}

/// Takes `member` out of all its groups, and forgets its presence id.
pub(crate) fn leave_all(member: Member) {
    remove_member(member);
}

/// Takes socket `conn` out of all its groups, as [`leave_all`] does, and returns them and
/// its presence id (for the worker it moves to).
pub(crate) fn take_membership(conn: u64) -> (Vec<GroupKey>, Option<String>) {
    let (groups, id) = remove_member(Member::Socket(conn));
    (groups, id.map(|id| id.to_string()))
}

/// Takes `member` out of all its groups and forgets its presence id; returns both.
fn remove_member(member: Member) -> (Vec<GroupKey>, Option<Rc<str>>) {
    GROUPS.with(|g| {
        let mut g = g.borrow_mut();
        let id = match member {
            Member::Socket(conn) => g.ids.remove(&conn),
            Member::Stream(_) => None,
        };
        let groups = (g.joined.remove(&member).map(|j| j.groups)).unwrap_or_default();
        for name in &groups {
            if let Some(set) = g.members.get_mut(name) {
                if set.remove(&member) {
                    changed(name);
                }
                if set.is_empty() {
                    g.members.remove(name);
                    emptied(name);
                }
            }
        }
        (groups, id)
    })
}

/// Gives socket `conn` the presence id `id` in every group it is or will be in.
pub(crate) fn set_presence_id(conn: u64, id: &str) {
    GROUPS.with(|g| {
        let mut g = g.borrow_mut();
        g.ids.insert(conn, Rc::from(id.replace('\n', " ")));
        let member = Member::Socket(conn);
        for name in g.joined.get(&member).map_or(&[][..], |j| &j.groups[..]) {
            changed(name);
        }
    });
}

/// The presence ids of `group`'s members in this worker (each once, sorted).
#[cfg(feature = "redis")]
pub(crate) fn local_ids(group: &GroupKey) -> Vec<String> {
    GROUPS.with(|g| {
        let g = g.borrow();
        let mut ids: Vec<String> = (g.members.get(group).into_iter().flatten())
            .filter_map(|member| match member {
                Member::Socket(conn) => g.ids.get(conn).map(|id| id.to_string()),
                Member::Stream(_) => None,
            })
            .collect();
        ids.sort_unstable();
        ids.dedup();
        ids
    })
}

/// The groups of this worker in `space` whose names start with `prefix`, by name with their
/// members, sorted.
#[cfg(feature = "redis")]
pub(crate) fn local_groups(space: super::group_key::Space, prefix: &str) -> Vec<(String, u64)> {
    GROUPS.with(|g| {
        let mut groups: Vec<(String, u64)> = (g.borrow().members.iter())
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
    })
}

/// The last member of `group` in this worker left.
fn emptied(group: &GroupKey) {
    if let Some(w) = worker::current() {
        w.group_membership(group.wire(), false);
    }
}

/// Members of `group` in this worker.
pub(crate) fn members_here(group: &GroupKey) -> usize {
    GROUPS.with(|g| g.borrow().members.get(group).map_or(0, HashSet::len))
}

/// Members of the app's group `group` in this worker.
pub fn local_members(group: &str) -> usize {
    members_here(&GroupKey::app(group))
}

/// Writes a broadcast to every local member of `group` (the compressed frame to sockets that
/// take it, an event to event streams); returns how many members took theirs. `group` is a
/// key's wire form (a topic the master relayed), or a key.
pub(crate) fn deliver_local(group: &str, delivery: &Delivery) -> usize {
    let members: Vec<(Member, bool)> = GROUPS.with(|g| {
        let g = g.borrow();
        let takes_deflated = |m: &Member| g.joined.get(m).is_some_and(|j| j.deflate);
        g.members
            .get(group)
            .map(|s| s.iter().map(|m| (*m, takes_deflated(m))).collect())
            .unwrap_or_default()
    });
    let Some(w) = worker::current() else {
        return 0;
    };
    let delivered = members
        .into_iter()
        .filter(|&(member, deflate)| match member {
            Member::Stream(id) => match delivery.for_streams() {
                ForStreams::Data(event) => send_to_stream(id, Some(event)),
                ForStreams::Close(last) => {
                    let sent = send_to_stream(id, Some(last));
                    end_stream(id);
                    sent
                }
                ForStreams::Nothing => false,
            },
            Member::Socket(id) => to_socket(&w, id, deflate, delivery),
        })
        .count();
    Stats::add(&w.stats.broadcast_deliveries, delivered as u64);
    delivered
}

/// Writes a broadcast to member socket `id` alone (a connection handed over, or joining in
/// its `on_open`, which missed it); false if it could not take it.
pub(crate) fn deliver_to(id: u64, delivery: &Delivery) -> bool {
    let member = Member::Socket(id);
    let deflate = GROUPS.with(|g| g.borrow().joined.get(&member).is_some_and(|j| j.deflate));
    worker::current().is_some_and(|w| to_socket(&w, id, deflate, delivery))
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
/// its members, whatever their number.
///
/// ```no_run
/// # async fn f(ws: brisk::ws::WsConnection) {
/// ws.join("lobby");
/// brisk::ws::broadcast("lobby", brisk::ws::Message::text("hello, everyone"));
/// # }
/// ```
pub fn broadcast(group: &str, msg: Message) -> usize {
    broadcast_to(&GroupKey::app(group), msg)
}

/// Sends `msg` to every member of `group`, as [`broadcast`] does.
pub(crate) fn broadcast_to(group: &GroupKey, msg: Message) -> usize {
    broadcast_delivery(group, Rc::new(Delivery::of_message(msg)))
}

/// Hands `delivery` to the members of `group` here and, through the master, everywhere else.
pub(crate) fn broadcast_delivery(group: &GroupKey, delivery: Rc<Delivery>) -> usize {
    let stamp = super::replay::stamp_own(group, &delivery);
    let delivered = deliver_local(group.wire(), &delivery);
    if let Some(w) = worker::current() {
        w.relay_broadcast(group.wire(), stamp, delivery.broadcast().clone());
    }
    delivered
}

/// Delivers a broadcast another worker (or instance) made to `topic` to this worker's members
/// of that group, noted first for the connections still to come.
pub(crate) fn deliver_relayed(topic: &str, stamp: Stamp, broadcast: Broadcast) {
    let group = GroupKey::from_wire(topic);
    let delivery = Rc::new(Delivery::new(broadcast));
    super::replay::note_relayed(stamp, &group, &delivery);
    deliver_local(topic, &delivery);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_event_stream_is_a_member_until_its_response_is_dropped() {
        let groups = [GroupKey::app("room:a"), GroupKey::key("user:ada")];
        let first = add_stream_with_id(&groups, None).1;
        let second = add_stream_with_id(&groups[..1], None).1;
        assert_eq!(local_members("room:a"), 2);
        assert_eq!(members_here(&GroupKey::key("user:ada")), 1);
        drop(first);
        assert_eq!(local_members("room:a"), 1);
        assert_eq!(members_here(&GroupKey::key("user:ada")), 0);
        assert_eq!(STREAMS.with(|s| s.borrow().len()), 1);
        drop(second);
        assert_eq!(local_members("room:a"), 0);
        assert_eq!(STREAMS.with(|s| s.borrow().len()), 0);
    }
}
