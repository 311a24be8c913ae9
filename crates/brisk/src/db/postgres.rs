//! [`Postgres`]: PostgreSQL, one small pool per worker, on a client of Brisk's own
//! ([`postgres_wire`](super::postgres_wire), built on `postgres-protocol`).
//!
//! - **Opened inside the worker, on first use**: a value made in `main` (which the master runs
//!   too) connects nothing until a worker queries.
//! - **Pipelining**: the queries of every request that awaits the pool go out together without
//!   waiting for earlier answers, so one connection (the default) serves a whole worker; a
//!   query goes to the connection with the fewest in flight. A worker has
//!   `pool_size × max_pipeline` places; past them, queries wait for one in arrival order (a
//!   semaphore, so a freed place wakes one waiter, not all), up to the acquire timeout.
//! - **Batches**: [`Postgres::query_each`] sends one statement with many parameter lists as
//!   one request ending in one `Sync`: one round trip, one implicit transaction and one flush
//!   on the server for the lot. [`Postgres::query_pipelined`] sends them in one write too,
//!   but each ending in a `Sync` of its own: each runs as if it had been sent alone (its own
//!   implicit transaction, its own error), as TechEmpower's rules ask of every query.
//! - **Statements** are prepared once per connection and cached by their SQL, up to
//!   `statement_cache` of them; past it the least recently used is closed on the server.
//! - **Reconnects** with a back-off of at most `max_backoff`; while no connection is up,
//!   queries fail at once with [`DbError::Unavailable`] instead of waiting.
//! - **TLS** (rustls) as libpq's `sslmode` says: `prefer` (the default) asks and falls back to
//!   plain, `require` insists, `disable` never asks; `verify-ca` and `verify-full` insist and
//!   check the certificate against root certificates (`sslrootcert=PATH` in the URL, or
//!   [`PostgresOptions::tls_root_certs`]): that it chains to them, and for `verify-full` that
//!   it names the host. Root certificates with `prefer` or `require` check it as `verify-full`
//!   does. `sslrootcert=system` takes the system's root certificates (and `verify-full`
//!   only). Over TLS, SCRAM is bound to the channel (`SCRAM-SHA-256-PLUS`) when the server
//!   offers it; `channel_binding=require` refuses every login that is not. TCP keepalives are
//!   on, as libpq's `keepalives` options say.
//! - **Failover**: a URL with several hosts and `target_session_attrs=read-write` reconnects
//!   to whichever host is the primary now.
//! - **Timeouts**: the server ends a statement past `query_timeout` (the session's
//!   `statement_timeout`), and the query fails with [`DbError::Timeout`].
//! - **Values** ([`postgres_types`](super::postgres_types)): in binary both ways where the
//!   value fits the type (integers, floats, booleans, bytes, text, dates, times, timestamps,
//!   UUIDs, JSON, arrays of those), else as text the server parses whatever its settings;
//!   NUMERIC as its exact text ([`Value::Decimal`]).
//! - **Transactions** hold a connection of their own for their whole life
//!   ([`Db::begin`](super::Db::begin)): up to `max_transactions` per worker, opened as they are
//!   needed and kept for the next. The shared connection refuses what would open a
//!   transaction or change its session for the callers after ([`statement`](super::statement)).

use std::num::NonZeroUsize;
use std::str::FromStr;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::Duration;

use bytes::BytesMut;
use fallible_iterator::FallibleIterator;
use lru::LruCache;
use postgres_protocol::message::backend::{DataRowBody, Message};
use postgres_protocol::message::frontend::{self};
use tokio::sync::{Notify, OnceCell, Semaphore, SemaphorePermit};
use tokio_postgres::config::{ChannelBinding, SslMode, SslNegotiation};
use tokio_postgres::Config;

use super::error::DbError;
use super::postgres_answer::{
    bind, convert_row, db_error, decode_error, encode_error, in_place, is_reshaped, map_rows,
    outcomes, rows_of_runs, type_of, Outcome, Prepared, RunsApart,
};
use super::postgres_options::take_own_params;
pub(super) use super::postgres_options::PostgresOptions;
use super::postgres_tls::PgTls;
use super::postgres_wire::{self, Connection, Mode};
use super::row::Row;
use super::row_view::RowView;
use super::statement::{self, Dialect, Place};
use super::value::Value;
use crate::redact::redacted;

