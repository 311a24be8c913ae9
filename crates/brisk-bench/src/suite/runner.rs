//! Running the suite: for each scenario and point, start the targets, wait
//! until they answer, warm up, run K repetitions with the in-process
//! generators while sampling each target's CPU and RSS, stop them, and
//! turn the runs into report rows. HTTP points take the targets in turn
//! (see `http_turns`); WebSocket points run one target after another.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::error::BenchError;
use crate::fd_limit::raise_fd_limit;
use crate::http::{run_http, HttpConfig, RequestSpec};
use crate::report::HttpReport;
use crate::suite::config::{
    config_dirs, expand, parse_cpu_list, parse_size, LoginConfig, SuiteConfig, Timing,
    SCENARIO_NAMES,
};
use crate::suite::environment;
use crate::suite::measure::Runs;
use crate::suite::model::{Header, Latency, Outcome, Row, ScenarioResult, SuiteReport, TargetInfo};
use crate::suite::process::{command_line_output, pin_current_thread, Running, StartSpec};
use crate::suite::progress::Progress;
use crate::suite::stats::{efficiency, median_index, paired_ratio, spread};
use crate::target::{Scheme, Target};
use crate::ws::{parse_source_ips, WsConfig};

/// What `brisk-bench suite` was asked to do.
#[derive(Clone, Debug)]
pub struct SuiteOptions {
    /// The configuration file.
    pub config: PathBuf,
    /// Targets to run (default: all configured).
    pub targets: Option<Vec<String>>,
    /// Scenarios to run (default: every configured one).
    pub scenarios: Option<Vec<String>>,
    /// Output directory (default: `bench/results/run-TIMESTAMP` next to the config).
    pub out: Option<PathBuf>,
    /// Repetitions per point (overrides the config).
    pub reps: Option<usize>,
    /// Short runs (`settings.quick_duration`, 3 reps unless `reps` is given, `quick_points`).
    pub quick: bool,
    /// Length of one measured run (overrides the config and `quick`).
    pub duration: Option<Duration>,
    /// Show progress on stderr.
    pub progress: bool,
    /// A sentence for the report header (overrides `settings.note`).
    pub note: Option<String>,
    /// The command line, recorded in the report.
    pub command_line: String,
}

/// A finished suite run.
#[derive(Debug)]
pub struct SuiteOutcome {
    /// The report (also written to `out_dir`).
    pub report: SuiteReport,
    /// Where the report files are.
    pub out_dir: PathBuf,
    /// One sentence per target that could not be started.
    pub failures: Vec<String>,
}

