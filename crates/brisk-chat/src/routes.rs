//! The chat's HTTP API, an ordinary axum `Router<Chat>`: accounts, rooms, messages, mentions,
//! and the WebSocket route that streams a room's messages live. Every answer but the page is
//! JSON; every refusal is `{"error": "..."}` with a status that says what kind.

use std::net::SocketAddr;

use axum::extract::{ConnectInfo, FromRef, Path, Query, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{Html, IntoResponse, Response};
use axum::routing::{delete, get, post};
use axum::{Json, Router};
use brisk::db::DbError;
use brisk::http::login_throttle::{Attempt, LoginThrottle};
use brisk::http::session::Sessions;
use brisk::ws::WebSocketUpgrade;
use serde::Deserialize;
use serde_json::json;

use crate::auth::{self, SignedIn};
use crate::figures;
use crate::live::{self, Listener};
use crate::mentions::Mentions;
use crate::store::{Refused, Room, Store};

/// The one page: sign in, rooms, messages.
const PAGE: &str = include_str!("../static/index.html");

/// What every route shares; cheap to clone, `Send + Sync`.
#[derive(Clone)]
pub(crate) struct Chat {
    pub(crate) store: Store,
    pub(crate) sessions: Sessions,
    pub(crate) throttle: LoginThrottle,
    /// Password hashing slots of this worker ([`auth::hashing_slots`]).
    pub(crate) hashing: std::sync::Arc<tokio::sync::Semaphore>,
    pub(crate) mentions: Option<Mentions>,
    pub(crate) max_message_bytes: usize,
}

impl FromRef<Chat> for Store {
    fn from_ref(chat: &Chat) -> Store {
        chat.store.clone()
    }
}

/// A refusal: its status and what to tell the client.
#[derive(Debug)]
pub(crate) struct ApiError {
    status: StatusCode,
    message: String,
    retry_after: Option<u64>,
}

impl ApiError {
    /// `status` with `message` (a status that is not one answers 500).
    pub(crate) fn new(status: u16, message: impl Into<String>) -> Self {
        ApiError {
            status: StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
            message: message.into(),
            retry_after: None,
        }
    }

    /// The server is busy: 503 with `Retry-After: 1`.
    pub(crate) fn busy(message: &str) -> Self {
        ApiError::new(503, message).retry_after(1)
    }

    /// This refusal with `Retry-After: secs` (at least 1).
    fn retry_after(mut self, secs: u64) -> Self {
        self.retry_after = Some(secs.max(1));
        self
    }

    /// A fault of the server: logged in full, told as 500.
    pub(crate) fn internal(why: String) -> Self {
        tracing::error!("{why}");
        ApiError::new(500, "the server failed; it is logged")
    }
}

impl From<DbError> for ApiError {
    /// The database's failure as Brisk answers it: 503 when it is down, 504 past a timeout,
    /// 409 for a conflict… with a message safe to show (the details go to the log).
    fn from(e: DbError) -> Self {
        e.log();
        ApiError::new(e.http_status(), e.client_message())
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut response = (self.status, Json(json!({ "error": self.message }))).into_response();
        if let Some(secs) = self.retry_after {
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(secs));
        }
        response
    }
}

/// The routes of the chat.
pub(crate) fn router(chat: Chat) -> Router {
    Router::new()
        .route("/", get(|| async { Html(PAGE) }))
        .route("/api/signup", post(signup))
        .route("/api/login", post(login))
        .route("/api/logout", post(logout))
        .route("/api/me", get(me))
        .route("/api/rooms", get(rooms).post(create_room))
        .route("/api/rooms/{room}/join", post(join))
        .route(
            "/api/rooms/{room}/members/{user}",
            delete(remove_member).put(add_member),
        )
        .route(
            "/api/rooms/{room}/messages",
            get(messages).post(post_message),
        )
        .route("/api/rooms/{room}/live", get(live))
        .route("/api/rooms/{room}/events", get(events))
        .route("/api/mentions", get(mentions))
        .with_state(chat)
}

/// A name and a password, to sign up or in.
#[derive(Deserialize)]
struct Credentials {
    name: String,
    password: String,
}

