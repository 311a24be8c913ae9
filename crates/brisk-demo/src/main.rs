//! brisk-demo: the showcase app. Text echo on `text://127.0.0.1:7000`, Frame echo on
//! `frame://127.0.0.1:7001`, HTTP on `http://127.0.0.1:8080` (`/`, `/json`, `/static/*`,
//! `/ws` echo, `/chat` broadcast room, `/echo`, `/stream`), WebSocket echo on
//! `websocket://127.0.0.1:9001`, and every control command. The WebSocket endpoints offer
//! permessage-deflate.
//!
//! ```text
//! brisk-demo start              # foreground
//! brisk-demo --workers 4 start -d
//! brisk-demo status
//! brisk-demo --config demo.toml start
//! ```

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use brisk::alerts::Alerts;
use brisk::http::access_log::{AccessLog, LogFormat};
use brisk::http::compression::Compression;
use brisk::http::HttpServer;
use brisk::template::{TemplateOptions, Templates};
use brisk::tls::TlsConfig;
use brisk::ws::{WsEndpoint, WsServer};
use brisk::{App, Server};

mod admin;
mod api;
mod blocking;
mod blocks;
mod chat;
mod heartbeat;
mod httpc;
mod jobs;
// Its 501 is for the stand-ins of `mail` and `orm`; every build checks the database URL.
#[cfg_attr(all(feature = "mail", feature = "orm"), allow(dead_code))]
mod left_out;
mod live;
#[cfg_attr(not(feature = "mail"), path = "left_out/mail.rs")]
mod mail;
#[cfg_attr(not(feature = "orm"), path = "left_out/orm.rs")]
mod orm;
mod pages;
mod routes;
mod session_key;
mod techempower;
mod try_out;
mod views;
use clap::Parser;
use serde::Deserialize;

/// jemalloc: its size classes keep tokio's 128-byte-aligned allocations compact (see the guide's Configuration chapter).
#[cfg(feature = "jemalloc")]
#[global_allocator]
static ALLOC: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// Return freed pages to the OS within a second, from jemalloc's background thread: an idle
/// worker allocates nothing, so without it memory freed after a burst (handshakes, HTTP
/// buffers of upgraded connections) would stay resident.
#[cfg(feature = "jemalloc")]
#[allow(non_upper_case_globals)]
#[export_name = "_rjem_malloc_conf"]
pub static malloc_conf: &[u8] = b"background_thread:true,dirty_decay_ms:1000,muzzy_decay_ms:0\0";

