//! Where an HTTP/1.1 connection stands: reading a request head, handling a request (its body
//! perhaps still arriving, perhaps waited for), answering, or owing a 408; with its byte
//! counts and last activity. One type, every transition a method of this file: the socket
//! adapter, Brisk's own path, hyper's service, the request body, TLS and the timeout sweep
//! each call the transition they make, and none writes a field.
//!
//! Atomics (relaxed): the worker's registry reads them from the sweep while the connection's
//! task writes them, on one thread; `Arc` because hyper's I/O types must be `Send`.

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering::Relaxed};

/// Per-connection counters and state shared between the socket adapter and the registry.
#[derive(Debug, Default)]
pub(crate) struct Activity {
    bytes_in: AtomicU64,
    bytes_out: AtomicU64,
    /// The worker's clock in seconds at the last byte in or out.
    last_active: AtomicU32,
    /// When the request head being read began (coarse clock + 1; 0: not reading a head).
    /// Set by the connection's first bytes, or by its opening; cleared when a head has been
    /// parsed.
    head_since_ms: AtomicU64,
    /// Bytes of the head being read have arrived: a head timeout then answers 408.
    partial: AtomicBool,
    /// A request is being handled (its body may still be arriving): bytes now are not a
    /// new head.
    busy: AtomicBool,
    /// Under TLS: the head (or body) timed out; the connection's reader answers 408 through
    /// the TLS session, then ends the connection (`HeadTimeoutIo`).
    answer_408: AtomicBool,
    /// When the request body being waited for began (coarse clock + 1; 0: none pending).
    body_since_ms: AtomicU64,
    /// `bytes_in` when that body began: what arrives since extends its time.
    body_base_bytes: AtomicU64,
    /// Someone (the handler, or Brisk's own path) is waiting for body bytes that have not
    /// come: only then does a late body count against the client.
    body_waiting: AtomicBool,
}

impl Activity {
    /// A new connection at `now_s` / `now_ms`: it has the head timeout to send its first
    /// request.
    pub(crate) fn opened(&self, now_s: u32, now_ms: u64) {
        self.last_active.store(now_s, Relaxed);
        self.head_started(now_ms);
    }

    /// `n` bytes came off the socket at `now_ms`: outside a request they start a head (and
    /// its timer, unless the connection's opening started it).
    pub(crate) fn received(&self, n: u64, now_ms: u64) {
        self.bytes_in.fetch_add(n, Relaxed);
        self.last_active.store((now_ms / 1000) as u32, Relaxed);
        if !self.busy.load(Relaxed) && !self.partial.load(Relaxed) {
            self.partial.store(true, Relaxed);
            if self.head_pending_since().is_none() {
                self.head_started(now_ms);
            }
        }
    }

    /// `n` bytes went out at `now_ms`: a long response (a download, an event stream) keeps
    /// the connection active.
    pub(crate) fn sent(&self, n: u64, now_ms: u64) {
        self.bytes_out.fetch_add(n, Relaxed);
        self.last_active.store((now_ms / 1000) as u32, Relaxed);
    }

    /// The TLS handshake is done: its bytes were not part of a request head.
    pub(crate) fn handshake_done(&self) {
        self.partial.store(false, Relaxed);
    }

    /// Decrypted bytes arrived: outside a request they start a head. (The socket-level mark
    /// cannot tell: the handshake's last bytes and the first request often arrive together.)
    pub(crate) fn decrypted(&self) {
        if !self.busy.load(Relaxed) {
            self.partial.store(true, Relaxed);
        }
    }

    fn head_started(&self, now_ms: u64) {
        self.head_since_ms.store(now_ms + 1, Relaxed);
    }

    /// A head was parsed: the request is the handler's now (no body pending yet).
    pub(crate) fn head_done(&self) {
        self.head_since_ms.store(0, Relaxed);
        self.partial.store(false, Relaxed);
        self.busy.store(true, Relaxed);
        self.body_done();
    }

    /// Brisk's own path parsed a head whose body is still arriving, and waits for it: the
    /// body's clock runs from the first time (a body that trickles in is a slow body, not
    /// a slow head).
    pub(crate) fn awaiting_body(&self, now_ms: u64) {
        if self.body_since_ms.load(Relaxed) == 0 {
            self.head_done();
        }
        self.body_started(now_ms);
    }

    /// A request with a body was handed to its handler at `now_ms`: the body's clock runs,
    /// but nobody waits for it until the handler reads it.
    pub(crate) fn body_pending(&self, now_ms: u64) {
        self.body_started(now_ms);
        self.body_waiting.store(false, Relaxed);
    }

