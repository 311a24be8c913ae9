//! `POST /api/rooms/{id}/messages` as the Brisk demo answers it (`crates/brisk-demo/src/api.rs`):
//! the body checked, then in one transaction the message inserted (404 if its room does not
//! exist) and the room's counter bumped; 201 with the message as JSON. Same SQL, same tables
//! (the demo's migrations make them).
//!
//! Environment: DATABASE_URL, PORT, DB_POOL (default 4).

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::{Json, Router};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use sqlx::postgres::PgPoolOptions;
use sqlx::PgPool;
use uuid::Uuid;

#[derive(Deserialize)]
struct NewMessage {
    author: Option<String>,
    text: Option<String>,
}

#[derive(Serialize)]
struct Message {
    id: Uuid,
    room_id: Uuid,
    author: String,
    text: String,
    created_at: DateTime<Utc>,
}

fn error(status: StatusCode, text: &str) -> Response {
    (status, Json(serde_json::json!({ "error": text }))).into_response()
}

fn field(value: Option<String>, name: &str, max: usize) -> Result<String, Response> {
    match value {
        None => Err(error(
            StatusCode::BAD_REQUEST,
            &format!("{name} is required"),
        )),
        Some(v) if v.trim().is_empty() => Err(error(
            StatusCode::BAD_REQUEST,
            &format!("{name} must not be empty"),
        )),
        Some(v) if v.chars().count() > max => Err(error(StatusCode::BAD_REQUEST, "too long")),
        Some(v) => Ok(v),
    }
}

async fn post_message(State(pool): State<PgPool>, Path(id): Path<String>, body: Bytes) -> Response {
    let Ok(room_id) = Uuid::parse_str(&id) else {
        return error(StatusCode::BAD_REQUEST, "not a room id");
    };
    let Ok(new) = serde_json::from_slice::<NewMessage>(&body) else {
        return error(StatusCode::BAD_REQUEST, "the body is not JSON");
    };
    let (author, text) = match (
        field(new.author, "author", 200),
        field(new.text, "text", 4000),
    ) {
        (Ok(a), Ok(t)) => (a, t),
        (Err(r), _) | (_, Err(r)) => return r,
    };
    let now = Utc::now();
    let now = DateTime::from_timestamp_micros(now.timestamp_micros()).unwrap_or(now);
    let message = Message {
        id: Uuid::now_v7(),
        room_id,
        author,
        text,
        created_at: now,
    };
    let unavailable = |_| {
        error(
            StatusCode::SERVICE_UNAVAILABLE,
            "the database is unavailable",
        )
    };
    let mut tx = match pool.begin().await {
        Ok(tx) => tx,
        Err(e) => return unavailable(e),
    };
    // The message first: its foreign key finds a missing room, and the room's row is locked
    // only from the UPDATE to the commit (as the demo does).
    let inserted = sqlx::query(
        "INSERT INTO messages (id, room_id, author, text, created_at) VALUES ($1, $2, $3, $4, $5)",
    )
    .bind(message.id)
    .bind(room_id)
    .bind(&message.author)
    .bind(&message.text)
    .bind(now)
    .execute(&mut *tx)
    .await;
    match inserted {
        Err(sqlx::Error::Database(e)) if e.is_foreign_key_violation() => {
            return error(StatusCode::NOT_FOUND, "no such room")
        }
        Err(e) => return unavailable(e),
        Ok(_) => {}
    }
    let bumped = sqlx::query(
        "UPDATE rooms SET message_count = message_count + 1, last_message_at = $2 WHERE id = $1",
    )
    .bind(room_id)
    .bind(now)
    .execute(&mut *tx)
    .await;
    if let Err(e) = bumped {
        return unavailable(e);
    }
    if let Err(e) = tx.commit().await {
        return unavailable(e);
    }
    (StatusCode::CREATED, Json(message)).into_response()
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let url = std::env::var("DATABASE_URL").expect("DATABASE_URL");
    let port: u16 = std::env::var("PORT")
        .expect("PORT")
        .parse()
        .expect("PORT is a number");
    let pool_size = std::env::var("DB_POOL")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(4);
    let pool = PgPoolOptions::new()
        .max_connections(pool_size)
        .connect_lazy(&url)
        .expect("a database URL");
    let app = Router::new()
        .route("/api/rooms/{id}/messages", post(post_message))
        .with_state(pool);
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", port))
        .await
        .expect("bind");
    axum::serve(listener, app).await.expect("serve");
}
