//! A connection's task: on_connect, the message loop (read, decode, hand each message to
//! `on_message` one at a time while flushing what it sends), on_error and on_close, and the
//! linger of a closing socket.

use super::*;

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
    let protocol = protocol.unwrap_or_else(|| server.protocol.clone());
    let inner = Rc::new(Inner::opening(&server, stream, remote, protocol));
    let worker = &server.worker;
    worker.register(inner.id, inner.clone());
    if worker.is_stopping() {
        inner.drain();
    }
    // Boxed (and only when there are any): an argument lives in the task for its whole life.
    let initial = (!initial.is_empty()).then(|| Box::new(initial));
    Connection::of(inner).lifecycle(initial, false)
}

impl<P: Protocol> Connection<P> {
    /// on_connect (unless `resumed`: handed over from another worker), the message loop,
    /// on_error, on_close.
    pub(super) async fn lifecycle(self, initial: Option<Box<BytesMut>>, resumed: bool) {
        if let (Some(cb), false) = (&self.inner.server.callbacks.on_connect, resumed) {
            if !self.run_callback("on_connect", cb(self.clone())).await {
                self.inner.state.destroy();
            }
        }
        match self.run(initial).await {
            End::Error(e) => {
                tracing::debug!(conn = self.id(), error = %e, "connection error");
                if let Some(cb) = &self.inner.server.callbacks.on_error {
                    self.run_callback("on_error", cb(self.clone(), e)).await;
                }
            }
            End::HandedOver => {
                // Another worker serves it now: handles held here see it closed.
                self.inner.state.handed_over();
                self.inner.server.worker.unregister(self.id());
                *self.inner.out.borrow_mut() = BytesMut::new();
                return;
            }
            End::Closed | End::Abort => {}
        }
        if self.inner.state.lifecycle() == Lifecycle::Destroyed {
            // Destroyed (an abort, an error): no linger, and the peer sees the end now even
            // if the app still holds a handle (which keeps the descriptor).
            self.inner.stream.shutdown_both();
        }
        self.inner.state.destroy();
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
        if inner.state.take(Mark::FullDue) {
            tracing::debug!(conn = self.id(), "send buffer full");
            if let Some(cb) = &cbs.on_buffer_full {
                if !self.run_callback("on_buffer_full", cb(self.clone())).await {
                    inner.state.destroy();
                }
            }
        }
        if inner.state.take(Mark::DrainDue) {
            if let Some(cb) = &cbs.on_buffer_drain {
                if !self.run_callback("on_buffer_drain", cb(self.clone())).await {
                    inner.state.destroy();
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
            if self.inner.state.lifecycle() == Lifecycle::Destroyed {
                return End::Abort;
            }
            if st.handler.is_none() {
                if self.inner.state.has(Mark::HandOver) {
                    if let Some(end) = self.detach(&mut st) {
                        return end;
                    }
                }
                if self.inner.state.has(Mark::FullDue) || self.inner.state.has(Mark::DrainDue) {
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
                if self.inner.state.lifecycle() == Lifecycle::Closing && !self.inner.has_output() {
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
                    Ok(false) => inner.state.peer_closed(),
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
        let reading = st.handler.is_none() && inner.reads();
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
        if inner.state.has(Mark::Draining) && inner.state.is_open() {
            let deadline = server.worker.drain_grace_deadline();
            let expecting = !inner.state.has(Mark::Handled) || !rbuf.is_empty();
            if expecting && tokio::time::Instant::now() < deadline {
                if drain_grace.is_none() {
                    *drain_grace = Some(Box::pin(tokio::time::sleep_until(deadline)));
                }
            } else {
                inner.say_farewell();
                inner.state.begin_closing();
            }
        }
        if inner.reads() && !rbuf.is_empty() {
            let max_package = server.limits.max_package_size;
            let decoded = inner.protocol.borrow_mut().decode(rbuf, max_package);
            match decoded {
                Ok(Some(msg)) => {
                    Stats::add(&server.worker.stats.total_request, 1);
                    inner.state.mark(Mark::Handled);
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
        if inner.state.has(Mark::PeerClosed) {
            return;
        }
        let mut timer = Box::pin(tokio::time::sleep(LINGER));
        loop {
            match poll_fn(|cx| inner.poll_event(cx, true, false, Some(&mut timer))).await {
                Ok(Event::Readable) => {}
                Ok(Event::Notified) if inner.state.lifecycle() != Lifecycle::Destroyed => continue,
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
