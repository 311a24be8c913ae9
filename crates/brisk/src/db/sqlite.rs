//! [`Sqlite`]: the embedded default. rusqlite's calls block, so they never run on the worker's
//! event loop: each worker starts a few threads (one by default) on first use, each holding
//! one connection in WAL mode with foreign keys enforced, and a query is a job sent to them
//! whose answer the caller awaits. Statements are prepared once per connection (rusqlite's
//! statement cache). A transaction holds a connection (and its thread) of its own
//! (`sqlite_tx.rs`); the shared ones refuse what would open a transaction or
//! change the connection, and roll back a transaction a statement left open anyway.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use rusqlite::types::ValueRef;
use rusqlite::{Connection, InterruptHandle};

use super::error::{DbError, ErrorKind, ServerError};
use super::row::Row;
use super::statement::rewrite_placeholders;
use super::statement::{self, Dialect, Place};
use super::value::{parse_uuid, Value};
use crate::civil;

/// How a worker uses an SQLite database.
#[derive(Debug, Clone)]
pub struct SqliteOptions {
    /// Threads (each with its own connection) per worker. Default 1: SQLite serialises
    /// writers anyway, and readers rarely wait on one another's I/O.
    pub threads: usize,
    /// A query that runs longer is interrupted and fails with [`DbError::Timeout`].
    /// Default 5 s.
    pub query_timeout: Duration,
    /// How long a writer waits for another connection's lock before failing. Default 5 s.
    pub busy_timeout: Duration,
    /// Connections (each with its thread) per worker that transactions hold, one each,
    /// beside the shared ones; opened as needed and kept for the next. Default 4.
    pub max_transactions: usize,
    /// How long a transaction waits for one of them before failing with
    /// [`DbError::PoolTimeout`]. Default 5 s.
    pub acquire_timeout: Duration,
}

impl Default for SqliteOptions {
    fn default() -> Self {
        SqliteOptions {
            threads: 1,
            query_timeout: Duration::from_secs(5),
            busy_timeout: Duration::from_secs(5),
            max_transactions: 4,
            acquire_timeout: Duration::from_secs(5),
        }
    }
}

/// Where a call stands, shared by its caller (who may time out) and its job.
enum Slot {
    /// Waiting in the queue.
    Queued,
    /// On a connection: the handle that interrupts it.
    Running(InterruptHandle),
    /// Finished; interrupting now would hit the connection's next job.
    Done,
    /// Its caller timed out first: skip it.
    Cancelled,
}

/// Gives up a call when its caller stops waiting for it (a timeout, or the future dropped).
struct AbandonOnDrop(Arc<Mutex<Slot>>);

impl Drop for AbandonOnDrop {
    fn drop(&mut self) {
        let mut slot = self.0.lock().unwrap_or_else(|p| p.into_inner());
        match &*slot {
            Slot::Running(h) => h.interrupt(),
            // Not started yet (the thread is busy or still opening the file): it must not run
            // later for nobody.
            Slot::Queued => *slot = Slot::Cancelled,
            Slot::Cancelled | Slot::Done => {}
        }
    }
}

/// Work for a connection thread: the connection, or why it could not be opened, and the mark
/// a job sets once its work is done and before it answers.
pub(super) type Job = Box<dyn FnOnce(Result<&mut Connection, &DbError>, &WorkDone<'_>) + Send>;

/// Ends a job's count among the running ones. A job marks it before it sends its answer, so
/// a caller that has its answer sees the connection idle in the figures; the thread marks it
/// again after the job (for a job that returned early or panicked), which counts once.
pub(super) struct WorkDone<'a> {
    running: Option<&'a AtomicU64>,
    marked: std::cell::Cell<bool>,
}

impl WorkDone<'_> {
    /// The job's work is over: it no longer counts as running.
    pub(super) fn mark(&self) {
        if let Some(running) = self.running {
            if !self.marked.replace(true) {
                running.fetch_sub(1, Ordering::Relaxed);
            }
        }
    }
}

