//! Repetition statistics: drop the highest and lowest run (the published
//! method), then the median and the min..max spread of the kept runs; and
//! scaling efficiency.

use serde::{Deserialize, Serialize};

/// The summary of K repeated measurements of one value.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Spread {
    /// Median of the kept runs.
    pub median: f64,
    /// Smallest kept value.
    pub min: f64,
    /// Largest kept value.
    pub max: f64,
    /// Runs kept.
    pub kept: usize,
    /// Runs dropped (the highest and the lowest when there are at least 3).
    pub dropped: usize,
}

/// Indices of `values` kept after dropping one highest and one lowest
/// (only when there are at least 3 values), in ascending value order.
pub fn kept_indices(values: &[f64]) -> Vec<usize> {
    let mut idx: Vec<usize> = (0..values.len()).collect();
    idx.sort_by(|&a, &b| values[a].total_cmp(&values[b]));
    if idx.len() >= 3 {
        idx.remove(idx.len() - 1);
        idx.remove(0);
    }
    idx
}

/// Trims and summarizes `values`; `None` when empty.
pub fn spread(values: &[f64]) -> Option<Spread> {
    let kept = kept_indices(values);
    if kept.is_empty() {
        return None;
    }
    let sorted: Vec<f64> = kept.iter().map(|&i| values[i]).collect();
    let n = sorted.len();
    let median = if n % 2 == 1 {
        sorted[n / 2]
    } else {
        (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0
    };
    Some(Spread {
        median,
        min: sorted[0],
        max: sorted[n - 1],
        kept: n,
        dropped: values.len() - n,
    })
}

/// The index of the run whose value is the median of the kept runs (the
/// lower middle one for an even count): its latency is the one reported.
pub fn median_index(values: &[f64]) -> Option<usize> {
    let kept = kept_indices(values);
    if kept.is_empty() {
        return None;
    }
    Some(kept[(kept.len() - 1) / 2])
}

/// The trimmed median of `ours[i] / theirs[i]` over pairs of runs made back to back: a
/// machine that drifts between pairs moves both runs of a pair alike, so the ratio holds
/// where the ratio of two medians would not. `None` without a pair with `theirs > 0`.
///
/// ```
/// use brisk_bench::suite::stats::paired_ratio;
/// // The machine slowed down by half for the last pairs; each pair still says 0.9.
/// let ours = [90.0, 90.0, 45.0, 45.0, 45.0];
/// let theirs = [100.0, 100.0, 50.0, 50.0, 50.0];
/// assert!((paired_ratio(&ours, &theirs).unwrap() - 0.9).abs() < 1e-9);
/// ```
pub fn paired_ratio(ours: &[f64], theirs: &[f64]) -> Option<f64> {
    let ratios: Vec<f64> = ours
        .iter()
        .zip(theirs)
        .filter(|(_, &t)| t > 0.0)
        .map(|(&o, &t)| o / t)
        .collect();
    spread(&ratios).map(|s| s.median)
}

/// Scaling efficiency = actual / (units × single-unit throughput).
pub fn efficiency(actual: f64, units: usize, single: f64) -> Option<f64> {
    if units == 0 || single <= 0.0 || !actual.is_finite() {
        return None;
    }
    Some(actual / (units as f64 * single))
}
