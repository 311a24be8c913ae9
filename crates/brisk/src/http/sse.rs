//! Server-sent events: `text/event-stream` responses fed from a channel, with keep-alive
//! comments, and a [`Hub`] that sends each event to every subscriber of a worker.
//!
//! ```no_run
//! use brisk::http::sse::{Event, Hub};
//! # fn f(hub: Hub) {
//! // In a route: let response = hub.subscribe();
//! hub.publish(&Event::new("hello").event("greeting").id("1"));
//! # }
//! ```

use std::cell::RefCell;
use std::fmt::Write as _;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::{header, HeaderValue, Response};
use http_body::Frame;
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::sync::Arc;
use tokio::sync::mpsc;

use super::Body;
use crate::runtime::handler::BoxError;

/// Events a subscriber may lag behind before it is dropped.
pub(crate) const QUEUE: usize = 256;
/// Bytes of events a subscriber may lag behind before it is dropped (one event larger than
/// this is queued only into an empty queue). Events shared by many streams (a broadcast is
/// encoded once) count whole in each.
pub(crate) const QUEUE_BYTES: usize = 16 << 20;

/// The sending end of one stream's queue: bounded to [`QUEUE`] events and [`QUEUE_BYTES`].
pub(crate) struct QueueTx {
    tx: mpsc::Sender<Bytes>,
    queued: Arc<AtomicUsize>,
}

/// The receiving end, in the stream's body: what it takes leaves the byte count.
pub(crate) struct QueueRx {
    rx: mpsc::Receiver<Bytes>,
    queued: Arc<AtomicUsize>,
}

/// A new stream's queue.
pub(crate) fn queue() -> (QueueTx, QueueRx) {
    let (tx, rx) = mpsc::channel(QUEUE);
    let queued = Arc::new(AtomicUsize::new(0));
    let rx = QueueRx {
        rx,
        queued: queued.clone(),
    };
    (QueueTx { tx, queued }, rx)
}

impl QueueTx {
    /// Queues `event`; false when the client is gone, or is [`QUEUE`] events or
    /// [`QUEUE_BYTES`] behind.
    pub(crate) fn try_send(&self, event: Bytes) -> bool {
        let len = event.len();
        let before = self.queued.fetch_add(len, Relaxed);
        if before > 0 && before + len > QUEUE_BYTES {
            self.queued.fetch_sub(len, Relaxed);
            return false;
        }
        if self.tx.try_send(event).is_err() {
            self.queued.fetch_sub(len, Relaxed);
            return false;
        }
        true
    }

    /// Whether the client is gone.
    pub(crate) fn is_closed(&self) -> bool {
        self.tx.is_closed()
    }
}

impl QueueRx {
    fn poll_recv(&mut self, cx: &mut Context<'_>) -> Poll<Option<Bytes>> {
        let polled = self.rx.poll_recv(cx);
        if let Poll::Ready(Some(b)) = &polled {
            self.queued.fetch_sub(b.len(), Relaxed);
        }
        polled
    }
}

/// One event: `data` (may span lines), and optional `event`, `id` and `retry` fields.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Event {
    data: String,
    event: Option<String>,
    id: Option<String>,
    retry: Option<Duration>,
}

impl Event {
    /// An event carrying `data`.
    pub fn new(data: impl Into<String>) -> Self {
        Event {
            data: data.into(),
            ..Default::default()
        }
    }

    /// The event type (`event:` field); clients listen with `addEventListener(type)`.
    pub fn event(mut self, name: impl Into<String>) -> Self {
        self.event = Some(name.into());
        self
    }

    /// The event id (`id:` field); a reconnecting client sends it as `Last-Event-ID`.
    pub fn id(mut self, id: impl Into<String>) -> Self {
        self.id = Some(id.into());
        self
    }

    /// How long a client waits before reconnecting (`retry:` field).
    pub fn retry(mut self, after: Duration) -> Self {
        self.retry = Some(after);
        self
    }

    /// The wire form. Newlines in fields other than `data` are dropped (they would end the
    /// field); each line of `data` becomes its own `data:` line, a line ending at `\n`,
    /// `\r\n` or a lone `\r` alike (as a client reads them), so data cannot set other fields.
    ///
    /// ```
    /// let e = brisk::http::sse::Event::new("a\nb").event("x").id("7");
    /// assert_eq!(&e.encode()[..], b"event: x\nid: 7\ndata: a\ndata: b\n\n");
    /// // A carriage return ends a line too: no `id:` field slips in.
    /// let e = brisk::http::sse::Event::new("x\rid: 9\r\ny");
    /// assert_eq!(&e.encode()[..], b"data: x\ndata: id: 9\ndata: y\n\n");
    /// ```
    pub fn encode(&self) -> Bytes {
        let clean = |s: &str| s.replace(['\r', '\n'], "");
        let mut out = String::with_capacity(self.data.len() + 32);
        if let Some(e) = &self.event {
            let _ = writeln!(out, "event: {}", clean(e));
        }
        if let Some(id) = &self.id {
            let _ = writeln!(out, "id: {}", clean(id));
        }
        if let Some(r) = self.retry {
            let _ = writeln!(out, "retry: {}", r.as_millis());
        }
        for line in self.data.split("\r\n").flat_map(|l| l.split(['\r', '\n'])) {
            let _ = writeln!(out, "data: {line}");
        }
        out.push('\n');
        Bytes::from(out)
    }
}

/// The sending side of one event stream. Dropping it ends the response.
pub struct Sender {
    tx: QueueTx,
}

