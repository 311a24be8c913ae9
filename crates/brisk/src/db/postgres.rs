//! [`Postgres`]: PostgreSQL on `tokio-postgres`, one small pool per worker.
//!
//! - **Opened inside the worker, on first use**: a value made in `main` (which the master runs
//!   too) connects nothing until a worker queries.
//! - **Pipelining**: a tokio-postgres client sends the queries of every request that awaits
//!   it at once without waiting for earlier answers, so one connection (the default) serves a
//!   whole worker; a query goes to the connection with the fewest in flight. A worker has
//!   `pool_size × max_pipeline` places; past them, queries wait for one in arrival order (a
//!   semaphore, so a freed place wakes one waiter, not all), up to the acquire timeout.
//! - **Statements** are prepared once per connection and cached by their SQL.
//! - **Reconnects** with a back-off of at most `max_backoff`; while no connection is up,
//!   queries fail at once with [`DbError::Unavailable`] instead of waiting.
//! - **Failover**: a URL with several hosts and `target_session_attrs=read-write` reconnects
//!   to whichever host is the primary now.
//! - **Timeouts**: a query past `query_timeout` is cancelled on the server and fails with
//!   [`DbError::Timeout`].

use std::collections::HashMap;
use std::str::FromStr;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use bytes::BytesMut;
use tokio::sync::{Notify, Semaphore, SemaphorePermit};
use tokio_postgres::types::{IsNull, ToSql, Type};
use tokio_postgres::{Client, Config, NoTls, Statement};

use super::error::DbError;
use super::value::{Row, Value};

/// How a worker uses a PostgreSQL database.
#[derive(Debug, Clone)]
pub struct PostgresOptions {
    /// Connections per worker. Default 1: queries pipeline on it.
    pub pool_size: usize,
    /// Queries in flight on one connection before more wait for a free place.
    pub max_pipeline: usize,
    /// How long a query waits for a place before failing with [`DbError::PoolTimeout`].
    pub acquire_timeout: Duration,
    /// How long a query may run before it is cancelled ([`DbError::Timeout`]).
    pub query_timeout: Duration,
    /// How long one connection attempt may take.
    pub connect_timeout: Duration,
    /// The longest pause between reconnection attempts.
    pub max_backoff: Duration,
}

impl Default for PostgresOptions {
    fn default() -> Self {
        PostgresOptions {
            pool_size: 1,
            max_pipeline: 256,
            acquire_timeout: Duration::from_secs(2),
            query_timeout: Duration::from_secs(5),
            connect_timeout: Duration::from_secs(3),
            max_backoff: Duration::from_secs(1),
        }
    }
}

/// A PostgreSQL database as one worker sees it; cheap to clone, `Send + Sync`.
///
/// ```no_run
/// # async fn f() -> Result<(), brisk::db::DbError> {
/// use brisk::db::{Postgres, PostgresOptions};
/// let db = Postgres::new("postgres://app:secret@127.0.0.1/app", PostgresOptions::default())?;
/// let row = db.query_one("SELECT id, randomnumber FROM world WHERE id = $1", vec![42.into()]).await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Postgres {
    inner: Arc<Inner>,
}

struct Inner {
    config: Config,
    options: PostgresOptions,
    slots: OnceLock<Vec<Arc<Slot>>>,
    /// Set once every connection made its first attempt (successful or not).
    attempted: AtomicUsize,
    /// Signalled when a connection comes up or a first attempt ends.
    changed: Notify,
    /// The worker's places in its connections' pipelines (`pool_size × max_pipeline`).
    places: Semaphore,
}

/// One connection and what belongs to it.
#[derive(Default)]
struct Slot {
    client: Mutex<Option<Arc<Client>>>,
    statements: Mutex<HashMap<Box<str>, Prepared>>,
    in_flight: AtomicUsize,
    last_error: Mutex<String>,
    first_attempt_done: AtomicBool,
}

#[derive(Clone)]
struct Prepared {
    statement: Statement,
    columns: Arc<[String]>,
}

