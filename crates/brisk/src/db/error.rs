//! [`DbError`]: what can go wrong between a request and its data. Code acts on its
//! [`kind`](DbError::kind) (a unique violation, a serialization failure to retry…), its
//! [`code`](DbError::code) (the SQLSTATE, or MySQL's error number) and its
//! [`constraint`](DbError::constraint); a client is answered with its
//! [`http_status`](DbError::http_status) and [`client_message`](DbError::client_message),
//! general words that never carry the server's message, the SQL or a host (those are for the
//! log: the error's `Display`).

use std::time::Duration;

/// Why a database call failed.
///
/// ```
/// use brisk::db::{DbError, ErrorKind};
/// fn answer(e: &DbError) -> (u16, &'static str) {
///     match e.kind() {
///         ErrorKind::UniqueViolation => (409, "that name is taken"),
///         _ => (e.http_status(), e.client_message()),
///     }
/// }
/// assert_eq!(answer(&DbError::Unavailable("down".into())), (503, "the database is unavailable; try again later"));
/// ```
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
    /// The database refused the statement: a constraint, a serialization failure, syntax, a
    /// type… [`ServerError::kind`] says which.
    #[error("the query failed: {0}")]
    Query(ServerError),
    /// Brisk refused the call before it reached the database: a statement the call cannot
    /// take (`BEGIN` or `SET` on the shared connection: use a transaction), the wrong number
    /// of parameters, a parameter that does not fit its column. Answer 500: the code is wrong.
    #[error("refused: {0}")]
    Refused(String),
    /// A value in a row is not of the type asked for. Answer 500.
    #[error("unexpected value: {0}")]
    Decode(String),
    /// The URL or options cannot be used.
    #[error("bad database configuration: {0}")]
    Config(String),
}

/// An error the database server answered, as it gave it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerError {
    /// PostgreSQL's SQLSTATE (`23505`), MySQL's error number (`1062`), SQLite's extended
    /// result code (`2067`).
    pub code: String,
    /// The server's message: for the log, never for a client.
    pub message: String,
    /// The constraint it names, if any: PostgreSQL's constraint name, MySQL's key or
    /// constraint name, SQLite's `table.column`.
    pub constraint: Option<String>,
    /// What kind of failure it is.
    pub kind: ErrorKind,
}

impl std::fmt::Display for ServerError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.code, self.message)
    }
}

/// What kind of failure a [`DbError`] is, whatever the backend: what an app branches on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorKind {
    /// A unique or primary key constraint (PostgreSQL 23505, MySQL 1062, SQLite
    /// `UNIQUE`/`PRIMARY KEY`). Answers 409.
    UniqueViolation,
    /// A foreign key constraint (23503, MySQL 1451/1452, SQLite `FOREIGN KEY`). Answers 409.
    ForeignKeyViolation,
    /// A check constraint (23514, MySQL 3819/4025, SQLite `CHECK`). Answers 422.
    CheckViolation,
    /// A NOT NULL column given NULL (23502, MySQL 1048, SQLite `NOT NULL`). Answers 422.
    NotNullViolation,
    /// An exclusion constraint (PostgreSQL 23P01: two bookings of one room overlap).
    /// Answers 409.
    ExclusionViolation,
    /// The transaction lost a race with another and may succeed if run again: a
    /// serialization failure (40001), a deadlock (40P01, MySQL 1213), SQLite's lock taken by
    /// another writer inside a transaction. [`Db::transaction_with`](super::Db::transaction_with)
    /// retries these. Answers 503.
    Serialization,
    /// The database is down, unreachable, refused the login, or is shutting down. Answers 503.
    Unavailable,
    /// The statement or a lock wait ran past its timeout. Answers 504.
    Timeout,
    /// No connection was free in time. Answers 503.
    PoolTimeout,
    /// Brisk refused the call: see [`DbError::Refused`]. Answers 500.
    Refused,
    /// A value could not be read as the type asked for. Answers 500.
    Decode,
    /// The configuration cannot be used. Answers 500.
    Config,
    /// Any other error of the server (syntax, permission, a value it cannot take). Answers
    /// 500.
    Other,
}

