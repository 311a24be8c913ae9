//! Databases for Brisk workers, each backend behind a cargo feature: [`Sqlite`] (feature
//! `sqlite`, the embedded default), [`Postgres`] (feature `postgres`) and [`Mysql`] for MySQL
//! and MariaDB (feature `mysql`).
//!
//! Every backend opens its connections inside the worker that uses them, on first use (or
//! when `connect` is called from `on_worker_start`), never in the master; a value made in
//! `main` is only configuration. They share a small surface where they agree — `query`,
//! `query_one`, `execute`, `execute_batch`, with `$1`, `$2`… parameters as [`Value`]s and
//! [`Row`]s back — and [`Db`] picks one from a URL. No ORM: an application that wants one
//! opens it inside the worker the same way.
//!
//! Failures are [`DbError`]s that say which HTTP status answers them: a database that is down
//! is 503 at once (not a hang), a slow query past its timeout 504.

mod cache;
mod database;
mod error;
#[cfg(feature = "mysql")]
mod mysql;
#[cfg(feature = "postgres")]
mod postgres;
#[cfg(feature = "postgres")]
mod postgres_tls;
#[cfg(feature = "postgres")]
mod postgres_wire;
#[cfg(feature = "sqlite")]
mod sqlite;
#[cfg(feature = "postgres")]
mod tls_end_point;
mod value;

pub use cache::QueryCache;
pub use database::{Db, DbKind, DbOptions};
pub use error::DbError;
#[cfg(feature = "mysql")]
pub use mysql::{Mysql, MysqlOptions};
#[cfg(feature = "postgres")]
pub use postgres::{Postgres, PostgresOptions};
#[cfg(feature = "sqlite")]
pub use sqlite::{Sqlite, SqliteOptions};
pub use value::{FromValue, Row, Value};
