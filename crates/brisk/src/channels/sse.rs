//! Channels over server-sent events: a `text/event-stream` response subscribed to channels,
//! for clients that cannot hold a WebSocket or only listen (`EventSource`, `curl -N`). The
//! same token and permissions as the protocol's `connect` and `subscribe`; the events are the
//! protocol's pushes, one JSON object per `data:` event.
//!
//! `GET …?token=JWT&channel=C&channel=D&since=C,E:O` (or the token in `Authorization:
//! Bearer`): first `{"connected":{"user":U,"expires":E,"version":1}}`, then each channel gets a `{"channel":C,"subscribed":{"position":…}}` event (with
//! `since`: `recovered` and the missed `publications` after it, or the `reason`: what
//! `subscribe` answers; when the missed ones fill more than a page of the history, the
//! `subscribed` event has the first page and each next page follows as
//! `{"channel":C,"publications":[…]}`), then its publications and join/leave pushes as they
//! come. Publications sent while the stream starts
//! can come before the recovered ones: order by offset. The stream ends when the token
//! expires (the client reconnects with a new one) and on the server API's `disconnect`, each
//! with a last `event: close` whose data is `{"code":N,"reason":"…"}`: the close code a
//! WebSocket would get (4002 token expired, 4003 disconnected).

use std::collections::HashMap;
use std::time::Duration;

use http::{header, Request, Response, StatusCode};
use serde_json::{json, Value};

use super::auth::now_seconds;
use super::close;
use super::hub::{group_of, user_key, ChannelError, Channels};
use super::replay::{Kepts, Replay};
use super::session::{parse_position, Subscribed};
use super::wire::{ErrorCode, PROTOCOL_VERSION};
use crate::http::Body;
use crate::ws::{self, Position};

/// The most channels one stream subscribes to.
const MAX_CHANNELS: usize = 32;

impl Channels {
    /// A server-sent event stream of the channels the request names (see the module docs),
    /// or a JSON error: 401 (no, a bad or an expired token: `code` is the close code a
    /// WebSocket would get), 403 (a channel the user may not subscribe to), 400 (a bad
    /// channel or position), 503 (Redis down or slow).
    ///
    /// ```no_run
    /// # async fn f(channels: brisk::channels::Channels, req: http::Request<()>) {
    /// let response = channels.event_stream(&req).await; // GET /connection/sse
    /// # }
    /// ```
    pub async fn event_stream<B>(&self, req: &Request<B>) -> Response<Body> {
        match self.open_stream(req).await {
            Ok(r) => r,
            Err((status, error)) => {
                let mut r = Response::new(Body::from(json!({ "error": error }).to_string()));
                *r.status_mut() = status;
                r.headers_mut().insert(
                    header::CONTENT_TYPE,
                    header::HeaderValue::from_static("application/json"),
                );
                r
            }
        }
    }