/// The throttle's admission of an attempt for `name` (any end but `succeeded` counts as a
/// failure); 429 with `Retry-After` when the account or the address failed too often lately.
fn admitted(chat: &Chat, name: &str, from: std::net::IpAddr) -> Result<Attempt, ApiError> {
    chat.throttle.attempt(name, from).map_err(|throttled| {
        ApiError::new(429, "too many failed attempts; try again later")
            .retry_after(throttled.retry_after.as_secs())
    })
}

/// `{"user": NAME, "csrf": TOKEN}` with the cookie of a new session for `name`.
fn signed_in(chat: &Chat, name: &str, status: StatusCode) -> Response {
    let session = chat.sessions.login(name);
    let body = Json(json!({ "user": name, "csrf": session.csrf_token() }));
    let cookie = chat.sessions.set_cookie(&session);
    (status, [(header::SET_COOKIE, cookie)], body).into_response()
}

/// `POST /api/signup {"name", "password"}`: 201 and signed in; 409 if the name is taken.
async fn signup(
    State(chat): State<Chat>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    Json(c): Json<Credentials>,
) -> Result<Response, ApiError> {
    if !auth::valid_name(&c.name) {
        return Err(ApiError::new(
            400,
            "a name is 1 to 32 letters, digits, - or _",
        ));
    }
    if c.password.len() < 8 {
        return Err(ApiError::new(400, "a password has at least 8 characters"));
    }
    let attempt = admitted(&chat, &c.name, peer.ip())?;
    let hash = auth::hash_password(&chat.hashing, c.password).await?;
    match chat.store.create_user(&c.name, &hash).await {
        Ok(_) => {
            attempt.succeeded();
            Ok(signed_in(&chat, &c.name, StatusCode::CREATED))
        }
        Err(Refused::Taken) => {
            // Names tried and taken count as failures: probing for accounts costs attempts.
            attempt.failed();
            Err(ApiError::new(409, "that name is taken"))
        }
        Err(Refused::Db(e)) => Err(e.into()),
    }
}

/// `POST /api/login {"name", "password"}`: signed in; 401 if either is wrong, 429 (with
/// `Retry-After`) after too many failures for the account or from the address.
async fn login(
    State(chat): State<Chat>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    Json(c): Json<Credentials>,
) -> Result<Response, ApiError> {
    let attempt = admitted(&chat, &c.name, peer.ip())?;
    // A name without an account is checked against a hash of nothing anyone has, at the same
    // cost: how long the answer takes does not tell which names exist.
    let matches = match chat.store.password_hash(&c.name).await? {
        Some(hash) => auth::password_matches(&chat.hashing, c.password, hash).await?,
        None => {
            let unknown = auth::UNKNOWN_ACCOUNT_HASH.to_owned();
            auth::password_matches(&chat.hashing, c.password, unknown).await?;
            false
        }
    };
    if !matches {
        attempt.failed();
        figures::LOGINS_FAILED.inc();
        return Err(ApiError::new(401, "wrong name or password"));
    }
    attempt.succeeded();
    Ok(signed_in(&chat, &c.name, StatusCode::OK))
}

/// `POST /api/logout`: the session cookie deleted; a signed-in session's request needs its
/// CSRF token as any other change does (403 without: another site cannot sign users out).
async fn logout(State(chat): State<Chat>, headers: HeaderMap) -> Result<Response, ApiError> {
    if let Some(session) = chat.sessions.read(&headers).filter(|s| s.user().is_some()) {
        let token = headers.get(auth::CSRF_HEADER).and_then(|v| v.to_str().ok());
        if !token.is_some_and(|t| session.check_csrf(t)) {
            return Err(ApiError::new(
                403,
                "missing or wrong x-csrf-token (GET /api/me gives it)",
            ));
        }
    }
    let cookie = chat.sessions.clear_cookie();
    Ok((
        [(header::SET_COOKIE, cookie)],
        Json(json!({ "user": null })),
    )
        .into_response())
}

