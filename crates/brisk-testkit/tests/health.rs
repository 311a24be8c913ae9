//! Health and systemd: the metrics listener's `/healthz` and `/readyz` on the fixture (200
//! when every worker answers and is ready, 503 naming a worker that does not answer), and
//! the master's `sd_notify` messages to a socket standing in for systemd's (`READY=1` with its
//! pid, `WATCHDOG=1` at half `WATCHDOG_USEC`, `RELOADING=1` then `READY=1` around a reload,
//! `STOPPING=1`), which no worker's environment points at.

use std::os::unix::net::UnixDatagram;
use std::time::{Duration, Instant};

use brisk_testkit::*;

const FIXTURE: &str = env!("CARGO_BIN_EXE_brisk-fixture");

/// `GET path` on the metrics listener: the status and the text.
fn probe(port: u16, path: &str) -> (u16, String) {
    let (status, body) = http_get(port, path).expect("the metrics listener answers");
    (status, String::from_utf8(body).unwrap())
}

/// The fixture with an HTTP server of `workers` workers, a metrics listener, `extra` flags and
/// `env`; its metrics port.
fn with_metrics(workers: usize, extra: &[&str], env: &[(&str, &str)]) -> (ServerProcess, u16) {
    let (http, metrics) = (free_port(), free_port());
    let http = format!("http://127.0.0.1:{http}");
    let metrics_address = format!("http://127.0.0.1:{metrics}");
    let workers_arg = workers.to_string();
    let mut args = vec![
        "--http",
        &http,
        "--workers",
        &workers_arg,
        "--metrics",
        &metrics_address,
    ];
    args.extend_from_slice(extra);
    let server = ServerProcess::start_with_env(FIXTURE, &args, env, workers).unwrap();
    (server, metrics)
}

#[test]
fn probes_answer_and_systemd_hears_ready_reloading_stopping_and_the_watchdog() {
    let dir = temp_dir("health");
    let notify_path = dir.path().join("notify.sock");
    let systemd = systemd_at(&notify_path);
    let notify = notify_path.display().to_string();
    let env = [
        ("NOTIFY_SOCKET", notify.as_str()),
        ("WATCHDOG_USEC", "200000"),
    ];
    let (mut server, metrics) = with_metrics(2, &[], &env);
    assert_eq!(
        next_state(&systemd),
        format!("READY=1\nMAINPID={}", server.pid())
    );
    // The watchdog: pings every 100 ms.
    let ping = systemd.recv_timeout(Duration::from_secs(5)).unwrap();
    assert_eq!(ping, "WATCHDOG=1");

    assert_eq!(
        probe(metrics, "/healthz"),
        (200, "ok: the master and its 2 workers answer\n".into())
    );
    assert_eq!(
        probe(metrics, "/readyz"),
        (200, "ready: 2 workers\n".into())
    );
    // No worker speaks to systemd.
    for pid in server.worker_pids().unwrap() {
        let environ = std::fs::read(format!("/proc/{pid}/environ")).unwrap();
        assert!(
            !environ.windows(13).any(|w| w == b"NOTIFY_SOCKET"),
            "worker {pid} has NOTIFY_SOCKET"
        );
    }

    // A worker that stops answering fails the liveness probe, by name.
    let stuck = server.worker_pids().unwrap()[0];
    let signal = |sig| nix::sys::signal::kill(nix::unistd::Pid::from_raw(stuck), sig).unwrap();
    signal(nix::sys::signal::Signal::SIGSTOP);
    let (status, said) = probe(metrics, "/healthz");
    signal(nix::sys::signal::Signal::SIGCONT);
    assert_eq!(status, 503, "{said}");
    assert!(said.contains("not answering within 2 s"), "{said}");
    assert!(said.contains(&format!("(pid {stuck})")), "{said}");
    assert_eq!(probe(metrics, "/healthz").0, 200);

    server.cli_ok(&["reload"]);
    assert!(next_state(&systemd).starts_with("RELOADING=1\nMONOTONIC_USEC="));
    assert!(next_state(&systemd).starts_with("READY=1"));
    server.cli_ok(&["stop"]);
    assert_eq!(next_state(&systemd), "STOPPING=1");
    assert!(server.wait_exit(Duration::from_secs(20)).unwrap());
}

/// `/readyz` runs the app's readiness checks in every worker: 503 naming the check, why it
/// fails and in which worker, until it passes.
#[test]
fn readyz_waits_for_the_apps_checks_in_every_worker() {
    let dir = temp_dir("health");
    let marker = dir.path().join("ready");
    let marker_arg = marker.display().to_string();
    let (server, metrics) = with_metrics(2, &["--ready-file", &marker_arg], &[]);
    let (status, said) = probe(metrics, "/readyz");
    assert_eq!(status, 503, "{said}");
    for pid in server.worker_pids().unwrap() {
        let line = format!("marker: {marker_arg} is missing (worker ");
        assert!(said.contains(&line), "{said}");
        assert!(said.contains(&format!("(pid {pid})")), "{said}");
    }
    // Liveness does not depend on it.
    assert_eq!(probe(metrics, "/healthz").0, 200);
    std::fs::write(&marker, "").unwrap();
    // Answers are shared for a second (issue 66: probes cannot make every worker run its
    // checks per request), so the 200 may come a second later.
    let said = wait_for(Duration::from_secs(5), "/readyz to pass", || {
        let (status, said) = probe(metrics, "/readyz");
        (status == 200).then_some(said)
    });
    assert_eq!(said, "ready: 2 workers\n");
}

/// A slow readiness check (a database that takes its time) holds up no other question to the
/// worker: `status` is answered while `/readyz` still waits for the check, which passes only
/// once the test lets it. (Answers are matched to questions by id, so they may come in any
/// order.)
#[test]
fn a_slow_readiness_check_holds_up_no_other_question() {
    let dir = temp_dir("health");
    let dir_arg = dir.path().display().to_string();
    let (server, metrics) = with_metrics(1, &["--slow-check-dir", &dir_arg], &[]);
    let started = dir.path().join("started");
    let readyz = std::thread::spawn(move || probe(metrics, "/readyz"));
    wait_until(Duration::from_secs(10), "the slow check to start", || {
        started.exists()
    });
    let status = server.status().unwrap();
    assert!(
        !readyz.is_finished(),
        "status waited for the readiness check"
    );
    assert_eq!(status["workers"].as_array().unwrap().len(), 1, "{status}");
    std::fs::write(dir.path().join("release"), b"").unwrap();
    let (code, said) = readyz.join().unwrap();
    assert_eq!(code, 200, "{said}");
}

/// A systemd socket nobody reads (its queue fills in a few pings) never stalls the master:
/// the probes keep answering.
#[test]
fn a_notify_socket_that_is_not_read_never_stalls_the_master() {
    let dir = temp_dir("health");
    let notify_path = dir.path().join("notify.sock");
    let _deaf = UnixDatagram::bind(&notify_path).unwrap();
    let notify = notify_path.display().to_string();
    let env = [
        ("NOTIFY_SOCKET", notify.as_str()),
        ("WATCHDOG_USEC", "20000"),
    ];
    let (_server, metrics) = with_metrics(1, &[], &env);
    // 10 ms pings: the queue (10 datagrams by default) is full after the first few probes.
    let until = Instant::now() + Duration::from_secs(1);
    let mut probes = 0;
    while Instant::now() < until {
        assert_eq!(probe(metrics, "/healthz").0, 200);
        probes += 1;
    }
    assert!(probes > 10, "only {probes} probes answered in a second");
}
