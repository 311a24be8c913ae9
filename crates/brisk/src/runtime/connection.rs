//! A connection: the task that owns a socket, and the [`Connection`] handle callbacks get.
//!
//! The task reads into a worker-wide scratch buffer and keeps bytes of its own only while a
//! message is incomplete, so an idle connection holds no buffers. `send` encodes and writes
//! straight to the socket when nothing is queued; only what the kernel does not take is kept,
//! up to the max send buffer. Messages of one connection are handled one at a time, and while
//! a handler awaits, the task keeps flushing what it sent.

use std::any::Any;
use std::cell::{Cell, RefCell};
use std::future::{poll_fn, Future};
use std::io;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use bytes::{Buf, BytesMut};
use futures_util::future::CatchUnwind;
use futures_util::FutureExt;
use tokio::time::Sleep;

use super::conn_view::ConnView;
use super::context::WorkerCtx;
use super::handler::{panic_message, BoxError, HandlerFuture};
use super::stream::{PeerAddr, Stream};
use crate::limits::Limits;
use crate::protocol::{Builtin, Protocol, ProtocolError};
use crate::stats::{ConnectionInfo, Stats};

/// Size of the worker-wide read scratch buffer: the most one read takes.
const READ_CHUNK: usize = 64 * 1024;
/// How long a closing connection waits for the peer's end-of-stream after sending its own.
const LINGER: Duration = Duration::from_secs(2);

thread_local! {
    static READ_SCRATCH: RefCell<Vec<u8>> = RefCell::new(vec![0; READ_CHUNK]);
    static WRITE_SCRATCH: RefCell<BytesMut> = RefCell::new(BytesMut::with_capacity(READ_CHUNK));
}

