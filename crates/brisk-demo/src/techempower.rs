//! The TechEmpower Framework Benchmarks' test set, by their published rules: `/plaintext`,
//! `/json`, `/db`, `/queries`, `/fortunes`, `/updates` and `/cached-queries`, on whichever
//! database `--database` names (SQLite under the run directory by default).
//!
//! The tables and their rows come from the demo's first migration
//! (`migrations/*/0001_techempower.sql`), applied at start before any worker serves. A
//! database that is down answers 503 with a JSON error, a query past its timeout 504.

use std::cell::Cell;
use std::future::ready;
use std::rc::Rc;
use std::time::Duration;

use brisk::db::{Db, DbError, DbKind, QueryCache, Row, RowView, Value};
use brisk::http::Body;
use brisk::redis::{Redis, RedisError};
use futures_util::future::LocalBoxFuture;
use http::{header, HeaderValue, Response, StatusCode};
use sailfish::TemplateSimple;
use serde::{Deserialize, Serialize};

use crate::blocking::BlockingDb;

/// Rows of the World table.
const WORLD_ROWS: i32 = 10_000;
/// One World row by id.
const SELECT_WORLD: &str = "SELECT id, randomnumber FROM world WHERE id = $1";

/// How long a worker keeps the World table for `/cached-queries` before loading it again.
const WORLD_CACHE_TTL: Duration = Duration::from_secs(60);
/// The most rows one request may ask for.
const MAX_QUERIES: usize = 500;

/// One row of the World table, as the tests return it (and, decoded from the table's
/// `randomnumber` column, as the worker's cache keeps it).
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
struct World {
    id: i32,
    #[serde(rename(serialize = "randomNumber", deserialize = "randomnumber"))]
    random_number: i32,
}

/// One fortune, for the template.
struct Fortune {
    id: i32,
    message: String,
}

/// The fortunes page; sailfish escapes `message` for HTML.
#[derive(TemplateSimple)]
#[template(path = "sailfish/fortunes.stpl")]
struct FortunesPage<'a> {
    fortunes: &'a [Fortune],
}

#[derive(Serialize)]
struct Message {
    message: &'static str,
}

/// Why a test could not answer: the status and what to say.
struct Failure {
    status: u16,
    message: String,
}

/// The database's status and general words; the whole error goes to the log.
impl From<DbError> for Failure {
    fn from(e: DbError) -> Self {
        e.log();
        Failure {
            status: e.http_status(),
            message: e.client_message().to_string(),
        }
    }
}

/// Redis's status and general words; the whole error goes to the log.
impl From<RedisError> for Failure {
    fn from(e: RedisError) -> Self {
        tracing::warn!("redis: {e}");
        Failure {
            status: e.http_status(),
            message: e.client_message().to_string(),
        }
    }
}

/// One of the tests, by its path: found before any future is made, so that other requests
/// make none of [`Techempower::answer`]'s.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Test {
    Plaintext,
    Json,
    Db,
    Queries,
    Updates,
    CachedQueries,
    Fortunes,
    R5,
}

impl Test {
    /// The test `path` names, if any.
    pub(crate) fn of(path: &str) -> Option<Test> {
        Some(match path {
            "/plaintext" => Test::Plaintext,
            "/json" => Test::Json,
            "/db" => Test::Db,
            "/queries" => Test::Queries,
            "/updates" => Test::Updates,
            "/cached-queries" => Test::CachedQueries,
            "/fortunes" => Test::Fortunes,
            "/r5" => Test::R5,
            _ => return None,
        })
    }
}

/// The test set over one database; cheap to clone.
#[derive(Clone)]
pub(crate) struct Techempower {
    db: Db,
    /// With `--redis`, `/cached-queries` reads the World rows from Redis.
    redis: Option<Redis>,
    /// The World table, for `/cached-queries` without Redis: this worker's query cache.
    cache: QueryCache,
    /// Whether this worker has made sure Redis holds the World rows.
    redis_filled: Rc<Cell<bool>>,
    /// With `--blocking-db`, the URL the synchronous client of each worker connects to.
    blocking_url: Option<Rc<str>>,
    /// This worker's synchronous client, made on first use.
    blocking: Rc<std::cell::OnceCell<BlockingDb>>,
}

impl Techempower {
    /// The tests over `db`, with `/cached-queries` from `redis` when given (nothing is
    /// connected yet).
    pub(crate) fn new(db: Db, redis: Option<Redis>) -> Self {
        Techempower {
            db,
            redis,
            cache: QueryCache::new(16, WORLD_CACHE_TTL),
            redis_filled: Rc::default(),
            blocking_url: None,
            blocking: Rc::default(),
        }
    }

