//! The suite configuration (`bench/suite.toml`): settings, targets and
//! scenarios, parsed strictly so that a misspelt key or an unknown scenario
//! or target name is a plain error naming it.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

use crate::error::BenchError;
use crate::units::parse_duration;

/// The names of every scenario the suite knows, in run order.
pub const SCENARIO_NAMES: [&str; 18] = [
    "generator_check",
    "hello_keepalive",
    "hello_close",
    "connections",
    "workers",
    "static_files",
    "ws_idle",
    "ws_broadcast",
    "database",
    "database_mysql",
    "database_orm",
    "database_blocking",
    "templates",
    "blocks",
    "view",
    "login_page",
    "dashboard",
    "http_client",
];

/// The whole configuration file.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SuiteConfig {
    /// Defaults shared by every scenario.
    #[serde(default)]
    pub settings: Settings,
    /// Targets by name.
    pub targets: BTreeMap<String, TargetConfig>,
    /// Database servers the database scenarios start, by name.
    #[serde(default)]
    pub databases: BTreeMap<String, DatabaseConfig>,
    /// Scenarios; a scenario absent from the file is not run.
    #[serde(default)]
    pub scenarios: Scenarios,
}

/// A database server that a database scenario starts before its first point and stops
/// after its last, pinned to its own CPUs (on two cores, the load generator's).
///
/// Its URL reaches every target of the scenario as `DATABASE_URL`.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DatabaseConfig {
    /// What runs and how it is set up, printed in the scenario's method.
    pub description: String,
    /// Command line (placeholders `{port}`, `{run_dir}`, `{bench_dir}`, `{repo}`,
    /// `{lab_password_hash_file}`: the argon2id hash of the run's sign-in password); it must
    /// stay in the foreground, and listen on `port` only once the tables are ready.
    pub command: Vec<String>,
    /// TCP port; the database is ready when it accepts a connection.
    pub port: u16,
    /// The URL the targets get as `DATABASE_URL`.
    pub url: String,
    /// CPUs the server runs on (default: `settings.load_cpus`).
    pub cpus: Option<String>,
    /// A command printing the server's version.
    pub version: Option<Vec<String>>,
    /// Longest wait for the server to listen (default 60 s: it creates and seeds its tables).
    #[serde(default = "default_db_start_timeout")]
    pub start_timeout: String,
}

fn default_db_start_timeout() -> String {
    "60s".into()
}

impl DatabaseConfig {
    /// The longest wait for the server to listen.
    pub fn start_timeout(&self) -> Duration {
        parse_duration(&self.start_timeout).unwrap_or(Duration::from_secs(60))
    }
}

/// Defaults shared by every scenario.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Settings {
    /// Repetitions per point (the highest and lowest are dropped when >= 3).
    pub reps: usize,
    /// Length of one measured run.
    pub duration: String,
    /// Length of the discarded warm-up run.
    pub warmup: String,
    /// Run length with `--quick`.
    pub quick_duration: String,
    /// CPUs the target runs on (`taskset` list syntax, e.g. `0` or `0-1`).
    pub target_cpus: String,
    /// CPUs the load generator runs on.
    pub load_cpus: String,
    /// Load generator threads.
    pub load_threads: usize,
    /// Longest wait for a started target to answer.
    pub start_timeout: String,
    /// Longest wait after SIGTERM before SIGKILL.
    pub stop_timeout: String,
    /// Interval of the /proc CPU and RSS sampler.
    pub sample_interval: String,
    /// Worker processes of each target outside the `workers` scenario.
    pub workers: usize,
    /// Connections of the hello and static scenarios unless they say otherwise.
    pub connections: usize,
    /// A sentence printed in the report header (e.g. why the run is reduced).
    pub note: Option<String>,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            reps: 5,
            duration: "10s".into(),
            warmup: "2s".into(),
            quick_duration: "2s".into(),
            target_cpus: "0".into(),
            load_cpus: "1".into(),
            load_threads: 1,
            start_timeout: "10s".into(),
            stop_timeout: "5s".into(),
            sample_interval: "200ms".into(),
            workers: 1,
            connections: 100,
            note: None,
        }
    }
}

