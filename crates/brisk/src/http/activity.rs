//! Where an HTTP/1.1 connection stands: between requests, reading a request head, handling a
//! request (its body perhaps still arriving, perhaps waited for), and whether it owes a 408;
//! with its byte counts and last activity. One type, every transition a method of this file:
//! the socket adapter, Brisk's own path, hyper's service, the request body, TLS and the
//! timeout sweep each call the transition they make, and none writes a field.
//!
//! Atomics (relaxed): the worker's registry reads them from the sweep while the connection's
//! task writes them, on one thread; `Arc` because hyper's I/O types must be `Send`. The
//! phase is a [`Phase`] packed in one of them, so its legal states are the enum's.

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering::Relaxed};

/// Where a connection stands in its request cycle.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Between requests, no head timer running (the idle timeout applies).
    Idle,
    /// Waiting for a request head since `since_ms` (the worker's clock); `begun`: bytes of
    /// it have arrived, so a head timeout answers 408.
    Head { since_ms: u64, begun: bool },
    /// A request is being handled: bytes now are its own, not a new head. `body`: the
    /// request body still arriving and timed, if one is.
    Handling { body: Option<BodyClock> },
}

/// A request body's clock: since when it is timed, and whether someone (the handler, or
/// Brisk's own path) waits for bytes of it that have not come; only then does a late body
/// count against the client.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct BodyClock {
    since_ms: u64,
    waiting: bool,
}

impl Phase {
    const IDLE: u64 = 0;
    const HEAD: u64 = 1;
    const HANDLING: u64 = 2;
    /// `Head`: begun. `Handling`: a body clock runs.
    const FLAG_A: u64 = 1 << 2;
    /// `Handling` with a body clock: someone waits.
    const FLAG_B: u64 = 1 << 3;
    const TIME_SHIFT: u32 = 4;

    fn pack(self) -> u64 {
        match self {
            Phase::Idle => Self::IDLE,
            Phase::Head { since_ms, begun } => {
                Self::HEAD | (since_ms << Self::TIME_SHIFT) | if begun { Self::FLAG_A } else { 0 }
            }
            Phase::Handling { body: None } => Self::HANDLING,
            Phase::Handling { body: Some(b) } => {
                let waiting = if b.waiting { Self::FLAG_B } else { 0 };
                Self::HANDLING | Self::FLAG_A | waiting | (b.since_ms << Self::TIME_SHIFT)
            }
        }
    }

    fn unpack(bits: u64) -> Phase {
        let since_ms = bits >> Self::TIME_SHIFT;
        match bits & 3 {
            Self::HEAD => Phase::Head {
                since_ms,
                begun: bits & Self::FLAG_A != 0,
            },
            Self::HANDLING if bits & Self::FLAG_A != 0 => Phase::Handling {
                body: Some(BodyClock {
                    since_ms,
                    waiting: bits & Self::FLAG_B != 0,
                }),
            },
            Self::HANDLING => Phase::Handling { body: None },
            _ => Phase::Idle,
        }
    }
}

/// Per-connection counters and state shared between the socket adapter and the registry.
#[derive(Debug, Default)]
pub(crate) struct Activity {
    bytes_in: AtomicU64,
    bytes_out: AtomicU64,
    /// The worker's clock in seconds at the last byte in or out.
    last_active: AtomicU32,
    /// The [`Phase`], packed.
    phase: AtomicU64,
    /// `bytes_in` when the running body clock began: what arrives since extends its time.
    body_base_bytes: AtomicU64,
    /// Under TLS: the head (or body) timed out; the connection's reader answers 408 through
    /// the TLS session, then ends the connection (`HeadTimeoutIo`). Set once, beside the
    /// phase it was late in (the next sweep, finding it still late, ends the connection).
    answer_408: AtomicBool,
}

impl Activity {
    fn phase(&self) -> Phase {
        Phase::unpack(self.phase.load(Relaxed))
    }

    fn set(&self, phase: Phase) {
        self.phase.store(phase.pack(), Relaxed);
    }

    /// A new connection at `now_s` / `now_ms`: it has the head timeout to send its first
    /// request.
    pub(crate) fn opened(&self, now_s: u32, now_ms: u64) {
        self.last_active.store(now_s, Relaxed);
        self.set(Phase::Head {
            since_ms: now_ms,
            begun: false,
        });
    }

