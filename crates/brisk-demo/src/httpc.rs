//! Report R4's three HTTP client modes against an upstream the demo serves itself
//! (`/upstream?ms=N`: answers after N ms), so they run with nothing else installed:
//!
//! - `/httpc/plain?n=5&ms=10`: `n` calls one after another, each on a new connection;
//! - `/httpc/reuse?n=5&ms=10`: the same on one kept-alive connection;
//! - `/httpc/multi?n=5&ms=10`: the `n` calls at once.
//!
//! Each answers `{"mode":…,"calls":n,"bodies":[…]}`; an upstream that is down answers 502 and
//! one slower than the client's timeout 504 (`brisk::http::client::ClientError`).

use std::time::Duration;

use brisk::http::client::{ClientError, ClientOptions, ClientResponse, HttpClient};
use brisk::http::{Body, IntoResponse};
use http::{header, HeaderValue, Response};

/// The most calls one request may ask for.
const MAX_CALLS: usize = 50;
/// The longest upstream delay one request may ask for.
const MAX_DELAY_MS: u64 = 10_000;

/// The client routes and the upstream route.
#[derive(Clone)]
pub(crate) struct Httpc {
    /// `http://host:port` of the upstream.
    upstream: String,
    /// A client that opens a connection per request.
    fresh: HttpClient,
    /// A client that keeps connections.
    pooled: HttpClient,
}

impl Httpc {
    /// The routes, calling `upstream` (`http://host:port`) with `timeout` per call.
    pub(crate) fn new(upstream: &str, timeout: Duration) -> Self {
        let options = ClientOptions {
            timeout,
            ..ClientOptions::default()
        };
        let fresh = HttpClient::new(ClientOptions {
            max_idle_per_host: 0,
            ..options.clone()
        });
        Httpc {
            upstream: upstream.trim_end_matches('/').to_string(),
            fresh,
            pooled: HttpClient::new(options),
        }
    }

    /// Answers `call`.
    pub(crate) async fn answer(&self, call: Call, query: Option<&str>) -> Response<Body> {
        let calls = param(query, "n").unwrap_or(5).clamp(1, MAX_CALLS as u64) as usize;
        let ms = param(query, "ms").unwrap_or(10).min(MAX_DELAY_MS);
        let url = format!("{}/upstream?ms={ms}", self.upstream);
        let (mode, results) = match call {
            Call::Upstream => {
                tokio::time::sleep(Duration::from_millis(ms)).await;
                return json(format!(r#"{{"waited_ms":{ms}}}"#));
            }
            Call::Plain => ("plain", one_by_one(&self.fresh, &url, calls).await),
            Call::Reuse => ("reuse", one_by_one(&self.pooled, &url, calls).await),
            Call::Multi => {
                let requests = (0..calls).map(|_| self.pooled.get(&url));
                (
                    "multi",
                    self.pooled.multi(requests).await.into_iter().collect(),
                )
            }
        };
        match results {
            Ok(responses) => {
                let bodies: Vec<serde_json::Value> = (responses.iter())
                    .map(|r| r.json().unwrap_or_else(|_| r.text().into()))
                    .collect();
                let answer = serde_json::json!({"mode": mode, "calls": calls, "bodies": bodies});
                json(answer.to_string())
            }
            Err(e) => e.into_response(),
        }
    }
}

/// One of these routes, by its path (found before any future is made).
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Call {
    /// `/upstream`: the slow upstream itself.
    Upstream,
    /// `/httpc/plain`: a new connection per call.
    Plain,
    /// `/httpc/reuse`: pooled connections, one call after another.
    Reuse,
    /// `/httpc/multi`: pooled connections, all calls at once.
    Multi,
}

impl Call {
    /// The route `path` names, if any.
    pub(crate) fn of(path: &str) -> Option<Call> {
        Some(match path {
            "/upstream" => Call::Upstream,
            "/httpc/plain" => Call::Plain,
            "/httpc/reuse" => Call::Reuse,
            "/httpc/multi" => Call::Multi,
            _ => return None,
        })
    }
}

/// `calls` GETs of `url`, each after the one before.
async fn one_by_one(
    client: &HttpClient,
    url: &str,
    calls: usize,
) -> Result<Vec<ClientResponse>, ClientError> {
    let mut responses = Vec::with_capacity(calls);
    for _ in 0..calls {
        responses.push(client.get(url).send().await?);
    }
    Ok(responses)
}

/// The number after `name=` in `query`.
fn param(query: Option<&str>, name: &str) -> Option<u64> {
    query?
        .split('&')
        .find_map(|kv| kv.strip_prefix(name)?.strip_prefix('=')?.parse().ok())
}

fn json(text: String) -> Response<Body> {
    let mut r = Response::new(Body::from(text));
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    r
}