/// How to probe a started target until it answers.
#[derive(Clone, Copy, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum ReadyProbe {
    /// `GET ready_path` must answer with a status below 500.
    #[default]
    Http,
    /// A TCP connect to the port must succeed.
    Tcp,
}

/// One server under test.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TargetConfig {
    /// How the target is configured, printed in the report.
    pub description: String,
    /// Command line; placeholders `{workers}`, `{port}`, `{ws_port}`,
    /// `{static_dir}`, `{run_dir}`, `{bench_dir}`, `{repo}` are expanded.
    pub command: Vec<String>,
    /// Working directory (placeholders expanded; default: the repository).
    pub cwd: Option<String>,
    /// Extra environment (values expanded).
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// A command printing the target's version.
    pub version: Option<Vec<String>>,
    /// HTTP port.
    pub port: u16,
    /// WebSocket port when it differs from `port`.
    pub ws_port: Option<u16>,
    /// How readiness is probed.
    #[serde(default)]
    pub ready: ReadyProbe,
    /// Path probed by the HTTP readiness check.
    #[serde(default = "default_ready_path")]
    pub ready_path: String,
    /// Scenarios this target cannot serve (reported "not supported by this target").
    #[serde(default)]
    pub unsupported: Vec<String>,
    /// When set, the only scenarios this target runs in; it is left out of the others'
    /// tables (a variant such as the demo in blocking mode).
    pub only: Option<Vec<String>>,
    /// Endpoint paths.
    #[serde(default)]
    pub paths: Paths,
}

fn default_ready_path() -> String {
    "/".into()
}

/// Endpoint paths of a target (the brisk-demo paths by default).
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Paths {
    /// `Hello World`.
    pub hello: String,
    /// Static files prefix; the file name is appended.
    pub static_prefix: String,
    /// WebSocket echo.
    pub ws: String,
    /// WebSocket broadcast room.
    pub chat: String,
}

impl Default for Paths {
    fn default() -> Self {
        Self {
            hello: "/".into(),
            static_prefix: "/static/".into(),
            ws: "/ws".into(),
            chat: "/chat".into(),
        }
    }
}

/// Every known scenario; absent ones are not run.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Scenarios {
    /// wrk against brisk-bench on nginx `return 200`.
    pub generator_check: Option<GeneratorCheck>,
    /// Hello World with keep-alive (R1.1, R3).
    pub hello_keepalive: Option<HttpScenario>,
    /// Hello World without keep-alive (R3).
    pub hello_close: Option<HttpScenario>,
    /// Connection sweep (R4).
    pub connections: Option<SweepScenario>,
    /// Worker-process scaling (R1.7).
    pub workers: Option<WorkersScenario>,
    /// Static files by size (R1.3).
    pub static_files: Option<StaticScenario>,
    /// Idle WebSocket connections (R1.4).
    pub ws_idle: Option<WsIdleScenario>,
    /// WebSocket broadcast (R1.5).
    pub ws_broadcast: Option<WsBroadcastScenario>,
    /// The TechEmpower database tests on PostgreSQL (R3's reference).
    pub database: Option<PathScenario>,
    /// HTTP with MySQL queries (R1.2).
    pub database_mysql: Option<PathScenario>,
    /// Raw queries against an ORM (R3).
    pub database_orm: Option<PathScenario>,
    /// Blocking against asynchronous workers (R5).
    pub database_blocking: Option<PathScenario>,
    /// R2's three template jobs on each engine.
    pub templates: Option<PathScenario>,
    /// R2.3's page of cached blocks merged into JSON.
    pub blocks: Option<PathScenario>,
    /// R4's view (an HTML string) over a sweep of connection counts.
    pub view: Option<PathScenario>,
    /// R4's login page: template cache on and off × keep-alive on and off.
    pub login_page: Option<PathScenario>,
    /// R4's admin dashboard (signed in: a session check, queries, a template) by pool size.
    pub dashboard: Option<PathScenario>,
    /// R4's HTTP client modes: one connection per call, a reused one, several calls at once.
    pub http_client: Option<PathScenario>,
}

