//! `/api`: a small team chat's rooms and messages on the demo's database (any backend), its
//! schema from the migrations (`migrations/*/0002_chat.sql`):
//!
//! - `POST /api/rooms` `{"name": "…"}` → 201 `{"id", "name", "message_count": 0, "created_at"}`;
//!   a name taken already → 409; a name missing or empty → 400.
//! - `POST /api/rooms/{id}/messages` `{"author": "…", "text": "…"}` → 201 `{"id", "room_id",
//!   "author", "text", "created_at"}`, in one transaction that inserts the message and sets
//!   the room's `message_count` (+1) and `last_message_at`; text over 4,000 characters → 400.
//! - `GET /api/rooms/{id}` → `{"id", "name", "message_count", "last_message_at", "created_at"}`.
//! - `GET /api/rooms/{id}/messages?limit=N` → the newest N (default 50, at most 200), newest
//!   first.
//!
//! Ids are UUIDs (version 7, so they sort by time), times RFC 3339 in UTC with a `Z`. An id
//! that is not a UUID, or a body that is not JSON, is 400; an unknown room 404. Every error
//! body is `{"error": "…"}` in words a client can show; a database error says only what kind
//! of failure it was (the server's message goes to the log).

use brisk::db::{params, Db, DbError, DbKind, ErrorKind, Transaction, TxOptions};
use brisk::http::{Body, IntoResponse, RequestBody};
use chrono::{DateTime, Utc};
use http::{header, HeaderValue, Method, Request, Response, StatusCode};
use http_body_util::{BodyExt, LengthLimitError};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

/// The longest message text, in characters.
const MAX_TEXT: usize = 4_000;
/// The longest room name or author, in characters.
const MAX_NAME: usize = 200;
/// Messages a page holds unless `?limit=` says otherwise, and at most.
const DEFAULT_LIMIT: i64 = 50;
const MAX_LIMIT: i64 = 200;
/// Times a post runs again after a serialization failure or deadlock (SQLite's write lock
/// taken by another worker, MySQL's deadlock detector).
const POST_RETRIES: u32 = 5;

/// Messages posted (committed) through `/api`: an app metric on the metrics listener.
pub(crate) static MESSAGES_POSTED: brisk::metrics::Counter = brisk::metrics::Counter::new(
    "demo_messages_posted_total",
    "Messages posted through /api (committed).",
);

/// A room, as stored and as answered.
#[derive(Debug, Serialize, Deserialize)]
struct Room {
    id: Uuid,
    name: String,
    message_count: i64,
    last_message_at: Option<DateTime<Utc>>,
    created_at: DateTime<Utc>,
}

/// A message, as stored and as answered.
#[derive(Debug, Serialize, Deserialize)]
struct Message {
    id: Uuid,
    room_id: Uuid,
    author: String,
    text: String,
    created_at: DateTime<Utc>,
}

