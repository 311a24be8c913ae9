//! The scenarios that load application endpoints: the TechEmpower tests on PostgreSQL, R1.2
//! on MariaDB, R3's raw queries against an ORM, R5's blocking against asynchronous workers,
//! and the web application layer of R2 and R4 (templates, cached blocks, the view sweep, the
//! login page, the signed-in dashboard, the HTTP client's modes). A scenario that names a
//! database starts it once (pinned to its own CPUs) and gives its URL to every target as
//! `DATABASE_URL`; then every point is measured with the targets in turn.

use std::path::PathBuf;

use super::runner::{pick, usable_cpus, HttpLoad, Lab, LoadExtras};
use crate::suite::config::{expand, parse_cpu_list, DatabaseConfig, PathScenario, ReadyProbe};
use crate::suite::model::{Outcome, Row, ScenarioResult};
use crate::suite::process::{command_line_output, Running, StartSpec};

/// One point of a path scenario.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct PathPoint {
    /// Path and query requested.
    pub(super) path: String,
    /// Worker processes of the target.
    pub(super) workers: usize,
    /// Concurrent connections of the load.
    pub(super) connections: usize,
    /// Keep-alive on; off opens a connection per request.
    pub(super) keep_alive: bool,
    /// Database connections per worker (`DB_POOL`), when the scenario sets it.
    pub(super) db_pool: Option<usize>,
}

/// Which parts of the points of a scenario vary (and so name its points).
#[derive(Clone, Copy, Debug, Default)]
struct Varies {
    path: bool,
    workers: bool,
    connections: bool,
    keep_alive: bool,
    db_pool: bool,
}

impl Varies {
    fn of(points: &[PathPoint]) -> Varies {
        let varies = |f: &dyn Fn(&PathPoint) -> String| {
            points
                .iter()
                .map(f)
                .collect::<std::collections::BTreeSet<_>>()
                .len()
                > 1
        };
        Varies {
            path: varies(&|p| p.path.clone()),
            workers: varies(&|p| p.workers.to_string()),
            connections: varies(&|p| p.connections.to_string()),
            keep_alive: varies(&|p| p.keep_alive.to_string()),
            db_pool: varies(&|p| format!("{:?}", p.db_pool)),
        }
    }
}

/// The label of `p`: the parts that vary between the points of its scenario,
/// e.g. `/queries?queries=20` or `8 workers, 300 connections`.
fn label(p: &PathPoint, v: Varies) -> String {
    let mut parts = Vec::new();
    if v.path {
        parts.push(p.path.clone());
    }
    if v.workers {
        parts.push(format!("{} workers", p.workers));
    }
    if v.connections {
        parts.push(format!("{} connections", p.connections));
    }
    if v.keep_alive {
        parts.push(
            if p.keep_alive {
                "keep-alive"
            } else {
                "no keep-alive"
            }
            .into(),
        );
    }
    if let (true, Some(n)) = (v.db_pool, p.db_pool) {
        parts.push(format!("pool {n}"));
    }
    if parts.is_empty() {
        parts.push(p.path.clone());
    }
    parts.join(", ")
}

/// Title and the reports a path scenario mirrors.
fn title(name: &str) -> (&'static str, &'static str) {
    match name {
        "database" => (
            "TechEmpower database tests on PostgreSQL",
            "R3's third-party reference",
        ),
        "database_mysql" => ("HTTP with MySQL queries (MariaDB)", "R1.2"),
        "database_orm" => ("One random row as JSON: raw queries against an ORM", "R3"),
        "database_blocking" => (
            "Three queries per request: blocking against asynchronous workers",
            "R5",
        ),
        "templates" => (
            "Template engines: 3 variables, a 1,000-row table, a typical page",
            "R2",
        ),
        "blocks" => ("A page of cached blocks merged into JSON", "R2.3"),
        "view" => (
            "A view (HTML string) over a connection sweep, keep-alive",
            "R4",
        ),
        "login_page" => ("The admin login page: template cache × keep-alive", "R4"),
        "dashboard" => (
            "The admin dashboard, signed in: session check, three queries, a template",
            "R4",
        ),
        _ => (
            "HTTP client modes: a connection per call, a reused one, five calls at once",
            "R4",
        ),
    }
}