/// Command line: the demo's settings, then a control command.
#[derive(Debug, Parser)]
#[command(
    name = "brisk-demo",
    version,
    about = "Brisk showcase: Text and Frame echo servers"
)]
struct Args {
    /// Worker processes per server (default: number of CPUs).
    #[arg(help_heading = "Listeners", long, global = true)]
    workers: Option<usize>,
    /// Address of the Text echo server.
    #[arg(help_heading = "Listeners", long, global = true)]
    text: Option<String>,
    /// Address of the Frame echo server.
    #[arg(help_heading = "Listeners", long, global = true)]
    frame: Option<String>,
    /// Address of the HTTP server.
    #[arg(help_heading = "Listeners", long, global = true)]
    http: Option<String>,
    /// Address of the WebSocket echo server (the conformance target).
    #[arg(help_heading = "Listeners", long, global = true)]
    websocket: Option<String>,
    /// Directory served under /static/ (default: the demo's own static folder).
    #[arg(help_heading = "Listeners", long, global = true)]
    static_root: Option<PathBuf>,
    /// Cached static files from this size on are sent with sendfile (default: the library's,
    /// 32 KiB); for measuring the threshold.
    #[arg(help_heading = "Listeners", long, global = true)]
    static_sendfile_min_size: Option<u64>,
    /// PEM certificate chain: with --tls-key, also serve --https, --wss and --tls-text.
    #[arg(help_heading = "TLS", long, global = true)]
    tls_cert: Option<PathBuf>,
    /// PEM private key of --tls-cert.
    #[arg(help_heading = "TLS", long, global = true)]
    tls_key: Option<PathBuf>,
    /// The HTTPS listener (HTTP/1.1 and HTTP/2), when a certificate is given.
    #[arg(help_heading = "TLS", long, global = true)]
    https: Option<String>,
    /// The secure WebSocket echo listener, when a certificate is given.
    #[arg(help_heading = "TLS", long, global = true)]
    wss: Option<String>,
    /// A Text echo over TLS (Workerman's `ssl` transport), when a certificate is given.
    #[arg(help_heading = "TLS", long, global = true)]
    tls_text: Option<String>,
    /// Directory for the pid file, control socket and daemon log (default ./run).
    #[arg(long, global = true)]
    run_dir: Option<PathBuf>,
    /// Milliseconds an HTTP client has to send a request head before a 408 (default 10000).
    #[arg(help_heading = "Timeouts and recycling", long, global = true)]
    header_read_timeout_ms: Option<u64>,
    /// Milliseconds an HTTP client has to send a request body a handler waits for, plus a
    /// second per 4 KiB it sends meanwhile, before a 408 (default 30000).
    #[arg(help_heading = "Timeouts and recycling", long, global = true)]
    body_read_timeout_ms: Option<u64>,
    /// Milliseconds a TLS client has to finish its handshake (default: the header read timeout).
    #[arg(help_heading = "TLS", long, global = true)]
    tls_handshake_timeout_ms: Option<u64>,
    /// Bytes queued for one connection before messages to it are dropped (default 2 MiB).
    #[arg(help_heading = "Timeouts and recycling", long, global = true)]
    max_send_buffer: Option<usize>,
    /// Seconds a connection's queued bytes may make no progress (its peer stopped reading)
    /// before it is closed; 0: never (default 60).
    #[arg(help_heading = "Timeouts and recycling", long, global = true)]
    send_timeout: Option<u64>,
    /// Seconds a graceful stop or reload waits for in-flight work (default 30).
    #[arg(help_heading = "Timeouts and recycling", long, global = true)]
    graceful_timeout: Option<u64>,
    /// One listening socket per address, bound by the master and shared by its workers,
    /// instead of one SO_REUSEPORT socket per worker (`reuse_port(false)`).
    #[arg(help_heading = "Listeners", long, global = true)]
    shared_listener: bool,
    /// Replace an HTTP worker by a fresh one after it has served about this many requests
    /// (each worker draws up to a tenth more, so they do not recycle together).
    #[arg(help_heading = "Timeouts and recycling", long, global = true)]
    max_requests: Option<u64>,
    /// Replace an HTTP worker whose private memory (heap and stacks) passes this many MiB;
    /// the master looks once a second.
    #[arg(help_heading = "Timeouts and recycling", long, global = true)]
    max_memory: Option<u64>,
    /// The database of the TechEmpower routes: `sqlite:PATH` (default: `DATABASE_URL` from
    /// the environment if set, else `sqlite:RUN_DIR/brisk-demo.sqlite`, created and seeded on
    /// first start), `postgres://user:password@host:port/db` or `mysql://…` (tables created
    /// and seeded if missing). A password here shows in every process's command line
    /// (`ps`): give it in `DATABASE_URL` or the config file instead.
    #[arg(help_heading = "Databases", long, global = true)]
    database: Option<String>,
    /// A Redis server (`redis://host:port`; default: `REDIS_URL` from the environment if
    /// set): `/cached-queries` reads the World rows and `/blocks` its blocks from it instead
    /// of from each worker's memory. A password here shows in every process's command line
    /// (`ps`): give it in `REDIS_URL` or the config file instead.
    #[arg(help_heading = "Redis and the cluster", long, global = true)]
    redis: Option<String>,
    /// A PEM file of the certificate authorities to trust for `rediss://` (`--redis`,
    /// `--cluster-sharded`) instead of the system's.
    #[arg(help_heading = "Redis and the cluster", long, global = true)]
    redis_ca: Option<PathBuf>,
    /// Serve the try-out endpoints (`GET /connection/token`, `POST /chat/kick`, `/chat/say`,
    /// `/jobs`, `/mail`) to every client, not only to those on this machine: they mint tokens
    /// for anyone and act on any room. For a demo, never for production.
    #[arg(help_heading = "Web application", long, global = true)]
    open_try_out: bool,
    /// The largest message a `/chat` member may send, in bytes (default 65536); a larger one
    /// closes it with 1009.
    #[arg(help_heading = "Redis and the cluster", long, global = true)]
    chat_max_message: Option<usize>,
    /// Close `/chat` members that cannot keep up (their send buffer is full) with this close
    /// code (1008 or 1013), instead of dropping messages to them.
    #[arg(help_heading = "Redis and the cluster", long, global = true)]
    slow_consumer_close: Option<u16>,
    /// Share `/chat` rooms with other instances through this Redis Cluster's sharded pub/sub
    /// (`redis://host:port` of any node) instead of through `--redis`'s pub/sub.
    #[arg(help_heading = "Redis and the cluster", long, global = true)]
    cluster_sharded: Option<String>,
    /// The secret (16 bytes or more, the same on every instance) that authenticates the
    /// messages instances exchange through Redis (`--redis`, `--cluster-sharded`). Prefer
    /// `BRISK_CLUSTER_SECRET` in the environment: a command line shows in `ps`.
    #[arg(help_heading = "Redis and the cluster", long, global = true)]
    cluster_secret: Option<String>,
    /// Keep the last N messages of each `/chat` room in Redis (needs `--redis`), so that a
    /// client that reconnects recovers what it missed (`/recover E:O`).
    #[arg(help_heading = "Redis and the cluster", long, global = true)]
    history: Option<usize>,
    /// A file holding the server API's key (16 bytes or more): `/api/channels/*` answers
    /// callers that send it (`Authorization: apikey KEY`); without it the API is off.
    #[arg(help_heading = "Channels", long, global = true)]
    api_key_file: Option<PathBuf>,
    /// The key that signs and checks `/connection/websocket`'s tokens (default
    /// `RUN_DIR/channels.key`, created on first use; share it between instances).
    #[arg(help_heading = "Channels", long, global = true)]
    channels_secret_file: Option<PathBuf>,
    /// Check `/connection/websocket`'s tokens (RS256, ES256) against the keys an identity
    /// provider publishes at this JWKS URL instead (`/connection/token` then signs none).
    #[arg(help_heading = "Channels", long, global = true)]
    channels_jwks_url: Option<String>,
    /// How often the `--channels-jwks-url` document is fetched again, in seconds.
    #[arg(help_heading = "Channels", long, global = true, default_value_t = 300)]
    channels_jwks_refresh: u64,
    /// Clients speak JSON only: `?format=msgpack` is refused (close 4004), and each
    /// publication is broadcast once instead of once per format.
    #[arg(help_heading = "Channels", long, global = true)]
    channels_json_only: bool,
    /// An SMTP server for `POST /mail`: `smtp://host:port` (plain),
    /// `smtp://host:port?tls=required` (STARTTLS) or `smtps://host:port` (TLS), with
    /// `user:password@` before the host if it asks for a login.
    #[arg(help_heading = "Web application", long, global = true)]
    smtp: Option<String>,
    /// A PEM certificate to trust for `--smtp`'s TLS besides the usual roots.
    #[arg(help_heading = "Web application", long, global = true)]
    smtp_ca: Option<PathBuf>,
    /// Database connections per worker (PostgreSQL, MySQL; SQLite threads; default 1).
    #[arg(help_heading = "Databases", long, global = true, env = "DB_POOL")]
    db_pool_size: Option<usize>,
    /// Queries in flight on one PostgreSQL connection before more wait (default 256).
    #[arg(help_heading = "Databases", long, global = true)]
    db_max_pipeline: Option<usize>,
    /// Milliseconds a query waits for a connection before 503 (default 2000, MySQL 10000).
    #[arg(help_heading = "Databases", long, global = true)]
    db_acquire_timeout_ms: Option<u64>,
    /// Milliseconds a query may run before 504 (default 5000).
    #[arg(help_heading = "Databases", long, global = true)]
    db_query_timeout_ms: Option<u64>,
    /// Run `/db`, `/queries` and `/r5` with a synchronous client that blocks the worker while
    /// it waits for the database, as a synchronous PHP worker does (report R5's comparison).
    #[arg(help_heading = "Databases", long, global = true)]
    blocking_db: bool,
    /// Directory of the run-time (minijinja) templates (default: the demo's own
    /// templates/jinja).
    #[arg(help_heading = "Web application", long, global = true)]
    templates: Option<PathBuf>,
    /// The engine of `/tpl/*` when the request names none: sailfish (compiled into the
    /// program, the default) or minijinja (run time); `?engine=` picks one per request.
    #[arg(help_heading = "Web application", long, global = true)]
    template_engine: Option<String>,
    /// Compile run-time templates on every render instead of once per worker (report R4's
    /// "template cache off").
    #[arg(help_heading = "Web application", long, global = true)]
    no_template_cache: bool,
    /// Development: recompile a run-time template when its file changes, and show template
    /// errors in the 500 page.
    #[arg(help_heading = "Web application", long, global = true)]
    template_dev: bool,
    /// The upstream of `/httpc/*` (`http://host:port`; default: the demo's own HTTP
    /// listener, whose `/upstream?ms=N` answers after N ms).
    #[arg(help_heading = "Web application", long, global = true)]
    upstream: Option<String>,
    /// Milliseconds an upstream call of `/httpc/*` may take before 504 (default 2000).
    #[arg(help_heading = "Web application", long, global = true)]
    upstream_timeout_ms: Option<u64>,
    /// Send dynamic responses as they are, even to clients that accept gzip or brotli.
    #[arg(help_heading = "Web application", long, global = true)]
    no_compression: bool,
    /// Log every HTTP request to this file (off the request path; `reopen-logs` or SIGHUP to
    /// the master reopens it after logrotate).
    #[arg(help_heading = "Web application", long, global = true)]
    access_log: Option<PathBuf>,
    /// Layout of the access log: common, combined (the default) or json.
    #[arg(help_heading = "Web application", long, global = true)]
    access_log_format: Option<String>,
    /// Run HTTP handlers without the `request{conn}` tracing span (one per connection;
    /// the app's log lines then carry the worker id only).
    #[arg(help_heading = "Metrics, alerts and logs", long, global = true)]
    no_request_spans: bool,
    /// Do not count HTTP handler times in the latency histograms (for measuring their cost;
    /// `status` then shows no HTTP percentiles).
    #[arg(help_heading = "Metrics, alerts and logs", long, global = true)]
    no_latency_histograms: bool,
    /// With `--redis`, how often the heartbeat schedule writes its row (default 10000 ms).
    #[arg(help_heading = "Timeouts and recycling", long, global = true)]
    heartbeat_ms: Option<u64>,
    /// Serve Prometheus metrics from the master at this address (e.g.
    /// http://127.0.0.1:9100; `GET /metrics`).
    #[arg(help_heading = "Metrics, alerts and logs", long, global = true)]
    metrics: Option<String>,
    /// A file holding the bearer token the metrics listener asks for
    /// (`Authorization: Bearer …`); `BRISK_METRICS_TOKEN` in the environment wins.
    #[arg(help_heading = "Metrics, alerts and logs", long, global = true)]
    metrics_token_file: Option<PathBuf>,
    /// Send traces to this OpenTelemetry collector's OTLP/HTTP port (e.g.
    /// http://127.0.0.1:4318); without it, OTEL_EXPORTER_OTLP_ENDPOINT and the other
    /// OTEL_ variables if set, else no tracing.
    #[arg(help_heading = "Metrics, alerts and logs", long, global = true)]
    otlp: Option<String>,
    /// With `--otlp`, the share of requests traced, from 0 to 1 (default 1).
    #[arg(help_heading = "Metrics, alerts and logs", long, global = true)]
    trace_sample: Option<f64>,
    /// Alert when fewer messages than this are answered per second (every protocol).
    #[arg(help_heading = "Metrics, alerts and logs", long, global = true)]
    alert_throughput_below: Option<f64>,
    /// Alert when the HTTP p99 over the last 10 s is above this many milliseconds.
    #[arg(long, global = true)]
    alert_p99_ms: Option<f64>,
    /// Alert when the workers' resident memory, added up, is above this many MiB.
    #[arg(help_heading = "Metrics, alerts and logs", long, global = true)]
    alert_memory_mib: Option<u64>,
    /// Alert when handler errors per message over the last 10 s are above this fraction.
    #[arg(help_heading = "Metrics, alerts and logs", long, global = true)]
    alert_error_rate: Option<f64>,
    /// How many seconds a condition must hold before its alert fires, and be clear before it
    /// resolves (default 10).
    #[arg(help_heading = "Metrics, alerts and logs", long, global = true)]
    alert_hold_s: Option<u64>,
    /// POST each alert's firing and resolution as JSON to this URL.
    #[arg(help_heading = "Metrics, alerts and logs", long, global = true)]
    alert_webhook: Option<String>,
    /// A file holding the secret that signs session cookies (at least 32 bytes; default
    /// RUN_DIR/session.key, created with random bytes on first start). `BRISK_SESSION_SECRET`
    /// in the environment wins over both.
    #[arg(help_heading = "Web application", long, global = true)]
    session_secret_file: Option<PathBuf>,
    /// A file holding the argon2id hash (PHC string, `$argon2id$…`) of the password of the
    /// admin area's user `admin` (`BRISK_ADMIN_PASSWORD_HASH` in the environment wins).
    /// Without either, the admin sign-in is off.
    #[arg(help_heading = "Web application", long, global = true)]
    admin_password_hash_file: Option<PathBuf>,
    /// Failed admin sign-ins per account within 15 minutes before it is refused with 429
    /// (default 5; per worker).
    #[arg(help_heading = "Web application", long, global = true)]
    login_failures_per_account: Option<u32>,
    /// Failed admin sign-ins per client address within 15 minutes before it is refused
    /// with 429 (default 20; per worker).
    #[arg(help_heading = "Web application", long, global = true)]
    login_failures_per_address: Option<u32>,
    /// A TOML file with any of the settings above (flags win).
    #[arg(long, global = true)]
    config: Option<PathBuf>,
    #[command(subcommand)]
    command: DemoCommand,
}

