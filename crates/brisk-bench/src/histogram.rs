//! Latency histogram (HdrHistogram, microseconds) and its percentile summary.

use hdrhistogram::Histogram;
use serde::Serialize;

/// The largest latency tracked precisely: one hour, in microseconds.
const MAX_TRACKABLE_US: u64 = 3_600_000_000;

/// A latency recorder in microseconds with three significant digits.
#[derive(Clone)]
pub struct LatencyHistogram {
    inner: Histogram<u64>,
}

/// Percentiles of a latency distribution, in microseconds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct LatencySummary {
    /// Median.
    pub p50: u64,
    /// 75th percentile.
    pub p75: u64,
    /// 90th percentile.
    pub p90: u64,
    /// 95th percentile.
    pub p95: u64,
    /// 99th percentile.
    pub p99: u64,
    /// 99.9th percentile.
    pub p999: u64,
    /// Largest recorded value.
    pub max: u64,
    /// Arithmetic mean.
    pub mean: f64,
    /// Standard deviation.
    pub stdev: f64,
    /// Number of recorded values.
    pub count: u64,
}

impl Default for LatencyHistogram {
    fn default() -> Self {
        Self::new()
    }
}

impl LatencyHistogram {
    /// An empty histogram covering 1 µs to one hour.
    pub fn new() -> Self {
        let inner = Histogram::new_with_bounds(1, MAX_TRACKABLE_US, 3)
            .expect("static histogram bounds are valid");
        Self { inner }
    }

    /// Records one latency in microseconds; values out of range saturate.
    #[inline]
    pub fn record(&mut self, micros: u64) {
        self.inner.saturating_record(micros.max(1));
    }

    /// Adds every value recorded in `other` to this histogram.
    pub fn merge(&mut self, other: &LatencyHistogram) {
        // Both histograms share the same bounds, so adding cannot fail.
        let _ = self.inner.add(&other.inner);
    }

    /// Number of recorded values.
    pub fn len(&self) -> u64 {
        self.inner.len()
    }

    /// True when nothing was recorded.
    pub fn is_empty(&self) -> bool {
        self.inner.is_empty()
    }

    /// The value at `quantile` (0.0 ..= 1.0), in microseconds.
    pub fn quantile(&self, quantile: f64) -> u64 {
        self.inner.value_at_quantile(quantile)
    }

    /// The percentile summary; all zero when nothing was recorded.
    pub fn summary(&self) -> LatencySummary {
        if self.inner.is_empty() {
            return LatencySummary::default();
        }
        let h = &self.inner;
        LatencySummary {
            p50: h.value_at_quantile(0.50),
            p75: h.value_at_quantile(0.75),
            p90: h.value_at_quantile(0.90),
            p95: h.value_at_quantile(0.95),
            p99: h.value_at_quantile(0.99),
            p999: h.value_at_quantile(0.999),
            max: h.max(),
            mean: h.mean(),
            stdev: h.stdev(),
            count: h.len(),
        }
    }
}