/// Runs the suite and writes `report.json`, `report.md` and `report.html`.
pub fn run_suite(opts: &SuiteOptions) -> Result<SuiteOutcome, BenchError> {
    let config = SuiteConfig::load(&opts.config)?;
    let targets = config.select_targets(opts.targets.as_deref())?;
    let scenarios = select_scenarios(opts.scenarios.as_deref())?;
    let (bench_dir, repo) = config_dirs(&opts.config);
    let (started, stamp) = environment::timestamps();
    let out_dir = opts
        .out
        .clone()
        .unwrap_or_else(|| bench_dir.join("results").join(format!("run-{stamp}")));
    std::fs::create_dir_all(&out_dir)
        .map_err(|e| BenchError::io(format!("cannot create {}", out_dir.display()), e))?;
    // Absolute, since targets run in other working directories.
    let out_dir = std::fs::canonicalize(&out_dir)
        .map_err(|e| BenchError::io(format!("cannot resolve {}", out_dir.display()), e))?;
    let work = out_dir.join("work");
    std::fs::create_dir_all(work.join("logs"))
        .map_err(|e| BenchError::io(format!("cannot create {}", work.display()), e))?;
    let static_dir =
        std::env::temp_dir().join(format!("brisk-bench-static-{}-{stamp}", std::process::id()));
    std::fs::create_dir_all(&static_dir)
        .map_err(|e| BenchError::io(format!("cannot create {}", static_dir.display()), e))?;
    raise_fd_limit();
    let load_cpus = usable_cpus(parse_cpu_list(&config.settings.load_cpus)?);
    pin_current_thread(&load_cpus)?;

    let quick = opts.quick;
    let reps = opts
        .reps
        .unwrap_or(if quick { 3 } else { config.settings.reps })
        .max(1);
    let mut timing = config.settings.timing(quick);
    if let Some(d) = opts.duration {
        timing.duration = d;
    }
    let password = super::lab_password::LabPassword::new(&work).map_err(BenchError::Config)?;
    let mut lab = Lab {
        config: &config,
        targets,
        scenarios,
        timing,
        reps_override: opts.reps,
        default_reps: reps,
        quick,
        bench_dir: bench_dir.clone(),
        repo: repo.clone(),
        work,
        static_dir: static_dir.clone(),
        progress: Progress::new(0, opts.progress),
        failures: Vec::new(),
        failed_targets: BTreeSet::new(),
        load_cpus,
        target_cpus: usable_cpus(parse_cpu_list(&config.settings.target_cpus)?),
        launches: 0,
        database_url: None,
        point_env: Vec::new(),
        password,
    };
    lab.progress = Progress::new(lab.count_steps(), opts.progress);
    let mut header = lab.header(started, opts.command_line.clone(), reps);
    if opts.note.is_some() {
        header.note = opts.note.clone();
    }
    let scenarios = lab.run_all();
    let _ = std::fs::remove_dir_all(&static_dir);
    let report = SuiteReport { header, scenarios };
    crate::suite::write_reports(&report, &out_dir)?;
    Ok(SuiteOutcome {
        report,
        out_dir,
        failures: lab.failures,
    })
}

/// Keeps the CPUs that exist on this machine; all of them when none does
/// (so a config written for 2 cores still runs on 1).
pub(super) fn usable_cpus(cpus: Vec<usize>) -> Vec<usize> {
    let online = environment::cpu_count();
    let kept: Vec<usize> = cpus.into_iter().filter(|&c| c < online).collect();
    if kept.is_empty() {
        (0..online).collect()
    } else {
        kept
    }
}

/// The state of one suite run.
pub(super) struct Lab<'a> {
    pub(super) config: &'a SuiteConfig,
    pub(super) targets: Vec<String>,
    pub(super) scenarios: Vec<&'static str>,
    pub(super) timing: Timing,
    pub(super) reps_override: Option<usize>,
    pub(super) default_reps: usize,
    pub(super) quick: bool,
    pub(super) bench_dir: PathBuf,
    pub(super) repo: PathBuf,
    pub(super) work: PathBuf,
    pub(super) static_dir: PathBuf,
    pub(super) progress: Progress,
    pub(super) failures: Vec<String>,
    pub(super) failed_targets: BTreeSet<String>,
    pub(super) load_cpus: Vec<usize>,
    pub(super) target_cpus: Vec<usize>,
    pub(super) launches: usize,
    /// While a database scenario runs: its database's URL, given to every
    /// target it starts as `DATABASE_URL`.
    pub(super) database_url: Option<String>,
    /// While a point that sets them starts its targets: more environment for them.
    pub(super) point_env: Vec<(String, String)>,
    /// The run's sign-in password (`{lab_password}`, `{lab_password_hash_file}`).
    pub(super) password: super::lab_password::LabPassword,
}

/// The HTTP load of one point and how the target runs for it.
pub(super) struct HttpLoad {
    /// Path (and query) requested.
    pub(super) path: String,
    /// Concurrent connections.
    pub(super) connections: usize,
    /// Keep-alive on; off opens a new connection per request.
    pub(super) keep_alive: bool,
    /// Target worker processes.
    pub(super) workers: usize,
    /// CPUs the target runs on.
    pub(super) cpus: Vec<usize>,
    /// What the path scenarios add: environment, a sign-in, the first call.
    pub(super) extra: LoadExtras,
}

/// The parts of an HTTP load that only some scenarios use.
#[derive(Clone, Debug, Default)]
pub(super) struct LoadExtras {
    /// Environment for the target's start (e.g. `DB_POOL`).
    pub(super) env: Vec<(String, String)>,
    /// Sign in after the start and send the session cookie.
    pub(super) login: Option<LoginConfig>,
    /// Time the first request after the start.
    pub(super) first_call: bool,
}