/// A PostgreSQL database as one worker sees it; cheap to clone, `Send + Sync`.
///
/// ```no_run
/// # async fn f() -> Result<(), brisk::db::DbError> {
/// use brisk::db::{Postgres, PostgresOptions};
/// let db = Postgres::new("postgres://app:secret@127.0.0.1/app", PostgresOptions::default())?;
/// let row = db.query_one("SELECT id, randomnumber FROM world WHERE id = $1", vec![42.into()]).await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Postgres {
    pub(super) inner: Arc<Inner>,
}

pub(super) struct Inner {
    config: Config,
    tls: PgTls,
    pub(super) options: PostgresOptions,
    slots: OnceLock<Vec<Arc<Slot>>>,
    /// Set once every connection made its first attempt (successful or not).
    attempted: AtomicUsize,
    /// Signalled when a connection comes up or a first attempt ends.
    changed: Notify,
    /// The worker's places in its connections' pipelines (`pool_size × max_pipeline`).
    places: Semaphore,
    /// Transactions' connections not in use.
    pub(super) idle: Mutex<Vec<Live>>,
    /// One per transaction that may run at once (`max_transactions`).
    pub(super) transactions: Arc<Semaphore>,
}

impl crate::db_figures::PoolConnections for Inner {
    /// The shared connections that are up (busy with a query in flight), and the
    /// transactions' connections: idle ones, and one per transaction under way.
    fn connections(&self) -> (u64, u64) {
        let (mut open, mut busy) = (0, 0);
        for slot in self.slots.get().map_or(&[][..], |s| &s[..]) {
            if slot.live.lock().is_ok_and(|l| l.is_some()) {
                open += 1;
                busy += u64::from(slot.in_flight.load(Ordering::Relaxed) > 0);
            }
        }
        let idle = self.idle.lock().map_or(0, |i| i.len()) as u64;
        let max = self
            .options
            .max_transactions
            .clamp(1, Semaphore::MAX_PERMITS);
        let in_transactions = max.saturating_sub(self.transactions.available_permits()) as u64;
        (open + idle + in_transactions, busy + in_transactions)
    }
}

/// One place in the pool: the connection up there now, if any, and what belongs to it.
#[derive(Default)]
struct Slot {
    live: Mutex<Option<Arc<Live>>>,
    in_flight: AtomicUsize,
    last_error: Mutex<String>,
    first_attempt_done: AtomicBool,
}

/// A connection that is up, with the statements prepared on it (they go with it).
pub(super) struct Live {
    pub(super) connection: Connection,
    /// Shared (pipelined) or a transaction's.
    mode: Mode,
    /// Whether statements are checked before they are prepared, and their answers awaited
    /// within the query timeout (all but a session's).
    checked: bool,
    statements: Mutex<LruCache<Box<str>, Arc<OnceCell<Prepared>>>>,
    /// Statements out of the cache, to close on the server with the next preparation.
    retired: Mutex<Vec<Arc<str>>>,
    named: AtomicU64,
}

impl Live {
    /// Whether a transaction's connection can serve the next transaction: still open, its
    /// session as it began.
    fn reusable(&self) -> bool {
        !self.connection.is_closed() && !self.connection.is_tainted()
    }

    fn new(connection: Connection, mode: Mode, statement_cache: usize) -> Live {
        let capacity = NonZeroUsize::new(statement_cache.max(1)).expect("at least one statement");
        Live {
            connection,
            mode,
            checked: true,
            statements: Mutex::new(LruCache::new(capacity)),
            retired: Mutex::default(),
            named: AtomicU64::new(0),
        }
    }

    /// The statement cache, locked (a panic elsewhere while it was held left it usable).
    fn statements(&self) -> MutexGuard<'_, LruCache<Box<str>, Arc<OnceCell<Prepared>>>> {
        self.statements.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Closes the statement `name` on the server with the next preparation.
    fn retire(&self, name: Arc<str>) {
        self.retired
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(name);
    }

    /// Drops `sql`'s statement from the cache if it is still `name` (a newer one stays), and
    /// retires it.
    pub(super) fn forget(&self, sql: &str, name: &Arc<str>) {
        let mut statements = self.statements();
        let same = statements
            .peek(sql)
            .and_then(|cell| cell.get())
            .is_some_and(|p| Arc::ptr_eq(&p.name, name));
        if same {
            statements.pop(sql);
        }
        drop(statements);
        self.retire(name.clone());
    }
}

