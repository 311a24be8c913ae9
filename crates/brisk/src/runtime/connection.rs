//! A connection: the task that owns a socket, and the [`Connection`] handle callbacks get.
//!
//! The task reads into a worker-wide scratch buffer and keeps bytes of its own only while a
//! message is incomplete, so an idle connection holds no buffers. `send` encodes and writes
//! straight to the socket when nothing is queued; only what the kernel does not take is kept,
//! up to the max send buffer. Messages of one connection are handled one at a time, and while
//! a handler awaits, the task keeps flushing what it sent.
//!
//! This file holds the handle and the state; [`send`] the send path and the view the worker's
//! sweeps use, [`message_loop`] the task.

use std::any::Any;
use std::cell::{Cell, RefCell};
use std::future::{poll_fn, Future};
use std::io;
use std::marker::PhantomData;
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

mod handover;
mod lifecycle;
mod message_loop;
mod send;
#[cfg(test)]
mod tests;

use lifecycle::{Lifecycle, Mark, State};

pub(crate) use handover::{serve_restored, Carried, Detached, HandoverHook};
pub(crate) use message_loop::{serve, serve_with};

/// Size of the worker-wide read scratch buffer: the most one read takes.
const READ_CHUNK: usize = 64 * 1024;
/// How long a closing connection waits for the peer's end-of-stream after sending its own.
const LINGER: Duration = Duration::from_secs(2);

thread_local! {
    /// Scratch buffers every connection task of the thread reads into and encodes into: a
    /// cache, no connection's state.
    static READ_SCRATCH: RefCell<Vec<u8>> = RefCell::new(vec![0; READ_CHUNK]);
    static WRITE_SCRATCH: RefCell<BytesMut> = RefCell::new(BytesMut::with_capacity(READ_CHUNK));
}

/// Why [`Connection::send`] did not queue a message.
#[derive(Debug, thiserror::Error)]
pub enum SendError {
    /// The connection is closing or closed.
    #[error("the connection is closed")]
    Closed,
    /// The message does not fit beside what is queued (the max send buffer);
    /// `on_buffer_full` has fired.
    #[error("the send buffer is full")]
    BufferFull,
    /// The message is larger than the whole send buffer: it can never be sent on this
    /// connection. Raise the server's `max_send_buffer`, or send smaller messages.
    #[error("the message ({len} bytes) is larger than the send buffer ({limit} bytes): raise max_send_buffer")]
    TooLarge {
        /// The message's size in wire form.
        len: usize,
        /// The connection's max send buffer.
        limit: usize,
    },
    /// The protocol could not encode the message.
    #[error(transparent)]
    Protocol(#[from] ProtocolError),
}

/// How a connection's loop ended.
enum End {
    /// Closed in order (by either side, or by a graceful stop).
    Closed,
    /// An I/O error.
    Error(io::Error),
    /// Destroyed, rejected or a handler panicked: no linger.
    Abort,
    /// Handed over to another worker: the socket stays open, and nothing more runs here.
    HandedOver,
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
    /// How its connections move to a new worker on a reload; without it, they are closed.
    pub handover: Option<Rc<dyn HandoverHook<P>>>,
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
            handover: None,
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
    /// Where it stands ([`lifecycle`]).
    state: State,
    bytes_in: Cell<u64>,
    bytes_out: Cell<u64>,
    /// Worker uptime in seconds when bytes last arrived (for the idle timeout).
    last_active: Cell<u32>,
    /// Worker uptime in seconds when the send queue last made progress: began to hold bytes,
    /// or the kernel took some of them (for the send timeout).
    queue_moved: Cell<u32>,
    out: RefCell<BytesMut>,
    io_error: Cell<Option<io::Error>>,
    protocol: RefCell<P>,
    data: Cell<Option<Box<dyn Any>>>,
    /// The connection task's waker, for [`Inner::notify`]. Socket readiness wakes the task
    /// through tokio's own per-socket waker slots, so an idle connection needs no other state.
    waker: Cell<Option<Waker>>,
    server: Rc<ServerShared<P>>,
}

impl<P: Protocol> Inner<P> {
    /// The state of a connection that opens now in `server`'s worker, with a new id.
    fn opening(
        server: &Rc<ServerShared<P>>,
        stream: Stream,
        remote: PeerAddr,
        protocol: P,
    ) -> Self {
        let worker = &server.worker;
        let now = worker.uptime_secs();
        Inner {
            id: worker.next_connection_id(),
            stream,
            remote,
            opened: now,
            state: State::opened(&[]),
            bytes_in: Cell::new(0),
            bytes_out: Cell::new(0),
            last_active: Cell::new(now),
            queue_moved: Cell::new(now),
            out: RefCell::new(BytesMut::new()),
            io_error: Cell::new(None),
            protocol: RefCell::new(protocol),
            data: Cell::new(None),
            waker: Cell::new(None),
            server: server.clone(),
        }
    }
}

/// A handle to one connection; cheap to clone, valid after the connection is gone (sends then
/// fail with [`SendError::Closed`]).
///
/// `D` is the type of the data the app attaches to each of the server's connections
/// ([`set_data`](Self::set_data)), named once on the server
/// ([`Server::data`](crate::Server::data)); `()` for none.
pub struct Connection<P: Protocol = Builtin, D = ()> {
    inner: Rc<Inner<P>>,
    data: PhantomData<fn() -> D>,
}

impl<P: Protocol, D> Clone for Connection<P, D> {
    fn clone(&self) -> Self {
        Connection::of(self.inner.clone())
    }
}

impl<P: Protocol> Connection<P> {
    /// The handle that callbacks of a server whose connections carry `D` get. Only what
    /// the server's typed setters wrap calls it, so a connection's data is always a `D`.
    pub(crate) fn typed<D>(self) -> Connection<P, D> {
        Connection::of(self.inner)
    }
}

impl<P: Protocol, D> Connection<P, D> {
    fn of(inner: Rc<Inner<P>>) -> Self {
        Connection {
            inner,
            data: PhantomData,
        }
    }

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
        !self.inner.state.is_open()
    }

