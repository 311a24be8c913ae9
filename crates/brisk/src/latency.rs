//! Latency histograms cheap enough for every request: fixed log-linear buckets over
//! microseconds (exact below 16 µs, then 8 buckets per power of two, so a quantile is within
//! 12.5 % of the truth), counted in `Cell`s of a single-threaded worker. Recording is a bucket
//! index and four adds; nothing is allocated after the worker starts.
//!
//! A `Recent` histogram keeps the last ten complete seconds (and the current one) in one
//! slot per second, so `status` can show p50 / p95 / p99 of what is happening now rather than
//! since start, and a histogram since start with the sum of the durations, which Prometheus's
//! cumulative histograms need. Snapshots travel to the master as [`LatencyWindow`]s (only the
//! buckets that hold something) and [`LatencyTotals`], which merge across workers.

use std::cell::Cell;

use serde::{Deserialize, Serialize};

/// Values below this are their own bucket.
const EXACT: u64 = 16;
/// Buckets per power of two above [`EXACT`].
const SUB: usize = 8;
/// The largest power of two with buckets of its own (2^36 µs is about 19 hours).
const MAX_EXP: u32 = 36;
/// Buckets in one histogram.
pub(crate) const BUCKETS: usize = EXACT as usize + (MAX_EXP as usize - 3) * SUB;
/// Complete seconds a `Recent` histogram's window covers.
pub const WINDOW_S: u64 = 10;
/// Slots of a `Recent` histogram: the window and the second being filled.
const SLOTS: u64 = WINDOW_S + 1;

/// The bucket that counts `us` microseconds.
#[inline]
fn bucket(us: u64) -> usize {
    if us < EXACT {
        return us as usize;
    }
    let exp = 63 - us.leading_zeros();
    let sub = ((us >> (exp - 3)) & 7) as usize;
    (EXACT as usize + (exp as usize - 4) * SUB + sub).min(BUCKETS - 1)
}

/// The smallest value bucket `i` counts, and how many values it spans.
fn bucket_range(i: usize) -> (u64, u64) {
    if i < EXACT as usize {
        return (i as u64, 1);
    }
    let exp = ((i - EXACT as usize) / SUB + 4) as u32;
    let sub = ((i - EXACT as usize) % SUB) as u64;
    ((8 + sub) << (exp - 3), 1 << (exp - 3))
}

/// Counts of durations in fixed buckets.
pub(crate) struct Histogram {
    counts: Box<[Cell<u64>]>,
}

impl Default for Histogram {
    fn default() -> Self {
        Histogram {
            counts: (0..BUCKETS).map(|_| Cell::new(0)).collect(),
        }
    }
}

impl Histogram {
    #[inline]
    fn record(&self, index: usize) {
        let c = &self.counts[index];
        c.set(c.get() + 1);
    }

    fn clear(&self) {
        for c in self.counts.iter() {
            c.set(0);
        }
    }

    fn add_to(&self, sums: &mut [u64]) {
        for (s, c) in sums.iter_mut().zip(self.counts.iter()) {
            *s += c.get();
        }
    }
}

/// A histogram of the last [`WINDOW_S`] complete seconds, one slot per second (plus the
/// second being filled), and one since start with the sum of its durations.
#[derive(Default)]
pub(crate) struct Recent {
    slots: Slots,
    since_start: Histogram,
    total: Cell<u64>,
    sum_us: Cell<u64>,
}

/// One histogram per second, each tagged with the second it holds.
struct Slots(Vec<(Cell<u64>, Histogram)>);

impl Default for Slots {
    fn default() -> Self {
        Slots(
            (0..SLOTS)
                .map(|_| (Cell::new(u64::MAX), Histogram::default()))
                .collect(),
        )
    }
}

impl std::fmt::Debug for Recent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Recent")
            .field("total", &self.total.get())
            .finish_non_exhaustive()
    }
}

impl Recent {
    /// Counts a duration of `us` microseconds in second `now_s` (of any monotonic clock).
    #[inline]
    pub(crate) fn record(&self, now_s: u64, us: u64) {
        let (second, h) = &self.slots.0[(now_s % SLOTS) as usize];
        if second.get() != now_s {
            // A new second for this slot: what it held is out of the window.
            h.clear();
            second.set(now_s);
        }
        let index = bucket(us);
        h.record(index);
        self.since_start.record(index);
        self.total.set(self.total.get() + 1);
        self.sum_us.set(self.sum_us.get().wrapping_add(us));
    }