/// What to do: a control command, or the demo's own.
#[derive(Debug, Clone, clap::Subcommand)]
enum DemoCommand {
    #[command(flatten)]
    Control(brisk::Command),
    /// Apply the database migrations not applied yet (`start` does it too), or list them.
    Migrate {
        /// List each migration and whether it is applied, pending or edited; apply nothing.
        #[arg(long)]
        list: bool,
    },
    /// Read a password from standard input (one line) and print its argon2id hash, for
    /// `--admin-password-hash-file`.
    HashPassword,
}

/// The settings a config file may hold.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct Config {
    workers: Option<usize>,
    text: Option<String>,
    frame: Option<String>,
    http: Option<String>,
    websocket: Option<String>,
    static_root: Option<PathBuf>,
    tls_cert: Option<PathBuf>,
    tls_key: Option<PathBuf>,
    https: Option<String>,
    wss: Option<String>,
    tls_text: Option<String>,
    run_dir: Option<PathBuf>,
    graceful_timeout: Option<u64>,
    shared_listener: Option<bool>,
    max_requests: Option<u64>,
    max_memory: Option<u64>,
    database: Option<String>,
    redis: Option<String>,
    redis_ca: Option<PathBuf>,
    smtp: Option<String>,
    smtp_ca: Option<PathBuf>,
    slow_consumer_close: Option<u16>,
    history: Option<usize>,
    cluster_sharded: Option<String>,
    db_pool_size: Option<usize>,
    db_max_pipeline: Option<usize>,
    db_acquire_timeout_ms: Option<u64>,
    db_query_timeout_ms: Option<u64>,
    templates: Option<PathBuf>,
    template_cache: Option<bool>,
    template_dev: Option<bool>,
    upstream: Option<String>,
    upstream_timeout_ms: Option<u64>,
    compression: Option<bool>,
    access_log: Option<PathBuf>,
    access_log_format: Option<String>,
    session_secret_file: Option<PathBuf>,
    template_engine: Option<String>,
    metrics: Option<String>,
    metrics_token_file: Option<PathBuf>,
    heartbeat_ms: Option<u64>,
    alert_throughput_below: Option<f64>,
    alert_p99_ms: Option<f64>,
    alert_memory_mib: Option<u64>,
    alert_error_rate: Option<f64>,
    alert_hold_s: Option<u64>,
    alert_webhook: Option<String>,
}

