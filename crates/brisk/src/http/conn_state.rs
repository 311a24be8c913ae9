//! Where an HTTP connection stands, as types: its [`Life`] (serving, draining, destroyed) and
//! its [`Transport`] (plaintext HTTP/1.1, a TLS handshake, HTTP/1.1 or HTTP/2 over TLS), each
//! moved by the methods of this file only. What a request head's timeout does depends on the
//! transport (a 408 written to the socket, one through the TLS session, none for HTTP/2's
//! streams); what the connection's task does next, on its life.

use std::cell::Cell;
use std::os::fd::RawFd;

/// Where a connection is in its life. It only moves forward: `Serving` → `Draining` →
/// `Destroyed`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum Life {
    /// Serving requests.
    Serving,
    /// The worker is stopping: finish the request in flight (and a grace for a first one),
    /// then close.
    Draining,
    /// Closed at once: its task ends at its next wake-up.
    Destroyed,
}

/// What carries the connection's requests, once it is known.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Transport {
    /// Plaintext HTTP/1.1 (Brisk's own path, then hyper's for what it does not take) on this
    /// socket: a 408 is written to it directly.
    Plain(RawFd),
    /// TLS, its handshake under way: a connection that stalls now is closed, unanswered.
    TlsHandshake,
    /// HTTP/1.1 over TLS: a 408 goes through the session (`HeadTimeoutIo`).
    TlsH1,
    /// HTTP/2 over TLS: no request-head or body timeout (streams come and go on their own).
    H2,
}

/// An HTTP connection's life and transport.
#[derive(Debug)]
pub(super) struct ConnState {
    life: Cell<Life>,
    transport: Cell<Transport>,
}

impl ConnState {
    /// A connection that opens on `transport`, draining at once if the worker is stopping.
    pub(super) fn opened(transport: Transport, stopping: bool) -> Self {
        let life = if stopping {
            Life::Draining
        } else {
            Life::Serving
        };
        ConnState {
            life: Cell::new(life),
            transport: Cell::new(transport),
        }
    }

    fn advance(&self, to: Life) {
        if to > self.life.get() {
            self.life.set(to);
        }
    }

    /// The worker began to stop.
    pub(super) fn drain(&self) {
        self.advance(Life::Draining);
    }

    /// Closes at once.
    pub(super) fn destroy(&self) {
        self.advance(Life::Destroyed);
    }

    /// Whether it is to close once the request in flight is answered.
    #[inline]
    pub(super) fn is_draining(&self) -> bool {
        self.life.get() != Life::Serving
    }

    /// Whether it is to close at once.
    #[inline]
    pub(super) fn is_destroyed(&self) -> bool {
        self.life.get() == Life::Destroyed
    }

    /// What carries its requests.
    #[inline]
    pub(super) fn transport(&self) -> Transport {
        self.transport.get()
    }

    /// The TLS handshake chose `h2` (else HTTP/1.1) by ALPN.
    pub(super) fn tls_done(&self, h2: bool) {
        debug_assert_eq!(self.transport.get(), Transport::TlsHandshake);
        self.transport
            .set(if h2 { Transport::H2 } else { Transport::TlsH1 });
    }

    /// Whether its requests are timed (head and body): all but HTTP/2's.
    #[inline]
    pub(super) fn times_requests(&self) -> bool {
        self.transport.get() != Transport::H2
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_life_only_moves_forward() {
        let s = ConnState::opened(Transport::Plain(3), false);
        assert!(!s.is_draining());
        s.destroy();
        s.drain();
        assert!(
            s.is_destroyed() && s.is_draining(),
            "a drain never undoes a destroy"
        );
        let stopping = ConnState::opened(Transport::TlsHandshake, true);
        assert!(stopping.is_draining() && !stopping.is_destroyed());
    }

    #[test]
    fn http2_is_not_timed_and_the_other_transports_are() {
        for h2 in [false, true] {
            let s = ConnState::opened(Transport::TlsHandshake, false);
            assert!(s.times_requests());
            s.tls_done(h2);
            let expect = if h2 { Transport::H2 } else { Transport::TlsH1 };
            assert_eq!((s.transport(), s.times_requests()), (expect, !h2));
        }
        assert!(ConnState::opened(Transport::Plain(3), false).times_requests());
    }
}