/// A single-point HTTP scenario.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HttpScenario {
    /// Connections (default: `settings.connections`).
    pub connections: Option<usize>,
    /// Repetitions (default: `settings.reps`).
    pub reps: Option<usize>,
}

/// A sweep over connection counts.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SweepScenario {
    /// Connection counts.
    pub points: Vec<usize>,
    /// Connection counts with `--quick` (default: `points`).
    pub quick_points: Option<Vec<usize>>,
    /// Repetitions (default: `settings.reps`).
    pub reps: Option<usize>,
}

/// Worker-process scaling.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WorkersScenario {
    /// Worker counts; the first must be 1 (the single-unit baseline).
    pub points: Vec<usize>,
    /// Connections (default: `settings.connections`).
    pub connections: Option<usize>,
    /// Target CPUs for this scenario (default: `settings.target_cpus`).
    pub target_cpus: Option<String>,
    /// Load CPUs for this scenario (default: `settings.load_cpus`).
    pub load_cpus: Option<String>,
    /// Repetitions (default: `settings.reps`).
    pub reps: Option<usize>,
}

/// Static files by size.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StaticScenario {
    /// Sizes such as `1KB`, `100KB`, `1MB`.
    pub sizes: Vec<String>,
    /// Sizes with `--quick` (default: `sizes`).
    pub quick_sizes: Option<Vec<String>>,
    /// Connections (default: `settings.connections`).
    pub connections: Option<usize>,
    /// Repetitions (default: `settings.reps`).
    pub reps: Option<usize>,
}

/// Idle WebSocket connections.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WsIdleScenario {
    /// Connection counts.
    pub points: Vec<usize>,
    /// Connection counts with `--quick` (default: `points`).
    pub quick_points: Option<Vec<usize>>,
    /// How long the connections are held once open.
    #[serde(default = "default_hold")]
    pub hold: String,
    /// Connection attempts per second (default: all at once).
    pub ramp: Option<f64>,
    /// Client source addresses (`127.0.0.1-127.0.0.4`).
    pub source_ips: Option<String>,
    /// Repetitions (default: `settings.reps`).
    pub reps: Option<usize>,
}

fn default_hold() -> String {
    "3s".into()
}

/// WebSocket broadcast.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WsBroadcastScenario {
    /// Receiver counts.
    pub points: Vec<usize>,
    /// Receiver counts with `--quick` (default: `points`).
    pub quick_points: Option<Vec<usize>>,
    /// Messages per second published by the sender.
    pub rate: f64,
    /// At most this many deliveries per second over all receivers: with N receivers the
    /// sender publishes `min(rate, max_deliveries / N)` messages per second, so that a point
    /// measures the target rather than the one-core load generator (unset: no cap).
    pub max_deliveries: Option<f64>,
    /// Message size in bytes (>= 16).
    #[serde(default = "default_size")]
    pub size: usize,
    /// Connection attempts per second (default: all at once).
    pub ramp: Option<f64>,
    /// Client source addresses.
    pub source_ips: Option<String>,
    /// Repetitions (default: `settings.reps`).
    pub reps: Option<usize>,
}

fn default_size() -> usize {
    64
}