    async fn open_stream<B>(
        &self,
        req: &Request<B>,
    ) -> Result<Response<Body>, (StatusCode, Value)> {
        let query = query_pairs(req.uri().query().unwrap_or(""));
        let token = crate::jwt::bearer(req.headers())
            .map(str::to_owned)
            .or_else(|| {
                query
                    .iter()
                    .find(|(k, _)| k == "token")
                    .map(|(_, v)| v.clone())
            });
        let subject = (self.authenticate_token(token).await).map_err(|r| {
            (
                StatusCode::UNAUTHORIZED,
                json!({ "code": r.code, "message": r.reason }),
            )
        })?;
        let channels: Vec<&String> = (query.iter())
            .filter(|(k, _)| k == "channel")
            .map(|(_, v)| v)
            .collect();
        if channels.is_empty() || channels.len() > MAX_CHANNELS {
            return Err(bad(ChannelError::new(
                ErrorCode::BadRequest,
                format!("name 1 to {MAX_CHANNELS} channels: ?channel=C&channel=D"),
            )));
        }
        let mut since: HashMap<&str, Position> = HashMap::new();
        for (_, v) in query.iter().filter(|(k, _)| k == "since") {
            let Some((channel, at)) = v.split_once(',') else {
                return Err(bad(ChannelError::new(
                    ErrorCode::BadRequest,
                    "since is CHANNEL,EPOCH:OFFSET",
                )));
            };
            since.insert(channel, parse_position(at).map_err(bad)?);
        }
        let mut namespaces = Vec::with_capacity(channels.len());
        for channel in &channels {
            // A refusal names its channel: a client can drop it and ask for the others.
            let refused = |e: ChannelError| {
                let status = match e.code {
                    ErrorCode::PermissionDenied => StatusCode::FORBIDDEN,
                    _ => StatusCode::BAD_REQUEST,
                };
                let mut body = error(&e);
                body["channel"] = json!(channel);
                (status, body)
            };
            let ns = self.namespace_for(channel).map_err(refused)?.clone();
            (self.may_subscribe(&subject, channel, ns.access, None).await).map_err(refused)?;
            namespaces.push(ns);
        }
        // Subscribed before the histories are read, so that nothing falls between the two.
        let groups = (channels.iter().map(|c| group_of(c)))
            .chain([user_key(&subject.user)])
            .collect::<Vec<_>>();
        let worker = crate::runtime::context::running("brisk::channels::Channels::event_stream");
        let (stream, response) = ws::owned_event_stream(worker, &groups);
        let connected = json!({ "connected": {
            "user": subject.user,
            "expires": subject.expires,
            "version": PROTOCOL_VERSION,
        } });
        stream.send_text(&connected.to_string());
        for (channel, ns) in channels.iter().zip(&namespaces) {
            let since = since.get(channel.as_str());
            let replay = match &ns.history {
                Some(history) => Some(
                    (Replay::read(history, channel, since).await)
                        .map_err(|e| (StatusCode::SERVICE_UNAVAILABLE, error(&e)))?,
                ),
                None => None,
            };
            #[derive(serde::Serialize)]
            struct Event<'a> {
                channel: &'a str,
                subscribed: Subscribed<'a>,
            }
            let event = Event {
                channel,
                subscribed: Subscribed::new(replay.as_ref(), since.is_some()),
            };
            stream.send_text(&serde_json::to_string(&event).expect("events serialize"));
            if let (Some(history), Some(replay)) = (&ns.history, &replay) {
                send_rest(&stream, history, channel, replay).await;
            }
        }
        if let Some(at) = subject.expires {
            let left = at.saturating_sub(now_seconds());
            stream.close_after(
                Duration::from_secs(left),
                close::TOKEN_EXPIRED,
                "token expired",
            );
        }
        Ok(response.map(Body::new))
    }
}

/// The pages of a recovery after its first, each as one `{"channel":C,"publications":[…]}`
/// event (an event stream takes no `history` command). A page that cannot be read ends it:
/// the client sees the gap and opens the stream again from where it got to.
async fn send_rest(
    stream: &ws::OwnedStream,
    history: &ws::History,
    channel: &str,
    replay: &Replay,
) {
    let mut from = replay.continues_from().cloned();
    while let Some(since) = from.take() {
        let recovery = match history.since(channel, &since).await {
            Ok(recovery) => recovery,
            Err(e) => {
                return tracing::warn!("channels: recovering {channel} for an event stream: {e}")
            }
        };
        let missed = match &recovery {
            ws::Recovery::Recovered { missed, .. } => missed,
            ws::Recovery::Lost(why) => {
                return tracing::warn!("channels: recovering {channel} for an event stream: {why}")
            }
        };
        let page = PublicationsEvent {
            channel,
            publications: Kepts(missed),
        };
        if !stream.send_text(&serde_json::to_string(&page).expect("events serialize")) {
            return; // the client left
        }
        from = recovery.continues_from().cloned();
    }
}

/// `{"channel":C,"publications":[…]}`: a page of a recovery.
#[derive(serde::Serialize)]
struct PublicationsEvent<'a> {
    channel: &'a str,
    publications: Kepts<'a>,
}

fn error(e: &ChannelError) -> Value {
    json!({ "code": e.code as u16, "message": e.message })
}

fn bad(e: ChannelError) -> (StatusCode, Value) {
    (StatusCode::BAD_REQUEST, error(&e))
}

/// The query's pairs, percent-decoded (`+` is a space).
fn query_pairs(query: &str) -> Vec<(String, String)> {
    let decode = |s: &str| {
        percent_encoding::percent_decode_str(&s.replace('+', " "))
            .decode_utf8_lossy()
            .into_owned()
    };
    (query.split('&'))
        .filter(|p| !p.is_empty())
        .map(|p| {
            let (k, v) = p.split_once('=').unwrap_or((p, ""));
            (decode(k), decode(v))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    #[test]
    fn query_pairs_are_decoded() {
        assert_eq!(
            super::query_pairs("channel=chat%3Alobby&since=chat:lobby,1:2&x&token=a+b"),
            [
                ("channel".into(), "chat:lobby".into()),
                ("since".into(), "chat:lobby,1:2".into()),
                ("x".into(), String::new()),
                ("token".into(), "a b".into()),
            ]
        );
    }
}
