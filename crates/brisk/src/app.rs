//! [`App`]: the servers of one program plus what every Brisk program shares: its name, run
//! directory, default limits, graceful-stop timeout, worker user, and the control CLI.

use std::ffi::OsString;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;

use crate::cli::{self, Cli, Command};
use crate::env;
use crate::error::{Error, Result};
use crate::limits::Limits;
use crate::master::{self, daemon, MasterConfig};
use crate::process::Process;
use crate::run_paths::RunPaths;
use crate::runtime::Service;
use crate::schedule::{self, Schedule};
use crate::startup::{self, Hook};
use crate::worker::{self, WorkerSpec};

/// A Brisk program: servers, shared settings, and the `start | stop | restart | reload |
/// status | connections` CLI.
///
/// The same binary is the CLI, the master and every worker: the master starts workers by
/// running the program again with the same arguments, so `main` must build the same servers
/// every time it runs (from the same flags and files, as a config naturally does).
///
/// ```no_run
/// use brisk::{App, Server};
/// fn main() -> std::process::ExitCode {
///     let echo = Server::new("text://127.0.0.1:7000").unwrap()
///         .on_message(|conn, line| async move { conn.send(line) });
///     App::new("echo").run_dir("./run").server(echo).run()
/// }
/// ```
pub struct App {
    pub(crate) name: String,
    pub(crate) run_dir: PathBuf,
    pub(crate) services: Vec<Service>,
    pub(crate) limits: Limits,
    pub(crate) graceful_timeout: Duration,
    pub(crate) user: Option<String>,
    pub(crate) group: Option<String>,
    pub(crate) logging: Logging,
    pub(crate) metrics: Option<String>,
    pub(crate) metrics_token: Option<String>,
    pub(crate) alerts: Option<crate::alerts::Alerts>,
    pub(crate) cluster: crate::cluster_setting::ClusterConfig,
    pub(crate) schedules: Vec<Schedule>,
    pub(crate) startup: Vec<Hook>,
    pub(crate) app_metrics: Vec<&'static dyn crate::metrics::Metric>,
    pub(crate) readiness: Vec<(String, crate::worker::ReadinessCheck)>,
    /// Where each worker sends its traces, if anywhere.
    #[cfg(feature = "otel")]
    tracing: Option<crate::otel::Tracing>,
}

/// Who sets up logging: see [`App::logging`].
pub(crate) enum Logging {
    /// Brisk's subscriber, unless the program installed one already.
    Default,
    /// The program's own (or none).
    Off,
}

impl App {
    /// An app called `name` (used for the pid file, control socket, log file and messages).
    pub fn new(name: impl Into<String>) -> Self {
        App {
            name: name.into(),
            run_dir: PathBuf::from("run"),
            services: Vec::new(),
            limits: Limits::default(),
            graceful_timeout: Duration::from_secs(30),
            user: None,
            group: None,
            logging: Logging::Default,
            metrics: None,
            metrics_token: None,
            alerts: None,
            cluster: Default::default(),
            schedules: Vec::new(),
            startup: Vec::new(),
            app_metrics: Vec::new(),
            readiness: Vec::new(),
            #[cfg(feature = "otel")]
            tracing: None,
        }
    }

