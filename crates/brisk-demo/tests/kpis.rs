//! The KPIs of `status` over a real demo: after a known number of HTTP requests and
//! WebSocket messages, the HTTP worker's row counts them, its latency windows hold them, the
//! event-loop lag is measured, peak memory is reported, and the text table shows it all.

use std::io::{Read, Write};
use std::time::Duration;

use brisk_testkit::*;
use serde_json::Value as Json;

mod common;
use common::demo_with;

/// The `status --json` row of the demo's HTTP worker.
fn http_row(status: &Json) -> Json {
    status["workers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|w| w["server"].as_str().unwrap().starts_with("http://"))
        .expect("an http worker")
        .clone()
}

/// How many durations a latency window holds.
fn count(window: &Json) -> u64 {
    window["buckets"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b[1].as_u64().unwrap())
        .sum()
}

#[test]
fn status_shows_rates_latency_percentiles_memory_and_loop_lag() {
    let d = demo_with(1, &[]);
    // 300 keep-alive requests on one connection.
    let mut s = connect(d.http);
    for _ in 0..300 {
        s.write_all(b"GET / HTTP/1.1\r\nHost: t\r\n\r\n").unwrap();
        let r = read_response(&mut s);
        assert_eq!(r.status, 200);
    }
    // 20 WebSocket messages through /ws (echo).
    let ws = connect(d.http);
    let (mut ws, _) = tungstenite::client(format!("ws://127.0.0.1:{}/ws", d.http), ws).unwrap();
    for i in 0..20 {
        ws.send(tungstenite::Message::text(format!("m{i}")))
            .unwrap();
        assert!(ws.read().unwrap().is_text());
    }
    // The window holds complete seconds: wait until the second of the last request is over.
    let row = wait_for(Duration::from_secs(5), "a complete second", || {
        let row = http_row(&d.server.status().unwrap());
        let done = count(&row["http_latency"]) >= 301 && count(&row["ws_latency"]) == 20;
        (done && count(&row["loop_lag"]) >= 50).then_some(row)
    });
    assert!(row["http_requests"].as_u64().unwrap() >= 301, "{row}");
    assert!(count(&row["http_latency"]) >= 301, "{row}");
    assert_eq!(row["ws_messages"].as_u64().unwrap(), 20, "{row}");
    assert_eq!(count(&row["ws_latency"]), 20, "{row}");
    assert!(
        row["rss_peak_kib"].as_u64().unwrap() >= row["rss_kib"].as_u64().unwrap(),
        "{row}"
    );
    let status = d.server.status().unwrap();
    assert_eq!(status["load_average"].as_array().unwrap().len(), 3);
    // The percentiles the table prints are in the JSON too: the worker's and everyone's.
    let p = &row["percentiles"];
    let (p50, p99) = (p["http"]["p50_ms"].as_f64(), p["http"]["p99_ms"].as_f64());
    assert!(p50.is_some_and(|p50| p50 <= p99.unwrap()), "{p}");
    assert!(p["ws"]["p99_ms"].as_f64().is_some(), "{p}");
    assert!(p["loop_lag"]["p95_ms"].as_f64().is_some(), "{p}");
    let total = &status["percentiles"];
    assert!(total["http"]["p95_ms"].as_f64().is_some(), "{total}");

    let text = d.server.cli(&["status"]);
    let text = String::from_utf8_lossy(&text.stdout).into_owned();
    let kpis = text
        .lines()
        .skip_while(|l| !l.starts_with("kpis"))
        .collect::<Vec<_>>();
    assert!(kpis.len() >= 3, "{text}");
    let http_line = kpis.iter().find(|l| l.starts_with("http://")).unwrap();
    // The requests of the last 10 s over at most 10 s: at least 30/s; p50 / p95 / p99 given.
    let cells: Vec<&str> = http_line.split_whitespace().collect();
    let recent: f64 = cells[2].parse().unwrap();
    assert!(recent >= 30.0, "{http_line}");
    for p in &cells[4..7] {
        assert!(p.parse::<f64>().is_ok(), "{http_line}");
    }
    assert!(kpis.last().unwrap().starts_with("total"), "{text}");
    assert!(text.lines().next().unwrap().contains("load "), "{text}");
    // The connection is still fine.
    s.write_all(b"GET / HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
        .unwrap();
    let mut rest = Vec::new();
    s.read_to_end(&mut rest).unwrap();
    assert!(rest.starts_with(b"HTTP/1.1 200"));
}