/// Why [`Connection::send`] did not queue a message.
#[derive(Debug, thiserror::Error)]
pub enum SendError {
    /// The connection is closing or closed.
    #[error("the connection is closed")]
    Closed,
    /// The send buffer is at the max send buffer; `on_buffer_full` has fired.
    #[error("the send buffer is full")]
    BufferFull,
    /// The protocol could not encode the message.
    #[error(transparent)]
    Protocol(#[from] ProtocolError),
}

mod flag {
    pub(super) const CLOSING: u16 = 1;
    pub(super) const DESTROYED: u16 = 1 << 1;
    pub(super) const PAUSED: u16 = 1 << 2;
    pub(super) const DRAINING: u16 = 1 << 3;
    pub(super) const FULL: u16 = 1 << 4;
    pub(super) const EVENT_FULL: u16 = 1 << 5;
    pub(super) const EVENT_DRAIN: u16 = 1 << 6;
    pub(super) const PEER_CLOSED: u16 = 1 << 7;
    /// At least one message was handled.
    pub(super) const HANDLED: u16 = 1 << 8;
    /// Something changed that the connection task must look at.
    pub(super) const NOTIFIED: u16 = 1 << 9;
}

/// An `on_message` future in progress, with panics caught.
type Handler = CatchUnwind<AssertUnwindSafe<HandlerFuture>>;

/// What a finished `on_message` future left: its result, or its panic.
type HandlerOutcome = Result<Result<(), BoxError>, Box<dyn Any + Send>>;

/// The message loop's own state, kept in one place so the wait captures one pointer.
struct LoopState {
    /// Bytes received and not yet decoded; empty (no allocation) between messages.
    rbuf: BytesMut,
    /// During a graceful stop: when to stop waiting for a first or unfinished message.
    drain_grace: Option<Pin<Box<Sleep>>>,
    /// The `on_message` future in progress.
    handler: Option<Handler>,
}

/// Why the connection task woke up.
enum Event {
    Notified,
    Readable,
    Writable,
    Timer,
}

/// A callback that takes the connection only.
pub(crate) type ConnCallback<P> = Rc<dyn Fn(Connection<P>) -> HandlerFuture>;
/// `on_message`: the connection and one decoded message.
pub(crate) type MessageCallback<P> =
    Rc<dyn Fn(Connection<P>, <P as Protocol>::Message) -> HandlerFuture>;
/// `on_error`: the connection and the I/O error that ended it.
pub(crate) type ErrorCallback<P> = Rc<dyn Fn(Connection<P>, io::Error) -> HandlerFuture>;

/// The callbacks of a stream server.
pub(crate) struct Callbacks<P: Protocol> {
    pub on_connect: Option<ConnCallback<P>>,
    pub on_message: Option<MessageCallback<P>>,
    pub on_close: Option<ConnCallback<P>>,
    pub on_error: Option<ErrorCallback<P>>,
    pub on_buffer_full: Option<ConnCallback<P>>,
    pub on_buffer_drain: Option<ConnCallback<P>>,
}

impl<P: Protocol> Default for Callbacks<P> {
    fn default() -> Self {
        Callbacks {
            on_connect: None,
            on_message: None,
            on_close: None,
            on_error: None,
            on_buffer_full: None,
            on_buffer_drain: None,
        }
    }
}

/// What a server shares with all its connections in one worker.
pub(crate) struct ServerShared<P: Protocol> {
    pub worker: Rc<WorkerCtx>,
    pub callbacks: Callbacks<P>,
    pub limits: Limits,
    pub protocol: P,
}

pub(crate) struct Inner<P: Protocol> {
    id: u64,
    stream: Stream,
    remote: PeerAddr,
    /// Worker uptime in seconds when the connection opened.
    opened: u32,
    flags: Cell<u16>,
    bytes_in: Cell<u64>,
    bytes_out: Cell<u64>,
    /// Worker uptime in seconds when bytes last arrived (for the idle timeout).
    last_active: Cell<u32>,
    out: RefCell<BytesMut>,
    io_error: Cell<Option<io::Error>>,
    protocol: RefCell<P>,
    data: Cell<Option<Box<dyn Any>>>,
    /// The connection task's waker, for [`Inner::notify`]. Socket readiness wakes the task
    /// through tokio's own per-socket waker slots, so an idle connection needs no other state.
    waker: Cell<Option<Waker>>,
    server: Rc<ServerShared<P>>,
}

/// A handle to one connection; cheap to clone, valid after the connection is gone (sends then
/// fail with [`SendError::Closed`]).
pub struct Connection<P: Protocol = Builtin> {
    inner: Rc<Inner<P>>,
}

impl<P: Protocol> Clone for Connection<P> {
    fn clone(&self) -> Self {
        Connection {
            inner: self.inner.clone(),
        }
    }
}

impl<P: Protocol> Connection<P> {
    /// Id of the connection, unique within its worker.
    pub fn id(&self) -> u64 {
        self.inner.id
    }

    /// The peer's address.
    pub fn remote_addr(&self) -> &PeerAddr {
        &self.inner.remote
    }

    /// The address the connection came in on.
    pub fn local_addr(&self) -> PeerAddr {
        self.inner.stream.local_addr()
    }

    /// Bytes received so far.
    pub fn bytes_in(&self) -> u64 {
        self.inner.bytes_in.get()
    }

    /// Bytes written to the socket so far.
    pub fn bytes_out(&self) -> u64 {
        self.inner.bytes_out.get()
    }

    /// Bytes queued and not yet taken by the kernel.
    pub fn send_buffer_len(&self) -> usize {
        self.inner.out.borrow().len()
    }

    /// Whether the connection is closing or closed.
    pub fn is_closed(&self) -> bool {
        self.inner.has(flag::CLOSING | flag::DESTROYED)
    }

    /// Encodes `msg` and sends it. Writes at once when nothing is queued; otherwise queues it.
    ///
    /// Fails with [`SendError::BufferFull`] while the send buffer is at the max send buffer
    /// (`on_buffer_full` fires once when it gets there), and with [`SendError::Closed`] after
    /// `close` or `destroy`.
    pub fn send(&self, msg: impl Into<P::Message>) -> Result<(), SendError> {
        self.inner.send(msg.into())
    }

