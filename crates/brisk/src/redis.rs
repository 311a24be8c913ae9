//! [`Redis`]: a Redis server as one worker sees it, on the `redis` crate's connection
//! manager: one multiplexed connection per worker (every request's commands share it,
//! pipelined), opened on first use (never in the master), reconnected when it breaks.
//!
//! While Redis is down, calls fail at once with [`RedisError::Unavailable`] (a new connection
//! is attempted at most every `retry_interval`), and a command past `command_timeout` fails
//! with [`RedisError::Timeout`]: a handler answers 503 or 504, and nothing hangs.
//!
//! A connection that died unused (a server restart) is found before a command is sent on it:
//! after `probe_after_idle` without an answer, or after a failure, a `PING` goes first, and
//! the manager reconnects if it fails. A command that meets a refused reconnection (it never
//! left) is sent once more. Nothing else is retried: a command sent on a connection that then
//! broke may have run.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::redact::redacted;
use ::redis::aio::ConnectionManager;
use tokio::time::Instant;

/// Commands for [`Redis::run`], built with [`cmd`], and what answers convert into.
pub use ::redis::{cmd, pipe, Cmd, FromRedisValue, Pipeline};

/// How a worker uses a Redis server.
#[derive(Debug, Clone)]
pub struct RedisOptions {
    /// How long one command may take.
    pub command_timeout: Duration,
    /// How long a connection attempt may take.
    pub connect_timeout: Duration,
    /// After a failed connection attempt, calls fail at once for this long before the next.
    pub retry_interval: Duration,
    /// For `rediss://` (TLS): a PEM file of the certificate authorities to trust instead of
    /// the system's (an internal CA). `None`: the system's.
    pub tls_ca: Option<std::path::PathBuf>,
    /// A connection that has not answered for this long (or whose last command failed) is
    /// checked with a `PING` before the next command, so that a command is not lost to a
    /// connection that died unused (a server restart is seen only when the connection is
    /// next used). One round trip after each idle spell; zero: before every command.
    pub probe_after_idle: Duration,
}

impl Default for RedisOptions {
    fn default() -> Self {
        RedisOptions {
            command_timeout: Duration::from_secs(2),
            connect_timeout: Duration::from_secs(2),
            retry_interval: Duration::from_millis(500),
            tls_ca: None,
            probe_after_idle: Duration::from_secs(1),
        }
    }
}

/// Why a Redis call failed.
#[derive(Debug, Clone, thiserror::Error)]
pub enum RedisError {
    /// Redis is down or unreachable. Answer 503.
    #[error("Redis is unavailable: {0}")]
    Unavailable(String),
    /// The command took longer than the command timeout. Answer 504.
    #[error("the Redis command took longer than {} ms", .0.as_millis())]
    Timeout(Duration),
    /// Redis answered with an error (wrong type, bad command…). Answer 500.
    #[error("Redis refused the command: {0}")]
    Command(String),
    /// The URL cannot be used.
    #[error("bad Redis URL: {0}")]
    Config(String),
}

impl RedisError {
    /// What a client of the server may be told: general words, without the server's address
    /// or its message (log the error itself).
    ///
    /// ```
    /// use brisk::redis::RedisError;
    /// let e = RedisError::Unavailable("connect to 10.0.0.9:6379: refused".into());
    /// assert_eq!(e.client_message(), "the cache is unavailable");
    /// ```
    pub fn client_message(&self) -> &'static str {
        match self {
            RedisError::Unavailable(_) => "the cache is unavailable",
            RedisError::Timeout(_) => "the cache did not answer in time",
            RedisError::Command(_) | RedisError::Config(_) => "the cache could not do it",
        }
    }

    /// The HTTP status that answers a request that failed with this error.
    pub fn http_status(&self) -> u16 {
        match self {
            RedisError::Unavailable(_) => 503,
            RedisError::Timeout(_) => 504,
            RedisError::Command(_) | RedisError::Config(_) => 500,
        }
    }
}