impl Sender {
    /// Queues an event. Fails when the client is gone or has fallen 256 events or 16 MiB
    /// behind.
    pub fn send(&self, event: &Event) -> Result<(), Event> {
        match self.tx.try_send(event.encode()) {
            true => Ok(()),
            false => Err(event.clone()),
        }
    }

    /// Whether the client is gone.
    pub fn is_closed(&self) -> bool {
        self.tx.is_closed()
    }
}

/// A `text/event-stream` response and the [`Sender`] that feeds it. Every `keep_alive`
/// without an event, a comment line keeps proxies from closing the stream.
pub fn channel(keep_alive: Option<Duration>) -> (Sender, Response<Body>) {
    let (tx, rx) = queue();
    (Sender { tx }, response(rx, keep_alive))
}

fn response(rx: QueueRx, keep_alive: Option<Duration>) -> Response<Body> {
    stream_response(rx, keep_alive, None).map(Body::new)
}

/// What a stream's owner does when the stream ends (its client gone, or the response
/// dropped): `release(id)`, on the thread that made it.
pub(crate) struct Release {
    pub(crate) id: u64,
    pub(crate) release: fn(u64),
    pub(crate) owner: std::thread::ThreadId,
}

/// A `text/event-stream` response whose body is what `rx` receives (encoded events); when
/// the body is dropped, `release` runs.
pub(crate) fn stream_response(
    rx: QueueRx,
    keep_alive: Option<Duration>,
    release: Option<Release>,
) -> Response<EventStream> {
    let body = EventStream {
        rx,
        keep_alive: keep_alive
            .map(|d| Box::pin(tokio::time::interval_at(tokio::time::Instant::now() + d, d))),
        release,
    };
    let mut r = Response::new(body);
    let h = r.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream"),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    h.insert("x-accel-buffering", HeaderValue::from_static("no"));
    r
}

/// The body of an event stream: the encoded events its sender queues, and a keep-alive
/// comment after each stretch of silence. `Send`, so an axum handler can return it
/// (`brisk::ws::event_stream`); it ends when the sending side is gone.
pub struct EventStream {
    rx: QueueRx,
    keep_alive: Option<Pin<Box<tokio::time::Interval>>>,
    release: Option<Release>,
}

impl Drop for EventStream {
    /// Its subscriptions end with it (on the thread that holds them; elsewhere they end at
    /// the next message to them).
    fn drop(&mut self) {
        if let Some(r) = self.release.take() {
            if std::thread::current().id() == r.owner {
                (r.release)(r.id);
            }
        }
    }
}

impl http_body::Body for EventStream {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        match self.rx.poll_recv(cx) {
            Poll::Ready(Some(b)) => {
                if let Some(k) = self.keep_alive.as_mut() {
                    k.as_mut().reset();
                }
                return Poll::Ready(Some(Ok(Frame::data(b))));
            }
            Poll::Ready(None) => return Poll::Ready(None),
            Poll::Pending => {}
        }
        if let Some(k) = self.keep_alive.as_mut() {
            if k.as_mut().poll_tick(cx).is_ready() {
                return Poll::Ready(Some(Ok(Frame::data(Bytes::from_static(
                    b": keep-alive\n\n",
                )))));
            }
        }
        Poll::Pending
    }
}

/// Subscribers of one worker; [`Hub::publish`] encodes an event once and queues it for all.
/// Cheap to clone.
#[derive(Clone, Default)]
pub struct Hub {
    subscribers: Rc<RefCell<Vec<QueueTx>>>,
    keep_alive: Option<Duration>,
}

impl Hub {
    /// A hub whose streams send a keep-alive comment after `keep_alive` of silence.
    pub fn new(keep_alive: Option<Duration>) -> Self {
        Hub {
            subscribers: Rc::default(),
            keep_alive,
        }
    }

    /// A new subscriber's response.
    pub fn subscribe(&self) -> Response<Body> {
        let (tx, rx) = queue();
        self.subscribers.borrow_mut().push(tx);
        response(rx, self.keep_alive)
    }

    /// Sends `event` to every subscriber; drops those that are gone or too far behind.
    /// Returns how many took it.
    pub fn publish(&self, event: &Event) -> usize {
        let wire = event.encode();
        let mut subs = self.subscribers.borrow_mut();
        subs.retain(|s| s.try_send(wire.clone()));
        subs.len()
    }

    /// Subscribers now.
    pub fn len(&self) -> usize {
        self.subscribers.borrow().len()
    }

    /// Whether there are no subscribers.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue 66: a stream's queue holds at most 16 MiB; what the body takes frees room.
    #[test]
    fn a_queue_is_bounded_in_bytes_and_freed_as_the_body_reads() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let (tx, rx) = queue();
            let mut body = stream_response(rx, None, None).into_body();
            let big = Bytes::from(vec![b'x'; 10 << 20]);
            assert!(tx.try_send(big.clone()));
            assert!(!tx.try_send(big.clone()), "20 MiB queued");
            assert!(tx.try_send(Bytes::from_static(b"small")));
            let first = http_body_util::BodyExt::frame(&mut body)
                .await
                .unwrap()
                .unwrap();
            assert_eq!(first.into_data().unwrap().len(), 10 << 20);
            assert!(tx.try_send(big.clone()), "room again once read");
            // One event larger than the bound goes into an empty queue only.
            let (tx, _rx) = queue();
            let huge = Bytes::from(vec![b'x'; QUEUE_BYTES + 1]);
            assert!(tx.try_send(huge.clone()));
            assert!(!tx.try_send(Bytes::from_static(b"more")));
        });
    }
}
