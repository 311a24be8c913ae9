//! App metrics: counters, gauges and histograms an app declares as statics, registers with
//! [`App::metric`](crate::App::metric), and updates from anywhere in a worker (handlers,
//! callbacks, jobs). The master adds them up across workers and exports them on `/metrics`
//! beside Brisk's own series: counters and histograms as the app's totals (what exited
//! workers counted stays counted, so none goes backwards across a reload or a recycle),
//! gauges per process, labelled `server`, `worker` and `pid` as Brisk's own gauges are.
//!
//! An update is one relaxed atomic operation on the static (a histogram's: two, and one
//! more for its sum): no lock, no allocation, no message. Each worker reports its values with
//! its other counters, once a second and when a scrape asks.
//!
//! ```no_run
//! use brisk::metrics::{Counter, Gauge, Histogram};
//!
//! static POSTED: Counter = Counter::new("chat_messages_posted_total", "Messages posted.");
//! static REJECTED: Counter = Counter::new("chat_messages_rejected_total", "Messages refused.")
//!     .labels(&[("reason", "too_long")]);
//! static ROOMS: Gauge = Gauge::new("chat_rooms_open", "Rooms with a member in this worker.");
//! static SIZE: Histogram<4> =
//!     Histogram::new("chat_message_bytes", "Sizes of posted messages.", [64.0, 256.0, 1024.0, 4096.0]);
//!
//! # let server = brisk::Server::new("text://127.0.0.1:7000").unwrap();
//! brisk::App::new("chat")
//!     .metric(&POSTED)
//!     .metric(&REJECTED)
//!     .metric(&ROOMS)
//!     .metric(&SIZE)
//!     .server(server)
//!     .run();
//!
//! // In a handler:
//! POSTED.inc();
//! SIZE.observe(180.0);
//! ROOMS.add(1.0);
//! ```
//!
//! Names and labels follow Prometheus's rules (`[a-zA-Z_:][a-zA-Z0-9_:]*`, label names
//! without `__` in front); the prefixes `brisk_` and `process_` are Brisk's. Several statics
//! may share a name with different label values: they are one family, of one kind and one
//! help text. A name that breaks these rules, or the same name and labels twice, fails
//! `start` saying which and why.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::OnceLock;

use serde::{Deserialize, Serialize};

/// What names a metric: its name, help text and fixed labels.
#[derive(Debug)]
struct Desc {
    name: &'static str,
    help: &'static str,
    labels: &'static [(&'static str, &'static str)],
}

/// A value that only goes up: requests, messages, errors.
///
/// ```
/// static SENT: brisk::metrics::Counter =
///     brisk::metrics::Counter::new("mails_sent_total", "Mails sent.");
/// SENT.inc();
/// SENT.add(2);
/// assert_eq!(SENT.get(), 3);
/// ```
#[derive(Debug)]
pub struct Counter {
    desc: Desc,
    value: AtomicU64,
}

impl Counter {
    /// A counter named `name` (by convention ending in `_total`) with `help`, at 0.
    pub const fn new(name: &'static str, help: &'static str) -> Self {
        Counter {
            desc: Desc {
                name,
                help,
                labels: &[],
            },
            value: AtomicU64::new(0),
        }
    }

    /// The same counter with these fixed labels (name, value).
    pub const fn labels(mut self, labels: &'static [(&'static str, &'static str)]) -> Self {
        self.desc.labels = labels;
        self
    }

    /// Adds one.
    #[inline]
    pub fn inc(&self) {
        self.value.fetch_add(1, Relaxed);
    }

    /// Adds `n`.
    #[inline]
    pub fn add(&self, n: u64) {
        self.value.fetch_add(n, Relaxed);
    }

    /// This process's count.
    pub fn get(&self) -> u64 {
        self.value.load(Relaxed)
    }
}

/// A value that goes up and down: open rooms, items in a local cache, a temperature.
/// Exported per worker process (labelled `server`, `worker`, `pid`).
///
/// ```
/// static OPEN: brisk::metrics::Gauge = brisk::metrics::Gauge::new("rooms_open", "Open rooms.");
/// OPEN.set(4.0);
/// OPEN.add(-1.0);
/// assert_eq!(OPEN.get(), 3.0);
/// ```
#[derive(Debug)]
pub struct Gauge {
    desc: Desc,
    /// The value's bits (`f64::to_bits`).
    bits: AtomicU64,
}

impl Gauge {
    /// A gauge named `name` with `help`, at 0.
    pub const fn new(name: &'static str, help: &'static str) -> Self {
        Gauge {
            desc: Desc {
                name,
                help,
                labels: &[],
            },
            bits: AtomicU64::new(0),
        }
    }

