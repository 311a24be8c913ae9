//! The suite report as data: serialized to `report.json`, read back to
//! render `report.md` and `report.html`.

use serde::{Deserialize, Serialize};

use crate::histogram::LatencySummary;
use crate::suite::stats::Spread;

/// A whole suite run.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct SuiteReport {
    /// Machine, tools and method.
    pub header: Header,
    /// One entry per scenario, in run order.
    pub scenarios: Vec<ScenarioResult>,
}

/// Machine, tools and method of a run.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Header {
    /// UTC start time, `YYYY-MM-DDTHH:MM:SSZ`.
    pub started: String,
    /// The command line that produced the run.
    pub command: String,
    /// CPU model from /proc/cpuinfo.
    pub cpu_model: String,
    /// Online CPUs.
    pub cpus: usize,
    /// `uname -r`.
    pub kernel: String,
    /// Target CPU list.
    pub target_cpus: String,
    /// Load generator CPU list.
    pub load_cpus: String,
    /// Repetitions per point.
    pub reps: usize,
    /// Measured run length, seconds.
    pub duration_s: f64,
    /// Warm-up run length, seconds.
    pub warmup_s: f64,
    /// Whether `--quick` shortened the run.
    pub quick: bool,
    /// Free-form note from the configuration.
    pub note: Option<String>,
    /// Tool versions (`name`, `version line`).
    pub tools: Vec<(String, String)>,
    /// How each target was configured.
    pub targets: Vec<TargetInfo>,
}

/// How a target was configured.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct TargetInfo {
    /// Target name.
    pub name: String,
    /// Configuration sentence from the config.
    pub description: String,
    /// Version line, when a version command is configured.
    pub version: Option<String>,
    /// The command line template.
    pub command: String,
}

/// Results of one scenario.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ScenarioResult {
    /// Scenario key (`connections`, `static_files`, ...).
    pub name: String,
    /// Human title.
    pub title: String,
    /// The published tables it mirrors (`R4`, `R1.3`).
    pub mirrors: String,
    /// What the x axis of points means (`connections`, `workers`, `bytes`).
    pub x_label: String,
    /// How the scenario was run (one sentence).
    pub method: String,
    /// The rows: one per target and point.
    pub rows: Vec<Row>,
}

/// Whether a row holds numbers, and if not why.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "status", content = "reason", rename_all = "snake_case")]
pub enum Outcome {
    /// Measured.
    Measured,
    /// The target declares it cannot serve this scenario.
    NotSupported,
    /// Not measured; the reason says why.
    NotYetMeasured(String),
    /// The run failed; the reason says how.
    Failed(String),
}

impl Outcome {
    /// The cell text shown instead of numbers.
    pub fn label(&self) -> String {
        match self {
            Outcome::Measured => "measured".into(),
            Outcome::NotSupported => "not supported by this target".into(),
            Outcome::NotYetMeasured(r) => format!("not yet measured: {r}"),
            Outcome::Failed(r) => format!("failed: {r}"),
        }
    }
}

/// Latency percentiles of the median run, milliseconds.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Latency {
    /// Median.
    pub p50: f64,
    /// 90th percentile.
    pub p90: f64,
    /// 99th percentile.
    pub p99: f64,
    /// Largest.
    pub max: f64,
}

impl Latency {
    /// The percentiles of a generator's latency summary (microseconds), in
    /// milliseconds.
    pub fn from_micros(l: &LatencySummary) -> Latency {
        Latency {
            p50: l.p50 as f64 / 1000.0,
            p90: l.p90 as f64 / 1000.0,
            p99: l.p99 as f64 / 1000.0,
            max: l.max as f64 / 1000.0,
        }
    }
}

/// One target at one point of a scenario.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Row {
    /// Target name.
    pub target: String,
    /// Point label (`500 connections`, `1KB`, `2 workers`).
    pub point: String,
    /// Numeric x value for charts.
    pub x: f64,
    /// Measured or why not.
    pub outcome: Outcome,
    /// Requests/s (HTTP) or delivered messages/s (broadcast).
    pub rate: Option<Spread>,
    /// Latency of the median run.
    pub latency_ms: Option<Latency>,
    /// Errors over all runs (HTTP errors or WebSocket failures).
    pub errors: Option<u64>,
    /// The errors by kind, e.g. `read 12, status 3`, when there are any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error_kinds: Option<String>,
    /// Target CPU use, percent of one CPU (median run).
    pub cpu_percent: Option<f64>,
    /// Target CPU time per request/message, microseconds (median of kept runs).
    pub cpu_us_per_req: Option<f64>,
    /// The user-space part of it (utime), microseconds (median of kept runs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user_us_per_req: Option<f64>,
    /// The kernel part of it (stime), microseconds (median of kept runs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kernel_us_per_req: Option<f64>,
    /// Target RSS before the load, KiB (all processes).
    pub rss_idle_kb: Option<u64>,
    /// Peak target RSS during the runs, KiB (all processes).
    pub rss_peak_kb: Option<u64>,
    /// RSS per process at the peak, KiB, largest first.
    pub rss_per_process_kb: Vec<u64>,
    /// Idle WebSocket: bytes of RSS per open connection (spread of runs).
    pub rss_per_conn_bytes: Option<Spread>,
    /// Connections open at the end (WebSocket).
    pub open_connections: Option<u64>,
    /// Scaling efficiency = rate / (workers × single-worker rate).
    pub efficiency: Option<f64>,
    /// Generator check: wrk's requests/s.
    pub wrk_rate: Option<Spread>,
    /// Generator check: brisk-bench / wrk.
    pub ratio: Option<f64>,
    /// The first request after the target started, ms (scenarios that time it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_call_ms: Option<f64>,
}

impl Row {
    /// A row with no numbers.
    pub fn empty(target: &str, point: &str, x: f64, outcome: Outcome) -> Row {
        Row {
            target: target.into(),
            point: point.into(),
            x,
            outcome,
            rate: None,
            latency_ms: None,
            errors: None,
            error_kinds: None,
            cpu_percent: None,
            cpu_us_per_req: None,
            user_us_per_req: None,
            kernel_us_per_req: None,
            rss_idle_kb: None,
            rss_peak_kb: None,
            rss_per_process_kb: Vec::new(),
            rss_per_conn_bytes: None,
            open_connections: None,
            efficiency: None,
            wrk_rate: None,
            ratio: None,
            first_call_ms: None,
        }
    }
}
