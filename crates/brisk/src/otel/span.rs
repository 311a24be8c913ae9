//! Starting and ending spans: a request's (server), a call's made within one (client), and
//! the roots of WebSocket messages and queue jobs.

use std::borrow::Cow;
use std::fmt::Display;
use std::future::Future;
use std::net::SocketAddr;

use http::{HeaderMap, Method, Request, Uri};
use opentelemetry::propagation::TextMapPropagator;
use opentelemetry::trace::{SpanBuilder, SpanKind, Status, TraceContextExt, Tracer as _};
use opentelemetry::{Context, KeyValue};
use opentelemetry_http::{HeaderExtractor, HeaderInjector};
use opentelemetry_sdk::propagation::TraceContextPropagator;

use super::traced::Traced;
use super::worker::{with_active, Active};
use super::Op;

/// A sampled HTTP request's span (the server's, or the client's), ended with its answer.
pub(crate) struct HttpSpan(Context);

/// A name and attributes for a span.
pub(crate) struct Described {
    name: Cow<'static, str>,
    kind: SpanKind,
    attributes: Vec<KeyValue>,
}

/// The span of request `req` from `client`, if it is traced: the trace its `traceparent`
/// names (when that one is sampled), or a new one if the draw keeps it.
#[inline]
pub(crate) fn server_span<B>(req: &Request<B>, client: SocketAddr) -> Option<HttpSpan> {
    with_active(|active| {
        let parent = match req.headers().get("traceparent") {
            Some(_) => {
                let cx = TraceContextPropagator::new().extract(&HeaderExtractor(req.headers()));
                let remote = cx.span().span_context().clone();
                match (remote.is_valid(), remote.is_sampled()) {
                    (true, true) => cx,
                    (true, false) => return None,
                    (false, _) => new_trace(active)?,
                }
            }
            None => new_trace(active)?,
        };
        Some(start_server(active, req, client, &parent))
    })
}

/// The server span of `req` under `parent`, and the context it is current in.
#[cold]
#[inline(never)]
fn start_server<B>(
    active: &Active,
    req: &Request<B>,
    client: SocketAddr,
    parent: &Context,
) -> HttpSpan {
    let uri = req.uri();
    let mut attributes = vec![
        KeyValue::new("http.request.method", req.method().as_str().to_string()),
        KeyValue::new("url.path", uri.path().to_string()),
        KeyValue::new("client.address", client.ip().to_string()),
        KeyValue::new("client.port", i64::from(client.port())),
        KeyValue::new("network.protocol.version", version(req.version())),
    ];
    if let Some(query) = uri.query() {
        attributes.push(KeyValue::new("url.query", scrubbed_query(query)));
    }
    if let Some(agent) = req.headers().get(http::header::USER_AGENT) {
        let agent = String::from_utf8_lossy(agent.as_bytes()).into_owned();
        attributes.push(KeyValue::new("user_agent.original", agent));
    }
    let span = active.tracer.build_with_context(
        SpanBuilder::from_name(req.method().as_str().to_string())
            .with_kind(SpanKind::Server)
            .with_attributes(attributes),
        parent,
    );
    HttpSpan(parent.with_span(span))
}

/// An empty parent for a new trace, if the draw keeps one.
fn new_trace(active: &Active) -> Option<Context> {
    active.draw().then(Context::new)
}

fn version(v: http::Version) -> &'static str {
    match v {
        http::Version::HTTP_10 => "1.0",
        http::Version::HTTP_2 => "2",
        http::Version::HTTP_3 => "3",
        _ => "1.1",
    }
}

impl HttpSpan {
    /// The context the request's handler runs in.
    pub(crate) fn context(&self) -> Context {
        self.0.clone()
    }

    /// Ends the span with the answer's `status` (5xx marks it an error).
    #[cold]
    pub(crate) fn end(self, status: u16) {
        let span = self.0.span();
        span.set_attribute(KeyValue::new(
            "http.response.status_code",
            i64::from(status),
        ));
        if status >= 500 {
            span.set_status(Status::error(status.to_string()));
        }
        span.end();
    }
}