/// `GET /api/me`: who is signed in, and the CSRF token for requests that change something;
/// 401 for nobody.
async fn me(State(chat): State<Chat>, headers: HeaderMap) -> Result<Response, ApiError> {
    let session = chat.sessions.read(&headers);
    match session.as_ref().and_then(|s| s.user().map(|u| (s, u))) {
        Some((s, user)) => {
            Ok(Json(json!({ "user": user, "csrf": s.csrf_token() })).into_response())
        }
        None => Err(ApiError::new(401, "sign in first")),
    }
}

/// `GET /api/rooms`: every room, and whether the user is in it.
async fn rooms(State(store): State<Store>, me: SignedIn) -> Result<Response, ApiError> {
    Ok(Json(store.rooms(me.id).await?).into_response())
}

/// A new room's name.
#[derive(Deserialize)]
struct NewRoom {
    name: String,
}

/// `POST /api/rooms {"name"}`: 201, owned and joined by the user; 409 if the name is taken.
async fn create_room(
    State(store): State<Store>,
    me: SignedIn,
    Json(room): Json<NewRoom>,
) -> Result<Response, ApiError> {
    if !auth::valid_name(&room.name) {
        return Err(ApiError::new(
            400,
            "a room name is 1 to 32 letters, digits, - or _",
        ));
    }
    match store.create_room(me.id, &room.name).await {
        Ok(()) => Ok((StatusCode::CREATED, Json(json!({ "room": room.name }))).into_response()),
        Err(Refused::Taken) => Err(ApiError::new(409, "a room of that name exists")),
        Err(Refused::Db(e)) => Err(e.into()),
    }
}

/// The room called `name`, or 404.
async fn room_named(store: &Store, name: &str) -> Result<Room, ApiError> {
    store
        .room(name)
        .await?
        .ok_or_else(|| ApiError::new(404, format!("no room called {name:?}")))
}

/// The room called `name` if `me` is a member: 404 if there is none, 403 if not a member.
async fn room_of_member(store: &Store, name: &str, me: &SignedIn) -> Result<Room, ApiError> {
    let room = room_named(store, name).await?;
    if !store.is_member(room.id, me.id).await? {
        return Err(ApiError::new(403, "join the room first"));
    }
    Ok(room)
}

/// `POST /api/rooms/{room}/join`: the user is a member (again: no change); 403 for one the
/// room's owner took out (only the owner adds them back).
async fn join(
    State(store): State<Store>,
    me: SignedIn,
    Path(name): Path<String>,
) -> Result<Response, ApiError> {
    let room = room_named(&store, &name).await?;
    if !store.join(room.id, me.id).await? {
        return Err(ApiError::new(
            403,
            "the room's owner took you out; only they can add you back",
        ));
    }
    Ok(Json(json!({ "room": room.name, "member": true })).into_response())
}

/// The room called `name`, which `me` must own (403), and the id of the user called `user`
/// (404 if there is none): what the owner's member changes act on.
async fn owned_room_and_user(
    store: &Store,
    me: &SignedIn,
    name: &str,
    user: &str,
) -> Result<(Room, i64), ApiError> {
    let room = room_named(store, name).await?;
    if room.owner_id != me.id {
        return Err(ApiError::new(
            403,
            "only the room's owner adds or removes members",
        ));
    }
    let Some(user_id) = store.user_id(user).await? else {
        return Err(ApiError::new(404, format!("no user called {user:?}")));
    };
    Ok((room, user_id))
}

/// `PUT /api/rooms/{room}/members/{user}`: the room's owner adds a user (one they took out
/// included).
async fn add_member(
    State(store): State<Store>,
    me: SignedIn,
    Path((name, user)): Path<(String, String)>,
) -> Result<Response, ApiError> {
    let (room, user_id) = owned_room_and_user(&store, &me, &name, &user).await?;
    store.add(room.id, user_id).await?;
    Ok(Json(json!({ "room": room.name, "added": user })).into_response())
}