/// Why a request is answered with an error.
#[derive(Debug)]
enum ApiError {
    /// 400, with what was wrong.
    BadRequest(String),
    /// 404, with what was not found.
    NotFound(&'static str),
    /// 409, with what it conflicts with.
    Conflict(&'static str),
    /// The database's status and general words.
    Db(DbError),
}

impl From<DbError> for ApiError {
    fn from(e: DbError) -> Self {
        ApiError::Db(e)
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response<Body> {
        let (status, text) = match self {
            ApiError::BadRequest(why) => (StatusCode::BAD_REQUEST, why),
            ApiError::NotFound(what) => (StatusCode::NOT_FOUND, what.to_string()),
            ApiError::Conflict(what) => (StatusCode::CONFLICT, what.to_string()),
            ApiError::Db(e) => return e.into_response(),
        };
        json(status, &serde_json::json!({ "error": text }))
    }
}

fn bad(why: impl Into<String>) -> ApiError {
    ApiError::BadRequest(why.into())
}

/// The `/api` routes over one database; cheap to clone.
#[derive(Clone)]
pub(crate) struct Api {
    db: Db,
}

impl Api {
    /// The routes over `db`, whose schema the migrations made.
    pub(crate) fn new(db: Db) -> Self {
        Api { db }
    }

    /// Answers a request under `/api`, or gives it back.
    pub(crate) async fn route(
        &self,
        req: Request<RequestBody>,
    ) -> Result<Response<Body>, Request<RequestBody>> {
        let path = req.uri().path();
        let Some(rest) = path.strip_prefix("/api/rooms") else {
            return Err(req);
        };
        let segments: Vec<String> = rest
            .split('/')
            .filter(|s| !s.is_empty())
            .map(str::to_string)
            .collect();
        let method = req.method().clone();
        let query = req.uri().query().map(str::to_string);
        let answer = match (segments.as_slice(), &method) {
            ([], &Method::POST) => self.create_room(req).await,
            ([id], &Method::GET) => self.room(id).await,
            ([id, messages], &Method::POST) if messages == "messages" => self.post(id, req).await,
            ([id, messages], &Method::GET) if messages == "messages" => {
                self.messages(id, query.as_deref()).await
            }
            ([], _) => return Ok(not_allowed("POST")),
            ([_], _) => return Ok(not_allowed("GET")),
            ([_, messages], _) if messages == "messages" => return Ok(not_allowed("GET, POST")),
            _ => Err(ApiError::NotFound("no such route")),
        };
        Ok(answer.unwrap_or_else(IntoResponse::into_response))
    }

    /// `POST /api/rooms`.
    async fn create_room(&self, req: Request<RequestBody>) -> Result<Response<Body>, ApiError> {
        #[derive(Deserialize)]
        struct NewRoom {
            name: Option<String>,
        }
        let new: NewRoom = body(req).await?;
        let name = text_field(new.name, "name", MAX_NAME)?;
        let room = Room {
            id: Uuid::now_v7(),
            name,
            message_count: 0,
            last_message_at: None,
            created_at: now(),
        };
        let created = self
            .db
            .execute(
                "INSERT INTO rooms (id, name, message_count, created_at) VALUES ($1, $2, 0, $3)",
                params![room.id, room.name.as_str(), room.created_at],
            )
            .await;
        match created {
            Ok(_) => {}
            Err(e) if e.kind() == ErrorKind::UniqueViolation => {
                return Err(ApiError::Conflict("a room with that name exists already"))
            }
            Err(e) => return Err(e.into()),
        }
        let body = serde_json::json!({
            "id": room.id,
            "name": room.name,
            "message_count": 0,
            "created_at": room.created_at,
        });
        Ok(json(StatusCode::CREATED, &body))
    }

    /// `GET /api/rooms/{id}`.
    async fn room(&self, id: &str) -> Result<Response<Body>, ApiError> {
        let id = room_id(id)?;
        let room: Room = self
            .db
            .query_one_as(
                "SELECT id, name, message_count, last_message_at, created_at FROM rooms \
                 WHERE id = $1",
                params![id],
            )
            .await?
            .ok_or(ApiError::NotFound("no such room"))?;
        Ok(json(StatusCode::OK, &room))
    }

    /// `POST /api/rooms/{id}/messages`: the message and its room's count, in one
    /// transaction.
    async fn post(&self, id: &str, req: Request<RequestBody>) -> Result<Response<Body>, ApiError> {
        #[derive(Deserialize)]
        struct NewMessage {
            author: Option<String>,
            text: Option<String>,
        }
        let room_id = room_id(id)?;
        let new: NewMessage = body(req).await?;
        let author = text_field(new.author, "author", MAX_NAME)?;
        let text = text_field(new.text, "text", MAX_TEXT)?;
        let options = TxOptions::default().retries(POST_RETRIES);
        // The message first where the room's row then stays locked only from the UPDATE to
        // the commit (PostgreSQL: the foreign key's check takes a KEY SHARE lock, which the
        // UPDATE's does not conflict with). Not on MySQL, whose check takes a shared lock
        // that two posts would both hold while each waits to update the row: a deadlock.
        let message_first = self.db.kind() != DbKind::Mysql;
        let message = self
            .db
            .transaction_with(
                options,
                async |tx: &mut Transaction| -> Result<Message, ApiError> {
                    let message = Message {
                        id: Uuid::now_v7(),
                        room_id,
                        author: author.clone(),
                        text: text.clone(),
                        created_at: now(),
                    };
                    if message_first {
                        insert_message(tx, &message).await?;
                        bump_room(tx, &message).await?;
                    } else {
                        bump_room(tx, &message).await?;
                        insert_message(tx, &message).await?;
                    }
                    Ok(message)
                },
            )
            .await?;
        MESSAGES_POSTED.inc();
        Ok(json(StatusCode::CREATED, &message))
    }

    /// `GET /api/rooms/{id}/messages?limit=N`.
    async fn messages(&self, id: &str, query: Option<&str>) -> Result<Response<Body>, ApiError> {
        let room_id = room_id(id)?;
        let limit = limit(query)?;
        let exists: Option<i64> = self
            .db
            .query_scalar("SELECT 1 FROM rooms WHERE id = $1", params![room_id])
            .await?;
        if exists.is_none() {
            return Err(ApiError::NotFound("no such room"));
        }
        let messages: Vec<Message> = self
            .db
            .query_as(
                "SELECT id, room_id, author, text, created_at FROM messages WHERE room_id = $1 \
                 ORDER BY created_at DESC, id DESC LIMIT $2",
                params![room_id, limit],
            )
            .await?;
        Ok(json(StatusCode::OK, &messages))
    }
}

/// Inserts `message`; a room that does not exist (its foreign key) is 404.
async fn insert_message(tx: &mut Transaction, message: &Message) -> Result<(), ApiError> {
    let inserted = tx
        .execute(
            "INSERT INTO messages (id, room_id, author, text, created_at) \
             VALUES ($1, $2, $3, $4, $5)",
            params![
                message.id,
                message.room_id,
                message.author.as_str(),
                message.text.as_str(),
                message.created_at
            ],
        )
        .await;
    match inserted {
        Ok(_) => Ok(()),
        Err(e) if e.kind() == ErrorKind::ForeignKeyViolation => {
            Err(ApiError::NotFound("no such room"))
        }
        Err(e) => Err(e.into()),
    }
}

/// Counts `message` in its room; a room that does not exist is 404.
async fn bump_room(tx: &mut Transaction, message: &Message) -> Result<(), ApiError> {
    let found = tx
        .execute(
            "UPDATE rooms SET message_count = message_count + 1, last_message_at = $2 \
             WHERE id = $1",
            params![message.room_id, message.created_at],
        )
        .await?;
    if found == 0 {
        return Err(ApiError::NotFound("no such room"));
    }
    Ok(())
}

/// 405, naming the methods the route takes.
fn not_allowed(allow: &'static str) -> Response<Body> {
    let mut r = json(
        StatusCode::METHOD_NOT_ALLOWED,
        &serde_json::json!({ "error": format!("this route takes {allow}") }),
    );
    r.headers_mut()
        .insert(header::ALLOW, HeaderValue::from_static(allow));
    r
}

/// Now, to the microsecond (what every backend keeps), so that an answer and a later read of
/// the same row agree.
fn now() -> DateTime<Utc> {
    let now = Utc::now();
    DateTime::from_timestamp_micros(now.timestamp_micros()).unwrap_or(now)
}

/// A room id from the path.
fn room_id(text: &str) -> Result<Uuid, ApiError> {
    Uuid::parse_str(text).map_err(|_| bad(format!("{text:?} is not a room id (a UUID)")))
}

/// `?limit=N`: default 50, at most 200, at least 1.
fn limit(query: Option<&str>) -> Result<i64, ApiError> {
    let value = query
        .unwrap_or("")
        .split('&')
        .find_map(|pair| pair.strip_prefix("limit="));
    match value {
        None => Ok(DEFAULT_LIMIT),
        Some(v) => match v.parse::<i64>() {
            Ok(n) if n >= 1 => Ok(n.min(MAX_LIMIT)),
            _ => Err(bad("limit is a number of messages, 1 or more")),
        },
    }
}

/// A required text field: present, not blank, at most `max` characters.
fn text_field(value: Option<String>, field: &str, max: usize) -> Result<String, ApiError> {
    let value = value.ok_or_else(|| bad(format!("{field} is required")))?;
    if value.trim().is_empty() {
        return Err(bad(format!("{field} must not be empty")));
    }
    if value.chars().count() > max {
        return Err(bad(format!("{field} is longer than {max} characters")));
    }
    Ok(value)
}

/// The request's JSON body as a `T`.
async fn body<T: serde::de::DeserializeOwned>(req: Request<RequestBody>) -> Result<T, ApiError> {
    let bytes = match req.into_body().collect().await {
        Ok(body) => body.to_bytes(),
        Err(e) if e.is::<LengthLimitError>() => return Err(bad("the body is too large")),
        Err(_) => return Err(bad("the body could not be read")),
    };
    serde_json::from_slice(&bytes).map_err(|e| {
        if e.is_data() {
            bad(format!("the body is JSON of another shape: {e}"))
        } else {
            bad("the body is not JSON")
        }
    })
}

/// `value` as a JSON answer with `status`.
fn json(status: StatusCode, value: &impl Serialize) -> Response<Body> {
    let body = serde_json::to_vec(value).unwrap_or_default();
    let mut r = Response::new(Body::from(body));
    *r.status_mut() = status;
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    r
}