impl Postgres {
    /// A database at `url` (`postgres://user:password@host:port/db`, or several hosts as
    /// `host=a,b` with `target_session_attrs=read-write`). Only the URL is checked here.
    pub fn new(url: &str, options: PostgresOptions) -> Result<Self, DbError> {
        let bad = |why: String| DbError::Config(format!("{}: {why}", redacted(url)));
        let (rest, own) = take_own_params(url);
        let config = Config::from_str(&rest).map_err(|e| bad(e.to_string()))?;
        if config.get_channel_binding() == ChannelBinding::Require
            && config.get_ssl_mode() == SslMode::Disable
        {
            return Err(bad(
                "channel_binding=require binds SCRAM to TLS, which sslmode=disable forbids".into(),
            ));
        }
        if config.get_ssl_negotiation() != SslNegotiation::Postgres {
            return Err(bad(
                "sslnegotiation=direct: Brisk's PostgreSQL client starts TLS with an SSLRequest"
                    .into(),
            ));
        }
        let root_certs = own.root_certs.or_else(|| options.tls_root_certs.clone());
        let tls = PgTls::new(config.get_ssl_mode(), own.verify, root_certs.as_deref())
            .map_err(|e| bad(e.to_string()))?;
        let options_max_transactions = options.max_transactions;
        let places = options
            .pool_size
            .max(1)
            .saturating_mul(options.max_pipeline.max(1));
        let inner = Arc::new(Inner {
            config,
            tls,
            options,
            slots: OnceLock::new(),
            attempted: AtomicUsize::new(0),
            changed: Notify::new(),
            places: Semaphore::new(places.min(Semaphore::MAX_PERMITS)),
            idle: Mutex::default(),
            transactions: Arc::new(Semaphore::new(
                options_max_transactions.clamp(1, Semaphore::MAX_PERMITS),
            )),
        });
        let weak: std::sync::Weak<Inner> = Arc::downgrade(&inner);
        crate::db_figures::register(weak);
        Ok(Postgres { inner })
    }

    /// Starts connecting now rather than on the first query, and waits (up to the connect
    /// timeout) for the first attempt. Call it from `on_worker_start` to warm up.
    pub async fn connect(&self) -> Result<(), DbError> {
        self.pick().await.map(drop)
    }

    fn slots(&self) -> &[Arc<Slot>] {
        self.inner.slots.get_or_init(|| {
            let slots: Vec<Arc<Slot>> = (0..self.inner.options.pool_size.max(1))
                .map(|_| Arc::new(Slot::default()))
                .collect();
            for slot in &slots {
                // In the worker's set: polled in the turn of the requests it serves.
                crate::runtime::local_tasks::spawn(keep_connected(
                    self.inner.clone(),
                    slot.clone(),
                ));
            }
            slots
        })
    }

