//! What the connections of one HTTP server share in a worker ([`HttpShared`], with
//! [`TlsShared`] for `https://`), and the worker registry's view of one connection
//! ([`HttpConn`]): its counters, its drain and destroy flags, and the 408 for a head that
//! arrives too slowly. Both of an HTTP connection's paths (Brisk's own HTTP/1.1 in `h1`, and
//! hyper in `conn`) work on these.

use std::cell::Cell;
use std::future::Future;
use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::Arc;
use std::task::Waker;
use std::time::Duration;

use super::activity::Activity;
use super::answers::{Answers, Recording};
use super::conn_state::{ConnState, Transport};
use super::head_timeout::TIMEOUT_408;
use super::limits::HttpLimits;
use crate::limits::Limits;
use crate::runtime::{ConnView, WorkerCtx};
use crate::stats::{ConnectionInfo, Stats};

/// What every connection of one HTTP server in one worker shares.
pub(crate) struct HttpShared {
    pub worker: Rc<WorkerCtx>,
    /// The handler, and how its responses are compressed (after it, in the same future).
    pub answers: Answers,
    pub limits: Limits,
    pub http: HttpLimits,
    pub builder: hyper::server::conn::http1::Builder,
    pub tls: Option<TlsShared>,
    /// This worker's access log, when the server has one.
    pub access_log: Option<super::access_log::AccessLogWriter>,
    /// What else is recorded of each request.
    pub recording: Recording,
}

/// What an `https://` server adds: the TLS acceptor, and HTTP/2 settings for clients that
/// pick `h2` through ALPN.
pub(crate) struct TlsShared {
    pub(super) acceptor: tokio_rustls::TlsAcceptor,
    /// Time a client has to complete its TLS handshake.
    pub(super) handshake_timeout: Duration,
    pub(super) h2: hyper::server::conn::http2::Builder<LocalExec>,
}

impl TlsShared {
    pub(crate) fn new(
        config: Arc<rustls::ServerConfig>,
        http: &HttpLimits,
        handshake_timeout: Duration,
    ) -> Self {
        let mut h2 = hyper::server::conn::http2::Builder::new(LocalExec);
        h2.timer(hyper_util::rt::TokioTimer::new())
            .max_header_list_size(http.max_header_bytes.try_into().unwrap_or(u32::MAX));
        TlsShared {
            acceptor: config.into(),
            handshake_timeout,
            h2,
        }
    }
}

/// Runs HTTP/2 streams as tasks on the worker's own thread.
#[derive(Clone, Copy)]
pub(crate) struct LocalExec;

impl<F> hyper::rt::Executor<F> for LocalExec
where
    F: Future + 'static,
    F::Output: 'static,
{
    fn execute(&self, fut: F) {
        tokio::task::spawn_local(fut);
    }
}

/// The registry's view of an HTTP connection.
pub(super) struct HttpConn {
    pub(super) id: u64,
    pub(super) remote: SocketAddr,
    pub(super) opened: u32,
    pub(super) activity: Arc<Activity>,
    pub(super) worker: Rc<WorkerCtx>,
    pub(super) requests: Cell<u64>,
    /// Its life (serving, draining, destroyed) and transport ([`super::conn_state`]).
    pub(super) state: ConnState,
    /// The connection task, woken by `drain` and `destroy`.
    pub(super) waker: Cell<Option<Waker>>,
    /// The `request{conn=N}` span its handlers run in (disabled when the server has no
    /// request spans or no subscriber wants them): one per connection, entered once per
    /// wake-up of the connection's task (by each HTTP/2 stream's task for its own polls), so
    /// a request makes no span of its own.
    pub(super) span: tracing::Span,
}

impl HttpConn {
    pub(super) fn wake(&self) {
        if let Some(w) = self.waker.take() {
            w.wake();
        }
    }

    /// Whether a request head has been pending for `limit_ms` or more.
    pub(super) fn head_overdue(&self, now_ms: u64, limit_ms: u64) -> bool {
        let since = self.activity.head_pending_since();
        self.state.times_requests() && since.is_some_and(|t| now_ms.saturating_sub(t) >= limit_ms)
    }
    /// Whether a request body that is being waited for is overdue (see
    /// [`Activity::body_overdue`](super::activity::Activity::body_overdue)).
    pub(super) fn body_overdue(&self, now_ms: u64, limit_ms: u64, min_rate: u64) -> bool {
        self.state.times_requests() && self.activity.body_overdue(now_ms, limit_ms, min_rate)
    }

    /// Answers (408) and closes a connection whose request head is overdue.
    pub(super) fn reject_slow_head(&self) {
        // A client that stalled in the middle of a request head gets an answer; one that
        // sent nothing (or is mid-TLS-handshake) is just closed.
        let partial = self.activity.head_begun();
        self.reject_late(partial, "request head");
    }

    /// Answers (408) and closes a connection whose request body is overdue.
    pub(super) fn reject_slow_body(&self) {
        self.reject_late(true, "request body");
    }

    /// Closes a connection that did not send `what` in time, answering 408 first if
    /// `answer`.
    fn reject_late(&self, answer: bool, what: &str) {
        if self.state.is_destroyed() {
            return;
        }
        if self.activity.owes_408() {
            // The 408 had one sweep period to go out through TLS: enough.
            self.destroy();
            return;
        }
        let transport = self.state.transport();
        if answer && transport == Transport::TlsH1 {
            tracing::debug!(conn = self.id, remote = %self.remote, "{what} timed out: 408");
            Stats::add(&self.worker.stats.rejected, 1);
            self.activity.owe_408();
            self.wake();
            return;
        }
        if let (Transport::Plain(fd), true) = (transport, answer) {
            // SAFETY: `fd` belongs to this connection, which is open until `destroy` below
            // lets its task end; no response is in progress while a head or a body that
            // is timed is read (a response under way stops a body's clock).
            unsafe {
                libc::send(
                    fd,
                    TIMEOUT_408.as_ptr().cast(),
                    TIMEOUT_408.len(),
                    libc::MSG_NOSIGNAL,
                )
            };
            tracing::debug!(conn = self.id, remote = %self.remote, "{what} timed out: 408");
        } else {
            tracing::debug!(conn = self.id, remote = %self.remote, "no {what} in time");
        }
        Stats::add(&self.worker.stats.rejected, 1);
        self.destroy();
    }
}

impl ConnView for HttpConn {
    fn info(&self) -> ConnectionInfo {
        let bytes = self.activity.bytes();
        self.worker
            .connection_info(self.id, &self.remote, bytes, self.opened)
    }
    fn drain(&self) {
        self.state.drain();
        self.wake();
    }
    fn idle_secs(&self, now: u32) -> u32 {
        now.saturating_sub(self.activity.last_active())
    }
    fn destroy(&self) {
        self.state.destroy();
        self.wake();
    }
    fn as_any(&self) -> &dyn std::any::Any {
        self
    }
}
