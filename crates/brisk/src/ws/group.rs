//! Named groups of WebSocket connections and broadcast.
//!
//! A group lives in each worker: it holds the ids of that worker's members. A broadcast
//! encodes the frame once, writes the same bytes to every local member, and sends them to the
//! master, which hands them to every other worker for their members. When permessage-deflate
//! is on, the message is also compressed once (no context takeover, full window) for the
//! members that negotiated it: at most two encodings, whatever the number of members.
//!
//! Event streams (SSE responses of `brisk::ws::event_stream`) are members too, with ids of their
//! own ([`STREAM`] set): a text message reaches them as one `data:` event, encoded once per
//! broadcast; a close frame ends them; binary messages pass them by.

use std::cell::{Cell, RefCell};
use std::collections::{HashMap, HashSet};
use std::rc::Rc;

use bytes::{Bytes, BytesMut};
use tokio::sync::mpsc;

use super::codec::{encode_message, server_frame_payload};
use super::deflate::{self, Agreement, MAX_WINDOW_BITS};
use super::Message;
use crate::http::sse;
use crate::ipc::BroadcastFrames;
use crate::runtime::context::{self as worker, WorkerCtx};
use crate::stats::Stats;

#[derive(Default)]
struct Groups {
    members: HashMap<Rc<str>, HashSet<u64>>,
    /// Each connection that joined any group.
    joined: HashMap<u64, Joined>,
    /// The presence ids of connections that have one.
    ids: HashMap<u64, Rc<str>>,
}

/// A connection that joined groups.
struct Joined {
    /// Its groups, to leave them all on close.
    groups: Vec<Rc<str>>,
    /// It takes the compressed frame of a broadcast.
    deflate: bool,
}

/// Whether connection `conn` is in any group or has a presence id.
pub(crate) fn is_member(conn: u64) -> bool {
    GROUPS.with(|g| {
        let g = g.borrow();
        g.joined.contains_key(&conn) || g.ids.contains_key(&conn)
    })
}

/// The group that holds the sockets (and event streams) tagged with `key`.
pub(crate) fn key_group(key: &str) -> String {
    format!("brisk.key:{key}")
}

/// The bit that marks an event stream's member id (connection ids count up from 0 and never
/// reach it).
const STREAM: u64 = 1 << 63;

thread_local! {
    static GROUPS: RefCell<Groups> = RefCell::new(Groups::default());
    static ON_CHANGE: Cell<Option<fn(&str)>> = const { Cell::new(None) };
    /// Each event stream's queue, by its member id.
    static STREAMS: RefCell<HashMap<u64, mpsc::Sender<Bytes>>> = RefCell::new(HashMap::new());
    static NEXT_STREAM: Cell<u64> = const { Cell::new(0) };
}

/// A new event stream, a member of each of `groups`: its member id and the response that
/// carries it.
pub(crate) fn add_stream_with_id(
    groups: &[String],
    keep_alive: Option<std::time::Duration>,
) -> (u64, http::Response<sse::EventStream>) {
    let id = STREAM | NEXT_STREAM.replace(NEXT_STREAM.get() + 1);
    let (tx, rx) = mpsc::channel(sse::QUEUE);
    STREAMS.with(|s| s.borrow_mut().insert(id, tx));
    for group in groups {
        join(id, group, None);
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
        leave_all(id);
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
        leave_all(id);
    }
    sent
}

/// What a broadcast's frame is to event streams.
enum ForStreams {
    /// A text message: one `data:` event.
    Data(Bytes),
    /// A close frame: the stream's last event, `event: close` with
    /// `{"code":N,"reason":"…"}`, then its end.
    Close(Bytes),
    /// Nothing at all (a binary message).
    Nothing,
}

fn stream_event(frames: &BroadcastFrames) -> ForStreams {
    match server_frame_payload(&frames.plain) {
        Some((0x1, text)) => {
            ForStreams::Data(sse::Event::new(String::from_utf8_lossy(text)).encode())
        }
        Some((0x8, payload)) => ForStreams::Close(close_event(payload)),
        _ => ForStreams::Nothing,
    }
}

/// The `event: close` an event stream ends with, from a close frame's payload (code 1005,
/// "no status", without one).
pub(crate) fn close_event(payload: &[u8]) -> Bytes {
    let (code, reason) = match payload {
        [hi, lo, reason @ ..] => (u16::from_be_bytes([*hi, *lo]), reason),
        _ => (1005, &[][..]),
    };
    let data = serde_json::json!({ "code": code, "reason": String::from_utf8_lossy(reason) });
    sse::Event::new(data.to_string()).event("close").encode()
}

/// Has `f` called with the name of each group whose members, or their presence ids, change
/// in this worker (presence keeps its counts with it).
#[cfg(feature = "redis")]
pub(crate) fn on_change(f: fn(&str)) {
    ON_CHANGE.set(Some(f));
}

fn changed(group: &str) {
    if let Some(f) = ON_CHANGE.get() {
        f(group);
    }
}