    /// The same gauge with these fixed labels (name, value).
    pub const fn labels(mut self, labels: &'static [(&'static str, &'static str)]) -> Self {
        self.desc.labels = labels;
        self
    }

    /// Sets the value.
    #[inline]
    pub fn set(&self, v: f64) {
        self.bits.store(v.to_bits(), Relaxed);
    }

    /// Adds `delta` (negative to take away).
    #[inline]
    pub fn add(&self, delta: f64) {
        add_f64(&self.bits, delta);
    }

    /// This process's value.
    pub fn get(&self) -> f64 {
        f64::from_bits(self.bits.load(Relaxed))
    }
}

/// A distribution of observed values (durations, sizes) over `N` fixed upper bounds, in
/// increasing order; values above the last count in the `+Inf` bucket.
///
/// ```
/// use brisk::metrics::Histogram;
/// static WAIT: Histogram<3> =
///     Histogram::new("job_wait_seconds", "Time jobs waited.", [0.1, 1.0, 10.0]);
/// WAIT.observe(0.5);
/// WAIT.observe(30.0);
/// assert_eq!(WAIT.count(), 2);
/// ```
#[derive(Debug)]
pub struct Histogram<const N: usize> {
    desc: Desc,
    bounds: [f64; N],
    /// Observations at or under each bound (not cumulative), then those above the last.
    counts: [AtomicU64; N],
    above: AtomicU64,
    /// The sum's bits (`f64::to_bits`).
    sum: AtomicU64,
}

impl<const N: usize> Histogram<N> {
    /// A histogram named `name` with `help` over `bounds` (increasing; checked at `start`).
    pub const fn new(name: &'static str, help: &'static str, bounds: [f64; N]) -> Self {
        Histogram {
            desc: Desc {
                name,
                help,
                labels: &[],
            },
            bounds,
            counts: [const { AtomicU64::new(0) }; N],
            above: AtomicU64::new(0),
            sum: AtomicU64::new(0),
        }
    }

    /// The same histogram with these fixed labels (name, value).
    pub const fn labels(mut self, labels: &'static [(&'static str, &'static str)]) -> Self {
        self.desc.labels = labels;
        self
    }

    /// Counts `v` in its bucket and adds it to the sum.
    #[inline]
    pub fn observe(&self, v: f64) {
        match self.bounds.iter().position(|b| v <= *b) {
            Some(i) => self.counts[i].fetch_add(1, Relaxed),
            None => self.above.fetch_add(1, Relaxed),
        };
        add_f64(&self.sum, v);
    }

    /// Observations in this process.
    pub fn count(&self) -> u64 {
        self.counts.iter().map(|c| c.load(Relaxed)).sum::<u64>() + self.above.load(Relaxed)
    }
}

/// Adds `delta` to the `f64` whose bits `cell` holds. A worker is one thread, so the
/// exchange succeeds at once; it only retries against another thread's update.
#[inline]
fn add_f64(cell: &AtomicU64, delta: f64) {
    let mut old = cell.load(Relaxed);
    loop {
        let new = (f64::from_bits(old) + delta).to_bits();
        match cell.compare_exchange_weak(old, new, Relaxed, Relaxed) {
            Ok(_) => return,
            Err(now) => old = now,
        }
    }
}

/// A metric an app registers with [`App::metric`](crate::App::metric): a [`Counter`],
/// [`Gauge`] or [`Histogram`] static. Sealed: Brisk's three kinds only.
pub trait Metric: Sync + sealed::Sealed {
    /// A look at its value in this process.
    #[doc(hidden)]
    fn sample(&self) -> Sample;
}

mod sealed {
    pub trait Sealed {}
    impl Sealed for super::Counter {}
    impl Sealed for super::Gauge {}
    impl<const N: usize> Sealed for super::Histogram<N> {}
}

impl Metric for Counter {
    fn sample(&self) -> Sample {
        Sample::of(&self.desc, Value::Counter(self.get()))
    }
}

impl Metric for Gauge {
    fn sample(&self) -> Sample {
        Sample::of(&self.desc, Value::Gauge(self.get()))
    }
}

impl<const N: usize> Metric for Histogram<N> {
    fn sample(&self) -> Sample {
        let mut counts: Vec<u64> = self.counts.iter().map(|c| c.load(Relaxed)).collect();
        counts.push(self.above.load(Relaxed));
        let value = Value::Histogram {
            bounds: self.bounds.to_vec(),
            counts,
            sum: f64::from_bits(self.sum.load(Relaxed)),
        };
        Sample::of(&self.desc, value)
    }
}