/// `fut`, a call `op` describes, in a span of its own if the current span is sampled;
/// an `Err` marks the span an error. Whether it is traced is settled here, when the call
/// is made.
pub(crate) fn call<T, E: Display, F: Future<Output = Result<T, E>>>(
    fut: F,
    op: Op<'_>,
) -> Traced<F> {
    let span = Context::map_current(|cx| cx.span().span_context().is_sampled())
        .then(|| with_active(|active| Some(start(active, &Context::current(), &op))))
        .flatten();
    Traced::new(fut, span)
}

/// `fut`, the handling of a message or job `op` describes, as the root of a new trace if
/// the draw keeps it; an `Err` marks the span an error.
pub(crate) fn root<T, E: Display, F: Future<Output = Result<T, E>>>(
    fut: F,
    op: Op<'_>,
) -> Traced<F> {
    let span = with_active(|active| active.draw().then(|| start(active, &Context::new(), &op)));
    Traced::new(fut, span)
}

/// A span for `op` under `parent`, and the context it is current in.
fn start(active: &Active, parent: &Context, op: &Op<'_>) -> Context {
    let d = describe(op);
    let span = active.tracer.build_with_context(
        SpanBuilder::from_name(d.name)
            .with_kind(d.kind)
            .with_attributes(d.attributes),
        parent,
    );
    parent.with_span(span)
}

/// The client span of an HTTP client request, if a sampled span is current; its
/// `traceparent` goes into `headers`.
pub(crate) fn client_request(
    headers: &mut HeaderMap,
    method: &Method,
    uri: &Uri,
) -> Option<HttpSpan> {
    if !Context::map_current(|cx| cx.span().span_context().is_sampled()) {
        return None;
    }
    with_active(|active| {
        let mut attributes = vec![
            KeyValue::new("http.request.method", method.as_str().to_string()),
            KeyValue::new("url.full", redacted(uri)),
        ];
        if let Some(host) = uri.host() {
            attributes.push(KeyValue::new("server.address", host.to_string()));
        }
        let parent = Context::current();
        let span = active.tracer.build_with_context(
            SpanBuilder::from_name(method.as_str().to_string())
                .with_kind(SpanKind::Client)
                .with_attributes(attributes),
            &parent,
        );
        let cx = parent.with_span(span);
        TraceContextPropagator::new().inject_context(&cx, &mut HeaderInjector(headers));
        Some(HttpSpan(cx))
    })
}

impl HttpSpan {
    /// Ends a client request's span with its `outcome`: the answer's status (4xx and 5xx
    /// mark it an error) or why there was none.
    pub(crate) fn end_client(self, outcome: Result<u16, &dyn std::fmt::Display>) {
        let span = self.0.span();
        match outcome {
            Ok(status) => {
                span.set_attribute(KeyValue::new(
                    "http.response.status_code",
                    i64::from(status),
                ));
                if status >= 400 {
                    span.set_status(Status::error(status.to_string()));
                }
            }
            Err(why) => span.set_status(Status::error(why.to_string())),
        }
        span.end();
    }
}

/// `uri` without its user information, and with the values of its secret-looking query
/// parameters hidden ([`scrubbed_query`]): credentials stay out of traces.
fn redacted(uri: &Uri) -> String {
    let host = uri
        .authority()
        .map_or("", |a| a.as_str().rsplit('@').next().unwrap_or(""));
    let scheme = uri.scheme_str().unwrap_or("http");
    match uri.query() {
        Some(q) => format!("{scheme}://{host}{}?{}", uri.path(), scrubbed_query(q)),
        None => format!("{scheme}://{host}{}", uri.path()),
    }
}