/// The alert thresholds from the flags and the config file (flags win); `None` if none is set.
fn alerts(args: &Args, file: &Config) -> Option<Alerts> {
    let mut a = Alerts::new();
    let mut any = false;
    if let Some(v) = args.alert_throughput_below.or(file.alert_throughput_below) {
        a = a.throughput_below(v);
        any = true;
    }
    if let Some(ms) = args.alert_p99_ms.or(file.alert_p99_ms) {
        a = a.p99_above(Duration::from_secs_f64(ms.max(0.0) / 1000.0));
        any = true;
    }
    if let Some(mib) = args.alert_memory_mib.or(file.alert_memory_mib) {
        a = a.memory_above(mib << 20);
        any = true;
    }
    if let Some(f) = args.alert_error_rate.or(file.alert_error_rate) {
        a = a.error_rate_above(f);
        any = true;
    }
    if let Some(s) = args.alert_hold_s.or(file.alert_hold_s) {
        a = a.hold(Duration::from_secs(s));
    }
    if let Some(url) = args.alert_webhook.clone().or(file.alert_webhook.clone()) {
        a = a.webhook(url);
    }
    any.then_some(a)
}

/// The database options from the flags and the config file (flags win).
fn db_options(args: &Args, file: &Config) -> brisk::db::DbOptions {
    let mut o = brisk::db::DbOptions::default();
    let pool_size = args.db_pool_size.or(file.db_pool_size);
    let max_pipeline = args.db_max_pipeline.or(file.db_max_pipeline);
    let acquire =
        (args.db_acquire_timeout_ms.or(file.db_acquire_timeout_ms)).map(Duration::from_millis);
    let query = (args.db_query_timeout_ms.or(file.db_query_timeout_ms)).map(Duration::from_millis);
    if let Some(n) = pool_size {
        o.sqlite.threads = n;
    }
    if let Some(t) = query {
        o.sqlite.query_timeout = t;
    }
    #[cfg(feature = "postgres")]
    {
        let p = &mut o.postgres;
        p.pool_size = pool_size.unwrap_or(p.pool_size);
        p.max_pipeline = max_pipeline.unwrap_or(p.max_pipeline);
        p.acquire_timeout = acquire.unwrap_or(p.acquire_timeout);
        p.query_timeout = query.unwrap_or(p.query_timeout);
    }
    #[cfg(feature = "mysql")]
    {
        let m = &mut o.mysql;
        m.pool_size = pool_size.unwrap_or(m.pool_size);
        m.acquire_timeout = acquire.unwrap_or(m.acquire_timeout);
        m.query_timeout = query.unwrap_or(m.query_timeout);
    }
    let _ = (max_pipeline, acquire); // unused by a build without PostgreSQL and MySQL
    o
}