/// `config` for a run of `duration`.
pub(super) fn for_duration(config: &HttpConfig, duration: Duration) -> HttpConfig {
    let mut config = config.clone();
    config.duration = Some(duration);
    config
}

/// The row of a point of `n` WebSocket connections when they need more
/// descriptors than the open-file hard limit `hard` (named `limit` in the
/// row's reason) allows.
pub(super) fn beyond_fd_limit(
    target: &str,
    point: &str,
    n: usize,
    hard: u64,
    limit: &str,
) -> Option<Row> {
    (n as u64 + 64 > hard).then(|| {
        Row::empty(
            target,
            point,
            n as f64,
            Outcome::NotYetMeasured(format!(
                "{n} connections need more descriptors than {limit} ({hard})"
            )),
        )
    })
}

/// The scenarios named in `wanted` (all of them when `None`), in the
/// suite's order; an unknown name is an error that lists the known ones.
fn select_scenarios(wanted: Option<&[String]>) -> Result<Vec<&'static str>, BenchError> {
    let Some(wanted) = wanted else {
        return Ok(SCENARIO_NAMES.to_vec());
    };
    if let Some(unknown) = wanted
        .iter()
        .find(|w| !SCENARIO_NAMES.contains(&w.as_str()))
    {
        return Err(BenchError::Config(format!(
            "unknown scenario \"{unknown}\" (known: {})",
            SCENARIO_NAMES.join(", ")
        )));
    }
    Ok(SCENARIO_NAMES
        .into_iter()
        .filter(|n| wanted.iter().any(|w| w == n))
        .collect())
}

/// How the HTTP scenarios order their runs, for their method lines.
const TURNS: &str = "targets in turn at each point (order reversed every run)";

pub(super) fn pick<T: Clone>(points: &[T], quick_points: &Option<Vec<T>>, quick: bool) -> Vec<T> {
    match (quick, quick_points) {
        (true, Some(q)) => q.clone(),
        _ => points.to_vec(),
    }
}

