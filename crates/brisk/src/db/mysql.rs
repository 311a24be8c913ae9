//! [`Mysql`]: MySQL and MariaDB on `mysql_async`, one pool per worker. The pool opens its
//! connections on first use (never in the master), keeps prepared statements per connection
//! (`mysql_async`'s statement cache); a call waits for a connection up to the acquire timeout
//! and then runs within the query timeout. Placeholders
//! are written `$1`, `$2`… as for the other backends and rewritten to MySQL's `?`. TLS
//! (rustls) when the URL says `require_ssl=true` or [`MysqlOptions::tls_root_certs`] is set.
//!
//! A connection goes back to the pool as it is (resetting it would drop its prepared
//! statements), so a call must not leave it changed: statements that would open a
//! transaction or change the session are refused ([`statement`](super::statement)), and a
//! transaction a call left open anyway is rolled back and the call fails. A transaction
//! holds a pooled connection for its whole life (`mysql_tx.rs`).

use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::Duration;

use mysql_async::consts::StatusFlags;
use mysql_async::prelude::Queryable;
use mysql_async::{Opts, OptsBuilder, Pool, PoolConstraints, PoolOpts, SslOpts};

use super::error::{mysql_constraint, mysql_kind, DbError, ServerError};
use super::mysql_types::{self, convert_rows};
use super::row::Row;
use super::statement::rewrite_placeholders;
use super::statement::{self, Dialect, Place};
use super::value::Value;
use crate::redact::redacted;

/// How a worker uses a MySQL or MariaDB database.
#[derive(Debug, Clone)]
pub struct MysqlOptions {
    /// Connections per worker at most. Default 4: MySQL answers one query at a time per
    /// connection, so a worker serving many requests at once needs a few.
    pub pool_size: usize,
    /// How long a query waits for a free connection (opening one included) before failing
    /// with [`DbError::PoolTimeout`]. Default 10 s.
    pub acquire_timeout: Duration,
    /// How long a query may run on its connection before failing with [`DbError::Timeout`].
    /// Default 5 s.
    pub query_timeout: Duration,
    /// Prepared statements kept per connection. Default 256.
    pub statement_cache: usize,
    /// A PEM file of root certificates: TLS becomes required, and the server's certificate
    /// must chain to one of them (and no other) and name the host, as `--ssl-ca` with
    /// `--ssl-verify-server-cert` does for the mysql client (it takes the place of the URL's
    /// `verify_ca`). Without it, `?require_ssl=true` in the URL asks for TLS checked against
    /// the Mozilla roots (add `verify_ca=false` to encrypt without checking the certificate);
    /// without either, the connection is plain. Over TLS a connection stays on TCP
    /// (`prefer_socket=false`, unless the URL says otherwise).
    pub tls_root_certs: Option<std::path::PathBuf>,
}

impl Default for MysqlOptions {
    fn default() -> Self {
        MysqlOptions {
            pool_size: 4,
            acquire_timeout: Duration::from_secs(10),
            query_timeout: Duration::from_secs(5),
            statement_cache: 256,
            tls_root_certs: None,
        }
    }
}

/// A MySQL or MariaDB database as one worker sees it; cheap to clone, `Send + Sync`.
///
/// ```no_run
/// # async fn f() -> Result<(), brisk::db::DbError> {
/// use brisk::db::{Mysql, MysqlOptions};
/// let db = Mysql::new("mysql://app:secret@127.0.0.1:3306/app", MysqlOptions::default())?;
/// let row = db.query_one("SELECT id, randomnumber FROM world WHERE id = $1", vec![42.into()]).await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Mysql {
    pool: Pool,
    acquire_timeout: Duration,
    pub(super) query_timeout: Duration,
    /// Counted in the worker's database figures while a clone lives.
    gauges: Arc<PoolGauges>,
    /// Connections the pool may hold.
    size: usize,
}

/// The pool's own gauges (mysql_async keeps them), for the worker's database figures.
struct PoolGauges(Arc<mysql_async::Metrics>);

impl crate::db_figures::PoolConnections for PoolGauges {
    /// Connections open to the server (in the pool or in use), and those in use.
    fn connections(&self) -> (u64, u64) {
        let open = self.0.connection_count.load(Relaxed) as u64;
        let busy = self.0.connections_in_use.load(Relaxed) as u64;
        (open, busy.min(open))
    }
}

