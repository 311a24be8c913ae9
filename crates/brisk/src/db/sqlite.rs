//! [`Sqlite`]: the embedded default. rusqlite's calls block, so they never run on the worker's
//! event loop: each worker starts a few threads (one by default) on first use, each holding
//! one connection in WAL mode, and a query is a job sent to them whose answer the caller
//! awaits. Statements are prepared once per connection (rusqlite's statement cache).

use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use rusqlite::types::ValueRef;
use rusqlite::{Connection, InterruptHandle};

use super::error::DbError;
use super::value::{rewrite_placeholders, Row, Value};

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
}

impl Default for SqliteOptions {
    fn default() -> Self {
        SqliteOptions {
            threads: 1,
            query_timeout: Duration::from_secs(5),
            busy_timeout: Duration::from_secs(5),
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

/// Work for a connection thread: the connection, or why it could not be opened.
type Job = Box<dyn FnOnce(Result<&mut Connection, &DbError>) + Send>;

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
    inner: Arc<Inner>,
}

struct Inner {
    path: PathBuf,
    options: SqliteOptions,
    jobs: OnceLock<Mutex<mpsc::Sender<Job>>>,
}

impl Sqlite {
    /// The database in file `path` (created if missing).
    pub fn new(path: impl AsRef<Path>, options: SqliteOptions) -> Self {
        Sqlite {
            inner: Arc::new(Inner {
                path: path.as_ref().to_path_buf(),
                options,
                jobs: OnceLock::new(),
            }),
        }
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
                let (rx, path, options) = (
                    rx.clone(),
                    self.inner.path.clone(),
                    self.inner.options.clone(),
                );
                let spawned = std::thread::Builder::new()
                    .name(format!("brisk-sqlite-{i}"))
                    .spawn(move || serve_jobs(&path, &options, &rx));
                if let Err(e) = spawned {
                    tracing::error!("cannot start an SQLite thread: {e}");
                }
            }
            Mutex::new(tx)
        });
        queue.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Runs `f` on a connection thread and waits for its result without blocking the worker.
    /// A call that runs past the query timeout is interrupted and fails with
    /// [`DbError::Timeout`].
    pub async fn call<R, F>(&self, f: F) -> Result<R, DbError>
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
        let job: Job = Box::new(move |conn| {
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
            let _ = reply.send(result);
        });
        if self.jobs().send(job).is_err() {
            return Err(DbError::Unavailable("the SQLite threads are gone".into()));
        }
        let timeout = self.inner.options.query_timeout;
        match tokio::time::timeout(timeout, answer).await {
            Ok(Ok(result)) => result,
            Ok(Err(_)) => Err(DbError::Unavailable("the SQLite thread stopped".into())),
            Err(_) => Err(DbError::Timeout(timeout)),
        }
    }

    /// Every row `sql` returns; parameters are `$1`, `$2`…
    pub async fn query(&self, sql: &str, params: Vec<Value>) -> Result<Vec<Row>, DbError> {
        let sql = sqlite_sql(sql);
        self.call(move |conn| query_rows(conn, &sql, &params)).await
    }

    /// The first row `sql` returns, if any.
    pub async fn query_one(&self, sql: &str, params: Vec<Value>) -> Result<Option<Row>, DbError> {
        Ok(self.query(sql, params).await?.into_iter().next())
    }

    /// Runs a statement; returns how many rows it changed.
    pub async fn execute(&self, sql: &str, params: Vec<Value>) -> Result<u64, DbError> {
        let sql = sqlite_sql(sql);
        self.call(move |conn| {
            let mut stmt = conn.prepare_cached(&sql).map_err(query_error)?;
            let n = stmt
                .execute(rusqlite::params_from_iter(params.iter().map(to_sql)))
                .map_err(query_error)?;
            Ok(n as u64)
        })
        .await
    }

    /// Runs several statements separated by `;` (no parameters), such as a schema.
    pub async fn execute_batch(&self, sql: &str) -> Result<(), DbError> {
        let sql = sql.to_string();
        self.call(move |conn| conn.execute_batch(&sql).map_err(query_error))
            .await
    }
}

/// `$N` placeholders as SQLite's `?N`.
fn sqlite_sql(sql: &str) -> String {
    rewrite_placeholders(sql, |n| format!("?{n}")).0
}

/// Opens the connection, then runs jobs until every sender is gone.
fn serve_jobs(path: &Path, options: &SqliteOptions, jobs: &Mutex<mpsc::Receiver<Job>>) {
    let mut conn = open(path, options);
    if let Err(e) = &conn {
        tracing::error!("{e}");
    }
    loop {
        let job = match jobs.lock().unwrap_or_else(|p| p.into_inner()).recv() {
            Ok(job) => job,
            Err(_) => return,
        };
        // A database that could not be opened (a missing directory, a lock held by another
        // process) is tried again for each job, so it heals once the cause goes away.
        if conn.is_err() {
            conn = open(path, options);
        }
        match &mut conn {
            Ok(c) => job(Ok(c)),
            Err(e) => job(Err(e)),
        }
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
    conn.set_prepared_statement_cache_capacity(256);
    Ok(conn)
}

fn is_busy(e: &rusqlite::Error) -> bool {
    matches!(
        e.sqlite_error_code(),
        Some(rusqlite::ErrorCode::DatabaseBusy | rusqlite::ErrorCode::DatabaseLocked)
    )
}

fn query_rows(conn: &mut Connection, sql: &str, params: &[Value]) -> Result<Vec<Row>, DbError> {
    let mut stmt = conn.prepare_cached(sql).map_err(query_error)?;
    let columns: Arc<[String]> = stmt.column_names().iter().map(|c| c.to_string()).collect();
    let width = columns.len();
    let mut rows = stmt
        .query(rusqlite::params_from_iter(params.iter().map(to_sql)))
        .map_err(query_error)?;
    let mut out = Vec::new();
    while let Some(row) = rows.next().map_err(query_error)? {
        let mut values = Vec::with_capacity(width);
        for i in 0..width {
            values.push(from_sql(row.get_ref(i).map_err(query_error)?));
        }
        out.push(Row::new(columns.clone(), values));
    }
    Ok(out)
}

fn to_sql(v: &Value) -> rusqlite::types::Value {
    use rusqlite::types::Value as S;
    match v {
        Value::Null => S::Null,
        Value::Int(i) => S::Integer(*i),
        Value::Float(f) => S::Real(*f),
        Value::Text(t) => S::Text(t.clone()),
        Value::Bytes(b) => S::Blob(b.clone()),
    }
}

fn from_sql(v: ValueRef<'_>) -> Value {
    match v {
        ValueRef::Null => Value::Null,
        ValueRef::Integer(i) => Value::Int(i),
        ValueRef::Real(f) => Value::Float(f),
        ValueRef::Text(t) => Value::Text(String::from_utf8_lossy(t).into_owned()),
        ValueRef::Blob(b) => Value::Bytes(b.to_vec()),
    }
}

fn query_error(e: rusqlite::Error) -> DbError {
    match e {
        rusqlite::Error::SqliteFailure(f, _)
            if f.code == rusqlite::ErrorCode::OperationInterrupted =>
        {
            DbError::Query("interrupted".into())
        }
        rusqlite::Error::SqliteFailure(f, _)
            if matches!(
                f.code,
                rusqlite::ErrorCode::DatabaseBusy
                    | rusqlite::ErrorCode::DatabaseLocked
                    | rusqlite::ErrorCode::CannotOpen
            ) =>
        {
            DbError::Unavailable(e.to_string())
        }
        other => DbError::Query(other.to_string()),
    }
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