impl Lab<'_> {
    pub(super) fn reps(&self, scenario: Option<usize>) -> usize {
        self.reps_override
            .or(if self.quick { None } else { scenario })
            .unwrap_or(self.default_reps)
            .max(1)
    }

    fn points_of(&self, name: &str) -> usize {
        let s = &self.config.scenarios;
        let q = self.quick;
        match name {
            "generator_check" => usize::from(s.generator_check.is_some()),
            "hello_keepalive" => usize::from(s.hello_keepalive.is_some()),
            "hello_close" => usize::from(s.hello_close.is_some()),
            "connections" => s
                .connections
                .as_ref()
                .map_or(0, |c| pick(&c.points, &c.quick_points, q).len()),
            "workers" => s.workers.as_ref().map_or(0, |w| w.points.len()),
            "static_files" => s
                .static_files
                .as_ref()
                .map_or(0, |f| pick(&f.sizes, &f.quick_sizes, q).len()),
            "ws_idle" => s
                .ws_idle
                .as_ref()
                .map_or(0, |w| pick(&w.points, &w.quick_points, q).len()),
            "ws_broadcast" => s
                .ws_broadcast
                .as_ref()
                .map_or(0, |w| pick(&w.points, &w.quick_points, q).len()),
            _ => self
                .config
                .path_scenarios()
                .into_iter()
                .find(|(n, _)| *n == name)
                .map_or(0, |(_, s)| self.path_points(s).len()),
        }
    }

    fn count_steps(&self) -> usize {
        self.scenarios
            .iter()
            .map(|n| {
                let per_target = self.points_of(n);
                if *n == "generator_check" {
                    per_target
                } else {
                    per_target * self.scenario_targets(n).len()
                }
            })
            .sum()
    }

    fn header(&self, started: String, command: String, reps: usize) -> Header {
        let tools = environment::tool_versions(&self.repo);
        let targets = self
            .targets
            .iter()
            .map(|name| {
                let t = &self.config.targets[name];
                TargetInfo {
                    name: name.clone(),
                    description: t.description.clone(),
                    version: t
                        .version
                        .as_ref()
                        .and_then(|v| command_line_output(v, &self.repo)),
                    command: t.command.join(" "),
                }
            })
            .collect();
        Header {
            started,
            command,
            cpu_model: environment::cpu_model(),
            cpus: environment::cpu_count(),
            kernel: environment::kernel(),
            target_cpus: self.config.settings.target_cpus.clone(),
            load_cpus: self.config.settings.load_cpus.clone(),
            reps,
            duration_s: self.timing.duration.as_secs_f64(),
            warmup_s: self.timing.warmup.as_secs_f64(),
            quick: self.quick,
            note: self.config.settings.note.clone(),
            tools,
            targets,
        }
    }

    fn run_all(&mut self) -> Vec<ScenarioResult> {
        let mut out = Vec::new();
        for name in self.scenarios.clone() {
            let result = match name {
                "generator_check" => self.generator_check(),
                "hello_keepalive" | "hello_close" => self.hello(name),
                "connections" => self.connections(),
                "workers" => self.workers(),
                "static_files" => self.static_files(),
                "ws_idle" => self.ws_idle(),
                "ws_broadcast" => self.ws_broadcast(),
                _ => self.path_scenario(name),
            };
            if let Some(r) = result {
                out.push(r);
            }
        }
        out
    }

    /// The selected targets that take part in `scenario`: not those whose
    /// `only` list leaves it out, and for a database scenario with a
    /// `targets` list, only those.
    pub(super) fn scenario_targets(&self, scenario: &str) -> Vec<String> {
        let listed = self
            .config
            .path_scenarios()
            .into_iter()
            .find(|(n, _)| *n == scenario)
            .and_then(|(_, s)| s.targets.clone());
        self.targets
            .iter()
            .filter(|t| {
                let only = &self.config.targets[t.as_str()].only;
                only.as_ref()
                    .is_none_or(|o| o.iter().any(|s| s == scenario))
            })
            .filter(|t| listed.as_ref().is_none_or(|l| l.contains(t)))
            .cloned()
            .collect()
    }

    /// The row for a target that cannot run this scenario, if any.
    pub(super) fn skip_row(&self, scenario: &str, target: &str) -> Option<Row> {
        let t = &self.config.targets[target];
        if t.unsupported.iter().any(|s| s == scenario) {
            return Some(Row::empty(target, "all points", 0.0, Outcome::NotSupported));
        }
        None
    }

    pub(super) fn start(
        &mut self,
        target: &str,
        workers: usize,
        cpus: &[usize],
    ) -> Result<Running, String> {
        if self.failed_targets.contains(target) {
            return Err("the target did not start earlier in this run".into());
        }
        self.launches += 1;
        let t = &self.config.targets[target];
        for port in [Some(t.port), t.ws_port].into_iter().flatten() {
            let addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
            if std::net::TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_ok() {
                let msg = format!(
                    "The target \"{target}\" was not started: port {port} is already in use by another process."
                );
                self.failed_targets.insert(target.to_string());
                self.failures.push(msg.clone());
                return Err(msg);
            }
        }
        let run_dir = self
            .work
            .join("run")
            .join(format!("{target}-{}", self.launches));
        let _ = std::fs::create_dir_all(&run_dir);
        let vars = [
            ("workers", workers.to_string()),
            ("port", t.port.to_string()),
            ("ws_port", t.ws_port.unwrap_or(t.port).to_string()),
            ("static_dir", self.static_dir.display().to_string()),
            ("run_dir", run_dir.display().to_string()),
            ("bench_dir", self.bench_dir.display().to_string()),
            ("repo", self.repo.display().to_string()),
            (
                "lab_password_hash_file",
                self.password.hash_file.display().to_string(),
            ),
        ];
        let spec = StartSpec {
            name: target.to_string(),
            argv: t.command.iter().map(|a| expand(a, &vars)).collect(),
            cwd: t
                .cwd
                .as_ref()
                .map(|c| PathBuf::from(expand(c, &vars)))
                .unwrap_or_else(|| self.repo.clone()),
            env: t
                .env
                .iter()
                .map(|(k, v)| (k.clone(), expand(v, &vars)))
                .chain(
                    self.database_url
                        .iter()
                        .map(|url| ("DATABASE_URL".to_string(), url.clone())),
                )
                .chain(self.point_env.iter().cloned())
                .collect(),
            cpus: cpus.to_vec(),
            log: self
                .work
                .join("logs")
                .join(format!("{target}-{}.log", self.launches)),
        };
        let result = Running::start(&spec, self.timing.stop_timeout).and_then(|mut running| {
            let addr = ([127, 0, 0, 1], t.port).into();
            running.wait_ready(addr, t.ready, &t.ready_path, self.timing.start_timeout)?;
            Ok(running)
        });
        result.map_err(|e| {
            let msg = e.to_string();
            self.failed_targets.insert(target.to_string());
            self.failures.push(msg.clone());
            msg
        })
    }

    /// Starts `target` with the configured workers on the target CPUs.
    pub(super) fn start_default(&mut self, target: &str) -> Result<Running, String> {
        let cpus = self.target_cpus.clone();
        self.start(target, self.config.settings.workers, &cpus)
    }

    /// HTTP load on `path` of `target` with `connections` connections.
    pub(super) fn http_config(
        &self,
        target: &str,
        path: &str,
        connections: usize,
        keep_alive: bool,
    ) -> Result<HttpConfig, String> {
        let port = self.config.targets[target].port;
        let url = Target::parse(&format!("http://127.0.0.1:{port}{path}"), Scheme::Http)
            .map_err(|e| e.to_string())?;
        let mut config = HttpConfig::new(url);
        config.connections = connections;
        config.threads = self.config.settings.load_threads.max(1);
        config.request = RequestSpec {
            keep_alive,
            ..RequestSpec::default()
        };
        Ok(config)
    }

    /// WebSocket load on `path` of `target` with `n` connections.
    pub(super) fn ws_config(
        &self,
        target: &str,
        path: &str,
        n: usize,
        ramp: Option<f64>,
        ips: &Option<String>,
    ) -> Result<WsConfig, String> {
        let t = &self.config.targets[target];
        let port = t.ws_port.unwrap_or(t.port);
        let url = Target::parse(&format!("ws://127.0.0.1:{port}{path}"), Scheme::Ws)
            .map_err(|e| e.to_string())?;
        let mut config = WsConfig::new(url);
        config.connections = n;
        config.ramp = ramp;
        config.threads = self.config.settings.load_threads.max(1);
        config.timeout = Duration::from_secs(10);
        if let Some(ips) = ips {
            config.source_ips = parse_source_ips(ips).map_err(|e| e.to_string())?;
        }
        Ok(config)
    }

    /// The rows of one scenario: for each selected target, the row
    /// `measure` gives at each point, or the target's skip row when it
    /// does not support `scenario`. `progress` names a point in the
    /// progress line.
    pub(super) fn sweep<P>(
        &mut self,
        scenario: &str,
        points: &[P],
        progress: impl Fn(&P) -> String,
        mut measure: impl FnMut(&mut Self, &str, &P) -> Row,
    ) -> Vec<Row> {
        let mut rows = Vec::new();
        for target in self.scenario_targets(scenario) {
            for point in points {
                self.progress
                    .show(&format!("{scenario}: {target}, {}", progress(point)));
                let row = match self.skip_row(scenario, &target) {
                    Some(r) => r,
                    None => measure(self, &target, point),
                };
                rows.push(row);
                self.progress.step();
            }
        }
        rows
    }

    pub(super) fn http_row(
        &self,
        target: &str,
        point: &str,
        x: f64,
        runs: &Runs<HttpReport>,
    ) -> Row {
        let (mut row, median) = runs.row(target, point, x, |r| r.rps);
        if let Some(i) = median {
            if runs.reports[i].latency_us.count > 0 {
                row.latency_ms = Some(Latency::from_micros(&runs.reports[i].latency_us));
            }
        }
        row.errors = Some(runs.reports.iter().map(|r| r.errors.total).sum());
        row.error_kinds = error_kinds(&runs.reports);
        row
    }

    /// The load of an HTTP point with the configured workers on the target CPUs.
    fn http_load(&self, path: String, connections: usize, keep_alive: bool) -> HttpLoad {
        HttpLoad {
            path,
            connections,
            keep_alive,
            workers: self.config.settings.workers,
            cpus: self.target_cpus.clone(),
            extra: LoadExtras::default(),
        }
    }

    fn hello(&mut self, name: &str) -> Option<ScenarioResult> {
        let keep_alive = name == "hello_keepalive";
        let s = if keep_alive {
            self.config.scenarios.hello_keepalive.clone()?
        } else {
            self.config.scenarios.hello_close.clone()?
        };
        let conns = s.connections.unwrap_or(self.config.settings.connections);
        let reps = self.reps(s.reps);
        let workers = self.config.settings.workers;
        let rows = self.http_sweep(
            name,
            &[conns],
            |&c| (format!("{c} connections"), c as f64),
            |lab, target, &c| {
                let path = lab.config.targets[target].paths.hello.clone();
                Ok(lab.http_load(path, c, keep_alive))
            },
            reps,
        );
        Some(ScenarioResult {
            name: name.into(),
            title: if keep_alive {
                "Hello World, keep-alive on".into()
            } else {
                "Hello World, keep-alive off (new connection per request)".into()
            },
            mirrors: if keep_alive { "R1.1, R3" } else { "R3" }.into(),
            x_label: "connections".into(),
            method: format!(
                "GET / with {conns} connections, {} worker(s), {reps} runs of {:.0?} after a {:.0?} warm-up, {TURNS}",
                workers, self.timing.duration, self.timing.warmup
            ),
            rows,
        })
    }

    fn connections(&mut self) -> Option<ScenarioResult> {
        let s = self.config.scenarios.connections.clone()?;
        let points = pick(&s.points, &s.quick_points, self.quick);
        let reps = self.reps(s.reps);
        let workers = self.config.settings.workers;
        let rows = self.http_sweep(
            "connections",
            &points,
            |&c| (format!("{c}"), c as f64),
            |lab, target, &c| {
                let path = lab.config.targets[target].paths.hello.clone();
                Ok(lab.http_load(path, c, true))
            },
            reps,
        );
        Some(ScenarioResult {
            name: "connections".into(),
            title: "Connection sweep, keep-alive".into(),
            mirrors: "R4".into(),
            x_label: "connections".into(),
            method: format!(
                "GET / at each connection count, {workers} worker(s), {reps} runs of {:.0?}, {TURNS}",
                self.timing.duration
            ),
            rows,
        })
    }

    fn workers(&mut self) -> Option<ScenarioResult> {
        let s = self.config.scenarios.workers.clone()?;
        let conns = s.connections.unwrap_or(self.config.settings.connections);
        let reps = self.reps(s.reps);
        let tcpus_text = s
            .target_cpus
            .clone()
            .unwrap_or_else(|| self.config.settings.target_cpus.clone());
        let lcpus_text = s
            .load_cpus
            .clone()
            .unwrap_or_else(|| self.config.settings.load_cpus.clone());
        let tcpus = parse_cpu_list(&tcpus_text)
            .map(usable_cpus)
            .unwrap_or_else(|_| self.target_cpus.clone());
        let lcpus = parse_cpu_list(&lcpus_text)
            .map(usable_cpus)
            .unwrap_or_else(|_| self.load_cpus.clone());
        let _ = pin_current_thread(&lcpus);
        let mut rows = self.http_sweep(
            "workers",
            &s.points,
            |&n| (format!("{n} worker(s)"), n as f64),
            |lab, target, &n| {
                Ok(HttpLoad {
                    path: lab.config.targets[target].paths.hello.clone(),
                    connections: conns,
                    keep_alive: true,
                    workers: n,
                    cpus: tcpus.clone(),
                    extra: LoadExtras::default(),
                })
            },
            reps,
        );
        // The rows of each target, in point order: the first is the single worker.
        for target_rows in rows.chunks_mut(s.points.len().max(1)) {
            let single = target_rows[0].rate.map(|r| r.median);
            for row in target_rows.iter_mut() {
                if let (Some(single), Some(rate)) = (single, row.rate) {
                    row.efficiency = efficiency(rate.median, row.x as usize, single);
                }
            }
        }
        let _ = pin_current_thread(&self.load_cpus);
        Some(ScenarioResult {
            name: "workers".into(),
            title: "Worker-process scaling".into(),
            mirrors: "R1.7".into(),
            x_label: "workers".into(),
            method: format!(
                "GET / with {conns} connections; target on CPUs {tcpus_text}, load on CPUs {lcpus_text}; efficiency = rate / (N × single-worker rate); {reps} runs of {:.0?}, {TURNS}",
                self.timing.duration
            ),
            rows,
        })
    }

    fn static_files(&mut self) -> Option<ScenarioResult> {
        let s = self.config.scenarios.static_files.clone()?;
        let sizes = pick(&s.sizes, &s.quick_sizes, self.quick);
        let conns = s.connections.unwrap_or(self.config.settings.connections);
        let reps = self.reps(s.reps);
        let mut files = Vec::new();
        for size in &sizes {
            let bytes = parse_size(size).unwrap_or(0);
            let name = format!("{size}.bin");
            let made = write_file(&self.static_dir.join(&name), bytes);
            files.push((size.clone(), bytes, name, made));
        }
        let rows = self.http_sweep(
            "static_files",
            &files,
            |(size, bytes, ..)| (size.clone(), *bytes as f64),
            |lab, target, (_, _, name, made)| match made {
                Err(e) => Err(format!("could not create the file: {e}")),
                Ok(()) => {
                    let path = format!("{}{name}", lab.config.targets[target].paths.static_prefix);
                    Ok(lab.http_load(path, conns, true))
                }
            },
            reps,
        );
        Some(ScenarioResult {
            name: "static_files".into(),
            title: "Static files by size".into(),
            mirrors: "R1.3".into(),
            x_label: "bytes".into(),
            method: format!(
                "GET /static/FILE with {conns} connections, files created by the suite; peak RSS of all target processes; {reps} runs of {:.0?}, {TURNS}",
                self.timing.duration
            ),
            rows,
        })
    }

    fn generator_check(&mut self) -> Option<ScenarioResult> {
        let s = self.config.scenarios.generator_check.clone()?;
        let conns = s.connections.unwrap_or(self.config.settings.connections);
        let reps = self.reps(s.reps);
        let target = s.target.clone();
        self.progress
            .show(&format!("generator_check: wrk and brisk-bench on {target}"));
        let point = format!("{conns} connections");
        let row = if !self.targets.contains(&target) {
            Row::empty(
                &target,
                &point,
                conns as f64,
                Outcome::NotYetMeasured(format!("target \"{target}\" not selected in this run")),
            )
        } else if command_line_output(&["wrk".into(), "-v".into()], Path::new("/")).is_none() {
            Row::empty(
                &target,
                &point,
                conns as f64,
                Outcome::NotYetMeasured("wrk is not installed".into()),
            )
        } else {
            self.generator_point(&target, &point, conns, reps)
        };
        self.progress.step();
        Some(ScenarioResult {
            name: "generator_check".into(),
            title: "Generator check: wrk against brisk-bench on the same target".into(),
            mirrors: "(method)".into(),
            x_label: "connections".into(),
            method: format!(
                "GET / on {target} with {conns} connections, {} load thread(s), a warm-up with each generator, then {reps} pairs of runs of {:.0?} (wrk and brisk-bench back to back, the order alternating); ratio = trimmed median of the pairs' brisk-bench / wrk, should be within 10 %",
                self.config.settings.load_threads.max(1),
                self.timing.duration
            ),
            rows: vec![row],
        })
    }

    fn generator_point(&mut self, target: &str, point: &str, conns: usize, reps: usize) -> Row {
        let path = self.config.targets[target].paths.hello.clone();
        let threads = self.config.settings.load_threads.max(1);
        let secs = self.timing.duration.as_secs().max(1);
        let result = self
            .http_config(target, &path, conns, true)
            .and_then(|config| {
                let url = config.target.url();
                let mut running = self.start_default(target)?;
                let mut ours = Vec::new();
                let mut wrk = Vec::new();
                let mut reports = Vec::new();
                let measured = for_duration(&config, Duration::from_secs(secs));
                // Both generators warm the target up first, as the scenarios do: the first
                // measured run must not be the one that pays for a cold start.
                let warmup = self.timing.warmup;
                if !warmup.is_zero() {
                    run_wrk(&url, conns, threads, warmup.as_secs().max(1))?;
                    run_http(&for_duration(&config, warmup)).map_err(|e| e.to_string())?;
                }
                // Each pair runs back to back, the order alternating, so that a trend in the
                // machine's speed does not favour one generator.
                for rep in 0..reps {
                    if rep % 2 == 0 {
                        wrk.push(run_wrk(&url, conns, threads, secs)?);
                    }
                    let report = run_http(&measured).map_err(|e| e.to_string())?;
                    ours.push(report.rps);
                    reports.push(report);
                    if rep % 2 == 1 {
                        wrk.push(run_wrk(&url, conns, threads, secs)?);
                    }
                }
                running.stop();
                Ok((ours, wrk, reports))
            });
        match result {
            Ok((ours, wrk, reports)) => {
                let mut row = Row::empty(target, point, conns as f64, Outcome::Measured);
                row.rate = spread(&ours);
                row.wrk_rate = spread(&wrk);
                if let Some(i) = median_index(&ours) {
                    row.latency_ms = Some(Latency::from_micros(&reports[i].latency_us));
                }
                row.errors = Some(reports.iter().map(|r| r.errors.total).sum());
                row.ratio = paired_ratio(&ours, &wrk);
                row
            }
            Err(e) => Row::empty(target, point, conns as f64, Outcome::Failed(e)),
        }
    }
}