fn load_config(path: &PathBuf) -> anyhow::Result<Config> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("cannot read config file {}", path.display()))?;
    toml::from_str(&text).with_context(|| format!("bad config file {}", path.display()))
}

/// The database of `--database`, the config file, `DATABASE_URL`, or an SQLite file in the
/// run directory, in that order.
fn database_url(args: &Args, file: Option<String>, run_dir: &std::path::Path) -> String {
    args.database
        .clone()
        .or(file)
        .or_else(|| brisk::secret_env("DATABASE_URL").filter(|u| !u.is_empty()))
        .unwrap_or_else(|| format!("sqlite:{}", run_dir.join("brisk-demo.sqlite").display()))
}

/// The admin's argon2id password hash: `BRISK_ADMIN_PASSWORD_HASH`, else the file of
/// `--admin-password-hash-file`; `None` (the admin sign-in is off) without either.
fn admin_password_hash(args: &Args) -> anyhow::Result<Option<String>> {
    if let Some(hash) =
        brisk::secret_env("BRISK_ADMIN_PASSWORD_HASH").filter(|h| !h.trim().is_empty())
    {
        return Ok(Some(hash.trim().to_string()));
    }
    let Some(path) = &args.admin_password_hash_file else {
        return Ok(None);
    };
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("cannot read the admin password hash {}", path.display()))?;
    Ok(Some(text.trim().to_string()))
}

/// The demo's migrations for the backend `kind`, embedded at build time.
fn migrations(kind: brisk::db::DbKind) -> brisk::db::Migrations {
    match kind {
        brisk::db::DbKind::Postgres => brisk::migrations!("migrations/postgres"),
        brisk::db::DbKind::Mysql => brisk::migrations!("migrations/mysql"),
        brisk::db::DbKind::Sqlite => brisk::migrations!("migrations/sqlite"),
    }
}

/// `brisk-demo migrate [--list]`: applies the pending migrations (or lists them) and exits.
fn migrate(args: &Args, list: bool) -> anyhow::Result<()> {
    let file = match &args.config {
        Some(p) => load_config(p)?,
        None => Config::default(),
    };
    let run_dir = args
        .run_dir
        .clone()
        .or(file.run_dir.clone())
        .unwrap_or("run".into());
    std::fs::create_dir_all(&run_dir)
        .with_context(|| format!("cannot create run directory {}", run_dir.display()))?;
    let url = database_url(args, file.database.clone(), &run_dir);
    left_out::database(&url)?;
    let db = brisk::db::Db::open(&url, db_options(args, &file))?;
    let migrations = migrations(db.kind());
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    if list {
        for (m, state) in runtime.block_on(migrations.status(&db))? {
            println!("{:<8} {}", format!("{state:?}").to_lowercase(), m.name);
        }
        return Ok(());
    }
    let applied = runtime.block_on(migrations.run(&db))?;
    if applied.is_empty() {
        println!(
            "nothing to apply: {} migrations applied already",
            migrations.list().len()
        );
    }
    for name in applied {
        println!("applied {name}");
    }
    Ok(())
}