/// The redis crate's client of `url`: for `rediss://` with `tls_ca`, trusting the CAs of
/// that PEM file.
pub(crate) fn client(
    url: &str,
    tls_ca: Option<&std::path::Path>,
) -> Result<::redis::Client, RedisError> {
    let bad = |e: &dyn std::fmt::Display| RedisError::Config(format!("{}: {e}", redacted(url)));
    match tls_certificates(url, tls_ca)? {
        Some(certs) => ::redis::Client::build_with_tls(url, certs).map_err(|e| bad(&e)),
        None => ::redis::Client::open(url).map_err(|e| bad(&e)),
    }
}

/// The certificates to trust for `url`, when it is `rediss://` and `tls_ca` is given; a CA
/// file given for a plain `redis://` URL is a mistake said as such.
pub(crate) fn tls_certificates(
    url: &str,
    tls_ca: Option<&std::path::Path>,
) -> Result<Option<::redis::TlsCertificates>, RedisError> {
    if url.starts_with("rediss://") {
        // rustls needs one crypto provider for the process: Brisk's (ring).
        let _ = rustls::crypto::ring::default_provider().install_default();
    }
    let Some(path) = tls_ca else {
        return Ok(None);
    };
    if !url.starts_with("rediss://") {
        return Err(RedisError::Config(format!(
            "a TLS CA ({}) is given for {}, which is not a rediss:// URL",
            path.display(),
            redacted(url)
        )));
    }
    let pem = std::fs::read(path).map_err(|e| {
        RedisError::Config(format!("cannot read the TLS CA {}: {e}", path.display()))
    })?;
    Ok(Some(::redis::TlsCertificates {
        client_tls: None,
        root_cert: Some(pem),
    }))
}

/// A Redis server; cheap to clone, `Send + Sync`.
///
/// ```no_run
/// # async fn f() -> Result<(), brisk::redis::RedisError> {
/// use brisk::redis::{Redis, RedisOptions};
/// let redis = Redis::new("redis://127.0.0.1:6379", RedisOptions::default())?;
/// redis.set_ex("greeting", b"hello".to_vec(), 60).await?;
/// let v: Option<Vec<u8>> = redis.get("greeting").await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Redis {
    inner: Arc<Inner>,
}

struct Inner {
    client: ::redis::Client,
    options: RedisOptions,
    state: Mutex<State>,
    connecting: tokio::sync::Mutex<()>,
    /// When the connection last answered, in ns after `born`; [`NOT_ANSWERED`] after a
    /// failure or before the first answer.
    answered_ns: AtomicU64,
    born: Instant,
}

/// `answered_ns` when the connection has not answered since it last failed, if ever.
const NOT_ANSWERED: u64 = u64::MAX;

#[derive(Default)]
struct State {
    manager: Option<ConnectionManager>,
    failed_at: Option<(Instant, String)>,
}

impl Redis {
    /// A server at `url` (`redis://[:password@]host:port[/db]`, or `rediss://…` for TLS,
    /// with [`RedisOptions::tls_ca`] for a CA of your own). Connects nothing yet.
    pub fn new(url: &str, options: RedisOptions) -> Result<Self, RedisError> {
        let client = client(url, options.tls_ca.as_deref())?;
        Ok(Redis {
            inner: Arc::new(Inner {
                client,
                options,
                state: Mutex::default(),
                connecting: tokio::sync::Mutex::new(()),
                answered_ns: AtomicU64::new(NOT_ANSWERED),
                born: Instant::now(),
            }),
        })
    }

