//! The repetition statistics of the suite: trimming, median, spread, and
//! scaling efficiency, on fixed inputs.

use brisk_bench::suite::stats::{efficiency, kept_indices, median_index, paired_ratio, spread};

#[test]
fn five_runs_drop_highest_and_lowest() {
    let s = spread(&[100.0, 90.0, 130.0, 50.0, 110.0]).unwrap();
    assert_eq!(s.kept, 3);
    assert_eq!(s.dropped, 2);
    assert_eq!(s.median, 100.0);
    assert_eq!(s.min, 90.0);
    assert_eq!(s.max, 110.0);
}

#[test]
fn four_runs_keep_two_and_average_the_middle() {
    let s = spread(&[10.0, 40.0, 20.0, 30.0]).unwrap();
    assert_eq!((s.kept, s.dropped), (2, 2));
    assert_eq!(s.median, 25.0);
    assert_eq!((s.min, s.max), (20.0, 30.0));
}

#[test]
fn fewer_than_three_runs_are_all_kept() {
    let s = spread(&[7.0, 3.0]).unwrap();
    assert_eq!((s.kept, s.dropped), (2, 0));
    assert_eq!(s.median, 5.0);
    assert_eq!(spread(&[4.0]).unwrap().median, 4.0);
    assert!(spread(&[]).is_none());
}

#[test]
fn three_runs_keep_the_middle_one() {
    let values = [300.0, 100.0, 200.0];
    let s = spread(&values).unwrap();
    assert_eq!((s.median, s.min, s.max, s.kept), (200.0, 200.0, 200.0, 1));
    assert_eq!(kept_indices(&values), vec![2]);
    assert_eq!(median_index(&values), Some(2));
}

#[test]
fn median_index_points_at_the_median_run() {
    // Kept (sorted): 90 (i=1), 100 (i=0), 110 (i=4): the median run is i=0.
    assert_eq!(median_index(&[100.0, 90.0, 130.0, 50.0, 110.0]), Some(0));
}

#[test]
fn scaling_efficiency() {
    // R1.7: 4 processes → 24,000 with 6,000 single = 100 %; 14 → 85,000 ≈ 101 %.
    assert_eq!(efficiency(24_000.0, 4, 6_000.0), Some(1.0));
    let e = efficiency(47_000.0, 8, 6_000.0).unwrap();
    assert!((e - 0.979).abs() < 0.001, "{e}");
    assert_eq!(efficiency(1.0, 0, 1.0), None);
    assert_eq!(efficiency(1.0, 2, 0.0), None);
}

#[test]
fn paired_ratio_survives_drift_between_pairs() {
    // Each pair says 0.9 while the machine's speed halves; one pair is an outlier (dropped).
    let ours = [90.0, 72.0, 45.0, 45.0, 80.0];
    let theirs = [100.0, 80.0, 50.0, 50.0, 50.0];
    assert!((paired_ratio(&ours, &theirs).unwrap() - 0.9).abs() < 1e-9);
    // The ratio of the trimmed medians would say 72 / 50 = 1.44 here.
    assert!(paired_ratio(&[], &[]).is_none());
    assert!(paired_ratio(&[1.0], &[0.0]).is_none());
}