impl Postgres {
    /// A database at `url` (`postgres://user:password@host:port/db`, or several hosts as
    /// `host=a,b` with `target_session_attrs=read-write`). Only the URL is checked here.
    pub fn new(url: &str, options: PostgresOptions) -> Result<Self, DbError> {
        let mut config =
            Config::from_str(url).map_err(|e| DbError::Config(format!("{url}: {e}")))?;
        config.connect_timeout(options.connect_timeout);
        let places = options.pool_size.max(1) * options.max_pipeline.max(1);
        Ok(Postgres {
            inner: Arc::new(Inner {
                config,
                options,
                slots: OnceLock::new(),
                attempted: AtomicUsize::new(0),
                changed: Notify::new(),
                places: Semaphore::new(places.min(Semaphore::MAX_PERMITS)),
            }),
        })
    }

    /// Starts connecting now rather than on the first query, and waits (up to the connect
    /// timeout) for the first attempt. Call it from `on_worker_start` to warm up.
    pub async fn connect(&self) -> Result<(), DbError> {
        self.pick().await.map(drop)
    }

    fn slots(&self) -> &[Arc<Slot>] {
        self.inner.slots.get_or_init(|| {
            let slots: Vec<Arc<Slot>> = (0..self.inner.options.pool_size.max(1))
                .map(|_| Arc::new(Slot::default()))
                .collect();
            for slot in &slots {
                tokio::spawn(keep_connected(self.inner.clone(), slot.clone()));
            }
            slots
        })
    }

    /// A place in the pipelines (waiting for one in arrival order, up to the acquire
    /// timeout), on the connection with the fewest queries in flight.
    async fn pick(&self) -> Result<Place<'_>, DbError> {
        let slots = self.slots();
        let inner = &*self.inner;
        let options = &inner.options;
        let permit = match inner.places.try_acquire() {
            Ok(p) => p,
            Err(_) => {
                let wait = tokio::time::timeout(options.acquire_timeout, inner.places.acquire());
                match wait.await {
                    Ok(Ok(p)) => p,
                    _ => return Err(DbError::PoolTimeout(options.acquire_timeout)),
                }
            }
        };
        let first_deadline = tokio::time::Instant::now() + options.connect_timeout;
        loop {
            let changed = inner.changed.notified();
            let up = slots
                .iter()
                .filter_map(|s| Some((s, s.client.lock().ok()?.clone()?)))
                .min_by_key(|(s, _)| s.in_flight.load(Ordering::Relaxed));
            if let Some((slot, client)) = up {
                slot.in_flight.fetch_add(1, Ordering::Relaxed);
                return Ok(Place {
                    slot: slot.clone(),
                    client,
                    _permit: permit,
                });
            }
            // Before every connection has tried once, wait for it; after, fail fast.
            let all_tried = inner.attempted.load(Ordering::Relaxed) >= slots.len();
            if all_tried
                || tokio::time::timeout_at(first_deadline, changed)
                    .await
                    .is_err()
            {
                let why = slots
                    .iter()
                    .find_map(|s| {
                        let e = s.last_error.lock().ok()?.clone();
                        (!e.is_empty()).then_some(e)
                    })
                    .unwrap_or_else(|| "not connected yet".into());
                return Err(DbError::Unavailable(why));
            }
        }
    }

    /// The statement of `sql` on `place`'s connection: prepared there once, then cached.
    async fn prepared(&self, place: &Place<'_>, sql: &str) -> Result<Prepared, DbError> {
        let cached = place
            .slot
            .statements
            .lock()
            .ok()
            .and_then(|m| m.get(sql).cloned());
        if let Some(p) = cached {
            return Ok(p);
        }
        let statement = place.client.prepare(sql).await.map_err(pg_error)?;
        let columns: Arc<[String]> = statement
            .columns()
            .iter()
            .map(|c| c.name().to_string())
            .collect();
        let p = Prepared { statement, columns };
        if let Ok(mut m) = place.slot.statements.lock() {
            m.insert(sql.into(), p.clone());
        }
        Ok(p)
    }

    /// Awaits `query` within the query timeout; past it, cancels the query on the server.
    async fn timed<T>(
        &self,
        place: &Place<'_>,
        query: impl std::future::Future<Output = Result<T, tokio_postgres::Error>>,
    ) -> Result<T, DbError> {
        let timeout = self.inner.options.query_timeout;
        match tokio::time::timeout(timeout, query).await {
            Ok(result) => result.map_err(pg_error),
            Err(_) => {
                let cancel = place.client.cancel_token();
                tokio::spawn(async move {
                    let _ = cancel.cancel_query(NoTls).await;
                });
                Err(DbError::Timeout(timeout))
            }
        }
    }

    /// Runs `sql` with `params`, prepared once per connection, within the query timeout.
    async fn run(
        &self,
        sql: &str,
        params: &[Value],
    ) -> Result<(Vec<tokio_postgres::Row>, Arc<[String]>), DbError> {
        let place = self.pick().await?;
        let prepared = self.prepared(&place, sql).await?;
        let refs: Vec<&(dyn ToSql + Sync)> = params.iter().map(|v| v as _).collect();
        let rows = self
            .timed(&place, place.client.query(&prepared.statement, &refs))
            .await?;
        Ok((rows, prepared.columns))
    }

    /// Every row `sql` returns; parameters are `$1`, `$2`…
    pub async fn query(&self, sql: &str, params: Vec<Value>) -> Result<Vec<Row>, DbError> {
        let (rows, columns) = self.run(sql, &params).await?;
        rows.iter().map(|r| convert_row(r, &columns)).collect()
    }

    /// The first row `sql` returns, if any.
    pub async fn query_one(&self, sql: &str, params: Vec<Value>) -> Result<Option<Row>, DbError> {
        let (rows, columns) = self.run(sql, &params).await?;
        rows.first().map(|r| convert_row(r, &columns)).transpose()
    }

    /// Runs a statement; returns how many rows it changed.
    pub async fn execute(&self, sql: &str, params: Vec<Value>) -> Result<u64, DbError> {
        let place = self.pick().await?;
        let prepared = self.prepared(&place, sql).await?;
        let refs: Vec<&(dyn ToSql + Sync)> = params.iter().map(|v| v as _).collect();
        self.timed(&place, place.client.execute(&prepared.statement, &refs))
            .await
    }

    /// Runs several statements separated by `;` (no parameters), such as a schema.
    pub async fn execute_batch(&self, sql: &str) -> Result<(), DbError> {
        let place = self.pick().await?;
        place.client.batch_execute(sql).await.map_err(pg_error)
    }
}

