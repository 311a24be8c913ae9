//! The metrics listener: a small HTTP/1.1 server in the master (see `App::metrics`) that
//! answers `GET /metrics` with the Prometheus exposition and `GET /status` with the status
//! page, to requests with the bearer token if the app set one (`App::metrics_token`), and
//! `GET /healthz` (liveness) and `GET /readyz` (readiness) to anyone, for load balancers and
//! Kubernetes probes: 200 or 503 with a line that says why (with a token set, why a probe
//! fails is said only to requests that carry it: the line can hold a database's error). It
//! knows the master only through [`Observed`], like the control socket knows it through its
//! own trait.
//!
//! `/readyz` runs the app's readiness checks in every worker (a database query, say) at most
//! once a second: requests within a second of a check, or while one runs, share its answer.
//! At most [`MAX_CONNECTIONS`] connections are served at once; further ones are closed at
//! accept, so a flood cannot take the master's descriptors.

use std::convert::Infallible;
use std::future::Future;
use std::rc::Rc;
use std::time::Duration;

use bytes::Bytes;
use http::{header, HeaderValue, Method, Request, Response, StatusCode};
use http_body_util::Full;
use hyper_util::rt::{TokioIo, TokioTimer};

use crate::error::{Error, Result};

/// How long a client may take to send a request head.
const HEAD_TIMEOUT: Duration = Duration::from_secs(10);

/// How long a readiness answer is given again without asking the workers.
const READINESS_FRESH: Duration = Duration::from_secs(1);

/// The most connections the listener serves at once.
pub(crate) const MAX_CONNECTIONS: usize = 256;

/// The last readiness answer and when it was found (`None` before the first): held while
/// the workers are asked, so that requests meanwhile wait for that answer.
type LastReadiness = tokio::sync::Mutex<Option<(std::time::Instant, (bool, String))>>;

/// `master`'s readiness: at once when it is stopping or a worker is not ready; else its
/// workers' checks, run at most once per [`READINESS_FRESH`].
async fn readiness<O: Observed>(master: &O, last: &LastReadiness) -> (bool, String) {
    if let Some(why) = master.not_ready() {
        return (false, why);
    }
    let mut last = last.lock().await;
    if let Some((at, answer)) = &*last {
        if at.elapsed() < READINESS_FRESH {
            return answer.clone();
        }
    }
    let answer = master.readiness().await;
    *last = Some((std::time::Instant::now(), answer.clone()));
    answer
}

/// A connection being served: counted while it lives.
struct Served(Rc<std::cell::Cell<usize>>);

impl Drop for Served {
    fn drop(&mut self) {
        self.0.set(self.0.get() - 1);
    }
}

/// What the metrics listener asks of the master.
pub(crate) trait Observed: 'static {
    /// The exposition of the app's metrics, from fresh snapshots of the workers.
    fn metrics(&self) -> impl Future<Output = String>;
    /// The status page's HTML, from fresh snapshots of the workers.
    fn status_page(&self) -> impl Future<Output = String>;
    /// Whether the master and every worker answer (`/healthz`), and what to say.
    fn health(&self) -> impl Future<Output = (bool, String)>;
    /// Why the app takes no traffic, found without asking the workers: a stop begun, or a
    /// worker not started or not ready yet; `None` when none of these.
    fn not_ready(&self) -> Option<String>;
    /// Whether the app's readiness checks pass in every worker (`/readyz`, once
    /// [`not_ready`](Self::not_ready) found nothing); and what to say.
    fn readiness(&self) -> impl Future<Output = (bool, String)>;
}