    /// Queues `msg` even past the max send buffer, after what is queued (a close frame for a
    /// peer that stopped reading); fails only once the connection is closing.
    pub(crate) fn send_past_limit(&self, msg: impl Into<P::Message>) -> Result<(), SendError> {
        let inner = &self.inner;
        if inner.has(flag::CLOSING | flag::DESTROYED) {
            return Err(SendError::Closed);
        }
        let mut bytes = BytesMut::new();
        inner.protocol.borrow_mut().encode(msg.into(), &mut bytes)?;
        inner.out.borrow_mut().extend_from_slice(&bytes);
        inner.notify();
        Ok(())
    }

    /// The connection's protocol state (crate-internal protocols keep flags there).
    pub(crate) fn protocol(&self) -> std::cell::RefMut<'_, P> {
        self.inner.protocol.borrow_mut()
    }

    /// The counters of the worker that holds the connection.
    pub(crate) fn worker_stats(&self) -> &Stats {
        &self.inner.server.worker.stats
    }

    /// Counts a protocol violation handled by a protocol layer (it closes the connection).
    pub(crate) fn count_rejected(&self) {
        Stats::add(&self.inner.server.worker.stats.rejected, 1);
    }

    /// Closes the connection once everything queued has been sent. Messages already received
    /// are not handled any more.
    pub fn close(&self) {
        self.inner.set(flag::CLOSING);
        self.inner.notify();
    }

    /// Closes the connection now, dropping anything queued and any handler in progress.
    pub fn destroy(&self) {
        self.inner.set(flag::DESTROYED);
        self.inner.notify();
    }

    /// Stops reading from the peer (TCP flow control then slows the peer down).
    pub fn pause_recv(&self) {
        self.inner.set(flag::PAUSED);
        self.inner.notify();
    }

    /// Starts reading again after [`pause_recv`](Self::pause_recv).
    pub fn resume_recv(&self) {
        self.inner.clear(flag::PAUSED);
        self.inner.notify();
    }

    /// Attaches a value to the connection, replacing any earlier one.
    pub fn set_data<T: 'static>(&self, value: T) {
        self.inner.data.set(Some(Box::new(value)));
    }

    /// Attaches a value already boxed, as [`set_data`](Self::set_data) attaches `T`.
    pub(crate) fn set_data_boxed(&self, value: Box<dyn Any>) {
        self.inner.data.set(Some(value));
    }

    /// Runs `f` on the attached value if there is one of type `T`.
    ///
    /// ```no_run
    /// # fn f(conn: brisk::Connection) {
    /// conn.set_data(0u32);
    /// conn.with_data(|n: &mut u32| *n += 1);
    /// # }
    /// ```
    ///
    /// The value is taken out while `f` runs, so inside `f` the connection has no data; if
    /// `f` attaches a new value with [`set_data`](Self::set_data), that one stays.
    pub fn with_data<T: 'static, R>(&self, f: impl FnOnce(&mut T) -> R) -> Option<R> {
        let mut data = self.inner.data.take()?;
        let result = data.downcast_mut::<T>().map(f);
        match self.inner.data.take() {
            // `f` attached another value: it replaces the one `f` was given.
            Some(replaced) => self.inner.data.set(Some(replaced)),
            None => self.inner.data.set(Some(data)),
        }
        result
    }

    /// A clone of the attached value, if there is one of type `T`.
    pub fn data<T: Clone + 'static>(&self) -> Option<T> {
        self.with_data(|v: &mut T| v.clone())
    }
}

impl<P: Protocol> Inner<P> {
    fn send(&self, msg: P::Message) -> Result<(), SendError> {
        let inner = self;
        if inner.has(flag::CLOSING | flag::DESTROYED) {
            return Err(SendError::Closed);
        }
        if inner.out.borrow().len() >= inner.server.limits.max_send_buffer {
            Stats::add(&inner.server.worker.stats.sends_dropped, 1);
            return Err(SendError::BufferFull);
        }
        WRITE_SCRATCH.with(|scratch| {
            let mut scratch = scratch.borrow_mut();
            scratch.clear();
            inner.protocol.borrow_mut().encode(msg, &mut scratch)?;
            self.send_bytes(&scratch);
            if scratch.capacity() > 4 * READ_CHUNK {
                *scratch = BytesMut::with_capacity(READ_CHUNK);
            }
            Ok(())
        })
    }

