//! One HTTP connection: hyper's HTTP/1.1 state machine on an [`HttpIo`] (through rustls for
//! `https://`, with HTTP/2 when ALPN picks it), registered with the worker for stats,
//! `connections`, idle timeout and graceful stop.

use std::cell::Cell;
use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::os::fd::{AsRawFd, RawFd};
use std::panic::AssertUnwindSafe;
use std::pin::{pin, Pin};
use std::rc::Rc;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::task::{Poll, Waker};
use std::time::Duration;

use futures_util::FutureExt;
use http::{header, HeaderValue, Request, Response, StatusCode};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;

use super::handler::DynHandler;
use super::head_timeout::HeadTimeoutIo;
use super::io::{Activity, HttpIo};
use super::limits::HttpLimits;
use super::{h1, Body, RequestBody};
use crate::limits::Limits;
use crate::runtime::handler::panic_message;
use crate::runtime::{ConnView, WorkerCtx};
use crate::stats::{ConnectionInfo, Stats};

/// What every connection of one HTTP server in one worker shares.
pub(crate) struct HttpShared {
    pub worker: Rc<WorkerCtx>,
    pub handler: DynHandler,
    pub limits: Limits,
    pub http: HttpLimits,
    pub builder: hyper::server::conn::http1::Builder,
    pub tls: Option<TlsShared>,
}

/// What an `https://` server adds: the TLS acceptor, and HTTP/2 settings for clients that
/// pick `h2` through ALPN.
pub(crate) struct TlsShared {
    acceptor: tokio_rustls::TlsAcceptor,
    /// Time a client has to complete its TLS handshake.
    handshake_timeout: Duration,
    h2: hyper::server::conn::http2::Builder<LocalExec>,
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
    id: u64,
    remote: SocketAddr,
    opened: u32,
    pub(super) activity: Arc<Activity>,
    worker: Rc<WorkerCtx>,
    requests: Cell<u64>,
    /// The worker is stopping: finish the request in flight, then close.
    pub(super) draining: Cell<bool>,
    destroyed: Cell<bool>,
    /// The plaintext socket, for a 408; None under TLS.
    raw_fd: Option<RawFd>,
    /// HTTP/2: no request-head timeout (streams come and go on their own).
    h2: Cell<bool>,
    /// HTTP/1.1 over TLS, past the handshake: reads go through [`HeadTimeoutIo`].
    tls_h1: Cell<bool>,
    /// The connection task, woken by `drain` and `destroy`.
    waker: Cell<Option<Waker>>,
}

impl HttpConn {
    fn wake(&self) {
        if let Some(w) = self.waker.take() {
            w.wake();
        }
    }

    /// Whether a request head has been pending for `limit_ms` or more.
    pub(super) fn head_overdue(&self, now_ms: u64, limit_ms: u64) -> bool {
        let since = self.activity.head_pending_since();
        !self.h2.get() && since.is_some_and(|t| now_ms.saturating_sub(t) >= limit_ms)
    }
    /// Answers (408) and closes a connection whose request head is overdue.
    pub(super) fn reject_slow_head(&self) {
        if self.destroyed.get() {
            return;
        }
        if self.activity.answer_408.load(Relaxed) {
            // The 408 had one sweep period to go out through TLS: enough.
            self.destroy();
            return;
        }
        // A client that stalled in the middle of a request head gets an answer; one that
        // sent nothing (or is mid-TLS-handshake) is just closed.
        let partial = self.activity.partial.load(Relaxed);
        if partial && self.tls_h1.get() {
            tracing::debug!(conn = self.id, remote = %self.remote, "request head timed out: 408");
            Stats::add(&self.worker.stats.rejected, 1);
            self.activity.answer_408.store(true, Relaxed);
            self.wake();
            return;
        }
        if let Some(fd) = self.raw_fd.filter(|_| partial) {
            // SAFETY: `fd` belongs to this connection, which is open until `destroy` below
            // lets its task end; hyper has no response in progress while it reads a head.
            unsafe {
                libc::send(
                    fd,
                    TIMEOUT_408.as_ptr().cast(),
                    TIMEOUT_408.len(),
                    libc::MSG_NOSIGNAL,
                )
            };
            tracing::debug!(conn = self.id, remote = %self.remote, "request head timed out: 408");
        } else {
            tracing::debug!(conn = self.id, remote = %self.remote, "no request head in time");
        }
        Stats::add(&self.worker.stats.rejected, 1);
        self.destroy();
    }
}

impl ConnView for HttpConn {
    fn info(&self) -> ConnectionInfo {
        let a = &self.activity;
        let bytes = (a.bytes_in.load(Relaxed), a.bytes_out.load(Relaxed));
        self.worker
            .connection_info(self.id, &self.remote, bytes, self.opened)
    }
    fn drain(&self) {
        self.draining.set(true);
        self.wake();
    }
    fn idle_secs(&self, now: u32) -> u32 {
        now.saturating_sub(self.activity.last_active.load(Relaxed))
    }
    fn destroy(&self) {
        self.destroyed.set(true);
        self.wake();
    }
    fn as_any(&self) -> &dyn std::any::Any {
        self
    }
}