/// An SQLite database as one worker sees it; cheap to clone, `Send + Sync`. Nothing is opened
/// until the first query, so a value made in `main` opens nothing in the master.
///
/// ```no_run
/// # async fn f() -> Result<(), brisk::db::DbError> {
/// use brisk::db::{Sqlite, SqliteOptions};
/// let db = Sqlite::new("app.sqlite", SqliteOptions::default());
/// db.execute("CREATE TABLE IF NOT EXISTS kv (k TEXT PRIMARY KEY, v TEXT)", vec![]).await?;
/// let row = db.query_one("SELECT v FROM kv WHERE k = $1", vec!["a".into()]).await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Sqlite {
    pub(super) inner: Arc<Inner>,
}

pub(super) struct Inner {
    path: PathBuf,
    pub(super) options: SqliteOptions,
    jobs: OnceLock<Mutex<mpsc::Sender<Job>>>,
    /// Transactions' connections not in use: the job queue of each one's thread.
    pub(super) idle: Mutex<Vec<mpsc::Sender<Job>>>,
    /// One per transaction that may run at once (`max_transactions`).
    pub(super) transactions: Arc<tokio::sync::Semaphore>,
    /// Connections open, and shared ones running a job (the worker's database figures).
    counts: Arc<ThreadCounts>,
}

/// What the connection threads report for the worker's database figures.
#[derive(Default)]
struct ThreadCounts {
    /// Connections open (shared and transactions').
    open: AtomicU64,
    /// Shared connections running a job now.
    running: AtomicU64,
}

impl crate::db_figures::PoolConnections for Inner {
    /// The open connections; busy: the shared ones running a query, and one per transaction
    /// under way.
    fn connections(&self) -> (u64, u64) {
        let max = self
            .options
            .max_transactions
            .clamp(1, tokio::sync::Semaphore::MAX_PERMITS);
        let in_transactions = max.saturating_sub(self.transactions.available_permits()) as u64;
        let open = self.counts.open.load(Ordering::Relaxed);
        let busy = self.counts.running.load(Ordering::Relaxed) + in_transactions;
        (open, busy.min(open))
    }
}

impl Sqlite {
    /// The database in file `path` (created if missing).
    pub fn new(path: impl AsRef<Path>, options: SqliteOptions) -> Self {
        let inner = Arc::new(Inner {
            path: path.as_ref().to_path_buf(),
            transactions: Arc::new(tokio::sync::Semaphore::new(
                options
                    .max_transactions
                    .clamp(1, tokio::sync::Semaphore::MAX_PERMITS),
            )),
            options,
            jobs: OnceLock::new(),
            idle: Mutex::default(),
            counts: Arc::default(),
        });
        let weak: std::sync::Weak<Inner> = Arc::downgrade(&inner);
        crate::db_figures::register(weak);
        Sqlite { inner }
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.inner.path
    }

