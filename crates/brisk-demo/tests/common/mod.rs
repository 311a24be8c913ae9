//! Starting the demo for a test: every listener on a free loopback port, the run directory
//! in a temporary folder, the whole process group killed on drop.

#![allow(dead_code)]

use std::io::Write;

use brisk_testkit::*;

/// The demo binary.
pub(crate) const DEMO: &str = env!("CARGO_BIN_EXE_brisk-demo");

/// A running demo and its HTTP port.
pub(crate) struct Demo {
    pub(crate) server: ServerProcess,
    pub(crate) http: u16,
}

/// The arguments that put each of the demo's listeners on a free port, the HTTP port, and
/// `workers` workers.
pub(crate) fn demo_args(workers: usize) -> (Vec<String>, u16) {
    let http = free_port();
    let args = vec![
        "--workers".into(),
        workers.to_string(),
        "--http".into(),
        format!("http://127.0.0.1:{http}"),
        "--websocket".into(),
        format!("websocket://127.0.0.1:{}", free_port()),
        "--text".into(),
        format!("text://127.0.0.1:{}", free_port()),
        "--frame".into(),
        format!("frame://127.0.0.1:{}", free_port()),
    ];
    (args, http)
}

/// brisk-bench's HTTP load on `GET /` at `port` for `secs` seconds, in a thread.
pub(crate) fn load(
    port: u16,
    connections: usize,
    keep_alive: bool,
    secs: u64,
) -> std::thread::JoinHandle<brisk_bench::report::HttpReport> {
    use brisk_bench::target::{Scheme, Target};
    let url = format!("http://127.0.0.1:{port}/");
    let mut config = brisk_bench::http::HttpConfig::new(Target::parse(&url, Scheme::Http).unwrap());
    config.connections = connections;
    config.duration = Some(std::time::Duration::from_secs(secs));
    config.request.keep_alive = keep_alive;
    std::thread::spawn(move || brisk_bench::http::run_http(&config).unwrap())
}

/// Asserts that the keep-alive load and the connection-per-request load (in that order),
/// run during `what` with the demo's `extra` flags, made over 1,000 requests each and had
/// not one error.
pub(crate) fn every_request_answered(
    what: &str,
    extra: &[&str],
    [kept, fresh]: [&brisk_bench::report::HttpReport; 2],
) {
    for (load, r) in [("keep-alive", kept), ("a connection per request", fresh)] {
        eprintln!(
            "{extra:?} {load}: {} requests, errors {:?}",
            r.requests, r.errors
        );
        assert!(r.requests > 1000, "{load}: only {} requests", r.requests);
        assert_eq!(
            r.errors.total, 0,
            "{load}: errors during {what}: {:?}",
            r.errors
        );
    }
}

/// The cluster secret of the tests' instances.
pub(crate) const CLUSTER_SECRET: &str = "tests-cluster-secret-0123456789";

/// The demo with `workers` workers per server and `extra` flags, started and waited for
/// (with `--redis`, the workers of the `jobs` and `schedules` processes too).
pub(crate) fn demo_with(workers: usize, extra: &[&str]) -> Demo {
    let (mut args, http) = demo_args(workers);
    args.extend(extra.iter().map(|s| s.to_string()));
    // Instances on one Redis share a cluster secret.
    if extra.contains(&"--redis") || extra.contains(&"--cluster-sharded") {
        args.extend(["--cluster-secret".to_string(), CLUSTER_SECRET.to_string()]);
    }
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let processes = 2 * usize::from(extra.contains(&"--redis"));
    let server = ServerProcess::start(DEMO, &args, workers * 4 + processes).unwrap();
    Demo { server, http }
}

/// `GET path` on a new connection, with its whole response.
pub(crate) fn get(port: u16, path: &str) -> HttpResponse {
    request(port, "GET", path, &[], "")
}

/// A request on a new connection (closed after it), with its whole response.
pub(crate) fn request(
    port: u16,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> HttpResponse {
    let mut s = connect(port);
    let mut head = format!("{method} {path} HTTP/1.1\r\nHost: t\r\nConnection: close\r\n");
    for (name, value) in headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    if !body.is_empty() || method == "POST" {
        head.push_str(&format!("Content-Length: {}\r\n", body.len()));
    }
    head.push_str("\r\n");
    s.write_all(head.as_bytes()).unwrap();
    s.write_all(body.as_bytes()).unwrap();
    read_response(&mut s)
}

/// A process in a process group of its own, the whole group killed when this is dropped.
pub(crate) struct Spawned(pub(crate) std::process::Child);

impl Spawned {
    /// `command` started in a new process group.
    pub(crate) fn new(command: &mut std::process::Command) -> Spawned {
        use std::os::unix::process::CommandExt;
        Spawned(command.process_group(0).spawn().unwrap())
    }
}

impl Drop for Spawned {
    fn drop(&mut self) {
        // SAFETY: kills the group this test started (the process is its leader).
        unsafe { libc::kill(-(self.0.id() as i32), libc::SIGKILL) };
        let _ = self.0.wait();
    }
}

/// The values a demo's workers refused from Redis (`redis_refused`, `status --json`).
pub(crate) fn redis_refused(d: &Demo) -> u64 {
    let status = d.server.status().unwrap();
    (status["workers"].as_array().unwrap().iter())
        .map(|w| w["redis_refused"].as_u64().unwrap_or(0))
        .sum()
}