impl Mysql {
    /// A database at `url` (`mysql://user:password@host:port/db`). Only the URL is checked
    /// here; connections open on the first query.
    pub fn new(url: &str, options: MysqlOptions) -> Result<Self, DbError> {
        let opts =
            Opts::from_url(url).map_err(|e| DbError::Config(format!("{}: {e}", redacted(url))))?;
        let size = options.pool_size.max(1);
        // The minimum is the size: mysql_async closes idle connections above the minimum
        // (after `inactive_connection_ttl`, 0 s by default), so a lower one would reconnect
        // between bursts. Connections still open only as queries need them.
        let constraints = PoolConstraints::new(size, size)
            .ok_or_else(|| DbError::Config(format!("pool size {size}")))?;
        // A connection given back to the pool keeps its session (mysql_async resets it by
        // default, which drops its prepared statements, so each query would prepare again);
        // `?reset_connection=true` in the URL asks for the reset.
        let reset = url.contains("reset_connection=true");
        let pool_opts: PoolOpts = opts
            .pool_opts()
            .clone()
            .with_constraints(constraints)
            .with_reset_connection(reset);
        let tls = opts.ssl_opts().is_some() || options.tls_root_certs.is_some();
        // Every session in UTC (again after a reset): a TIMESTAMP column's instant then reads
        // and writes the same whatever the server's time zone.
        let mut opts = OptsBuilder::from_opts(opts)
            .stmt_cache_size(options.statement_cache)
            .pool_opts(pool_opts)
            .setup(vec!["SET time_zone = '+00:00'"]);
        if tls {
            // mysql_async builds its rustls configuration with the process's default
            // provider: make it ring, Brisk's, unless the app installed another.
            let _ = rustls::crypto::ring::default_provider().install_default();
            // mysql_async otherwise tries the server's Unix socket after each TCP connect,
            // which cannot take the TLS options (a failed login on every new connection).
            if !url.contains("prefer_socket=") {
                opts = opts.prefer_socket(false);
            }
        }
        if let Some(roots) = &options.tls_root_certs {
            if !roots.is_file() {
                return Err(DbError::Config(format!(
                    "tls_root_certs {}: no such file",
                    roots.display()
                )));
            }
            let tls = SslOpts::default()
                .with_root_certs(vec![roots.clone().into()])
                .with_disable_built_in_roots(true);
            opts = opts.ssl_opts(tls);
        }
        let pool = Pool::new(opts);
        let gauges = Arc::new(PoolGauges(pool.metrics()));
        let weak: std::sync::Weak<PoolGauges> = Arc::downgrade(&gauges);
        crate::db_figures::register(weak);
        Ok(Mysql {
            pool,
            acquire_timeout: options.acquire_timeout,
            query_timeout: options.query_timeout,
            gauges,
            size,
        })
    }

    /// A connection of the pool, within the acquire timeout. Whatever keeps it from opening
    /// (the server down, a refused login, an unknown database, TLS) leaves the database
    /// unavailable to this app: [`DbError::Unavailable`], as with PostgreSQL.
    pub(super) async fn conn(&self) -> Result<mysql_async::Conn, DbError> {
        if self.gauges.0.connections_in_use.load(Relaxed) >= self.size {
            // Every connection is in use: this one waits for a place.
            crate::db_figures::waited();
        }
        match tokio::time::timeout(self.acquire_timeout, self.pool.get_conn()).await {
            Ok(r) => r.map_err(|e| DbError::Unavailable(e.to_string())),
            Err(_) => Err(DbError::pool_timed_out(self.acquire_timeout)),
        }
    }

    pub(super) async fn timed<T>(
        &self,
        work: impl std::future::Future<Output = Result<T, mysql_async::Error>>,
    ) -> Result<T, DbError> {
        match tokio::time::timeout(self.query_timeout, work).await {
            Ok(r) => r.map_err(mysql_error),
            Err(_) => Err(DbError::timed_out(self.query_timeout)),
        }
    }

    /// Every row `sql` returns; parameters are `$1`, `$2`…
    pub async fn query(&self, sql: &str, params: Vec<Value>) -> Result<Vec<Row>, DbError> {
        statement::check(sql, Dialect::Mysql, Place::Shared)?;
        let mut conn = self.conn().await?;
        let rows = self.query_on(&mut conn, sql, params).await;
        left_as_found(&mut conn, rows).await
    }

