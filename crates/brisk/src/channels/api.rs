//! The server API: what another service (a Python or Go backend) asks of the channels over
//! HTTP JSON, with an API key: `publish`, `broadcast`, `disconnect`, `presence`, `history`,
//! `channels`. Each is a `POST` to a path ending in its name, its body a JSON object:
//!
//! | method | body | result |
//! |---|---|---|
//! | `publish` | `{"channel":C,"data":D}` or `{"channel":C,"b64":B}` | `{"offset":"E:O"}` (`null` without history) |
//! | `broadcast` | `{"channels":[C…],"data":D}` (or `"b64"`) | `{"results":[{"offset":…} or {"error":…}…]}` |
//! | `disconnect` | `{"user":U,"code":4003,"reason":"…"}` | `{}` |
//! | `presence` | `{"channel":C}` | `{"clients":N,"users":[U…]}` |
//! | `history` | `{"channel":C,"limit":N}` | `{"position":"E:O","publications":[…]}` |
//! | `channels` | `{}` | `{"channels":{C:{"clients":N}…}}` |
//!
//! `data` is JSON; `b64` is bytes in base64 (standard alphabet, padded), published as
//! [`Channels::publish_bytes`] does.
//!
//! Answers are `{"result":…}` with 200, or `{"error":{"code":C,"message":"…"}}` with 400 (a
//! wrong request), 401 (no or a wrong key), 404 (no such method), 405 (not a `POST`), 413 (a
//! body over the limit) or 503 (Redis down or slow).

use bytes::Bytes;
use http::{header, Method, Request, Response, StatusCode};
use http_body_util::BodyExt;
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{json, Value};

use super::hub::{ChannelError, Channels};
use super::wire::{ErrorCode, Payload};
use crate::http::Body;

/// The shortest API key taken.
pub const MIN_API_KEY_LEN: usize = 16;

/// An API key shorter than [`MIN_API_KEY_LEN`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("an API key has at least {MIN_API_KEY_LEN} bytes")]
pub struct ShortApiKey;

/// The server API of a [`Channels`] (see the module docs), authenticated by an API key sent
/// as `Authorization: apikey KEY` or `X-API-Key: KEY`.
///
/// ```no_run
/// # async fn f(channels: brisk::channels::Channels, req: http::Request<brisk::http::Body>)
/// #     -> Result<(), brisk::channels::ShortApiKey> {
/// let api = brisk::channels::ServerApi::new(channels, "a key of 16 bytes or more")?;
/// let response = api.handle(req).await; // from a route such as /api/channels/*
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct ServerApi {
    channels: Channels,
    key: String,
    max_body: usize,
}

impl std::fmt::Debug for ServerApi {
    /// Never the key.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerApi")
            .field("max_body", &self.max_body)
            .finish()
    }
}

/// A failed API call: its status and error.
struct Failure(StatusCode, Value);

impl From<ChannelError> for Failure {
    fn from(e: ChannelError) -> Self {
        let status = match e.code {
            ErrorCode::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
            _ => StatusCode::BAD_REQUEST,
        };
        Failure(status, error_body(e.code as u16, &e.message))
    }
}

fn error_body(code: u16, message: &str) -> Value {
    json!({ "error": { "code": code, "message": message } })
}

