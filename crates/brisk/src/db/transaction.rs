//! [`Transaction`]: statements that commit or roll back together, on one connection of the
//! worker's pool held for the transaction's whole life, whatever the backend.
//!
//! The three backends behave the same: every statement takes parameters; a statement that
//! fails leaves the transaction able only to roll back (as PostgreSQL does; MySQL and SQLite
//! would go on), unless it is followed by `ROLLBACK TO SAVEPOINT`; `commit` of a failed
//! transaction rolls it back and says so; a transaction dropped before it ends is rolled back
//! before its connection serves anyone else.

use std::time::Duration;

use super::error::DbError;
use super::from_value::FromValue;
#[cfg(feature = "mysql")]
use super::mysql_tx::MysqlTransaction;
#[cfg(feature = "postgres")]
use super::postgres_tx::PgTransaction;
use super::row::{decode_all, decode_first, first_column, Row};
#[cfg(feature = "sqlite")]
use super::sqlite_tx::SqliteTransaction;
use super::statement::{self, Dialect};
use super::value::Value;

/// A transaction: begun by [`Db::begin`](super::Db::begin) (ended by [`commit`](Self::commit)
/// or [`rollback`](Self::rollback), rolled back if dropped) or run by
/// [`Db::transaction`](super::Db::transaction).
///
/// ```no_run
/// # async fn f(db: brisk::db::Db) -> Result<(), brisk::db::DbError> {
/// let mut tx = db.begin().await?;
/// tx.execute("INSERT INTO messages (room_id, text) VALUES ($1, $2)", vec![7.into(), "hi".into()]).await?;
/// tx.execute("UPDATE rooms SET message_count = message_count + 1 WHERE id = $1", vec![7.into()]).await?;
/// tx.commit().await?;
/// # Ok(()) }
/// ```
pub struct Transaction {
    inner: Backend,
    /// Why the transaction can only roll back now, if a statement failed.
    failed: Option<String>,
    /// A statement or the commit failed in a way that running it all again may mend.
    pub(super) retryable: bool,
}

/// The backend's own transaction.
pub(super) enum Backend {
    #[cfg(feature = "sqlite")]
    Sqlite(SqliteTransaction),
    #[cfg(feature = "postgres")]
    Postgres(PgTransaction),
    #[cfg(feature = "mysql")]
    Mysql(MysqlTransaction),
}

/// Calls `$method($args)` on whichever backend `$inner` is.
macro_rules! on_backend {
    ($inner:expr, $tx:ident => $call:expr) => {
        match $inner {
            #[cfg(feature = "sqlite")]
            Backend::Sqlite($tx) => $call,
            #[cfg(feature = "postgres")]
            Backend::Postgres($tx) => $call,
            #[cfg(feature = "mysql")]
            Backend::Mysql($tx) => $call,
        }
    };
}

impl Transaction {
    pub(super) fn new(inner: Backend) -> Self {
        Transaction {
            inner,
            failed: None,
            retryable: false,
        }
    }

    fn dialect(&self) -> Dialect {
        match &self.inner {
            #[cfg(feature = "sqlite")]
            Backend::Sqlite(_) => Dialect::Sqlite,
            #[cfg(feature = "postgres")]
            Backend::Postgres(_) => Dialect::Postgres,
            #[cfg(feature = "mysql")]
            Backend::Mysql(_) => Dialect::Mysql,
        }
    }

    /// Refuses a statement after one failed (but `ROLLBACK TO SAVEPOINT`, which mends it).
    fn usable(&self, sql: &str) -> Result<bool, DbError> {
        let mends = statement::is_rollback_to(sql, self.dialect());
        match &self.failed {
            Some(why) if !mends => Err(DbError::Refused(format!(
                "an earlier statement of this transaction failed ({why}); it can only roll back"
            ))),
            _ => Ok(mends),
        }
    }

    /// Records how a statement ended.
    fn note<T>(&mut self, mends: bool, result: Result<T, DbError>) -> Result<T, DbError> {
        match &result {
            Ok(_) if mends => self.failed = None,
            Ok(_) => {}
            Err(e) => {
                self.retryable |= e.is_retryable();
                if self.failed.is_none() {
                    self.failed = Some(e.to_string());
                }
            }
        }
        result
    }

    /// Every row `sql` returns; parameters are `$1`, `$2`…
    pub async fn query(&mut self, sql: &str, params: Vec<Value>) -> Result<Vec<Row>, DbError> {
        let mends = self.usable(sql)?;
        let result = on_backend!(&mut self.inner, tx => tx.query(sql, params).await);
        self.note(mends, result)
    }

    /// The first row `sql` returns, if any.
    pub async fn query_one(
        &mut self,
        sql: &str,
        params: Vec<Value>,
    ) -> Result<Option<Row>, DbError> {
        Ok(self.query(sql, params).await?.into_iter().next())
    }

    /// Every row `sql` returns, each as a `T` filled by column name ([`Row::decode`]).
    pub async fn query_as<T: serde::de::DeserializeOwned>(
        &mut self,
        sql: &str,
        params: Vec<Value>,
    ) -> Result<Vec<T>, DbError> {
        decode_all(self.query(sql, params).await?)
    }

    /// The first row `sql` returns as a `T`, if any.
    pub async fn query_one_as<T: serde::de::DeserializeOwned>(
        &mut self,
        sql: &str,
        params: Vec<Value>,
    ) -> Result<Option<T>, DbError> {
        decode_first(self.query_one(sql, params).await?)
    }

    /// The first column of the first row `sql` returns, as a `T`, if there is a row.
    pub async fn query_scalar<T: FromValue>(
        &mut self,
        sql: &str,
        params: Vec<Value>,
    ) -> Result<Option<T>, DbError> {
        first_column(self.query_one(sql, params).await?)
    }

    /// Runs a statement; returns how many rows it changed.
    pub async fn execute(&mut self, sql: &str, params: Vec<Value>) -> Result<u64, DbError> {
        let mends = self.usable(sql)?;
        let result = on_backend!(&mut self.inner, tx => tx.execute(sql, params).await);
        self.note(mends, result)
    }

    /// Runs several statements separated by `;` (no parameters).
    pub async fn execute_batch(&mut self, sql: &str) -> Result<(), DbError> {
        let mends = self.usable(sql)?;
        let result = on_backend!(&mut self.inner, tx => tx.execute_batch(sql).await);
        self.note(mends, result)
    }

    /// Commits. If a statement failed, the transaction is rolled back instead and this says
    /// why; an error of the commit itself (a serialization failure, a deferred constraint)
    /// leaves nothing committed either.
    pub async fn commit(self) -> Result<(), DbError> {
        if let Some(why) = self.failed.clone() {
            self.rollback().await?;
            return Err(DbError::Refused(format!(
                "not committed: an earlier statement of this transaction failed ({why}); it was \
                 rolled back"
            )));
        }
        on_backend!(self.inner, tx => tx.commit().await)
    }

    /// Rolls back.
    pub async fn rollback(self) -> Result<(), DbError> {
        on_backend!(self.inner, tx => tx.rollback().await)
    }
}

/// A pause before running a transaction again: a few milliseconds, more each attempt, with
/// jitter so that the transactions that collided do not collide again.
pub(super) fn retry_pause(attempt: u32) -> Duration {
    use std::hash::{BuildHasher, Hasher};
    let jitter = std::collections::hash_map::RandomState::new()
        .build_hasher()
        .finish()
        % 1000;
    Duration::from_micros(u64::from(attempt.min(8)) * 2_000 + jitter * 2)
}
