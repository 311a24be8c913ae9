//! What the chat keeps in its database (PostgreSQL or SQLite, one set of SQL for both): users,
//! rooms and their members, messages, mentions. Every value reaches the server as a
//! parameter, never inside the SQL text.

use std::time::{SystemTime, UNIX_EPOCH};

use brisk::db::{params, Db, DbError, ErrorKind};
use serde::{Deserialize, Serialize};

/// The most messages one page of a room's history holds.
pub(crate) const PAGE: i64 = 50;

/// A room as the routes check it.
#[derive(Debug, Clone, Deserialize)]
pub(crate) struct Room {
    pub(crate) id: i64,
    pub(crate) name: String,
    pub(crate) owner_id: i64,
}

/// A room in the list a user sees.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct RoomListed {
    pub(crate) name: String,
    pub(crate) owner: String,
    pub(crate) message_count: i64,
    /// Whether the user is a member (1) or not (0).
    pub(crate) member: i64,
}

/// A message as clients get it, over HTTP and live.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Message {
    pub(crate) id: i64,
    pub(crate) room: String,
    pub(crate) author: String,
    pub(crate) body: String,
    /// Milliseconds since the epoch.
    pub(crate) created_at: i64,
}

/// A message that mentioned the user.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct Mention {
    pub(crate) message_id: i64,
    pub(crate) room: String,
    pub(crate) author: String,
    pub(crate) body: String,
}

/// Why a write was refused.
#[derive(Debug)]
pub(crate) enum Refused {
    /// The name is someone else's already.
    Taken,
    /// The database failed.
    Db(DbError),
}

impl From<DbError> for Refused {
    fn from(e: DbError) -> Self {
        if e.kind() == ErrorKind::UniqueViolation {
            Refused::Taken
        } else {
            Refused::Db(e)
        }
    }
}

/// Now, in milliseconds since the epoch.
fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

/// The chat's queries on one database; cheap to clone, `Send + Sync`.
#[derive(Clone)]
pub(crate) struct Store {
    db: Db,
}

impl Store {
    pub(crate) fn new(db: Db) -> Self {
        Store { db }
    }

    /// A new account; [`Refused::Taken`] if the name is in use.
    pub(crate) async fn create_user(
        &self,
        name: &str,
        password_hash: &str,
    ) -> Result<i64, Refused> {
        let row = self
            .db
            .query_one(
                "INSERT INTO users (name, password_hash, created_at) VALUES ($1, $2, $3) \
                 RETURNING id",
                params![name, password_hash, now_ms()],
            )
            .await?;
        Ok(row.map(|r| r.get(0)).transpose()?.unwrap_or_default())
    }

    /// The password hash of the account called `name`, if there is one.
    pub(crate) async fn password_hash(&self, name: &str) -> Result<Option<String>, DbError> {
        self.db
            .query_scalar(
                "SELECT password_hash FROM users WHERE name = $1",
                params![name],
            )
            .await
    }

    /// The id of the user called `name`.
    pub(crate) async fn user_id(&self, name: &str) -> Result<Option<i64>, DbError> {
        self.db
            .query_scalar("SELECT id FROM users WHERE name = $1", params![name])
            .await
    }

    /// A new room owned (and joined) by `owner_id`, in one transaction.
    pub(crate) async fn create_room(&self, owner_id: i64, name: &str) -> Result<(), Refused> {
        // begin/commit rather than `Db::transaction`'s closure: rustc cannot yet prove an
        // async closure's future `Send`, which an axum handler must be.
        let mut tx = self.db.begin().await?;
        let id: i64 = tx
            .query_scalar(
                "INSERT INTO rooms (name, owner_id, created_at) VALUES ($1, $2, $3) RETURNING id",
                params![name, owner_id, now_ms()],
            )
            .await?
            .unwrap_or_default();
        tx.execute(
            "INSERT INTO members (room_id, user_id) VALUES ($1, $2)",
            params![id, owner_id],
        )
        .await?;
        tx.commit().await?;
        Ok(())
    }

    /// The room called `name`, if there is one.
    pub(crate) async fn room(&self, name: &str) -> Result<Option<Room>, DbError> {
        self.db
            .query_one_as(
                "SELECT id, name, owner_id FROM rooms WHERE name = $1",
                params![name],
            )
            .await
    }

    /// Every room, and whether `user_id` is in it.
    pub(crate) async fn rooms(&self, user_id: i64) -> Result<Vec<RoomListed>, DbError> {
        self.db
            .query_as(
                "SELECT r.name, u.name AS owner, r.message_count, \
                 CASE WHEN m.user_id IS NULL THEN 0 ELSE 1 END AS member \
                 FROM rooms r JOIN users u ON u.id = r.owner_id \
                 LEFT JOIN members m ON m.room_id = r.id AND m.user_id = $1 \
                 ORDER BY r.name",
                params![user_id],
            )
            .await
    }

    /// Whether `user_id` is a member of `room_id`.
    pub(crate) async fn is_member(&self, room_id: i64, user_id: i64) -> Result<bool, DbError> {
        let found: Option<i64> = self
            .db
            .query_scalar(
                "SELECT user_id FROM members WHERE room_id = $1 AND user_id = $2",
                params![room_id, user_id],
            )
            .await?;
        Ok(found.is_some())
    }

