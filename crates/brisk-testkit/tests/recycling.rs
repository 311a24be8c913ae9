//! Worker recycling (`max_requests`, `max_memory_mib`) through the fixture's HTTP server: a
//! worker past either limit is replaced by a fresh one while clients keep sending, none of
//! their requests fails, and `status` counts the recycles by cause.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use brisk_testkit::*;

const FIXTURE: &str = env!("CARGO_BIN_EXE_brisk-fixture");

/// What the keep-alive clients saw.
#[derive(Debug, Default)]
struct Seen {
    /// Requests answered 200 with a pid.
    ok: u64,
    /// Requests that got no complete answer, or another status; what happened to each.
    failed: Vec<String>,
    /// The pids that answered.
    pids: std::collections::BTreeSet<u32>,
}

/// One answer to `GET /pid` on `reader`'s connection: the pid, and whether the server
/// closes the connection after it. An error says how the request failed.
fn pid_answer(reader: &mut BufReader<TcpStream>) -> Result<(u32, bool), String> {
    let mut status = String::new();
    let mut length = None;
    let mut close = false;
    let mut line = String::new();
    loop {
        line.clear();
        match reader.read_line(&mut line) {
            Ok(0) => return Err(format!("closed inside the head after {status:?}")),
            Ok(_) => {}
            Err(e) => return Err(format!("reading the head: {e}")),
        }
        if status.is_empty() {
            status = line.trim_end().to_string();
            continue;
        }
        let Some((name, value)) = line.trim_end().split_once(':') else {
            break;
        };
        let value = value.trim();
        if name.eq_ignore_ascii_case("content-length") {
            length = value.parse::<usize>().ok();
        }
        if name.eq_ignore_ascii_case("connection") && value.eq_ignore_ascii_case("close") {
            close = true;
        }
    }
    let mut body = vec![0u8; length.ok_or("no content-length")?];
    reader
        .read_exact(&mut body)
        .map_err(|e| format!("reading the body: {e}"))?;
    if !status.starts_with("HTTP/1.1 200") {
        return Err(format!("{status}: {}", String::from_utf8_lossy(&body)));
    }
    let pid = String::from_utf8_lossy(&body)
        .parse()
        .map_err(|_| format!("not a pid: {body:?}"))?;
    Ok((pid, close))
}

/// `clients` threads sending `GET /pid` on keep-alive connections to `port` until `stop`;
/// each opens a new connection when the server closes one after an answer.
fn keep_alive_load(
    port: u16,
    clients: usize,
    stop: Arc<AtomicBool>,
) -> (Arc<Mutex<Seen>>, Vec<std::thread::JoinHandle<()>>) {
    let seen = Arc::new(Mutex::new(Seen::default()));
    let threads = (0..clients)
        .map(|_| {
            let (seen, stop) = (seen.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut conn: Option<BufReader<TcpStream>> = None;
                while !stop.load(Relaxed) {
                    let reader = match &mut conn {
                        Some(r) => r,
                        None => {
                            let s = match TcpStream::connect(("127.0.0.1", port)) {
                                Ok(s) => s,
                                Err(e) => {
                                    seen.lock().unwrap().failed.push(format!("connect: {e}"));
                                    continue;
                                }
                            };
                            s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
                            conn.insert(BufReader::new(s))
                        }
                    };
                    let sent = reader
                        .get_mut()
                        .write_all(b"GET /pid HTTP/1.1\r\nhost: t\r\n\r\n");
                    let answer = match sent {
                        Ok(()) => pid_answer(reader),
                        Err(e) => Err(format!("sending: {e}")),
                    };
                    let mut seen = seen.lock().unwrap();
                    match answer {
                        Ok((pid, close)) => {
                            seen.ok += 1;
                            seen.pids.insert(pid);
                            if close {
                                conn = None;
                            }
                        }
                        Err(e) => {
                            seen.failed.push(e);
                            conn = None;
                        }
                    }
                }
            })
        })
        .collect();
    (seen, threads)
}

fn recycles(server: &ServerProcess, cause: &str) -> u64 {
    server.status().unwrap()["recycles"][cause]
        .as_u64()
        .unwrap_or(0)
}