    /// `/db`, `/queries` and `/r5` with a synchronous client on `url` that blocks the worker
    /// while it waits (report R5's synchronous workers).
    pub(crate) fn blocking(mut self, url: &str) -> Self {
        self.blocking_url = Some(url.into());
        self
    }

    /// Answers `test` with the counts `query` asks for: one boxed future the size of that
    /// test's own, not of the largest test's, holding neither the request nor the router (the
    /// box is filled by a copy of the future, so its size is paid on every request).
    pub(crate) fn answer(
        self: &Rc<Self>,
        test: Test,
        query: Option<&str>,
    ) -> LocalBoxFuture<'static, Response<Body>> {
        let tests = self.clone();
        match test {
            Test::Plaintext => Box::pin(ready(typed("Hello, World!", "text/plain"))),
            Test::Json => Box::pin(ready(json(&Message {
                message: "Hello, World!",
            }))),
            Test::Db => {
                Box::pin(async move { answered(tests.one_world().await.map(|w| json(&w))) })
            }
            Test::Queries => {
                let n = count(query, "queries");
                Box::pin(async move { answered(tests.worlds(n).await.map(|w| worlds_json(&w))) })
            }
            Test::Updates => {
                let n = count(query, "queries");
                Box::pin(async move { answered(tests.update(n).await.map(|w| worlds_json(&w))) })
            }
            Test::CachedQueries => {
                let n = count(query, "count");
                Box::pin(async move { answered(tests.cached(n).await.map(|w| worlds_json(&w))) })
            }
            Test::Fortunes => Box::pin(async move { answered(tests.fortunes().await) }),
            Test::R5 => Box::pin(async move { answered(tests.r5().await) }),
        }
    }

    /// The rows of `sql`: asynchronously, or with `--blocking-db` on the synchronous client
    /// (the worker's loop waits).
    async fn rows(&self, sql: &str, params: Vec<Value>) -> Result<Vec<Row>, DbError> {
        match &self.blocking_url {
            None => self.db.query(sql, params).await,
            Some(url) => {
                let client = match self.blocking.get() {
                    Some(c) => c,
                    None => {
                        let c = BlockingDb::new(url)?;
                        self.blocking.get_or_init(|| c)
                    }
                };
                client.query(sql, params)
            }
        }
    }

    async fn world(&self, id: i32) -> Result<World, DbError> {
        let world = if self.blocking_url.is_some() {
            let rows = self.rows(SELECT_WORLD, vec![id.into()]).await?;
            rows.first().map(world_of).transpose()?
        } else {
            // Read where it lies in the answer, straight into a `World`.
            let worlds = self.db.query_map(SELECT_WORLD, vec![id.into()], read_world);
            worlds.await?.into_iter().next()
        };
        world.ok_or_else(|| DbError::Decode(format!("no world row {id}")))
    }

    /// Report R5's request: two rows by id and a `LIMIT 5` list, one query after another.
    async fn r5(&self) -> Result<Response<Body>, DbError> {
        let first = self.world(random_id()).await?;
        let second = self.world(random_id()).await?;
        let top = self
            .rows(
                "SELECT id, randomnumber FROM world ORDER BY id LIMIT 5",
                vec![],
            )
            .await?
            .iter()
            .map(world_of)
            .collect::<Result<Vec<_>, _>>()?;
        Ok(json(
            &serde_json::json!({ "first": first, "second": second, "top": top }),
        ))
    }

    async fn one_world(&self) -> Result<World, DbError> {
        self.world(random_id()).await
    }

    /// `n` random rows, one SELECT each, each on its own as TechEmpower's rules ask (on
    /// PostgreSQL all pipelined in one write, each ending in its own `Sync`), or one at a
    /// time in blocking mode.
    async fn worlds(&self, n: usize) -> Result<Vec<World>, DbError> {
        if self.blocking_url.is_some() {
            let queries = (0..n).map(|_| self.world(random_id()));
            return futures_util::future::try_join_all(queries).await;
        }
        if n == 1 {
            // One query: `/db`'s, without the lists a pipeline of several is built from.
            return Ok(vec![self.one_world().await?]);
        }
        let ids: Vec<i32> = (0..n).map(|_| random_id()).collect();
        let lists = ids.iter().map(|&id| vec![id.into()]).collect();
        let runs = self.db.query_pipelined_map(SELECT_WORLD, lists, read_world);
        ids.iter()
            .zip(runs.await?)
            .map(|(id, worlds)| match worlds?.into_iter().next() {
                Some(world) => Ok(world),
                None => Err(DbError::Decode(format!("no world row {id}"))),
            })
            .collect()
    }

    async fn update(&self, n: usize) -> Result<Vec<World>, DbError> {
        let mut worlds = self.worlds(n).await?;
        for w in &mut worlds {
            w.random_number = random_id();
        }
        // One statement for all rows, ids sorted (no deadlocks between workers), each id once
        // (its last new number, which every row of that id in the answer then shows).
        let mut latest: Vec<World> = worlds.clone();
        latest.sort_by_key(|w| w.id);
        latest.dedup_by(|later, earlier| {
            let same = later.id == earlier.id;
            if same {
                earlier.random_number = later.random_number;
            }
            same
        });
        for w in &mut worlds {
            if let Ok(i) = latest.binary_search_by_key(&w.id, |l| l.id) {
                w.random_number = latest[i].random_number;
            }
        }
        if self.db.kind() == DbKind::Postgres {
            // One statement whatever the count (prepared once): the ids and the new numbers
            // as two int[] parameters, sent in binary.
            let list = |f: fn(&World) -> i32| Value::array(latest.iter().map(f));
            self.db
                .execute(
                    "UPDATE world SET randomnumber = v.r \
                     FROM unnest($1::int[], $2::int[]) AS v(id, r) WHERE world.id = v.id",
                    vec![list(|w| w.id), list(|w| w.random_number)],
                )
                .await?;
            return Ok(worlds);
        }
        // An untyped parameter in a CASE needs a cast; MySQL spells it SIGNED.
        let int = match self.db.kind() {
            DbKind::Mysql => "SIGNED",
            _ => "INTEGER",
        };
        let mut sql = String::from("UPDATE world SET randomnumber = CASE id");
        let mut params = Vec::with_capacity(latest.len() * 2);
        for (i, w) in latest.iter().enumerate() {
            sql.push_str(&format!(
                " WHEN ${} THEN CAST(${} AS {int})",
                2 * i + 1,
                2 * i + 2
            ));
            params.push(w.id.into());
            params.push(w.random_number.into());
        }
        sql.push_str(" END WHERE id IN (");
        for i in 0..latest.len() {
            sql.push_str(&format!("{}${}", if i > 0 { ", " } else { "" }, 2 * i + 1));
        }
        sql.push(')');
        self.db.execute(&sql, params).await?;
        Ok(worlds)
    }

    async fn cached(&self, n: usize) -> Result<Vec<World>, Failure> {
        if let Some(redis) = &self.redis {
            return self.cached_in_redis(redis, n).await;
        }
        Ok(self.cached_in_worker(n).await?)
    }

    /// `n` random rows from Redis (`world:ID` keys, one MGET); the first request of each
    /// worker makes sure Redis holds the table.
    async fn cached_in_redis(&self, redis: &Redis, n: usize) -> Result<Vec<World>, Failure> {
        if !self.redis_filled.get() {
            let loaded: Option<i64> = redis.get("world:loaded").await?;
            if loaded.is_none() {
                let rows = self
                    .db
                    .query("SELECT id, randomnumber FROM world", vec![])
                    .await?;
                let mut mset = brisk::redis::cmd("MSET");
                for row in &rows {
                    let w = world_of(row)?;
                    mset.arg(format!("world:{}", w.id)).arg(w.random_number);
                }
                redis.run::<()>(&mset).await?;
                redis
                    .run::<()>(brisk::redis::cmd("SET").arg("world:loaded").arg(1))
                    .await?;
            }
            self.redis_filled.set(true);
        }
        let ids: Vec<i32> = (0..n).map(|_| random_id()).collect();
        let keys: Vec<String> = ids.iter().map(|id| format!("world:{id}")).collect();
        let numbers: Vec<Option<i32>> = redis.mget(&keys).await?;
        ids.iter()
            .zip(numbers)
            .map(|(&id, n)| match n {
                Some(random_number) => Ok(World { id, random_number }),
                None => {
                    self.redis_filled.set(false);
                    Err(Failure {
                        status: 503,
                        message: format!("world:{id} is not in Redis (flushed?); refilling"),
                    })
                }
            })
            .collect()
    }

    /// `n` random rows of the World table as this worker's [`QueryCache`] holds it (loaded
    /// on first use, again after `WORLD_CACHE_TTL`; hits and misses show in `status`).
    async fn cached_in_worker(&self, n: usize) -> Result<Vec<World>, DbError> {
        // Decoded once per load: a hit copies rows, it does not decode them.
        let table = self
            .cache
            .query_as::<World>(
                &self.db,
                "SELECT id, randomnumber FROM world ORDER BY id",
                vec![],
            )
            .await?;
        Ok((0..n)
            .filter_map(|_| table.get(random_id() as usize - 1).copied())
            .collect())
    }

    async fn fortunes(&self) -> Result<Response<Body>, DbError> {
        // Each row read where it lies in the answer, straight into a `Fortune`.
        let read = |row: &RowView<'_>| {
            Ok(Fortune {
                id: row.get(0)?,
                message: row.get(1)?,
            })
        };
        let mut fortunes = self
            .db
            .query_map("SELECT id, message FROM fortune", vec![], read)
            .await?;
        fortunes.push(Fortune {
            id: 0,
            message: "Additional fortune added at request time.".into(),
        });
        fortunes.sort_by(|a, b| a.message.cmp(&b.message));
        let html = FortunesPage {
            fortunes: &fortunes,
        }
        .render_once()
        .map_err(|e| DbError::Decode(format!("fortunes template: {e}")))?;
        Ok(typed(html, "text/html; charset=utf-8"))
    }
}