/// `DELETE /api/rooms/{room}/members/{user}`: the room's owner takes a member out; their
/// live sockets and event streams for the room close (4003) on every worker and machine at
/// once. They cannot join it again by themselves: the owner adds them back (`PUT`).
async fn remove_member(
    State(store): State<Store>,
    me: SignedIn,
    Path((name, user)): Path<(String, String)>,
) -> Result<Response, ApiError> {
    let (room, user_id) = owned_room_and_user(&store, &me, &name, &user).await?;
    if !store.remove(room.id, user_id).await? {
        return Err(ApiError::new(404, format!("{user} is not in {name}")));
    }
    live::close_member(&room.name, &user);
    Ok(Json(json!({ "room": room.name, "removed": user })).into_response())
}

/// `?before=ID`: the page of messages older than message `ID`.
#[derive(Deserialize)]
struct Before {
    before: Option<i64>,
}

/// `GET /api/rooms/{room}/messages[?before=ID]`: up to 50 messages, oldest first.
async fn messages(
    State(store): State<Store>,
    me: SignedIn,
    Path(name): Path<String>,
    Query(page): Query<Before>,
) -> Result<Response, ApiError> {
    let room = room_of_member(&store, &name, &me).await?;
    Ok(Json(store.messages(&room, page.before).await?).into_response())
}

/// A message to post.
#[derive(Deserialize)]
struct NewMessage {
    body: String,
}

/// `POST /api/rooms/{room}/messages {"body"}`: 201 with the message, once it is committed;
/// then it goes live to the room's sockets everywhere, and its `@names` to the mention job.
async fn post_message(
    State(chat): State<Chat>,
    me: SignedIn,
    Path(name): Path<String>,
    Json(m): Json<NewMessage>,
) -> Result<Response, ApiError> {
    let body = m.body.trim();
    if body.is_empty() {
        return Err(ApiError::new(400, "an empty message"));
    }
    if body.len() > chat.max_message_bytes {
        return Err(ApiError::new(
            413,
            format!("a message holds at most {} bytes", chat.max_message_bytes),
        ));
    }
    let started = std::time::Instant::now();
    let room = room_of_member(&chat.store, &name, &me).await?;
    let message = chat.store.post(&room, me.id, &me.name, body).await?;
    figures::POSTED.inc();
    figures::POST_SECONDS.observe(started.elapsed().as_secs_f64());
    live::publish(&message);
    if let Some(mentions) = &chat.mentions {
        // The message is kept whatever happens here: a queue that is down costs its
        // mentions, and says so in the log and the answer.
        if let Err(e) = mentions.push(&room, &message).await {
            tracing::error!("mentions of message {} not queued: {e}", message.id);
            let answer = json!({ "message": message, "mentions": "not queued: Redis failed" });
            return Ok((StatusCode::CREATED, Json(answer)).into_response());
        }
    }
    Ok((StatusCode::CREATED, Json(json!({ "message": message }))).into_response())
}

/// `GET /api/rooms/{room}/live`: a WebSocket of the room's new messages (403 for a
/// non-member), served by the `live` endpoint with who it is attached.
async fn live(
    State(store): State<Store>,
    me: SignedIn,
    Path(name): Path<String>,
    ws: WebSocketUpgrade,
) -> Result<Response, ApiError> {
    let room = room_of_member(&store, &name, &me).await?;
    Ok(ws
        .key(live::user_key(&me.name))
        .key(live::member_key(&room.name, &me.name))
        .on_with(
            live::ENDPOINT,
            Listener {
                user: me.name,
                room: room.name,
            },
        ))
}

/// `GET /api/rooms/{room}/events`: the room's live events as server-sent events, for
/// clients without WebSocket (403 for a non-member); it ends when the user is removed.
async fn events(
    State(store): State<Store>,
    me: SignedIn,
    Path(name): Path<String>,
) -> Result<Response, ApiError> {
    let room = room_of_member(&store, &name, &me).await?;
    let keys = [
        live::user_key(&me.name),
        live::member_key(&room.name, &me.name),
    ];
    Ok(brisk::ws::event_stream(&[live::room_group(&room.name)], &keys).into_response())
}

/// `GET /api/mentions`: the messages that mentioned the user, newest first.
async fn mentions(State(store): State<Store>, me: SignedIn) -> Result<Response, ApiError> {
    Ok(Json(store.mentions(me.id).await?).into_response())
}