impl WsBroadcastScenario {
    /// Messages per second the sender publishes to `receivers` receivers.
    ///
    /// ```
    /// # use brisk_bench::suite::config::SuiteConfig;
    /// let text = "[targets.t]\ndescription = \"d\"\ncommand = [\"true\"]\nport = 1\n\
    ///             [scenarios.ws_broadcast]\npoints = [1000]\nrate = 50.0\nmax_deliveries = 50000.0\n";
    /// let s = SuiteConfig::parse(text, "suite.toml").unwrap().scenarios.ws_broadcast.unwrap();
    /// assert_eq!(s.sender_rate(1_000), 50.0);
    /// assert_eq!(s.sender_rate(10_000), 5.0);
    /// ```
    pub fn sender_rate(&self, receivers: usize) -> f64 {
        match self.max_deliveries {
            Some(cap) if receivers > 0 => self.rate.min(cap / receivers as f64),
            _ => self.rate,
        }
    }
}

/// The generator check.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GeneratorCheck {
    /// The target serving `return 200` (normally `nginx`).
    pub target: String,
    /// Connections (default: `settings.connections`).
    pub connections: Option<usize>,
    /// Repetitions (default: `settings.reps`).
    pub reps: Option<usize>,
}

/// HTTP load on application endpoints: every combination of `paths`, `workers`,
/// `connections`, `keep_alive` and `db_pool` is one point, each target measured in turn; the
/// database, when one is named, started once for the scenario.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PathScenario {
    /// The database server (a key of `[databases]`), if the scenario needs one.
    pub database: Option<String>,
    /// Request paths, e.g. `/db` or `/queries?queries=20`.
    pub paths: Vec<String>,
    /// Paths with `--quick` (default: `paths`).
    pub quick_paths: Option<Vec<String>>,
    /// Worker processes (default: `settings.workers`).
    pub workers: Option<Vec<usize>>,
    /// Connections (default: `settings.connections`).
    pub connections: Option<Vec<usize>>,
    /// Only these targets (default: every selected target).
    pub targets: Option<Vec<String>>,
    /// Repetitions (default: `settings.reps`).
    pub reps: Option<usize>,
    /// Keep-alive on, off, or both as two points (default: on).
    pub keep_alive: Option<Vec<bool>>,
    /// Database connections per worker, given to each target as `DB_POOL` (default: the
    /// target's own).
    pub db_pool: Option<Vec<usize>>,
    /// Time the first request after each start ("first call", before the warm-up).
    #[serde(default)]
    pub first_call: bool,
    /// Sign in after each start and send the session cookie with every request.
    pub login: Option<LoginConfig>,
}

/// How the lab signs in to a target: it gets `form_path` (keeping its cookie and the
/// `csrf` hidden field), then posts `form` plus `csrf` to `post_path`, and sends the cookie
/// that answer sets with every request of the scenario.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LoginConfig {
    /// The page with the sign-in form, e.g. `/admin`.
    pub form_path: String,
    /// Where the form is posted, e.g. `/admin/login`.
    pub post_path: String,
    /// The form's fields, urlencoded, e.g. `user=admin&password={lab_password}` (the run's
    /// password, whose hash `{lab_password_hash_file}` gives the target).
    pub form: String,
}