fn read_world(row: &RowView<'_>) -> Result<World, DbError> {
    Ok(World {
        id: row.get(0)?,
        random_number: row.get(1)?,
    })
}

fn world_of(row: &Row) -> Result<World, DbError> {
    Ok(World {
        id: row.get(0)?,
        random_number: row.get(1)?,
    })
}

fn random_id() -> i32 {
    fastrand::i32(1..=WORLD_ROWS)
}

/// The row count a request asks for in `name`: missing, empty, not a number or under 1 → 1;
/// over 500 → 500.
fn count(query: Option<&str>, name: &str) -> usize {
    let value = query
        .unwrap_or("")
        .split('&')
        .find_map(|pair| pair.strip_prefix(name)?.strip_prefix('='));
    match value.and_then(|v| v.parse::<i64>().ok()) {
        Some(n) if n > MAX_QUERIES as i64 => MAX_QUERIES,
        Some(n) if n >= 1 => n as usize,
        _ => 1,
    }
}

fn typed(body: impl Into<Body>, content_type: &'static str) -> Response<Body> {
    let mut r = Response::new(body.into());
    let h = r.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    h.insert(header::SERVER, HeaderValue::from_static("brisk"));
    r
}

fn json<T: Serialize>(value: &T) -> Response<Body> {
    json_sized(value, 64)
}