impl DbError {
    /// A query past the query timeout `limit`, counted in the worker's database figures
    /// (`brisk_db_timeouts_total{kind="query"}`).
    pub(crate) fn timed_out(limit: Duration) -> Self {
        crate::db_figures::query_timed_out();
        DbError::Timeout(limit)
    }

    /// A wait for a place in a pool past the acquire timeout `wait`, counted in the worker's
    /// database figures (`brisk_db_timeouts_total{kind="acquire"}`).
    pub(crate) fn pool_timed_out(wait: Duration) -> Self {
        crate::db_figures::acquire_timed_out();
        DbError::PoolTimeout(wait)
    }

    /// What kind of failure this is.
    pub fn kind(&self) -> ErrorKind {
        match self {
            DbError::Unavailable(_) => ErrorKind::Unavailable,
            DbError::Timeout(_) => ErrorKind::Timeout,
            DbError::PoolTimeout(_) => ErrorKind::PoolTimeout,
            DbError::Query(e) => e.kind,
            DbError::Refused(_) => ErrorKind::Refused,
            DbError::Decode(_) => ErrorKind::Decode,
            DbError::Config(_) => ErrorKind::Config,
        }
    }

    /// The server's error code (SQLSTATE, MySQL's error number, SQLite's extended code), if
    /// the server answered one.
    ///
    /// ```
    /// use brisk::db::DbError;
    /// assert_eq!(DbError::Unavailable("down".into()).code(), None);
    /// ```
    pub fn code(&self) -> Option<&str> {
        match self {
            DbError::Query(e) => Some(&e.code),
            _ => None,
        }
    }

    /// The constraint the server named, if any.
    pub fn constraint(&self) -> Option<&str> {
        match self {
            DbError::Query(e) => e.constraint.as_deref(),
            _ => None,
        }
    }

    /// Whether running the transaction again may succeed ([`ErrorKind::Serialization`]).
    pub fn is_retryable(&self) -> bool {
        self.kind() == ErrorKind::Serialization
    }

    /// The HTTP status that answers a request that failed with this error.
    ///
    /// ```
    /// use brisk::db::DbError;
    /// assert_eq!(DbError::Unavailable("down".into()).http_status(), 503);
    /// assert_eq!(DbError::Timeout(std::time::Duration::from_secs(1)).http_status(), 504);
    /// ```
    pub fn http_status(&self) -> u16 {
        match self.kind() {
            ErrorKind::UniqueViolation
            | ErrorKind::ForeignKeyViolation
            | ErrorKind::ExclusionViolation => 409,
            ErrorKind::CheckViolation | ErrorKind::NotNullViolation => 422,
            ErrorKind::Serialization | ErrorKind::Unavailable | ErrorKind::PoolTimeout => 503,
            ErrorKind::Timeout => 504,
            ErrorKind::Refused | ErrorKind::Decode | ErrorKind::Config | ErrorKind::Other => 500,
        }
    }