    /// Makes `user_id` a member of `room_id` (again: no change), unless the room's owner took
    /// them out: then `Ok(false)`.
    pub(crate) async fn join(&self, room_id: i64, user_id: i64) -> Result<bool, DbError> {
        let mut tx = self.db.begin().await?;
        let removed: Option<i64> = tx
            .query_scalar(
                "SELECT user_id FROM removed_members WHERE room_id = $1 AND user_id = $2",
                params![room_id, user_id],
            )
            .await?;
        if removed.is_some() {
            return Ok(false);
        }
        tx.execute(
            "INSERT INTO members (room_id, user_id) VALUES ($1, $2) ON CONFLICT DO NOTHING",
            params![room_id, user_id],
        )
        .await?;
        tx.commit().await?;
        Ok(true)
    }

    /// Makes `user_id` a member of `room_id` as its owner asks, lifting an earlier removal.
    pub(crate) async fn add(&self, room_id: i64, user_id: i64) -> Result<(), DbError> {
        let mut tx = self.db.begin().await?;
        tx.execute(
            "DELETE FROM removed_members WHERE room_id = $1 AND user_id = $2",
            params![room_id, user_id],
        )
        .await?;
        tx.execute(
            "INSERT INTO members (room_id, user_id) VALUES ($1, $2) ON CONFLICT DO NOTHING",
            params![room_id, user_id],
        )
        .await?;
        tx.commit().await
    }

    /// Takes `user_id` out of `room_id`, who may not join it again by themselves; whether
    /// they were in it.
    pub(crate) async fn remove(&self, room_id: i64, user_id: i64) -> Result<bool, DbError> {
        let mut tx = self.db.begin().await?;
        let n = tx
            .execute(
                "DELETE FROM members WHERE room_id = $1 AND user_id = $2",
                params![room_id, user_id],
            )
            .await?;
        if n > 0 {
            tx.execute(
                "INSERT INTO removed_members (room_id, user_id) VALUES ($1, $2) \
                 ON CONFLICT DO NOTHING",
                params![room_id, user_id],
            )
            .await?;
        }
        tx.commit().await?;
        Ok(n > 0)
    }

    /// Posts `body` by `author` in `room`: the message and the room's count in one
    /// transaction, so neither is kept without the other.
    pub(crate) async fn post(
        &self,
        room: &Room,
        author_id: i64,
        author: &str,
        body: &str,
    ) -> Result<Message, DbError> {
        let created_at = now_ms();
        // A transaction dropped before its commit (an error, a client gone) rolls back.
        let mut tx = self.db.begin().await?;
        let id: i64 = tx
            .query_scalar(
                "INSERT INTO messages (room_id, user_id, body, created_at) \
                 VALUES ($1, $2, $3, $4) RETURNING id",
                params![room.id, author_id, body, created_at],
            )
            .await?
            .unwrap_or_default();
        tx.execute(
            "UPDATE rooms SET message_count = message_count + 1 WHERE id = $1",
            params![room.id],
        )
        .await?;
        tx.commit().await?;
        Ok(Message {
            id,
            room: room.name.clone(),
            author: author.to_string(),
            body: body.to_string(),
            created_at,
        })
    }

    /// The newest messages of `room` before message `before` (or the newest of all), oldest
    /// first.
    pub(crate) async fn messages(
        &self,
        room: &Room,
        before: Option<i64>,
    ) -> Result<Vec<Message>, DbError> {
        let mut page: Vec<Message> = self
            .db
            .query_as(
                "SELECT m.id, r.name AS room, u.name AS author, m.body, m.created_at \
                 FROM messages m JOIN rooms r ON r.id = m.room_id JOIN users u ON u.id = m.user_id \
                 WHERE m.room_id = $1 AND m.id < $2 ORDER BY m.id DESC LIMIT $3",
                params![room.id, before.unwrap_or(i64::MAX), PAGE],
            )
            .await?;
        page.reverse();
        Ok(page)
    }

    /// Records that message `message_id` of `room_id` mentions the user called `name`, if
    /// that user is a member of the room; true only the first time (a job run again after a
    /// crash records nothing twice, and tells no one twice).
    pub(crate) async fn record_mention(
        &self,
        message_id: i64,
        room_id: i64,
        name: &str,
    ) -> Result<bool, DbError> {
        let n = self
            .db
            .execute(
                "INSERT INTO mentions (message_id, user_id) \
                 SELECT $1, u.id FROM users u JOIN members m ON m.user_id = u.id \
                 WHERE m.room_id = $2 AND u.name = $3 ON CONFLICT DO NOTHING",
                params![message_id, room_id, name],
            )
            .await?;
        Ok(n > 0)
    }

    /// The messages that mentioned `user_id` in rooms it is still a member of, newest first.
    pub(crate) async fn mentions(&self, user_id: i64) -> Result<Vec<Mention>, DbError> {
        self.db
            .query_as(
                "SELECT m.id AS message_id, r.name AS room, u.name AS author, m.body \
                 FROM mentions x JOIN messages m ON m.id = x.message_id \
                 JOIN rooms r ON r.id = m.room_id JOIN users u ON u.id = m.user_id \
                 JOIN members k ON k.room_id = m.room_id AND k.user_id = x.user_id \
                 WHERE x.user_id = $1 ORDER BY m.id DESC LIMIT $2",
                params![user_id, PAGE],
            )
            .await
    }
}