/// Words that mark a query parameter's value as a secret (`?token=…`, `access_token`,
/// `api_key`, `password`, `sig`…): its value becomes `***` in a span.
const SECRET_WORDS: [&str; 7] = ["token", "pass", "secret", "key", "auth", "sig", "jwt"];

/// `query` with the values of the parameters whose names hold a [`SECRET_WORDS`] word hidden.
fn scrubbed_query(query: &str) -> String {
    let hide = |name: &str| {
        let name = percent_encoding::percent_decode_str(name)
            .decode_utf8_lossy()
            .to_ascii_lowercase();
        SECRET_WORDS.iter().any(|w| name.contains(w))
    };
    let parts: Vec<String> = query
        .split('&')
        .map(|pair| match pair.split_once('=') {
            Some((name, _)) if hide(name) => format!("{name}=***"),
            _ => pair.to_string(),
        })
        .collect();
    parts.join("&")
}

/// The name and attributes of `op`'s span.
fn describe(op: &Op<'_>) -> Described {
    match op {
        Op::Db { system, statement } => {
            let verb = statement
                .split_whitespace()
                .next()
                .unwrap_or("SQL")
                .to_ascii_uppercase();
            Described {
                name: Cow::Owned(verb.clone()),
                kind: SpanKind::Client,
                attributes: vec![
                    KeyValue::new("db.system.name", *system),
                    KeyValue::new("db.operation.name", verb),
                    KeyValue::new("db.query.text", statement.to_string()),
                ],
            }
        }
        #[cfg(feature = "redis")]
        Op::Redis(cmd) => {
            let name = match cmd.args_iter().next() {
                Some(::redis::Arg::Simple(word)) => String::from_utf8_lossy(word).to_uppercase(),
                _ => "REDIS".to_string(),
            };
            Described {
                name: Cow::Owned(name.clone()),
                kind: SpanKind::Client,
                attributes: vec![
                    KeyValue::new("db.system.name", "redis"),
                    KeyValue::new("db.operation.name", name),
                ],
            }
        }
        #[cfg(feature = "redis")]
        Op::RedisPipeline => Described {
            name: Cow::Borrowed("PIPELINE"),
            kind: SpanKind::Client,
            attributes: vec![
                KeyValue::new("db.system.name", "redis"),
                KeyValue::new("db.operation.name", "PIPELINE"),
            ],
        },
        #[cfg(feature = "redis")]
        Op::Job { queue, id, attempt } => Described {
            name: Cow::Owned(format!("process {queue}")),
            kind: SpanKind::Consumer,
            attributes: vec![
                KeyValue::new("messaging.system", "brisk"),
                KeyValue::new("messaging.operation.type", "process"),
                KeyValue::new("messaging.destination.name", queue.to_string()),
                KeyValue::new("messaging.message.id", id.to_string()),
                KeyValue::new("brisk.job.attempt", i64::from(*attempt)),
            ],
        },
        Op::WsMessage { conn, size, text } => Described {
            name: Cow::Borrowed("websocket message"),
            kind: SpanKind::Server,
            attributes: vec![
                KeyValue::new("network.protocol.name", "websocket"),
                KeyValue::new("brisk.connection.id", *conn as i64),
                KeyValue::new("messaging.message.body.size", *size as i64),
                KeyValue::new("brisk.websocket.text", *text),
            ],
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_in_urls_stay_out_of_spans() {
        assert_eq!(
            scrubbed_query("room=7&token=eyJhbGc.x.y&Access_Token=abc&q=key%20lime"),
            "room=7&token=***&Access_Token=***&q=key%20lime"
        );
        assert_eq!(scrubbed_query("api%5Fkey=1&n=2"), "api%5Fkey=***&n=2");
        let uri: Uri = "http://u:pw@api.example:8080/v1/x?sig=s&n=1"
            .parse()
            .unwrap();
        assert_eq!(redacted(&uri), "http://api.example:8080/v1/x?sig=***&n=1");
    }
}