    /// The job queue, starting the connection threads on first use.
    fn jobs(&self) -> mpsc::Sender<Job> {
        let queue = self.inner.jobs.get_or_init(|| {
            let (tx, rx) = mpsc::channel::<Job>();
            let rx = Arc::new(Mutex::new(rx));
            for i in 0..self.inner.options.threads.max(1) {
                let (rx, path, options, counts) = (
                    rx.clone(),
                    self.inner.path.clone(),
                    self.inner.options.clone(),
                    self.inner.counts.clone(),
                );
                let spawned = std::thread::Builder::new()
                    .name(format!("brisk-sqlite-{i}"))
                    .spawn(move || serve_jobs(&path, &options, &rx, &counts, true));
                if let Err(e) = spawned {
                    tracing::error!("cannot start an SQLite thread: {e}");
                }
            }
            Mutex::new(tx)
        });
        queue.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// A new connection with a thread of its own, for a transaction: its job queue.
    pub(super) fn dedicated(&self) -> Result<mpsc::Sender<Job>, DbError> {
        let (tx, rx) = mpsc::channel::<Job>();
        let (path, options) = (self.inner.path.clone(), self.inner.options.clone());
        let counts = self.inner.counts.clone();
        std::thread::Builder::new()
            .name("brisk-sqlite-tx".into())
            .spawn(move || serve_jobs(&path, &options, &Mutex::new(rx), &counts, false))
            .map_err(|e| DbError::Unavailable(format!("cannot start an SQLite thread: {e}")))?;
        Ok(tx)
    }

    /// Runs `f` on a connection thread and waits for its result without blocking the worker.
    /// A call that runs past the query timeout is interrupted and fails with
    /// [`DbError::Timeout`]. The connection must be left as it was found (no transaction
    /// open, no setting changed): it serves other callers next.
    pub async fn call<R, F>(&self, f: F) -> Result<R, DbError>
    where
        F: FnOnce(&mut Connection) -> Result<R, DbError> + Send + 'static,
        R: Send + 'static,
    {
        let jobs = self.jobs();
        self.call_on(&jobs, f).await
    }

    /// Runs `f` on the thread whose queue is `jobs` (see [`call`](Self::call)).
    pub(super) async fn call_on<R, F>(&self, jobs: &mpsc::Sender<Job>, f: F) -> Result<R, DbError>
    where
        F: FnOnce(&mut Connection) -> Result<R, DbError> + Send + 'static,
        R: Send + 'static,
    {
        self.call_within(jobs, Some(self.inner.options.query_timeout), f)
            .await
    }

    /// Runs `f` on the thread whose queue is `jobs`, interrupted past `timeout` (`None`: as
    /// long as it takes, for a session's migrations).
    pub(super) async fn call_within<R, F>(
        &self,
        jobs: &mpsc::Sender<Job>,
        timeout: Option<Duration>,
        f: F,
    ) -> Result<R, DbError>
    where
        F: FnOnce(&mut Connection) -> Result<R, DbError> + Send + 'static,
        R: Send + 'static,
    {
        let (reply, answer) = tokio::sync::oneshot::channel();
        let slot: Arc<Mutex<Slot>> = Arc::new(Mutex::new(Slot::Queued));
        let job_slot = slot.clone();
        // Whether the call times out or its caller drops it, what is queued never runs and
        // what runs is interrupted.
        let _abandon = AbandonOnDrop(slot);
        let job: Job = Box::new(move |conn, done| {
            let result = match conn {
                Ok(conn) => {
                    {
                        let mut slot = job_slot.lock().unwrap_or_else(|p| p.into_inner());
                        if matches!(*slot, Slot::Cancelled) {
                            // Its caller gave up while it waited in the queue.
                            return;
                        }
                        *slot = Slot::Running(conn.get_interrupt_handle());
                    }
                    let result = f(conn);
                    *job_slot.lock().unwrap_or_else(|p| p.into_inner()) = Slot::Done;
                    result
                }
                Err(e) => Err(e.clone()),
            };
            done.mark();
            let _ = reply.send(result);
        });
        if jobs.send(job).is_err() {
            return Err(DbError::Unavailable("the SQLite threads are gone".into()));
        }
        let stopped = || DbError::Unavailable("the SQLite thread stopped".into());
        let Some(timeout) = timeout else {
            return answer.await.unwrap_or_else(|_| Err(stopped()));
        };
        match tokio::time::timeout(timeout, answer).await {
            Ok(Ok(result)) => result,
            Ok(Err(_)) => Err(stopped()),
            Err(_) => Err(DbError::timed_out(timeout)),
        }
    }

    /// Every row `sql` returns; parameters are `$1`, `$2`…
    pub async fn query(&self, sql: &str, params: Vec<Value>) -> Result<Vec<Row>, DbError> {
        statement::check(sql, Dialect::Sqlite, Place::Shared)?;
        let sql = sqlite_sql(sql, params.len())?;
        self.call(move |conn| left_as_found(conn, query_rows(conn, &sql, &params)))
            .await
    }

    /// The first row `sql` returns, if any.
    pub async fn query_one(&self, sql: &str, params: Vec<Value>) -> Result<Option<Row>, DbError> {
        Ok(self.query(sql, params).await?.into_iter().next())
    }

    /// Runs a statement; returns how many rows it changed.
    pub async fn execute(&self, sql: &str, params: Vec<Value>) -> Result<u64, DbError> {
        statement::check(sql, Dialect::Sqlite, Place::Shared)?;
        let sql = sqlite_sql(sql, params.len())?;
        self.call(move |conn| left_as_found(conn, execute(conn, &sql, &params)))
            .await
    }

    /// Runs several statements separated by `;` (no parameters), such as a schema. A
    /// statement that would open a transaction or change the connection is refused.
    pub async fn execute_batch(&self, sql: &str) -> Result<(), DbError> {
        statement::check(sql, Dialect::Sqlite, Place::Shared)?;
        let sql = sql.to_string();
        self.call(move |conn| left_as_found(conn, conn.execute_batch(&sql).map_err(query_error)))
            .await
    }
}

/// `result`, unless the call left the shared connection inside a transaction (which the
/// statement check should have refused): then that is rolled back, and the call fails.
fn left_as_found<R>(conn: &Connection, result: Result<R, DbError>) -> Result<R, DbError> {
    if conn.is_autocommit() {
        return result;
    }
    let _ = conn.execute_batch("ROLLBACK");
    Err(DbError::Refused(
        "the statement left the shared connection inside a transaction, which was rolled \
         back: run transactions with db.transaction() or db.begin()"
            .into(),
    ))
}

/// Runs one statement; how many rows it changed.
pub(super) fn execute(conn: &Connection, sql: &str, params: &[Value]) -> Result<u64, DbError> {
    let params = sqlite_params(params)?;
    let mut stmt = conn.prepare_cached(sql).map_err(query_error)?;
    let n = stmt
        .execute(rusqlite::params_from_iter(params))
        .map_err(query_error)?;
    Ok(n as u64)
}

/// `$N` placeholders as SQLite's `?N`, if `given` parameters fit them.
pub(super) fn sqlite_sql(sql: &str, given: usize) -> Result<String, DbError> {
    rewrite_placeholders(sql, Dialect::Sqlite, given, |n| format!("?{n}")).map(|(sql, _)| sql)
}

/// Opens the connection, then runs jobs until every sender is gone.
fn serve_jobs(
    path: &Path,
    options: &SqliteOptions,
    jobs: &Mutex<mpsc::Receiver<Job>>,
    counts: &ThreadCounts,
    shared: bool,
) {
    let mut conn = open(path, options);
    match &conn {
        Ok(_) => counts.open.fetch_add(1, Ordering::Relaxed),
        Err(e) => {
            tracing::error!("{e}");
            0
        }
    };
    loop {
        let job = match jobs.lock().unwrap_or_else(|p| p.into_inner()).recv() {
            Ok(job) => job,
            Err(_) => break,
        };
        // A database that could not be opened (a missing directory, a lock held by another
        // process) is tried again for each job, so it heals once the cause goes away.
        if conn.is_err() {
            conn = open(path, options);
            if conn.is_ok() {
                counts.open.fetch_add(1, Ordering::Relaxed);
            }
        }
        let counted = shared && conn.is_ok();
        if counted {
            counts.running.fetch_add(1, Ordering::Relaxed);
        }
        let done = WorkDone {
            running: counted.then_some(&counts.running),
            marked: std::cell::Cell::new(false),
        };
        // A job that panics (a bug reached by a value read) fails its call, whose reply
        // goes unsent; the thread and its connection serve on.
        let ran = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| match &mut conn {
            Ok(c) => job(Ok(c), &done),
            Err(e) => job(Err(e), &done),
        }));
        done.mark();
        if ran.is_err() {
            tracing::error!("an SQLite job panicked; its call failed");
            if let Ok(c) = &conn {
                if !c.is_autocommit() {
                    let _ = c.execute_batch("ROLLBACK");
                }
            }
        }
    }
    if conn.is_ok() {
        counts.open.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Opens the database in WAL mode. Switching a new file to WAL takes an exclusive lock, and
/// SQLite answers "database is locked" at once (without its busy handler) when several workers
/// open the same new file together, so a busy open is tried again until `busy_timeout` passes.
fn open(path: &Path, options: &SqliteOptions) -> Result<Connection, DbError> {
    let fail = |e: rusqlite::Error| {
        DbError::Unavailable(format!(
            "cannot open SQLite database {}: {e}",
            path.display()
        ))
    };
    let deadline = std::time::Instant::now() + options.busy_timeout;
    let mut pause = Duration::from_millis(1);
    loop {
        match open_once(path, options) {
            Err(e) if is_busy(&e) && std::time::Instant::now() < deadline => {
                std::thread::sleep(pause);
                pause = (pause * 2).min(Duration::from_millis(50));
            }
            result => return result.map_err(fail),
        }
    }
}

fn open_once(path: &Path, options: &SqliteOptions) -> rusqlite::Result<Connection> {
    let conn = Connection::open(path)?;
    conn.busy_timeout(options.busy_timeout)?;
    let mode: String = conn.query_row("PRAGMA journal_mode", [], |r| r.get(0))?;
    if !mode.eq_ignore_ascii_case("wal") {
        conn.pragma_update(None, "journal_mode", "WAL")?;
    }
    conn.pragma_update(None, "synchronous", "NORMAL")?;
    conn.pragma_update(None, "foreign_keys", "ON")?;
    conn.set_prepared_statement_cache_capacity(256);
    Ok(conn)
}

fn is_busy(e: &rusqlite::Error) -> bool {
    matches!(
        e.sqlite_error_code(),
        Some(rusqlite::ErrorCode::DatabaseBusy | rusqlite::ErrorCode::DatabaseLocked)
    )
}

pub(super) fn query_rows(
    conn: &Connection,
    sql: &str,
    params: &[Value],
) -> Result<Vec<Row>, DbError> {
    let mut stmt = conn.prepare_cached(sql).map_err(query_error)?;
    let columns: Arc<[String]> = stmt.column_names().iter().map(|c| c.to_string()).collect();
    let declared: Vec<Declared> = stmt
        .columns()
        .iter()
        .map(|c| Declared::of(c.decl_type()))
        .collect();
    let params = sqlite_params(params)?;
    let mut rows = stmt
        .query(rusqlite::params_from_iter(params))
        .map_err(query_error)?;
    let mut out = Vec::new();
    while let Some(row) = rows.next().map_err(query_error)? {
        let mut values = Vec::with_capacity(declared.len());
        for (i, declared) in declared.iter().enumerate() {
            values.push(declared.read(row.get_ref(i).map_err(query_error)?));
        }
        out.push(Row::new(columns.clone(), values));
    }
    Ok(out)
}

/// Parameters as SQLite keeps them: booleans as 0 / 1, dates, times and timestamps as ISO
/// 8601 text (`2026-11-26T12:00:00.000000Z` for an instant), UUIDs, JSON and decimals as text.
pub(super) fn sqlite_params(params: &[Value]) -> Result<Vec<rusqlite::types::Value>, DbError> {
    use rusqlite::types::Value as S;
    params
        .iter()
        .enumerate()
        .map(|(i, v)| {
            Ok(match v {
                Value::Null => S::Null,
                Value::Bool(b) => S::Integer(i64::from(*b)),
                Value::Int(i) => S::Integer(*i),
                Value::Float(f) => S::Real(*f),
                Value::Text(t) => S::Text(t.clone()),
                Value::Bytes(b) => S::Blob(b.clone()),
                Value::Array(_) => {
                    return Err(DbError::Refused(format!(
                        "parameter ${}: SQLite has no arrays (store JSON instead)",
                        i + 1
                    )))
                }
                other => S::Text(other.to_text().unwrap_or_default()),
            })
        })
        .collect()
}

/// What a column's declared type says its values are, for the types SQLite keeps as text or
/// integers: a value that reads as the type becomes it (a `TIMESTAMPTZ` column's ISO text a
/// [`Value::TimestampTz`]), any other stays as SQLite gave it.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Declared {
    Bool,
    Date,
    Time,
    Timestamp,
    TimestampTz,
    Uuid,
    Json,
    Decimal,
    Other,
}

