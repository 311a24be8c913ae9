//! Alerts over a real demo under real load, reporting to a real webhook receiver on loopback:
//! each firing and resolution arrives once, and a webhook that hangs delays no request and is
//! counted as failing.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use brisk_testkit::*;
use serde_json::Value as Json;

mod common;
use common::{demo_with, get};

/// An HTTP server on loopback that answers every POST with 204 and keeps the JSON bodies.
struct Receiver {
    port: u16,
    events: Arc<Mutex<Vec<Json>>>,
}

impl Receiver {
    fn start() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let events = Arc::new(Mutex::new(Vec::new()));
        let kept = events.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(stream) = stream else { return };
                let kept = kept.clone();
                std::thread::spawn(move || serve(stream, &kept));
            }
        });
        Receiver { port, events }
    }

    fn url(&self) -> String {
        format!("http://127.0.0.1:{}/hook", self.port)
    }

    /// `(alert, state)` of every event received so far, in order.
    fn seen(&self) -> Vec<(String, String)> {
        self.events
            .lock()
            .unwrap()
            .iter()
            .map(|e| {
                (
                    e["alert"].as_str().unwrap_or_default().to_string(),
                    e["state"].as_str().unwrap_or_default().to_string(),
                )
            })
            .collect()
    }
}

/// Reads POSTs on one keep-alive connection, answering each with 204.
fn serve(stream: TcpStream, kept: &Mutex<Vec<Json>>) {
    let mut out = stream.try_clone().unwrap();
    let mut r = BufReader::new(stream);
    loop {
        let mut length = 0;
        loop {
            let mut line = String::new();
            if r.read_line(&mut line).unwrap_or(0) == 0 {
                return;
            }
            let line = line.trim_end();
            if line.is_empty() {
                break;
            }
            if let Some((name, value)) = line.split_once(':') {
                if name.eq_ignore_ascii_case("content-length") {
                    length = value.trim().parse().unwrap();
                }
            }
        }
        let mut body = vec![0; length];
        r.read_exact(&mut body).unwrap();
        kept.lock()
            .unwrap()
            .push(serde_json::from_slice(&body).unwrap());
        out.write_all(b"HTTP/1.1 204 No Content\r\n\r\n").unwrap();
    }
}

/// `n` client threads sending `GET path` in a loop on keep-alive connections until stopped.
struct Load {
    stop: Arc<AtomicBool>,
    threads: Vec<std::thread::JoinHandle<u64>>,
}

impl Load {
    fn start(port: u16, path: &'static str, n: usize) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let threads = (0..n)
            .map(|_| {
                let stop = stop.clone();
                std::thread::spawn(move || {
                    let mut s = connect(port);
                    let mut answered = 0;
                    while !stop.load(Ordering::Relaxed) {
                        write!(s, "GET {path} HTTP/1.1\r\nHost: t\r\n\r\n").unwrap();
                        assert_eq!(read_response(&mut s).status, 200);
                        answered += 1;
                    }
                    answered
                })
            })
            .collect();
        Load { stop, threads }
    }

    fn stop(self) -> u64 {
        self.stop.store(true, Ordering::Relaxed);
        self.threads.into_iter().map(|t| t.join().unwrap()).sum()
    }
}

fn pair(alert: &str, state: &str) -> (String, String) {
    (alert.to_string(), state.to_string())
}