    /// Where the pid file, control socket and daemon log live (default `./run`). It is created
    /// if missing, but its parent must exist.
    pub fn run_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.run_dir = dir.into();
        self
    }

    /// Adds a server.
    pub fn server(mut self, server: impl Into<Service>) -> Self {
        self.services.push(server.into());
        self
    }

    /// Adds a custom process: workers without a listener, supervised like the servers' (see
    /// [`Process`]).
    pub fn process(mut self, process: Process) -> Self {
        self.services.push(process.into());
        self
    }

    /// Adds a schedule (see [`crate::schedule`]): the app gets a process called `schedules`
    /// whose worker runs each job when the master says it is due.
    pub fn schedule(mut self, schedule: Schedule) -> Self {
        self.schedules.push(schedule);
        self
    }

    /// Runs `hook` once per start (`start`, `restart`; not `reload`), before any worker
    /// accepts a connection: in a process of its own that the master starts after binding
    /// the listeners, whose connections and memory end with it. An error fails the start with
    /// what the hook said; hooks run in the order they were added. Build what the hook
    /// needs in `main`, as for a server (it runs in every process; only this one calls the
    /// hook).
    ///
    /// ```no_run
    /// # let server = brisk::Server::new("text://127.0.0.1:7000").unwrap();
    /// brisk::App::new("app")
    ///     .server(server)
    ///     .before_start(|| async {
    ///         std::fs::create_dir_all("run/uploads")?;
    ///         Ok(())
    ///     })
    ///     .run();
    /// ```
    pub fn before_start<F, Fut>(mut self, hook: F) -> Self
    where
        F: Fn() -> Fut + 'static,
        Fut: std::future::Future<Output = std::result::Result<(), crate::BoxError>> + 'static,
    {
        self.startup.push(startup::hook(hook));
        self
    }

    /// Applies `migrations` to `db` once per start, before any worker accepts a connection
    /// (a [`before_start`](Self::before_start) hook): two instances starting together apply
    /// each once, and a failing migration fails the start with its file, its statement and
    /// the server's reason.
    ///
    /// ```no_run
    /// use brisk::db::{Db, DbOptions};
    /// # let server = brisk::Server::new("text://127.0.0.1:7000").unwrap();
    /// let db = Db::open("sqlite:run/app.sqlite", DbOptions::default()).unwrap();
    /// brisk::App::new("app")
    ///     .server(server)
    ///     .migrate(db, brisk::db::Migrations::from_dir("migrations").unwrap())
    ///     .run();
    /// ```
    #[cfg(any(feature = "sqlite", feature = "postgres", feature = "mysql"))]
    pub fn migrate(self, db: crate::db::Db, migrations: crate::db::Migrations) -> Self {
        self.before_start(move || {
            let (db, migrations) = (db.clone(), migrations.clone());
            async move {
                let applied = migrations.run(&db).await?;
                tracing::info!(
                    "migrations: {} applied now, {} in all",
                    applied.len(),
                    migrations.list().len()
                );
                Ok(())
            }
        })
    }

    /// Default limits for every server (each server may override them).
    pub fn limits(mut self, limits: Limits) -> Self {
        self.limits = limits;
        self
    }

    /// How long a graceful stop or reload lets in-flight work run before closing the rest
    /// (default 30 s).
    pub fn graceful_timeout(mut self, timeout: Duration) -> Self {
        self.graceful_timeout = timeout;
        self
    }

    /// Runs workers as this user when the master runs as root.
    pub fn user(mut self, user: impl Into<String>) -> Self {
        self.user = Some(user.into());
        self
    }

    /// Runs workers with this group when the master runs as root.
    pub fn group(mut self, group: impl Into<String>) -> Self {
        self.group = Some(group.into());
        self
    }

    /// Whether Brisk sets up logging (default `true`): a `tracing` subscriber writing to
    /// standard output at the level in `BRISK_LOG` (default `info`), with records of the `log`
    /// crate (rustls uses it) passed to it. It does so only if the program has not installed a
    /// global subscriber of its own before [`run`](Self::run); `false` leaves logging alone.
    ///
    /// ```no_run
    /// # let server = brisk::Server::new("text://127.0.0.1:7000").unwrap();
    /// // The program's own subscriber wins: Brisk sees it and installs none.
    /// tracing_subscriber::fmt().with_target(true).init();
    /// brisk::App::new("app").server(server).run();
    /// ```
    pub fn logging(mut self, on: bool) -> Self {
        self.logging = if on { Logging::Default } else { Logging::Off };
        self
    }

    /// Serves the app's metrics from the master at `address` (`http://host:port`):
    /// `GET /metrics` answers in Prometheus's text format with the totals of every worker
    /// (those that have exited included, so counters never go backwards), latency histograms,
    /// and each process's memory and CPU. The start fails if the address cannot be bound.
    ///
    /// ```no_run
    /// # let server = brisk::Server::new("text://127.0.0.1:7000").unwrap();
    /// brisk::App::new("app")
    ///     .server(server)
    ///     .metrics("http://127.0.0.1:9100")
    ///     .run();
    /// ```
    pub fn metrics(mut self, address: impl Into<String>) -> Self {
        self.metrics = Some(address.into());
        self
    }

    /// Answers the metrics listener's requests only when they carry
    /// `Authorization: Bearer TOKEN` (Prometheus's `authorization` of a scrape config); any
    /// other gets 401. Read the token from a file or the environment, not from the command
    /// line (which every process of the app repeats).
    ///
    /// ```no_run
    /// # let server = brisk::Server::new("text://127.0.0.1:7000").unwrap();
    /// let token = std::fs::read_to_string("/etc/app/metrics.token").unwrap();
    /// brisk::App::new("app")
    ///     .server(server)
    ///     .metrics("http://0.0.0.0:9100")
    ///     .metrics_token(token.trim())
    ///     .run();
    /// ```
    pub fn metrics_token(mut self, token: impl Into<String>) -> Self {
        self.metrics_token = Some(token.into());
        self
    }

    /// Traces requests, database and Redis calls, WebSocket messages and queue jobs, and
    /// sends the spans to an OpenTelemetry collector over OTLP (see [`crate::otel`]); each
    /// worker exports its own. `None` (the default) traces nothing.
    ///
    /// ```no_run
    /// # fn main() -> brisk::Result<()> {
    /// # let server = brisk::Server::new("text://127.0.0.1:7000").unwrap();
    /// // OTEL_EXPORTER_OTLP_ENDPOINT and its friends, if set.
    /// brisk::App::new("app").server(server).tracing(brisk::otel::Tracing::from_env()?).run();
    /// # Ok(()) }
    /// ```
    #[cfg(feature = "otel")]
    pub fn tracing(mut self, tracing: impl Into<Option<crate::otel::Tracing>>) -> Self {
        self.tracing = tracing.into();
        self
    }

    /// Adds a readiness check, run in every worker when the metrics listener's `/readyz` is
    /// asked (up to 1.5 s each): `/readyz` answers 503 with the check's name and error while
    /// it fails in any worker. For what the app cannot serve without, such as its database.
    ///
    /// ```no_run
    /// # let server = brisk::Server::new("text://127.0.0.1:7000").unwrap();
    /// let db = brisk::db::Db::open("sqlite:app.db", Default::default()).unwrap();
    /// brisk::App::new("app")
    ///     .metrics("http://127.0.0.1:9100")
    ///     .readiness("database", move || {
    ///         let db = db.clone();
    ///         async move { db.query_one("SELECT 1", vec![]).await.map(drop) }
    ///     })
    ///     .server(server)
    ///     .run();
    /// ```
    pub fn readiness<F, Fut>(mut self, name: &str, check: F) -> Self
    where
        F: Fn() -> Fut + 'static,
        Fut: std::future::Future + 'static,
        Fut::Output: crate::HandlerOutput,
    {
        let check: crate::worker::ReadinessCheck =
            std::rc::Rc::new(move || crate::runtime::handler::boxed(check()));
        self.readiness.push((name.to_string(), check));
        self
    }

    /// Registers an app metric (a [`Counter`](crate::metrics::Counter),
    /// [`Gauge`](crate::metrics::Gauge) or [`Histogram`](crate::metrics::Histogram) static):
    /// each worker reports it, and the metrics listener exports it beside Brisk's own series
    /// (see [`crate::metrics`]). A bad name, or a series registered twice, fails `start`.
    ///
    /// ```no_run
    /// static POSTED: brisk::metrics::Counter =
    ///     brisk::metrics::Counter::new("chat_messages_posted_total", "Messages posted.");
    /// # let server = brisk::Server::new("text://127.0.0.1:7000").unwrap();
    /// brisk::App::new("chat")
    ///     .metrics("http://127.0.0.1:9100")
    ///     .metric(&POSTED)
    ///     .server(server)
    ///     .run();
    /// ```
    pub fn metric(mut self, metric: &'static dyn crate::metrics::Metric) -> Self {
        self.app_metrics.push(metric);
        self
    }

    /// Watches the app's KPIs in the master and raises alerts (see [`crate::alerts`]): logged
    /// once when they fire and once when they resolve, and POSTed to a webhook if given.
    ///
    /// ```no_run
    /// # let server = brisk::Server::new("text://127.0.0.1:7000").unwrap();
    /// use std::time::Duration;
    /// use brisk::alerts::Alerts;
    /// brisk::App::new("app")
    ///     .server(server)
    ///     .alerts(Alerts::new().p99_above(Duration::from_millis(200)).memory_above(1 << 30))
    ///     .run();
    /// ```
    pub fn alerts(mut self, alerts: crate::alerts::Alerts) -> Self {
        self.alerts = Some(alerts);
        self
    }

    /// Spans machines (feature `redis`): `brisk::ws::broadcast` reaches the members of a
    /// group on every instance of the app that uses the same Redis server, once each. The
    /// master holds the Redis subscription: see the guide's "Beyond one machine" (docs/guide/cluster.md). While Redis
    /// is unreachable, broadcasts reach this instance only, and what could not be published or
    /// was missed is counted in `status --json` (`cluster`). Needs
    /// [`cluster_secret`](Self::cluster_secret).
    ///
    /// ```no_run
    /// # let server = brisk::Server::new("text://127.0.0.1:7000").unwrap();
    /// brisk::App::new("chat")
    ///     .server(server)
    ///     .cluster("redis://10.0.0.5:6379")
    ///     .cluster_secret(brisk::secret_env("CHAT_CLUSTER_SECRET").unwrap())
    ///     .run();
    /// ```
    pub fn cluster(mut self, redis_url: impl Into<String>) -> Self {
        self.cluster.url = Some(redis_url.into());
        self.cluster.sharded = false;
        self
    }

    /// Spans machines as [`cluster`](Self::cluster) does, through a Redis Cluster's sharded
    /// pub/sub (`SSUBSCRIBE`/`SPUBLISH`, Redis 7): each group's channel lives on the node
    /// that owns its slot, so pub/sub traffic spreads over the nodes. `node_url` is any node
    /// of the cluster, or several separated by commas (so that one being down does not stop a
    /// reconnect); the others are found from them. [`ws::presence`](crate::ws::presence)
    /// needs a single Redis server and answers an error here.
    ///
    /// ```no_run
    /// # let server = brisk::Server::new("text://127.0.0.1:7000").unwrap();
    /// brisk::App::new("chat")
    ///     .server(server)
    ///     .cluster_sharded("redis://10.0.0.5:7000")
    ///     .cluster_secret(brisk::secret_env("CHAT_CLUSTER_SECRET").unwrap())
    ///     .run();
    /// ```
    pub fn cluster_sharded(mut self, node_url: impl Into<String>) -> Self {
        self.cluster.url = Some(node_url.into());
        self.cluster.sharded = true;
        self
    }

    /// The secret (at least 16 bytes; 32 random ones are best) that authenticates the
    /// cluster bus's messages: the same on every instance of the app, and known to nothing
    /// else. Anyone who can publish on the app's Redis could otherwise send every member
    /// messages of their own; with it, a message whose HMAC does not match is not delivered
    /// (and is counted as `rejected` in `status --json`). Required with
    /// [`cluster`](Self::cluster) and [`cluster_sharded`](Self::cluster_sharded).
    ///
    /// It also seals what Brisk keeps in Redis beside the bus (feature `redis`): history
    /// entries (`brisk::ws::History`), presence counts and queue jobs (`brisk::queue`). A
    /// value whose seal does not match is refused (counted as `redis_refused` in `status
    /// --json`): give an app on one machine that keeps a history or jobs in Redis a secret
    /// too, or its values are kept unsealed (as its log says once).
    pub fn cluster_secret(mut self, secret: impl Into<Vec<u8>>) -> Self {
        self.cluster.secret = Some(secret.into());
        self
    }

    /// For a cluster bus over TLS (`rediss://` URLs): trusts the certificate authorities of
    /// this PEM file instead of the system's (a CA of your own). A CA file given with a
    /// plain `redis://` URL is refused at start, not ignored.
    ///
    /// ```no_run
    /// # let server = brisk::Server::new("text://127.0.0.1:7000").unwrap();
    /// brisk::App::new("chat")
    ///     .server(server)
    ///     .cluster("rediss://redis.internal:6380")
    ///     .cluster_tls_ca("/etc/chat/redis-ca.pem")
    ///     .cluster_secret(brisk::secret_env("CHAT_CLUSTER_SECRET").unwrap())
    ///     .run();
    /// ```
    pub fn cluster_tls_ca(mut self, pem_file: impl Into<std::path::PathBuf>) -> Self {
        self.cluster.tls_ca = Some(pem_file.into());
        self
    }

    fn paths(&self) -> RunPaths {
        RunPaths {
            name: self.name.clone(),
            run_dir: self.run_dir.clone(),
        }
    }

    /// The pid file: `RUN_DIR/NAME.pid`.
    pub fn pid_file(&self) -> PathBuf {
        self.paths().pid_file()
    }

    /// The control socket the CLI talks to: `RUN_DIR/NAME.sock`.
    pub fn control_socket(&self) -> PathBuf {
        self.paths().control_socket()
    }

    /// The daemon's log file: `RUN_DIR/NAME.log`.
    pub fn log_file(&self) -> PathBuf {
        self.paths().log_file()
    }

    /// Parses the command line (`start [-d]`, `stop [-g]`, …) and runs the command.
    pub fn run(self) -> ExitCode {
        let command = if is_worker() || startup::is_startup_process() {
            Command::Start { daemon: false }
        } else {
            Cli::parse().command
        };
        self.run_command(command)
    }

    /// Runs a command parsed by the program's own argument parser (see [`Command`]).
    pub fn run_command(self, command: Command) -> ExitCode {
        if matches!(self.logging, Logging::Default) {
            crate::log::init();
        }
        let mut app = self;
        app.add_schedules_process();
        if is_worker() || startup::is_startup_process() {
            // The app is built: the secrets it did not ask for are not left on an open
            // descriptor for the programs it may run.
            crate::secret_env::close_passed();
        }
        if is_worker() {
            crate::metrics::register(std::mem::take(&mut app.app_metrics));
            return app.run_as_worker();
        }
        if startup::is_startup_process() {
            return startup::run_hooks(&app.name, &app.startup);
        }
        let name = app.name.clone();
        match app.dispatch(command) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("{name}: {e}");
                ExitCode::FAILURE
            }
        }
    }

    fn dispatch(self, command: Command) -> Result<()> {
        let paths = self.paths();
        let graceful_timeout = self.graceful_timeout;
        match command {
            Command::Start { daemon } => self.start(daemon),
            // The new master an `upgrade` starts, with the old one's arguments.
            // (`dev`'s masters run as `start` by their environment, below.)
            Command::Restart { daemon } if crate::env::is_upgrading() => self.start(daemon),
            Command::Restart { daemon } => {
                match cli::stop(&paths, graceful_timeout, false) {
                    Ok(()) | Err(Error::NotRunning { .. }) => {}
                    Err(e) => return Err(e),
                }
                self.start(daemon)
            }
            Command::Stop { graceful } => cli::stop(&paths, graceful_timeout, graceful),
            Command::Reload { graceful } => cli::reload(&paths, graceful_timeout, graceful),
            Command::Upgrade { timeout } => cli::upgrade(&paths, timeout),
            // The master a `dev` loop starts (and each one an upgrade starts after it).
            Command::Dev { .. } if crate::dev_loop::is_dev_master() => self.start(false),
            Command::Dev {
                watch,
                build,
                timeout,
            } => crate::dev_loop::DevLoop {
                watch,
                build,
                upgrade_timeout_s: timeout,
            }
            .run(&paths, graceful_timeout),
            Command::Status { json } => cli::status(&paths, json),
            Command::ReopenLogs => cli::reopen_logs(&paths),
            Command::Connections { json } => cli::connections(&paths, json),
        }
    }

    /// With schedules, adds the process that runs them, last (master and workers alike, so a
    /// worker's index names the same service in both).
    fn add_schedules_process(&mut self) {
        if self.schedules.is_empty() {
            return;
        }
        let mut service = crate::runtime::Service::without_listener(
            schedule::PROCESS_NAME.to_string(),
            1,
            Default::default(),
        );
        service.jobs = self.schedules.iter().map(|s| s.job.clone()).collect();
        self.services.push(service);
    }

    fn start(self, daemon: bool) -> Result<()> {
        if let Some(why) = self.schedules.iter().find_map(Schedule::problem) {
            return Err(Error::Config(why.to_string()));
        }
        crate::metrics::check(&self.app_metrics).map_err(|e| Error::Config(e.to_string()))?;
        if let Some(secret) = &self.cluster.secret {
            crate::secret_key::check(secret).map_err(|e| Error::Config(e.to_string()))?;
        }
        #[cfg(feature = "config")]
        if let Some(why) = crate::config::problem() {
            return Err(Error::Config(why));
        }
        if daemon && !daemon::is_daemon_child() {
            return daemon::start(&self.paths());
        }
        master::run(MasterConfig {
            paths: self.paths(),
            services: self
                .services
                .iter()
                .map(|s| master::ServiceConfig {
                    name: s.name.clone(),
                    workers: s.workers,
                    listen: s.listen.clone(),
                })
                .collect(),
            user: self.user,
            group: self.group,
            graceful_timeout: self.graceful_timeout,
            metrics: self.metrics.as_deref().map(metrics_address).transpose()?,
            metrics_token: self.metrics_token,
            alerts: self.alerts,
            schedules: self.schedules,
            cluster: self.cluster,
            startup: !self.startup.is_empty(),
        })
    }

    fn run_as_worker(self) -> ExitCode {
        let (service, index) = match worker::spec_from_env() {
            Ok(spec) => spec,
            Err(e) => {
                eprintln!("{}: {e}", self.name);
                return ExitCode::FAILURE;
            }
        };
        let Some(service) = self.services.into_iter().nth(service) else {
            eprintln!("worker for server {service}, but the app defines fewer servers");
            return ExitCode::FAILURE;
        };
        crate::cluster_setting::set(self.cluster.worker_setting());
        #[cfg(feature = "redis")]
        if let Err(e) = crate::redis_seal::set(self.cluster.secret.as_deref()) {
            eprintln!("{}: {e}", self.name);
            return ExitCode::FAILURE;
        }
        worker::run(WorkerSpec {
            service,
            index,
            defaults: self.limits,
            readiness: self.readiness,
            #[cfg(feature = "otel")]
            tracing: self.tracing.map(|t| (t, self.name)),
        })
    }
}

