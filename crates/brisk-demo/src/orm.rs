//! Report R3's ORM and query-builder legs: the same single-row query as `/db`, through
//! sqlx's typed rows (`FromRow`) on sqlx's own pool, its SQL written out (`/orm/db`) or put
//! together by sqlx's `QueryBuilder` (`/qb/db`), so the lab can set raw queries (`brisk::db`)
//! beside an existing library's on the same database. The pool is made inside the worker on first use
//! (`connect_lazy`), never in the master. PostgreSQL only.

use std::sync::OnceLock;
use std::time::Duration;

use brisk::http::Body;
use http::{header, HeaderValue, Response, StatusCode};
use serde::Serialize;

/// How long the ORM's query may take before 504, as `/db`'s default.
const QUERY_TIMEOUT: Duration = Duration::from_secs(5);

/// Connections of the ORM's pool per worker. sqlx does not pipeline, so one connection would
/// serve one query at a time; 4 as the lab's peers (`DB_POOL`).
const POOL_SIZE: u32 = 4;

/// One World row, mapped by sqlx.
#[derive(Debug, sqlx::FromRow, Serialize)]
struct World {
    id: i32,
    #[sqlx(rename = "randomnumber")]
    #[serde(rename = "randomNumber")]
    random_number: i32,
}

/// The ORM endpoint over `--database` when it is PostgreSQL.
#[derive(Clone)]
pub(crate) struct Orm {
    url: Option<std::sync::Arc<str>>,
    pool: std::sync::Arc<OnceLock<sqlx::PgPool>>,
}

impl Orm {
    /// The endpoint for the database at `url` (answers 501 unless it is PostgreSQL).
    pub(crate) fn new(url: &str) -> Self {
        let postgres = url.starts_with("postgres://") || url.starts_with("postgresql://");
        Orm {
            url: postgres.then(|| url.into()),
            pool: Default::default(),
        }
    }

    /// `/orm/db`: one random row as JSON, the SQL written out and the row mapped by sqlx.
    pub(crate) async fn db(&self) -> Response<Body> {
        self.one_row(Leg::Mapper).await
    }

    /// `/qb/db`: the same row, its SQL put together by sqlx's `QueryBuilder` on each request
    /// (R3's query-builder leg), the row mapped by sqlx.
    pub(crate) async fn builder_db(&self) -> Response<Body> {
        self.one_row(Leg::Builder).await
    }

    async fn one_row(&self, leg: Leg) -> Response<Body> {
        let Some(url) = &self.url else {
            return answer(
                StatusCode::NOT_IMPLEMENTED,
                r#"{"error":"the ORM endpoints need --database postgres://…"}"#.into(),
            );
        };
        let pool = self.pool.get_or_init(|| {
            sqlx::postgres::PgPoolOptions::new()
                .max_connections(POOL_SIZE)
                .acquire_timeout(Duration::from_secs(2))
                .connect_lazy(url)
                .expect("the URL was checked by brisk::db")
        });
        let id = fastrand::i32(1..=10_000);
        let query = async {
            match leg {
                Leg::Mapper => {
                    sqlx::query_as::<_, World>("SELECT id, randomnumber FROM world WHERE id = $1")
                        .bind(id)
                        .fetch_one(pool)
                        .await
                }
                Leg::Builder => {
                    let mut sql = sqlx::QueryBuilder::<sqlx::Postgres>::new("SELECT ");
                    sql.separated(", ").push("id").push("randomnumber");
                    sql.push(" FROM world WHERE id = ").push_bind(id);
                    sql.build_query_as::<World>().fetch_one(pool).await
                }
            }
        };
        match tokio::time::timeout(QUERY_TIMEOUT, query).await {
            Ok(Ok(world)) => answer(
                StatusCode::OK,
                serde_json::to_string(&world).unwrap_or_default(),
            ),
            Ok(Err(e)) => {
                let status = match e {
                    sqlx::Error::Database(_) | sqlx::Error::RowNotFound => {
                        StatusCode::INTERNAL_SERVER_ERROR
                    }
                    _ => StatusCode::SERVICE_UNAVAILABLE,
                };
                tracing::warn!("sqlx: {e}");
                let words = match status {
                    StatusCode::SERVICE_UNAVAILABLE => "the database is unavailable",
                    _ => "the database could not do it",
                };
                answer(status, serde_json::json!({ "error": words }).to_string())
            }
            Err(_) => answer(
                StatusCode::GATEWAY_TIMEOUT,
                r#"{"error":"the query took longer than 5000 ms"}"#.into(),
            ),
        }
    }
}

/// How an endpoint of this file gets its SQL.
#[derive(Clone, Copy)]
enum Leg {
    /// Written out, as a string constant.
    Mapper,
    /// Put together by a query builder on each request.
    Builder,
}

fn answer(status: StatusCode, json: String) -> Response<Body> {
    let mut r = Response::new(Body::from(json));
    *r.status_mut() = status;
    let h = r.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    h.insert(header::SERVER, HeaderValue::from_static("brisk"));
    r
}
