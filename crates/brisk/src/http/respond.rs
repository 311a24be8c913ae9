//! Running the handler for one request, on either of a connection's paths (Brisk's own
//! HTTP/1.1, or hyper): the body limit, the request count, errors and panics turned into
//! answers, and the busy mark kept until the response is under way.

use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::sync::Arc;
use std::task::Poll;

use std::time::Instant;

use futures_util::future::LocalBoxFuture;
use futures_util::FutureExt;
use http::{header, HeaderValue, Request, Response, StatusCode};

use super::access_log::RequestLine;
use super::activity::Activity;
use super::state::{HttpConn, HttpShared};
use super::{Body, RequestBody};
use crate::response_counts::MethodRow;
use crate::runtime::handler::{panic_message, BoxError};
use crate::stats::Stats;

/// Keeps the connection marked busy (bytes that arrive are the request's, not a new head)
/// until the response is in hyper's hands: at once for a body in memory, when the body is
/// dropped for a streamed one (which may still read the request body).
///
/// A body still arriving is no longer timed from here: the response is under way, and a 408
/// cannot be put in front of it.
pub(super) fn until_sent(resp: Response<Body>, activity: &Arc<Activity>) -> Response<Body> {
    activity.body_done();
    if !resp.body().is_streaming() {
        activity.response_done();
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
        self.activity.response_done();
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

/// A plain-text answer after which the connection closes: for input the server refuses
/// (counted in `rejected`) and for a handler that panicked.
pub(super) fn closing(code: StatusCode, text: &'static str) -> Response<Body> {
    let mut r = status(code, text);
    r.headers_mut()
        .insert(header::CONNECTION, HeaderValue::from_static("close"));
    r
}

/// Runs the handler for one request ([`admit`], then [`finish`]), for hyper's path. Brisk's
/// own HTTP/1.1 path calls the steps itself, so that the only future a request needs is the
/// handler's own.
pub(super) async fn respond(
    shared: &HttpShared,
    conn: &HttpConn,
    req: Request<RequestBody>,
) -> Response<Body> {
    let began = shared.recording.latency_histograms.then(Instant::now);
    // HTTP/1.1 handlers run in the connection's task, which enters the connection's span
    // around each of its polls; HTTP/2 streams are tasks of their own.
    let in_stream_task = req.version() == http::Version::HTTP_2;
    let (admitted, ticket) = admit(shared, conn, req, began);
    let mut handling = match admitted {
        Admitted::Refused(code, why) => return ticket.refused(shared, conn, code, why),
        Admitted::Handling(handling) => handling,
        Admitted::Panicked(panic) => return finish(shared, conn, ticket, Err(panic)),
    };
    let outcome = if conn.span.is_disabled() || !in_stream_task {
        AssertUnwindSafe(handling).catch_unwind().await
    } else {
        // The connection's span, entered while the handler runs (no span per request).
        let in_span = std::future::poll_fn(|cx| {
            let _entered = conn.span.enter();
            handling.as_mut().poll(cx)
        });
        AssertUnwindSafe(in_span).catch_unwind().await
    };
    finish(shared, conn, ticket, outcome)
}

/// The future of a server's handler for one request.
pub(super) type Handling = LocalBoxFuture<'static, Result<Response<Body>, BoxError>>;

/// How a handler ended: its answer, its error, or its panic.
pub(super) type Outcome = std::thread::Result<Result<Response<Body>, BoxError>>;

/// A request taken in by [`admit`].
pub(super) enum Admitted {
    /// Refused before the handler saw it: the status and the reason, answered with
    /// [`Ticket::refused`].
    Refused(StatusCode, &'static str),
    /// The handler's future; its [`Outcome`] goes to [`finish`].
    Handling(Handling),
    /// The handler panicked when called, before it returned its future: an [`Outcome`] for
    /// [`finish`].
    Panicked(Box<dyn std::any::Any + Send>),
}

/// What answering a request needs from it once the handler has it: how to count, time, log
/// and compress the answer, and whether it is the connection's last.
pub(super) struct Ticket {
    /// When the request arrived, if latencies are recorded.
    began: Option<Instant>,
    method: MethodRow,
    /// The access log's view of the request, if the server has a log.
    line: Option<Box<RequestLine>>,
    /// The method and `Accept-Encoding`, if the server compresses.
    #[cfg(feature = "compression")]
    compress: Option<(http::Method, Option<HeaderValue>)>,
    /// The request's number on its connection, from 1.
    n: u64,
    /// The request's span, if it is traced (boxed: most requests are not, and the ticket
    /// moves with every request).
    #[cfg(feature = "otel")]
    span: Option<Box<crate::otel::HttpSpan>>,
}

/// Takes a request in: counts it, refuses ambiguous framing (400) and a declared body over
/// the limit (413), and otherwise calls the handler (a panic in the call itself is caught as
/// one in its future is). `began` is when the request arrived (for the latency
/// histogram and the access log).
pub(super) fn admit(
    shared: &HttpShared,
    conn: &HttpConn,
    mut req: Request<RequestBody>,
    began: Option<Instant>,
) -> (Admitted, Ticket) {
    req.body_mut().set_remote_addr(conn.remote);
    let stats = &shared.worker.stats;
    Stats::add(&stats.total_request, 1);
    conn.activity.head_done();
    if req.body().timed_activity().is_some() {
        conn.activity.body_pending(shared.worker.io.now_ms());
    }
    let n = conn.requests.get() + 1;
    conn.requests.set(n);
    let ticket = Ticket {
        began,
        method: MethodRow::of(req.method()),
        line: shared
            .access_log
            .as_ref()
            .map(|_| Box::new(RequestLine::of(&req, began.unwrap_or_else(Instant::now)))),
        // What compressing the answer needs from the request, taken before the handler has
        // it.
        #[cfg(feature = "compression")]
        compress: shared.answers.compression.as_ref().map(|_| {
            let accept = req.headers().get(header::ACCEPT_ENCODING).cloned();
            (req.method().clone(), accept)
        }),
        n,
        #[cfg(feature = "otel")]
        span: crate::otel::server_span(&req, conn.remote).map(Box::new),
    };
    if let Some(why) = super::framing::rules::violation(&req) {
        Stats::add(&stats.rejected, 1);
        return (Admitted::Refused(StatusCode::BAD_REQUEST, why), ticket);
    }
    let max_body = shared.limits.max_package_size;
    let declared = req
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|len| len > max_body as u64) {
        Stats::add(&stats.rejected, 1);
        let why = "request body too large\n";
        return (
            Admitted::Refused(StatusCode::PAYLOAD_TOO_LARGE, why),
            ticket,
        );
    }
    #[cfg(feature = "otel")]
    if let Some(span) = &ticket.span {
        return (call_traced(shared, span, req), ticket);
    }
    match std::panic::catch_unwind(AssertUnwindSafe(|| (shared.answers.handler)(req))) {
        Ok(handling) => (Admitted::Handling(handling), ticket),
        Err(panic) => (Admitted::Panicked(panic), ticket),
    }
}

/// Calls the handler in the trace of `span`, the request's: what it runs before its first
/// await, and each poll of its future. Out of line: most requests are not traced.
#[cfg(feature = "otel")]
#[cold]
#[inline(never)]
fn call_traced(
    shared: &HttpShared,
    span: &crate::otel::HttpSpan,
    req: Request<RequestBody>,
) -> Admitted {
    use opentelemetry::context::FutureExt as _;
    let cx = span.context();
    let called = {
        let _current = cx.clone().attach();
        std::panic::catch_unwind(AssertUnwindSafe(|| (shared.answers.handler)(req)))
    };
    match called {
        Ok(handling) => Admitted::Handling(Box::pin(handling.with_context(cx))),
        Err(panic) => Admitted::Panicked(panic),
    }
}

/// Turns the handler's outcome into the answer: an error becomes a 500 (a body over the
/// limit a 413), a panic a 500 that closes the connection; the answer is compressed if it
/// should be, marked as the connection's last if it is, then counted, timed and logged.
pub(super) fn finish(
    shared: &HttpShared,
    conn: &HttpConn,
    ticket: Ticket,
    outcome: Outcome,
) -> Response<Body> {
    let stats = &shared.worker.stats;
    let mut resp = match outcome {
        #[cfg(feature = "compression")]
        Ok(Ok(resp)) => match (&shared.answers.compression, &ticket.compress) {
            (Some(c), Some((method, accept))) => c.apply(method, accept.as_ref(), resp),
            _ => resp,
        },
        #[cfg(not(feature = "compression"))]
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
            closing(StatusCode::INTERNAL_SERVER_ERROR, "internal server error\n")
        }
    };
    let last = shared
        .http
        .max_requests_per_connection
        .is_some_and(|max| ticket.n >= max);
    if last || conn.state.is_draining() {
        resp.headers_mut()
            .insert(header::CONNECTION, HeaderValue::from_static("close"));
    }
    ticket.account(shared, conn, resp)
}

impl Ticket {
    /// The answer to a request [`admit`] refused, counted, timed and logged; the connection
    /// closes after it.
    pub(super) fn refused(
        self,
        shared: &HttpShared,
        conn: &HttpConn,
        code: StatusCode,
        why: &'static str,
    ) -> Response<Body> {
        self.account(shared, conn, closing(code, why))
    }

    /// Counts, times and logs `resp`, the request's answer.
    fn account(self, shared: &HttpShared, conn: &HttpConn, resp: Response<Body>) -> Response<Body> {
        let worker = &shared.worker;
        #[cfg(feature = "otel")]
        if let Some(span) = self.span {
            span.end(resp.status().as_u16());
        }
        if let Some(began) = self.began {
            worker.record_latency(&worker.stats.http_latency, began);
        }
        worker
            .stats
            .http_responses
            .count(self.method, resp.status().as_u16());
        if let (Some(log), Some(line)) = (&shared.access_log, &self.line) {
            log.log(line, &resp, conn.remote, worker.info.id, conn.id);
        }
        resp
    }
}