/// One app metric's value in one worker, as the worker reports it to the master.
#[doc(hidden)]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Sample {
    /// The metric's name.
    pub name: String,
    /// Its help text.
    pub help: String,
    /// Its fixed labels.
    pub labels: Vec<(String, String)>,
    /// Its value.
    pub value: Value,
}

impl Sample {
    fn of(desc: &Desc, value: Value) -> Self {
        Sample {
            name: desc.name.to_string(),
            help: desc.help.to_string(),
            labels: desc
                .labels
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            value,
        }
    }

    /// Adds `other`'s value to this one (counters and histograms of one series).
    pub(crate) fn merge(&mut self, other: &Sample) {
        match (&mut self.value, &other.value) {
            (Value::Counter(a), Value::Counter(b)) => *a += b,
            (Value::Gauge(a), Value::Gauge(b)) => *a += b,
            (
                Value::Histogram { counts, sum, .. },
                Value::Histogram {
                    counts: more,
                    sum: more_sum,
                    ..
                },
            ) if counts.len() == more.len() => {
                for (c, m) in counts.iter_mut().zip(more) {
                    *c += m;
                }
                *sum += more_sum;
            }
            _ => {}
        }
    }

    /// The series it belongs to: its name and labels.
    pub(crate) fn series(&self) -> (&str, &[(String, String)]) {
        (&self.name, &self.labels)
    }
}

/// Adds `sample` to the one of its series in `totals`, or appends it.
pub(crate) fn merge_into(totals: &mut Vec<Sample>, sample: &Sample) {
    match totals.iter_mut().find(|t| t.series() == sample.series()) {
        Some(t) => t.merge(sample),
        None => totals.push(sample.clone()),
    }
}

/// A metric's value.
#[doc(hidden)]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Value {
    /// A counter's count.
    Counter(u64),
    /// A gauge's value.
    Gauge(f64),
    /// A histogram's upper bounds, its counts per bucket (not cumulative; one more than the
    /// bounds, for `+Inf`) and the sum of what it observed.
    Histogram {
        /// The upper bounds.
        bounds: Vec<f64>,
        /// Observations per bucket.
        counts: Vec<u64>,
        /// Their sum.
        sum: f64,
    },
}

/// The app's registered metrics in this process.
static REGISTERED: OnceLock<Vec<&'static dyn Metric>> = OnceLock::new();

/// Makes `metrics` the ones this process reports (once, as the app starts).
pub(crate) fn register(metrics: Vec<&'static dyn Metric>) {
    let _ = REGISTERED.set(metrics);
}

/// The registered metrics' values in this process.
pub(crate) fn samples() -> Vec<Sample> {
    REGISTERED
        .get()
        .map(|m| m.iter().map(|m| m.sample()).collect())
        .unwrap_or_default()
}

/// Why an app's metrics cannot be exported beside Brisk's own series.
#[derive(Debug, thiserror::Error)]
pub(crate) enum MetricProblem {
    /// Not a metric name.
    #[error("metric {0:?}: a name is [a-zA-Z_:][a-zA-Z0-9_:]*")]
    BadName(String),
    /// A prefix of Brisk's own series.
    #[error("metric {0:?}: the prefixes brisk_ and process_ are Brisk's own")]
    BriskPrefix(String),
    /// Not a label name.
    #[error(
        "metric {metric:?}: label {label:?} is not a label name ([a-zA-Z_][a-zA-Z0-9_]*, not \
         starting with __)"
    )]
    BadLabel {
        /// The metric.
        metric: String,
        /// The label.
        label: String,
    },
    /// A label Brisk adds to every series.
    #[error("metric {metric:?}: label {label:?} is one Brisk adds itself")]
    BriskLabel {
        /// The metric.
        metric: String,
        /// The label.
        label: String,
    },
    /// A histogram without bounds, or bounds not increasing.
    #[error("metric {0:?}: a histogram's bounds must be increasing, and at least one")]
    Bounds(String),
    /// A histogram bound that is NaN.
    #[error("metric {0:?}: a bound is NaN")]
    NanBound(String),
    /// One name with two kinds or helps.
    #[error("metric {0:?}: registered twice with a different kind or help")]
    TwoKinds(String),
    /// The same series twice.
    #[error("metric {metric:?} with labels {labels:?}: registered twice")]
    Twice {
        /// The metric.
        metric: String,
        /// Its labels.
        labels: Vec<(String, String)>,
    },
}