/// The answer to a request head that took too long.
pub(super) const TIMEOUT_408: &[u8] =
    b"HTTP/1.1 408 Request Timeout\r\nconnection: close\r\ncontent-length: 0\r\n\r\n";

/// Serves one HTTP connection until it closes.
pub(crate) async fn serve(shared: Rc<HttpShared>, stream: TcpStream, remote: SocketAddr) {
    let worker = shared.worker.clone();
    let now = worker.uptime_secs();
    let activity = Arc::new(Activity::default());
    activity.last_active.store(now, Relaxed);
    let conn = Rc::new(HttpConn {
        id: worker.next_connection_id(),
        remote,
        opened: now,
        activity: activity.clone(),
        worker: worker.clone(),
        requests: Cell::new(0),
        draining: Cell::new(worker.is_stopping()),
        destroyed: Cell::new(false),
        raw_fd: shared.tls.is_none().then(|| stream.as_raw_fd()),
        h2: Cell::new(false),
        tls_h1: Cell::new(false),
        waker: Cell::new(None),
    });
    // A new connection has the head timeout to send its first request.
    activity.head_started(worker.io.now_ms());
    worker.register(conn.id, conn.clone());
    let io = HttpIo::new(stream, activity.clone(), worker.io.clone());
    let svc = {
        let (shared, conn) = (shared.clone(), conn.clone());
        hyper::service::service_fn(move |req: Request<Incoming>| {
            let (shared, conn) = (shared.clone(), conn.clone());
            async move {
                let max_body = shared.limits.max_package_size;
                let req = req.map(|b| RequestBody::limited(b, max_body));
                let resp = respond(&shared, &conn, req).await;
                Ok::<_, Infallible>(until_sent(resp, &conn.activity))
            }
        })
    };
    let failed = match &shared.tls {
        // Plaintext: Brisk's own HTTP/1.1 path first, hyper for what it does not take.
        None => match drive(&conn, pin!(h1::serve(&shared, &conn, io)), |_| {}).await {
            // Boxed: a connection that never needs hyper does not carry its state.
            Some(h1::Exit::Handover(io)) => {
                let http = Box::pin(shared.builder.serve_connection(io, svc).with_upgrades());
                drive(&conn, http, |c| c.graceful_shutdown())
                    .await
                    .and_then(Result::err)
            }
            Some(h1::Exit::Closed) | None => None,
        },
        Some(tls) => Box::pin(async {
            // Driven like the connection: a handshake that the head sweep closes first
            // (counted there) ends here, instead of timing out and being counted again.
            let handshake = pin!(tokio::time::timeout(
                tls.handshake_timeout,
                tls.acceptor.accept(io)
            ));
            match drive(&conn, handshake, |_| {}).await? {
                Ok(Ok(stream)) => {
                    // The handshake's bytes were not part of a request head.
                    conn.activity.partial.store(false, Relaxed);
                    if stream.get_ref().1.alpn_protocol() == Some(b"h2") {
                        conn.h2.set(true);
                        let io = TokioIo::new(stream);
                        let http = pin!(tls.h2.serve_connection(io, svc));
                        drive(&conn, http, |c| c.graceful_shutdown()).await
                    } else {
                        conn.tls_h1.set(true);
                        let io = TokioIo::new(HeadTimeoutIo::new(stream, conn.activity.clone()));
                        let http = pin!(shared.builder.serve_connection(io, svc).with_upgrades());
                        drive(&conn, http, |c| c.graceful_shutdown()).await
                    }
                    .and_then(Result::err)
                }
                Ok(Err(e)) => {
                    Stats::add(&worker.stats.rejected, 1);
                    tracing::debug!(conn = conn.id, remote = %conn.remote, error = %e, "TLS handshake failed");
                    None
                }
                Err(_) => {
                    Stats::add(&worker.stats.rejected, 1);
                    tracing::debug!(conn = conn.id, remote = %conn.remote, "TLS handshake timed out");
                    None
                }
            }
        })
        .await,
    };
    if let Some(e) = failed {
        on_connection_error(&worker, &conn, &e);
    }
    worker.unregister(conn.id);
}

/// Runs a connection future until it ends, calling `graceful` once when the worker drains
/// (Brisk's own path watches `draining` itself) and stopping when the connection is
/// destroyed (then: `None`).
///
/// The future comes pinned where the caller keeps it: taken by value, it would be stored
/// twice in the task (once as the argument, once pinned), doubling every connection's size.
async fn drive<P>(
    conn: &HttpConn,
    mut http: Pin<P>,
    graceful: impl Fn(Pin<&mut P::Target>),
) -> Option<<P::Target as Future>::Output>
where
    P: std::ops::DerefMut<Target: Future>,
{
    let mut shutting_down = false;
    std::future::poll_fn(|cx| {
        if conn.destroyed.get() {
            return Poll::Ready(None);
        }
        if conn.draining.get() && !shutting_down {
            shutting_down = true;
            graceful(http.as_mut());
        }
        if let Poll::Ready(r) = http.as_mut().poll(cx) {
            return Poll::Ready(Some(r));
        }
        match conn.waker.take() {
            Some(w) if w.will_wake(cx.waker()) => conn.waker.set(Some(w)),
            _ => conn.waker.set(Some(cx.waker().clone())),
        }
        Poll::Pending
    })
    .await
}