/// The fixture's HTTP server with 2 workers and `limit` (a fixture flag and its value), and
/// its port.
fn two_workers_with(limit: [&str; 2]) -> (ServerProcess, u16) {
    let port = free_port();
    let http = format!("http://127.0.0.1:{port}");
    let args = ["--http", &http, "--workers", "2", limit[0], limit[1]];
    (ServerProcess::start(FIXTURE, &args, 2).unwrap(), port)
}

#[test]
fn workers_past_max_requests_are_replaced_without_a_failed_request() {
    let (server, port) = two_workers_with(["--recycle-requests", "3000"]);
    let first = server.worker_pids().unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let (seen, threads) = keep_alive_load(port, 4, stop.clone());
    // Each worker serves 3,000 requests (no jitter), then is replaced: four recycles take
    // at least 12,000 requests.
    wait_until(Duration::from_secs(60), "four recycles", || {
        recycles(&server, "requests") >= 4
    });
    stop.store(true, Relaxed);
    for t in threads {
        t.join().unwrap();
    }
    let seen = seen.lock().unwrap();
    assert!(seen.failed.is_empty(), "{:?}", seen.failed);
    assert!(seen.ok >= 12_000, "{} requests answered", seen.ok);
    // More pids answered than the two workers at any one time: the new ones served too.
    assert!(seen.pids.len() >= 4, "{:?}", seen.pids);
    let now = server.worker_pids().unwrap();
    assert_eq!(now.len(), 2, "{now:?}");
    assert!(now.iter().all(|p| !first.contains(p)), "{first:?} {now:?}");
    assert_eq!(recycles(&server, "memory"), 0);
    let text = String::from_utf8(server.cli(&["status"]).stdout).unwrap();
    assert!(text.contains("recycled "), "{text}");
    let log = server.log();
    assert!(log.contains("served max_requests"), "{log}");
    assert!(log.contains("(requests)"), "{log}");
}

#[test]
fn a_worker_past_max_memory_is_replaced_and_the_other_is_not() {
    let (server, port) = two_workers_with(["--recycle-memory-mib", "64"]);
    let before = server.worker_pids().unwrap();
    // The worker this connection reaches keeps 96 MiB.
    let mut s = connect(port);
    s.write_all(b"GET /pid HTTP/1.1\r\nhost: t\r\n\r\n")
        .unwrap();
    let leaking: i32 = read_response(&mut s).text().parse().unwrap();
    s.write_all(b"GET /leak?mib=96 HTTP/1.1\r\nhost: t\r\n\r\n")
        .unwrap();
    assert_eq!(read_response(&mut s).text(), "leaked");
    wait_until(Duration::from_secs(20), "a memory recycle", || {
        recycles(&server, "memory") == 1
    });
    // The master looks at both workers in one pass: the other one stays.
    let after = server.worker_pids().unwrap();
    assert_eq!(after.len(), 2, "{after:?}");
    assert!(!after.contains(&leaking), "{leaking} {after:?}");
    let other = before.iter().find(|p| **p != leaking).unwrap();
    assert!(after.contains(other), "{before:?} {after:?}");
    // The new worker answers on a new connection (the old one closed the leaking worker's).
    wait_until(Duration::from_secs(10), "the new worker answering", || {
        let mut s = connect(port);
        s.write_all(b"GET /pid HTTP/1.1\r\nhost: t\r\n\r\n")
            .unwrap();
        let pid: i32 = read_response(&mut s).text().parse().unwrap();
        pid != *other
    });
    let log = server.log();
    assert!(log.contains("passed max_memory"), "{log}");
    assert_eq!(recycles(&server, "requests"), 0);
}

#[test]
fn a_zero_limit_fails_the_start_saying_so() {
    let http = format!("http://127.0.0.1:{}", free_port());
    let args = ["--http", &http, "--recycle-requests", "0"];
    let out = ServerProcess::start_fails(FIXTURE, &args, &[]);
    assert!(
        out.contains("max_requests and max_memory_mib must be at least 1"),
        "{out}"
    );
}