/// A taken place in a connection's pipeline, given back on drop.
struct Place<'a> {
    slot: Arc<Slot>,
    client: Arc<Client>,
    _permit: SemaphorePermit<'a>,
}

impl Drop for Place<'_> {
    fn drop(&mut self) {
        self.slot.in_flight.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Keeps one connection up for as long as the worker runs: connect, serve until the
/// connection ends, pause (doubling up to `max_backoff`), connect again.
async fn keep_connected(inner: Arc<Inner>, slot: Arc<Slot>) {
    let min_backoff = Duration::from_millis(50);
    let mut backoff = min_backoff;
    loop {
        let attempt = inner.config.connect(NoTls).await;
        let first = !slot.first_attempt_done.swap(true, Ordering::Relaxed);
        if first {
            inner.attempted.fetch_add(1, Ordering::Relaxed);
        }
        match attempt {
            Ok((client, connection)) => {
                backoff = min_backoff;
                if let Ok(mut m) = slot.statements.lock() {
                    m.clear();
                }
                *slot.client.lock().unwrap_or_else(|p| p.into_inner()) = Some(Arc::new(client));
                inner.changed.notify_waiters();
                let ended = connection.await;
                *slot.client.lock().unwrap_or_else(|p| p.into_inner()) = None;
                let why = match ended {
                    Ok(()) => "the server closed the connection".to_string(),
                    Err(e) => e.to_string(),
                };
                tracing::warn!("PostgreSQL connection lost ({why}); reconnecting");
                *slot.last_error.lock().unwrap_or_else(|p| p.into_inner()) = why;
            }
            Err(e) => {
                if first || backoff >= inner.options.max_backoff {
                    tracing::warn!("cannot connect to PostgreSQL: {e}");
                }
                *slot.last_error.lock().unwrap_or_else(|p| p.into_inner()) = e.to_string();
                inner.changed.notify_waiters();
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(inner.options.max_backoff);
            }
        }
    }
}

fn pg_error(e: tokio_postgres::Error) -> DbError {
    if let Some(db) = e.as_db_error() {
        let code = db.code().code();
        let what = format!("{code}: {}", db.message());
        // 08: connection exceptions; 53: out of resources (too many connections); 57:
        // operator intervention (shutdown, crash, starting up): the server, not the query.
        if code.starts_with("08") || code.starts_with("53") || code.starts_with("57") {
            return DbError::Unavailable(what);
        }
        return DbError::Query(what);
    }
    DbError::Unavailable(e.to_string())
}

fn convert_row(row: &tokio_postgres::Row, columns: &Arc<[String]>) -> Result<Row, DbError> {
    let decode = |e: tokio_postgres::Error| DbError::Decode(e.to_string());
    let mut values = Vec::with_capacity(row.len());
    for (i, column) in row.columns().iter().enumerate() {
        let ty = column.type_();
        let v = match *ty {
            Type::VOID => Value::Null,
            Type::INT2 => row
                .try_get::<_, Option<i16>>(i)
                .map_err(decode)?
                .map(i64::from)
                .into(),
            Type::INT4 => row
                .try_get::<_, Option<i32>>(i)
                .map_err(decode)?
                .map(i64::from)
                .into(),
            Type::INT8 => row.try_get::<_, Option<i64>>(i).map_err(decode)?.into(),
            Type::OID => row
                .try_get::<_, Option<u32>>(i)
                .map_err(decode)?
                .map(i64::from)
                .into(),
            Type::BOOL => row
                .try_get::<_, Option<bool>>(i)
                .map_err(decode)?
                .map(i64::from)
                .into(),
            Type::FLOAT4 => row
                .try_get::<_, Option<f32>>(i)
                .map_err(decode)?
                .map(f64::from)
                .into(),
            Type::FLOAT8 => row.try_get::<_, Option<f64>>(i).map_err(decode)?.into(),
            Type::BYTEA => row.try_get::<_, Option<Vec<u8>>>(i).map_err(decode)?.into(),
            _ => row
                .try_get::<_, Option<String>>(i)
                .map_err(|_| {
                    DbError::Decode(format!(
                        "column {} has type {ty}, which Value does not hold",
                        column.name()
                    ))
                })?
                .into(),
        };
        values.push(v);
    }
    Ok(Row::new(columns.clone(), values))
}

/// A [`Value`] as whatever the parameter's type is: an `Int` binds to SMALLINT, INT, BIGINT,
/// BOOLEAN or a float column; a `Text` to any text type.
impl ToSql for Value {
    fn to_sql(
        &self,
        ty: &Type,
        out: &mut BytesMut,
    ) -> Result<IsNull, Box<dyn std::error::Error + Sync + Send>> {
        match self {
            Value::Null => Ok(IsNull::Yes),
            Value::Int(i) => match *ty {
                Type::INT2 => i16::try_from(*i)?.to_sql(ty, out),
                Type::INT4 => i32::try_from(*i)?.to_sql(ty, out),
                Type::INT8 => i.to_sql(ty, out),
                Type::OID => u32::try_from(*i)?.to_sql(ty, out),
                Type::BOOL => (*i != 0).to_sql(ty, out),
                Type::FLOAT4 => (*i as f32).to_sql(ty, out),
                Type::FLOAT8 => (*i as f64).to_sql(ty, out),
                _ => i.to_string().as_str().to_sql(ty, out),
            },
            Value::Float(f) => match *ty {
                Type::FLOAT4 => (*f as f32).to_sql(ty, out),
                _ => f.to_sql(ty, out),
            },
            Value::Text(s) => s.as_str().to_sql(ty, out),
            Value::Bytes(b) => b.as_slice().to_sql(ty, out),
        }
    }

    fn accepts(_ty: &Type) -> bool {
        true
    }

    tokio_postgres::types::to_sql_checked!();
}
