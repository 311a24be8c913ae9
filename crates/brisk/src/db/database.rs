//! [`Db`]: one of the backends, picked from a URL, behind their common surface.

use super::error::DbError;
use super::from_value::FromValue;
#[cfg(feature = "mysql")]
use super::mysql::{Mysql, MysqlOptions};
#[cfg(feature = "postgres")]
use super::postgres::Postgres;
#[cfg(feature = "postgres")]
use super::postgres_options::PostgresOptions;
use super::row::{decode_all, decode_first, first_column, Row};
#[cfg(any(feature = "sqlite", feature = "mysql"))]
use super::row_view::map_each;
use super::row_view::RowView;
#[cfg(feature = "sqlite")]
use super::sqlite::{Sqlite, SqliteOptions};
use super::transaction::{retry_pause, Backend, Transaction};
use super::tx_options::TxOptions;
use super::value::Value;

/// The options of every backend; [`Db::open`] uses the one its URL names.
#[derive(Debug, Clone, Default)]
pub struct DbOptions {
    /// For `sqlite:` URLs.
    #[cfg(feature = "sqlite")]
    pub sqlite: SqliteOptions,
    /// For `postgres://` URLs.
    #[cfg(feature = "postgres")]
    pub postgres: PostgresOptions,
    /// For `mysql://` URLs.
    #[cfg(feature = "mysql")]
    pub mysql: MysqlOptions,
}

/// Which backend a [`Db`] is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DbKind {
    /// SQLite.
    Sqlite,
    /// PostgreSQL.
    Postgres,
    /// MySQL or MariaDB.
    Mysql,
}

/// A database of any backend; cheap to clone, `Send + Sync`.
///
/// ```no_run
/// # async fn f() -> Result<(), brisk::db::DbError> {
/// use brisk::db::{Db, DbOptions};
/// let db = Db::open("sqlite:run/app.sqlite", DbOptions::default())?;
/// let n = db.execute("UPDATE world SET randomnumber = $1 WHERE id = $2", vec![5.into(), 1.into()]).await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub enum Db {
    /// An SQLite file.
    #[cfg(feature = "sqlite")]
    Sqlite(Sqlite),
    /// A PostgreSQL server.
    #[cfg(feature = "postgres")]
    Postgres(Postgres),
    /// A MySQL or MariaDB server.
    #[cfg(feature = "mysql")]
    Mysql(Mysql),
}

impl Db {
    /// The database at `url`: `sqlite:PATH` (or `sqlite://PATH`), `postgres://…`
    /// (`postgresql://…`), or `mysql://…` (`mariadb://…`). Connects nothing yet.
    pub fn open(url: &str, options: DbOptions) -> Result<Db, DbError> {
        let _ = &options;
        #[cfg(feature = "sqlite")]
        if let Some(path) = url
            .strip_prefix("sqlite://")
            .or_else(|| url.strip_prefix("sqlite:"))
        {
            return Ok(Db::Sqlite(Sqlite::new(path, options.sqlite)));
        }
        #[cfg(feature = "postgres")]
        if url.starts_with("postgres://") || url.starts_with("postgresql://") {
            return Postgres::new(url, options.postgres).map(Db::Postgres);
        }
        #[cfg(feature = "mysql")]
        if url.starts_with("mysql://") || url.starts_with("mariadb://") {
            let url = url.replacen("mariadb://", "mysql://", 1);
            return Mysql::new(&url, options.mysql).map(Db::Mysql);
        }
        Err(DbError::Config(format!(
            "{}: not a database URL this build knows (sqlite:PATH, postgres://…, mysql://…; each \
             needs its cargo feature)",
            crate::redact::redacted(url)
        )))
    }

    /// Which backend this is.
    pub fn kind(&self) -> DbKind {
        match self {
            #[cfg(feature = "sqlite")]
            Db::Sqlite(_) => DbKind::Sqlite,
            #[cfg(feature = "postgres")]
            Db::Postgres(_) => DbKind::Postgres,
            #[cfg(feature = "mysql")]
            Db::Mysql(_) => DbKind::Mysql,
        }
    }

