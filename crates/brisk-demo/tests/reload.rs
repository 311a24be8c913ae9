//! Reloads and graceful stops under load lose nothing: brisk-bench drives HTTP load with and
//! without keep-alive while the demo's workers are replaced or stopped, in both listener
//! modes (one SO_REUSEPORT socket per worker, and one socket the workers share), and every
//! request the server received gets its answer. WebSocket clients get 1001 after what was
//! queued for them.

use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use brisk_bench::report::HttpReport;
use brisk_testkit::*;
use tungstenite::protocol::frame::coding::CloseCode;
use tungstenite::{Message, WebSocket};

mod common;
use common::{every_request_answered, load, DEMO};

struct Demo {
    server: ServerProcess,
    http: u16,
    ws: u16,
}

/// The demo with 2 workers per server; `extra` flags after the addresses.
fn demo(extra: &[&str]) -> Demo {
    let (http, ws) = (free_port(), free_port());
    let h = format!("http://127.0.0.1:{http}");
    let w = format!("websocket://127.0.0.1:{ws}");
    let t = format!("text://127.0.0.1:{}", free_port());
    let f = format!("frame://127.0.0.1:{}", free_port());
    let args = [
        "--workers",
        "2",
        "--http",
        &h,
        "--websocket",
        &w,
        "--text",
        &t,
        "--frame",
        &f,
    ];
    let args: Vec<&str> = args.iter().chain(extra).copied().collect();
    let server = ServerProcess::start(DEMO, &args, 8).unwrap();
    Demo { server, http, ws }
}

/// Errors other than a refused connection: requests that were sent and got no answer.
fn lost(r: &HttpReport) -> u64 {
    r.errors.total - r.errors.connect
}

