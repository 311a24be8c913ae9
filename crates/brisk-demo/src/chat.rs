//! `/chat`: rooms whose members get every message sent in them, on every instance that shares
//! `--redis`; with `--history N`, a client that reconnects gets what it missed.
//!
//! The protocol (text messages):
//! - Connect to `/chat` (room `chat`) or `/chat?room=ROOM`, and add `name=NAME` to be listed
//!   in the room's presence (`/chat?room=lobby&name=alice`), and `user=USER` to tag the socket
//!   with the key `user:USER` (`POST /chat/kick?user=USER` closes them all, on every worker and
//!   instance, with 4003; `GET /chat/online?user=USER` counts them). `POST /chat/say?room=ROOM`
//!   sends its body (UTF-8 text) to every member of the room, as a member's message does
//!   without `--history`. Rooms, names and users are 1 to 64 letters, digits, `-`, `_`;
//!   anything else is answered 400.
//! - Without `--history`, every message a member sends goes to every member of the room as it
//!   is (the benchmarks' broadcast).
//! - With `--history N` (needs `--redis`), the server sends `{"position":"E:O"}`, the room's
//!   position when the client joined (live messages may arrive before it: the client keeps
//!   those with higher offsets). A text message `hello` then reaches every member
//!   as `{"id":"E:O","text":"hello"}`: `E:O` is its position in the room's history (epoch and
//!   offset; offsets count 1, 2, 3… within an epoch). `"id":null` means Redis did not
//!   answer the append, even once retried (the message still reached the members this
//!   instance could reach, and may be in the history all the same).
//! - `/presence` answers `{"presence":N,"names":[…]}`: the room's members on every instance,
//!   and the names of those that gave one (each once, sorted).
//! - `/recover E:O` (the position of the last message the client got, or the position it was
//!   sent on joining) answers the messages after it, as above, then `{"recovered":true,
//!   "missed":K}`; or `{"recovered":false,"reason":"…","position":"E:O"}` when they are not
//!   kept any more (the client reloads its state, and goes on from the position given). If the
//!   missed messages do not fit the client's send buffer, the connection closes with 1013:
//!   reconnect and recover again.
//!   Messages can arrive out of offset order when several servers broadcast at once: a client
//!   recovers from the highest offset up to which it has them all, and skips offsets it has.
//! - A request the server cannot answer gets `{"error":"…"}` saying why.

use brisk::http::Body;
use brisk::ws::{self, EndpointName, History, Message, Recovery, WsConnection, WsEndpoint};
use http::{Request, Response, StatusCode};
use serde_json::json;

/// The largest message a member may send unless `--chat-max-message` says otherwise: a chat
/// line, not a file. Every member takes a copy of each message, so the limit bounds what one
/// upload costs the room.
pub(crate) const MAX_MESSAGE: usize = 64 << 10;

/// The room of a `/chat` connection that names none.
const DEFAULT_ROOM: &str = "chat";

/// The `/chat` endpoint.
#[derive(Clone)]
pub(crate) struct Chat {
    endpoint: WsEndpoint<Room>,
}

/// Which room a connection is in (its data, which moves with it on a reload).
#[derive(serde::Serialize, serde::Deserialize)]
pub(crate) struct Room(String);

/// The name of the `/chat` endpoint, under which a reload's new worker finds it.
pub(crate) const CHAT: EndpointName<Room> = EndpointName::new("chat");

impl Chat {
    /// Rooms whose slow members get `slow`, whose members send messages of at most
    /// `max_message` bytes, keeping their messages in `history` if given.
    pub(crate) fn new(
        slow: ws::SlowConsumer,
        max_message: usize,
        history: Option<History>,
    ) -> Self {
        let on_open = history.clone();
        // Browsers' pages of the demo's own host only: another site's page cannot join the
        // rooms with a visitor's cookies. Compressing clients compress each message on its
        // own: a room of 100,000 members holds no inflater per member (~40 KiB each). Members
        // stay connected through reloads, with their room, name and user.
        let endpoint = WsEndpoint::new()
            .data::<Room>()
            .same_origin()
            .permessage_deflate(true)
            .client_no_context_takeover(true)
            .survive_reload(true)
            .carry_data()
            .slow_consumer(slow)
            .max_message_size(max_message)
            .on_open(move |ws, handshake| {
                let history = on_open.clone();
                async move {
                    // (`upgrade` refused bad names.)
                    let room = param(&handshake.path, "room").ok().flatten();
                    let room = room.unwrap_or(DEFAULT_ROOM).to_owned();
                    if let Ok(Some(name)) = param(&handshake.path, "name") {
                        ws.set_presence_id(name);
                    }
                    if let Ok(Some(user)) = param(&handshake.path, "user") {
                        ws.tag(&format!("user:{user}"));
                    }
                    ws.join(&room);
                    ws.set_data(Room(room.clone()));
                    if let Some(history) = history {
                        let answer = match history.position(&room).await {
                            Ok(at) => json!({ "position": at.to_string() }),
                            Err(e) => {
                                tracing::warn!("/chat history: {e}");
                                json!({ "error": format!("no position: {}", e.client_message()) })
                            }
                        };
                        ws.send_text(answer.to_string())?;
                    }
                    Ok::<(), brisk::SendError>(())
                }
            })
            .on_message(move |ws, msg| {
                let history = history.clone();
                async move { message(&ws, msg, history.as_ref()).await }
            });
        Chat { endpoint }
    }

