//! The database scenarios of the suite: the TechEmpower tests on PostgreSQL,
//! R1.2 on MariaDB, R3's raw queries against an ORM, and R5's blocking
//! against asynchronous workers. Each starts its database server once
//! (pinned to its own CPUs), gives its URL to every target as
//! `DATABASE_URL`, measures every point with the targets in turn, and
//! stops the server.

use std::path::PathBuf;

use super::runner::{pick, usable_cpus, HttpLoad, Lab};
use crate::suite::config::{expand, parse_cpu_list, DatabaseConfig, DbScenario, ReadyProbe};
use crate::suite::model::{Outcome, Row, ScenarioResult};
use crate::suite::process::{command_line_output, Running, StartSpec};

/// One point of a database scenario.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct DbPoint {
    /// Path and query requested.
    pub(super) path: String,
    /// Worker processes of the target.
    pub(super) workers: usize,
    /// Concurrent connections of the load.
    pub(super) connections: usize,
}

/// The label of `p`: the parts that vary between the points of its scenario,
/// e.g. `/queries?queries=20` or `8 workers, 300 connections`.
fn label(p: &DbPoint, paths: bool, workers: bool, connections: bool) -> String {
    let mut parts = Vec::new();
    if paths {
        parts.push(p.path.clone());
    }
    if workers {
        parts.push(format!("{} workers", p.workers));
    }
    if connections {
        parts.push(format!("{} connections", p.connections));
    }
    if parts.is_empty() {
        parts.push(p.path.clone());
    }
    parts.join(", ")
}

/// Title and the reports a database scenario mirrors.
fn title(name: &str) -> (&'static str, &'static str) {
    match name {
        "database" => (
            "TechEmpower database tests on PostgreSQL",
            "R3's third-party reference",
        ),
        "database_mysql" => ("HTTP with MySQL queries (MariaDB)", "R1.2"),
        "database_orm" => ("One random row as JSON: raw queries against an ORM", "R3"),
        _ => (
            "Three queries per request: blocking against asynchronous workers",
            "R5",
        ),
    }
}

impl Lab<'_> {
    /// Every combination of the scenario's paths, worker counts and
    /// connection counts, paths outermost.
    pub(super) fn db_points(&self, s: &DbScenario) -> Vec<DbPoint> {
        let paths = pick(&s.paths, &s.quick_paths, self.quick);
        let workers = s
            .workers
            .clone()
            .unwrap_or_else(|| vec![self.config.settings.workers]);
        let connections = s
            .connections
            .clone()
            .unwrap_or_else(|| vec![self.config.settings.connections]);
        let mut points = Vec::new();
        for path in &paths {
            for &w in &workers {
                for &c in &connections {
                    points.push(DbPoint {
                        path: path.clone(),
                        workers: w,
                        connections: c,
                    });
                }
            }
        }
        points
    }

    /// Runs the database scenario `name`: starts its database, measures
    /// every point on every target in turn, stops the database.
    pub(super) fn database(&mut self, name: &'static str) -> Option<ScenarioResult> {
        let s = self
            .config
            .db_scenarios()
            .into_iter()
            .find(|(n, _)| *n == name)?
            .1
            .clone();
        let db = self.config.databases[&s.database].clone();
        let points = self.db_points(&s);
        let reps = self.reps(s.reps);
        let varies = |f: fn(&DbPoint) -> String| {
            points
                .iter()
                .map(f)
                .collect::<std::collections::BTreeSet<_>>()
                .len()
                > 1
        };
        let (by_path, by_workers, by_conns) = (
            varies(|p| p.path.clone()),
            varies(|p| p.workers.to_string()),
            varies(|p| p.connections.to_string()),
        );
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
            .show(&format!("{name}: starting the database \"{}\"", s.database));
        let rows = match self.start_database(name, &s.database, &db, &db_cpus) {
            Ok(mut server) => {
                self.database_url = Some(db.url.clone());
                let rows = self.http_sweep(
                    name,
                    &points,
                    |p| {
                        let i = points.iter().position(|q| q == p).unwrap_or(0);
                        (label(p, by_path, by_workers, by_conns), i as f64)
                    },
                    |lab, _, p| {
                        Ok(HttpLoad {
                            path: p.path.clone(),
                            connections: p.connections,
                            keep_alive: true,
                            workers: p.workers,
                            cpus: lab.target_cpus.clone(),
                        })
                    },
                    reps,
                );
                self.database_url = None;
                server.stop();
                rows
            }
            Err(e) => {
                let mut rows = Vec::new();
                for target in self.scenario_targets(name) {
                    for (i, p) in points.iter().enumerate() {
                        let point = label(p, by_path, by_workers, by_conns);
                        rows.push(Row::empty(
                            &target,
                            &point,
                            i as f64,
                            Outcome::Failed(e.clone()),
                        ));
                        self.progress.step();
                    }
                }
                rows
            }
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
        Some(ScenarioResult {
            name: name.into(),
            title: title.into(),
            mirrors: mirrors.into(),
            x_label: "point".into(),
            method: format!(
                "GET {paths} with {} connections, {} worker process(es), keep-alive; the database: {}{version}, one server for every target, on CPU {db_cpus} with the load generator (target on CPU {}), its URL given to every target as DATABASE_URL; {reps} runs of {:.0?} after a {:.0?} warm-up, targets in turn at each point",
                list(conns),
                list(workers),
                db.description,
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
    use super::{label, DbPoint};

    #[test]
    fn a_label_names_only_what_varies() {
        let p = DbPoint {
            path: "/r5".into(),
            workers: 8,
            connections: 300,
        };
        assert_eq!(label(&p, false, true, true), "8 workers, 300 connections");
        assert_eq!(label(&p, true, false, false), "/r5");
        assert_eq!(label(&p, false, false, false), "/r5");
    }
}