    /// Everything counted since start.
    pub(crate) fn totals(&self) -> LatencyTotals {
        let mut counts = vec![0u64; BUCKETS];
        self.since_start.add_to(&mut counts);
        LatencyTotals {
            histogram: LatencyWindow::from_counts(&counts),
            sum_us: self.sum_us.get(),
        }
    }

    /// How many durations were counted since start.
    pub(crate) fn total(&self) -> u64 {
        self.total.get()
    }

    /// The [`WINDOW_S`] complete seconds before second `now_s` (which is still filling).
    pub(crate) fn window(&self, now_s: u64) -> LatencyWindow {
        let mut sums = vec![0u64; BUCKETS];
        for (second, h) in &self.slots.0 {
            let s = second.get();
            if s != u64::MAX && s < now_s && now_s - s <= WINDOW_S {
                h.add_to(&mut sums);
            }
        }
        LatencyWindow::from_counts(&sums)
    }
}

/// A histogram snapshot: the non-empty buckets as `(index, count)`. Merges across workers.
///
/// ```
/// use brisk::latency::LatencyWindow;
///
/// let w = LatencyWindow::default();
/// assert_eq!(w.count(), 0);
/// assert_eq!(w.quantile_us(0.99), None);
/// ```
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct LatencyWindow {
    /// Non-empty buckets, by index, ascending.
    pub buckets: Vec<(u16, u64)>,
}

impl LatencyWindow {
    fn from_counts(counts: &[u64]) -> Self {
        LatencyWindow {
            buckets: counts
                .iter()
                .enumerate()
                .filter(|(_, &n)| n > 0)
                .map(|(i, &n)| (i as u16, n))
                .collect(),
        }
    }

    /// How many durations it holds.
    pub fn count(&self) -> u64 {
        self.buckets.iter().map(|(_, n)| n).sum()
    }

    /// Adds `other`'s counts to these.
    pub fn merge(&mut self, other: &LatencyWindow) {
        let mut counts = vec![0u64; BUCKETS];
        for (i, n) in self.buckets.iter().chain(&other.buckets) {
            if let Some(c) = counts.get_mut(*i as usize) {
                *c += n;
            }
        }
        *self = LatencyWindow::from_counts(&counts);
    }

    /// The duration under which a fraction `q` (0..=1) of them fell, in microseconds (the
    /// middle of its bucket); `None` when empty.
    pub fn quantile_us(&self, q: f64) -> Option<u64> {
        let count = self.count();
        if count == 0 {
            return None;
        }
        let rank = ((q.clamp(0.0, 1.0) * count as f64).ceil() as u64).max(1);
        let mut seen = 0;
        for (i, n) in &self.buckets {
            seen += n;
            if seen >= rank {
                let (low, width) = bucket_range(*i as usize);
                return Some(low + width / 2);
            }
        }
        None
    }

    /// [`quantile_us`](Self::quantile_us) in milliseconds.
    pub fn quantile_ms(&self, q: f64) -> Option<f64> {
        self.quantile_us(q).map(|us| us as f64 / 1000.0)
    }
}

/// A histogram since start and the sum of its durations: what a Prometheus histogram shows.
/// Merges across workers, and never goes down while its worker lives.
///
/// ```
/// use brisk::latency::LatencyTotals;
///
/// let t = LatencyTotals::default();
/// assert_eq!(t.count(), 0);
/// // Cumulative counts at 1 µs, 2 µs, 4 µs, ... up to about 16.8 s, all 0 when empty.
/// assert!(t.cumulative().iter().all(|&(_, n)| n == 0));
/// ```
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct LatencyTotals {
    /// The durations counted since start.
    pub histogram: LatencyWindow,
    /// Their sum in microseconds.
    pub sum_us: u64,
}

/// The largest power of two (in µs) [`LatencyTotals::cumulative`] reports a bound at: 2^24 µs,
/// about 16.8 s.
const CUMULATIVE_MAX_EXP: u32 = 24;

impl LatencyTotals {
    /// How many durations it holds.
    pub fn count(&self) -> u64 {
        self.histogram.count()
    }

    /// Adds `other`'s counts and sum to these.
    pub fn merge(&mut self, other: &LatencyTotals) {
        self.histogram.merge(&other.histogram);
        self.sum_us = self.sum_us.wrapping_add(other.sum_us);
    }