    /// The endpoint, for its server to name (so that a reload's new worker finds it).
    pub(crate) fn endpoint(&self) -> WsEndpoint<Room> {
        self.endpoint.clone()
    }

    /// Upgrades a request for `/chat`, or answers 400 for a bad room name.
    pub(crate) fn upgrade<B>(&self, req: Request<B>) -> Response<Body> {
        let path = req.uri().path_and_query().map_or("", |p| p.as_str());
        if ["room", "name", "user"]
            .iter()
            .any(|k| param(path, k).is_err())
        {
            let mut r = Response::new(Body::from(
                "room, name and user are 1 to 64 letters, digits, '-' or '_'\n",
            ));
            *r.status_mut() = StatusCode::BAD_REQUEST;
            return r;
        }
        self.endpoint.upgrade(req)
    }
}

/// `POST /chat/kick?user=USER`: closes USER's `/chat` sockets (those that connected with
/// `user=USER`) on every worker and instance, with close code 4003.
pub(crate) fn kick(path_and_query: &str) -> Response<Body> {
    let answer = |code: StatusCode, text: String| {
        let mut r = Response::new(Body::from(text));
        *r.status_mut() = code;
        r
    };
    match param(path_and_query, "user") {
        Ok(Some(user)) => {
            let here = ws::close_where(&format!("user:{user}"), 4003, "removed from the chat");
            answer(
                StatusCode::OK,
                format!("closed {here} here, and sent to the others\n"),
            )
        }
        _ => answer(
            StatusCode::BAD_REQUEST,
            "user is 1 to 64 letters, digits, '-' or '_'\n".into(),
        ),
    }
}

/// `POST /chat/say?room=ROOM` with `body`: the body to every member of the room (the default
/// room without `room`) on every worker and instance, as a text message; 400 for a bad room
/// or a body that is not UTF-8.
pub(crate) fn say(path_and_query: &str, body: &[u8]) -> Response<Body> {
    let answer = |code: StatusCode, text: &str| {
        let mut r = Response::new(Body::from(text.to_string()));
        *r.status_mut() = code;
        r
    };
    let room = match param(path_and_query, "room") {
        Ok(room) => room.unwrap_or(DEFAULT_ROOM),
        Err(()) => {
            return answer(
                StatusCode::BAD_REQUEST,
                "room is 1 to 64 letters, digits, '-' or '_'\n",
            )
        }
    };
    match std::str::from_utf8(body) {
        Ok(text) => {
            ws::broadcast(room, Message::text(text));
            answer(StatusCode::OK, "sent\n")
        }
        Err(_) => answer(StatusCode::BAD_REQUEST, "the message is not UTF-8 text\n"),
    }
}

/// `GET /chat/online?user=USER`: `{"user": USER, "sockets": N}`, USER's `/chat` sockets on
/// every instance (presence of the key `user:USER`).
pub(crate) async fn online(path_and_query: &str) -> Response<Body> {
    let Ok(Some(user)) = param(path_and_query, "user") else {
        let mut r = Response::new(Body::from("user is 1 to 64 letters, digits, '-' or '_'\n"));
        *r.status_mut() = StatusCode::BAD_REQUEST;
        return r;
    };
    let (code, body) = match ws::sockets_of(&format!("user:{user}")).await {
        Ok(n) => (StatusCode::OK, json!({ "user": user, "sockets": n })),
        Err(e) => (
            StatusCode::SERVICE_UNAVAILABLE,
            json!({ "error": format!("presence: {}", e.client_message()) }),
        ),
    };
    let mut r = Response::new(Body::from(body.to_string()));
    *r.status_mut() = code;
    r
}

/// The value of `key` in `path`'s query (`None` when it has none), or `Err` when it is not 1
/// to 64 letters, digits, `-` or `_`.
fn param<'a>(path: &'a str, key: &str) -> Result<Option<&'a str>, ()> {
    let query = path.split_once('?').map_or("", |(_, q)| q);
    let found = query
        .split('&')
        .find_map(|kv| kv.strip_prefix(key).and_then(|v| v.strip_prefix('=')));
    let Some(value) = found else {
        return Ok(None);
    };
    let good = (1..=64).contains(&value.len())
        && value
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
    if good {
        Ok(Some(value))
    } else {
        Err(())
    }
}

