//! The metrics listener over a real demo (`--metrics`): the exposition passes
//! `promtool check metrics`, counts exactly the requests and messages a test sent, never goes
//! backwards across a reload and a killed worker, fails the start when its address is taken,
//! and a real Prometheus server scraping it agrees on the request count.

use std::collections::HashMap;
use std::io::{Read, Write};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use brisk_testkit::*;

mod common;
use common::{demo_with, get, request, Demo, DEMO};

/// A demo with `workers` workers per server and a metrics listener; its metrics port.
fn demo_with_metrics(workers: usize) -> (Demo, u16) {
    let port = free_port();
    let address = format!("http://127.0.0.1:{port}");
    (demo_with(workers, &["--metrics", &address]), port)
}

#[test]
fn the_exposition_is_valid_and_counts_what_was_sent() {
    let (d, metrics) = demo_with_metrics(1);
    let before = samples(&scrape(metrics));

    // 40 GET / and 5 GET /nope on one keep-alive connection, 3 DELETE / on another.
    let mut s = connect(d.http);
    for i in 0..45 {
        let path = if i % 9 == 8 { "/nope" } else { "/" };
        write!(s, "GET {path} HTTP/1.1\r\nHost: t\r\n\r\n").unwrap();
        let want = if path == "/" { 200 } else { 404 };
        assert_eq!(read_response(&mut s).status, want);
    }
    let mut s = connect(d.http);
    for _ in 0..3 {
        s.write_all(b"DELETE / HTTP/1.1\r\nHost: t\r\n\r\n")
            .unwrap();
        let status = read_response(&mut s).status;
        assert!((400..500).contains(&status), "{status}");
    }
    // 12 echoes through /ws; 2 members of /chat, 3 messages: 6 deliveries.
    let ws = connect(d.http);
    let (mut ws, _) = tungstenite::client(format!("ws://127.0.0.1:{}/ws", d.http), ws).unwrap();
    for i in 0..12 {
        ws.send(tungstenite::Message::text(format!("m{i}")))
            .unwrap();
        assert!(ws.read().unwrap().is_text());
    }
    let chat = || {
        let s = connect(d.http);
        tungstenite::client(format!("ws://127.0.0.1:{}/chat", d.http), s)
            .unwrap()
            .0
    };
    let (mut a, mut b) = (chat(), chat());
    for i in 0..3 {
        a.send(tungstenite::Message::text(format!("c{i}"))).unwrap();
        assert!(a.read().unwrap().is_text());
        assert!(b.read().unwrap().is_text());
    }

    // Scrapes share one look at the workers for up to a second: wait for a look taken after
    // the traffic (the last thing sent: the chat messages, 6 deliveries).
    let key = "brisk_broadcast_deliveries_total";
    let text = wait_for(Duration::from_secs(5), "a scrape after the traffic", || {
        let text = scrape(metrics);
        let delivered = samples(&text).get(key).copied().unwrap_or(0.0)
            - before.get(key).copied().unwrap_or(0.0);
        (delivered >= 6.0).then_some(text)
    });
    promtool_check(&text);
    let after = samples(&text);
    let delta = |key: &str| {
        after.get(key).copied().unwrap_or(0.0) - before.get(key).copied().unwrap_or(0.0)
    };
    assert_eq!(
        delta(r#"brisk_http_requests_total{code="2xx",method="GET"}"#),
        40.0,
        "{text}"
    );
    // The WebSocket handshakes are GETs answered 101.
    assert_eq!(
        delta(r#"brisk_http_requests_total{code="1xx",method="GET"}"#),
        3.0,
        "{text}"
    );
    assert_eq!(
        delta(r#"brisk_http_requests_total{code="4xx",method="GET"}"#),
        5.0,
        "{text}"
    );
    assert_eq!(
        delta(r#"brisk_http_requests_total{code="4xx",method="DELETE"}"#),
        3.0,
        "{text}"
    );
    assert_eq!(
        delta("brisk_http_request_duration_seconds_count"),
        51.0,
        "{text}"
    );
    assert_eq!(
        delta(r#"brisk_http_request_duration_seconds_bucket{le="+Inf"}"#),
        51.0,
        "{text}"
    );
    assert!(
        delta("brisk_http_request_duration_seconds_sum") > 0.0,
        "{text}"
    );
    // /ws echoes 12 and /chat's 3 are handled; /ws sends 12 back, /chat's go out as broadcasts.
    assert_eq!(
        delta(r#"brisk_ws_messages_total{direction="in"}"#),
        15.0,
        "{text}"
    );
    assert_eq!(
        delta(r#"brisk_ws_messages_total{direction="out"}"#),
        12.0,
        "{text}"
    );
    assert_eq!(delta("brisk_broadcast_deliveries_total"), 6.0, "{text}");
    assert_eq!(
        delta(r#"brisk_errors_total{kind="handler"}"#),
        0.0,
        "{text}"
    );

    // The gauges: 4 open connections on the HTTP worker (the first keep-alive one is closed by
    // now or still open: 4 or 5), a lag and each process's memory.
    let http_worker = after
        .iter()
        .find(|(k, _)| k.starts_with("brisk_connections{") && k.contains("server=\"http://"))
        .map(|(_, v)| *v)
        .expect("the HTTP worker's connections");
    assert!((3.0..=5.0).contains(&http_worker), "{text}");
    for family in [
        "brisk_event_loop_lag_seconds{",
        "process_resident_memory_bytes{",
        "process_cpu_seconds_total{",
        "process_open_fds{",
    ] {
        // Four servers' workers and the master.
        let n = after.keys().filter(|k| k.starts_with(family)).count();
        let want = if family.starts_with("process") { 5 } else { 4 };
        assert_eq!(n, want, "{family} in {text}");
    }
    assert!(text.contains(r#"worker="master""#), "{text}");

    // The status page: the figures now, a chart per KPI, a row per worker.
    let (status, body) = http_get(metrics, "/status").unwrap();
    assert_eq!(status, 200);
    let html = String::from_utf8(body).unwrap();
    assert_eq!(html.matches("<svg").count(), 6, "{html}");
    assert_eq!(html.matches("<tr><td>").count(), 4, "{html}");
    assert!(
        html.contains(&format!("http://127.0.0.1:{}", d.http)),
        "{html}"
    );
    assert!(html.contains("http-equiv=\"refresh\""), "{html}");

    // Anything but GET and HEAD, or another path, gets a clear answer.
    let mut s = connect(metrics);
    s.write_all(b"POST /metrics HTTP/1.1\r\nHost: t\r\nContent-Length: 0\r\n\r\n")
        .unwrap();
    let r = read_response(&mut s);
    assert_eq!(r.status, 405);
    assert_eq!(r.header("allow"), Some("GET, HEAD"));
    assert_eq!(http_get(metrics, "/nothing").unwrap().0, 404);
}

/// A client that sends `GET /` in a loop on keep-alive connections (a new one after any
/// error) until told to stop, counting the 200s it got.
struct HttpLoad {
    stop: Arc<AtomicBool>,
    ok: Arc<AtomicU64>,
    thread: std::thread::JoinHandle<()>,
}

impl HttpLoad {
    fn start(port: u16) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let ok = Arc::new(AtomicU64::new(0));
        let (st, k) = (stop.clone(), ok.clone());
        let thread = std::thread::spawn(move || {
            while !st.load(Ordering::Relaxed) {
                let Ok(mut s) = std::net::TcpStream::connect(("127.0.0.1", port)) else {
                    std::thread::sleep(Duration::from_millis(5));
                    continue;
                };
                s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
                let mut buf = [0u8; 4096];
                while !st.load(Ordering::Relaxed) {
                    if s.write_all(b"GET / HTTP/1.1\r\nHost: t\r\n\r\n").is_err() {
                        break;
                    }
                    // The demo's / is small: one read holds the whole response.
                    match s.read(&mut buf) {
                        Ok(n) if n > 12 && buf.starts_with(b"HTTP/1.1 200") => {
                            k.fetch_add(1, Ordering::Relaxed);
                        }
                        _ => break,
                    }
                }
            }
        });
        HttpLoad { stop, ok, thread }
    }

    fn ok(&self) -> u64 {
        self.ok.load(Ordering::Relaxed)
    }

    fn stop(self) -> u64 {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.join().unwrap();
        self.ok.load(Ordering::Relaxed)
    }
}

/// The counters of an exposition: every sample of a `_total`, `_count`, `_sum` or `_bucket`
/// series except the per-process CPU time (a process's own counter, which ends with it).
fn counters(text: &str) -> HashMap<String, f64> {
    samples(text)
        .into_iter()
        .filter(|(k, _)| {
            let name = k.split('{').next().unwrap();
            !name.starts_with("process_")
                && ["_total", "_count", "_sum", "_bucket"]
                    .iter()
                    .any(|s| name.ends_with(s))
        })
        .collect()
}

#[test]
fn counters_never_go_backwards_across_a_reload_and_a_killed_worker() {
    let (d, metrics) = demo_with_metrics(2);
    let load = HttpLoad::start(d.http);
    wait_until(Duration::from_secs(10), "requests answered", || {
        load.ok() > 200
    });

    // Scrape all along, checking each scrape against the one before.
    let stop = Arc::new(AtomicBool::new(false));
    let scraper = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            let mut texts = Vec::new();
            while !stop.load(Ordering::Relaxed) {
                texts.push(scrape(metrics));
                std::thread::sleep(Duration::from_millis(20));
            }
            texts.push(scrape(metrics));
            texts
        })
    };
    let out = d.server.cli(&["reload"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let served = load.ok();
    wait_until(Duration::from_secs(10), "requests after the reload", || {
        load.ok() > served + 200
    });
    // Kill one HTTP worker as a crash would; the master starts another.
    let status = d.server.status().unwrap();
    let victim = status["workers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|w| w["server"].as_str().unwrap().starts_with("http://"))
        .unwrap()["pid"]
        .as_i64()
        .unwrap() as i32;
    let key = r#"brisk_http_requests_total{code="2xx",method="GET"}"#;
    let counted_before_kill = counters(&scrape(metrics))[key];
    // SAFETY: kill(2) on a pid the test just read from status.
    assert_eq!(unsafe { libc::kill(victim, libc::SIGKILL) }, 0);
    wait_until(Duration::from_secs(10), "a replacement worker", || {
        d.server.status().is_ok_and(|s| {
            let pids: Vec<i64> = s["workers"]
                .as_array()
                .unwrap()
                .iter()
                .map(|w| w["pid"].as_i64().unwrap())
                .collect();
            pids.len() == 8 && !pids.contains(&(victim as i64))
        })
    });
    let served = load.ok();
    wait_until(
        Duration::from_secs(10),
        "requests after the respawn",
        || load.ok() > served + 200,
    );
    let answered = load.stop();
    stop.store(true, Ordering::Relaxed);
    let texts = scraper.join().unwrap();
    assert!(texts.len() >= 10, "only {} scrapes", texts.len());

    let mut last = counters(&texts[0]);
    for (i, text) in texts.iter().enumerate().skip(1) {
        let now = counters(text);
        for (key, before) in &last {
            let after = now.get(key).copied().unwrap_or(0.0);
            assert!(
                after >= *before,
                "scrape {i}: {key} went from {before} to {after}\n{text}"
            );
        }
        last = now;
    }
    // Every scrape is a complete, valid exposition, the ones during the reload too.
    for text in texts.iter().step_by(texts.len().div_ceil(40)) {
        promtool_check(text);
    }
    promtool_check(texts.last().unwrap());
    // What was counted before the kill stays counted (the killed worker's requests since
    // its last report, at most a second's, are lost: scrapes share one look at the workers
    // a second), the replacement's requests add to it, and nothing is counted twice.
    let total = wait_for(
        Duration::from_secs(5),
        "the requests after the kill",
        || {
            let total = counters(&scrape(metrics))[key];
            (total > counted_before_kill).then_some(total)
        },
    );
    assert!(
        total <= answered as f64 + 1.0,
        "counted {total}, answered {answered} ({counted_before_kill} counted before the kill)"
    );
    assert_eq!(last["brisk_worker_restarts_total"], 1.0);
    assert!(last["brisk_workers_exited_total"] >= 9.0, "{last:?}");
}

/// With a token (`--metrics-token-file`), the listener answers only requests that carry it;
/// scrapes at the same moment share one look at the workers and agree.
#[test]
fn a_metrics_token_is_asked_for_and_concurrent_scrapes_agree() {
    let dir = temp_dir("metrics-token");
    let token_file = dir.path().join("token");
    std::fs::write(&token_file, "s3cret-token\n").unwrap();
    let port = free_port();
    let address = format!("http://127.0.0.1:{port}");
    let token_file = token_file.display().to_string();
    let d = demo_with(
        1,
        &["--metrics", &address, "--metrics-token-file", &token_file],
    );
    let get = |authorization: Option<&str>| {
        let mut s = connect(port);
        let auth = authorization.map_or(String::new(), |a| format!("Authorization: {a}\r\n"));
        s.write_all(
            format!("GET /metrics HTTP/1.1\r\nHost: m\r\nConnection: close\r\n{auth}\r\n")
                .as_bytes(),
        )
        .unwrap();
        read_response(&mut s)
    };
    let refused = get(None);
    assert_eq!(refused.status, 401);
    assert_eq!(refused.header("www-authenticate"), Some("Bearer"));
    assert_eq!(get(Some("Bearer wrong-token!")).status, 401);
    assert_eq!(get(Some("Basic czNjcmV0LXRva2Vu")).status, 401);
    let ok = get(Some("Bearer s3cret-token"));
    assert_eq!(ok.status, 200);
    assert!(ok.text().contains("brisk_requests_total"), "{}", ok.text());
    // Eight scrapes at once: each answered, each counting the same requests.
    assert_eq!(common::get(d.http, "/").status, 200);
    let totals: Vec<f64> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..8)
            .map(|_| {
                s.spawn(|| {
                    let r = get(Some("Bearer s3cret-token"));
                    assert_eq!(r.status, 200);
                    samples(&r.text())
                        .iter()
                        .filter(|(k, _)| k.starts_with("brisk_requests_total"))
                        .map(|(_, v)| v)
                        .sum::<f64>()
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    assert!(totals.windows(2).all(|w| w[0] == w[1]), "{totals:?}");
    // 400 connections that send nothing: the master holds at most 256 of them (issue 66),
    // and answers again once they go.
    let fds = || {
        std::fs::read_dir(format!("/proc/{}/fd", d.server.pid()))
            .unwrap()
            .count()
    };
    let before = fds();
    let idle: Vec<_> = (0..400).map(|_| connect(port)).collect();
    for c in &idle {
        c.set_nonblocking(true).unwrap();
    }
    // Those past the cap are closed at once (the others would wait for the 10 s head
    // timeout).
    wait_until(
        Duration::from_secs(5),
        "144 connections closed by the master",
        || {
            let closed = (idle.iter())
                .filter(|c| {
                    let mut c: &std::net::TcpStream = c;
                    matches!(c.read(&mut [0u8; 1]), Ok(0))
                })
                .count();
            closed >= 400 - 256
        },
    );
    let held = fds();
    assert!(
        held <= before + 256 + 4,
        "the master holds {held} descriptors, {before} before"
    );
    drop(idle);
    wait_until(Duration::from_secs(10), "/healthz to answer again", || {
        metrics_get(port, "/healthz", None).0 == 200
    });
}

#[test]
fn a_metrics_address_in_use_fails_the_start_with_a_clear_message() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().port();
    let (mut args, _) = common::demo_args(1);
    args.extend(["--metrics".into(), format!("http://127.0.0.1:{port}")]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let run_dir = temp_dir("metrics-taken");
    let mut p = ServerProcess::spawn(DEMO, &args, run_dir.path().to_path_buf()).unwrap();
    // wait_exit: whether it exited successfully; it must exit, and fail.
    assert!(!p.wait_exit(Duration::from_secs(20)).unwrap(), "it started");
    let log = p.log();
    assert!(
        log.contains(&format!("metrics listener http://127.0.0.1:{port}"))
            && log.contains("Address already in use"),
        "{log}"
    );

    let mut args: Vec<&str> = args.clone();
    let n = args.len();
    args[n - 1] = "tcp://127.0.0.1:9";
    let second = run_dir.path().join("second");
    std::fs::create_dir(&second).unwrap();
    let mut p = ServerProcess::spawn(DEMO, &args, second).unwrap();
    // wait_exit: whether it exited successfully; it must exit, and fail.
    assert!(!p.wait_exit(Duration::from_secs(20)).unwrap(), "it started");
    let log = p.log();
    assert!(
        log.contains("metrics listener \"tcp://127.0.0.1:9\""),
        "{log}"
    );
}

#[test]
fn a_real_prometheus_scrapes_the_request_count() {
    let (d, metrics) = demo_with_metrics(1);
    let prometheus = Prometheus::start(&[format!("127.0.0.1:{metrics}")]).unwrap();
    let mut s = connect(d.http);
    for _ in 0..150 {
        s.write_all(b"GET / HTTP/1.1\r\nHost: t\r\n\r\n").unwrap();
        assert_eq!(read_response(&mut s).status, 200);
    }
    let ours = samples(&scrape(metrics));
    let sent = ours[r#"brisk_http_requests_total{code="2xx",method="GET"}"#];
    assert!(sent >= 150.0);
    // Prometheus scrapes every second: within a few it holds the same figure.
    let query = r#"sum(brisk_http_requests_total{code="2xx",method="GET"})"#;
    let seen = poll(Duration::from_secs(20), || {
        prometheus.query(query).filter(|v| *v == sent)
    });
    assert_eq!(
        seen,
        Some(sent),
        "Prometheus says {:?}; targets {:?}; log:\n{}",
        prometheus.query(query),
        prometheus.targets(),
        prometheus.log()
    );
    let targets = prometheus.targets();
    assert_eq!(targets.len(), 1);
    assert_eq!(targets[0].1, "up", "{targets:?}");
    // The histogram arrives whole: its count is the requests answered.
    let count = prometheus
        .query("sum(brisk_http_request_duration_seconds_count)")
        .unwrap();
    assert!(count >= 150.0, "{count}");
}

/// `--max-requests`: a worker that has served its requests is replaced under load, and the
/// exposition counts the recycle by cause (and it is no restart).
#[test]
fn a_recycled_worker_is_counted_by_cause() {
    let port = free_port();
    let address = format!("http://127.0.0.1:{port}");
    let d = demo_with(1, &["--metrics", &address, "--max-requests", "500"]);
    let before = d
        .server
        .pids_of(&format!("http://127.0.0.1:{}", d.http))
        .unwrap();
    let load = HttpLoad::start(d.http);
    let recycled = |text: &str| samples(text)["brisk_worker_recycles_total{cause=\"requests\"}"];
    let text = wait_for(Duration::from_secs(30), "a recycle", || {
        let text = scrape(port);
        (recycled(&text) >= 1.0).then_some(text)
    });
    load.stop();
    promtool_check(&text);
    let s = samples(&text);
    assert_eq!(s["brisk_worker_recycles_total{cause=\"memory\"}"], 0.0);
    assert_eq!(s["brisk_worker_restarts_total"], 0.0);
    let after = d
        .server
        .pids_of(&format!("http://127.0.0.1:{}", d.http))
        .unwrap();
    assert_eq!(after.len(), 1);
    assert_ne!(before, after);
}

/// The demo's app counter: each message `/api` commits adds one to
/// `demo_messages_posted_total`; a refused one (text too long) does not.
#[test]
fn posted_messages_are_counted_in_the_app_counter() {
    let (d, metrics) = demo_with_metrics(2);
    let json = [("Content-Type", "application/json")];
    let room = request(d.http, "POST", "/api/rooms", &json, r#"{"name": "m"}"#);
    assert_eq!(room.status, 201, "{}", room.text());
    let room: serde_json::Value = serde_json::from_slice(&room.body).unwrap();
    let path = format!("/api/rooms/{}/messages", room["id"].as_str().unwrap());
    for i in 0..3 {
        let body = format!(r#"{{"author": "a", "text": "hello {i}"}}"#);
        assert_eq!(request(d.http, "POST", &path, &json, &body).status, 201);
    }
    let long = format!(r#"{{"author": "a", "text": "{}"}}"#, "x".repeat(4_001));
    assert_eq!(request(d.http, "POST", &path, &json, &long).status, 400);
    let text = wait_for(Duration::from_secs(10), "three posts counted", || {
        let text = scrape(metrics);
        (samples(&text).get("demo_messages_posted_total") == Some(&3.0)).then_some(text)
    });
    assert!(
        text.contains("# TYPE demo_messages_posted_total counter"),
        "{text}"
    );
    promtool_check(&text);
}

/// `GET path` on the metrics listener at `port`, with `Authorization: Bearer TOKEN` if
/// given: the status and body.
fn metrics_get(port: u16, path: &str, token: Option<&str>) -> (u16, String) {
    let mut s = connect(port);
    let auth = token.map_or(String::new(), |t| format!("Authorization: Bearer {t}\r\n"));
    let head = format!("GET {path} HTTP/1.1\r\nHost: m\r\nConnection: close\r\n{auth}\r\n");
    s.write_all(head.as_bytes()).unwrap();
    let r = read_response(&mut s);
    (r.status, r.text())
}

/// On PostgreSQL, the worker's database connections are exported, idle after the query, and
/// the waits and timeouts counters start at zero; `/readyz` follows the database (the demo's
/// readiness check), `/healthz` does not. With a metrics token, why `/readyz` fails (the
/// database's error) is told only to a request that carries it (issue 66).
#[test]
fn database_connections_are_exported_per_worker() {
    let mut pg = Postgres::start().unwrap();
    let port = free_port();
    let address = format!("http://127.0.0.1:{port}");
    let dir = temp_dir("metrics-token");
    let token_file = dir.path().join("token");
    std::fs::write(&token_file, "db-test-token\n").unwrap();
    let token_file = token_file.display().to_string();
    let d = demo_with(
        1,
        &[
            "--metrics",
            &address,
            "--metrics-token-file",
            &token_file,
            "--database",
            &pg.url(),
        ],
    );
    assert_eq!(get(d.http, "/db").status, 200);
    let text = wait_for(Duration::from_secs(10), "an idle connection", || {
        let text = metrics_get(port, "/metrics", Some("db-test-token")).1;
        let idle = samples(&text).into_iter().any(|(k, v)| {
            k.starts_with("brisk_db_connections{") && k.contains("state=\"idle\"") && v >= 1.0
        });
        idle.then_some(text)
    });
    promtool_check(&text);
    let s = samples(&text);
    assert_eq!(s["brisk_db_waits_total"], 0.0, "{text}");
    assert_eq!(s["brisk_db_timeouts_total{kind=\"query\"}"], 0.0, "{text}");
    assert_eq!(
        s["brisk_db_timeouts_total{kind=\"acquire\"}"], 0.0,
        "{text}"
    );

    let probe = |path: &str| metrics_get(port, path, Some("db-test-token"));
    assert_eq!(probe("/readyz"), (200, "ready: 4 workers\n".into()));
    assert_eq!(metrics_get(port, "/readyz", None).0, 200);
    pg.kill();
    // Answers are shared for a second: the first 503 may come a second after the kill.
    let said = wait_for(Duration::from_secs(10), "/readyz to fail", || {
        let (status, said) = probe("/readyz");
        (status == 503).then_some(said)
    });
    assert!(said.contains("database: "), "{said}");
    let (status, told) = metrics_get(port, "/readyz", None);
    assert_eq!(status, 503, "{told}");
    assert!(
        !told.contains("database"),
        "the error told without the token: {told}"
    );
    assert!(told.contains("metrics token"), "{told}");
    assert_eq!(probe("/healthz").0, 200);
    pg.start_again().unwrap();
    wait_until(Duration::from_secs(20), "ready again", || {
        probe("/readyz").0 == 200
    });
}