    /// Every row `sql` returns; parameters are `$1`, `$2`…
    pub async fn query(&self, sql: &str, params: Vec<Value>) -> Result<Vec<Row>, DbError> {
        let run = async {
            match self {
                #[cfg(feature = "sqlite")]
                Db::Sqlite(db) => db.query(sql, params).await,
                #[cfg(feature = "postgres")]
                Db::Postgres(db) => db.query(sql, params).await,
                #[cfg(feature = "mysql")]
                Db::Mysql(db) => db.query(sql, params).await,
            }
        };
        crate::otel::call(run, self.traced(sql)).await
    }

    /// Every row `sql` returns, each read by `f` into what the app keeps. On PostgreSQL the
    /// row is read where it lies in the server's answer, each value decoded straight into
    /// the type asked for: no [`Row`] is built (the cheapest way to read many rows); the
    /// other backends lend `f` the rows they read. An error from `f` stops the reading and
    /// is returned.
    ///
    /// ```no_run
    /// # async fn f(db: brisk::db::Db) -> Result<(), brisk::db::DbError> {
    /// struct Message { id: i64, text: String }
    /// let newest = db
    ///     .query_map(
    ///         "SELECT id, text FROM messages WHERE room_id = $1 ORDER BY id DESC LIMIT 50",
    ///         vec![7.into()],
    ///         |row| Ok(Message { id: row.get(0)?, text: row.get(1)? }),
    ///     )
    ///     .await?;
    /// # Ok(()) }
    /// ```
    pub async fn query_map<T, F>(
        &self,
        sql: &str,
        params: Vec<Value>,
        f: F,
    ) -> Result<Vec<T>, DbError>
    where
        F: FnMut(&RowView<'_>) -> Result<T, DbError>,
    {
        let run = async {
            match self {
                #[cfg(feature = "sqlite")]
                Db::Sqlite(db) => map_each(&db.query(sql, params).await?, f),
                #[cfg(feature = "postgres")]
                Db::Postgres(db) => db.query_map(sql, params, f).await,
                #[cfg(feature = "mysql")]
                Db::Mysql(db) => map_each(&db.query(sql, params).await?, f),
            }
        };
        crate::otel::call(run, self.traced(sql)).await
    }

    /// The first row `sql` returns, if any.
    pub async fn query_one(&self, sql: &str, params: Vec<Value>) -> Result<Option<Row>, DbError> {
        let run = async {
            match self {
                #[cfg(feature = "sqlite")]
                Db::Sqlite(db) => db.query_one(sql, params).await,
                #[cfg(feature = "postgres")]
                Db::Postgres(db) => db.query_one(sql, params).await,
                #[cfg(feature = "mysql")]
                Db::Mysql(db) => db.query_one(sql, params).await,
            }
        };
        crate::otel::call(run, self.traced(sql)).await
    }

    /// Every row `sql` returns, each as a `T` filled by column name ([`Row::decode`]).
    ///
    /// ```no_run
    /// # async fn f(db: brisk::db::Db) -> Result<(), brisk::db::DbError> {
    /// #[derive(serde::Deserialize)]
    /// struct Message { id: i64, author: String, text: String }
    /// let newest: Vec<Message> = db
    ///     .query_as("SELECT id, author, text FROM messages WHERE room_id = $1 ORDER BY id DESC LIMIT 50", vec![7.into()])
    ///     .await?;
    /// # Ok(()) }
    /// ```
    pub async fn query_as<T: serde::de::DeserializeOwned>(
        &self,
        sql: &str,
        params: Vec<Value>,
    ) -> Result<Vec<T>, DbError> {
        decode_all(self.query(sql, params).await?)
    }

    /// The first row `sql` returns as a `T`, if any.
    pub async fn query_one_as<T: serde::de::DeserializeOwned>(
        &self,
        sql: &str,
        params: Vec<Value>,
    ) -> Result<Option<T>, DbError> {
        decode_first(self.query_one(sql, params).await?)
    }

    /// The first column of the first row `sql` returns, as a `T`, if there is a row.
    ///
    /// ```no_run
    /// # async fn f(db: brisk::db::Db) -> Result<(), brisk::db::DbError> {
    /// let rooms: i64 = db.query_scalar("SELECT COUNT(*) FROM rooms", vec![]).await?.unwrap_or(0);
    /// # Ok(()) }
    /// ```
    pub async fn query_scalar<T: FromValue>(
        &self,
        sql: &str,
        params: Vec<Value>,
    ) -> Result<Option<T>, DbError> {
        first_column(self.query_one(sql, params).await?)
    }

    /// Runs `sql` once for each parameter list; each run's rows, in order. PostgreSQL sends
    /// them as one batch (one round trip ending in one `Sync`, so one implicit transaction:
    /// one failing run fails them all, and a write is committed only with the others); the
    /// other backends run them side by side on their pools. For runs that stand alone, see
    /// [`query_pipelined`](Self::query_pipelined).
    ///
    /// ```no_run
    /// # async fn f(db: brisk::db::Db) -> Result<(), brisk::db::DbError> {
    /// let ids = [3, 14, 159].map(|id| vec![id.into()]).to_vec();
    /// let worlds = db.query_each("SELECT id, randomnumber FROM world WHERE id = $1", ids).await?;
    /// # Ok(()) }
    /// ```
    pub async fn query_each(
        &self,
        sql: &str,
        lists: Vec<Vec<Value>>,
    ) -> Result<Vec<Vec<Row>>, DbError> {
        match self {
            #[cfg(feature = "postgres")]
            Db::Postgres(db) => {
                crate::otel::call(db.query_each(sql, lists), self.traced(sql)).await
            }
            #[allow(unreachable_patterns)]
            _ => {
                let runs = lists.into_iter().map(|params| self.query(sql, params));
                futures_util::future::try_join_all(runs).await
            }
        }
    }

    /// Runs `sql` once for each parameter list, each as if it had been sent alone (its own
    /// implicit transaction: a run that fails, fails alone); each run's rows or error, in
    /// order. PostgreSQL gets them all in one write, each ending in a `Sync` of its own (as
    /// TechEmpower's rules ask of every query), runs them in order and answers them in one
    /// round trip; the other backends run them side by side on their pools (MySQL in no set
    /// order, SQLite one after another). The call itself fails only when
    /// nothing could run (on PostgreSQL: no connection, a parameter list of the wrong length).
    /// Use [`query_each`](Self::query_each) for a batch that must succeed or fail as one.
    ///
    /// ```no_run
    /// # async fn f(db: brisk::db::Db) -> Result<(), brisk::db::DbError> {
    /// let ids = [3, 14, 159].map(|id| vec![id.into()]).to_vec();
    /// let runs = db.query_pipelined("SELECT id, randomnumber FROM world WHERE id = $1", ids).await?;
    /// for run in runs {
    ///     let rows = run?;
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn query_pipelined(
        &self,
        sql: &str,
        lists: Vec<Vec<Value>>,
    ) -> Result<Vec<Result<Vec<Row>, DbError>>, DbError> {
        match self {
            #[cfg(feature = "postgres")]
            Db::Postgres(db) => {
                crate::otel::call(db.query_pipelined(sql, lists), self.traced(sql)).await
            }
            #[allow(unreachable_patterns)]
            _ => {
                let runs = lists.into_iter().map(|params| self.query(sql, params));
                Ok(futures_util::future::join_all(runs).await)
            }
        }
    }

    /// [`query_pipelined`](Self::query_pipelined) with each row read by `f` into what the app
    /// keeps, as [`query_map`](Self::query_map) reads them (on PostgreSQL where they lie in
    /// the server's answer, no [`Row`] built). A run whose rows `f` refuses fails with `f`'s
    /// error (the server still ran it: a write in it is committed); the others are read on.
    ///
    /// ```no_run
    /// # async fn f(db: brisk::db::Db) -> Result<(), brisk::db::DbError> {
    /// let ids = [3, 14, 159].map(|id| vec![id.into()]).to_vec();
    /// let read = |row: &brisk::db::RowView<'_>| Ok((row.get::<i32>(0)?, row.get::<i32>(1)?));
    /// let runs = db
    ///     .query_pipelined_map("SELECT id, randomnumber FROM world WHERE id = $1", ids, read)
    ///     .await?;
    /// for run in runs {
    ///     let worlds: Vec<(i32, i32)> = run?;
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn query_pipelined_map<T, F>(
        &self,
        sql: &str,
        lists: Vec<Vec<Value>>,
        f: F,
    ) -> Result<Vec<Result<Vec<T>, DbError>>, DbError>
    where
        F: FnMut(&RowView<'_>) -> Result<T, DbError>,
    {
        match self {
            #[cfg(feature = "postgres")]
            Db::Postgres(db) => {
                let run = db.query_pipelined_map(sql, lists, f);
                crate::otel::call(run, self.traced(sql)).await
            }
            // The other backends run the lists side by side, then `f` reads each run's rows.
            #[cfg(any(feature = "sqlite", feature = "mysql"))]
            #[allow(unreachable_patterns)]
            _ => {
                let mut f = f;
                let runs = lists.into_iter().map(|params| self.query(sql, params));
                let runs = futures_util::future::join_all(runs).await;
                Ok(runs
                    .into_iter()
                    .map(|run| map_each(&run?, &mut f))
                    .collect())
            }
        }
    }

    /// How a traced call of `statement` is described (see [`crate::otel`]).
    fn traced<'a>(&self, statement: &'a str) -> crate::otel::Op<'a> {
        let system = match self.kind() {
            DbKind::Sqlite => "sqlite",
            DbKind::Postgres => "postgresql",
            DbKind::Mysql => "mysql",
        };
        crate::otel::Op::Db { system, statement }
    }

