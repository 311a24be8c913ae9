//! [`event_stream`]: a server-sent events (SSE) response subscribed to broadcast groups, for
//! clients that cannot or need not hold a WebSocket (a browser's `EventSource`, `curl -N`).
//! What [`broadcast`](super::broadcast) and [`send_to`](super::send_to) send to those groups
//! and keys reaches the stream too, on every worker and instance: each text message as one
//! `data:` event (its lines as `data:` lines), encoded once per broadcast whatever the number
//! of streams. [`close_where`](super::close_where) on a key ends the stream with a last event
//! `event: close`, `data: {"code":N,"reason":"…"}` (the code and reason a socket would get);
//! binary messages pass it by. A stream that falls 256 events or 16 MiB behind is ended (the
//! client reconnects). A
//! stream leaves its groups as soon as its response is dropped (its client left). While open,
//! a stream counts as a member of its groups and keys, in `local_members`, `presence` and
//! `sockets_of` as a socket does.

use std::time::Duration;

use http::Response;

use super::group;
use super::group_key::GroupKey;
use crate::http::sse::EventStream;
use crate::runtime::context::running;
#[cfg(feature = "channels")]
use crate::runtime::context::WorkerCtx;
#[cfg(feature = "channels")]
use std::rc::Rc;

/// The comment a quiet stream sends, so that proxies do not close it.
const KEEP_ALIVE: Duration = Duration::from_secs(15);

/// An event stream the crate feeds itself besides its groups: to queue its first events, and
/// to end it.
#[cfg(feature = "channels")]
pub(crate) struct OwnedStream {
    id: u64,
    worker: Rc<WorkerCtx>,
}

#[cfg(feature = "channels")]
impl OwnedStream {
    /// Queues `text` as one `data:` event; false when the stream has ended.
    pub(crate) fn send_text(&self, text: &str) -> bool {
        let event = crate::http::sse::Event::new(text).encode();
        group::stream_event_to(&self.worker, self.id, &event)
    }

    /// Ends the stream [`close`](Self::close)d with `code` and `reason` after `after` (its
    /// token's expiry), unless it ends first: then the timer goes with it.
    pub(crate) fn close_after(self, after: Duration, code: u16, reason: &'static str) {
        let (worker, id) = (self.worker.clone(), self.id);
        let timer = worker.timers.add(after, false, move || {
            group::take_expiry(&self.worker, self.id);
            self.close(code, reason)
        });
        group::set_expiry(&worker, id, timer);
    }

    /// Ends the stream with a last `event: close` saying why, as
    /// [`close_where`](super::close_where) ends it (nothing if it has ended).
    pub(crate) fn close(&self, code: u16, reason: &str) {
        let mut payload = code.to_be_bytes().to_vec();
        payload.extend_from_slice(reason.as_bytes());
        let last = super::delivery::close_event(&payload);
        group::stream_event_to(&self.worker, self.id, &last);
        group::end_stream(&self.worker, self.id);
    }
}

/// An event stream of worker `worker` subscribed to `groups` (of any space), with the
/// handle that feeds and ends it.
#[cfg(feature = "channels")]
pub(crate) fn owned_event_stream(
    worker: Rc<WorkerCtx>,
    groups: &[GroupKey],
) -> (OwnedStream, Response<EventStream>) {
    let (id, response) = group::add_stream_with_id(&worker, groups, Some(KEEP_ALIVE));
    (OwnedStream { id, worker }, response)
}

/// The app's `groups` and the groups of its `keys`.
fn all_groups<G: AsRef<str>, K: AsRef<str>>(groups: &[G], keys: &[K]) -> Vec<GroupKey> {
    (groups.iter().map(|g| GroupKey::app(g.as_ref())))
        .chain(keys.iter().map(|k| GroupKey::key(k.as_ref())))
        .collect()
}

/// A `text/event-stream` response subscribed to `groups` and to the sockets' `keys` (as an
/// upgrade route's [`key`](super::WebSocketUpgrade::key) tags a socket). Its body is `Send`:
/// an axum handler returns it as it is, a Brisk handler with `.map(Body::new)`. Panics off a
/// worker, saying so.
///
/// ```no_run
/// use axum::{extract::Path, routing::get, Router};
///
/// let router: Router = Router::new().route(
///     "/rooms/{room}/events",
///     get(|Path(room): Path<String>| async move {
///         let user = "ada"; // the app's authentication, from the request
///         brisk::ws::event_stream(&[format!("room:{room}")], &[format!("user:{user}")])
///     }),
/// );
/// ```
pub fn event_stream<G: AsRef<str>, K: AsRef<str>>(
    groups: &[G],
    keys: &[K],
) -> Response<EventStream> {
    let w = running("brisk::ws::event_stream");
    group::add_stream_with_id(&w, &all_groups(groups, keys), Some(KEEP_ALIVE)).1
}
