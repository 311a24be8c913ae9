//! A connection of its own for Brisk's own upkeep (the migrations): no statement is checked,
//! because what it runs may lock, set or create for the session, and the connection never
//! serves anyone after it: PostgreSQL's and SQLite's are closed when the session drops,
//! MySQL's goes back to the pool only through a reset (`COM_RESET_CONNECTION`).

use super::database::{Db, DbKind};
use super::error::DbError;
#[cfg(feature = "mysql")]
use super::mysql::Mysql;
#[cfg(feature = "postgres")]
use super::postgres::{Live, Postgres};
use super::row::Row;
#[cfg(feature = "sqlite")]
use super::sqlite::{Job, Sqlite};
use super::value::Value;

/// See the module's doc.
pub(crate) struct Session {
    backend: Backend,
}

enum Backend {
    #[cfg(feature = "sqlite")]
    Sqlite {
        db: Sqlite,
        jobs: std::sync::mpsc::Sender<Job>,
    },
    #[cfg(feature = "postgres")]
    Postgres { db: Postgres, live: Live },
    #[cfg(feature = "mysql")]
    Mysql {
        db: Mysql,
        conn: Option<mysql_async::Conn>,
    },
}

impl Db {
    /// A session: a connection of its own, unchecked (see the module's doc).
    pub(crate) async fn session(&self) -> Result<Session, DbError> {
        let backend = match self {
            #[cfg(feature = "sqlite")]
            Db::Sqlite(db) => Backend::Sqlite {
                db: db.clone(),
                jobs: db.dedicated()?,
            },
            #[cfg(feature = "postgres")]
            Db::Postgres(db) => Backend::Postgres {
                db: db.clone(),
                live: db.unchecked().await?,
            },
            #[cfg(feature = "mysql")]
            Db::Mysql(db) => Backend::Mysql {
                db: db.clone(),
                conn: Some(db.conn().await?),
            },
        };
        Ok(Session { backend })
    }
}

impl Session {
    /// Which backend it is on.
    pub(crate) fn kind(&self) -> DbKind {
        match &self.backend {
            #[cfg(feature = "sqlite")]
            Backend::Sqlite { .. } => DbKind::Sqlite,
            #[cfg(feature = "postgres")]
            Backend::Postgres { .. } => DbKind::Postgres,
            #[cfg(feature = "mysql")]
            Backend::Mysql { .. } => DbKind::Mysql,
        }
    }

    /// Runs `sql` (one statement, or several separated by `;`), without parameters.
    pub(crate) async fn run(&mut self, sql: &str) -> Result<(), DbError> {
        match &mut self.backend {
            #[cfg(feature = "sqlite")]
            Backend::Sqlite { db, jobs } => {
                let sql = sql.to_string();
                db.call_within(jobs, None, move |conn| {
                    conn.execute_batch(&sql).map_err(super::sqlite::query_error)
                })
                .await
            }
            #[cfg(feature = "postgres")]
            Backend::Postgres { db, live } => db.simple(live, sql).await.map(drop),
            #[cfg(feature = "mysql")]
            Backend::Mysql { conn, .. } => {
                use mysql_async::prelude::Queryable;
                let conn = conn.as_mut().expect("held until dropped");
                conn.query_drop(sql)
                    .await
                    .map_err(super::mysql::mysql_error)
            }
        }
    }

    /// The rows of one statement with `$1`, `$2`… parameters.
    pub(crate) async fn query(
        &mut self,
        sql: &str,
        params: Vec<Value>,
    ) -> Result<Vec<Row>, DbError> {
        match &mut self.backend {
            #[cfg(feature = "sqlite")]
            Backend::Sqlite { db, jobs } => {
                let sql = super::sqlite::sqlite_sql(sql, params.len())?;
                db.call_on(jobs, move |conn| {
                    super::sqlite::query_rows(conn, &sql, &params)
                })
                .await
            }
            #[cfg(feature = "postgres")]
            Backend::Postgres { db, live } => {
                let (outcomes, prepared, _) = db.run_on(live, sql, &[params]).await?;
                let rows = outcomes.first().map(|o| &o.rows[..]).unwrap_or_default();
                rows.iter()
                    .map(|r| super::postgres_answer::convert_row(r, &prepared))
                    .collect()
            }
            #[cfg(feature = "mysql")]
            Backend::Mysql { db, conn } => {
                let conn = conn.as_mut().expect("held until dropped");
                db.query_on(conn, sql, params).await
            }
        }
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        #[cfg(feature = "mysql")]
        #[allow(irrefutable_let_patterns)] // with MySQL the only backend built
        if let Backend::Mysql { conn, .. } = &mut self.backend {
            if let Some(mut conn) = conn.take() {
                conn.reset_connection(true);
            }
        }
    }
}