/// Adds `conn` (which agreed to `deflate`, if any) to `group`.
pub(crate) fn join(conn: u64, group: &str, deflate: Option<Agreement>) {
    // The compressed frame suits members whose server window is the full one.
    let takes_deflated = deflate.is_some_and(|a| a.server_window_bits() == MAX_WINDOW_BITS);
    let joined_now = GROUPS.with(|g| {
        let mut g = g.borrow_mut();
        let name: Rc<str> = match g.members.get_key_value(group) {
            Some((k, _)) => k.clone(),
            None => Rc::from(group),
        };
        let set = g.members.entry(name.clone()).or_default();
        let first = set.is_empty();
        if !set.insert(conn) {
            return false;
        }
        if first {
            if let Some(w) = worker::current() {
                w.group_membership(group, true);
            }
        }
        changed(group);
        let joined = g.joined.entry(conn).or_insert_with(|| Joined {
            groups: Vec::new(),
            deflate: takes_deflated,
        });
        joined.groups.push(name);
        true
    });
    if joined_now {
        catch_up(conn, group);
    }
}

/// Sends `conn`, joining `group` in its `on_open`, the broadcasts of `group` it missed since
/// its handshake was answered (`replay::OpenWindow`), before any that come after.
fn catch_up(conn: u64, group: &str) {
    match super::replay::catch_up(conn, group) {
        Some(missed) => {
            for frames in &missed {
                deliver_to(conn, frames);
            }
        }
        None => {
            if let Some(w) = worker::current() {
                Stats::add(&w.stats.broadcasts_dropped, 1);
            }
            tracing::warn!(
                conn,
                group,
                "a WebSocket connection joining in its on_open misses the broadcasts of its \
                 group since its handshake: its on_open took over {} s to join, or over {} \
                 MiB of broadcasts came meanwhile",
                super::replay::MAX_WINDOW_AGE.as_secs(),
                super::replay::MAX_KEPT >> 20
            );
        }
    }
}

pub(crate) fn leave(conn: u64, group: &str) {
    GROUPS.with(|g| {
        let mut g = g.borrow_mut();
        if let Some(set) = g.members.get_mut(group) {
            if set.remove(&conn) {
                changed(group);
            }
            if set.is_empty() {
                g.members.remove(group);
                emptied(group);
            }
        }
        if let Some(joined) = g.joined.get_mut(&conn) {
            joined.groups.retain(|n| &**n != group);
            if joined.groups.is_empty() {
                g.joined.remove(&conn);
            }
        }
    });
}

pub(crate) fn leave_all(conn: u64) {
    remove_member(conn);
}

/// Takes `conn` out of all its groups, as [`leave_all`] does, and returns them and its
/// presence id (for the worker it moves to).
pub(crate) fn take_membership(conn: u64) -> (Vec<String>, Option<String>) {
    let (groups, id) = remove_member(conn);
    let names = groups.iter().map(|n| n.to_string()).collect();
    (names, id.map(|id| id.to_string()))
}