    /// A request body began to be waited for at `now_ms` (kept if one already is).
    pub(crate) fn body_started(&self, now_ms: u64) {
        if self.body_since_ms.load(Relaxed) == 0 {
            self.body_base_bytes
                .store(self.bytes_in.load(Relaxed), Relaxed);
            self.body_since_ms.store(now_ms + 1, Relaxed);
        }
        self.body_waiting.store(true, Relaxed);
    }

    /// The handler asked for body bytes and none were there (`true`), or got some (`false`).
    pub(crate) fn waiting_for_body(&self, waiting: bool) {
        self.body_waiting.store(waiting, Relaxed);
    }

    /// The request body is read whole, or nobody waits for it any more.
    pub(crate) fn body_done(&self) {
        self.body_since_ms.store(0, Relaxed);
        self.body_waiting.store(false, Relaxed);
    }

    /// The response is in hyper's hands, or sent: bytes that come now start the next head.
    pub(crate) fn response_done(&self) {
        self.busy.store(false, Relaxed);
    }

    /// Under TLS: the timeout sweep found the head or body late; the reader answers 408.
    pub(crate) fn owe_408(&self) {
        self.answer_408.store(true, Relaxed);
    }

    /// Whether a 408 is owed (and the connection ends after it).
    pub(crate) fn owes_408(&self) -> bool {
        self.answer_408.load(Relaxed)
    }

    /// Whether bytes of a request head have arrived (a late head then gets a 408; a
    /// connection that sent nothing is just closed).
    pub(crate) fn head_begun(&self) -> bool {
        self.partial.load(Relaxed)
    }

    /// Bytes in and out.
    pub(crate) fn bytes(&self) -> (u64, u64) {
        (self.bytes_in.load(Relaxed), self.bytes_out.load(Relaxed))
    }

    /// The worker's clock in seconds at the last byte in or out.
    pub(crate) fn last_active(&self) -> u32 {
        self.last_active.load(Relaxed)
    }

    /// Whether a request body that is being waited for is overdue at `now_ms`: it has had
    /// `limit_ms`, plus a second for each `min_rate` bytes that arrived meanwhile.
    pub(crate) fn body_overdue(&self, now_ms: u64, limit_ms: u64, min_rate: u64) -> bool {
        let Some(since) = self.body_since_ms.load(Relaxed).checked_sub(1) else {
            return false;
        };
        if !self.body_waiting.load(Relaxed) {
            return false;
        }
        let received = self
            .bytes_in
            .load(Relaxed)
            .saturating_sub(self.body_base_bytes.load(Relaxed));
        let earned_ms = (received.saturating_mul(1000))
            .checked_div(min_rate)
            .unwrap_or(0);
        now_ms.saturating_sub(since) >= limit_ms.saturating_add(earned_ms)
    }

    /// Since when the head being read has been pending, if one is.
    pub(crate) fn head_pending_since(&self) -> Option<u64> {
        self.head_since_ms.load(Relaxed).checked_sub(1)
    }
}

#[cfg(test)]
mod tests {
    use super::Activity;

    #[test]
    fn a_body_is_late_only_while_waited_for_and_progress_earns_time() {
        let a = Activity::default();
        assert!(!a.body_overdue(100_000, 1000, 4096), "no body pending");
        a.body_started(0);
        assert!(!a.body_overdue(999, 1000, 4096));
        assert!(a.body_overdue(1000, 1000, 4096));
        // 8 KiB arrived: two more seconds.
        a.received(8192, 0);
        assert!(!a.body_overdue(2999, 1000, 4096));
        assert!(a.body_overdue(3000, 1000, 4096));
        // Rate 0: no extension.
        assert!(a.body_overdue(1000, 1000, 0));
        // Nobody waits (the handler has not read yet): not late.
        a.waiting_for_body(false);
        assert!(!a.body_overdue(10_000, 1000, 4096));
        a.body_started(5000);
        assert!(a.body_overdue(3000, 1000, 4096), "a running clock is kept");
        a.body_done();
        assert!(!a.body_overdue(100_000, 1000, 4096));
    }

    #[test]
    fn bytes_outside_a_request_start_a_head_and_inside_do_not() {
        let a = Activity::default();
        a.opened(1, 1000);
        assert_eq!(a.head_pending_since(), Some(1000));
        assert!(!a.head_begun(), "an open connection has sent nothing yet");
        a.received(10, 2500);
        assert!(a.head_begun());
        assert_eq!(
            a.head_pending_since(),
            Some(1000),
            "the opening's clock is kept"
        );
        a.head_done();
        assert_eq!((a.head_pending_since(), a.head_begun()), (None, false));
        a.received(5, 3000);
        assert!(!a.head_begun(), "a request's bytes are not a head");
        a.response_done();
        a.received(5, 4000);
        assert_eq!((a.head_pending_since(), a.head_begun()), (Some(4000), true));
        a.sent(7, 6200);
        assert_eq!((a.bytes(), a.last_active()), ((20, 7), 6));
    }
}