    /// The rows of `sql` on `conn`.
    pub(super) async fn query_on(
        &self,
        conn: &mut mysql_async::Conn,
        sql: &str,
        params: Vec<Value>,
    ) -> Result<Vec<Row>, DbError> {
        let (sql, params) = mysql_sql(sql, params)?;
        convert_rows(self.timed(conn.exec(sql, params)).await?)
    }

    /// The first row `sql` returns, if any.
    pub async fn query_one(&self, sql: &str, params: Vec<Value>) -> Result<Option<Row>, DbError> {
        Ok(self.query(sql, params).await?.into_iter().next())
    }

    /// Runs a statement; returns how many rows it changed.
    pub async fn execute(&self, sql: &str, params: Vec<Value>) -> Result<u64, DbError> {
        statement::check(sql, Dialect::Mysql, Place::Shared)?;
        let mut conn = self.conn().await?;
        let changed = self.execute_on(&mut conn, sql, params).await;
        left_as_found(&mut conn, changed).await
    }

    /// Runs a statement on `conn`; how many rows it changed.
    pub(super) async fn execute_on(
        &self,
        conn: &mut mysql_async::Conn,
        sql: &str,
        params: Vec<Value>,
    ) -> Result<u64, DbError> {
        let (sql, params) = mysql_sql(sql, params)?;
        self.timed(async {
            conn.exec_drop(sql, params).await?;
            Ok(conn.affected_rows())
        })
        .await
    }

    /// Runs several statements separated by `;` (no parameters), such as a schema. A
    /// statement that would open a transaction or change the session is refused.
    pub async fn execute_batch(&self, sql: &str) -> Result<(), DbError> {
        statement::check(sql, Dialect::Mysql, Place::Shared)?;
        let mut conn = self.conn().await?;
        let done = self.timed(conn.query_drop(sql)).await;
        left_as_found(&mut conn, done).await
    }
}

/// `result`, unless the call left the connection inside a transaction (which the statement
/// check should have refused): then that is rolled back, and the call fails.
async fn left_as_found<T>(
    conn: &mut mysql_async::Conn,
    result: Result<T, DbError>,
) -> Result<T, DbError> {
    if result.is_err() {
        // An error leaves no OK packet to read the transaction status from, and a statement
        // that failed may have opened one (a procedure): end any, so that the next caller's
        // START TRANSACTION does not commit it. A ROLLBACK outside one is nothing.
        if conn.query_drop("ROLLBACK").await.is_err() {
            conn.reset_connection(true);
        }
        return result;
    }
    let in_transaction = conn.last_ok_packet().is_some_and(|ok| {
        ok.status_flags()
            .contains(StatusFlags::SERVER_STATUS_IN_TRANS)
    });
    if !in_transaction {
        return result;
    }
    if conn.query_drop("ROLLBACK").await.is_err() {
        // Reset before it serves anyone else.
        conn.reset_connection(true);
    }
    Err(DbError::Refused(
        "the statement left the connection inside a transaction, which was rolled back: run \
         transactions with db.transaction() or db.begin()"
            .into(),
    ))
}

/// The SQL with `?` placeholders, and the parameters in the order they now appear.
pub(super) fn mysql_sql(
    sql: &str,
    params: Vec<Value>,
) -> Result<(String, mysql_async::Params), DbError> {
    let (sql, order) = rewrite_placeholders(sql, Dialect::Mysql, params.len(), |_| "?".into())?;
    if params.is_empty() {
        return Ok((sql, mysql_async::Params::Empty));
    }
    // Every number is one of the parameters: rewrite_placeholders checked.
    let values = order
        .iter()
        .map(|&n| mysql_types::to_mysql(n, &params[n - 1]))
        .collect::<Result<_, _>>()?;
    Ok((sql, mysql_async::Params::Positional(values)))
}

pub(super) fn mysql_error(e: mysql_async::Error) -> DbError {
    match e {
        mysql_async::Error::Server(s) => {
            let kind = mysql_kind(s.code);
            if kind == super::error::ErrorKind::Unavailable {
                return DbError::Unavailable(format!("{}: {}", s.code, s.message));
            }
            DbError::Query(ServerError {
                constraint: mysql_constraint(s.code, &s.message),
                code: s.code.to_string(),
                message: s.message,
                kind,
            })
        }
        // The driver refused the call (the wrong number of parameters): the code's mistake.
        mysql_async::Error::Driver(e) => DbError::Refused(e.to_string()),
        mysql_async::Error::Url(e) => DbError::Config(e.to_string()),
        other => DbError::Unavailable(other.to_string()),
    }
}