/// The HTTP errors of `reports` by kind, when there are any.
fn error_kinds(reports: &[HttpReport]) -> Option<String> {
    let mut total = crate::http::ErrorCounts::default();
    for r in reports {
        total.merge(&r.errors);
    }
    let kinds = [
        ("connect", total.connect),
        ("read", total.read),
        ("write", total.write),
        ("timeout", total.timeout),
        ("status", total.status),
        ("parse", total.parse),
    ];
    let parts: Vec<String> = kinds
        .iter()
        .filter(|(_, n)| *n > 0)
        .map(|(k, n)| format!("{k} {n}"))
        .collect();
    (!parts.is_empty()).then(|| parts.join(", "))
}

/// Writes `bytes` of a repeating pattern to `path` unless it already has that size.
fn write_file(path: &Path, bytes: u64) -> Result<(), String> {
    use std::io::Write;
    if std::fs::metadata(path)
        .map(|m| m.len() == bytes)
        .unwrap_or(false)
    {
        return Ok(());
    }
    let file = std::fs::File::create(path).map_err(|e| e.to_string())?;
    let mut w = std::io::BufWriter::new(file);
    let chunk: Vec<u8> = (0..64 * 1024).map(|i| b'a' + (i % 26) as u8).collect();
    let mut left = bytes;
    while left > 0 {
        let n = left.min(chunk.len() as u64) as usize;
        w.write_all(&chunk[..n]).map_err(|e| e.to_string())?;
        left -= n as u64;
    }
    w.flush().map_err(|e| e.to_string())
}

/// Runs wrk (on the caller's CPUs) and returns its requests/s.
fn run_wrk(url: &str, conns: usize, threads: usize, secs: u64) -> Result<f64, String> {
    let out = Command::new("wrk")
        .args([
            format!("-t{threads}"),
            format!("-c{conns}"),
            format!("-d{secs}s"),
            url.to_string(),
        ])
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("wrk could not run: {e}"))?;
    let text = String::from_utf8_lossy(&out.stdout);
    text.lines()
        .find_map(|l| l.trim().strip_prefix("Requests/sec:"))
        .and_then(|v| v.trim().parse().ok())
        .ok_or_else(|| "wrk printed no Requests/sec line".to_string())
}