fn build(args: &Args) -> anyhow::Result<App> {
    let file = match &args.config {
        Some(p) => load_config(p)?,
        None => Config::default(),
    };
    let db_options = db_options(args, &file);
    let alerts = alerts(args, &file);
    let text = args
        .text
        .clone()
        .or(file.text)
        .unwrap_or("text://127.0.0.1:7000".into());
    let http_addr = args
        .http
        .clone()
        .or(file.http)
        .unwrap_or("http://127.0.0.1:8080".into());
    let frame = args
        .frame
        .clone()
        .or(file.frame)
        .unwrap_or("frame://127.0.0.1:7001".into());
    let workers = args.workers.or(file.workers);
    let run_dir = args
        .run_dir
        .clone()
        .or(file.run_dir)
        .unwrap_or("run".into());
    let graceful = args
        .graceful_timeout
        .or(file.graceful_timeout)
        .unwrap_or(30);

    let mut text = Server::new(&text)?.on_message(|conn, line| async move { conn.send(line) });
    let mut frame = Server::new(&frame)?.on_message(|conn, msg| async move { conn.send(msg) });
    let mut limits = brisk::http::HttpLimits::default();
    if let Some(ms) = args.body_read_timeout_ms {
        limits.body_read_timeout = Duration::from_millis(ms);
    }
    if let Some(ms) = args.header_read_timeout_ms {
        limits.header_read_timeout = Duration::from_millis(ms);
    }
    let ws_addr = args
        .websocket
        .clone()
        .or(file.websocket)
        .unwrap_or("websocket://127.0.0.1:9001".into());
    let static_root = args
        .static_root
        .clone()
        .or(file.static_root)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("static"));
    let database = database_url(args, file.database, &run_dir);
    left_out::database(&database)?;
    let db = brisk::db::Db::open(&database, db_options)?;
    let redis_url = args
        .redis
        .clone()
        .or(file.redis)
        .or_else(|| brisk::secret_env("REDIS_URL").filter(|u| !u.is_empty()));
    let redis_ca = args.redis_ca.clone().or(file.redis_ca);
    let redis = match redis_url.clone() {
        Some(url) => {
            let options = brisk::redis::RedisOptions {
                tls_ca: redis_ca.clone(),
                ..Default::default()
            };
            Some(brisk::redis::Redis::new(&url, options)?)
        }
        None => None,
    };
    let mail = mail::Mail::new(
        args.smtp.clone().or(file.smtp),
        args.smtp_ca.clone().or(file.smtp_ca),
    )?;
    let history = match (args.history.or(file.history), &redis) {
        (None, _) => None,
        (Some(_), None) => anyhow::bail!("--history keeps /chat messages in Redis: add --redis"),
        (Some(n), Some(redis)) => Some(brisk::ws::History::new(
            redis.clone(),
            brisk::ws::HistoryOptions {
                keep_last: n,
                ..Default::default()
            },
        )),
    };
    let api_key = match &args.api_key_file {
        Some(path) => Some(
            std::fs::read_to_string(path)
                .with_context(|| format!("--api-key-file {}", path.display()))?
                .trim()
                .to_owned(),
        ),
        None => None,
    };
    let token_keys = match &args.channels_jwks_url {
        Some(url) => live::TokenKeys::Url(
            brisk::jwks_url::JwksUrl::new(url)
                .map_err(|e| anyhow::anyhow!("--channels-jwks-url: {e}"))?
                .refresh_every(Duration::from_secs(args.channels_jwks_refresh)),
        ),
        None => live::TokenKeys::SecretFile(
            (args.channels_secret_file.clone()).unwrap_or_else(|| run_dir.join("channels.key")),
        ),
    };
    let live = live::Live::new(
        token_keys,
        history.clone(),
        api_key,
        !args.channels_json_only,
    )?;
    let blocks = blocks::Blocks::new(redis.clone());
    let jobs = jobs::Jobs::new(redis.clone());
    let jobs_consumer = redis.clone().map(jobs::consumer);
    let heartbeat_every =
        Duration::from_millis(args.heartbeat_ms.or(file.heartbeat_ms).unwrap_or(10_000));
    let heartbeat = redis
        .is_some()
        .then(|| heartbeat::schedule(db.clone(), heartbeat_every));
    let mut techempower = techempower::Techempower::new(db.clone(), redis);
    if args.blocking_db {
        techempower = techempower.blocking(&database);
    }
    let upstream = (args.upstream.clone().or(file.upstream))
        .unwrap_or_else(|| http_addr.replace("0.0.0.0", "127.0.0.1"));
    let upstream_timeout = (args.upstream_timeout_ms.or(file.upstream_timeout_ms)).unwrap_or(2000);
    let templates = args
        .templates
        .clone()
        .or(file.templates)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("templates/jinja"));
    let mut template_options = if args.template_dev || file.template_dev == Some(true) {
        TemplateOptions::development()
    } else {
        TemplateOptions::default()
    };
    template_options.cache = !args.no_template_cache && file.template_cache != Some(false);
    // A template that does not compile stops the start here, naming its file and line.
    let templates = Templates::new(&templates, template_options)
        .with_context(|| format!("templates in {}", templates.display()))?;
    let engine = args.template_engine.clone().or(file.template_engine);
    let runtime_by_default = match engine.as_deref() {
        None | Some("sailfish") => false,
        Some("minijinja") => true,
        Some(other) => {
            anyhow::bail!("--template-engine {other:?}: expected sailfish or minijinja")
        }
    };
    let secret_file = (args.session_secret_file.clone())
        .or(file.session_secret_file)
        .unwrap_or_else(|| run_dir.join("session.key"));
    let session_key = session_key::SessionKey::new(secret_file)?;
    let admin_hash = admin_password_hash(args)?;
    let mut throttle = brisk::http::login_throttle::ThrottleOptions::default();
    if let Some(n) = args.login_failures_per_account {
        throttle.per_account.failures = n;
    }
    if let Some(n) = args.login_failures_per_address {
        throttle.per_address.failures = n;
    }
    let admin = admin::Admin::new(session_key, templates.clone(), db.clone(), admin_hash)?
        .throttled(throttle);
    let routes = routes::Routes::new(
        &static_root,
        args.static_sendfile_min_size,
        chat::Chat::new(
            match args.slow_consumer_close.or(file.slow_consumer_close) {
                Some(code) => brisk::ws::SlowConsumer::Close(code),
                None => brisk::ws::SlowConsumer::Drop,
            },
            args.chat_max_message.unwrap_or(chat::MAX_MESSAGE),
            history,
        ),
        live,
        routes::Apps {
            techempower: std::rc::Rc::new(techempower),
            orm: orm::Orm::new(&database),
            views: views::Views::new(templates, runtime_by_default),
            admin,
            blocks,
            jobs,
            mail,
            db: db.clone(),
            api: api::Api::new(db.clone()),
            httpc: httpc::Httpc::new(&upstream, Duration::from_millis(upstream_timeout)),
        },
        try_out::TryOut::new(args.open_try_out),
    )?;
    let ticker = routes.clone();
    let compress = !args.no_compression && file.compression != Some(false);
    let no_request_spans = args.no_request_spans;
    let histograms = !args.no_latency_histograms;
    let access_log = match args.access_log.clone().or(file.access_log) {
        Some(path) => {
            let format = args.access_log_format.clone().or(file.access_log_format);
            let format = match format.as_deref().unwrap_or("combined") {
                "common" => LogFormat::Common,
                "combined" => LogFormat::Combined,
                "json" => LogFormat::Json,
                other => anyhow::bail!(
                    "--access-log-format {other:?}: expected common, combined or json"
                ),
            };
            Some(AccessLog::new(path, format))
        }
        None => None,
    };
    let max_requests = args.max_requests.or(file.max_requests);
    let max_memory = args.max_memory.or(file.max_memory);
    let site = move |server: HttpServer| {
        // Shared: each request clones one Rc, not every part of the routes.
        let routes = std::rc::Rc::new(routes.clone());
        let server = match max_requests {
            Some(n) => server.max_requests(n),
            None => server,
        };
        let server = match max_memory {
            Some(mib) => server.max_memory_mib(mib),
            None => server,
        };
        let server = server
            .http_limits(limits)
            .ws_endpoint(routes::DURABLE_ECHO, routes.durable_echo())
            .ws_endpoint(chat::CHAT, routes.chat_endpoint())
            .handler(move |req| routes.route(req));
        let server = server
            .request_spans(!no_request_spans)
            .latency_histograms(histograms);
        let server = match access_log.clone() {
            Some(log) => server.access_log(log),
            None => server,
        };
        if compress {
            server.compression(Compression::default())
        } else {
            server
        }
    };
    let mut http = site(HttpServer::new(&http_addr)?).on_worker_start(move |_| {
        ticker.start_ticking();
        async {}
    });
    let mut websocket = WsServer::new(&ws_addr)?
        .endpoint(echo_endpoint(limits.header_read_timeout))
        .max_send_buffer(ECHO_SEND_BUFFER);
    let tls = match (
        args.tls_cert.clone().or(file.tls_cert),
        args.tls_key.clone().or(file.tls_key),
    ) {
        // A TLS handshake gets as long as a request head unless told otherwise.
        (Some(cert), Some(key)) => {
            let handshake = args
                .tls_handshake_timeout_ms
                .map_or(limits.header_read_timeout, Duration::from_millis);
            Some(TlsConfig::from_pem_files(cert, key)?.handshake_timeout(handshake))
        }
        (None, None) => None,
        _ => anyhow::bail!("--tls-cert and --tls-key go together"),
    };
    let mut secure = None;
    if let Some(tls) = tls {
        let https = args.https.clone().or(file.https);
        let https = https.unwrap_or("https://127.0.0.1:8443".into());
        let wss = args.wss.clone().or(file.wss);
        let wss = wss.unwrap_or("wss://127.0.0.1:9443".into());
        let https = site(HttpServer::new(&https)?).tls(tls.clone()).http2(true);
        let wss = WsServer::new(&wss)?
            .endpoint(echo_endpoint(limits.header_read_timeout))
            .max_send_buffer(ECHO_SEND_BUFFER)
            .tls(tls.clone());
        let tls_text = args.tls_text.clone().or(file.tls_text);
        let tls_text = tls_text.unwrap_or("text://127.0.0.1:7443".into());
        let tls_text = Server::new(&tls_text)?
            .tls(tls)
            .on_message(|conn, line| async move { conn.send(line) });
        secure = Some((https, wss, tls_text));
    }
    if let Some(n) = workers {
        text = text.workers(n);
        frame = frame.workers(n);
        http = http.workers(n);
        websocket = websocket.workers(n);
        secure =
            secure.map(|(https, wss, text)| (https.workers(n), wss.workers(n), text.workers(n)));
    }
    if args.shared_listener || file.shared_listener == Some(true) {
        text = text.reuse_port(false);
        frame = frame.reuse_port(false);
        http = http.reuse_port(false);
        websocket = websocket.reuse_port(false);
        secure = secure.map(|(https, wss, text)| {
            (
                https.reuse_port(false),
                wss.reuse_port(false),
                text.reuse_port(false),
            )
        });
    }
    let mut connection_limits = brisk::Limits::default();
    if let Some(bytes) = args.max_send_buffer {
        connection_limits.max_send_buffer = bytes;
    }
    if let Some(secs) = args.send_timeout {
        connection_limits.send_timeout = (secs > 0).then(|| Duration::from_secs(secs));
    }
    let mut app = App::new("brisk-demo")
        .limits(connection_limits)
        .migrate(db.clone(), migrations(db.kind()))
        .run_dir(run_dir)
        .graceful_timeout(Duration::from_secs(graceful))
        .metric(&api::MESSAGES_POSTED)
        .readiness("database", {
            let db = db.clone();
            move || {
                let db = db.clone();
                async move { db.query_one("SELECT 1", vec![]).await.map(drop) }
            }
        })
        .server(text)
        .server(frame)
        .server(http)
        .server(websocket);
    if let Some((https, wss, tls_text)) = secure {
        app = app.server(https).server(wss).server(tls_text);
    }
    if let Some(address) = args.metrics.clone().or(file.metrics.clone()) {
        app = app.metrics(address);
    }
    #[cfg(feature = "otel")]
    {
        app = app.tracing(tracing(args)?);
    }
    #[cfg(not(feature = "otel"))]
    no_tracing(args)?;
    let token_file = args
        .metrics_token_file
        .clone()
        .or(file.metrics_token_file.clone());
    let token = match brisk::secret_env("BRISK_METRICS_TOKEN") {
        Some(token) if !token.is_empty() => Some(token),
        _ => match token_file {
            Some(path) => Some(
                std::fs::read_to_string(&path)
                    .with_context(|| format!("--metrics-token-file {}", path.display()))?
                    .trim()
                    .to_string(),
            ),
            None => None,
        },
    };
    if let Some(token) = token {
        anyhow::ensure!(!token.is_empty(), "the metrics token is empty");
        app = app.metrics_token(token);
    }
    if let Some(alerts) = alerts {
        app = app.alerts(alerts);
    }
    if let Some(consumer) = jobs_consumer {
        app = app.process(consumer);
    }
    if let Some(heartbeat) = heartbeat {
        app = app.schedule(heartbeat);
    }
    let clustered = if let Some(url) = args.cluster_sharded.clone().or(file.cluster_sharded) {
        app = app.cluster_sharded(url);
        true
    } else if let Some(url) = redis_url {
        // Instances on the same Redis share `/chat` rooms.
        app = app.cluster(url);
        true
    } else {
        false
    };
    if clustered {
        let secret = (args.cluster_secret.clone())
            .or_else(|| brisk::secret_env("BRISK_CLUSTER_SECRET"))
            .filter(|s| !s.is_empty());
        let Some(secret) = secret else {
            anyhow::bail!(
                "--redis shares /chat rooms with other instances through Redis: give \
                 BRISK_CLUSTER_SECRET (or --cluster-secret), 16 bytes or more, the same on \
                 every instance"
            );
        };
        app = app.cluster_secret(secret);
        if let Some(ca) = redis_ca {
            app = app.cluster_tls_ca(ca);
        }
    }
    Ok(app)
}