/// Whether the master started this process as a worker.
/// The socket address of a metrics listener written `http://host:port`.
fn metrics_address(text: &str) -> Result<std::net::SocketAddr> {
    let address: crate::address::Address = text
        .parse()
        .map_err(|e| Error::Config(format!("metrics listener: {e}")))?;
    match (address.scheme(), address.socket_addr()) {
        (crate::address::Scheme::Http, Some(addr)) => Ok(addr),
        _ => Err(Error::Config(format!(
            "metrics listener {text:?}: write it http://host:port"
        ))),
    }
}

fn is_worker() -> bool {
    env::worker_spec().is_some()
}

/// Runs a program made only of `servers`, named after the executable, with the default CLI.
///
/// ```no_run
/// use brisk::Server;
/// fn main() -> std::process::ExitCode {
///     let text = Server::new("text://127.0.0.1:7000").unwrap().on_message(|c, m| async move { c.send(m) });
///     let frame = Server::new("frame://127.0.0.1:7001").unwrap().on_message(|c, m| async move { c.send(m) });
///     brisk::run_all([text.into(), frame.into()])
/// }
/// ```
pub fn run_all(servers: impl IntoIterator<Item = Service>) -> ExitCode {
    let name = std::env::args_os()
        .next()
        .map(PathBuf::from)
        .and_then(|p| p.file_name().map(OsString::from))
        .and_then(|n| n.into_string().ok())
        .unwrap_or_else(|| "brisk".into());
    let mut app = App::new(name);
    for s in servers {
        app = app.server(s);
    }
    app.run()
}
