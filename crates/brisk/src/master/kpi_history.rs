//! The app's KPIs second by second for the last ten minutes: what the alerts judge and what
//! the `/status` page draws. The master adds a [`KpiSample`] each time it has looked at its
//! workers (once a second), from their snapshots and the totals of the workers that have
//! exited, so rates stay right across reloads.

use std::collections::VecDeque;
use std::time::Instant;

use crate::latency::LatencyWindow;
use crate::stats::{RetiredTotals, WorkerStatus};

/// Samples kept: ten minutes at one a second.
pub(crate) const KEPT: usize = 600;
/// Looks back for the error rate: the 10 s of the latency windows.
const ERROR_WINDOW: usize = 10;

/// The app at one look.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct KpiSample {
    /// When, in seconds since the Unix epoch.
    pub at_unix_s: u64,
    /// Messages (every protocol) since start, the exited workers' included.
    pub total_request: u64,
    /// Handler errors since start, the exited workers' included.
    pub errors: u64,
    /// Messages answered per second since the previous look.
    pub throughput: f64,
    /// HTTP p50 and p99 over the last 10 s, in ms (`None` without requests).
    pub p50_ms: Option<f64>,
    /// See `p50_ms`.
    pub p99_ms: Option<f64>,
    /// Handler errors per message over the last 10 s (`None` without messages).
    pub error_rate: Option<f64>,
    /// The workers' resident memory added up, in bytes.
    pub rss_bytes: u64,
    /// Connections open now.
    pub connections: u64,
    /// The worst worker's event-loop lag p99 over the last 10 s, in ms.
    pub loop_lag_p99_ms: Option<f64>,
}

/// The last [`KEPT`] samples, oldest first.
#[derive(Debug, Default)]
pub(crate) struct KpiHistory {
    samples: VecDeque<KpiSample>,
    last_look: Option<Instant>,
}

impl KpiHistory {
    /// Adds the app as `current` (the current workers' latest snapshots) and `all` (every
    /// live worker's, those being retired included) show it, with `retired`.
    pub(crate) fn add(
        &mut self,
        current: &[WorkerStatus],
        all: &[WorkerStatus],
        retired: &RetiredTotals,
    ) -> &KpiSample {
        let now = Instant::now();
        let total_request =
            retired.total_request + all.iter().map(|w| w.total_request).sum::<u64>();
        let errors = retired.throw_exception + all.iter().map(|w| w.throw_exception).sum::<u64>();
        let throughput = match (self.samples.back(), self.last_look) {
            (Some(prev), Some(then)) => {
                let secs = now.duration_since(then).as_secs_f64().max(0.001);
                total_request.saturating_sub(prev.total_request) as f64 / secs
            }
            _ => 0.0,
        };
        let error_rate = self
            .samples
            .iter()
            .rev()
            .nth(ERROR_WINDOW - 1)
            .or(self.samples.front())
            .and_then(|old| {
                let requests = total_request.saturating_sub(old.total_request);
                (requests > 0).then(|| errors.saturating_sub(old.errors) as f64 / requests as f64)
            });
        let mut http = LatencyWindow::default();
        for w in current {
            http.merge(&w.http_latency);
        }
        let sample = KpiSample {
            at_unix_s: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_secs())
                .unwrap_or(0),
            total_request,
            errors,
            throughput,
            p50_ms: http.quantile_ms(0.5),
            p99_ms: http.quantile_ms(0.99),
            error_rate,
            rss_bytes: current.iter().map(|w| w.rss_kib * 1024).sum(),
            connections: all.iter().map(|w| w.connections).sum(),
            loop_lag_p99_ms: current
                .iter()
                .filter_map(|w| w.loop_lag.quantile_ms(0.99))
                .reduce(f64::max),
        };
        if self.samples.len() == KEPT {
            self.samples.pop_front();
        }
        self.samples.push_back(sample);
        self.last_look = Some(now);
        self.samples.back().expect("just added")
    }

    /// The samples, oldest first.
    pub(crate) fn samples(&self) -> &VecDeque<KpiSample> {
        &self.samples
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn worker(total_request: u64, throw_exception: u64) -> WorkerStatus {
        WorkerStatus {
            total_request,
            throw_exception,
            rss_kib: 1024,
            ..WorkerStatus::default()
        }
    }

    #[test]
    fn rates_come_from_totals_that_include_exited_workers() {
        let mut h = KpiHistory::default();
        let first = h.add(
            &[worker(100, 0)],
            &[worker(100, 0)],
            &RetiredTotals::default(),
        );
        assert_eq!(first.throughput, 0.0);
        assert_eq!(first.rss_bytes, 1 << 20);
        // The worker was replaced: its 100 went into the retired totals, the new one has 50
        // of which 5 failed. 50 more messages, 5 more errors: not a drop to 50.
        let retired = RetiredTotals {
            total_request: 100,
            ..RetiredTotals::default()
        };
        let s = h.add(&[worker(50, 5)], &[worker(50, 5)], &retired).clone();
        assert_eq!(s.total_request, 150);
        assert!(s.throughput > 0.0);
        assert_eq!(s.error_rate, Some(0.1));
        assert_eq!(s.p99_ms, None);
        for _ in 0..KEPT + 5 {
            h.add(&[], &[], &retired);
        }
        assert_eq!(h.samples().len(), KEPT);
    }
}