fn bad(message: impl std::fmt::Display) -> Failure {
    Failure(
        StatusCode::BAD_REQUEST,
        error_body(ErrorCode::BadRequest as u16, &message.to_string()),
    )
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PublishBody {
    channel: String,
    data: Option<Box<RawValue>>,
    b64: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct BroadcastBody {
    channels: Vec<String>,
    data: Option<Box<RawValue>>,
    b64: Option<String>,
}

/// What a body publishes: its `data` (JSON) or `b64` (bytes in base64), one of the two.
fn published(data: Option<Box<RawValue>>, b64: Option<String>) -> Result<Payload, Failure> {
    use base64::Engine as _;
    match (data, b64) {
        (Some(json), None) => Ok(Payload::Json(json)),
        (None, Some(b64)) => base64::engine::general_purpose::STANDARD
            .decode(b64)
            .map(Payload::Bytes)
            .map_err(|e| bad(format!("b64 is not base64: {e}"))),
        (Some(_), Some(_)) => Err(bad("data or b64, not both")),
        (None, None) => Err(bad("no data: data (JSON) or b64 (bytes in base64)")),
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct DisconnectBody {
    user: String,
    #[serde(default = "disconnect_code")]
    code: u16,
    #[serde(default)]
    reason: String,
}

fn disconnect_code() -> u16 {
    super::close::DISCONNECTED
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ChannelBody {
    channel: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct HistoryBody {
    channel: String,
    limit: Option<usize>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct NoFields {}

impl ServerApi {
    /// The API of `channels` for callers with `key` (at least 16 bytes), taking bodies of up to
    /// 1 MiB.
    pub fn new(channels: Channels, key: &str) -> Result<Self, ShortApiKey> {
        if key.len() < MIN_API_KEY_LEN {
            return Err(ShortApiKey);
        }
        Ok(ServerApi {
            channels,
            key: key.to_owned(),
            max_body: 1 << 20,
        })
    }

    /// Takes request bodies of up to `bytes`.
    pub fn max_body(mut self, bytes: usize) -> Self {
        self.max_body = bytes;
        self
    }

    /// Answers one API request (the method is the path's last segment).
    pub async fn handle<B>(&self, req: Request<B>) -> Response<Body>
    where
        B: http_body::Body<Data = Bytes>,
        B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    {
        // The result is JSON text: publications' data goes out as it was published.
        let (status, body) = match self.answer(req).await {
            Ok(result) => (StatusCode::OK, format!("{{\"result\":{}}}", result.get())),
            Err(Failure(status, body)) => (status, body.to_string()),
        };
        let mut response = Response::new(Body::full(body));
        *response.status_mut() = status;
        let headers = response.headers_mut();
        headers.insert(
            header::CONTENT_TYPE,
            "application/json".parse().expect("a header"),
        );
        if status == StatusCode::METHOD_NOT_ALLOWED {
            headers.insert(header::ALLOW, "POST".parse().expect("a header"));
        }
        if status == StatusCode::UNAUTHORIZED {
            headers.insert(
                header::WWW_AUTHENTICATE,
                "apikey".parse().expect("a header"),
            );
        }
        response
    }

    async fn answer<B>(&self, req: Request<B>) -> Result<Box<RawValue>, Failure>
    where
        B: http_body::Body<Data = Bytes>,
        B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    {
        if !self.key_matches(req.headers()) {
            return Err(Failure(
                StatusCode::UNAUTHORIZED,
                error_body(401, "send the API key as `Authorization: apikey KEY`"),
            ));
        }
        let method = req.uri().path().rsplit('/').next().unwrap_or("").to_owned();
        if req.method() != Method::POST {
            return Err(Failure(
                StatusCode::METHOD_NOT_ALLOWED,
                error_body(405, "the server API takes POST requests"),
            ));
        }
        let body = http_body_util::Limited::new(req.into_body(), self.max_body);
        let body = match body.collect().await {
            Ok(b) => b.to_bytes(),
            Err(e)
                if e.downcast_ref::<http_body_util::LengthLimitError>()
                    .is_some() =>
            {
                return Err(Failure(
                    StatusCode::PAYLOAD_TOO_LARGE,
                    error_body(413, &format!("bodies are at most {} bytes", self.max_body)),
                ))
            }
            Err(e) => return Err(bad(format!("the body could not be read: {e}"))),
        };
        let c = &self.channels;
        match method.as_str() {
            "publish" => {
                let b: PublishBody = parse(&body)?;
                let data = published(b.data, b.b64)?;
                let at = c.publish_data(&b.channel, data.data()).await?;
                raw(&json!({ "offset": at.map(|p| p.to_string()) }))
            }
            "broadcast" => {
                let b: BroadcastBody = parse(&body)?;
                let data = published(b.data, b.b64)?;
                let mut results = Vec::with_capacity(b.channels.len());
                for channel in &b.channels {
                    results.push(match c.publish_data(channel, data.data()).await {
                        Ok(at) => json!({ "offset": at.map(|p| p.to_string()) }),
                        Err(e) => error_body(e.code as u16, &e.message),
                    });
                }
                raw(&json!({ "results": results }))
            }
            "disconnect" => {
                let b: DisconnectBody = parse(&body)?;
                c.disconnect(&b.user, b.code, &b.reason)?;
                raw(&json!({}))
            }
            "presence" => {
                let b: ChannelBody = parse(&body)?;
                raw(&c.presence(&b.channel).await?)
            }
            "history" => {
                let b: HistoryBody = parse(&body)?;
                raw(&c.history(&b.channel, b.limit.unwrap_or(usize::MAX)).await?)
            }
            "channels" => {
                let _: NoFields = parse(if body.is_empty() { b"{}" } else { &body })?;
                let active = c.active().await?;
                let channels: serde_json::Map<String, Value> = (active.into_iter())
                    .map(|(name, n)| (name, json!({ "clients": n })))
                    .collect();
                raw(&json!({ "channels": channels }))
            }
            other => Err(Failure(
                StatusCode::NOT_FOUND,
                error_body(
                    404,
                    &format!(
                        "no method {other:?}: publish, broadcast, disconnect, presence, \
                         history, channels"
                    ),
                ),
            )),
        }
    }

    /// Whether the request carries the key (compared in constant time).
    fn key_matches(&self, headers: &http::HeaderMap) -> bool {
        let given = headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.split_once(' '))
            .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("apikey"))
            .map(|(_, key)| key.trim())
            .or_else(|| headers.get("x-api-key").and_then(|v| v.to_str().ok()));
        given.is_some_and(|g| constant_time_eq(g.as_bytes(), self.key.as_bytes()))
    }
}

/// `value` as JSON text.
fn raw(value: &impl serde::Serialize) -> Result<Box<RawValue>, Failure> {
    Ok(serde_json::value::to_raw_value(value).expect("results serialize"))
}

fn parse<'a, T: Deserialize<'a>>(body: &'a [u8]) -> Result<T, Failure> {
    serde_json::from_slice(body)
        .map_err(|e| bad(format!("the body is not what this method takes: {e}")))
}

/// `a == b` in a time that depends on their lengths only.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |d, (x, y)| d | (x ^ y)) == 0
}