    /// Runs a statement; returns how many rows it changed.
    pub async fn execute(&self, sql: &str, params: Vec<Value>) -> Result<u64, DbError> {
        let run = async {
            match self {
                #[cfg(feature = "sqlite")]
                Db::Sqlite(db) => db.execute(sql, params).await,
                #[cfg(feature = "postgres")]
                Db::Postgres(db) => db.execute(sql, params).await,
                #[cfg(feature = "mysql")]
                Db::Mysql(db) => db.execute(sql, params).await,
            }
        };
        crate::otel::call(run, self.traced(sql)).await
    }

    /// Runs several statements separated by `;` (no parameters), such as a schema. A
    /// statement that would open a transaction or change the connection's session for later
    /// callers (`BEGIN`, `SET`, …) is refused: run it in a [`transaction`](Self::transaction).
    pub async fn execute_batch(&self, sql: &str) -> Result<(), DbError> {
        let run = async {
            match self {
                #[cfg(feature = "sqlite")]
                Db::Sqlite(db) => db.execute_batch(sql).await,
                #[cfg(feature = "postgres")]
                Db::Postgres(db) => db.execute_batch(sql).await,
                #[cfg(feature = "mysql")]
                Db::Mysql(db) => db.execute_batch(sql).await,
            }
        };
        crate::otel::call(run, self.traced(sql)).await
    }

