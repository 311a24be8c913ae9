//! Percentiles of the latency histogram against known distributions.

use brisk_bench::LatencyHistogram;

fn within(actual: u64, expected: u64, tolerance: f64) -> bool {
    (actual as f64 - expected as f64).abs() <= expected as f64 * tolerance
}

#[test]
fn uniform_distribution_percentiles() {
    let mut h = LatencyHistogram::new();
    for v in 1..=10_000u64 {
        h.record(v);
    }
    let s = h.summary();
    assert_eq!(s.count, 10_000);
    // Three significant digits: 0.1 % relative precision, plus rank rounding.
    for (actual, expected) in [
        (s.p50, 5_000),
        (s.p75, 7_500),
        (s.p90, 9_000),
        (s.p95, 9_500),
        (s.p99, 9_900),
        (s.p999, 9_990),
        (s.max, 10_000),
    ] {
        assert!(
            within(actual, expected, 0.002),
            "{actual} vs {expected}: {s:?}"
        );
    }
    assert!((s.mean - 5_000.5).abs() < 10.0, "{s:?}");
}

#[test]
fn merge_and_outliers() {
    let mut a = LatencyHistogram::new();
    let mut b = LatencyHistogram::new();
    for _ in 0..999 {
        a.record(100);
    }
    b.record(1_000_000);
    a.merge(&b);
    let s = a.summary();
    assert_eq!(s.count, 1_000);
    assert!(within(s.p99, 100, 0.002), "{s:?}");
    assert!(within(s.max, 1_000_000, 0.002), "{s:?}");
    assert!(LatencyHistogram::new().summary().p50 == 0);
}
