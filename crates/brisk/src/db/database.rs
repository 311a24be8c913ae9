//! [`Db`]: one of the backends, picked from a URL, behind their common surface.

use super::error::DbError;
#[cfg(feature = "mysql")]
use super::mysql::{Mysql, MysqlOptions};
#[cfg(feature = "postgres")]
use super::postgres::{Postgres, PostgresOptions};
#[cfg(feature = "sqlite")]
use super::sqlite::{Sqlite, SqliteOptions};
use super::value::{Row, Value};

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
        match self {
            #[cfg(feature = "sqlite")]
            Db::Sqlite(db) => db.query(sql, params).await,
            #[cfg(feature = "postgres")]
            Db::Postgres(db) => db.query(sql, params).await,
            #[cfg(feature = "mysql")]
            Db::Mysql(db) => db.query(sql, params).await,
        }
    }

    /// The first row `sql` returns, if any.
    pub async fn query_one(&self, sql: &str, params: Vec<Value>) -> Result<Option<Row>, DbError> {
        match self {
            #[cfg(feature = "sqlite")]
            Db::Sqlite(db) => db.query_one(sql, params).await,
            #[cfg(feature = "postgres")]
            Db::Postgres(db) => db.query_one(sql, params).await,
            #[cfg(feature = "mysql")]
            Db::Mysql(db) => db.query_one(sql, params).await,
        }
    }

    /// Runs `sql` once for each parameter list; each run's rows, in order. PostgreSQL sends
    /// them as one batch (one round trip ending in one `Sync`, so one implicit transaction);
    /// the other backends run them side by side on their pools.
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
            Db::Postgres(db) => db.query_each(sql, lists).await,
            #[allow(unreachable_patterns)]
            _ => {
                let runs = lists.into_iter().map(|params| self.query(sql, params));
                futures_util::future::try_join_all(runs).await
            }
        }
    }

    /// Runs a statement; returns how many rows it changed.
    pub async fn execute(&self, sql: &str, params: Vec<Value>) -> Result<u64, DbError> {
        match self {
            #[cfg(feature = "sqlite")]
            Db::Sqlite(db) => db.execute(sql, params).await,
            #[cfg(feature = "postgres")]
            Db::Postgres(db) => db.execute(sql, params).await,
            #[cfg(feature = "mysql")]
            Db::Mysql(db) => db.execute(sql, params).await,
        }
    }

    /// Runs several statements separated by `;` (no parameters), such as a schema.
    pub async fn execute_batch(&self, sql: &str) -> Result<(), DbError> {
        match self {
            #[cfg(feature = "sqlite")]
            Db::Sqlite(db) => db.execute_batch(sql).await,
            #[cfg(feature = "postgres")]
            Db::Postgres(db) => db.execute_batch(sql).await,
            #[cfg(feature = "mysql")]
            Db::Mysql(db) => db.execute_batch(sql).await,
        }
    }
}