/// One message from a member.
async fn message(
    ws: &WsConnection<Room>,
    msg: Message,
    history: Option<&History>,
) -> Result<(), brisk::SendError> {
    let room = ws
        .with_data(|r| r.0.clone())
        .unwrap_or_else(|| DEFAULT_ROOM.to_owned());
    let text = match &msg {
        Message::Text(t) => Some(t.as_str()),
        Message::Binary(_) => None,
    };
    match text {
        Some("/presence") => {
            let found =
                futures_util::future::try_join(ws::presence(&room), ws::presence_ids(&room));
            let answer = match found.await {
                Ok((n, names)) => json!({ "presence": n, "names": names }),
                Err(e) => redis_failure(e),
            };
            ws.send_text(answer.to_string())
        }
        Some(t) if t == "/recover" || t.starts_with("/recover ") => match history {
            Some(history) => recover(ws, history, &room, t["/recover".len()..].trim()).await,
            None => ws.send_text(json!({ "error": "recovery needs --history" }).to_string()),
        },
        _ => match (history, text) {
            (None, _) => {
                ws::broadcast(&room, msg);
                Ok(())
            }
            (Some(history), Some(text)) => {
                let id = match history.append(&room, text.as_bytes()).await {
                    Ok(at) => Some(at.to_string()),
                    Err(e) => {
                        tracing::warn!("chat: cannot keep a message of {room}: {e}");
                        None
                    }
                };
                ws::broadcast(&room, Message::text(kept(id.as_deref(), text)));
                Ok(())
            }
            (Some(_), None) => ws.send_text(
                json!({ "error": "with --history, /chat takes text messages" }).to_string(),
            ),
        },
    }
}

/// A kept message as members get it.
fn kept(id: Option<&str>, text: &str) -> String {
    json!({ "id": id, "text": text }).to_string()
}

/// `/recover E:O`: what the member missed after `E:O`, or why it cannot have it.
async fn recover(
    ws: &WsConnection<Room>,
    history: &History,
    room: &str,
    position: &str,
) -> Result<(), brisk::SendError> {
    let mut last = match position.parse::<ws::Position>() {
        Ok(p) => p,
        Err(e) => return ws.send_text(json!({ "error": e.to_string() }).to_string()),
    };
    // The history answers a page at a time: each is sent before the next is read.
    let mut sent = 0;
    let answer = loop {
        let recovery = match history.since(room, &last).await {
            Ok(recovery) => recovery,
            Err(e) => break redis_failure(e),
        };
        let missed = match &recovery {
            Recovery::Recovered { missed, .. } => missed,
            Recovery::Lost(why) => match history.position(room).await {
                Ok(at) => {
                    break json!({
                        "recovered": false,
                        "reason": why.to_string(),
                        "position": at.to_string(),
                    })
                }
                Err(e) => break redis_failure(e),
            },
        };
        for m in missed {
            let text = String::from_utf8_lossy(&m.payload);
            if ws
                .send_text(kept(Some(&m.position.to_string()), &text))
                .is_err()
            {
                // Its buffer is full: a partial recovery must not look whole.
                ws.close(1013, "recovery did not fit the send buffer; reconnect");
                return Ok(());
            }
        }
        sent += missed.len();
        match recovery.continues_from() {
            Some(next) => last = next.clone(),
            None => break json!({ "recovered": true, "missed": sent }),
        }
    };
    ws.send_text(answer.to_string())
}

/// A failed Redis call as a member sees it: general words (or, for what the app's set-up
/// cannot do, such as presence on a sharded bus, what it is); the error goes to the log.
fn redis_failure(e: brisk::redis::RedisError) -> serde_json::Value {
    tracing::warn!("/chat: {e}");
    match e {
        brisk::redis::RedisError::Config(why) => json!({ "error": why }),
        _ => json!({ "error": e.client_message() }),
    }
}

#[cfg(test)]
mod tests {
    use super::param;

    #[test]
    fn rooms_and_names() {
        assert_eq!(param("/chat?room=a-b_9", "room"), Ok(Some("a-b_9")));
        assert_eq!(param("/chat?x=1&room=lobby", "room"), Ok(Some("lobby")));
        assert_eq!(param("/chat?room=r&name=al", "name"), Ok(Some("al")));
        assert_eq!(param("/chat", "room"), Ok(None));
        assert_eq!(param("/chat?xroom=1&rooms=2", "room"), Ok(None));
        assert_eq!(param("/chat?room=", "room"), Err(()));
        assert_eq!(param("/chat?room=a%20b", "room"), Err(()));
        let long = format!("/chat?name={}", "a".repeat(65));
        assert_eq!(param(&long, "name"), Err(()));
    }
}