    /// A place in the pipelines (waiting for one in arrival order, up to the acquire
    /// timeout), on the connection with the fewest queries in flight.
    async fn pick(&self) -> Result<Turn<'_>, DbError> {
        let slots = self.slots();
        let inner = &*self.inner;
        let options = &inner.options;
        let permit = match inner.places.try_acquire() {
            Ok(p) => p,
            Err(_) => {
                crate::db_figures::waited();
                let wait = tokio::time::timeout(options.acquire_timeout, inner.places.acquire());
                match wait.await {
                    Ok(Ok(p)) => p,
                    _ => return Err(DbError::pool_timed_out(options.acquire_timeout)),
                }
            }
        };
        // Taken when first needed: most calls find a connection at once.
        let mut first_deadline = None;
        loop {
            let changed = inner.changed.notified();
            let up = slots
                .iter()
                .filter_map(|s| Some((s, s.live.lock().ok()?.clone()?)))
                .min_by_key(|(s, _)| s.in_flight.load(Ordering::Relaxed));
            if let Some((slot, live)) = up {
                slot.in_flight.fetch_add(1, Ordering::Relaxed);
                return Ok(Turn {
                    slot: slot.clone(),
                    live,
                    _permit: permit,
                });
            }
            // Before every connection has tried once, wait for it; after, fail fast.
            let all_tried = inner.attempted.load(Ordering::Relaxed) >= slots.len();
            if all_tried
                || tokio::time::timeout_at(
                    *first_deadline.get_or_insert_with(|| {
                        tokio::time::Instant::now() + options.connect_timeout
                    }),
                    changed,
                )
                .await
                .is_err()
            {
                return Err(DbError::Unavailable(last_error(slots)));
            }
        }
    }

    /// The statement of `sql` on connection `live`: prepared there once (queries that ask
    /// at the same time wait for the one preparation), then cached; a full cache gives up its
    /// least recently used statement, closed on the server with the next preparation.
    pub(super) async fn prepared(&self, live: &Live, sql: &str) -> Result<Prepared, DbError> {
        let cell = {
            let mut statements = live.statements();
            match statements.get(sql) {
                Some(cell) => cell.clone(),
                None => {
                    let cell = Arc::<OnceCell<Prepared>>::default();
                    if let Some((_, old)) = statements.push(sql.into(), cell.clone()) {
                        // One still being prepared is retired by its own caller, in
                        // `prepare_once`.
                        if let Some(old) = old.get() {
                            live.retire(old.name.clone());
                        }
                    }
                    cell
                }
            }
        };
        // A statement already prepared (the common case) is taken at once. The preparation
        // is boxed: its future (hundreds of bytes) is then not part of every query's future,
        // which is built, moved and boxed per request.
        match cell.get() {
            Some(prepared) => Ok(prepared.clone()),
            None => Box::pin(self.prepare_once(live, sql, cell)).await,
        }
    }

    /// Prepares `sql` into `cell` (a new entry of `live`'s cache, or one another call is
    /// preparing: then its preparation is awaited).
    async fn prepare_once(
        &self,
        live: &Live,
        sql: &str,
        cell: Arc<OnceCell<Prepared>>,
    ) -> Result<Prepared, DbError> {
        let prepared = cell.get_or_try_init(|| self.prepare(live, sql)).await;
        let prepared = match prepared {
            Ok(p) => p.clone(),
            Err(e) => {
                // A statement refused or not prepared is not kept: the next call says why
                // again.
                let mut statements = live.statements();
                if statements.peek(sql).is_some_and(|c| Arc::ptr_eq(c, &cell)) {
                    statements.pop(sql);
                }
                return Err(e);
            }
        };
        if !live
            .statements()
            .peek(sql)
            .is_some_and(|c| Arc::ptr_eq(c, &cell))
        {
            // Pushed out of the cache while it was being prepared.
            live.retire(prepared.name.clone());
        }
        Ok(prepared)
    }

    /// Prepares `sql` on connection `live` under a name of its own, closing the retired
    /// statements first in the same round trip. A statement that would change the connection
    /// for later callers (or end a transaction behind Brisk's back) is refused first.
    async fn prepare(&self, live: &Live, sql: &str) -> Result<Prepared, DbError> {
        let place = match live.mode {
            Mode::Shared => Place::Shared,
            Mode::Exclusive => Place::Transaction,
        };
        if live.checked {
            statement::check(sql, Dialect::Postgres, place)?;
        }
        let name: Arc<str> = format!("b{}", live.named.fetch_add(1, Ordering::Relaxed)).into();
        let mut out = BytesMut::new();
        let retired = std::mem::take(&mut *live.retired.lock().unwrap_or_else(|p| p.into_inner()));
        for old in &retired {
            // Closing a name twice, or one the server no longer has, is no error.
            frontend::close(b'S', old, &mut out).map_err(encode_error)?;
        }
        frontend::parse(&name, sql, std::iter::empty(), &mut out).map_err(encode_error)?;
        frontend::describe(b'S', &name, &mut out).map_err(encode_error)?;
        frontend::sync(&mut out);
        // A caller that gives up once the Parse is sent would leave the statement on the
        // server under a name nobody knows: it is closed with the next preparation instead.
        let mut unknown = RetireOnDrop(live, Some(name.clone()));
        let answer = live
            .connection
            .request_within(out, self.limit_on(live))
            .await?;
        let (mut params, mut columns, mut types) = (Vec::new(), Vec::new(), Vec::new());
        for message in answer.messages {
            match message {
                Message::ErrorResponse(body) => return Err(db_error(&body, self.timeout())),
                Message::ParameterDescription(body) => {
                    params = body
                        .parameters()
                        .map(|oid| Ok(type_of(oid)))
                        .collect()
                        .map_err(decode_error)?;
                }
                Message::RowDescription(body) => {
                    let mut fields = body.fields();
                    while let Some(field) = fields.next().map_err(decode_error)? {
                        columns.push(field.name().to_string());
                        types.push(type_of(field.type_oid()));
                    }
                }
                _ => {}
            }
        }
        unknown.1 = None;
        Ok(Prepared {
            name,
            params: params.into(),
            columns: columns.into(),
            types: types.into(),
        })
    }

    /// The query timeout.
    pub(super) fn timeout(&self) -> Duration {
        self.inner.options.query_timeout
    }

    /// The query timeout on `live`: none on a session's connection (migrations), which
    /// waits for as long as it takes.
    fn limit_on(&self, live: &Live) -> Option<Duration> {
        live.checked.then(|| self.timeout())
    }

    /// Awaits `request`. The server ends a statement past the query timeout itself (the
    /// session's `statement_timeout`, error 57014, read as [`DbError::Timeout`]); this waits a
    /// grace longer (up to 1 s more) for an answer that does not come at all, such as one
    /// queued behind a statement the server is still ending.
    pub(super) async fn timed<T>(
        &self,
        request: impl std::future::Future<Output = Result<T, DbError>>,
    ) -> Result<T, DbError> {
        let timeout = self.timeout();
        let grace = postgres_wire::grace(timeout);
        match tokio::time::timeout(timeout.saturating_add(grace), request).await {
            Ok(result) => result,
            Err(_) => Err(DbError::timed_out(timeout)),
        }
    }

    /// Runs `sql` once per parameter list as one request ending in one `Sync`, on the shared
    /// connections; each query's rows and count, and the statement's columns.
    async fn run(
        &self,
        sql: &str,
        lists: &[Vec<Value>],
    ) -> Result<(Vec<Outcome>, Prepared), DbError> {
        let mut again = false;
        loop {
            let turn = self.pick().await?;
            match self.run_on(&turn.live, sql, lists).await {
                Ok((answer, prepared, _)) => return Ok((answer, prepared)),
                Err(RunError::Reshaped(what, prepared)) => {
                    // The statement is gone (closed as the cache made room while this call
                    // held it, or DISCARD, DEALLOCATE) or its result changed shape (ALTER
                    // TABLE under `SELECT *`). Nothing ran (the request's one implicit
                    // transaction failed), so prepare it again and run it once more.
                    turn.live.forget(sql, &prepared.name);
                    if again {
                        return Err(what);
                    }
                    again = true;
                }
                Err(RunError::Failed(e)) => return Err(e),
            }
        }
    }

    /// Runs `sql` once per parameter list on connection `live`, as one request ending in one
    /// `Sync`: each query's rows and count, the statement's columns, and the transaction
    /// status after it.
    pub(super) async fn run_on(
        &self,
        live: &Live,
        sql: &str,
        lists: &[Vec<Value>],
    ) -> Result<(Vec<Outcome>, Prepared, u8), RunError> {
        let prepared = self.prepared(live, sql).await?;
        // Room for the Bind and Execute of each list, so the buffer is not grown bit by bit.
        let per_list = 64 + 16 * prepared.params.len();
        let mut out = BytesMut::with_capacity(per_list * lists.len() + 8);
        for params in lists {
            bind(&prepared, params, &mut out)?;
        }
        frontend::sync(&mut out);
        let answer = live
            .connection
            .request_within(out, self.limit_on(live))
            .await?;
        let status = answer.status;
        match outcomes(answer, self.timeout()) {
            Ok(outcomes) => Ok((outcomes, prepared, status)),
            Err(e) if is_reshaped(&e) => Err(RunError::Reshaped(e, prepared)),
            Err(e) => Err(RunError::Failed(e)),
        }
    }

    /// Every row `sql` returns; parameters are `$1`, `$2`…
    pub async fn query(&self, sql: &str, params: Vec<Value>) -> Result<Vec<Row>, DbError> {
        let (outcomes, prepared) = self.run(sql, &[params]).await?;
        let rows = outcomes.first().map(|o| &o.rows[..]).unwrap_or_default();
        rows.iter().map(|r| convert_row(r, &prepared)).collect()
    }

    /// Every row `sql` returns, each read by `f` where it lies in the server's answer (see
    /// [`Db::query_map`](super::Db::query_map)).
    pub async fn query_map<T>(
        &self,
        sql: &str,
        params: Vec<Value>,
        f: impl FnMut(&RowView<'_>) -> Result<T, DbError>,
    ) -> Result<Vec<T>, DbError> {
        let (outcomes, prepared) = self.run(sql, &[params]).await?;
        let rows = outcomes.first().map(|o| &o.rows[..]).unwrap_or_default();
        map_rows(rows, &prepared, f)
    }

    /// The first row `sql` returns, if any.
    pub async fn query_one(&self, sql: &str, params: Vec<Value>) -> Result<Option<Row>, DbError> {
        let (outcomes, prepared) = self.run(sql, &[params]).await?;
        let first = outcomes.first().and_then(|o| o.rows.first());
        first.map(|r| convert_row(r, &prepared)).transpose()
    }

    /// Runs `sql` once for each parameter list, all in one round trip ending in one `Sync`
    /// (so in one implicit transaction: a failing query fails the batch); each run's rows,
    /// in order.
    ///
    /// ```no_run
    /// # async fn f(db: brisk::db::Postgres) -> Result<(), brisk::db::DbError> {
    /// let ids = [3, 14, 159].map(|id| vec![id.into()]).to_vec();
    /// let worlds = db.query_each("SELECT id, randomnumber FROM world WHERE id = $1", ids).await?;
    /// assert_eq!(worlds.len(), 3);
    /// # Ok(()) }
    /// ```
    pub async fn query_each(
        &self,
        sql: &str,
        lists: Vec<Vec<Value>>,
    ) -> Result<Vec<Vec<Row>>, DbError> {
        if lists.is_empty() {
            return Ok(Vec::new());
        }
        let (outcomes, prepared) = self.run(sql, &lists).await?;
        outcomes
            .iter()
            .map(|o| o.rows.iter().map(|r| convert_row(r, &prepared)).collect())
            .collect()
    }

    /// Runs `sql` once for each parameter list, each as if it had been sent alone: its own
    /// `Sync`, so its own implicit transaction (a run that fails, fails alone, and one that
    /// succeeds is committed whatever the others do), yet all written in one write and
    /// answered in one round trip. Each run's rows or error, in order; the call itself fails
    /// only when nothing could run (no connection, a parameter list of the wrong length).
    ///
    /// ```no_run
    /// # async fn f(db: brisk::db::Postgres) -> Result<(), brisk::db::DbError> {
    /// let ids = [3, 14, 0].map(|id| vec![id.into()]).to_vec();
    /// let runs = db.query_pipelined("SELECT 100 / $1::int", ids).await?;
    /// assert!(runs[0].is_ok() && runs[1].is_ok());
    /// assert_eq!(runs[2].as_ref().unwrap_err().code(), Some("22012")); // division by zero
    /// # Ok(()) }
    /// ```
    pub async fn query_pipelined(
        &self,
        sql: &str,
        lists: Vec<Vec<Value>>,
    ) -> Result<Vec<Result<Vec<Row>, DbError>>, DbError> {
        self.pipelined(sql, lists, &mut convert_row).await
    }

    /// [`query_pipelined`](Self::query_pipelined) with each row read by `f` where it lies in
    /// the server's answer (see [`Db::query_map`](super::Db::query_map)): no [`Row`] is built.
    /// A run whose rows `f` refuses fails with `f`'s error (the server still ran it).
    ///
    /// ```no_run
    /// # async fn f(db: brisk::db::Postgres) -> Result<(), brisk::db::DbError> {
    /// let ids = [3, 14].map(|id| vec![id.into()]).to_vec();
    /// let read = |row: &brisk::db::RowView<'_>| row.get::<i32>(1);
    /// let sql = "SELECT id, randomnumber FROM world WHERE id = $1";
    /// let runs = db.query_pipelined_map(sql, ids, read).await?;
    /// assert_eq!(runs.len(), 2);
    /// # Ok(()) }
    /// ```
    pub async fn query_pipelined_map<T>(
        &self,
        sql: &str,
        lists: Vec<Vec<Value>>,
        f: impl FnMut(&RowView<'_>) -> Result<T, DbError>,
    ) -> Result<Vec<Result<Vec<T>, DbError>>, DbError> {
        self.pipelined(sql, lists, &mut in_place(f)).await
    }

    /// [`query_pipelined`](Self::query_pipelined), each row read by `read`.
    async fn pipelined<T>(
        &self,
        sql: &str,
        lists: Vec<Vec<Value>>,
        read: &mut impl FnMut(&DataRowBody, &Prepared) -> Result<T, DbError>,
    ) -> Result<Vec<Result<Vec<T>, DbError>>, DbError> {
        if lists.is_empty() {
            return Ok(Vec::new());
        }
        let turn = self.pick().await?;
        let (runs, again, name) = self
            .run_apart_on(&turn.live, sql, lists.iter(), read)
            .await?;
        if again.is_empty() {
            return Ok(runs);
        }
        turn.live.forget(sql, &name);
        drop(turn);
        // Boxed: the retry's state is not part of every call's future.
        Box::pin(self.run_reshaped_again(sql, &lists, runs, again, read)).await
    }

    /// Runs again the runs of `runs` the server said found the statement gone or reshaped
    /// (`again`: nothing of them ran), with the statement prepared again: each run's rows are
    /// read with the statement it ran under.
    async fn run_reshaped_again<T>(
        &self,
        sql: &str,
        lists: &[Vec<Value>],
        mut runs: Vec<Result<Vec<T>, DbError>>,
        again: Vec<usize>,
        read: &mut impl FnMut(&DataRowBody, &Prepared) -> Result<T, DbError>,
    ) -> Result<Vec<Result<Vec<T>, DbError>>, DbError> {
        let turn = self.pick().await?;
        let retried = again.iter().map(|&i| &lists[i]);
        let (rows, _, _) = self.run_apart_on(&turn.live, sql, retried, read).await?;
        for (i, run) in again.into_iter().zip(rows) {
            runs[i] = run;
        }
        Ok(runs)
    }

    /// Runs `sql` once per parameter list on `live`, each list ending in a `Sync` of its own,
    /// all in one request: each run's rows (each read by `read`) or error, the runs the
    /// server said found the statement gone or reshaped (told apart from errors of `read`,
    /// which may say anything), and the statement's name there.
    async fn run_apart_on<'a, T>(
        &self,
        live: &Live,
        sql: &str,
        lists: impl ExactSizeIterator<Item = &'a Vec<Value>>,
        read: &mut impl FnMut(&DataRowBody, &Prepared) -> Result<T, DbError>,
    ) -> Result<RunsApart<T>, DbError> {
        let prepared = self.prepared(live, sql).await?;
        let syncs = lists.len();
        // Room for the Bind, Execute and Sync of each list.
        let per_list = 69 + 16 * prepared.params.len();
        let mut out = BytesMut::with_capacity(per_list * syncs);
        for params in lists {
            bind(&prepared, params, &mut out)?;
            frontend::sync(&mut out);
        }
        let answer = live
            .connection
            .request_runs(out, syncs, self.limit_on(live))
            .await?;
        let (runs, again) = rows_of_runs(&answer, &prepared, self.timeout(), read);
        Ok((runs, again, prepared.name))
    }

    /// Runs a statement; returns how many rows it changed.
    pub async fn execute(&self, sql: &str, params: Vec<Value>) -> Result<u64, DbError> {
        let (outcomes, _) = self.run(sql, &[params]).await?;
        Ok(outcomes.first().map_or(0, |o| o.changed))
    }

    /// Runs several statements separated by `;` (no parameters), such as a schema. They
    /// run in one implicit transaction; one that would open a transaction or change the
    /// session is refused (run it in a transaction).
    pub async fn execute_batch(&self, sql: &str) -> Result<(), DbError> {
        statement::check(sql, Dialect::Postgres, Place::Shared)?;
        let turn = self.pick().await?;
        self.simple(&turn.live, sql).await.map(drop)
    }

    /// Runs `sql` as a simple query (several statements, no parameters) on `live`: the
    /// outcomes, and the transaction status after it.
    pub(super) async fn simple(
        &self,
        live: &Live,
        sql: &str,
    ) -> Result<(Vec<Outcome>, u8), DbError> {
        let mut out = BytesMut::new();
        frontend::query(sql, &mut out).map_err(encode_error)?;
        let answer = live
            .connection
            .request_within(out, self.limit_on(live))
            .await?;
        let status = answer.status;
        outcomes(answer, self.timeout()).map(|o| (o, status))
    }

    /// A connection of its own for a transaction: an idle one, or a new one. While every
    /// shared connection is known to be down, fails at once as the shared path does.
    pub(super) async fn exclusive(&self) -> Result<Live, DbError> {
        loop {
            let idle = self
                .inner
                .idle
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .pop();
            match idle {
                Some(live) if live.reusable() => return Ok(live),
                Some(_) => continue,
                None => break,
            }
        }
        self.open_exclusive(self.inner.options.query_timeout).await
    }

    /// A new connection of its own whose statements are not checked, for Brisk's own
    /// session (the migrations); it is never given back to the pool.
    /// Its statements may run as long as they take (no `statement_timeout`, no timeout
    /// here): a migration may build an index, or wait for another instance's lock.
    pub(super) async fn unchecked(&self) -> Result<Live, DbError> {
        let mut live = self.open_exclusive(Duration::ZERO).await?;
        live.checked = false;
        Ok(live)
    }

    /// A new connection for one user at a time, whose session ends statements past
    /// `statement_timeout` (zero: none).
    async fn open_exclusive(&self, statement_timeout: Duration) -> Result<Live, DbError> {
        if let Some(slots) = self.inner.slots.get() {
            let tried = self.inner.attempted.load(Ordering::Relaxed) >= slots.len();
            let none_up = slots
                .iter()
                .all(|s| s.live.lock().map_or(true, |l| l.is_none()));
            if tried && none_up {
                return Err(DbError::Unavailable(last_error(slots)));
            }
        }
        let options = &self.inner.options;
        let (connection, driver) = postgres_wire::connect(
            &self.inner.config,
            &self.inner.tls,
            options.connect_timeout,
            statement_timeout,
            options.max_result_bytes,
        )
        .await
        .map_err(|e| DbError::Unavailable(e.to_string()))?;
        tokio::spawn(async move {
            let why = driver.run(Mode::Exclusive).await;
            tracing::debug!("a PostgreSQL transaction connection closed: {why}");
        });
        Ok(Live::new(
            connection,
            Mode::Exclusive,
            options.statement_cache,
        ))
    }

    /// Gives a transaction's connection back for the next one, if it can serve it.
    pub(super) fn give_back(&self, live: Live) {
        if live.reusable() {
            let mut idle = self.inner.idle.lock().unwrap_or_else(|p| p.into_inner());
            idle.push(live);
        }
    }
}