impl Declared {
    fn of(decl_type: Option<&str>) -> Declared {
        let Some(decl) = decl_type else {
            return Declared::Other;
        };
        let decl = decl.trim();
        let base = decl.split(['(', ' ']).next().unwrap_or("");
        let is = |names: &[&str]| names.iter().any(|n| base.eq_ignore_ascii_case(n));
        if is(&["BOOL", "BOOLEAN"]) {
            Declared::Bool
        } else if is(&["DATE"]) {
            Declared::Date
        } else if is(&["TIME"]) {
            Declared::Time
        } else if is(&["TIMESTAMPTZ"])
            || (is(&["TIMESTAMP"]) && decl.to_ascii_uppercase().contains("WITH TIME ZONE"))
        {
            Declared::TimestampTz
        } else if is(&["DATETIME", "TIMESTAMP"]) {
            Declared::Timestamp
        } else if is(&["UUID"]) {
            Declared::Uuid
        } else if is(&["JSON", "JSONB"]) {
            Declared::Json
        } else if is(&["DECIMAL", "NUMERIC"]) {
            Declared::Decimal
        } else {
            Declared::Other
        }
    }

    fn read(self, v: ValueRef<'_>) -> Value {
        let text = |t: &[u8]| String::from_utf8_lossy(t).into_owned();
        match (self, v) {
            (_, ValueRef::Null) => Value::Null,
            (Declared::Bool, ValueRef::Integer(i @ (0 | 1))) => Value::Bool(i == 1),
            (Declared::Decimal, ValueRef::Integer(i)) => Value::Decimal(i.to_string()),
            (Declared::Decimal, ValueRef::Real(f)) => Value::Decimal(f.to_string()),
            // A JSON column's NUMERIC affinity keeps a number as one.
            (Declared::Json, ValueRef::Integer(i)) => Value::Json(Box::new(i.into())),
            (Declared::Json, ValueRef::Real(f)) => serde_json::Number::from_f64(f)
                .map_or(Value::Float(f), |n| Value::Json(Box::new(n.into()))),
            (Declared::Uuid, ValueRef::Blob(b)) if b.len() == 16 => {
                Value::Uuid(b.try_into().expect("16 bytes"))
            }
            (_, ValueRef::Integer(i)) => Value::Int(i),
            (_, ValueRef::Real(f)) => Value::Float(f),
            (_, ValueRef::Blob(b)) => Value::Bytes(b.to_vec()),
            (declared, ValueRef::Text(t)) => {
                let t = std::str::from_utf8(t).unwrap_or_default();
                declared
                    .read_text(t)
                    .unwrap_or_else(|| Value::Text(text(t.as_bytes())))
            }
        }
    }

