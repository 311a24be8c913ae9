//! Measuring a started target over the repeated runs of one point: its CPU
//! time and RSS (from /proc) while each generator run lasts, and the report
//! row those runs make.

use std::time::Duration;

use crate::suite::model::{Outcome, Row};
use crate::suite::procfs::{cpu_between, snapshot, user_seconds_between, Peak, Sampler};
use crate::suite::stats::{median_index, spread};

/// The runs of one point and what the target used during them.
pub struct Runs<R> {
    /// The generator's report of each run.
    pub reports: Vec<R>,
    /// Target CPU use during each run, percent of one CPU.
    pub cpu_percent: Vec<f64>,
    /// Target CPU microseconds per unit of work (request, delivery), for
    /// each run that did any work.
    pub cpu_us: Vec<f64>,
    /// The user-space part of `cpu_us`, run by run.
    pub user_us: Vec<f64>,
    /// Target RSS before the runs, KiB.
    pub idle_rss_kb: u64,
    /// The RSS peak of the run that peaked highest.
    pub peak: Peak,
    pid: i32,
    sample_interval: Duration,
}

impl<R> Runs<R> {
    /// Starts measuring the target whose process tree is rooted at `pid`;
    /// its RSS now is the idle RSS.
    pub fn new(pid: i32, sample_interval: Duration) -> Self {
        Runs {
            reports: Vec::new(),
            cpu_percent: Vec::new(),
            cpu_us: Vec::new(),
            user_us: Vec::new(),
            idle_rss_kb: snapshot(pid, pid).rss_kb,
            peak: Peak::default(),
            pid,
            sample_interval,
        }
    }

    /// Does one run with `run` while sampling the target's CPU and RSS;
    /// `work` counts the units of work in the run's report.
    pub fn measure(
        &mut self,
        run: impl FnOnce() -> Result<R, String>,
        work: impl Fn(&R) -> u64,
    ) -> Result<(), String> {
        let pid = self.pid;
        let sampler = Sampler::start(pid, pid, self.sample_interval);
        let before = snapshot(pid, pid);
        let report = run()?;
        let after = snapshot(pid, pid);
        let peak = sampler.finish();
        let (percent, secs) = cpu_between(&before, &after);
        self.cpu_percent.push(percent);
        let units = work(&report);
        if units > 0 {
            self.cpu_us.push(secs * 1e6 / units as f64);
            let user = user_seconds_between(&before, &after);
            self.user_us.push(user * 1e6 / units as f64);
        }
        if peak.rss_kb > self.peak.rss_kb {
            self.peak = peak;
        }
        self.reports.push(report);
        Ok(())
    }

    /// A measured row with the rate (`rate` of each report), CPU and RSS of
    /// these runs, and the index of the median run by rate, if any.
    pub fn row(
        &self,
        target: &str,
        point: &str,
        x: f64,
        rate: impl Fn(&R) -> f64,
    ) -> (Row, Option<usize>) {
        let rates: Vec<f64> = self.reports.iter().map(rate).collect();
        let mut row = Row::empty(target, point, x, Outcome::Measured);
        row.rate = spread(&rates);
        let median = median_index(&rates);
        if let Some(i) = median {
            row.cpu_percent = Some(self.cpu_percent[i]);
        }
        row.cpu_us_per_req = spread(&self.cpu_us).map(|s| s.median);
        let kernel_us: Vec<f64> = (self.cpu_us.iter().zip(&self.user_us))
            .map(|(all, user)| all - user)
            .collect();
        row.user_us_per_req = spread(&self.user_us).map(|s| s.median);
        row.kernel_us_per_req = spread(&kernel_us).map(|s| s.median);
        row.rss_idle_kb = Some(self.idle_rss_kb);
        row.rss_peak_kb = Some(self.peak.rss_kb);
        row.rss_per_process_kb = self.peak.per_process_kb.clone();
        (row, median)
    }
}
