//! The HTTP load generator against in-test servers on loopback.

mod common;

use std::time::Duration;

use brisk_bench::http::{run_http, HttpConfig, RequestSpec};
use brisk_bench::{Scheme, Target};
use common::{http_server, http_server_with_delay, run_bin, Body};

/// A request-count run with a safety duration so a bug cannot hang the test.
fn counted(url: &str, connections: usize, requests: u64) -> HttpConfig {
    let mut config = HttpConfig::new(Target::parse(url, Scheme::Http).unwrap());
    config.connections = connections;
    config.requests = Some(requests);
    config.duration = Some(Duration::from_secs(20));
    config
}

#[test]
fn exact_request_count_with_keepalive() {
    let server = http_server(Body::Fixed);
    let report = run_http(&counted(&server.http_url("/x?y=1"), 4, 200)).unwrap();
    assert_eq!(report.requests, 200);
    assert_eq!(report.errors.total, 0, "{report:?}");
    assert_eq!(server.requests(), 200);
    assert_eq!(
        server.accepted(),
        4,
        "keep-alive with -c 4 opens 4 connections"
    );
    assert_eq!(report.connections_opened, 4);
    assert!(report.bytes_read >= 200 * 5);
    assert!(report.latency_us.count == 200 && report.latency_us.p50 > 0);
}

#[test]
fn no_keepalive_opens_one_connection_per_request() {
    let server = http_server(Body::Fixed);
    let mut config = counted(&server.http_url("/"), 4, 100);
    config.request.keep_alive = false;
    let report = run_http(&config).unwrap();
    assert_eq!(report.requests, 100);
    assert_eq!(report.errors.total, 0, "{report:?}");
    assert_eq!(server.requests(), 100);
    assert_eq!(server.accepted(), 100);
}

#[test]
fn threads_share_the_request_budget() {
    let server = http_server(Body::Fixed);
    let mut config = counted(&server.http_url("/"), 6, 500);
    config.threads = 3;
    let report = run_http(&config).unwrap();
    assert_eq!((report.requests, report.threads), (500, 3));
    assert_eq!(server.requests(), 500);
    assert_eq!(server.accepted(), 6);
}

#[test]
fn chunked_bodies_are_framed() {
    let server = http_server(Body::Chunked);
    let report = run_http(&counted(&server.http_url("/"), 3, 300)).unwrap();
    assert_eq!(report.requests, 300);
    assert_eq!(report.errors.total, 0, "{report:?}");
    assert_eq!(server.requests(), 300);
    // Framing right means the connections were reused, never reopened.
    assert_eq!(server.accepted(), 3);
}

#[test]
fn post_body_and_headers_are_sent() {
    let server = http_server(Body::Fixed);
    let mut config = counted(&server.http_url("/post"), 2, 50);
    config.request = RequestSpec {
        method: "POST".into(),
        headers: vec![("X-Test".into(), "1".into())],
        body: Some("a=1&b=2".into()),
        keep_alive: true,
    };
    let report = run_http(&config).unwrap();
    assert_eq!(report.requests, 50);
    assert_eq!(report.errors.total, 0, "{report:?}");
    assert_eq!(server.requests(), 50);
}

#[test]
fn error_statuses_are_counted() {
    let server = http_server(Body::Unavailable);
    let report = run_http(&counted(&server.http_url("/"), 2, 40)).unwrap();
    assert_eq!(report.requests, 40);
    assert_eq!(report.errors.status, 40);
    assert_eq!(report.errors.total, 40);
}

#[test]
fn constant_rate_is_held() {
    let server = http_server(Body::Fixed);
    let mut config = HttpConfig::new(Target::parse(&server.http_url("/"), Scheme::Http).unwrap());
    config.connections = 10;
    config.rate = Some(2000.0);
    config.duration = Some(Duration::from_secs(2));
    let report = run_http(&config).unwrap();
    let served = server.requests() as f64 / 2.0;
    assert!(
        (served - 2000.0).abs() <= 100.0,
        "server saw {served} req/s, report {report:?}"
    );
    assert_eq!(report.errors.total, 0, "{report:?}");
}