    /// General words for a client, by kind: never the server's message, the SQL or a host.
    pub fn client_message(&self) -> &'static str {
        match self.kind() {
            ErrorKind::UniqueViolation => "it exists already",
            ErrorKind::ExclusionViolation => "it conflicts with something that exists",
            ErrorKind::ForeignKeyViolation => "it refers to something that does not exist",
            ErrorKind::CheckViolation => "a value is not allowed",
            ErrorKind::NotNullViolation => "a required value is missing",
            ErrorKind::Serialization => "the data changed meanwhile; try again",
            ErrorKind::Unavailable | ErrorKind::PoolTimeout => {
                "the database is unavailable; try again later"
            }
            ErrorKind::Timeout => "the database took too long to answer",
            ErrorKind::Refused | ErrorKind::Decode | ErrorKind::Config | ErrorKind::Other => {
                "internal error"
            }
        }
    }

    /// The JSON body that answers a client: `{"error": "…"}` with
    /// [`client_message`](Self::client_message).
    ///
    /// ```
    /// use brisk::db::DbError;
    /// let body = DbError::Unavailable("10.0.0.5:5432: connection refused".into()).client_body();
    /// assert_eq!(body, r#"{"error":"the database is unavailable; try again later"}"#);
    /// ```
    pub fn client_body(&self) -> String {
        serde_json::json!({ "error": self.client_message() }).to_string()
    }

    /// Logs the whole error (the server's message and code) at the level its kind deserves:
    /// what a response built from [`client_message`](Self::client_message) leaves out.
    pub fn log(&self) {
        match self.kind() {
            ErrorKind::UniqueViolation
            | ErrorKind::ForeignKeyViolation
            | ErrorKind::CheckViolation
            | ErrorKind::NotNullViolation
            | ErrorKind::ExclusionViolation
            | ErrorKind::Serialization => tracing::info!("database: {self}"),
            _ => tracing::warn!("database: {self}"),
        }
    }

    /// A server error of `kind` with `code` and `message`.
    #[cfg_attr(not(feature = "sqlite"), allow(dead_code))]
    pub(crate) fn server(kind: ErrorKind, code: impl Into<String>, message: String) -> DbError {
        DbError::Query(ServerError {
            code: code.into(),
            message,
            constraint: None,
            kind,
        })
    }
}

/// A response with [`DbError::http_status`] and [`DbError::client_body`]; the whole error
/// goes to the log ([`DbError::log`]).
#[cfg(feature = "axum")]
impl axum_core::response::IntoResponse for DbError {
    fn into_response(self) -> axum_core::response::Response {
        self.log();
        let status = http::StatusCode::from_u16(self.http_status())
            .unwrap_or(http::StatusCode::INTERNAL_SERVER_ERROR);
        let mut response = axum_core::response::Response::new(self.client_body().into());
        *response.status_mut() = status;
        response.headers_mut().insert(
            http::header::CONTENT_TYPE,
            http::HeaderValue::from_static("application/json"),
        );
        response
    }
}

/// The [`ErrorKind`] of a PostgreSQL SQLSTATE.
#[cfg(feature = "postgres")]
pub(crate) fn postgres_kind(code: &str) -> ErrorKind {
    match code {
        "23505" => ErrorKind::UniqueViolation,
        "23503" => ErrorKind::ForeignKeyViolation,
        "23514" => ErrorKind::CheckViolation,
        "23502" => ErrorKind::NotNullViolation,
        "23P01" => ErrorKind::ExclusionViolation,
        // A write on a server that only reads now (a standby after a failover): the server,
        // not the query.
        "25006" => ErrorKind::Unavailable,
        "40001" | "40P01" => ErrorKind::Serialization,
        // Lock not available (lock_timeout), a statement cancelled (statement_timeout).
        "55P03" | "57014" => ErrorKind::Timeout,
        // 08: connection exceptions; 53: out of resources; 57: operator intervention
        // (shutdown, crash, starting up): the server, not the query.
        _ if code.starts_with("08") || code.starts_with("53") || code.starts_with("57") => {
            ErrorKind::Unavailable
        }
        _ => ErrorKind::Other,
    }
}

/// The [`ErrorKind`] of a MySQL / MariaDB error number.
#[cfg(feature = "mysql")]
pub(crate) fn mysql_kind(code: u16) -> ErrorKind {
    match code {
        1062 | 1586 => ErrorKind::UniqueViolation,
        1451 | 1452 | 1216 | 1217 => ErrorKind::ForeignKeyViolation,
        3819 | 4025 => ErrorKind::CheckViolation,
        1048 | 1364 => ErrorKind::NotNullViolation,
        1213 => ErrorKind::Serialization,
        1205 | 3024 | 1969 => ErrorKind::Timeout,
        // Too many connections, shutting down; read-only (--read-only, a read-only
        // transaction, super_read_only on a replica).
        1040 | 1053 | 1203 | 1290 | 1792 | 1836 => ErrorKind::Unavailable,
        _ => ErrorKind::Other,
    }
}

