//! Channels for products (`brisk::channels`): `/connection/websocket` speaks the channel
//! protocol, `/connection/token?user=NAME` hands out try-out tokens, `/connection` is a
//! try-out chat page on the JavaScript client (`/connection/client.js`, built from
//! `clients/js`), `/connection/sse` serves the channels as server-sent events and
//! `/connection/stream` as newline-delimited JSON (HTTP streaming), and with
//! `--api-key-file` the server API answers under `/api/channels/`.
//!
//! Clients speak JSON, or MessagePack with `?format=msgpack` (`Channels::msgpack`; off with
//! `--channels-json-only`).
//!
//! Namespaces:
//! - `chat:ROOM`: any connected user subscribes and publishes; presence and join/leave
//!   pushes; with `--history N` (and `--redis`), the last N publications are kept and a client
//!   that reconnects recovers what it missed.
//! - `room:NAME`: as `chat` without presence and join/leave pushes, for rooms of thousands
//!   (where every join pushed to every member costs the square of the members).
//! - `news:TOPIC`: any connected user subscribes; only the server publishes (the server API);
//!   history as `chat`.
//! - `private:NAME`: only users whose connect token lists the channel (the try-out tokens
//!   list `private:USER`) subscribe; only the server publishes.
//!
//! Tokens are HS256 JWTs (`sub`, `exp`, `aud` = [`AUDIENCE`], `channels`) signed with a key
//! read from `--channels-secret-file` (default `RUN_DIR/channels.key`, created with 32 random
//! bytes by the first worker that needs it; instances that share users share the file). The
//! try-out tokens are the demo's convenience: anyone gets one for any name. A real app
//! issues them after its own login. With `--channels-jwks-url`, tokens are an identity
//! provider's (RS256 or ES256, checked against the keys it publishes, `aud` as above) and
//! the demo signs none.

use std::path::PathBuf;
use std::time::{SystemTime, UNIX_EPOCH};

use brisk::channels::Session;
use brisk::channels::{Access, Channels, Namespace, Publishers, ServerApi};
use brisk::http::{Body, RequestBody};
use brisk::jwks_url::JwksUrl;
use brisk::jwt::{Jwt, JwtError};
use brisk::ws::{History, WsEndpoint};
use http::{header, Request, Response, StatusCode};
use serde_json::json;

/// The try-out chat page.
const PAGE: &str = include_str!("connection.html");

/// The JavaScript client's modules as `npm run build` leaves them in `clients/js`.
const CLIENT_DIST: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../clients/js/dist/");

/// A module of the JavaScript client that the demo serves.
pub(crate) enum ClientModule {
    /// `/connection/client.js`: the client.
    Index,
    /// `/connection/msgpack.js`: the MessagePack codec the client imports.
    MsgPack,
}

/// The `aud` of the demo's tokens.
pub(crate) const AUDIENCE: &str = "brisk-demo";

/// How long a try-out token lasts by default, and at most (seconds).
const TOKEN_TTL: u64 = 600;
const MAX_TOKEN_TTL: u64 = 3600;

/// Where the keys that check tokens come from.
pub(crate) enum TokenKeys {
    /// An HS256 secret in this file (created on first use): the demo signs try-out tokens.
    SecretFile(PathBuf),
    /// An identity provider's JWKS URL: tokens are the provider's.
    Url(JwksUrl),
}

/// The channel endpoints of one worker.
#[derive(Clone)]
pub(crate) struct Live {
    channels: Channels,
    endpoint: WsEndpoint<Session>,
    api: Option<ServerApi>,
    /// The secret try-out tokens are signed with (none when tokens come from a JWKS URL).
    key_file: Option<PathBuf>,
}

impl Live {
    /// Channels whose tokens are checked with `keys`, keeping publications in `history` if
    /// given, with the server API if `api_key` is.
    pub(crate) fn new(
        keys: TokenKeys,
        history: Option<History>,
        api_key: Option<String>,
        msgpack: bool,
    ) -> anyhow::Result<Self> {
        let (channels, key_file) = match keys {
            TokenKeys::SecretFile(key_file) => {
                let file = key_file.clone();
                let keys = move || -> Result<Jwt, JwtError> {
                    let secret = crate::session_key::read_or_create(&file)
                        .map_err(|e| JwtError::Keys(format!("{e:#}")))?;
                    Ok(Jwt::hs256(&secret)?.audience(AUDIENCE))
                };
                (Channels::jwt_from(keys), Some(key_file))
            }
            TokenKeys::Url(url) => (Channels::jwks_url(url.audience(AUDIENCE)), None),
        };
        let with_history = |ns: Namespace| match &history {
            Some(h) => ns.history(h.clone()),
            None => ns,
        };
        let channels = channels
            .namespace(
                "chat",
                with_history(Namespace::new())
                    .subscribe(Access::Connected)
                    .publishers(Publishers::Subscribers)
                    .presence(true)
                    .join_leave(true),
            )
            .namespace(
                "room",
                with_history(Namespace::new())
                    .subscribe(Access::Connected)
                    .publishers(Publishers::Subscribers),
            )
            .namespace(
                "news",
                with_history(Namespace::new()).subscribe(Access::Connected),
            )
            .namespace("private", Namespace::new().subscribe(Access::Token))
            .msgpack(msgpack);
        let api = match api_key {
            Some(key) => Some(
                ServerApi::new(channels.clone(), &key)
                    .map_err(|e| anyhow::anyhow!("--api-key-file: {e}"))?,
            ),
            None => None,
        };
        Ok(Live {
            endpoint: channels.endpoint().permessage_deflate(true),
            channels,
            api,
            key_file,
        })
    }