    /// Writes bytes in wire form at once when nothing is queued; queues what the kernel
    /// does not take, up to the max send buffer.
    fn send_bytes(&self, bytes: &[u8]) -> bool {
        let inner = self;
        if inner.has(flag::CLOSING | flag::DESTROYED) {
            return false;
        }
        let limit = inner.server.limits.max_send_buffer;
        let mut out = inner.out.borrow_mut();
        if out.len() >= limit {
            Stats::add(&inner.server.worker.stats.sends_dropped, 1);
            return false;
        }
        if out.is_empty() {
            let written = match inner.stream.try_write(bytes) {
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => 0,
                Err(e) => {
                    inner.io_error.set(Some(e));
                    inner.set(flag::DESTROYED);
                    inner.notify();
                    return false;
                }
            };
            inner.count_out(written);
            if written < bytes.len() {
                out.extend_from_slice(&bytes[written..]);
            }
        } else {
            out.extend_from_slice(bytes);
        }
        if !out.is_empty() {
            if out.len() >= limit && !inner.has(flag::FULL) {
                inner.set(flag::FULL | flag::EVENT_FULL);
                Stats::add(&inner.server.worker.stats.buffer_full, 1);
            }
            inner.notify();
        } else if inner.stream.has_pending_output() {
            inner.notify();
        }
        true
    }

    #[inline]
    fn has(&self, f: u16) -> bool {
        self.flags.get() & f != 0
    }
    #[inline]
    fn set(&self, f: u16) {
        self.flags.set(self.flags.get() | f);
    }
    #[inline]
    fn clear(&self, f: u16) {
        self.flags.set(self.flags.get() & !f);
    }
    #[inline]
    fn count_out(&self, n: usize) {
        self.bytes_out.set(self.bytes_out.get() + n as u64);
        Stats::add(&self.server.worker.stats.bytes_out, n as u64);
    }

    /// Writes queued bytes until the kernel refuses more. Returns whether the queue is empty.
    fn flush(&self) -> io::Result<bool> {
        let mut out = self.out.borrow_mut();
        while !out.is_empty() {
            match self.stream.try_write(&out) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => {
                    out.advance(n);
                    self.count_out(n);
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(false),
                Err(e) => return Err(e),
            }
        }
        *out = BytesMut::new();
        if !self.stream.flush_pending()? {
            return Ok(false);
        }
        if self.has(flag::FULL) {
            self.clear(flag::FULL);
            self.set(flag::EVENT_DRAIN);
        }
        Ok(true)
    }

    fn has_output(&self) -> bool {
        !self.out.borrow().is_empty() || self.stream.has_pending_output()
    }

    /// Wakes the connection task to look at its flags.
    fn notify(&self) {
        self.set(flag::NOTIFIED);
        if let Some(w) = self.waker.take() {
            w.wake_by_ref();
            self.waker.set(Some(w));
        }
    }

    /// Polls for the next thing the connection task must handle.
    fn poll_event(
        &self,
        cx: &mut Context<'_>,
        reading: bool,
        writing: bool,
        timer: Option<&mut Pin<Box<Sleep>>>,
    ) -> Poll<io::Result<Event>> {
        if self.has(flag::NOTIFIED) {
            self.clear(flag::NOTIFIED);
            return Poll::Ready(Ok(Event::Notified));
        }
        match self.waker.take() {
            Some(w) if w.will_wake(cx.waker()) => self.waker.set(Some(w)),
            _ => self.waker.set(Some(cx.waker().clone())),
        }
        if writing {
            if let Poll::Ready(r) = self.stream.poll_write_ready(cx) {
                return Poll::Ready(r.map(|_| Event::Writable));
            }
        }
        if reading {
            if let Poll::Ready(r) = self.stream.poll_read_ready(cx) {
                return Poll::Ready(r.map(|_| Event::Readable));
            }
        }
        if let Some(t) = timer {
            if t.as_mut().poll(cx).is_ready() {
                return Poll::Ready(Ok(Event::Timer));
            }
        }
        Poll::Pending
    }
}