impl Lab<'_> {
    /// Every combination of the scenario's paths, worker counts, connection counts,
    /// keep-alive settings and pool sizes, paths outermost.
    pub(super) fn path_points(&self, s: &PathScenario) -> Vec<PathPoint> {
        let paths = pick(&s.paths, &s.quick_paths, self.quick);
        let workers = s
            .workers
            .clone()
            .unwrap_or_else(|| vec![self.config.settings.workers]);
        let connections = s
            .connections
            .clone()
            .unwrap_or_else(|| vec![self.config.settings.connections]);
        let keep_alive = s.keep_alive.clone().unwrap_or_else(|| vec![true]);
        let pools: Vec<Option<usize>> = match &s.db_pool {
            Some(p) => p.iter().copied().map(Some).collect(),
            None => vec![None],
        };
        let mut points = Vec::new();
        for path in &paths {
            for &w in &workers {
                for &c in &connections {
                    for &k in &keep_alive {
                        for &db_pool in &pools {
                            points.push(PathPoint {
                                path: path.clone(),
                                workers: w,
                                connections: c,
                                keep_alive: k,
                                db_pool,
                            });
                        }
                    }
                }
            }
        }
        points
    }

    /// Runs the path scenario `name`: starts its database if it has one, measures every
    /// point on every target in turn, stops the database.
    pub(super) fn path_scenario(&mut self, name: &'static str) -> Option<ScenarioResult> {
        let s = self
            .config
            .path_scenarios()
            .into_iter()
            .find(|(n, _)| *n == name)?
            .1
            .clone();
        let points = self.path_points(&s);
        let reps = self.reps(s.reps);
        let varies = Varies::of(&points);
        let mut database = None;
        let mut failed = None;
        if let Some(db_name) = s.database.clone() {
            let db = self.config.databases[&db_name].clone();
            let db_cpus = db
                .cpus
                .clone()
                .unwrap_or_else(|| self.config.settings.load_cpus.clone());
            let version = db
                .version
                .as_ref()
                .and_then(|v| command_line_output(v, &self.repo))
                .map(|v| format!(" ({})", v.lines().next().unwrap_or_default().trim()))
                .unwrap_or_default();
            self.progress
                .show(&format!("{name}: starting the database \"{db_name}\""));
            match self.start_database(name, &db_name, &db, &db_cpus) {
                Ok(server) => {
                    self.database_url = Some(db.url.clone());
                    database = Some((server, format!(
                        "; the database: {}{version}, one server for every target, on CPU {db_cpus} with the load generator, its URL given to every target as DATABASE_URL",
                        db.description
                    )));
                }
                Err(e) => failed = Some(e),
            }
        }
        let rows = match failed {
            None => self.http_sweep(
                name,
                &points,
                |p| {
                    let i = points.iter().position(|q| q == p).unwrap_or(0);
                    (label(p, varies), i as f64)
                },
                |lab, _, p| {
                    Ok(HttpLoad {
                        path: p.path.clone(),
                        connections: p.connections,
                        keep_alive: p.keep_alive,
                        workers: p.workers,
                        cpus: lab.target_cpus.clone(),
                        extra: LoadExtras {
                            env: p
                                .db_pool
                                .map(|n| ("DB_POOL".to_string(), n.to_string()))
                                .into_iter()
                                .collect(),
                            login: s.login.clone(),
                            first_call: s.first_call,
                        },
                    })
                },
                reps,
            ),
            Some(e) => {
                let mut rows = Vec::new();
                for target in self.scenario_targets(name) {
                    for (i, p) in points.iter().enumerate() {
                        rows.push(Row::empty(
                            &target,
                            &label(p, varies),
                            i as f64,
                            Outcome::Failed(e.clone()),
                        ));
                        self.progress.step();
                    }
                }
                rows
            }
        };
        self.database_url = None;
        let db_method = match database {
            Some((mut server, method)) => {
                server.stop();
                method
            }
            None => String::new(),
        };
        let (title, mirrors) = title(name);
        let list = |v: Vec<String>| {
            let mut v = v;
            v.dedup();
            v.join(", ")
        };
        let paths = list(points.iter().map(|p| p.path.clone()).collect());
        let mut workers: Vec<String> = points.iter().map(|p| p.workers.to_string()).collect();
        workers.sort_by_key(|w| w.parse::<usize>().unwrap_or(0));
        let mut conns: Vec<String> = points.iter().map(|p| p.connections.to_string()).collect();
        conns.sort_by_key(|c| c.parse::<usize>().unwrap_or(0));
        let keep_alive = match s.keep_alive.as_deref() {
            Some([false]) => "keep-alive off",
            Some([true]) | None => "keep-alive",
            Some(_) => "keep-alive on and off",
        };
        let mut extras = String::new();
        if let Some(pools) = &s.db_pool {
            let pools: Vec<String> = pools.iter().map(|n| n.to_string()).collect();
            extras.push_str(&format!(
                "; database connections per worker (DB_POOL): {}",
                pools.join(", ")
            ));
        }
        if let Some(login) = &s.login {
            extras.push_str(&format!(
                "; signed in once per start (GET {}, POST {}), the session cookie sent with every request",
                login.form_path, login.post_path
            ));
        }
        if s.first_call {
            extras.push_str("; first call: the first request after the target's start at each point, before the warm-up (one sample per target and point)");
        }
        Some(ScenarioResult {
            name: name.into(),
            title: title.into(),
            mirrors: mirrors.into(),
            x_label: "point".into(),
            method: format!(
                "GET {paths} with {} connections, {} worker process(es), {keep_alive}{extras}{db_method}; target on CPU {}; {reps} runs of {:.0?} after a {:.0?} warm-up, targets in turn at each point",
                list(conns),
                list(workers),
                self.config.settings.target_cpus,
                self.timing.duration,
                self.timing.warmup,
            ),
            rows,
        })
    }

    /// Starts the database `db_name` of `scenario` pinned to `cpus` and waits
    /// until it accepts TCP connections.
    fn start_database(
        &mut self,
        scenario: &str,
        db_name: &str,
        db: &DatabaseConfig,
        cpus: &str,
    ) -> Result<Running, String> {
        let cpus = usable_cpus(parse_cpu_list(cpus).map_err(|e| e.to_string())?);
        let run_dir = self.work.join("run").join(format!("database-{scenario}"));
        let vars = [
            ("port", db.port.to_string()),
            ("run_dir", run_dir.display().to_string()),
            ("bench_dir", self.bench_dir.display().to_string()),
            ("repo", self.repo.display().to_string()),
        ];
        let addr = std::net::SocketAddr::from(([127, 0, 0, 1], db.port));
        if std::net::TcpStream::connect_timeout(&addr, std::time::Duration::from_millis(200))
            .is_ok()
        {
            return Err(format!(
                "The database \"{db_name}\" was not started: port {} is already in use by another process.",
                db.port
            ));
        }
        let spec = StartSpec {
            name: format!("database \"{db_name}\""),
            argv: db.command.iter().map(|a| expand(a, &vars)).collect(),
            cwd: self.repo.clone(),
            env: Vec::new(),
            cpus,
            log: PathBuf::from(&self.work)
                .join("logs")
                .join(format!("database-{scenario}.log")),
        };
        let start_timeout = db.start_timeout();
        let result = Running::start(&spec, self.timing.stop_timeout).and_then(|mut running| {
            running.wait_ready(addr, ReadyProbe::Tcp, "/", start_timeout)?;
            Ok(running)
        });
        result.map_err(|e| {
            let msg = e.to_string();
            self.failures.push(msg.clone());
            msg
        })
    }
}

#[cfg(test)]
mod tests {
    use super::{label, PathPoint, Varies};

    #[test]
    fn a_label_names_only_what_varies() {
        let p = PathPoint {
            path: "/r5".into(),
            workers: 8,
            connections: 300,
            keep_alive: false,
            db_pool: Some(4),
        };
        let v = |path, workers, connections, keep_alive, db_pool| Varies {
            path,
            workers,
            connections,
            keep_alive,
            db_pool,
        };
        assert_eq!(
            label(&p, v(false, true, true, false, false)),
            "8 workers, 300 connections"
        );
        assert_eq!(label(&p, v(true, false, false, false, false)), "/r5");
        assert_eq!(label(&p, v(false, false, false, false, false)), "/r5");
        assert_eq!(
            label(&p, v(false, false, false, true, true)),
            "no keep-alive, pool 4"
        );
    }
}
