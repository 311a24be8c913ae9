//! HTTP points measured on every target in turn.
//!
//! A machine's speed drifts over minutes (other tenants, frequency, cache
//! state), so a sweep that measures one target's whole range and then the
//! next target's compares runs taken far apart. Here every target of a
//! point is started at once (idle targets cost nothing), and the
//! repetitions alternate between them: run 1 goes A, B, C; run 2 goes C, B,
//! A; and so on. Each target's median then comes from runs spread over the
//! same stretch of time as every other target's.

use super::runner::{for_duration, HttpLoad, Lab};
use crate::http::run_http;
use crate::report::HttpReport;
use crate::suite::config::expand;
use crate::suite::login::sign_in;
use crate::suite::measure::Runs;
use crate::suite::model::{Outcome, Row};
use crate::suite::process::Running;

/// A target started for one point, with its measured runs so far.
struct Contender {
    /// Index into the lab's targets (and the point's rows).
    index: usize,
    running: Running,
    config: crate::http::HttpConfig,
    runs: Runs<HttpReport>,
    /// The first request after the start, ms, when the scenario times it.
    first_call_ms: Option<f64>,
}

/// The order in which `n` contenders take their turns in repetition `rep`:
/// forwards on even repetitions, backwards on odd ones.
///
/// ```text
/// turn_order(3, 0) == [0, 1, 2]; turn_order(3, 1) == [2, 1, 0]
/// ```
pub(crate) fn turn_order(n: usize, rep: usize) -> Vec<usize> {
    if rep % 2 == 0 {
        (0..n).collect()
    } else {
        (0..n).rev().collect()
    }
}

impl Lab<'_> {
    /// The rows of an HTTP scenario, in target order (each target's rows
    /// in point order): at each point every target is measured in turn.
    /// `label` names a point and gives its x value; `load_of` gives a
    /// target's load at a point, or why the point cannot run.
    pub(crate) fn http_sweep<P>(
        &mut self,
        scenario: &str,
        points: &[P],
        label: impl Fn(&P) -> (String, f64),
        load_of: impl Fn(&Self, &str, &P) -> Result<HttpLoad, String>,
        reps: usize,
    ) -> Vec<Row> {
        let targets = self.scenario_targets(scenario);
        let mut by_target: Vec<Vec<Row>> = vec![Vec::new(); targets.len()];
        for p in points {
            let (point, x) = label(p);
            self.progress.show(&format!(
                "{scenario}: {point}, {} in turn",
                targets.join(", ")
            ));
            let loads = targets.iter().map(|t| load_of(self, t, p)).collect();
            let rows = self.http_turns(scenario, &targets, &point, x, loads, reps);
            for (k, row) in rows.into_iter().enumerate() {
                by_target[k].push(row);
                self.progress.step();
            }
        }
        by_target.concat()
    }

    /// One point: starts every one of `targets` that can run it with its
    /// load from `loads` (one per target, in target order), runs `reps`
    /// repetitions in alternating turns, stops them all, and returns one
    /// row per target.
    fn http_turns(
        &mut self,
        scenario: &str,
        targets: &[String],
        point: &str,
        x: f64,
        loads: Vec<Result<HttpLoad, String>>,
        reps: usize,
    ) -> Vec<Row> {
        let mut rows: Vec<Option<Row>> = vec![None; targets.len()];
        let mut contenders = Vec::new();
        for (index, (target, load)) in targets.iter().zip(loads).enumerate() {
            if let Some(skip) = self.skip_row(scenario, target) {
                rows[index] = Some(skip);
                continue;
            }
            match load.and_then(|load| self.contender(index, target, &load)) {
                Ok(c) => contenders.push(c),
                Err(e) => rows[index] = Some(Row::empty(target, point, x, Outcome::Failed(e))),
            }
        }
        let measured: Vec<_> = contenders
            .iter()
            .map(|c| for_duration(&c.config, self.timing.duration))
            .collect();
        for rep in 0..reps {
            for j in turn_order(contenders.len(), rep) {
                let c = &mut contenders[j];
                if rows[c.index].is_some() {
                    continue;
                }
                let run = c.runs.measure(
                    || run_http(&measured[j]).map_err(|e| e.to_string()),
                    |r| r.requests,
                );
                if let Err(e) = run {
                    c.running.stop();
                    rows[c.index] =
                        Some(Row::empty(&targets[c.index], point, x, Outcome::Failed(e)));
                }
            }
        }
        for mut c in contenders {
            c.running.stop();
            if rows[c.index].is_none() {
                let mut row = self.http_row(&targets[c.index], point, x, &c.runs);
                row.first_call_ms = c.first_call_ms;
                rows[c.index] = Some(row);
            }
        }
        rows.into_iter()
            .zip(targets)
            .map(|(row, target)| {
                row.unwrap_or_else(|| {
                    Row::empty(target, point, x, Outcome::Failed("not measured".into()))
                })
            })
            .collect()
    }

    /// Starts `target` for `load` and warms it up.
    fn contender(
        &mut self,
        index: usize,
        target: &str,
        load: &HttpLoad,
    ) -> Result<Contender, String> {
        let mut config = self.http_config(target, &load.path, load.connections, load.keep_alive)?;
        self.point_env = load.extra.env.clone();
        let started = self.start(target, load.workers, &load.cpus);
        self.point_env.clear();
        let mut running = started?;
        if let Some(login) = &load.extra.login {
            let port = self.config.targets[target].port;
            let mut login = login.clone();
            login.form = expand(
                &login.form,
                &[("lab_password", self.password.password.clone())],
            );
            match sign_in(port, &login) {
                Ok(cookie) => config.request.headers.push(("Cookie".to_string(), cookie)),
                Err(e) => {
                    running.stop();
                    return Err(e);
                }
            }
        }
        let first_call_ms = if load.extra.first_call {
            let mut once = config.clone();
            once.connections = 1;
            once.duration = None;
            once.requests = Some(1);
            let report = run_http(&once).map_err(|e| e.to_string())?;
            if report.errors.total > 0 || report.latency_us.count == 0 {
                return Err("the first request failed".into());
            }
            Some(report.latency_us.max as f64 / 1000.0)
        } else {
            None
        };
        if !self.timing.warmup.is_zero() {
            run_http(&for_duration(&config, self.timing.warmup)).map_err(|e| e.to_string())?;
        }
        let runs = Runs::new(running.pid(), self.timing.sample_interval);
        Ok(Contender {
            index,
            running,
            config,
            runs,
            first_call_ms,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::turn_order;

    #[test]
    fn turns_alternate_direction_every_repetition() {
        assert_eq!(turn_order(3, 0), vec![0, 1, 2]);
        assert_eq!(turn_order(3, 1), vec![2, 1, 0]);
        assert_eq!(turn_order(3, 4), vec![0, 1, 2]);
        assert!(turn_order(0, 1).is_empty());
    }
}