impl<P: Protocol> ConnView for Inner<P> {
    fn info(&self) -> ConnectionInfo {
        let bytes = (self.bytes_in.get(), self.bytes_out.get());
        let w = &self.server.worker;
        w.connection_info(self.id, &self.remote, bytes, self.opened)
    }
    fn drain(&self) {
        self.set(flag::DRAINING);
        self.notify();
    }
    fn idle_secs(&self, now: u32) -> u32 {
        now.saturating_sub(self.last_active.get())
    }
    fn destroy(&self) {
        self.set(flag::DESTROYED);
        self.notify();
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
    fn send_raw(&self, bytes: &[u8]) -> bool {
        self.send_bytes(bytes)
    }
    fn send_last(&self, bytes: &[u8]) -> bool {
        if self.has(flag::CLOSING | flag::DESTROYED) {
            return false;
        }
        // Past the send-buffer limit if need be: a slow peer still gets its close frame.
        self.out.borrow_mut().extend_from_slice(bytes);
        self.set(flag::CLOSING);
        self.notify();
        true
    }
    fn keepalive(&self) {
        let beat = self.protocol.borrow().heartbeat();
        if let Some(msg) = beat {
            let _ = self.send(msg);
        }
    }
    fn has_heartbeat(&self) -> bool {
        self.protocol.borrow().heartbeat().is_some()
    }
    fn handshake_age(&self, now: u32) -> Option<u32> {
        let handshaking = self.stream.is_handshaking() || self.protocol.borrow().handshaking();
        handshaking.then(|| now.saturating_sub(self.opened))
    }
    fn count_rejected(&self) {
        Stats::add(&self.server.worker.stats.rejected, 1);
    }
}

/// How a connection's loop ended.
enum End {
    /// Closed in order (by either side, or by a graceful stop).
    Closed,
    /// An I/O error.
    Error(io::Error),
    /// Destroyed, rejected or a handler panicked: no linger.
    Abort,
}

/// Opens a connection on `stream`; the returned future serves it until it closes.
///
/// The connection is built here, outside the future, so the task holds one `Rc` and the
/// state of whatever it awaits: an idle connection's task stays small.
pub(crate) fn serve<P: Protocol>(
    server: Rc<ServerShared<P>>,
    stream: Stream,
    remote: PeerAddr,
) -> impl std::future::Future<Output = ()> {
    serve_with(server, stream, remote, BytesMut::new(), None)
}

/// Like [`serve`], for a socket taken over from another protocol (an HTTP upgrade): `initial`
/// holds bytes already read, and `protocol` replaces the server's template.
pub(crate) fn serve_with<P: Protocol>(
    server: Rc<ServerShared<P>>,
    stream: Stream,
    remote: PeerAddr,
    initial: BytesMut,
    protocol: Option<P>,
) -> impl std::future::Future<Output = ()> {
    let worker = &server.worker;
    let now = worker.uptime_secs();
    let inner = Rc::new(Inner {
        id: worker.next_connection_id(),
        stream,
        remote,
        opened: now,
        flags: Cell::new(0),
        bytes_in: Cell::new(0),
        bytes_out: Cell::new(0),
        last_active: Cell::new(now),
        out: RefCell::new(BytesMut::new()),
        io_error: Cell::new(None),
        protocol: RefCell::new(protocol.unwrap_or_else(|| server.protocol.clone())),
        data: Cell::new(None),
        waker: Cell::new(None),
        server: server.clone(),
    });
    worker.register(inner.id, inner.clone());
    if worker.is_stopping() {
        inner.drain();
    }
    // Boxed (and only when there are any): an argument lives in the task for its whole life.
    let initial = (!initial.is_empty()).then(|| Box::new(initial));
    Connection { inner }.lifecycle(initial)
}

impl<P: Protocol> Connection<P> {
    /// on_connect, the message loop, on_error, on_close.
    async fn lifecycle(self, initial: Option<Box<BytesMut>>) {
        if let Some(cb) = &self.inner.server.callbacks.on_connect {
            if !self.run_callback("on_connect", cb(self.clone())).await {
                self.inner.set(flag::DESTROYED);
            }
        }
        if let End::Error(e) = self.run(initial).await {
            tracing::debug!(conn = self.id(), error = %e, "connection error");
            if let Some(cb) = &self.inner.server.callbacks.on_error {
                self.run_callback("on_error", cb(self.clone(), e)).await;
            }
        }
        self.inner.set(flag::CLOSING | flag::DESTROYED);
        self.inner.server.worker.unregister(self.id());
        if let Some(cb) = &self.inner.server.callbacks.on_close {
            self.run_callback("on_close", cb(self.clone())).await;
        }
        // Drop buffers now even if user code keeps a handle.
        *self.inner.out.borrow_mut() = BytesMut::new();
    }