/// Retires a statement's name when dropped while still holding it: see [`Postgres::prepare`].
struct RetireOnDrop<'a>(&'a Live, Option<Arc<str>>);

impl Drop for RetireOnDrop<'_> {
    fn drop(&mut self) {
        if let Some(name) = self.1.take() {
            self.0.retire(name);
        }
    }
}

/// Why the shared connections are down: the first one's last error.
fn last_error(slots: &[Arc<Slot>]) -> String {
    slots
        .iter()
        .find_map(|s| {
            let e = s.last_error.lock().ok()?.clone();
            (!e.is_empty()).then_some(e)
        })
        .unwrap_or_else(|| "not connected yet".into())
}

/// Why [`Postgres::run_on`] failed: a statement to prepare again, or for good.
pub(super) enum RunError {
    /// The statement is gone from the connection or its result changed shape.
    Reshaped(DbError, Prepared),
    /// Anything else.
    Failed(DbError),
}

impl From<DbError> for RunError {
    fn from(e: DbError) -> Self {
        RunError::Failed(e)
    }
}

impl From<RunError> for DbError {
    fn from(e: RunError) -> Self {
        match e {
            RunError::Reshaped(e, _) | RunError::Failed(e) => e,
        }
    }
}

/// A taken place in a shared connection's pipeline, given back on drop.
struct Turn<'a> {
    slot: Arc<Slot>,
    live: Arc<Live>,
    _permit: SemaphorePermit<'a>,
}