/// Counts and logs how a connection failed.
fn on_connection_error(worker: &WorkerCtx, conn: &HttpConn, e: &hyper::Error) {
    if e.is_timeout() {
        tracing::debug!(conn = conn.id, error = %e, "connection timed out");
    } else if e.is_parse() || e.is_parse_too_large() {
        Stats::add(&worker.stats.rejected, 1);
        tracing::debug!(conn = conn.id, remote = %conn.remote, error = %e, "bad request");
    } else if e.is_user() {
        Stats::add(&worker.stats.throw_exception, 1);
        tracing::warn!(conn = conn.id, error = %e, "response failed");
    } else {
        tracing::debug!(conn = conn.id, error = %e, "connection error");
    }
}

/// Keeps the connection marked busy (bytes that arrive are the request's, not a new head)
/// until the response is in hyper's hands: at once for a body in memory, when the body is
/// dropped for a streamed one (which may still read the request body).
pub(super) fn until_sent(resp: Response<Body>, activity: &Arc<Activity>) -> Response<Body> {
    if !resp.body().is_streaming() {
        activity.busy.store(false, Relaxed);
        return resp;
    }
    let activity = activity.clone();
    resp.map(|body| Body::new(ClearBusyOnDrop { body, activity }))
}

/// A streamed response body that marks its connection idle when it is done.
struct ClearBusyOnDrop {
    body: Body,
    activity: Arc<Activity>,
}

impl Drop for ClearBusyOnDrop {
    fn drop(&mut self) {
        self.activity.busy.store(false, Relaxed);
    }
}

impl http_body::Body for ClearBusyOnDrop {
    type Data = bytes::Bytes;
    type Error = crate::runtime::handler::BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<bytes::Bytes>, Self::Error>>> {
        Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.body.size_hint()
    }
}

fn status(code: StatusCode, text: &'static str) -> Response<Body> {
    let mut r = Response::new(Body::from(text));
    *r.status_mut() = code;
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    r
}

/// Runs the handler for one request, enforcing the body limit and counting errors.
pub(super) async fn respond(
    shared: &HttpShared,
    conn: &HttpConn,
    req: Request<RequestBody>,
) -> Response<Body> {
    let stats = &shared.worker.stats;
    Stats::add(&stats.total_request, 1);
    conn.activity.head_done();
    let n = conn.requests.get() + 1;
    conn.requests.set(n);
    let max_body = shared.limits.max_package_size;
    let declared = req
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|len| len > max_body as u64) {
        Stats::add(&stats.rejected, 1);
        let mut r = status(StatusCode::PAYLOAD_TOO_LARGE, "request body too large\n");
        r.headers_mut()
            .insert(header::CONNECTION, HeaderValue::from_static("close"));
        return r;
    }
    let outcome = AssertUnwindSafe((shared.handler)(req)).catch_unwind().await;
    let mut resp = match outcome {
        Ok(Ok(resp)) => resp,
        Ok(Err(e)) => {
            Stats::add(&stats.throw_exception, 1);
            if e.downcast_ref::<http_body_util::LengthLimitError>()
                .is_some()
            {
                status(StatusCode::PAYLOAD_TOO_LARGE, "request body too large\n")
            } else {
                tracing::warn!(conn = conn.id, error = %e, "handler error");
                status(StatusCode::INTERNAL_SERVER_ERROR, "internal server error\n")
            }
        }
        Err(panic) => {
            Stats::add(&stats.throw_exception, 1);
            tracing::error!(
                conn = conn.id,
                panic = panic_message(&panic),
                "handler panicked"
            );
            let mut r = status(StatusCode::INTERNAL_SERVER_ERROR, "internal server error\n");
            r.headers_mut()
                .insert(header::CONNECTION, HeaderValue::from_static("close"));
            r
        }
    };
    let last = shared
        .http
        .max_requests_per_connection
        .is_some_and(|max| n >= max);
    if last || conn.draining.get() {
        resp.headers_mut()
            .insert(header::CONNECTION, HeaderValue::from_static("close"));
    }
    resp
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The size of the future an `async fn` of three owned arguments returns.
    fn future_size<A, B, C, F: Future>(_: impl Fn(A, B, C) -> F) -> usize {
        std::mem::size_of::<F>()
    }

    /// Every open HTTP connection is one task holding this future, idle or not. Its size
    /// once tripled, unnoticed, when the connection future was stored twice (passed by
    /// value, then pinned) and a request's state was kept inline across the idle wait.
    #[test]
    fn an_http_connection_task_stays_small() {
        let size = future_size(serve);
        println!("connection future: {size} bytes");
        assert!(
            size <= 1024,
            "the HTTP connection future grew to {size} bytes: every open connection pays it"
        );
    }
}