/// Serves `listener` until the returned handle is aborted or dropped with the runtime.
pub(crate) fn serve<O: Observed>(
    master: Rc<O>,
    listener: std::net::TcpListener,
    token: Option<String>,
) -> Result<tokio::task::JoinHandle<()>> {
    let token: Option<Rc<str>> = token.map(Into::into);
    let cannot = |e| Error::io("cannot serve the metrics listener", e);
    listener.set_nonblocking(true).map_err(cannot)?;
    let listener = tokio::net::TcpListener::from_std(listener).map_err(cannot)?;
    let last_readiness: Rc<LastReadiness> = Rc::default();
    let open = Rc::new(std::cell::Cell::new(0usize));
    Ok(tokio::task::spawn_local(async move {
        loop {
            let stream = match listener.accept().await {
                Ok((stream, _)) => stream,
                Err(e) => {
                    // Out of file descriptors, most likely: wait for some to close.
                    tracing::warn!("metrics listener: cannot accept: {e}");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            };
            if open.get() >= MAX_CONNECTIONS {
                tracing::debug!(
                    "metrics listener: {MAX_CONNECTIONS} connections open; closing a new one"
                );
                drop(stream);
                continue;
            }
            open.set(open.get() + 1);
            let served = Served(open.clone());
            let (master, token, last) = (master.clone(), token.clone(), last_readiness.clone());
            tokio::task::spawn_local(async move {
                let _served = served;
                let service = hyper::service::service_fn(move |req| {
                    let (master, token, last) = (master.clone(), token.clone(), last.clone());
                    async move {
                        let probe = matches!(req.uri().path(), "/healthz" | "/readyz");
                        let allowed = authorized(token.as_deref(), &req);
                        if !probe && !allowed {
                            return Ok::<_, Infallible>(unauthorized());
                        }
                        Ok::<_, Infallible>(answer(&*master, &last, req, allowed).await)
                    }
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .timer(TokioTimer::new())
                    .header_read_timeout(HEAD_TIMEOUT)
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    }))
}

/// The answer to `req`; `detailed`: a probe that fails may say why.
async fn answer<O: Observed, B>(
    master: &O,
    last_readiness: &LastReadiness,
    req: Request<B>,
    detailed: bool,
) -> Response<Full<Bytes>> {
    if req.method() != Method::GET && req.method() != Method::HEAD {
        let mut r = text(StatusCode::METHOD_NOT_ALLOWED, "only GET and HEAD\n");
        r.headers_mut()
            .insert(header::ALLOW, HeaderValue::from_static("GET, HEAD"));
        return r;
    }
    match req.uri().path() {
        "/metrics" => {
            let mut r = Response::new(Full::new(Bytes::from(master.metrics().await)));
            r.headers_mut().insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static(super::metrics::CONTENT_TYPE),
            );
            r
        }
        "/status" => {
            let mut r = Response::new(Full::new(Bytes::from(master.status_page().await)));
            r.headers_mut().insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static("text/html; charset=utf-8"),
            );
            r
        }
        "/healthz" => probe(master.health().await, detailed),
        "/readyz" => probe(readiness(master, last_readiness).await, detailed),
        "/" => text(
            StatusCode::OK,
            "Brisk: /metrics (Prometheus), /status (the status page), /healthz, /readyz\n",
        ),
        _ => text(
            StatusCode::NOT_FOUND,
            "not found: try /metrics or /status\n",
        ),
    }
}

/// Whether `req` carries `Authorization: Bearer TOKEN` (anything does without a token),
/// compared in a time that does not depend on where they differ.
fn authorized<B>(token: Option<&str>, req: &Request<B>) -> bool {
    let Some(token) = token else {
        return true;
    };
    let given = req
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| {
            v.strip_prefix("Bearer ")
                .or_else(|| v.strip_prefix("bearer "))
        })
        .unwrap_or("");
    let (given, token) = (given.trim().as_bytes(), token.as_bytes());
    given.len() == token.len()
        && given
            .iter()
            .zip(token)
            .fold(0u8, |acc, (a, b)| acc | (a ^ b))
            == 0
}

fn unauthorized() -> Response<Full<Bytes>> {
    let mut r = text(
        StatusCode::UNAUTHORIZED,
        "the metrics need Authorization: Bearer <token>\n",
    );
    r.headers_mut()
        .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
    r
}

/// A probe's answer: 200 or 503, with the line that says why (a failure's only when
/// `detailed`).
fn probe((ok, why): (bool, String), detailed: bool) -> Response<Full<Bytes>> {
    match (ok, detailed) {
        (true, _) | (false, true) => {
            let code = match ok {
                true => StatusCode::OK,
                false => StatusCode::SERVICE_UNAVAILABLE,
            };
            let mut r = text(code, "");
            *r.body_mut() = Full::new(Bytes::from(why));
            r
        }
        (false, false) => text(
            StatusCode::SERVICE_UNAVAILABLE,
            "failing: send the metrics token (Authorization: Bearer) to see why\n",
        ),
    }
}

fn text(code: StatusCode, body: &'static str) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(Bytes::from_static(body.as_bytes())));
    *r.status_mut() = code;
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    r
}