#[test]
fn slow_responses_and_idleness_fire_and_resolve_once_each() {
    let hook = Receiver::start();
    let d = demo_with(
        1,
        &[
            "--alert-throughput-below",
            "20",
            "--alert-p99-ms",
            "30",
            "--alert-hold-s",
            "2",
            "--alert-webhook",
            &hook.url(),
        ],
    );
    // Idle: under 20 messages a second for 2 s.
    wait_until(Duration::from_secs(15), "throughput_below firing", || {
        hook.seen() == vec![pair("throughput_below", "firing")]
    });
    // 8 connections of 60 ms responses: about 130 a second, p99 about 60 ms.
    let load = Load::start(d.http, "/upstream?ms=60", 8);
    wait_until(Duration::from_secs(20), "p99_above firing", || {
        hook.seen().contains(&pair("p99_above", "firing"))
    });
    wait_until(Duration::from_secs(20), "throughput_below resolved", || {
        hook.seen().contains(&pair("throughput_below", "resolved"))
    });
    let answered = load.stop();
    assert!(answered > 100, "{answered}");
    // Idle again: throughput fires again; p99 resolves once its 10 s window has emptied.
    wait_until(Duration::from_secs(30), "p99_above resolved", || {
        hook.seen().contains(&pair("p99_above", "resolved"))
    });
    wait_until(
        Duration::from_secs(15),
        "throughput_below firing again",
        || {
            hook.seen()
                .iter()
                .filter(|e| e.1 == "firing" && e.0 == "throughput_below")
                .count()
                == 2
        },
    );
    let seen = hook.seen();
    let of = |alert: &str| -> Vec<String> {
        seen.iter()
            .filter(|e| e.0 == alert)
            .map(|e| e.1.clone())
            .collect()
    };
    assert_eq!(
        of("throughput_below"),
        ["firing", "resolved", "firing"],
        "{seen:?}"
    );
    assert_eq!(of("p99_above"), ["firing", "resolved"], "{seen:?}");
    let event = hook.events.lock().unwrap()[0].clone();
    assert_eq!(event["app"], "brisk-demo", "{event}");
    assert_eq!(event["threshold"], 20.0, "{event}");
    assert_eq!(event["unit"], "requests/s", "{event}");
    assert!(
        event["message"]
            .as_str()
            .unwrap()
            .contains("throughput_below firing"),
        "{event}"
    );
    // Each edge is logged once too.
    let log = d.server.log();
    assert_eq!(log.matches("alert p99_above firing").count(), 1, "{log}");
    assert_eq!(log.matches("alert p99_above resolved").count(), 1, "{log}");
}

#[test]
fn a_hanging_webhook_delays_no_request_and_counts_as_failing() {
    // Accepts connections and never answers.
    let hanging = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = hanging.local_addr().unwrap().port();
    let metrics = free_port();
    let d = demo_with(
        1,
        &[
            "--alert-memory-mib",
            "1",
            "--alert-hold-s",
            "1",
            "--alert-webhook",
            &format!("http://127.0.0.1:{port}/hook/s3cret-token"),
            "--metrics",
            &format!("http://127.0.0.1:{metrics}"),
        ],
    );
    let firing = |text: &str| text.contains(r#"brisk_alert_firing{alert="memory_above"} 1"#);
    wait_until(Duration::from_secs(15), "memory_above firing", || {
        http_get(metrics, "/metrics").is_some_and(|(_, b)| firing(&String::from_utf8_lossy(&b)))
    });
    // The webhook call hangs for its 5 s timeout; requests are answered meanwhile, each well
    // within it.
    for _ in 0..50 {
        let t = Instant::now();
        assert_eq!(get(d.http, "/").status, 200);
        assert!(
            t.elapsed() < Duration::from_millis(2500),
            "{:?}",
            t.elapsed()
        );
    }
    let failures = |text: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix("brisk_alert_webhook_failures_total "))
            .map(|v| v.parse::<f64>().unwrap())
    };
    wait_until(Duration::from_secs(15), "a failed webhook call", || {
        http_get(metrics, "/metrics")
            .and_then(|(_, b)| failures(&String::from_utf8_lossy(&b)))
            .is_some_and(|n| n >= 1.0)
    });
    let log = d.server.log();
    assert_eq!(log.matches("alert webhook http://").count(), 1, "{log}");
    // A webhook's path often holds its token: the log shows the host only.
    assert!(!log.contains("s3cret-token"), "{log}");
    assert!(log.contains("alert memory_above firing"), "{log}");
    drop(hanging);
}
