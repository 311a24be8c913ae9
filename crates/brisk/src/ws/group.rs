//! Named groups of WebSocket connections and broadcast.
//!
//! A group lives in each worker: it holds the ids of that worker's members. A broadcast
//! encodes the frame once, writes the same bytes to every local member, and sends them to the
//! master, which hands them to every other worker for their members.

use std::cell::RefCell;
use std::collections::{HashMap, HashSet};
use std::rc::Rc;

use bytes::{Bytes, BytesMut};

use super::codec::encode_frame;
use super::Message;
use crate::worker;

#[derive(Default)]
struct Groups {
    members: HashMap<Rc<str>, HashSet<u64>>,
    /// Groups of each connection that joined any, to leave them all on close.
    joined: HashMap<u64, Vec<Rc<str>>>,
}

thread_local! {
    static GROUPS: RefCell<Groups> = RefCell::new(Groups::default());
}

pub(crate) fn join(conn: u64, group: &str) {
    GROUPS.with(|g| {
        let mut g = g.borrow_mut();
        let name: Rc<str> = match g.members.get_key_value(group) {
            Some((k, _)) => k.clone(),
            None => Rc::from(group),
        };
        if g.members.entry(name.clone()).or_default().insert(conn) {
            g.joined.entry(conn).or_default().push(name);
        }
    });
}

pub(crate) fn leave(conn: u64, group: &str) {
    GROUPS.with(|g| {
        let mut g = g.borrow_mut();
        if let Some(set) = g.members.get_mut(group) {
            set.remove(&conn);
            if set.is_empty() {
                g.members.remove(group);
            }
        }
        if let Some(list) = g.joined.get_mut(&conn) {
            list.retain(|n| &**n != group);
            if list.is_empty() {
                g.joined.remove(&conn);
            }
        }
    });
}

pub(crate) fn leave_all(conn: u64) {
    GROUPS.with(|g| {
        let mut g = g.borrow_mut();
        for name in g.joined.remove(&conn).unwrap_or_default() {
            if let Some(set) = g.members.get_mut(&name) {
                set.remove(&conn);
                if set.is_empty() {
                    g.members.remove(&name);
                }
            }
        }
    });
}

/// Members of `group` in this worker.
pub fn local_members(group: &str) -> usize {
    GROUPS.with(|g| g.borrow().members.get(group).map_or(0, HashSet::len))
}

/// Encodes `msg` once as a frame.
fn frame_of(msg: &Message) -> Bytes {
    let mut buf = BytesMut::new();
    match msg {
        Message::Text(t) => encode_frame(0x1, t.as_bytes(), &mut buf),
        Message::Binary(b) => encode_frame(0x2, b, &mut buf),
    }
    buf.freeze()
}

/// Writes an encoded frame to every local member of `group`; returns how many took it.
pub(crate) fn deliver_local(group: &str, frame: &[u8]) -> usize {
    let ids: Vec<u64> = GROUPS.with(|g| {
        g.borrow()
            .members
            .get(group)
            .map(|s| s.iter().copied().collect())
            .unwrap_or_default()
    });
    let Some(w) = worker::current() else {
        return 0;
    };
    ids.into_iter()
        .filter(|id| w.send_raw_to(*id, frame))
        .count()
}

/// Sends `msg` to every member of `group`, in this worker and in all others (through the
/// master). Returns how many members of this worker took it.
///
/// ```no_run
/// # async fn f(ws: brisk::ws::WsConnection) {
/// ws.join("lobby");
/// brisk::ws::broadcast("lobby", brisk::ws::Message::text("hello, everyone"));
/// # }
/// ```
pub fn broadcast(group: &str, msg: Message) -> usize {
    let frame = frame_of(&msg);
    let delivered = deliver_local(group, &frame);
    if let Some(w) = worker::current() {
        w.relay_broadcast(group, frame);
    }
    delivered
}