/// Rows as a JSON array, in a buffer made big enough at once (grown step by step, it would
/// be copied at each step).
fn worlds_json(worlds: &[World]) -> Response<Body> {
    // `{"id":10000,"randomNumber":10000},` is 35 bytes.
    json_sized(&worlds, 35 * worlds.len() + 2)
}

fn json_sized<T: Serialize>(value: &T, capacity: usize) -> Response<Body> {
    let mut body = Vec::with_capacity(capacity);
    if let Err(e) = serde_json::to_writer(&mut body, value) {
        body = format!(r#"{{"error":"{e}"}}"#).into_bytes();
    }
    typed(Body::from(body), "application/json")
}

/// A test's answer, or its failure's.
fn answered<E: Into<Failure>>(answer: Result<Response<Body>, E>) -> Response<Body> {
    answer.unwrap_or_else(|e| failure(&e.into()))
}

/// A failure as its status and a JSON error; the log says why.
fn failure(e: &Failure) -> Response<Body> {
    tracing::warn!("{}", e.message);
    let status = StatusCode::from_u16(e.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let mut r = json(&serde_json::json!({ "error": e.message }));
    *r.status_mut() = status;
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_follow_the_rules() {
        assert_eq!(count(None, "queries"), 1);
        assert_eq!(count(Some("queries="), "queries"), 1);
        assert_eq!(count(Some("queries=foo"), "queries"), 1);
        assert_eq!(count(Some("queries=0"), "queries"), 1);
        assert_eq!(count(Some("queries=-3"), "queries"), 1);
        assert_eq!(count(Some("queries=20"), "queries"), 20);
        assert_eq!(count(Some("a=1&queries=501"), "queries"), 500);
        assert_eq!(count(Some("count=7"), "count"), 7);
        assert_eq!(count(Some("queriesx=7"), "queries"), 1);
    }
}