    /// Runs a callback's future, counting errors and panics. Resolves to false after a panic.
    fn run_callback(
        &self,
        name: &'static str,
        fut: HandlerFuture,
    ) -> impl std::future::Future<Output = bool> + '_ {
        AssertUnwindSafe(fut)
            .catch_unwind()
            .map(move |outcome| self.callback_outcome(name, outcome))
    }

    /// Counts and logs a callback's error or panic. Returns false after a panic.
    fn callback_outcome(&self, name: &'static str, outcome: HandlerOutcome) -> bool {
        let stats = &self.inner.server.worker.stats;
        match outcome {
            Ok(Ok(())) => true,
            Ok(Err(e)) => {
                Stats::add(&stats.throw_exception, 1);
                tracing::warn!(conn = self.id(), callback = name, error = %e, "handler error");
                true
            }
            Err(panic) => {
                Stats::add(&stats.throw_exception, 1);
                tracing::error!(
                    conn = self.id(),
                    callback = name,
                    panic = panic_message(&panic),
                    "handler panicked; closing the connection"
                );
                false
            }
        }
    }

    /// Fires `on_buffer_full` / `on_buffer_drain` if `send` or a flush asked for it.
    async fn fire_buffer_events(&self) {
        let inner = &self.inner;
        let cbs = &inner.server.callbacks;
        if inner.has(flag::EVENT_FULL) {
            inner.clear(flag::EVENT_FULL);
            tracing::debug!(conn = self.id(), "send buffer full");
            if let Some(cb) = &cbs.on_buffer_full {
                if !self.run_callback("on_buffer_full", cb(self.clone())).await {
                    inner.set(flag::DESTROYED);
                }
            }
        }
        if inner.has(flag::EVENT_DRAIN) {
            inner.clear(flag::EVENT_DRAIN);
            if let Some(cb) = &cbs.on_buffer_drain {
                if !self.run_callback("on_buffer_drain", cb(self.clone())).await {
                    inner.set(flag::DESTROYED);
                }
            }
        }
    }

