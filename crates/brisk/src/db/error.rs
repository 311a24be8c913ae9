//! [`DbError`]: what can go wrong between a request and its data, each kind with the HTTP
//! status a handler should answer (a database that is down or slow is bad input too).

use std::time::Duration;

/// Why a database call failed.
#[derive(Debug, Clone, thiserror::Error)]
pub enum DbError {
    /// No connection to the database is up (it is down, unreachable, or still connecting);
    /// the call failed at once rather than wait. Answer 503.
    #[error("the database is unavailable: {0}")]
    Unavailable(String),
    /// The query ran longer than the per-query timeout. Answer 504.
    #[error("the query took longer than {} ms", .0.as_millis())]
    Timeout(Duration),
    /// Every connection was busy for the whole acquire timeout. Answer 503.
    #[error("no database connection was free within {} ms", .0.as_millis())]
    PoolTimeout(Duration),
    /// The database refused the query (syntax, constraint, type…). Answer 500.
    #[error("the query failed: {0}")]
    Query(String),
    /// A value in a row is not of the type asked for. Answer 500.
    #[error("unexpected value: {0}")]
    Decode(String),
    /// The URL or options cannot be used.
    #[error("bad database configuration: {0}")]
    Config(String),
}

impl DbError {
    /// The HTTP status that answers a request that failed with this error.
    ///
    /// ```
    /// use brisk::db::DbError;
    /// assert_eq!(DbError::Unavailable("down".into()).http_status(), 503);
    /// assert_eq!(DbError::Timeout(std::time::Duration::from_secs(1)).http_status(), 504);
    /// ```
    pub fn http_status(&self) -> u16 {
        match self {
            DbError::Unavailable(_) | DbError::PoolTimeout(_) => 503,
            DbError::Timeout(_) => 504,
            DbError::Query(_) | DbError::Decode(_) | DbError::Config(_) => 500,
        }
    }
}