    /// The worker's connection, opened on first use.
    pub async fn connection(&self) -> Result<ConnectionManager, RedisError> {
        if let Some(m) = self.ready()? {
            return Ok(m);
        }
        let _one_at_a_time = self.inner.connecting.lock().await;
        if let Some(m) = self.ready()? {
            return Ok(m);
        }
        let options = &self.inner.options;
        let config = ::redis::aio::ConnectionManagerConfig::new()
            .set_connection_timeout(Some(options.connect_timeout))
            .set_response_timeout(Some(options.command_timeout))
            .set_number_of_retries(1);
        let attempt = tokio::time::timeout(
            options.connect_timeout,
            ConnectionManager::new_with_config(self.inner.client.clone(), config),
        )
        .await;
        let mut state = self.inner.state.lock().unwrap_or_else(|p| p.into_inner());
        match attempt {
            Ok(Ok(m)) => {
                state.manager = Some(m.clone());
                state.failed_at = None;
                Ok(m)
            }
            Ok(Err(e)) => {
                let why = e.to_string();
                tracing::warn!("cannot connect to Redis: {why}");
                state.failed_at = Some((Instant::now(), why.clone()));
                Err(RedisError::Unavailable(why))
            }
            Err(_) => {
                let why = format!(
                    "no connection within {} ms",
                    options.connect_timeout.as_millis()
                );
                state.failed_at = Some((Instant::now(), why.clone()));
                Err(RedisError::Unavailable(why))
            }
        }
    }

    /// Drops the connection, so that the next call opens a new one: for a caller that knows
    /// the server restarted (the cluster bus's subscription saw it) before a command on the
    /// old connection finds it broken.
    pub(crate) fn reconnect_on_next_call(&self) {
        let mut state = self.inner.state.lock().unwrap_or_else(|p| p.into_inner());
        state.manager = None;
        state.failed_at = None;
    }

    /// The open connection, or the recent failure that makes calls fail fast.
    fn ready(&self) -> Result<Option<ConnectionManager>, RedisError> {
        let state = self.inner.state.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(m) = &state.manager {
            return Ok(Some(m.clone()));
        }
        match &state.failed_at {
            Some((at, why)) if at.elapsed() < self.inner.options.retry_interval => {
                Err(RedisError::Unavailable(why.clone()))
            }
            _ => Ok(None),
        }
    }

    /// Runs one command (built with `redis::cmd`) within the command timeout.
    pub async fn run<T: ::redis::FromRedisValue>(
        &self,
        cmd: &::redis::Cmd,
    ) -> Result<T, RedisError> {
        let run = self.timed(Query::One(cmd));
        crate::otel::call(run, crate::otel::Op::Redis(cmd)).await
    }

    /// Runs several commands in one round trip (built with `redis::pipe()`), within the
    /// command timeout.
    pub async fn run_pipeline<T: ::redis::FromRedisValue>(
        &self,
        pipe: &::redis::Pipeline,
    ) -> Result<T, RedisError> {
        let run = self.timed(Query::Pipeline(pipe));
        crate::otel::call(run, crate::otel::Op::RedisPipeline).await
    }

    /// Runs `query` on the worker's connection within the command timeout.
    ///
    /// The connection manager learns that its connection died only when a command fails on
    /// it, and then keeps the reconnection it tried at once (refused, while the server was
    /// away) until the next command meets it: so the first command after a server restart
    /// failed, however long the server had been back. Hence the `PING` after an idle spell
    /// or a failure ([`RedisOptions::probe_after_idle`]): its failure makes the manager
    /// reconnect before the command is sent. And a refused connection means the command
    /// never left: it is sent once more, on the manager's new connection. Both within the
    /// one timeout.
    async fn timed<T: ::redis::FromRedisValue>(&self, query: Query<'_>) -> Result<T, RedisError> {
        let mut conn = self.connection().await?;
        let timeout = self.inner.options.command_timeout;
        let sent_ns = self.now_ns();
        let deadline = self.inner.born + Duration::from_nanos(sent_ns) + timeout;
        if self.may_be_dead(sent_ns) {
            let ping = ::redis::cmd("PING");
            let probed = ping.query_async::<::redis::Value>(&mut conn);
            // Its failure is the manager's cue to reconnect; the command tells the caller.
            let _ = tokio::time::timeout_at(deadline, probed).await;
        }
        let answer = match tokio::time::timeout_at(deadline, query.send(&mut conn)).await {
            Ok(Err(e)) if e.is_connection_refusal() => {
                tokio::time::timeout_at(deadline, query.send(&mut conn)).await
            }
            first => first,
        };
        let result = match answer {
            Ok(r) => r.map_err(|e| redis_error(e, timeout)),
            Err(_) => Err(RedisError::Timeout(timeout)),
        };
        // An answer counts from when its command went: one clock read per command.
        let answered = matches!(result, Ok(_) | Err(RedisError::Command(_)));
        let at = if answered { sent_ns } else { NOT_ANSWERED };
        self.inner.answered_ns.store(at, Relaxed);
        result
    }