/// Takes `conn` out of all its groups and forgets its presence id; returns both.
fn remove_member(conn: u64) -> (Vec<Rc<str>>, Option<Rc<str>>) {
    GROUPS.with(|g| {
        let mut g = g.borrow_mut();
        let id = g.ids.remove(&conn);
        let groups = g.joined.remove(&conn).map(|j| j.groups).unwrap_or_default();
        for name in &groups {
            if let Some(set) = g.members.get_mut(name) {
                if set.remove(&conn) {
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

/// Gives `conn` the presence id `id` in every group it is or will be in.
pub(crate) fn set_presence_id(conn: u64, id: &str) {
    GROUPS.with(|g| {
        let mut g = g.borrow_mut();
        g.ids.insert(conn, Rc::from(id.replace('\n', " ")));
        for name in g.joined.get(&conn).map_or(&[][..], |j| &j.groups[..]) {
            changed(name);
        }
    });
}

/// The presence ids of `group`'s members in this worker (each once, sorted).
#[cfg(feature = "redis")]
pub(crate) fn local_ids(group: &str) -> Vec<String> {
    GROUPS.with(|g| {
        let g = g.borrow();
        let mut ids: Vec<String> = (g.members.get(group).into_iter().flatten())
            .filter_map(|conn| g.ids.get(conn).map(|id| id.to_string()))
            .collect();
        ids.sort_unstable();
        ids.dedup();
        ids
    })
}

/// The groups of this worker whose names start with `prefix`, with their members, sorted.
#[cfg(feature = "redis")]
pub(crate) fn local_groups(prefix: &str) -> Vec<(String, u64)> {
    GROUPS.with(|g| {
        let mut groups: Vec<(String, u64)> = (g.borrow().members.iter())
            .filter(|(name, set)| name.starts_with(prefix) && !set.is_empty())
            .map(|(name, set)| (name.to_string(), set.len() as u64))
            .collect();
        groups.sort_unstable();
        groups
    })
}

/// The last member of `group` in this worker left.
fn emptied(group: &str) {
    if let Some(w) = worker::current() {
        w.group_membership(group, false);
    }
}

/// Members of `group` in this worker.
pub fn local_members(group: &str) -> usize {
    GROUPS.with(|g| g.borrow().members.get(group).map_or(0, HashSet::len))
}

/// The first byte of a final close frame.
pub(crate) const CLOSE_FRAME: u8 = 0x88;

/// Encodes `msg` as a frame once, and once more compressed if any endpoint offers
/// permessage-deflate.
fn frames_of(msg: &Message) -> BroadcastFrames {
    let opcode = match msg {
        Message::Text(_) => 0x1,
        Message::Binary(_) => 0x2,
    };
    let encode = |bits| {
        let mut buf = BytesMut::new();
        encode_message(opcode, msg.as_bytes(), bits, &mut buf);
        buf.freeze()
    };
    BroadcastFrames {
        plain: encode(None),
        deflated: deflate::enabled().then(|| encode(Some(MAX_WINDOW_BITS))),
    }
}

/// Writes a broadcast's frames to every local member of `group` (the compressed one to those
/// that take it); returns how many members took theirs.
pub(crate) fn deliver_local(group: &str, frames: &BroadcastFrames) -> usize {
    let members: Vec<(u64, bool)> = GROUPS.with(|g| {
        let g = g.borrow();
        let takes_deflated = |id: &u64| g.joined.get(id).is_some_and(|j| j.deflate);
        g.members
            .get(group)
            .map(|s| s.iter().map(|id| (*id, takes_deflated(id))).collect())
            .unwrap_or_default()
    });
    let Some(w) = worker::current() else {
        return 0;
    };
    let closing = frames.plain.first() == Some(&CLOSE_FRAME);
    // Encoded for event streams when the first one is met.
    let mut for_streams: Option<ForStreams> = None;
    let delivered = members
        .into_iter()
        .filter(|&(id, deflate)| {
            if id & STREAM != 0 {
                return match for_streams.get_or_insert_with(|| stream_event(frames)) {
                    ForStreams::Data(event) => send_to_stream(id, Some(event)),
                    ForStreams::Close(last) => {
                        let sent = send_to_stream(id, Some(last));
                        end_stream(id);
                        sent
                    }
                    ForStreams::Nothing => false,
                };
            }
            to_socket(&w, id, deflate, frames, closing)
        })
        .count();
    Stats::add(&w.stats.broadcast_deliveries, delivered as u64);
    delivered
}

/// Writes a broadcast's frames to member socket `id` alone (a connection handed over, which
/// missed it); false if it could not take them.
pub(crate) fn deliver_to(id: u64, frames: &BroadcastFrames) -> bool {
    let deflate = GROUPS.with(|g| g.borrow().joined.get(&id).is_some_and(|j| j.deflate));
    let closing = frames.plain.first() == Some(&CLOSE_FRAME);
    worker::current().is_some_and(|w| to_socket(&w, id, deflate, frames, closing))
}

/// Writes one member socket's frame of a broadcast: the compressed one if it takes it, and a
/// close frame as its last.
fn to_socket(
    w: &WorkerCtx,
    id: u64,
    deflate: bool,
    frames: &BroadcastFrames,
    closing: bool,
) -> bool {
    if closing {
        // A close frame (`close_where`): the member's last, never compressed.
        return w.send_last_to(id, &frames.plain);
    }
    let frame = match &frames.deflated {
        Some(deflated) if deflate => deflated,
        _ => &frames.plain,
    };
    w.send_raw_to(id, frame)
}

/// Sends `msg` to every member of `group`, in this worker and in all others (through the
/// master). Returns how many members of this worker took it. The frame is encoded once, and
/// once more compressed if permessage-deflate is on, whatever the number of members.
///
/// ```no_run
/// # async fn f(ws: brisk::ws::WsConnection) {
/// ws.join("lobby");
/// brisk::ws::broadcast("lobby", brisk::ws::Message::text("hello, everyone"));
/// # }
/// ```
pub fn broadcast(group: &str, msg: Message) -> usize {
    broadcast_frames(group, frames_of(&msg))
}

/// Hands `frames` to the members of `group` here and, through the master, everywhere else.
pub(crate) fn broadcast_frames(group: &str, frames: BroadcastFrames) -> usize {
    let stamp = super::replay::stamp_own(group, &frames);
    let delivered = deliver_local(group, &frames);
    if let Some(w) = worker::current() {
        w.relay_broadcast(group, stamp, frames);
    }
    delivered
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_event_stream_is_a_member_until_its_response_is_dropped() {
        let groups = ["room:a".to_string(), "brisk.key:user:ada".to_string()];
        let first = add_stream_with_id(&groups, None).1;
        let second = add_stream_with_id(&groups[..1], None).1;
        assert_eq!(local_members("room:a"), 2);
        assert_eq!(local_members("brisk.key:user:ada"), 1);
        drop(first);
        assert_eq!(local_members("room:a"), 1);
        assert_eq!(local_members("brisk.key:user:ada"), 0);
        assert_eq!(STREAMS.with(|s| s.borrow().len()), 1);
        drop(second);
        assert_eq!(local_members("room:a"), 0);
        assert_eq!(STREAMS.with(|s| s.borrow().len()), 0);
    }
}
