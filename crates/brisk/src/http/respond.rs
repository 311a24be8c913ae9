//! Running the handler for one request, on either of a connection's paths (Brisk's own
//! HTTP/1.1, or hyper): the body limit, the request count, errors and panics turned into
//! answers, and the busy mark kept until the response is under way.

use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::task::Poll;

use futures_util::FutureExt;
use http::{header, HeaderValue, Request, Response, StatusCode};

use super::access_log::RequestLine;
use super::io::Activity;
use super::state::{HttpConn, HttpShared};
use super::{Body, RequestBody};
use crate::response_counts::MethodRow;
use crate::runtime::handler::panic_message;
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

/// A plain-text answer after which the connection closes: for input the server refuses
/// (counted in `rejected`) and for a handler that panicked.
pub(super) fn closing(code: StatusCode, text: &'static str) -> Response<Body> {
    let mut r = status(code, text);
    r.headers_mut()
        .insert(header::CONNECTION, HeaderValue::from_static("close"));
    r
}

/// Runs the handler for one request (see [`answer`]) and logs it to the access log, if the
/// server has one.
pub(super) async fn respond(
    shared: &HttpShared,
    conn: &HttpConn,
    req: Request<RequestBody>,
) -> Response<Body> {
    let began = shared.latency_histograms.then(std::time::Instant::now);
    let worker = &shared.worker;
    let measured = || {
        if let Some(began) = began {
            worker.record_latency(&worker.stats.http_latency, began);
        }
    };
    let method = MethodRow::of(req.method());
    let counted = |resp: &Response<Body>| {
        measured();
        worker
            .stats
            .http_responses
            .count(method, resp.status().as_u16());
    };
    let Some(log) = &shared.access_log else {
        let resp = answer(shared, conn, req).await;
        counted(&resp);
        return resp;
    };
    let line = RequestLine::of(&req);
    let resp = answer(shared, conn, req).await;
    counted(&resp);
    log.log(&line, &resp, conn.remote, worker.info.id, conn.id);
    resp
}

/// Runs the handler for one request, refusing ambiguous framing (400), enforcing the body
/// limit and counting errors.
async fn answer(
    shared: &HttpShared,
    conn: &HttpConn,
    mut req: Request<RequestBody>,
) -> Response<Body> {
    req.body_mut().set_remote_addr(conn.remote);
    let stats = &shared.worker.stats;
    Stats::add(&stats.total_request, 1);
    conn.activity.head_done();
    if req.body().timed_activity().is_some() {
        conn.activity.body_started(shared.worker.io.now_ms());
        // Nobody waits for it until the handler reads it.
        conn.activity.body_waiting.store(false, Relaxed);
    }
    let n = conn.requests.get() + 1;
    conn.requests.set(n);
    if let Some(why) = super::framing::violation(&req) {
        Stats::add(&stats.rejected, 1);
        return closing(StatusCode::BAD_REQUEST, why);
    }
    let max_body = shared.limits.max_package_size;
    let declared = req
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|len| len > max_body as u64) {
        Stats::add(&stats.rejected, 1);
        return closing(StatusCode::PAYLOAD_TOO_LARGE, "request body too large\n");
    }
    // What compressing the answer needs from the request, taken before the handler has it.
    #[cfg(feature = "compression")]
    let compress = shared.compression.as_ref().map(|c| {
        let accept = req.headers().get(header::ACCEPT_ENCODING).cloned();
        (c, req.method().clone(), accept)
    });
    // HTTP/1.1 handlers run in the connection's task, which enters the connection's span
    // around each of its polls; HTTP/2 streams are tasks of their own.
    let in_stream_task = req.version() == http::Version::HTTP_2;
    let mut handling = (shared.handler)(req);
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
    let mut resp = match outcome {
        #[cfg(feature = "compression")]
        Ok(Ok(resp)) => match compress {
            Some((c, method, accept)) => c.apply(&method, accept.as_ref(), resp),
            None => resp,
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
        .is_some_and(|max| n >= max);
    if last || conn.draining.get() {
        resp.headers_mut()
            .insert(header::CONNECTION, HeaderValue::from_static("close"));
    }
    resp
}