    /// The message loop: decode, hand each message to `on_message` (one at a time, flushing
    /// what it sends while it runs), read more, until the connection ends.
    ///
    /// Everything waits in one `poll_fn`, so the task's idle state is a few words.
    async fn run(&self, initial: Option<Box<BytesMut>>) -> End {
        let mut st = LoopState {
            rbuf: initial.map(|b| *b).unwrap_or_default(),
            drain_grace: None,
            handler: None,
        };
        loop {
            if let Some(e) = self.inner.io_error.take() {
                return End::Error(e);
            }
            if self.inner.has(flag::DESTROYED) {
                return End::Abort;
            }
            if st.handler.is_none() {
                if self.inner.has(flag::EVENT_FULL | flag::EVENT_DRAIN) {
                    // Rare: boxed so its state does not enlarge every connection's task.
                    Box::pin(self.fire_buffer_events()).await;
                    continue;
                }
                if let Some(end) = self.between_messages(&mut st) {
                    return end;
                }
                if st.handler.is_some() {
                    continue;
                }
                if self.inner.has(flag::CLOSING) && !self.inner.has_output() {
                    // Once per connection: boxed to keep the idle task small.
                    Box::pin(self.linger_close()).await;
                    return End::Closed;
                }
            }
            let step = poll_fn(|cx| self.poll_step(cx, &mut st)).await;
            let inner = &*self.inner;
            match step {
                Err(outcome) => {
                    st.handler = None;
                    if !self.callback_outcome("on_message", outcome) {
                        return End::Abort;
                    }
                }
                Ok(Ok(Event::Notified | Event::Timer)) => {}
                Ok(Ok(Event::Writable)) => {
                    if let Err(e) = inner.flush() {
                        return End::Error(e);
                    }
                }
                Ok(Ok(Event::Readable)) => match self.read_into(&mut st.rbuf) {
                    Ok(true) => {}
                    // The peer finished sending: answer what we have, then close.
                    Ok(false) => inner.set(flag::PEER_CLOSED | flag::CLOSING),
                    Err(e) => return End::Error(e),
                },
                Ok(Err(e)) => return End::Error(e),
            }
        }
    }

    /// Work between two messages: the graceful-stop decision, and decoding the next message
    /// into `handler`. Returns how the connection ends, if it must.
    /// Polls the handler in progress (if any), then the socket and the wake cell.
    #[allow(clippy::type_complexity)]
    fn poll_step(
        &self,
        cx: &mut Context<'_>,
        st: &mut LoopState,
    ) -> Poll<Result<io::Result<Event>, HandlerOutcome>> {
        let inner = &*self.inner;
        if let Some(h) = st.handler.as_mut() {
            if let Poll::Ready(outcome) = h.poll_unpin(cx) {
                return Poll::Ready(Err(outcome));
            }
        }
        let reading = st.handler.is_none() && !inner.has(flag::PAUSED | flag::CLOSING);
        let writing = inner.has_output();
        inner
            .poll_event(cx, reading, writing, st.drain_grace.as_mut())
            .map(Ok)
    }

    fn between_messages(&self, st: &mut LoopState) -> Option<End> {
        let LoopState {
            rbuf,
            drain_grace,
            handler,
        } = st;
        let inner = &*self.inner;
        let server = &*inner.server;
        // A graceful stop closes a connection between messages; one that has not yet
        // delivered its first message (or is in the middle of one) gets a short grace.
        if inner.has(flag::DRAINING) && !inner.has(flag::CLOSING) {
            let deadline = server.worker.drain_grace_deadline();
            let expecting = !inner.has(flag::HANDLED) || !rbuf.is_empty();
            if expecting && tokio::time::Instant::now() < deadline {
                if drain_grace.is_none() {
                    *drain_grace = Some(Box::pin(tokio::time::sleep_until(deadline)));
                }
            } else {
                let farewell = inner.protocol.borrow().farewell();
                if let Some(msg) = farewell {
                    let _ = inner.send(msg);
                }
                inner.set(flag::CLOSING);
            }
        }
        if !inner.has(flag::PAUSED | flag::CLOSING) && !rbuf.is_empty() {
            let max_package = server.limits.max_package_size;
            let decoded = inner.protocol.borrow_mut().decode(rbuf, max_package);
            match decoded {
                Ok(Some(msg)) => {
                    Stats::add(&server.worker.stats.total_request, 1);
                    inner.set(flag::HANDLED);
                    if let Some(cb) = &server.callbacks.on_message {
                        *handler = Some(AssertUnwindSafe(cb(self.clone(), msg)).catch_unwind());
                    }
                    return None;
                }
                Ok(None) if rbuf.len() > max_package => {
                    return Some(self.reject(ProtocolError::TooLarge {
                        size: rbuf.len(),
                        limit: max_package,
                    }));
                }
                Ok(None) => {}
                Err(e) => return Some(self.reject(e)),
            }
        }
        let_go_if_empty(rbuf);
        None
    }

