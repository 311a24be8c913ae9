//! App metrics (`brisk::metrics`, `App::metric`) through the fixture's HTTP server and metrics
//! listener: what handlers in two workers counted is exported as one total, histograms are
//! cumulative, gauges are per worker, counters do not go backwards across a reload, the
//! exposition passes `promtool check metrics`, and a misnamed metric fails the start.

use std::time::Duration;

use brisk_testkit::*;

const FIXTURE: &str = env!("CARGO_BIN_EXE_brisk-fixture");

/// `GET path` on a new connection to `port`; the pid of the worker that answered.
fn hit(port: u16, path: &str) -> i32 {
    let (status, body) = http_get(port, path).expect("the fixture answers");
    assert_eq!(status, 200, "{path}");
    String::from_utf8(body).unwrap().parse().unwrap()
}

#[test]
fn app_metrics_are_summed_across_workers_and_survive_a_reload() {
    let (http, metrics) = (free_port(), free_port());
    let http_address = format!("http://127.0.0.1:{http}");
    let metrics_address = format!("http://127.0.0.1:{metrics}");
    let args = [
        "--http",
        &http_address,
        "--workers",
        "2",
        "--metrics",
        &metrics_address,
    ];
    let server = ServerProcess::start(FIXTURE, &args, 2).unwrap();
    let workers = server.worker_pids().unwrap();
    // Hits until both workers have counted some (the kernel spreads the connections).
    let mut answered = std::collections::BTreeSet::new();
    let mut hits = 0;
    while answered.len() < 2 || hits < 20 {
        answered.insert(hit(http, "/metric/hit"));
        hits += 1;
        assert!(hits < 2_000, "one worker answered every hit: {answered:?}");
    }
    for v in [0, 1, 5, 50] {
        hit(http, &format!("/metric/observe?v={v}"));
    }
    let level_pid = hit(http, "/metric/level?v=7");

    let key_hits = "fixture_hits_total{route=\"hit\"}";
    let text = wait_for(Duration::from_secs(10), "every hit counted", || {
        let text = scrape(metrics);
        (samples(&text).get(key_hits) == Some(&(hits as f64))).then_some(text)
    });
    promtool_check(&text);
    assert!(text.contains("# TYPE fixture_hits_total counter"), "{text}");
    assert!(text.contains("# HELP fixture_sizes Sizes."), "{text}");
    let s = samples(&text);
    assert_eq!(s["fixture_sizes_bucket{le=\"1\"}"], 2.0, "{text}");
    assert_eq!(s["fixture_sizes_bucket{le=\"10\"}"], 3.0, "{text}");
    assert_eq!(s["fixture_sizes_bucket{le=\"+Inf\"}"], 4.0, "{text}");
    assert_eq!(s["fixture_sizes_count"], 4.0);
    assert_eq!(s["fixture_sizes_sum"], 56.0);
    // A gauge per worker: 7 where it was set, 0 in the other.
    let levels: Vec<(&String, &f64)> = s
        .iter()
        .filter(|(k, _)| k.starts_with("fixture_level{"))
        .collect();
    assert_eq!(levels.len(), 2, "{text}");
    for pid in &workers {
        let (_, v) = levels
            .iter()
            .find(|(k, _)| k.contains(&format!("pid=\"{pid}\"")))
            .unwrap_or_else(|| panic!("no level of worker {pid}: {text}"));
        let want = if *pid == level_pid { 7.0 } else { 0.0 };
        assert_eq!(**v, want, "{text}");
    }

    // New workers: the counters keep what the old ones counted; the gauges are the new ones'.
    server.cli_ok(&["reload"]);
    hit(http, "/metric/hit");
    let text = wait_for(Duration::from_secs(10), "the hit after the reload", || {
        let text = scrape(metrics);
        (samples(&text).get(key_hits) == Some(&(hits as f64 + 1.0))).then_some(text)
    });
    promtool_check(&text);
    let s = samples(&text);
    assert_eq!(s["fixture_sizes_count"], 4.0, "{text}");
    assert_eq!(s["fixture_sizes_sum"], 56.0, "{text}");
    let now = server.worker_pids().unwrap();
    for (k, v) in s.iter().filter(|(k, _)| k.starts_with("fixture_level{")) {
        assert!(
            now.iter().any(|p| k.contains(&format!("pid=\"{p}\""))),
            "{text}"
        );
        assert_eq!(*v, 0.0, "{k}");
    }
}

#[test]
fn a_misnamed_metric_fails_the_start_saying_so() {
    let http = format!("http://127.0.0.1:{}", free_port());
    let out = ServerProcess::start_fails(FIXTURE, &["--http", &http, "--bad-metric"], &[]);
    assert!(
        out.contains("metric \"2bad_total\": a name is [a-zA-Z_:][a-zA-Z0-9_:]*"),
        "{out}"
    );
}