fn check_cli(server: &ServerProcess, command: &[&str]) {
    let out = server.cli(command);
    assert!(
        out.status.success(),
        "{command:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Five reloads during a 20 s run, with keep-alive and without at once; plain reloads and
/// graceful ones alternate.
fn five_reloads_lose_nothing(extra: &[&str]) {
    let d = demo(extra);
    let before = d.server.worker_pids().unwrap();
    let kept = load(d.http, 20, true, 20);
    let fresh = load(d.http, 10, false, 20);
    for i in 0..5 {
        thread::sleep(Duration::from_secs(3));
        let cmd: &[&str] = if i % 2 == 0 {
            &["reload"]
        } else {
            &["reload", "-g"]
        };
        check_cli(&d.server, cmd);
    }
    let (kept, fresh) = (kept.join().unwrap(), fresh.join().unwrap());
    let after = d.server.worker_pids().unwrap();
    assert!(
        after.iter().all(|p| !before.contains(p)),
        "{before:?} -> {after:?}"
    );
    every_request_answered("reloads", extra, [&kept, &fresh]);
}

#[test]
fn five_reloads_under_load_lose_no_request_with_a_reuse_port_socket_per_worker() {
    five_reloads_lose_nothing(&[]);
}

#[test]
fn five_reloads_under_load_lose_no_request_with_one_shared_socket() {
    five_reloads_lose_nothing(&["--shared-listener"]);
}

/// A graceful stop in the middle of a run: afterwards connections are refused, and every
/// request sent before gets its answer.
fn graceful_stop_loses_nothing(extra: &[&str]) {
    let d = demo(extra);
    let kept = load(d.http, 20, true, 4);
    let fresh = load(d.http, 10, false, 4);
    thread::sleep(Duration::from_secs(2));
    check_cli(&d.server, &["stop", "-g"]);
    let (kept, fresh) = (kept.join().unwrap(), fresh.join().unwrap());
    for (what, r) in [("keep-alive", &kept), ("a connection per request", &fresh)] {
        eprintln!(
            "{extra:?} {what}: {} requests, errors {:?}",
            r.requests, r.errors
        );
        assert!(r.requests > 100, "{what}: only {} requests", r.requests);
        assert!(
            r.errors.connect > 0,
            "{what}: the load ended before the stop"
        );
        assert_eq!(
            lost(r),
            0,
            "{what}: requests lost in a graceful stop: {:?}",
            r.errors
        );
    }
}

#[test]
fn a_graceful_stop_under_load_answers_every_request_sent_before_it_with_a_socket_per_worker() {
    graceful_stop_loses_nothing(&[]);
}

#[test]
fn a_graceful_stop_under_load_answers_every_request_sent_before_it_with_one_shared_socket() {
    graceful_stop_loses_nothing(&["--shared-listener"]);
}

/// Clients that each connect, ask for `/plaintext` and read the answer, over and over, until
/// told to stop; every attempt a new connection. The counts are shared with the test.
#[derive(Default, Debug)]
struct ConnectionStorm {
    done: AtomicBool,
    answered: AtomicU64,
    refused: AtomicU64,
    /// Connected, asked, and got no answer: the kernel had queued the connection, and the
    /// listener was closed before a worker took it.
    lost: AtomicU64,
}

impl ConnectionStorm {
    /// Starts `threads` clients on `port`.
    fn start(port: u16, threads: usize) -> (Arc<Self>, Vec<thread::JoinHandle<()>>) {
        let storm = Arc::new(ConnectionStorm::default());
        let addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
        let clients = (0..threads)
            .map(|_| {
                let storm = storm.clone();
                thread::spawn(move || {
                    while !storm.done.load(Ordering::Relaxed) {
                        storm.attempt(addr);
                    }
                })
            })
            .collect();
        (storm, clients)
    }

    fn attempt(&self, addr: std::net::SocketAddr) {
        use std::io::{Read, Write};
        let Ok(mut s) = TcpStream::connect_timeout(&addr, Duration::from_secs(5)) else {
            self.refused.fetch_add(1, Ordering::Relaxed);
            return;
        };
        let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
        let mut answer = Vec::new();
        let asked = s.write_all(b"GET /plaintext HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
        let read = asked.and_then(|_| s.read_to_end(&mut answer));
        let outcome = if read.is_ok() && answer.starts_with(b"HTTP/1.1 200") {
            &self.answered
        } else {
            &self.lost
        };
        outcome.fetch_add(1, Ordering::Relaxed);
    }

    fn count(n: &AtomicU64) -> u64 {
        n.load(Ordering::Relaxed)
    }
}

/// A graceful stop while clients open connections as fast as they can: each connection the
/// kernel completed gets its answer, and the rest are refused. (Closing a listener resets
/// what is queued on it; before the master stopped the listeners' handshakes first, 2 rounds
/// of 12 lost connections this way.)
#[test]
fn a_graceful_stop_in_a_storm_of_new_connections_answers_each_one_the_kernel_completed() {
    for round in 0..5 {
        let d = demo(&[]);
        let (storm, clients) = ConnectionStorm::start(d.http, 16);
        let answered = || ConnectionStorm::count(&storm.answered);
        wait_until(Duration::from_secs(10), "answers before the stop", || {
            answered() > 1000
        });
        check_cli(&d.server, &["stop", "-g"]);
        // A SYN dropped while the listeners closed is retried about a second later, and
        // refused then.
        let refused_at_stop = ConnectionStorm::count(&storm.refused);
        wait_until(Duration::from_secs(10), "refusals after the stop", || {
            ConnectionStorm::count(&storm.refused) > refused_at_stop + 16
        });
        storm.done.store(true, Ordering::Relaxed);
        for c in clients {
            c.join().unwrap();
        }
        eprintln!("round {round}: {storm:?}");
        assert_eq!(
            ConnectionStorm::count(&storm.lost),
            0,
            "round {round}: {storm:?}"
        );
    }
}

/// The pids and open connections of the HTTP server's workers, as `status` shows them.
fn http_workers(d: &Demo) -> Vec<(i32, u64)> {
    let status = d.server.status().unwrap();
    (status["workers"].as_array().unwrap().iter())
        .filter(|w| w["server"].as_str().unwrap().starts_with("http://"))
        .map(|w| {
            (
                w["pid"].as_i64().unwrap() as i32,
                w["connections"].as_u64().unwrap(),
            )
        })
        .collect()
}

/// Crashes (issue 15, item 2): a worker killed with SIGKILL under keep-alive load is replaced
/// within a second, and only its own connections lose a request: at most one each.
#[test]
fn a_worker_killed_under_load_is_replaced_within_a_second_and_only_its_connections_fail() {
    let d = demo(&[]);
    let run = load(d.http, 20, true, 6);
    wait_until(
        Duration::from_secs(5),
        "all 20 connections open on both workers",
        || {
            let w = http_workers(&d);
            w.len() == 2
                && w.iter().all(|&(_, conns)| conns > 0)
                && w.iter().map(|&(_, conns)| conns).sum::<u64>() == 20
        },
    );
    let workers = http_workers(&d);
    let (victim, its_connections) = workers[0];
    // SAFETY: killing our own test server's worker.
    unsafe { libc::kill(victim, libc::SIGKILL) };
    let killed = std::time::Instant::now();
    wait_until(Duration::from_secs(1), "a replacement worker", || {
        let w = http_workers(&d);
        w.len() == 2 && w.iter().all(|&(pid, _)| pid != victim)
    });
    let replaced = killed.elapsed();
    let r = run.join().unwrap();
    eprintln!(
        "replaced after {replaced:?}; the killed worker held {its_connections} of 20 \
         connections; {} requests, errors {:?}",
        r.requests, r.errors
    );
    assert!(r.requests > 1000, "only {} requests", r.requests);
    assert!(
        lost(&r) <= its_connections,
        "{} requests lost, more than the killed worker's {its_connections} connections: {:?}",
        lost(&r),
        r.errors
    );
}

fn ws_client(port: u16) -> WebSocket<TcpStream> {
    let s = connect(port);
    let (ws, resp) = tungstenite::client(format!("ws://127.0.0.1:{port}/"), s).expect("handshake");
    assert_eq!(resp.status(), 101);
    ws
}

#[test]
fn a_reload_sends_websocket_clients_what_was_queued_for_them_then_1001() {
    let d = demo(&[]);
    let mut ws = ws_client(d.ws);
    // Four echoes of 256 KiB that the client does not read yet: they wait in the server's
    // send buffer.
    let message: Vec<u8> = (0..256 << 10).map(|i| (i % 251) as u8).collect();
    for _ in 0..4 {
        ws.send(Message::binary(message.clone())).unwrap();
    }
    wait_until(
        Duration::from_secs(5),
        "the worker received the four messages",
        || {
            let status = d.server.status().unwrap();
            let received: u64 = status["workers"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|w| w["server"].as_str().unwrap().starts_with("websocket://"))
                .map(|w| w["bytes_in"].as_u64().unwrap())
                .sum();
            received >= 4 * message.len() as u64
        },
    );
    check_cli(&d.server, &["reload"]);
    for i in 0..4 {
        match ws.read().unwrap() {
            Message::Binary(echo) => assert!(echo[..] == message[..], "echo {i} differs"),
            other => panic!("echo {i}: got {other:?}"),
        }
    }
    match ws.read().unwrap() {
        Message::Close(Some(close)) => {
            assert_eq!(close.code, CloseCode::Away, "{close:?}");
        }
        other => panic!("expected a close frame with 1001, got {other:?}"),
    }
}
