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
//! Single statements share connections (PostgreSQL pipelines them on one), so a statement
//! that would open a transaction or change the session for the callers after it is refused
//! there; a [`Transaction`] ([`Db::begin`], [`Db::transaction`]) holds a connection of its
//! own, on every backend alike.
//!
//! Failures are [`DbError`]s with a kind an app can branch on ([`ErrorKind`]: a unique
//! violation, a serialization failure to retry…) and the HTTP status that answers them: a
//! database that is down is 503 at once (not a hang), a slow query past its timeout 504.

mod cache;
mod calendar;
mod database;
mod error;
mod from_value;
mod migrations;
#[cfg(feature = "mysql")]
mod mysql;
#[cfg(feature = "mysql")]
mod mysql_tx;
#[cfg(feature = "mysql")]
mod mysql_types;
#[cfg(any(feature = "postgres", feature = "sqlite"))]
mod pool_wait;
#[cfg(feature = "postgres")]
mod postgres;
#[cfg(feature = "postgres")]
mod postgres_answer;
#[cfg(feature = "postgres")]
mod postgres_connect_error;
#[cfg(all(feature = "postgres", feature = "fuzzing"))]
pub(crate) mod postgres_fuzzing;
#[cfg(feature = "postgres")]
mod postgres_lowat;
#[cfg(feature = "postgres")]
mod postgres_message;
#[cfg(feature = "postgres")]
mod postgres_options;
#[cfg(feature = "postgres")]
mod postgres_startup;
#[cfg(feature = "postgres")]
mod postgres_tls;
#[cfg(feature = "postgres")]
mod postgres_tx;
#[cfg(feature = "postgres")]
mod postgres_types;
#[cfg(feature = "postgres")]
mod postgres_wire;
#[cfg(feature = "postgres")]
mod postgres_write_batch;
mod row;
mod row_decode;
mod row_view;
mod session;
mod sql_lex;
#[cfg(feature = "sqlite")]
mod sqlite;
#[cfg(feature = "sqlite")]
mod sqlite_tx;
mod statement;
#[cfg(feature = "postgres")]
mod tls_end_point;
mod transaction;
mod tx_options;
mod value;

pub use crate::params;
pub use cache::QueryCache;
pub use database::{Db, DbKind, DbOptions};
pub use error::{DbError, ErrorKind, ServerError};
pub use from_value::{FromValue, Json};
pub use migrations::{MigrateError, Migration, MigrationState, Migrations};
#[cfg(feature = "mysql")]
pub use mysql::{Mysql, MysqlOptions};
#[cfg(feature = "postgres")]
pub use postgres::Postgres;
#[cfg(feature = "postgres")]
pub use postgres_options::PostgresOptions;
pub use row::Row;
pub use row_view::RowView;
#[cfg(feature = "sqlite")]
pub use sqlite::{Sqlite, SqliteOptions};
pub use transaction::Transaction;
pub use tx_options::{Isolation, TxOptions};
pub use value::Value;