impl SuiteConfig {
    /// Reads and validates the configuration at `path`.
    pub fn load(path: &Path) -> Result<SuiteConfig, BenchError> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| BenchError::io(format!("cannot read {}", path.display()), e))?;
        Self::parse(&text, &path.display().to_string())
    }

    /// Parses and validates configuration text; `origin` names it in errors.
    pub fn parse(text: &str, origin: &str) -> Result<SuiteConfig, BenchError> {
        let config: SuiteConfig = toml::from_str(text).map_err(|e| {
            BenchError::Config(format!("{origin}: {}", e.message().trim_end_matches('\n')))
        })?;
        config.validate(origin)?;
        Ok(config)
    }

    fn validate(&self, origin: &str) -> Result<(), BenchError> {
        let bad = |msg: String| Err(BenchError::Config(format!("{origin}: {msg}")));
        for (name, target) in &self.targets {
            if target.command.is_empty() {
                return bad(format!("target \"{name}\" has an empty command"));
            }
            let listed = target.unsupported.iter().map(|s| ("unsupported", s));
            let only = target.only.iter().flatten().map(|s| ("only", s));
            for (key, s) in listed.chain(only) {
                if !SCENARIO_NAMES.contains(&s.as_str()) {
                    return bad(format!(
                        "target \"{name}\" lists unknown scenario \"{s}\" in {key} (known: {})",
                        SCENARIO_NAMES.join(", ")
                    ));
                }
            }
        }
        for (name, s) in self.path_scenarios() {
            let database = s.database.as_deref();
            if let Some(database) = database.filter(|d| !self.databases.contains_key(*d)) {
                return bad(format!(
                    "scenario \"{name}\" names unknown database \"{database}\" (configured: {})",
                    self.databases
                        .keys()
                        .cloned()
                        .collect::<Vec<_>>()
                        .join(", ")
                ));
            }
            for t in s.targets.iter().flatten() {
                if !self.targets.contains_key(t) {
                    return bad(format!("scenario \"{name}\" names unknown target \"{t}\""));
                }
            }
            if s.paths.is_empty() {
                return bad(format!("scenario \"{name}\" has no paths"));
            }
        }
        for (name, db) in &self.databases {
            parse_duration(&db.start_timeout)
                .map_err(|e| BenchError::Config(format!("{origin}: database \"{name}\": {e}")))?;
            if let Some(cpus) = &db.cpus {
                parse_cpu_list(cpus).map_err(|e| {
                    BenchError::Config(format!("{origin}: database \"{name}\": {e}"))
                })?;
            }
        }
        if let Some(check) = &self.scenarios.generator_check {
            if !self.targets.contains_key(&check.target) {
                return bad(format!(
                    "the generator check names unknown target \"{}\"",
                    check.target
                ));
            }
        }
        if let Some(w) = &self.scenarios.workers {
            if w.points.first() != Some(&1) {
                return bad("the workers scenario must start with 1 worker (the baseline)".into());
            }
        }
        for d in [
            &self.settings.duration,
            &self.settings.warmup,
            &self.settings.quick_duration,
            &self.settings.start_timeout,
            &self.settings.stop_timeout,
            &self.settings.sample_interval,
        ] {
            parse_duration(d).map_err(|e| BenchError::Config(format!("{origin}: {e}")))?;
        }
        for cpus in [&self.settings.target_cpus, &self.settings.load_cpus] {
            parse_cpu_list(cpus).map_err(|e| BenchError::Config(format!("{origin}: {e}")))?;
        }
        if let Some(b) = &self.scenarios.ws_broadcast {
            if !(b.rate > 0.0 && b.max_deliveries.is_none_or(|cap| cap > 0.0)) {
                return bad("ws_broadcast: rate and max_deliveries must be above 0".into());
            }
        }
        if let Some(s) = &self.scenarios.static_files {
            for size in s.sizes.iter().chain(s.quick_sizes.iter().flatten()) {
                parse_size(size).map_err(|e| BenchError::Config(format!("{origin}: {e}")))?;
            }
        }
        Ok(())
    }

    /// The configured database scenarios with their names.
    pub fn path_scenarios(&self) -> Vec<(&'static str, &PathScenario)> {
        let s = &self.scenarios;
        [
            ("database", &s.database),
            ("database_mysql", &s.database_mysql),
            ("database_orm", &s.database_orm),
            ("database_blocking", &s.database_blocking),
            ("templates", &s.templates),
            ("blocks", &s.blocks),
            ("view", &s.view),
            ("login_page", &s.login_page),
            ("dashboard", &s.dashboard),
            ("http_client", &s.http_client),
        ]
        .into_iter()
        .filter_map(|(n, s)| s.as_ref().map(|s| (n, s)))
        .collect()
    }

    /// The targets to run: all of them, or the named ones (each must exist).
    pub fn select_targets(&self, names: Option<&[String]>) -> Result<Vec<String>, BenchError> {
        match names {
            None => Ok(self.targets.keys().cloned().collect()),
            Some(names) => {
                for n in names {
                    if !self.targets.contains_key(n) {
                        return Err(BenchError::Config(format!(
                            "unknown target \"{n}\" (configured: {})",
                            self.targets.keys().cloned().collect::<Vec<_>>().join(", ")
                        )));
                    }
                }
                Ok(names.to_vec())
            }
        }
    }
}

