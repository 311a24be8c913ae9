//! An SQLite transaction: a connection of its own, on a thread of its own, held from `BEGIN`
//! to `COMMIT` or `ROLLBACK`.
//!
//! A transaction that writes begins `IMMEDIATE`, taking the database's write lock at once (a
//! deferred one that reads first could fail to upgrade, a deadlock SQLite cannot wait out);
//! one that only reads begins `DEFERRED` with `query_only` set. SQLite is serializable
//! whatever isolation level is asked. A transaction dropped before it ends rolls back on its
//! thread before the connection serves the next one.

use std::sync::mpsc;

use tokio::sync::OwnedSemaphorePermit;

use super::error::{DbError, ErrorKind};
use super::pool_wait;
use super::row::Row;
use super::sqlite::{execute, query_error, query_rows, sqlite_sql, Job, Sqlite};
use super::statement::{check, Dialect, Place};
use super::tx_options::TxOptions;
use super::value::Value;

/// A transaction on SQLite; see [`Transaction`](super::Transaction).
pub(crate) struct SqliteTransaction {
    db: Sqlite,
    /// The job queue of the connection's thread; `None` once it has ended.
    jobs: Option<mpsc::Sender<Job>>,
    read_only: bool,
    _permit: OwnedSemaphorePermit,
}

impl Sqlite {
    /// Starts a transaction on a connection of its own.
    pub(crate) async fn begin(&self, options: &TxOptions) -> Result<SqliteTransaction, DbError> {
        let wait = self.inner.options.acquire_timeout;
        let permit = pool_wait::take(&self.inner.transactions, wait).await?;
        let idle = self
            .inner
            .idle
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .pop();
        let jobs = match idle {
            Some(jobs) => jobs,
            None => self.dedicated()?,
        };
        let read_only = options.read_only;
        let begin = if read_only {
            "PRAGMA query_only = ON; BEGIN DEFERRED"
        } else {
            "BEGIN IMMEDIATE"
        };
        let begun = self
            .call_on(&jobs, move |conn| {
                conn.execute_batch(begin).map_err(|e| match query_error(e) {
                    // Another connection held the write lock past the busy timeout.
                    DbError::Unavailable(why) => {
                        DbError::server(ErrorKind::Serialization, "5", why)
                    }
                    other => other,
                })
            })
            .await;
        let tx = SqliteTransaction {
            db: self.clone(),
            jobs: Some(jobs),
            read_only,
            _permit: permit,
        };
        // On failure the transaction drops here, which resets the connection.
        begun.map(|()| tx)
    }
}

impl SqliteTransaction {
    fn jobs(&self) -> Result<&mpsc::Sender<Job>, DbError> {
        self.jobs
            .as_ref()
            .ok_or_else(|| DbError::Refused("the transaction has ended".into()))
    }

    /// Every row `sql` returns.
    pub(crate) async fn query(
        &mut self,
        sql: &str,
        params: Vec<Value>,
    ) -> Result<Vec<Row>, DbError> {
        check(sql, Dialect::Sqlite, Place::Transaction)?;
        let sql = sqlite_sql(sql, params.len())?;
        let jobs = self.jobs()?;
        self.db
            .call_on(jobs, move |conn| {
                in_transaction(conn, |c| query_rows(c, &sql, &params))
            })
            .await
    }

    /// Runs a statement; how many rows it changed.
    pub(crate) async fn execute(&mut self, sql: &str, params: Vec<Value>) -> Result<u64, DbError> {
        check(sql, Dialect::Sqlite, Place::Transaction)?;
        let sql = sqlite_sql(sql, params.len())?;
        let jobs = self.jobs()?;
        self.db
            .call_on(jobs, move |conn| {
                in_transaction(conn, |c| execute(c, &sql, &params))
            })
            .await
    }

    /// Runs several statements separated by `;`, without parameters.
    pub(crate) async fn execute_batch(&mut self, sql: &str) -> Result<(), DbError> {
        check(sql, Dialect::Sqlite, Place::Transaction)?;
        let sql = sql.to_string();
        let jobs = self.jobs()?;
        self.db
            .call_on(jobs, move |conn| {
                in_transaction(conn, |c| c.execute_batch(&sql).map_err(query_error))
            })
            .await
    }

    /// Ends the transaction with `sql`; the connection goes back to the pool once it is out
    /// of any transaction and writes again.
    async fn end(&mut self, sql: &'static str) -> Result<(), DbError> {
        let Some(jobs) = self.jobs.take() else {
            return Err(DbError::Refused("the transaction has ended".into()));
        };
        let read_only = self.read_only;
        let ended = self
            .db
            .call_on(&jobs, move |conn| {
                let ended = conn.execute_batch(sql).map_err(query_error);
                if !conn.is_autocommit() {
                    // A COMMIT that failed leaves the transaction open: nothing of it stays.
                    let _ = conn.execute_batch("ROLLBACK");
                }
                if read_only {
                    conn.execute_batch("PRAGMA query_only = OFF")
                        .map_err(query_error)?;
                }
                ended
            })
            .await;
        if ended.is_ok() {
            self.give_back(jobs);
        }
        ended
    }

    fn give_back(&self, jobs: mpsc::Sender<Job>) {
        let mut idle = self.db.inner.idle.lock().unwrap_or_else(|p| p.into_inner());
        idle.push(jobs);
    }

    /// Commits.
    pub(crate) async fn commit(mut self) -> Result<(), DbError> {
        self.end("COMMIT").await
    }

    /// Rolls back.
    pub(crate) async fn rollback(mut self) -> Result<(), DbError> {
        self.end("ROLLBACK").await
    }
}

/// Runs `f` if the connection is still inside the transaction, and says so if `f` ended it:
/// an interrupted statement (its caller gave up, the query timeout) rolls SQLite's whole
/// transaction back, and what followed must not run outside it.
fn in_transaction<R>(
    conn: &rusqlite::Connection,
    f: impl FnOnce(&rusqlite::Connection) -> Result<R, DbError>,
) -> Result<R, DbError> {
    let ended = || {
        DbError::Refused(
            "the transaction ended (rolled back by an interrupted statement, or by one of its \
             own); it can only roll back now"
                .into(),
        )
    };
    if conn.is_autocommit() {
        return Err(ended());
    }
    let result = f(conn);
    if conn.is_autocommit() && result.is_ok() {
        return Err(ended());
    }
    result
}

impl Drop for SqliteTransaction {
    fn drop(&mut self) {
        let Some(jobs) = self.jobs.take() else {
            return;
        };
        // Queued on the connection's own thread, so it runs before anything the connection's
        // next transaction sends.
        let reset: Job = Box::new(|conn, _| {
            if let Ok(conn) = conn {
                if !conn.is_autocommit() {
                    let _ = conn.execute_batch("ROLLBACK");
                }
                let _ = conn.execute_batch("PRAGMA query_only = OFF");
            }
        });
        if jobs.send(reset).is_ok() {
            self.give_back(jobs);
        }
    }
}