    /// Begins a transaction with the database's default isolation level: it holds one
    /// connection of this worker's pool until [`commit`](Transaction::commit) or
    /// [`rollback`](Transaction::rollback) (or until dropped, which rolls it back).
    ///
    /// ```no_run
    /// # async fn f(db: brisk::db::Db) -> Result<(), brisk::db::DbError> {
    /// let mut tx = db.begin().await?;
    /// tx.execute("UPDATE accounts SET balance = balance - $1 WHERE id = $2", vec![10.into(), 1.into()]).await?;
    /// tx.execute("UPDATE accounts SET balance = balance + $1 WHERE id = $2", vec![10.into(), 2.into()]).await?;
    /// tx.commit().await?;
    /// # Ok(()) }
    /// ```
    pub async fn begin(&self) -> Result<Transaction, DbError> {
        self.begin_with(&TxOptions::default()).await
    }

    /// Begins a transaction as `options` say (isolation level, read-only).
    pub async fn begin_with(&self, options: &TxOptions) -> Result<Transaction, DbError> {
        let inner = match self {
            #[cfg(feature = "sqlite")]
            Db::Sqlite(db) => Backend::Sqlite(db.begin(options).await?),
            #[cfg(feature = "postgres")]
            Db::Postgres(db) => Backend::Postgres(db.begin(options).await?),
            #[cfg(feature = "mysql")]
            Db::Mysql(db) => Backend::Mysql(db.begin(options).await?),
        };
        Ok(Transaction::new(inner))
    }

