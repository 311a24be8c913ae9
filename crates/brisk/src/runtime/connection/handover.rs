//! A connection that moves to another worker (a reload hands it over): the runtime's part.
//!
//! The worker flags the connections whose server can carry them ([`ConnView::hand_over`]).
//! Each one's task, between two messages, flushes what it can and leaves in one synchronous
//! step: its socket (a duplicate of the descriptor), the bytes it received and has not
//! decoded, the bytes it has not sent and its protocol state go to the server's
//! [`HandoverHook`], and the task ends without closing the socket or running `on_close`.
//! In the new worker, [`serve_restored`] serves it again from where it stopped.

use std::os::fd::{AsFd, OwnedFd};

use super::*;

/// What a connection takes with it when it leaves its worker.
pub(crate) struct Detached<P> {
    /// Its id in the worker it left.
    pub id: u64,
    /// Its socket (a duplicate: the worker's own descriptor closes as the task ends).
    pub socket: OwnedFd,
    /// Its state.
    pub state: Carried<P>,
}

/// A connection's state as it goes from one worker to another.
pub(crate) struct Carried<P> {
    /// Received and not yet decoded (a partial frame).
    pub received: BytesMut,
    /// Queued and not yet taken by the kernel.
    pub unsent: BytesMut,
    /// Its protocol state.
    pub protocol: P,
    /// It had stopped reading ([`Connection::pause_recv`]).
    pub paused: bool,
    /// At least one message was handled.
    pub handled: bool,
    /// Bytes received so far.
    pub bytes_in: u64,
    /// Bytes sent so far.
    pub bytes_out: u64,
}

/// How a server hands its connections over; set in its [`Callbacks::handover`].
pub(crate) trait HandoverHook<P: Protocol> {
    /// Whether `conn` can leave now: the protocol's and the app's state can be carried.
    fn can_detach(&self, conn: &Connection<P>) -> bool;
    /// `conn` has left this worker with `detached`; nothing more happens to it here.
    fn detached(&self, conn: &Connection<P>, detached: Detached<P>);
    /// `conn` was flagged but stays (it will be closed as a stop closes it).
    fn declined(&self, conn: &Connection<P>);
}

impl<P: Protocol> Inner<P> {
    /// Flags the connection to leave at its next chance, if its server can hand it over and
    /// it is not closing; true if flagged.
    pub(super) fn flag_hand_over(&self) -> bool {
        if self.server.callbacks.handover.is_none()
            || !self.state.is_open()
            || self.state.has(Mark::HandOver)
        {
            return false;
        }
        self.state.mark(Mark::HandOver);
        self.notify();
        true
    }
}

impl<P: Protocol> Connection<P> {
    /// Leaves the worker if it can (see the module's documentation): `Some` ends the task.
    /// Otherwise the flag is cleared and the connection goes on where it was.
    pub(super) fn detach(&self, st: &mut LoopState) -> Option<End> {
        let inner = &*self.inner;
        inner.state.take(Mark::HandOver);
        let hook = inner.server.callbacks.handover.clone()?;
        let socket = match &inner.stream {
            Stream::Tcp(s) if inner.state.is_open() => {
                // What the kernel takes now need not be carried.
                let _ = inner.flush();
                match hook.can_detach(self) {
                    true => s.as_fd().try_clone_to_owned().ok(),
                    false => None,
                }
            }
            // TLS sessions are not carried: such connections close as a stop closes them.
            _ => None,
        };
        let Some(socket) = socket else {
            hook.declined(self);
            return None;
        };
        let protocol = std::mem::replace(
            &mut *inner.protocol.borrow_mut(),
            inner.server.protocol.clone(),
        );
        let detached = Detached {
            id: inner.id,
            socket,
            state: Carried {
                received: std::mem::take(&mut st.rbuf),
                unsent: std::mem::take(&mut *inner.out.borrow_mut()),
                protocol,
                paused: inner.state.has(Mark::Paused),
                handled: inner.state.has(Mark::Handled),
                bytes_in: inner.bytes_in.get(),
                bytes_out: inner.bytes_out.get(),
            },
        };
        hook.detached(self, detached);
        Some(End::HandedOver)
    }
}

/// A connection handed over by another worker, registered here, and the future that serves
/// it from where it stopped: `on_connect` does not run again (it opened long ago), what it
/// had received is decoded first and what it had not sent goes first. It gets a new id (ids
/// are per worker). Until the future runs, the caller may give it back its data and groups.
pub(crate) fn serve_restored<P: Protocol>(
    server: Rc<ServerShared<P>>,
    stream: Stream,
    remote: PeerAddr,
    state: Carried<P>,
) -> (Connection<P>, impl std::future::Future<Output = ()>) {
    let marks = [(state.paused, Mark::Paused), (state.handled, Mark::Handled)];
    let marks: Vec<Mark> = marks.iter().filter(|m| m.0).map(|m| m.1).collect();
    let mut inner = Inner::opening(&server, stream, remote, state.protocol);
    inner.state = State::opened(&marks);
    inner.bytes_in = Cell::new(state.bytes_in);
    inner.bytes_out = Cell::new(state.bytes_out);
    inner.out = RefCell::new(state.unsent);
    let inner = Rc::new(inner);
    let worker = &server.worker;
    worker.register_resumed(inner.id, inner.clone());
    if worker.is_stopping() {
        inner.drain();
    }
    let received = state.received;
    let initial = (!received.is_empty()).then(|| Box::new(received));
    let conn = Connection::of(inner);
    (conn.clone(), conn.lifecycle(initial, true))
}
