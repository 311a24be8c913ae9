//! The demo's heartbeat (with `--redis`, beside `/jobs`): a schedule that writes a row into
//! the database's `heartbeat` table every 10 s (`--heartbeat-ms` to change it), run by the
//! app's `schedules` process, and `GET /heartbeat` that counts the rows and shows the last.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use brisk::db::{Db, Value};
use brisk::http::Body;
use brisk::schedule::Schedule;
use http::{header, HeaderValue, Response, StatusCode};

const SCHEMA: &str =
    "CREATE TABLE IF NOT EXISTS heartbeat (at_unix BIGINT NOT NULL, pid INTEGER NOT NULL)";

/// The schedule: a row `(now, pid)` every `every`.
pub(crate) fn schedule(db: Db, every: Duration) -> Schedule {
    Schedule::every("heartbeat", every, move |w| {
        let db = db.clone();
        async move {
            let now = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map(|d| d.as_secs())
                .unwrap_or(0);
            db.execute_batch(SCHEMA).await?;
            db.execute(
                "INSERT INTO heartbeat (at_unix, pid) VALUES ($1, $2)",
                vec![Value::Int(now as i64), Value::Int(i64::from(w.pid))],
            )
            .await?;
            Ok::<_, brisk::BoxError>(())
        }
    })
}

/// `GET /heartbeat`: `{"beats": N, "last_unix": T, "last_pid": P}` (nulls before the first).
pub(crate) async fn page(db: &Db) -> Response<Body> {
    let result = async {
        db.execute_batch(SCHEMA).await?;
        let count = db
            .query_one("SELECT COUNT(*) FROM heartbeat", vec![])
            .await?
            .map(|r| r.get::<i64>(0))
            .transpose()?
            .unwrap_or(0);
        let last = db
            .query_one(
                "SELECT at_unix, pid FROM heartbeat ORDER BY at_unix DESC LIMIT 1",
                vec![],
            )
            .await?;
        let (at, pid) = match last {
            Some(r) => (Some(r.get::<i64>(0)?), Some(r.get::<i64>(1)?)),
            None => (None, None),
        };
        Ok::<_, brisk::db::DbError>(serde_json::json!({
            "beats": count,
            "last_unix": at,
            "last_pid": pid,
        }))
    }
    .await;
    let (status, body) = match result {
        Ok(v) => (StatusCode::OK, v.to_string()),
        Err(e) => {
            e.log();
            (
                StatusCode::SERVICE_UNAVAILABLE,
                serde_json::json!({ "error": e.client_message() }).to_string(),
            )
        }
    };
    let mut r = Response::new(Body::from(body));
    *r.status_mut() = status;
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    r
}