    fn read_text(self, t: &str) -> Option<Value> {
        let instant = |t: &str| {
            let (micros, offset) = civil::parse_timestamp(t)?;
            micros.checked_sub(i64::from(offset.unwrap_or(0)) * 1_000_000)
        };
        Some(match self {
            Declared::Date => Value::Date(civil::parse_date(t)?),
            Declared::Time => Value::Time(civil::parse_time(t)?),
            Declared::Timestamp => Value::Timestamp(instant(t)?),
            Declared::TimestampTz => Value::TimestampTz(instant(t)?),
            Declared::Uuid => Value::Uuid(parse_uuid(t)?),
            Declared::Json => Value::Json(Box::new(serde_json::from_str(t).ok()?)),
            Declared::Decimal => Value::Decimal(t.to_string()),
            Declared::Bool | Declared::Other => return None,
        })
    }
}

/// rusqlite's error as a [`DbError`]: a constraint by its kind, a lock held by another
/// connection as [`DbError::Unavailable`].
pub(super) fn query_error(e: rusqlite::Error) -> DbError {
    use rusqlite::ffi;
    let rusqlite::Error::SqliteFailure(failure, message) = &e else {
        return DbError::server(ErrorKind::Other, "", e.to_string());
    };
    if matches!(
        failure.code,
        rusqlite::ErrorCode::DatabaseBusy
            | rusqlite::ErrorCode::DatabaseLocked
            | rusqlite::ErrorCode::CannotOpen
    ) {
        return DbError::Unavailable(e.to_string());
    }
    let kind = match failure.extended_code {
        ffi::SQLITE_CONSTRAINT_UNIQUE | ffi::SQLITE_CONSTRAINT_PRIMARYKEY => {
            ErrorKind::UniqueViolation
        }
        ffi::SQLITE_CONSTRAINT_FOREIGNKEY => ErrorKind::ForeignKeyViolation,
        ffi::SQLITE_CONSTRAINT_CHECK => ErrorKind::CheckViolation,
        ffi::SQLITE_CONSTRAINT_NOTNULL => ErrorKind::NotNullViolation,
        _ => ErrorKind::Other,
    };
    let message = message.clone().unwrap_or_else(|| failure.to_string());
    // "UNIQUE constraint failed: rooms.name", "CHECK constraint failed: name_not_empty".
    let constraint = (kind != ErrorKind::Other && kind != ErrorKind::ForeignKeyViolation)
        .then(|| message.split_once("failed: ").map(|(_, c)| c.to_string()))
        .flatten();
    DbError::Query(ServerError {
        code: failure.extended_code.to_string(),
        message,
        constraint,
        kind,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn db(dir: &tempfile::TempDir, options: SqliteOptions) -> Sqlite {
        Sqlite::new(dir.path().join("t.sqlite"), options)
    }

    #[tokio::test]
    async fn queries_round_trip_typed_values_in_wal_mode() {
        let dir = tempfile::tempdir().unwrap();
        let db = db(&dir, SqliteOptions::default());
        db.execute_batch(
            "CREATE TABLE t (id INTEGER PRIMARY KEY, name TEXT, score REAL, raw BLOB)",
        )
        .await
        .unwrap();
        let n = db
            .execute(
                "INSERT INTO t (id, name, score, raw) VALUES ($1, $2, $3, $4)",
                vec![7.into(), "seven".into(), 7.5.into(), vec![0u8, 255].into()],
            )
            .await
            .unwrap();
        assert_eq!(n, 1);
        let row = db
            .query_one(
                "SELECT id, name, score, raw FROM t WHERE id = $1",
                vec![7.into()],
            )
            .await
            .unwrap()
            .expect("a row");
        assert_eq!(row.get::<i32>(0).unwrap(), 7);
        assert_eq!(row.by_name::<String>("name").unwrap(), "seven");
        assert_eq!(row.get::<f64>(2).unwrap(), 7.5);
        assert_eq!(row.get::<Vec<u8>>(3).unwrap(), vec![0, 255]);
        let mode = db
            .query_one("PRAGMA journal_mode", vec![])
            .await
            .unwrap()
            .unwrap();
        assert_eq!(mode.get::<String>(0).unwrap(), "wal");
        assert!(db
            .query_one("SELECT 1 WHERE 0", vec![])
            .await
            .unwrap()
            .is_none());
    }

    #[tokio::test]
    async fn a_bad_query_is_a_query_error_and_the_database_keeps_serving() {
        let dir = tempfile::tempdir().unwrap();
        let db = db(&dir, SqliteOptions::default());
        let err = db.query("SELEC nonsense", vec![]).await.unwrap_err();
        assert!(matches!(err, DbError::Query(_)), "{err:?}");
        assert_eq!(err.http_status(), 500);
        assert_eq!(db.query("SELECT 1", vec![]).await.unwrap().len(), 1);
    }

    #[tokio::test]
    async fn a_query_past_its_timeout_is_interrupted() {
        let dir = tempfile::tempdir().unwrap();
        let options = SqliteOptions {
            query_timeout: Duration::from_millis(200),
            ..Default::default()
        };
        let db = db(&dir, options);
        // A recursive CTE that would count for minutes.
        let slow = "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) \
                    SELECT count(*) FROM c";
        let started = std::time::Instant::now();
        let err = db.query(slow, vec![]).await.unwrap_err();
        assert!(matches!(err, DbError::Timeout(_)), "{err:?}");
        assert_eq!(err.http_status(), 504);
        // Interrupted, so the thread is free again at once.
        assert_eq!(db.query("SELECT 2", vec![]).await.unwrap().len(), 1);
        assert!(
            started.elapsed() < Duration::from_secs(3),
            "{:?}",
            started.elapsed()
        );
    }

    #[tokio::test]
    async fn a_database_that_cannot_be_opened_is_unavailable() {
        let db = Sqlite::new("/nonexistent-dir/x.sqlite", SqliteOptions::default());
        let err = db.query("SELECT 1", vec![]).await.unwrap_err();
        assert!(matches!(err, DbError::Unavailable(_)), "{err:?}");
        assert!(
            err.to_string().contains("/nonexistent-dir/x.sqlite"),
            "{err}"
        );
        assert_eq!(err.http_status(), 503);
    }

    #[tokio::test]
    async fn a_database_that_could_not_be_opened_heals_once_its_directory_exists() {
        let dir = tempfile::tempdir().unwrap();
        let sub = dir.path().join("later");
        let db = Sqlite::new(sub.join("x.sqlite"), SqliteOptions::default());
        let err = db.query("SELECT 1", vec![]).await.unwrap_err();
        assert!(matches!(err, DbError::Unavailable(_)), "{err:?}");
        std::fs::create_dir(&sub).unwrap();
        assert_eq!(db.query("SELECT 1", vec![]).await.unwrap().len(), 1);
    }

    #[test]
    fn many_connections_opening_one_new_file_together_all_get_wal() {
        // As the demo's workers do at start: the first switches the new file to WAL while
        // the others open it, which SQLite answers with "database is locked" at once.
        for round in 0..20 {
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("new.sqlite");
            let barrier = std::sync::Barrier::new(8);
            std::thread::scope(|s| {
                for _ in 0..8 {
                    s.spawn(|| {
                        barrier.wait();
                        let conn = open(&path, &SqliteOptions::default())
                            .unwrap_or_else(|e| panic!("round {round}: {e}"));
                        let mode: String = conn
                            .query_row("PRAGMA journal_mode", [], |r| r.get(0))
                            .unwrap();
                        assert_eq!(mode, "wal");
                    });
                }
            });
        }
    }

    #[tokio::test]
    async fn a_call_that_timed_out_in_the_queue_never_runs() {
        let dir = tempfile::tempdir().unwrap();
        let options = SqliteOptions {
            query_timeout: Duration::from_millis(300),
            threads: 1,
            ..Default::default()
        };
        let db = db(&dir, options);
        let ran = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let ran_in_job = ran.clone();
        // The only thread is busy for 800 ms (sleeping, which no interrupt stops).
        let busy = db.call(|_| {
            std::thread::sleep(Duration::from_millis(800));
            Ok(())
        });
        let queued = db.call(move |conn| {
            ran_in_job.store(true, std::sync::atomic::Ordering::SeqCst);
            conn.execute_batch("CREATE TABLE ran (x)")
                .map_err(query_error)
        });
        let (busy, queued) = tokio::join!(busy, queued);
        assert!(matches!(busy, Err(DbError::Timeout(_))), "{busy:?}");
        assert!(matches!(queued, Err(DbError::Timeout(_))), "{queued:?}");
        // Once the thread is free, the next query runs; the abandoned one did not.
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        let tables = loop {
            let sql = "SELECT name FROM sqlite_master WHERE name = 'ran'";
            match db.query(sql, vec![]).await {
                Ok(rows) => break rows,
                Err(e) => assert!(std::time::Instant::now() < deadline, "{e}"),
            }
        };
        assert!(tables.is_empty(), "the abandoned call ran");
        assert!(!ran.load(std::sync::atomic::Ordering::SeqCst));
    }

    #[tokio::test]
    async fn a_call_dropped_by_its_caller_while_queued_never_runs() {
        let dir = tempfile::tempdir().unwrap();
        let options = SqliteOptions {
            threads: 1,
            ..Default::default()
        };
        let db = db(&dir, options);
        let busy = db.call(|_| {
            std::thread::sleep(Duration::from_millis(500));
            Ok(())
        });
        // The caller gives up after 100 ms (its own timeout, not the query's 5 s): the call
        // is dropped while it waits behind the busy one.
        let queued = tokio::time::timeout(
            Duration::from_millis(100),
            db.call(|conn| {
                conn.execute_batch("CREATE TABLE ran (x)")
                    .map_err(query_error)
            }),
        );
        let (busy, queued) = tokio::join!(busy, queued);
        busy.unwrap();
        assert!(queued.is_err(), "the caller's timeout fired");
        let rows = db
            .query("SELECT name FROM sqlite_master WHERE name = 'ran'", vec![])
            .await
            .unwrap();
        assert!(rows.is_empty(), "the dropped call ran");
    }
}