/// Parses a CPU list such as `0`, `0-1` or `0,2-3`.
pub fn parse_cpu_list(text: &str) -> Result<Vec<usize>, BenchError> {
    let bad = || BenchError::InvalidArgument(format!("the CPU list \"{text}\" is not valid"));
    let mut cpus = Vec::new();
    for part in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        match part.split_once('-') {
            Some((a, b)) => {
                let a: usize = a.trim().parse().map_err(|_| bad())?;
                let b: usize = b.trim().parse().map_err(|_| bad())?;
                if a > b {
                    return Err(bad());
                }
                cpus.extend(a..=b);
            }
            None => cpus.push(part.parse().map_err(|_| bad())?),
        }
    }
    if cpus.is_empty() {
        return Err(bad());
    }
    Ok(cpus)
}

/// Parses a size such as `1KB`, `100KB`, `10MB`, `512` (bytes; K = 1024).
pub fn parse_size(text: &str) -> Result<u64, BenchError> {
    let t = text.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (n, unit) = t.split_at(split);
    let n: u64 = n
        .parse()
        .map_err(|_| BenchError::InvalidArgument(format!("the size \"{text}\" is not valid")))?;
    let mult = match unit.trim().to_ascii_uppercase().as_str() {
        "" | "B" => 1,
        "K" | "KB" | "KIB" => 1024,
        "M" | "MB" | "MIB" => 1024 * 1024,
        "G" | "GB" | "GIB" => 1024 * 1024 * 1024,
        _ => {
            return Err(BenchError::InvalidArgument(format!(
                "the size \"{text}\" is not valid (examples: 1KB, 10MB)"
            )))
        }
    };
    Ok(n * mult)
}

/// Run-time durations derived from the settings.
#[derive(Clone, Copy, Debug)]
pub struct Timing {
    /// One measured run.
    pub duration: Duration,
    /// The discarded warm-up run.
    pub warmup: Duration,
    /// Readiness wait.
    pub start_timeout: Duration,
    /// SIGTERM to SIGKILL.
    pub stop_timeout: Duration,
    /// Sampler interval.
    pub sample_interval: Duration,
}

impl Settings {
    /// The durations, shortened with `quick`.
    pub fn timing(&self, quick: bool) -> Timing {
        let d = |s: &str| parse_duration(s).unwrap_or(Duration::from_secs(1));
        Timing {
            duration: if quick {
                d(&self.quick_duration)
            } else {
                d(&self.duration)
            },
            warmup: if quick {
                d(&self.warmup).min(Duration::from_millis(500))
            } else {
                d(&self.warmup)
            },
            start_timeout: d(&self.start_timeout),
            stop_timeout: d(&self.stop_timeout),
            sample_interval: d(&self.sample_interval),
        }
    }
}

/// Expands `{name}` placeholders in `text` from `vars`.
pub fn expand(text: &str, vars: &[(&str, String)]) -> String {
    let mut out = text.to_string();
    for (k, v) in vars {
        out = out.replace(&format!("{{{k}}}"), v);
    }
    out
}

/// The directory holding the config file and the repository above it.
pub fn config_dirs(path: &Path) -> (PathBuf, PathBuf) {
    let abs = std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf());
    let bench = abs
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from("."));
    let repo = bench
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_else(|| bench.clone());
    (bench, repo)
}