    /// Whether the connection may have died unused: no answer for
    /// [`RedisOptions::probe_after_idle`], or a failure since the last.
    /// (`now_ns`: now, on the clock of [`Redis::now_ns`].)
    fn may_be_dead(&self, now_ns: u64) -> bool {
        let at = self.inner.answered_ns.load(Relaxed);
        let idle = self.inner.options.probe_after_idle.as_nanos() as u64;
        at == NOT_ANSWERED || now_ns.saturating_sub(at) >= idle
    }

    fn now_ns(&self) -> u64 {
        self.inner.born.elapsed().as_nanos() as u64
    }

    /// `GET key`.
    pub async fn get<T: ::redis::FromRedisValue>(&self, key: &str) -> Result<T, RedisError> {
        self.run(::redis::cmd("GET").arg(key)).await
    }

    /// `SET key value EX seconds`.
    pub async fn set_ex(&self, key: &str, value: Vec<u8>, seconds: u64) -> Result<(), RedisError> {
        self.run(
            ::redis::cmd("SET")
                .arg(key)
                .arg(value)
                .arg("EX")
                .arg(seconds),
        )
        .await
    }

    /// `MGET keys…`: one round trip for many keys.
    pub async fn mget<T: ::redis::FromRedisValue>(
        &self,
        keys: &[String],
    ) -> Result<Vec<T>, RedisError> {
        if keys.is_empty() {
            return Ok(Vec::new());
        }
        self.run(::redis::cmd("MGET").arg(keys)).await
    }

    /// `DEL key`.
    pub async fn del(&self, key: &str) -> Result<(), RedisError> {
        self.run(::redis::cmd("DEL").arg(key)).await
    }

    /// A connection of its own (a subscribed connection cannot run other commands),
    /// subscribed to `channel` within the connect timeout: its messages, until the connection
    /// drops and the stream ends.
    pub(crate) async fn subscribe(
        &self,
        channel: &str,
    ) -> Result<::redis::aio::PubSubStream, RedisError> {
        let timeout = self.inner.options.connect_timeout;
        let subscribed = async {
            let mut pubsub = self.inner.client.get_async_pubsub().await?;
            pubsub.subscribe(channel).await?;
            Ok(pubsub.into_on_message())
        };
        match tokio::time::timeout(timeout, subscribed).await {
            Ok(r) => r.map_err(|e| redis_error(e, timeout)),
            Err(_) => Err(RedisError::Unavailable(format!(
                "no subscription within {} ms",
                timeout.as_millis()
            ))),
        }
    }
}

/// What [`Redis::timed`] sends: one command or a pipeline.
#[derive(Clone, Copy)]
enum Query<'a> {
    One(&'a ::redis::Cmd),
    Pipeline(&'a ::redis::Pipeline),
}

impl Query<'_> {
    async fn send<T: ::redis::FromRedisValue>(
        self,
        conn: &mut ConnectionManager,
    ) -> ::redis::RedisResult<T> {
        match self {
            Query::One(cmd) => cmd.query_async(conn).await,
            Query::Pipeline(pipe) => pipe.query_async(conn).await,
        }
    }
}

/// The client's error as ours; `timeout` is the command timeout that a timed-out answer broke.
fn redis_error(e: ::redis::RedisError, timeout: Duration) -> RedisError {
    if e.is_timeout() {
        return RedisError::Timeout(timeout);
    }
    if e.is_io_error() || e.is_connection_dropped() || e.is_connection_refusal() {
        RedisError::Unavailable(e.to_string())
    } else {
        RedisError::Command(e.to_string())
    }
}
