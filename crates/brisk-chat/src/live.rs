//! Live updates over WebSocket: the `live` endpoint that `GET /api/rooms/{room}/live` hands
//! its sockets to. Each socket knows who it is ([`Listener`], attached by the route) and
//! joins its room's group; a posted message reaches the group on every worker and, with
//! Redis, every machine. Sockets are tagged with their user (mentions reach them with
//! `brisk::ws::send_to`) and with their membership (removal closes them with
//! `brisk::ws::close_where`).
//!
//! What a socket gets, as JSON text messages:
//! - `{"type":"joined","room":R,"user":U}` once open;
//! - `{"type":"message","message":{…}}` for each message posted in the room;
//! - `{"type":"mention","mention":{…}}` when a message anywhere mentions the user;
//! - `{"type":"error","error":…}` for anything the client sends (posting is `POST`);
//! - close 4003 when the room's owner removes the user.
//!
//! `GET /api/rooms/{room}/events` streams the same `message` and `mention` events as
//! server-sent events (`data:` lines) for clients without WebSocket, from the same groups
//! and keys; removal from the room ends the stream.

use brisk::ws::{EndpointName, Message, WsConnection, WsEndpoint};
use serde_json::json;

use crate::store;

/// The name the HTTP server registers the endpoint under; its sockets carry a [`Listener`].
pub(crate) const ENDPOINT: EndpointName<Listener> = EndpointName::new("live");

/// Who a socket is, attached by the upgrade route.
pub(crate) struct Listener {
    pub(crate) user: String,
    pub(crate) room: String,
}

/// The group of a room's sockets (and event streams).
pub(crate) fn room_group(room: &str) -> String {
    format!("room:{room}")
}

/// The key of every socket of `user`.
pub(crate) fn user_key(user: &str) -> String {
    format!("user:{user}")
}

/// The key of `user`'s sockets in `room`.
pub(crate) fn member_key(room: &str, user: &str) -> String {
    format!("member:{room}:{user}")
}

/// The endpoint: joins each socket to its room.
pub(crate) fn endpoint() -> WsEndpoint<Listener> {
    let who = |ws: &WsConnection<Listener>| ws.with_data(|l| (l.user.clone(), l.room.clone()));
    // Sockets are known by their session cookie: pages of other sites may not open one.
    WsEndpoint::new()
        .data::<Listener>()
        .same_origin()
        .on_open(move |ws, _| async move {
            let Some((user, room)) = who(&ws) else {
                return;
            };
            ws.join(&room_group(&room));
            let hello = json!({ "type": "joined", "room": room, "user": user });
            let _ = ws.send_text(hello.to_string());
        })
        .on_message(|ws, _| async move {
            let why = json!({
                "type": "error",
                "error": "this socket only listens; post with POST /api/rooms/ROOM/messages",
            });
            let _ = ws.send_text(why.to_string());
        })
}

/// Sends a posted `message` to its room's sockets everywhere.
pub(crate) fn publish(message: &store::Message) {
    let event = json!({ "type": "message", "message": message });
    brisk::ws::broadcast(&room_group(&message.room), Message::text(event.to_string()));
}

/// Tells `user`'s sockets (any room, anywhere) that `mention` names them.
pub(crate) fn notify_mention(user: &str, mention: &store::Mention) {
    let event = json!({ "type": "mention", "mention": mention });
    brisk::ws::send_to(&user_key(user), Message::text(event.to_string()));
}

/// Closes `user`'s sockets in `room` everywhere: they were removed from it.
pub(crate) fn close_member(room: &str, user: &str) {
    brisk::ws::close_where(&member_key(room, user), 4003, "removed from the room");
}