    /// Encodes `msg` and sends it. Writes at once when nothing is queued; otherwise queues it.
    ///
    /// Fails with [`SendError::BufferFull`] when the message does not fit beside what is
    /// queued in the max send buffer (`on_buffer_full` fires once, the first time), with
    /// [`SendError::TooLarge`] for a message larger than the whole buffer, and with
    /// [`SendError::Closed`] after `close` or `destroy`. What is queued never exceeds the max
    /// send buffer (but for a WebSocket's close frame).
    pub fn send(&self, msg: impl Into<P::Message>) -> Result<(), SendError> {
        self.inner.send(msg.into())
    }

    /// Queues `msg` even past the max send buffer, after what is queued (a close frame for a
    /// peer that stopped reading); fails only once the connection is closing.
    pub(crate) fn send_past_limit(&self, msg: impl Into<P::Message>) -> Result<(), SendError> {
        let inner = &self.inner;
        if !inner.state.is_open() {
            return Err(SendError::Closed);
        }
        let mut bytes = BytesMut::new();
        inner.protocol.borrow_mut().encode(msg.into(), &mut bytes)?;
        inner.queue(&bytes);
        inner.notify();
        Ok(())
    }

    /// The connection's protocol state (crate-internal protocols keep flags there).
    pub(crate) fn protocol(&self) -> std::cell::RefMut<'_, P> {
        self.inner.protocol.borrow_mut()
    }

    /// The worker that holds the connection.
    pub(crate) fn worker(&self) -> &Rc<WorkerCtx> {
        &self.inner.server.worker
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
        self.inner.state.begin_closing();
        self.inner.notify();
    }

    /// Closes the connection now, dropping anything queued and any handler in progress.
    pub fn destroy(&self) {
        self.inner.state.destroy();
        self.inner.notify();
    }

    /// Stops reading from the peer (TCP flow control then slows the peer down).
    pub fn pause_recv(&self) {
        self.inner.state.mark(Mark::Paused);
        self.inner.notify();
    }

    /// Starts reading again after [`pause_recv`](Self::pause_recv).
    pub fn resume_recv(&self) {
        self.inner.state.take(Mark::Paused);
        self.inner.notify();
    }

    /// Attaches `value` to the connection, replacing any earlier one. Its type is the one
    /// the server named ([`Server::data`](crate::Server::data)), so every callback reads
    /// back what another attached.
    pub fn set_data(&self, value: D)
    where
        D: 'static,
    {
        self.inner.data.set(Some(Box::new(value)));
    }

    /// Takes the attached value out, whatever its type.
    pub(crate) fn take_data(&self) -> Option<Box<dyn Any>> {
        self.inner.data.take()
    }

    /// Attaches a value already boxed, as [`set_data`](Self::set_data) attaches `D`.
    pub(crate) fn set_data_boxed(&self, value: Box<dyn Any>) {
        self.inner.data.set(Some(value));
    }

    /// Runs `f` on the attached value; `None` if none is attached yet.
    ///
    /// ```no_run
    /// let counter = brisk::Server::new("text://127.0.0.1:7000")
    ///     .unwrap()
    ///     .data::<u32>()
    ///     .on_connect(|conn| async move { conn.set_data(0) })
    ///     .on_message(|conn, _line| async move {
    ///         let n = conn.with_data(|n| {
    ///             *n += 1;
    ///             *n
    ///         });
    ///         conn.send(format!("message {}", n.unwrap_or(0)))
    ///     });
    /// ```
    ///
    /// The value is taken out while `f` runs, so inside `f` the connection has no data; if
    /// `f` attaches a new value with [`set_data`](Self::set_data), that one stays. Reading
    /// it as another type than the server's does not compile:
    ///
    /// ```compile_fail
    /// let server = brisk::Server::new("text://127.0.0.1:7000")
    ///     .unwrap()
    ///     .data::<u32>()
    ///     .on_message(|conn, _line| async move { conn.with_data(|s: &mut String| s.len()); });
    /// ```
    pub fn with_data<R>(&self, f: impl FnOnce(&mut D) -> R) -> Option<R>
    where
        D: 'static,
    {
        self.with_data_as(f)
    }

    /// [`with_data`](Self::with_data) for a handle whose `D` is not the data's type (a
    /// WebSocket connection's, typed by its endpoint): the caller knows it is a `T`.
    pub(crate) fn with_data_as<T: 'static, R>(&self, f: impl FnOnce(&mut T) -> R) -> Option<R> {
        let mut data = self.inner.data.take()?;
        let value = data
            .downcast_mut::<T>()
            .expect("a connection's data is of the type its server or endpoint names");
        let result = f(value);
        match self.inner.data.take() {
            // `f` attached another value: it replaces the one `f` was given.
            Some(replaced) => self.inner.data.set(Some(replaced)),
            None => self.inner.data.set(Some(data)),
        }
        Some(result)
    }

    /// A clone of the attached value, if one is attached.
    pub fn data(&self) -> Option<D>
    where
        D: Clone + 'static,
    {
        self.with_data(|v| v.clone())
    }
}