#[test]
fn rate_latency_is_corrected_for_coordinated_omission() {
    // One connection scheduled every 10 ms against a server taking 20 ms:
    // the schedule slips further each request, and the corrected latency
    // grows with it instead of staying at the 20 ms service time.
    let server = http_server_with_delay(Body::Fixed, Duration::from_millis(20));
    let mut config = HttpConfig::new(Target::parse(&server.http_url("/"), Scheme::Http).unwrap());
    config.connections = 1;
    config.rate = Some(100.0);
    config.duration = Some(Duration::from_secs(1));
    let report = run_http(&config).unwrap();
    let l = &report.latency_us;
    assert!(report.requests >= 30 && report.requests <= 55, "{report:?}");
    assert!(
        l.p50 >= 100_000,
        "median should include queueing delay: {l:?}"
    );
    assert!(l.max >= 300_000, "{l:?}");
}

#[test]
fn refused_target_counts_connect_errors_and_finishes() {
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let url = format!("http://127.0.0.1:{port}/");
    let (code, stdout, stderr, elapsed) = run_bin(
        &["http", &url, "-d", "1s", "-c", "4", "--json"],
        Duration::from_secs(10),
    );
    assert_eq!(code, 0, "stderr: {stderr}");
    assert!(elapsed < Duration::from_secs(3), "took {elapsed:?}");
    let json: serde_json::Value = serde_json::from_str(stdout.trim()).unwrap();
    assert_eq!(json["requests"], 0);
    let connect = json["errors"]["connect"].as_u64().unwrap();
    assert!(connect > 0, "{json}");
    assert_eq!(json["errors"]["total"].as_u64().unwrap(), connect);
    // The 10 ms back-off keeps 4 connections well under 4 * 100 + slack tries per second.
    assert!(connect < 1_000, "reconnects spin: {connect}");
}

#[test]
fn bad_urls_exit_2_with_one_sentence() {
    for url in [
        "not a url",
        "ftp://127.0.0.1/",
        "http://127.0.0.1:notaport/",
    ] {
        let (code, stdout, stderr, _) = run_bin(&["http", url, "-n", "1"], Duration::from_secs(10));
        assert_eq!(code, 2, "{url}: {stderr}");
        assert!(stdout.is_empty());
        let msg = stderr.trim();
        assert_eq!(msg.lines().count(), 1, "{msg}");
        assert!(msg.ends_with('.') && msg.contains("URL"), "{msg}");
    }
}

#[test]
fn json_report_has_all_fields() {
    let server = http_server(Body::Fixed);
    let url = server.http_url("/");
    let (code, stdout, stderr, _) = run_bin(
        &[
            "http", &url, "-n", "50", "-c", "2", "-H", "X-A: b", "--json",
        ],
        Duration::from_secs(20),
    );
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(
        stdout.trim().lines().count(),
        1,
        "exactly one JSON object: {stdout}"
    );
    let json: serde_json::Value = serde_json::from_str(stdout.trim()).unwrap();
    assert_eq!(json["requests"], 50);
    for key in ["rps", "duration_s", "bytes_read", "transfer_bps"] {
        assert!(json[key].is_number(), "{key} in {json}");
    }
    for key in [
        "connect", "read", "write", "timeout", "status", "parse", "total",
    ] {
        assert_eq!(json["errors"][key], 0, "{key} in {json}");
    }
    for key in ["p50", "p75", "p90", "p95", "p99", "p999", "max", "mean"] {
        assert!(json["latency_us"][key].is_number(), "{key} in {json}");
    }
    assert_eq!(server.requests(), 50);
}

#[test]
fn human_report_looks_like_wrk() {
    let server = http_server(Body::Fixed);
    let url = server.http_url("/");
    let (code, stdout, stderr, _) = run_bin(
        &["http", &url, "-d", "300ms", "-c", "2"],
        Duration::from_secs(10),
    );
    assert_eq!(code, 0, "{stderr}");
    assert!(
        stdout.contains("Requests/sec:") && stdout.contains("Transfer/sec:"),
        "{stdout}"
    );
    assert!(stdout.contains("Latency Distribution"), "{stdout}");
}