    /// Runs `f` in a transaction: committed if `f` returns `Ok`, rolled back if it returns
    /// `Err` (which is returned). See [`transaction_with`](Self::transaction_with) for an
    /// isolation level and retries.
    ///
    /// Where the future must be `Send` (an axum handler), use [`begin`](Self::begin) and
    /// [`Transaction::commit`] instead: rustc cannot yet prove an async closure's future
    /// `Send` ("implementation of `Send` is not general enough"). A transaction dropped
    /// before its commit rolls back, so `?` between them is safe.
    ///
    /// ```no_run
    /// # async fn f(db: brisk::db::Db) -> Result<(), brisk::db::DbError> {
    /// use brisk::db::{DbError, Transaction};
    /// let id: i64 = db
    ///     .transaction(async |tx: &mut Transaction| -> Result<i64, DbError> {
    ///         let row = tx.query_one("INSERT INTO rooms (name) VALUES ($1) RETURNING id", vec!["ops".into()]).await?;
    ///         let id: i64 = row.expect("a row").get(0)?;
    ///         tx.execute("INSERT INTO members (room_id, name) VALUES ($1, $2)", vec![id.into(), "ann".into()]).await?;
    ///         Ok(id)
    ///     })
    ///     .await?;
    /// # Ok(()) }
    /// ```
    pub async fn transaction<T, E, F>(&self, f: F) -> Result<T, E>
    where
        F: AsyncFnMut(&mut Transaction) -> Result<T, E>,
        E: From<DbError>,
    {
        self.transaction_with(TxOptions::default(), f).await
    }

    /// Runs `f` in a transaction as `options` say, committed if `f` returns `Ok`, rolled back
    /// if it returns `Err`. When a statement or the commit fails with a serialization failure
    /// or a deadlock ([`ErrorKind::Serialization`](super::ErrorKind::Serialization)), the
    /// transaction is rolled back and `f` runs again in a new one, up to `options.retries`
    /// more times, after a short pause with jitter; past them, the last error is returned.
    ///
    /// ```no_run
    /// # async fn f(db: brisk::db::Db) -> Result<(), brisk::db::DbError> {
    /// use brisk::db::{DbError, Isolation, Transaction, TxOptions};
    /// let options = TxOptions::default().isolation(Isolation::Serializable).retries(5);
    /// db.transaction_with(options, async |tx: &mut Transaction| -> Result<(), DbError> {
    ///     let row = tx.query_one("SELECT balance FROM accounts WHERE id = $1", vec![1.into()]).await?;
    ///     let balance: i64 = row.expect("account 1").get(0)?;
    ///     tx.execute("UPDATE accounts SET balance = $1 WHERE id = $2", vec![(balance + 1).into(), 1.into()]).await?;
    ///     Ok(())
    /// })
    /// .await?;
    /// # Ok(()) }
    /// ```
    pub async fn transaction_with<T, E, F>(&self, options: TxOptions, mut f: F) -> Result<T, E>
    where
        F: AsyncFnMut(&mut Transaction) -> Result<T, E>,
        E: From<DbError>,
    {
        let mut attempt = 0;
        loop {
            let mut tx = match self.begin_with(&options).await {
                Ok(tx) => tx,
                // SQLite's write lock held by another writer past the busy timeout.
                Err(e) if e.is_retryable() && attempt < options.retries => {
                    attempt += 1;
                    tokio::time::sleep(retry_pause(attempt)).await;
                    continue;
                }
                Err(e) => return Err(e.into()),
            };
            match f(&mut tx).await {
                Ok(value) => match tx.commit().await {
                    Ok(()) => return Ok(value),
                    Err(e) if e.is_retryable() && attempt < options.retries => {}
                    Err(e) => return Err(e.into()),
                },
                Err(e) => {
                    let retry = tx.retryable && attempt < options.retries;
                    if let Err(rollback) = tx.rollback().await {
                        tracing::warn!("cannot roll back a failed transaction: {rollback}");
                    }
                    if !retry {
                        return Err(e);
                    }
                }
            }
            attempt += 1;
            tokio::time::sleep(retry_pause(attempt)).await;
        }
    }
}