    /// How many durations were under each power of two microseconds from 1 µs to 2^24 µs
    /// (about 16.8 s), as `(bound in µs, count)`. The bounds are edges of the fine buckets, so
    /// the counts are exact, not interpolated.
    pub fn cumulative(&self) -> Vec<(u64, u64)> {
        (0..=CUMULATIVE_MAX_EXP)
            .map(|exp| {
                let bound = 1u64 << exp;
                let first_above = bucket(bound);
                let under = self
                    .histogram
                    .buckets
                    .iter()
                    .take_while(|(i, _)| (*i as usize) < first_above)
                    .map(|(_, n)| n)
                    .sum();
                (bound, under)
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_cover_every_value_in_order_within_an_eighth() {
        let mut last = 0;
        for us in (0..100_000u64).chain([1 << 30, 1 << 35, u64::MAX]) {
            let i = bucket(us);
            assert!(i >= last, "{us}");
            last = i;
            let (low, width) = bucket_range(i);
            if i < BUCKETS - 1 {
                assert!(low <= us && us < low + width, "{us} in {low}+{width}");
                assert!(width as f64 <= (low as f64 / 8.0).max(1.0), "{us}");
            }
        }
        assert_eq!(bucket(u64::MAX), BUCKETS - 1);
    }

    #[test]
    fn quantiles_of_a_known_spread() {
        let r = Recent::default();
        // 1..=1000 ms, one each, all in second 5.
        for ms in 1..=1000u64 {
            r.record(5, ms * 1000);
        }
        // Second 5 is in the window once it is complete.
        assert_eq!(r.window(5).count(), 0);
        let w = r.window(6);
        assert_eq!(w.count(), 1000);
        for (q, want) in [(0.5, 500.0), (0.95, 950.0), (0.99, 990.0)] {
            let got = w.quantile_ms(q).unwrap();
            assert!(
                (got - want).abs() / want < 0.07,
                "p{q}: {got} ms, want {want}"
            );
        }
        assert_eq!(r.total(), 1000);
    }

    #[test]
    fn the_window_forgets_what_is_ten_seconds_old() {
        let r = Recent::default();
        r.record(100, 50);
        r.record(105, 5_000);
        assert_eq!(r.window(105).count(), 1);
        assert_eq!(r.window(106).count(), 2);
        assert_eq!(r.window(110).count(), 2);
        // Second 100 is out of the window from 111 on, 105 from 116 on.
        assert_eq!(r.window(111).count(), 1);
        assert_eq!(r.window(116).count(), 0);
        // A slot reused for a new second (111 takes 100's) starts empty.
        r.record(111, 7);
        assert_eq!(r.window(112).count(), 2);
        assert_eq!(r.window(112).quantile_us(0.0), Some(7));
        assert_eq!(r.total(), 3);
    }

    #[test]
    fn totals_count_since_start_with_exact_power_of_two_bounds() {
        let r = Recent::default();
        // 3 µs, 1023 µs and 1024 µs in second 1; 5 s in second 50 (the first left the window).
        for us in [3, 1023, 1024] {
            r.record(1, us);
        }
        r.record(50, 5_000_000);
        let t = r.totals();
        assert_eq!(t.count(), 4);
        assert_eq!(t.sum_us, 3 + 1023 + 1024 + 5_000_000);
        let at = |bound: u64| {
            t.cumulative()
                .into_iter()
                .find(|(b, _)| *b == bound)
                .unwrap()
                .1
        };
        assert_eq!(at(2), 0);
        assert_eq!(at(4), 1);
        // Under 1024 µs: 3 and 1023; 1024 itself is in the next bound's count.
        assert_eq!(at(1024), 2);
        assert_eq!(at(2048), 3);
        assert_eq!(at(1 << 22), 3);
        assert_eq!(at(1 << 23), 4);
        let mut both = t.clone();
        both.merge(&t);
        assert_eq!((both.count(), both.sum_us), (8, 2 * t.sum_us));
    }

    #[test]
    fn windows_merge_across_workers() {
        let (a, b) = (Recent::default(), Recent::default());
        for _ in 0..90 {
            a.record(1, 100);
        }
        for _ in 0..10 {
            b.record(1, 100_000);
        }
        let mut total = a.window(2);
        total.merge(&b.window(2));
        assert_eq!(total.count(), 100);
        assert!(total.quantile_us(0.5).unwrap() < 120);
        assert!(total.quantile_us(0.99).unwrap() > 90_000);
    }
}
