//! The WebSocket load generator against in-test echo and broadcast servers.

mod common;

use std::time::Duration;

use brisk_bench::ws::{run_ws, WsConfig, WsMode};
use brisk_bench::{Scheme, Target};
use common::{run_bin, ws_broadcast_server, ws_echo_server};

fn config(url: &str, mode: WsMode, connections: usize) -> WsConfig {
    let mut config = WsConfig::new(Target::parse(url, Scheme::Ws).unwrap());
    config.mode = mode;
    config.connections = connections;
    config.timeout = Duration::from_secs(5);
    config.drain = Duration::from_secs(2);
    config
}

#[test]
fn hold_with_ramp_and_source_ips() {
    let server = ws_echo_server();
    let mut cfg = config(&server.ws_url("/"), WsMode::Hold, 40);
    cfg.ramp = Some(200.0);
    cfg.hold = Duration::from_millis(300);
    cfg.threads = 2;
    cfg.source_ips = brisk_bench::ws::parse_source_ips("127.0.0.1-127.0.0.4").unwrap();
    let report = run_ws(&cfg).unwrap();
    let c = &report.connections;
    assert_eq!(
        (c.attempted, c.succeeded, c.failed.total),
        (40, 40, 0),
        "{report:?}"
    );
    assert_eq!(c.open_at_end, 40);
    // 40 attempts at 200/s take about 0.2 s.
    assert!(c.ramp_s > 0.15 && c.ramp_s < 1.5, "{report:?}");
    assert!(
        c.connect_rate > 20.0 && c.connect_rate < 300.0,
        "{report:?}"
    );
    assert!(report.messages.is_none());
    assert_eq!(server.accepted(), 40);
}

#[test]
fn refused_connections_are_counted() {
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let mut cfg = config(&format!("ws://127.0.0.1:{port}/"), WsMode::Hold, 5);
    cfg.hold = Duration::from_millis(100);
    let report = run_ws(&cfg).unwrap();
    assert_eq!(report.connections.succeeded, 0);
    assert_eq!(report.connections.failed.connect, 5);
}

#[test]
fn echo_latency() {
    let server = ws_echo_server();
    let mut cfg = config(&server.ws_url("/echo"), WsMode::Echo, 10);
    cfg.rate = 1000.0;
    cfg.size = 128;
    cfg.hold = Duration::from_secs(1);
    let report = run_ws(&cfg).unwrap();
    let m = report.messages.as_ref().unwrap();
    // 1000 msg/s over 1 s, give or take the scheduling edges.
    assert!(m.sent >= 900 && m.sent <= 1_100, "{report:?}");
    assert_eq!(m.delivered, m.sent, "{report:?}");
    assert_eq!(m.duplicates, 0);
    let l = &report.latency_us;
    assert_eq!(l.count, m.delivered);
    assert!(l.p50 > 0 && l.p50 <= l.p99 && l.p99 <= l.max, "{l:?}");
    assert_eq!(report.connections.failed.total, 0, "{report:?}");
}

#[test]
fn broadcast_delivers_each_message_once_per_receiver() {
    let server = ws_broadcast_server();
    let mut cfg = config(&server.ws_url("/room"), WsMode::Broadcast, 50);
    cfg.rate = 500.0;
    cfg.messages = Some(100);
    cfg.threads = 2;
    cfg.hold = Duration::from_secs(5);
    let report = run_ws(&cfg).unwrap();
    let m = report.messages.as_ref().unwrap();
    assert_eq!(m.sender_connected, Some(true));
    assert_eq!(m.sent, 100);
    assert_eq!(m.expected, 5_000);
    assert_eq!(m.delivered, 5_000, "{report:?}");
    assert_eq!(m.duplicates, 0);
    assert_eq!(report.latency_us.count, 5_000);
    assert_eq!(report.connections.succeeded, 50);
    // 50 receivers plus the sender.
    assert_eq!(server.accepted(), 51);
}

#[test]
fn broadcast_json_from_the_binary() {
    let server = ws_broadcast_server();
    let url = server.ws_url("/room");
    let (code, stdout, stderr, _) = run_bin(
        &[
            "ws",
            &url,
            "-c",
            "5",
            "--mode",
            "broadcast",
            "--rate",
            "200",
            "--messages",
            "20",
            "--send-path",
            "/room",
            "--json",
        ],
        Duration::from_secs(20),
    );
    assert_eq!(code, 0, "{stderr}");
    let json: serde_json::Value = serde_json::from_str(stdout.trim()).unwrap();
    assert_eq!(json["messages"]["delivered"], 100, "{json}");
    assert_eq!(json["messages"]["expected"], 100, "{json}");
    assert!(json["latency_us"]["p99"].is_number());
}
