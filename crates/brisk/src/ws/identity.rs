//! Who a socket is: what an upgrade route attaches to a WebSocket connection before `on_open`
//! runs, a value of the app's (the user id, the claims, the room: read in every callback with
//! [`WsConnection::with_data`](super::WsConnection::with_data), no reparsing) and the keys it
//! is tagged with (a user id), which [`send_to`] reaches on every worker and every instance.
//!
//! A key is a group of its own ([`GroupKey::key`], apart from the app's groups whatever their
//! names), so a message to it travels as a broadcast does: to the other workers through the
//! master, to the other instances through the cluster bus; so does [`close_where`], as a
//! close frame.

use super::delivery::Delivery;
use super::group;
use super::group_key::GroupKey;
use super::Message;
use crate::runtime::context::{running, WorkerCtx};

/// Sends `msg` to every socket tagged with `key` (by an upgrade route's
/// [`key`](super::WebSocketUpgrade::key)) on every worker of this instance and, when the app
/// spans machines, of every instance. Returns how many sockets of this worker took it.
/// Panics off a worker, saying so.
///
/// ```no_run
/// // A user's sockets, wherever they are connected.
/// brisk::ws::send_to("user:42", brisk::ws::Message::text(r#"{"mentioned_in":"ops"}"#));
/// ```
pub fn send_to(key: &str, msg: Message) -> usize {
    group::broadcast_to(&running("brisk::ws::send_to"), &GroupKey::key(key), msg)
}

/// Closes every socket tagged with `key`, on every worker and every instance, with close
/// `code` (4000–4999 for the app's own; 1008 policy violation…) and `reason` (cut to the 123
/// bytes a close frame holds): the socket gets the close frame after what was queued for
/// it, then the connection closes. Returns how many sockets of this worker it closed.
/// Panics off a worker, saying so.
///
/// ```no_run
/// // A user whose access was revoked: their sockets everywhere.
/// brisk::ws::close_where("user:42", 4003, "access revoked");
/// ```
pub fn close_where(key: &str, code: u16, reason: &str) -> usize {
    let w = running("brisk::ws::close_where");
    close_members(&w, &GroupKey::key(key), code, reason)
}

/// Closes every member of `group`, on every worker and instance, as [`close_where`] does.
pub(crate) fn close_members(w: &WorkerCtx, group: &GroupKey, code: u16, reason: &str) -> usize {
    let close = Delivery::of_close(code, reason);
    group::broadcast_delivery(w, group, std::rc::Rc::new(close))
}

/// Sockets tagged with `key` on every instance of the app (with `App::cluster`; feature
/// `redis`), as fresh as [`presence`](super::presence): whether a user is online anywhere.
/// Without a cluster, those of this worker. Event streams subscribed to the key
/// ([`event_stream`](super::event_stream)) count as sockets.
///
/// ```no_run
/// # async fn f() -> Result<(), brisk::redis::RedisError> {
/// let online = brisk::ws::sockets_of("user:42").await? > 0;
/// # Ok(()) }
/// ```
#[cfg(feature = "redis")]
pub async fn sockets_of(key: &str) -> Result<u64, crate::redis::RedisError> {
    let w = running("brisk::ws::sockets_of");
    super::presence::members_of(&w, &GroupKey::key(key)).await
}
