//! The send path of a connection: a message encoded and written at once when nothing is
//! queued, what the kernel does not take kept up to the max send buffer, and the flags and
//! wake-ups the connection's task acts on; and the view of a connection the worker's sweeps
//! and broadcasts use.

use super::*;

impl<P: Protocol> Inner<P> {
    pub(super) fn send(&self, msg: P::Message) -> Result<(), SendError> {
        if !self.state.is_open() {
            return Err(SendError::Closed);
        }
        if self.out.borrow().len() >= self.server.limits.max_send_buffer {
            // Full already: nothing fits, so nothing is encoded.
            return Err(self.refuse_full());
        }
        WRITE_SCRATCH.with(|scratch| {
            let mut scratch = scratch.borrow_mut();
            scratch.clear();
            self.protocol.borrow_mut().encode(msg, &mut scratch)?;
            let sent = self.send_bytes(&scratch);
            if scratch.capacity() > 4 * READ_CHUNK {
                *scratch = BytesMut::with_capacity(READ_CHUNK);
            }
            sent
        })
    }

    /// Sends the protocol's farewell (a WebSocket's close 1001), if it has one, as any
    /// message; true if it was sent or queued. Nothing once the connection is closing.
    pub(super) fn say_farewell(&self) -> bool {
        let farewell = self.protocol.borrow().farewell();
        farewell.is_some_and(|msg| self.send(msg).is_ok())
    }

    /// Writes bytes in wire form at once when nothing is queued, and queues what the kernel
    /// does not take; if they fit beside what is queued in the max send buffer. A message is
    /// counted whole against the limit before any of it is written, so the queue never holds
    /// more than the limit, however many messages (a broadcast's members) come its way.
    pub(super) fn send_bytes(&self, bytes: &[u8]) -> Result<(), SendError> {
        if !self.state.is_open() {
            return Err(SendError::Closed);
        }
        let limit = self.server.limits.max_send_buffer;
        if bytes.len() > limit {
            Stats::add(&self.server.worker.stats.sends_dropped, 1);
            return Err(SendError::TooLarge {
                len: bytes.len(),
                limit,
            });
        }
        let mut out = self.out.borrow_mut();
        if out.len() + bytes.len() > limit {
            drop(out);
            return Err(self.refuse_full());
        }
        if out.is_empty() {
            let written = match self.stream.try_write(bytes) {
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => 0,
                Err(e) => {
                    self.io_error.set(Some(e));
                    self.state.destroy();
                    self.notify();
                    return Err(SendError::Closed);
                }
            };
            self.count_out(written);
            if written < bytes.len() {
                self.queue_moved.set(self.server.worker.uptime_secs());
                out.extend_from_slice(&bytes[written..]);
            }
        } else {
            out.extend_from_slice(bytes);
        }
        if !out.is_empty() || self.stream.has_pending_output() {
            self.notify();
        }
        Ok(())
    }

    /// A message did not fit: counted, and `on_buffer_full` made due the first time.
    fn refuse_full(&self) -> SendError {
        let stats = &self.server.worker.stats;
        Stats::add(&stats.sends_dropped, 1);
        if self.state.queue_filled() {
            Stats::add(&stats.buffer_full, 1);
            self.notify();
        }
        SendError::BufferFull
    }

    /// Queues bytes after what is queued, past the limit if need be (a close frame).
    pub(super) fn queue(&self, bytes: &[u8]) {
        let mut out = self.out.borrow_mut();
        if out.is_empty() {
            self.queue_moved.set(self.server.worker.uptime_secs());
        }
        out.extend_from_slice(bytes);
    }

    /// Whether the task reads and decodes: open, and not paused.
    #[inline]
    pub(super) fn reads(&self) -> bool {
        self.state.is_open() && !self.state.has(Mark::Paused)
    }
    #[inline]
    pub(super) fn count_out(&self, n: usize) {
        self.bytes_out.set(self.bytes_out.get() + n as u64);
        Stats::add(&self.server.worker.stats.bytes_out, n as u64);
    }

    /// Writes queued bytes until the kernel refuses more. Returns whether the queue is empty.
    pub(super) fn flush(&self) -> io::Result<bool> {
        let mut out = self.out.borrow_mut();
        let mut moved = false;
        while !out.is_empty() {
            match self.stream.try_write(&out) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => {
                    out.advance(n);
                    self.count_out(n);
                    moved = true;
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    if moved {
                        self.queue_moved.set(self.server.worker.uptime_secs());
                    }
                    return Ok(false);
                }
                Err(e) => return Err(e),
            }
        }
        *out = BytesMut::new();
        if !self.stream.flush_pending()? {
            return Ok(false);
        }
        self.state.queue_emptied();
        Ok(true)
    }

    pub(super) fn has_output(&self) -> bool {
        !self.out.borrow().is_empty() || self.stream.has_pending_output()
    }

    /// Wakes the connection task to look at its flags.
    pub(super) fn notify(&self) {
        self.state.mark(Mark::Notified);
        if let Some(w) = self.waker.take() {
            w.wake_by_ref();
            self.waker.set(Some(w));
        }
    }

    /// Polls for the next thing the connection task must handle.
    pub(super) fn poll_event(
        &self,
        cx: &mut Context<'_>,
        reading: bool,
        writing: bool,
        timer: Option<&mut Pin<Box<Sleep>>>,
    ) -> Poll<io::Result<Event>> {
        if self.state.take(Mark::Notified) {
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
    fn can_hand_over(&self) -> bool {
        self.server.callbacks.handover.is_some()
    }
    fn hand_over(&self) -> bool {
        self.flag_hand_over()
    }
    fn cancel_hand_over(&self) -> bool {
        self.state.take(Mark::HandOver)
    }
    fn drain(&self) {
        self.state.mark(Mark::Draining);
        self.notify();
    }
    fn idle_secs(&self, now: u32) -> u32 {
        now.saturating_sub(self.last_active.get())
    }
    fn destroy(&self) {
        self.state.destroy();
        self.notify();
    }
    fn stop_now(&self) {
        // Its handler is still running (or its peer reads slowly), so the message loop never
        // reached `between_messages`, which says the farewell otherwise.
        if self.say_farewell() {
            let _ = self.flush();
        }
        self.destroy();
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
    fn send_raw(&self, bytes: &[u8]) -> bool {
        self.send_bytes(bytes).is_ok()
    }
    fn send_last(&self, bytes: &[u8]) -> bool {
        if !self.state.is_open() {
            return false;
        }
        // Past the send-buffer limit if need be: a slow peer still gets its close frame.
        self.queue(bytes);
        self.state.begin_closing();
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
    fn send_stalled(&self, now: u32) -> bool {
        let Some(timeout) = self.server.limits.send_timeout else {
            return false;
        };
        let limit = timeout.as_secs().max(1) as u32;
        !self.out.borrow().is_empty() && now.saturating_sub(self.queue_moved.get()) > limit
    }
    fn count_send_timeout(&self) {
        Stats::add(&self.server.worker.stats.send_timeouts, 1);
    }
}