impl Drop for Turn<'_> {
    fn drop(&mut self) {
        self.slot.in_flight.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Keeps one connection up for as long as the worker runs: connect, serve until the
/// connection ends, pause (doubling up to `max_backoff`), connect again.
async fn keep_connected(inner: Arc<Inner>, slot: Arc<Slot>) {
    let min_backoff = Duration::from_millis(50);
    let mut backoff = min_backoff;
    let set_live = |live: Option<Arc<Live>>| {
        *slot.live.lock().unwrap_or_else(|p| p.into_inner()) = live;
    };
    let set_error = |why: String| {
        *slot.last_error.lock().unwrap_or_else(|p| p.into_inner()) = why;
    };
    let statement_cache = inner.options.statement_cache;
    loop {
        let options = &inner.options;
        let attempt = postgres_wire::connect(
            &inner.config,
            &inner.tls,
            options.connect_timeout,
            options.query_timeout,
            options.max_result_bytes,
        )
        .await;
        let first = !slot.first_attempt_done.swap(true, Ordering::Relaxed);
        if first {
            inner.attempted.fetch_add(1, Ordering::Relaxed);
        }
        match attempt {
            Ok((connection, driver)) => {
                backoff = min_backoff;
                set_live(Some(Arc::new(Live::new(
                    connection,
                    Mode::Shared,
                    statement_cache,
                ))));
                inner.changed.notify_waiters();
                let why = driver.run(Mode::Shared).await;
                set_live(None);
                tracing::warn!("PostgreSQL connection lost ({why}); reconnecting");
                set_error(why);
            }
            Err(e) => {
                if first || backoff >= inner.options.max_backoff {
                    tracing::warn!("cannot connect to PostgreSQL: {e}");
                }
                set_error(e.to_string());
                inner.changed.notify_waiters();
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(inner.options.max_backoff);
            }
        }
    }
}