/// Checks that `metrics` can be exported together with Brisk's own series: valid names and
/// labels, increasing histogram bounds, one kind and help per name, no series twice.
pub(crate) fn check(metrics: &[&'static dyn Metric]) -> Result<(), MetricProblem> {
    let samples: Vec<Sample> = metrics.iter().map(|m| m.sample()).collect();
    for (i, s) in samples.iter().enumerate() {
        let name = || s.name.clone();
        if !valid_name(&s.name, true) {
            return Err(MetricProblem::BadName(name()));
        }
        if s.name.starts_with("brisk_") || s.name.starts_with("process_") {
            return Err(MetricProblem::BriskPrefix(name()));
        }
        for (k, _) in &s.labels {
            let (metric, label) = (name(), k.clone());
            if !valid_name(k, false) || k.starts_with("__") {
                return Err(MetricProblem::BadLabel { metric, label });
            }
            if matches!(k.as_str(), "le" | "server" | "worker" | "pid") {
                return Err(MetricProblem::BriskLabel { metric, label });
            }
        }
        if let Value::Histogram { bounds, .. } = &s.value {
            if bounds.is_empty() || bounds.windows(2).any(|w| w[0] >= w[1]) {
                return Err(MetricProblem::Bounds(name()));
            }
            if bounds.iter().any(|b| b.is_nan()) {
                return Err(MetricProblem::NanBound(name()));
            }
        }
        for earlier in &samples[..i] {
            if earlier.name != s.name {
                continue;
            }
            if std::mem::discriminant(&earlier.value) != std::mem::discriminant(&s.value)
                || earlier.help != s.help
            {
                return Err(MetricProblem::TwoKinds(name()));
            }
            if earlier.labels == s.labels {
                let labels = s.labels.clone();
                return Err(MetricProblem::Twice {
                    metric: name(),
                    labels,
                });
            }
        }
    }
    Ok(())
}

/// Whether `name` is a metric name (`colons`) or a label name.
fn valid_name(name: &str, colons: bool) -> bool {
    let ok = |c: char, first: bool| {
        c.is_ascii_alphabetic()
            || c == '_'
            || (colons && c == ':')
            || (!first && c.is_ascii_digit())
    };
    let mut chars = name.chars();
    chars.next().is_some_and(|c| ok(c, true)) && chars.all(|c| ok(c, false))
}

#[cfg(test)]
mod tests {
    use super::*;

    static HITS: Counter = Counter::new("hits_total", "Hits.").labels(&[("kind", "a")]);
    static OTHER_HITS: Counter = Counter::new("hits_total", "Hits.").labels(&[("kind", "b")]);
    static LEVEL: Gauge = Gauge::new("level", "Level.");
    static SIZES: Histogram<2> = Histogram::new("sizes", "Sizes.", [1.0, 10.0]);

    #[test]
    fn updates_show_in_samples() {
        HITS.inc();
        HITS.add(4);
        LEVEL.set(2.5);
        LEVEL.add(-1.0);
        SIZES.observe(0.5);
        SIZES.observe(1.0);
        SIZES.observe(5.0);
        SIZES.observe(50.0);
        assert_eq!(HITS.sample().value, Value::Counter(5));
        assert_eq!(LEVEL.sample().value, Value::Gauge(1.5));
        assert_eq!(
            SIZES.sample().value,
            Value::Histogram {
                bounds: vec![1.0, 10.0],
                counts: vec![2, 1, 1],
                sum: 56.5
            }
        );
        assert_eq!(SIZES.count(), 4);
        let mut total = HITS.sample();
        total.merge(&HITS.sample());
        assert_eq!(total.value, Value::Counter(10));
    }

    #[test]
    fn bad_registrations_are_refused_saying_why() {
        assert!(check(&[&HITS, &OTHER_HITS, &LEVEL, &SIZES]).is_ok());
        let twice = check(&[&HITS, &HITS]).unwrap_err().to_string();
        assert!(twice.contains("registered twice"), "{twice}");
        static BAD: Counter = Counter::new("2fast", "x");
        assert!(check(&[&BAD])
            .unwrap_err()
            .to_string()
            .contains("a name is"));
        static OURS: Counter = Counter::new("brisk_mine_total", "x");
        assert!(check(&[&OURS])
            .unwrap_err()
            .to_string()
            .contains("Brisk's own"));
        static KIND: Gauge = Gauge::new("hits_total", "Hits.");
        assert!(check(&[&HITS, &KIND])
            .unwrap_err()
            .to_string()
            .contains("different kind"));
        static LABEL: Counter = Counter::new("x_total", "x").labels(&[("pid", "1")]);
        assert!(check(&[&LABEL])
            .unwrap_err()
            .to_string()
            .contains("Brisk adds itself"));
        static BOUNDS: Histogram<2> = Histogram::new("b", "b", [2.0, 1.0]);
        assert!(check(&[&BOUNDS])
            .unwrap_err()
            .to_string()
            .contains("increasing"));
    }
}