/// The echo listeners' send buffer: room for the largest message they take, sent back whole.
const ECHO_SEND_BUFFER: usize = (64 << 20) + 64;

/// The WebSocket echo: every message goes back as it came (compressed for clients that
/// negotiate permessage-deflate).
fn echo_endpoint(handshake_timeout: Duration) -> WsEndpoint {
    WsEndpoint::new()
        .max_message_size(64 << 20)
        .permessage_deflate(true)
        .handshake_timeout(handshake_timeout)
        .on_message(|ws, msg| async move { ws.send(msg) })
}

fn main() -> ExitCode {
    let args = Args::parse();
    let done = match &args.command {
        DemoCommand::Migrate { list } => migrate(&args, *list).map(|()| ExitCode::SUCCESS),
        DemoCommand::HashPassword => admin::hash_password_from_stdin().map(|()| ExitCode::SUCCESS),
        DemoCommand::Control(command) => build(&args).map(|app| app.run_command(command.clone())),
    };
    done.unwrap_or_else(|e| {
        eprintln!("brisk-demo: {e:#}");
        ExitCode::FAILURE
    })
}

/// Where traces go: `--otlp` (sampled by `--trace-sample`), else the OTEL_ variables.
#[cfg(feature = "otel")]
fn tracing(args: &Args) -> anyhow::Result<Option<brisk::otel::Tracing>> {
    let Some(url) = &args.otlp else {
        anyhow::ensure!(
            args.trace_sample.is_none(),
            "--trace-sample needs --otlp (the collector to send traces to)"
        );
        return Ok(brisk::otel::Tracing::from_env()?);
    };
    let tracing = brisk::otel::Tracing::otlp(url)?;
    Ok(Some(match args.trace_sample {
        Some(r) if (0.0..=1.0).contains(&r) => tracing.sample(r),
        Some(r) => anyhow::bail!("--trace-sample {r}: write a share from 0 to 1"),
        None => tracing,
    }))
}

/// A build without traces stops at `--otlp`, `--trace-sample` or an OTLP endpoint in the
/// environment, rather than run without the traces they ask for.
#[cfg(not(feature = "otel"))]
fn no_tracing(args: &Args) -> anyhow::Result<()> {
    left_out::flag("--otlp", args.otlp.is_some(), "otel")?;
    left_out::flag("--trace-sample", args.trace_sample.is_some(), "otel")?;
    for name in [
        "OTEL_EXPORTER_OTLP_ENDPOINT",
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
    ] {
        let set = std::env::var(name).is_ok_and(|v| !v.trim().is_empty());
        left_out::flag(name, set, "otel")?;
    }
    Ok(())
}