/// The constraint a MySQL / MariaDB message names: the key of a duplicate entry (`… for key
/// 'name'`), the constraint of a foreign key or check (`` CONSTRAINT `name` ``).
#[cfg(feature = "mysql")]
pub(crate) fn mysql_constraint(code: u16, message: &str) -> Option<String> {
    match code {
        1062 | 1586 => {
            let key = message.rsplit_once(" for key '")?.1.strip_suffix('\'')?;
            // MySQL 8 writes `table.key`, MariaDB the key alone.
            Some(key.rsplit('.').next().unwrap_or(key).to_string())
        }
        1451 | 1452 | 3819 | 4025 => {
            let rest = message.split_once("CONSTRAINT `")?.1;
            Some(rest.split('`').next()?.to_string())
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    #[cfg(feature = "mysql")]
    fn mysql_messages_name_their_constraint() {
        let dup = "Duplicate entry 'a@x' for key 'uq_email'";
        assert_eq!(mysql_constraint(1062, dup).as_deref(), Some("uq_email"));
        let dup8 = "Duplicate entry 'a' for key 'users.uq_email'";
        assert_eq!(mysql_constraint(1062, dup8).as_deref(), Some("uq_email"));
        let fk = "Cannot add or update a child row: a foreign key constraint fails (`t`.`c`, \
                  CONSTRAINT `fk_c_p` FOREIGN KEY (`pid`) REFERENCES `p` (`id`))";
        assert_eq!(mysql_constraint(1452, fk).as_deref(), Some("fk_c_p"));
        let check = "CONSTRAINT `chk_n_pos` failed for `t`.`k`";
        assert_eq!(mysql_constraint(4025, check).as_deref(), Some("chk_n_pos"));
        assert_eq!(mysql_constraint(1048, "Column 'pid' cannot be null"), None);
    }

    #[test]
    fn kinds_give_statuses_and_words_without_the_servers_message() {
        let unique = DbError::Query(ServerError {
            code: "23505".into(),
            message: "duplicate key value violates unique constraint \"rooms_name_key\"".into(),
            constraint: Some("rooms_name_key".into()),
            kind: ErrorKind::UniqueViolation,
        });
        assert_eq!(unique.kind(), ErrorKind::UniqueViolation);
        assert_eq!(unique.http_status(), 409);
        assert_eq!(unique.code(), Some("23505"));
        assert_eq!(unique.constraint(), Some("rooms_name_key"));
        assert!(!unique.client_body().contains("rooms_name_key"));
        assert!(
            unique.to_string().contains("rooms_name_key"),
            "the log has it"
        );
        assert!(DbError::server(ErrorKind::Serialization, "40001", String::new()).is_retryable());
    }

    #[test]
    #[cfg(feature = "axum")]
    fn as_an_axum_response_it_has_its_status_and_general_words() {
        use axum_core::response::IntoResponse;
        let e = DbError::server(ErrorKind::UniqueViolation, "23505", "on 10.0.0.5".into());
        let response = e.into_response();
        assert_eq!(response.status(), 409);
        assert_eq!(response.headers()["content-type"], "application/json");
    }

    #[test]
    #[cfg(all(feature = "postgres", feature = "mysql"))]
    fn codes_map_to_kinds() {
        assert_eq!(postgres_kind("23505"), ErrorKind::UniqueViolation);
        assert_eq!(postgres_kind("40001"), ErrorKind::Serialization);
        assert_eq!(postgres_kind("57P01"), ErrorKind::Unavailable);
        assert_eq!(postgres_kind("42601"), ErrorKind::Other);
        assert_eq!(mysql_kind(1213), ErrorKind::Serialization);
    }
}