    /// `n` bytes came off the socket at `now_ms`: outside a request they start a head (and
    /// its timer, unless the connection's opening started it).
    pub(crate) fn received(&self, n: u64, now_ms: u64) {
        self.bytes_in.fetch_add(n, Relaxed);
        self.last_active.store((now_ms / 1000) as u32, Relaxed);
        match self.phase() {
            Phase::Idle => self.set(Phase::Head {
                since_ms: now_ms,
                begun: true,
            }),
            Phase::Head {
                since_ms,
                begun: false,
            } => self.set(Phase::Head {
                since_ms,
                begun: true,
            }),
            Phase::Head { begun: true, .. } | Phase::Handling { .. } => {}
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
        if let Phase::Head { since_ms, .. } = self.phase() {
            self.set(Phase::Head {
                since_ms,
                begun: false,
            });
        }
    }

    /// Decrypted bytes arrived: outside a request they start a head. (The socket-level mark
    /// cannot tell: the handshake's last bytes and the first request often arrive together.)
    pub(crate) fn decrypted(&self) {
        if let Phase::Head { since_ms, .. } = self.phase() {
            self.set(Phase::Head {
                since_ms,
                begun: true,
            });
        }
    }

    /// A head was parsed: the request is the handler's now (no body pending yet).
    pub(crate) fn head_done(&self) {
        self.set(Phase::Handling { body: None });
    }

    /// A request with a body was handed to its handler at `now_ms`: the body's clock runs,
    /// but nobody waits for it until the handler reads it.
    pub(crate) fn body_pending(&self, now_ms: u64) {
        self.body_started(now_ms);
        self.waiting_for_body(false);
    }

    /// A request body began to be waited for at `now_ms` (its clock kept if one runs): the
    /// request is being handled. Brisk's own path calls it for a head whose body is still
    /// arriving: a body that trickles in is a slow body, not a slow head.
    pub(crate) fn body_started(&self, now_ms: u64) {
        let since_ms = match self.phase() {
            Phase::Handling { body: Some(b) } => b.since_ms,
            _ => {
                self.body_base_bytes
                    .store(self.bytes_in.load(Relaxed), Relaxed);
                now_ms
            }
        };
        let body = Some(BodyClock {
            since_ms,
            waiting: true,
        });
        self.set(Phase::Handling { body });
    }

    /// The handler asked for body bytes and none were there (`true`), or got some (`false`).
    pub(crate) fn waiting_for_body(&self, waiting: bool) {
        if let Phase::Handling { body: Some(b) } = self.phase() {
            let body = Some(BodyClock { waiting, ..b });
            self.set(Phase::Handling { body });
        }
    }

    /// The request body is read whole, or nobody waits for it any more.
    pub(crate) fn body_done(&self) {
        if let Phase::Handling { body: Some(_) } = self.phase() {
            self.set(Phase::Handling { body: None });
        }
    }

    /// The response is in hyper's hands, or sent: bytes that come now start the next head.
    pub(crate) fn response_done(&self) {
        if let Phase::Handling { .. } = self.phase() {
            self.set(Phase::Idle);
        }
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
        matches!(self.phase(), Phase::Head { begun: true, .. })
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
        let Phase::Handling {
            body:
                Some(BodyClock {
                    since_ms,
                    waiting: true,
                }),
        } = self.phase()
        else {
            return false;
        };
        let received = self
            .bytes_in
            .load(Relaxed)
            .saturating_sub(self.body_base_bytes.load(Relaxed));
        let earned_ms = (received.saturating_mul(1000))
            .checked_div(min_rate)
            .unwrap_or(0);
        now_ms.saturating_sub(since_ms) >= limit_ms.saturating_add(earned_ms)
    }

    /// Since when the head being read has been pending, if one is.
    pub(crate) fn head_pending_since(&self) -> Option<u64> {
        match self.phase() {
            Phase::Head { since_ms, .. } => Some(since_ms),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{Activity, BodyClock, Phase};

    #[test]
    fn every_phase_survives_its_packing() {
        let body = |since_ms, waiting| Some(BodyClock { since_ms, waiting });
        for phase in [
            Phase::Idle,
            Phase::Head {
                since_ms: 0,
                begun: false,
            },
            Phase::Head {
                since_ms: 1 << 50,
                begun: true,
            },
            Phase::Handling { body: None },
            Phase::Handling {
                body: body(0, false),
            },
            Phase::Handling {
                body: body(123_456_789, true),
            },
        ] {
            assert_eq!(Phase::unpack(phase.pack()), phase);
        }
    }

    #[test]
    fn a_late_head_under_tls_stays_late_while_its_408_is_owed() {
        let a = Activity::default();
        a.opened(0, 10);
        a.received(3, 20);
        a.owe_408();
        assert!(a.owes_408());
        assert_eq!(
            a.head_pending_since(),
            Some(10),
            "the next sweep still finds it late"
        );
    }

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