    /// Reads what is available into `rbuf`. Returns false at end of stream.
    fn read_into(&self, rbuf: &mut BytesMut) -> io::Result<bool> {
        let inner = &*self.inner;
        READ_SCRATCH.with(|scratch| {
            let mut scratch = scratch.borrow_mut();
            match inner.stream.try_read(&mut scratch) {
                Ok(0) => Ok(false),
                Ok(n) => {
                    rbuf.extend_from_slice(&scratch[..n]);
                    inner.bytes_in.set(inner.bytes_in.get() + n as u64);
                    let w = &inner.server.worker;
                    Stats::add(&w.stats.bytes_in, n as u64);
                    inner.last_active.set(w.uptime_secs());
                    Ok(true)
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(true),
                Err(e) => Err(e),
            }
        })
    }

    fn reject(&self, e: ProtocolError) -> End {
        let stats = &self.inner.server.worker.stats;
        Stats::add(&stats.rejected, 1);
        tracing::warn!(conn = self.id(), remote = %self.inner.remote, error = %e, "closing connection: bad input");
        End::Abort
    }

    /// Sends FIN, then waits briefly for the peer's so that an unread byte from the peer does
    /// not turn our close into a reset that could destroy the reply in flight.
    async fn linger_close(&self) {
        let inner = &*self.inner;
        inner.stream.shutdown_write();
        if inner.has(flag::PEER_CLOSED) {
            return;
        }
        let mut timer = Box::pin(tokio::time::sleep(LINGER));
        loop {
            match poll_fn(|cx| inner.poll_event(cx, true, false, Some(&mut timer))).await {
                Ok(Event::Readable) => {}
                Ok(Event::Notified) if !inner.has(flag::DESTROYED) => continue,
                _ => return,
            }
            let done = READ_SCRATCH.with(|s| match inner.stream.try_read(&mut s.borrow_mut()) {
                Ok(0) => true,
                Ok(_) => false,
                Err(e) => e.kind() != io::ErrorKind::WouldBlock,
            });
            if done {
                return;
            }
        }
    }
}

/// Replaces an empty read buffer with one that holds no allocation, so that a connection
/// waiting for its next message keeps no buffer. Capacity alone does not tell: a buffer whose
/// bytes were all split off into a message (a WebSocket handshake, a Text line) has no spare
/// capacity but still shares, and so keeps alive, the storage of what it last read.
fn let_go_if_empty(rbuf: &mut BytesMut) {
    if rbuf.is_empty() {
        *rbuf = BytesMut::new();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The per-connection state behind `Rc` fits a 256-byte allocation (allocator size
    /// classes are 256 then 320): worker RSS per idle connection depends on it.
    #[test]
    fn connection_state_fits_its_memory_budget() {
        let rc_header = 2 * std::mem::size_of::<usize>();
        let builtin = std::mem::size_of::<Inner<Builtin>>() + rc_header;
        let ws = std::mem::size_of::<Inner<crate::ws::codec::WsCodec>>() + rc_header;
        eprintln!("Inner<Builtin> + Rc header = {builtin} bytes, Inner<WsCodec>: {ws}");
        assert!(builtin <= 256, "{builtin} bytes");
        assert!(ws <= 256, "{ws} bytes");
    }

    #[test]
    fn an_emptied_read_buffer_lets_go_of_what_was_split_off() {
        let mut rbuf = BytesMut::new();
        rbuf.extend_from_slice(b"GET / HTTP/1.1\r\n\r\n");
        let message = rbuf.split_to(rbuf.len()).freeze();
        assert_eq!(rbuf.capacity(), 0);
        let_go_if_empty(&mut rbuf);
        // Unique again: the idle connection's buffer no longer shares the message's storage.
        assert!(message.try_into_mut().is_ok());
    }

    #[test]
    fn a_read_buffer_with_bytes_left_is_kept() {
        let mut rbuf = BytesMut::from(&b"one\ntw"[..]);
        let _line = rbuf.split_to(4);
        let_go_if_empty(&mut rbuf);
        assert_eq!(&rbuf[..], b"tw");
    }
}