    /// `/connection`: the try-out chat page.
    pub(crate) fn page(&self) -> Response<Body> {
        let mut r = Response::new(Body::from(PAGE));
        r.headers_mut().insert(
            header::CONTENT_TYPE,
            header::HeaderValue::from_static("text/html; charset=utf-8"),
        );
        r
    }

    /// `/connection/client.js` (`index.js`) and the module it imports
    /// (`/connection/msgpack.js`): the JavaScript client, read from the source tree (the demo
    /// runs from it).
    pub(crate) fn client_js(&self, module: ClientModule) -> Response<Body> {
        let file = match module {
            ClientModule::Index => "index.js",
            ClientModule::MsgPack => "msgpack.js",
        };
        match std::fs::read(format!("{CLIENT_DIST}{file}")) {
            Ok(js) => {
                let mut r = Response::new(Body::from(js));
                r.headers_mut().insert(
                    header::CONTENT_TYPE,
                    header::HeaderValue::from_static("text/javascript; charset=utf-8"),
                );
                r
            }
            Err(e) => {
                let mut r = Response::new(Body::from(format!(
                    "the JavaScript client is not built ({e}): run `npm ci && npm run build` in clients/js\n"
                )));
                *r.status_mut() = StatusCode::NOT_FOUND;
                r
            }
        }
    }

    /// `/connection/websocket`.
    pub(crate) fn upgrade(&self, req: Request<RequestBody>) -> Response<Body> {
        self.endpoint.upgrade(req)
    }

    /// `/connection/sse?token=…&channel=…`: the channels as server-sent events.
    pub(crate) async fn sse(&self, req: Request<RequestBody>) -> Response<Body> {
        self.channels.event_stream(&req).await
    }

    /// `/connection/stream?token=…&channel=…`: the channels as newline-delimited JSON.
    pub(crate) async fn http_stream(&self, req: Request<RequestBody>) -> Response<Body> {
        self.channels.http_stream(&req).await
    }

    /// `/api/channels/METHOD`.
    pub(crate) async fn api(&self, req: Request<RequestBody>) -> Response<Body> {
        match &self.api {
            Some(api) => api.handle(req).await,
            None => json_status(
                StatusCode::NOT_FOUND,
                json!({ "error": { "code": 404, "message":
                    "the server API is off: start the demo with --api-key-file" } }),
            ),
        }
    }

    /// `/connection/token?user=NAME[&ttl=SECONDS][&channel=CHANNEL]`: a try-out connect
    /// token for NAME, or with `channel` a subscription token for NAME and that channel.
    pub(crate) fn token(&self, query: Option<&str>) -> Response<Body> {
        let pairs: Vec<(String, String)> =
            serde_urlencoded::from_str(query.unwrap_or("")).unwrap_or_default();
        let get = |k: &str| pairs.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str());
        let user = get("user").unwrap_or("");
        if user.is_empty()
            || user.len() > 64
            || !user
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"-_".contains(&b))
        {
            return json_status(
                StatusCode::BAD_REQUEST,
                json!({ "error": "user: 1 to 64 letters, digits, - and _" }),
            );
        }
        let ttl = match get("ttl").map(str::parse::<u64>) {
            None => TOKEN_TTL,
            Some(Ok(t)) if (1..=MAX_TOKEN_TTL).contains(&t) => t,
            Some(_) => {
                return json_status(
                    StatusCode::BAD_REQUEST,
                    json!({ "error": format!("ttl: 1 to {MAX_TOKEN_TTL} seconds") }),
                )
            }
        };
        let Some(key_file) = &self.key_file else {
            return json_status(
                StatusCode::NOT_FOUND,
                json!({ "error": "tokens come from the identity provider (--channels-jwks-url); the demo signs none" }),
            );
        };
        let secret = match crate::session_key::read_or_create(key_file) {
            Ok(s) => s,
            Err(e) => {
                tracing::error!("channels key: {e:#}");
                return json_status(
                    StatusCode::SERVICE_UNAVAILABLE,
                    json!({ "error": "the token key cannot be read" }),
                );
            }
        };
        let exp = now_seconds() + ttl;
        let claims = match get("channel") {
            Some(channel) => {
                json!({ "sub": user, "exp": exp, "aud": AUDIENCE, "channel": channel })
            }
            None => json!({
                "sub": user, "exp": exp, "aud": AUDIENCE, "channels": [format!("private:{user}")],
            }),
        };
        match brisk::jwt::hs256_token(&secret, &claims) {
            Ok(token) => json_status(StatusCode::OK, json!({ "token": token, "expires": exp })),
            Err(e) => json_status(
                StatusCode::SERVICE_UNAVAILABLE,
                json!({ "error": format!("cannot sign: {e}") }),
            ),
        }
    }
}

fn json_status(status: StatusCode, body: serde_json::Value) -> Response<Body> {
    let mut r = Response::new(Body::from(body.to_string()));
    *r.status_mut() = status;
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static("application/json"),
    );
    r.headers_mut().insert(
        header::CACHE_CONTROL,
        header::HeaderValue::from_static("no-store"),
    );
    r
}

fn now_seconds() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}
