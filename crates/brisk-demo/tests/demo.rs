//! brisk-demo end to end: echo at scale, framing edge cases, crashes, reloads, the CLI.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::Command;
use std::time::{Duration, Instant};

use brisk_testkit::*;

const DEMO: &str = env!("CARGO_BIN_EXE_brisk-demo");

struct Demo {
    server: ServerProcess,
    text: u16,
    frame: u16,
}

/// The demo's arguments with `workers` workers per server on free ports, and the Text and
/// Frame ports.
fn demo_args(workers: usize) -> (Vec<String>, u16, u16) {
    let (text, frame) = (free_port(), free_port());
    let args = [
        "--workers".to_string(),
        workers.to_string(),
        "--text".into(),
        format!("text://127.0.0.1:{text}"),
        "--frame".into(),
        format!("frame://127.0.0.1:{frame}"),
        "--http".into(),
        format!("http://127.0.0.1:{}", free_port()),
        "--websocket".into(),
        format!("websocket://127.0.0.1:{}", free_port()),
    ];
    (args.into(), text, frame)
}

fn demo(workers: usize) -> Demo {
    let (args, text, frame) = demo_args(workers);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let server = ServerProcess::start(DEMO, &args, workers * 4).unwrap();
    Demo {
        server,
        text,
        frame,
    }
}

#[test]
fn echo_over_text_and_frame_with_a_thousand_concurrent_connections_each() {
    let d = demo(2);
    let mut texts: Vec<TcpStream> = (0..1000).map(|_| connect(d.text)).collect();
    let mut frames: Vec<TcpStream> = (0..1000).map(|_| connect(d.frame)).collect();
    wait_until(
        Duration::from_secs(10),
        "all 2000 connections registered",
        || d.server.total("connections").unwrap() >= 2000,
    );
    for (i, s) in texts.iter_mut().enumerate() {
        s.write_all(format!("line {i}\n").as_bytes()).unwrap();
    }
    for (i, s) in frames.iter_mut().enumerate() {
        s.write_all(&frame(format!("frame {i}").as_bytes()))
            .unwrap();
    }
    for (i, s) in texts.iter_mut().enumerate() {
        assert_eq!(read_line(s), format!("line {i}"));
    }
    for (i, s) in frames.iter_mut().enumerate() {
        assert_eq!(read_frame(s).unwrap(), format!("frame {i}").as_bytes());
    }
    let status = d.server.status().unwrap();
    let workers = status["workers"].as_array().unwrap();
    assert_eq!(workers.len(), 8);
    let echo: Vec<_> = workers
        .iter()
        .filter(|w| {
            let s = w["server"].as_str().unwrap();
            s.starts_with("text://") || s.starts_with("frame://")
        })
        .collect();
    let total: u64 = echo
        .iter()
        .map(|w| w["total_request"].as_u64().unwrap())
        .sum();
    assert_eq!(total, 2000);
    // The kernel spreads connections over both workers of each server.
    assert!(
        echo.iter()
            .all(|w| w["connections"].as_u64().unwrap() > 100),
        "{status:#}"
    );
}

#[test]
fn one_message_split_over_many_writes_and_many_messages_in_one_write() {
    let d = demo(1);
    let mut t = connect(d.text);
    for b in b"split across writes\n" {
        t.write_all(&[*b]).unwrap();
        // Pacing, not a wait: each byte arrives in a read of its own.
        std::thread::sleep(Duration::from_millis(2));
    }
    assert_eq!(read_line(&mut t), "split across writes");
    let batch: String = (0..200).map(|i| format!("m{i}\n")).collect();
    t.write_all(batch.as_bytes()).unwrap();
    for i in 0..200 {
        assert_eq!(read_line(&mut t), format!("m{i}"));
    }

    let mut f = connect(d.frame);
    let wire = frame(&vec![7u8; 100_000]);
    for chunk in wire.chunks(997) {
        f.write_all(chunk).unwrap();
    }
    assert_eq!(read_frame(&mut f).unwrap(), vec![7u8; 100_000]);
    let mut many = Vec::new();
    for i in 0..100u32 {
        many.extend(frame(&i.to_be_bytes()));
    }
    f.write_all(&many).unwrap();
    for i in 0..100u32 {
        assert_eq!(read_frame(&mut f).unwrap(), i.to_be_bytes());
    }
}

#[test]
fn an_oversized_frame_closes_only_that_connection_and_is_counted() {
    let d = demo(1);
    let mut good = connect(d.frame);
    let mut bad = connect(d.frame);
    // Announce 11 MiB: over the 10 MiB default, rejected from the header alone.
    bad.write_all(&((11u32 << 20) + 4).to_be_bytes()).unwrap();
    let mut b = [0u8; 1];
    assert!(
        matches!(bad.read(&mut b), Ok(0) | Err(_)),
        "the oversized frame's connection is closed"
    );
    let mut short = connect(d.frame);
    short.write_all(&[0, 0, 0, 2]).unwrap();
    assert!(
        matches!(short.read(&mut b), Ok(0) | Err(_)),
        "a length under 4 is invalid"
    );
    good.write_all(&frame(b"still here")).unwrap();
    assert_eq!(read_frame(&mut good).unwrap(), b"still here");
    assert_eq!(d.server.total("rejected").unwrap(), 2);
    assert!(d.server.log().contains("bad input"), "{}", d.server.log());
}

#[test]
fn a_killed_worker_is_replaced_within_a_second() {
    let d = demo(1);
    let status = d.server.status().unwrap();
    let text_pid = status["workers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|w| w["server"].as_str().unwrap().starts_with("text://"))
        .unwrap()["pid"]
        .as_i64()
        .unwrap() as i32;
    let mut other = connect(d.frame);
    // SAFETY: killing our own test server's worker.
    unsafe { libc::kill(text_pid, libc::SIGKILL) };
    let t0 = Instant::now();
    wait_until(Duration::from_secs(1), "a new worker served", || {
        TcpStream::connect(("127.0.0.1", d.text)).is_ok_and(|mut s| {
            s.set_read_timeout(Some(Duration::from_secs(1))).unwrap();
            s.write_all(b"back\n").is_ok() && read_line_opt(&mut s).as_deref() == Some("back")
        })
    });
    let served_after = t0.elapsed();
    // Only the killed worker's connections were lost.
    other.write_all(&frame(b"unaffected")).unwrap();
    assert_eq!(read_frame(&mut other).unwrap(), b"unaffected");
    let pids = d.server.worker_pids().unwrap();
    assert_eq!(pids.len(), 4);
    assert!(!pids.contains(&text_pid));
    let log = d.server.log();
    assert!(
        log.contains("exited unexpectedly (killed by signal 9)"),
        "{log}"
    );
    assert!(d.server.status().unwrap()["restarts"].as_u64() == Some(1));
    eprintln!("a new worker served {served_after:?} after kill -9");
}

/// The text worker's pid and message count, as `status` shows them.
fn text_worker(d: &Demo) -> (i32, u64) {
    let status = d.server.status().unwrap();
    let w = status["workers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|w| w["server"].as_str().unwrap().starts_with("text://"))
        .cloned()
        .unwrap();
    (
        w["pid"].as_i64().unwrap() as i32,
        w["total_request"].as_u64().unwrap(),
    )
}

#[test]
fn the_masters_totals_survive_a_killed_worker_and_a_reload() {
    let d = demo(1);
    let mut s = connect(d.text);
    for i in 0..10 {
        assert_eq!(text_round_trip(&mut s, &format!("m{i}")), format!("m{i}"));
    }
    let (pid, seen) = text_worker(&d);
    assert_eq!(seen, 10);
    // SAFETY: killing our own test server's worker.
    unsafe { libc::kill(pid, libc::SIGKILL) };
    let retired = || d.server.status().unwrap()["retired"].clone();
    wait_until(
        Duration::from_secs(5),
        "the killed worker's totals kept",
        || retired()["workers"].as_u64() == Some(1),
    );
    assert_eq!(retired()["total_request"].as_u64(), Some(10));
    // Five more on its successor, then a reload: each old worker reports its final counters.
    let mut s = connect(d.text);
    for i in 0..5 {
        assert_eq!(text_round_trip(&mut s, &format!("n{i}")), format!("n{i}"));
    }
    drop(s);
    let out = d.server.cli(&["reload"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    wait_until(
        Duration::from_secs(5),
        "the reloaded workers' totals kept",
        || retired()["workers"].as_u64() == Some(5),
    );
    assert_eq!(retired()["total_request"].as_u64(), Some(15));
    let table = String::from_utf8_lossy(&d.server.cli(&["status"]).stdout).into_owned();
    assert!(table.contains("exited workers (5): 15 messages"), "{table}");
}

#[test]
fn the_workers_of_a_killed_master_exit_and_free_its_ports() {
    let d = demo(1);
    let workers = d.server.worker_pids().unwrap();
    assert_eq!(workers.len(), 4);
    let mut client = connect(d.text);
    assert_eq!(text_round_trip(&mut client, "before"), "before");
    // SAFETY: killing our own test server's master.
    unsafe { libc::kill(d.server.pid(), libc::SIGKILL) };
    let t0 = Instant::now();
    // Each worker learns of its master's death (its control channel closes; the kernel also
    // sends the SIGTERM asked for with PR_SET_PDEATHSIG) and stops by itself.
    wait_until(Duration::from_secs(5), "every worker gone", || {
        workers.iter().all(|&pid| {
            // A zombie (reaped by init soon) no longer holds the port.
            std::fs::read_to_string(format!("/proc/{pid}/stat"))
                .map_or(true, |stat| stat.contains(") Z "))
        })
    });
    eprintln!(
        "the workers exited {:?} after the master's kill -9",
        t0.elapsed()
    );
    // No orphan holds the listeners: the ports can be bound again (within moments: the
    // kernel releases a dead process's listening socket a little after the process is gone).
    for port in [d.text, d.frame] {
        let mut last = None;
        let bound = poll(
            Duration::from_secs(5),
            || match std::net::TcpListener::bind(("127.0.0.1", port)) {
                Ok(l) => Some(l),
                Err(e) => {
                    last = Some(e);
                    None
                }
            },
        );
        assert!(bound.is_some(), "port {port} still held: {last:?}");
    }
    // The connection the dead worker served was closed, not left hanging.
    client
        .set_read_timeout(Some(Duration::from_secs(2)))
        .unwrap();
    let mut rest = Vec::new();
    assert_eq!(client.read_to_end(&mut rest).map(|_| ()).ok(), Some(()));
}

#[test]
fn reload_replaces_every_worker_and_loses_no_text_request() {
    // The listening sockets stay with the master across a reload: nothing queued on them is
    // reset, whatever net.ipv4.tcp_migrate_req says.
    let d = demo(2);
    let before = d.server.worker_pids().unwrap();
    for graceful in [false, true] {
        let prev = d.server.worker_pids().unwrap();
        let load = TextLoad::start(d.text);
        load.wait_more(20, "the client served 20 requests");
        let cmd: &[&str] = if graceful {
            &["reload", "-g"]
        } else {
            &["reload"]
        };
        let out = d.server.cli(cmd);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(String::from_utf8_lossy(&out.stdout).contains("reloaded 8 workers"));
        // The client goes on against the new workers.
        load.wait_more(20, "20 more requests served after the reload");
        let LoadOutcome {
            refused,
            dropped,
            ok,
        } = load.stop();
        let after = d.server.worker_pids().unwrap();
        assert_eq!(after.len(), 8);
        assert!(
            after.iter().all(|p| !prev.contains(p)),
            "{prev:?} -> {after:?}"
        );
        assert!(ok > 10, "only {ok} requests served during reload");
        assert_eq!(
            refused, 0,
            "connections refused during reload ({ok} served)"
        );
        assert_eq!(dropped, 0, "requests lost during a reload ({ok} served)");
        eprintln!("reload graceful={graceful}: {ok} served, {refused} refused, {dropped} dropped");
    }
    assert!(d
        .server
        .worker_pids()
        .unwrap()
        .iter()
        .all(|p| !before.contains(p)));
}

#[test]
fn status_lists_every_worker_with_live_counters_and_connections_lists_each_connection() {
    let d = demo(2);
    let s0 = d.server.status().unwrap();
    assert_eq!(s0["workers"].as_array().unwrap().len(), 8);
    assert_eq!(s0["master_pid"].as_i64().unwrap() as i32, d.server.pid());
    let mut conns: Vec<TcpStream> = (0..6).map(|_| connect(d.text)).collect();
    for c in conns.iter_mut() {
        for _ in 0..5 {
            assert_eq!(text_round_trip(c, "count me"), "count me");
        }
    }
    assert_eq!(d.server.total("total_request").unwrap(), 30);
    assert_eq!(d.server.total("connections").unwrap(), 6);
    assert_eq!(d.server.total("bytes_in").unwrap(), 30 * 9);
    for w in d.server.status().unwrap()["workers"].as_array().unwrap() {
        assert!(w["rss_kib"].as_u64().unwrap() > 0);
        assert!(w["pid"].as_i64().unwrap() > 0);
    }
    let table = d.server.cli(&["status"]);
    let table = String::from_utf8_lossy(&table.stdout);
    assert!(
        table.contains("connections") && table.contains("total"),
        "{table}"
    );
    // Two text and two frame workers, in the counters table and again in the KPI table.
    let (counters, kpis) = table.split_at(table.find("\nkpis").expect("a KPI table"));
    for part in [counters, kpis] {
        assert_eq!(
            part.lines()
                .filter(|l| l.starts_with("text://") || l.starts_with("frame://"))
                .count(),
            4,
            "{table}"
        );
    }

    let out = d.server.cli(&["connections", "--json"]);
    let list: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let list = list.as_array().unwrap();
    assert_eq!(list.len(), 6);
    for c in list {
        assert_eq!(c["bytes_in"].as_u64(), Some(45));
        assert_eq!(c["bytes_out"].as_u64(), Some(45));
        assert!(c["remote"].as_str().unwrap().starts_with("127.0.0.1:"));
    }
    drop(conns);
}

fn run(args: &[&str]) -> std::process::Output {
    Command::new(DEMO).args(args).output().unwrap()
}

fn one_sentence(out: &std::process::Output) -> String {
    assert!(!out.status.success(), "expected failure, got {out:?}");
    let err = String::from_utf8_lossy(&out.stderr).trim().to_string();
    assert_eq!(err.lines().count(), 1, "one line: {err}");
    err
}

#[test]
fn bad_input_gets_one_plain_sentence_and_a_non_zero_exit() {
    let dir = temp_dir("cli");
    let rd = dir.path().join("run").display().to_string();
    let err = one_sentence(&run(&[
        "--run-dir",
        &rd,
        "--text",
        "127.0.0.1:7000",
        "start",
    ]));
    assert!(
        err.contains("cannot parse address \"127.0.0.1:7000\""),
        "{err}"
    );

    let err = one_sentence(&run(&["--run-dir", &rd, "status"]));
    assert!(err.contains("brisk-demo is not running"), "{err}");
    let err = one_sentence(&run(&["--run-dir", &rd, "stop"]));
    assert!(err.contains("brisk-demo is not running"), "{err}");

    let err = one_sentence(&run(&["--run-dir", "/nonexistent/brisk/run", "start"]));
    assert!(
        err.contains("cannot use run directory /nonexistent/brisk/run"),
        "{err}"
    );
    assert!(
        err.contains("parent directory /nonexistent/brisk does not exist"),
        "{err}"
    );

    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().port();
    let t = format!("text://127.0.0.1:{port}");
    let f = format!("frame://127.0.0.1:{}", free_port());
    let err = one_sentence(&run(&[
        "--run-dir",
        &rd,
        "--text",
        &t,
        "--frame",
        &f,
        "start",
    ]));
    assert!(
        err.contains(&format!("cannot listen on {t}")) && err.contains("in use"),
        "{err}"
    );

    let cfg = dir.path().join("bad.toml");
    std::fs::write(&cfg, "wokers = 3\n").unwrap();
    let out = run(&["--run-dir", &rd, "--config", cfg.to_str().unwrap(), "start"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("unknown field `wokers`"));
}

#[test]
fn start_while_running_is_refused() {
    let d = demo(1);
    let out = d.server.cli(&["start"]);
    let err = one_sentence(&out);
    assert!(
        err.contains(&format!("already running (pid {})", d.server.pid())),
        "{err}"
    );
    // The running app is untouched.
    let mut s = connect(d.text);
    assert_eq!(text_round_trip(&mut s, "ok"), "ok");
}

/// The pid file is locked while the master runs: a second `start` is refused even when the
/// file does not name the first (as while the first is still starting).
#[test]
fn a_second_start_is_refused_while_the_pid_file_is_locked() {
    let d = demo(1);
    let pid_file = d.server.run_dir.join("brisk-demo.pid");
    std::fs::write(&pid_file, "").unwrap();
    let (args, _, _) = demo_args(1);
    let mut args: Vec<&str> = args.iter().map(String::as_str).collect();
    let run_dir = d.server.run_dir.display().to_string();
    args.extend(["--run-dir", &run_dir, "start"]);
    let out = run(&args);
    let err = one_sentence(&out);
    assert!(err.contains("already running"), "{err}");
    let mut s = connect(d.text);
    assert_eq!(text_round_trip(&mut s, "ok"), "ok");
}

/// A pid file that is a symbolic link is not followed (root would overwrite its target).
#[test]
fn a_pid_file_that_is_a_symbolic_link_is_refused() {
    let run_dir = temp_dir("pid-link");
    let target = run_dir.path().join("precious");
    std::fs::write(&target, "keep me\n").unwrap();
    std::os::unix::fs::symlink(&target, run_dir.path().join("brisk-demo.pid")).unwrap();
    let (args, _, _) = demo_args(1);
    let mut args: Vec<&str> = args.iter().map(String::as_str).collect();
    let rd = run_dir.path().display().to_string();
    args.extend(["--run-dir", &rd, "start"]);
    let err = one_sentence(&run(&args));
    assert!(err.contains("symbolic link"), "{err}");
    assert_eq!(std::fs::read_to_string(&target).unwrap(), "keep me\n");
}

/// A run directory others may write to (where they could swap the pid file or the control
/// socket) is refused; one the app makes is private.
#[test]
fn the_run_directory_is_private() {
    use std::os::unix::fs::PermissionsExt;
    let dir = temp_dir("run-dir-mode");
    let shared = dir.path().join("shared");
    std::fs::create_dir(&shared).unwrap();
    std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o777)).unwrap();
    let (args, _, _) = demo_args(1);
    let mut args: Vec<&str> = args.iter().map(String::as_str).collect();
    let rd = shared.display().to_string();
    args.extend(["--run-dir", &rd, "start"]);
    let err = one_sentence(&run(&args));
    assert!(err.contains("others can write to it (mode 777)"), "{err}");

    // (The testkit makes a run directory itself, for its log: `start -d` makes this one.)
    let (args, _, _) = demo_args(1);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let made = dir.path().join("made");
    let made_text = made.display().to_string();
    let mut daemon_args = args.clone();
    daemon_args.extend(["--run-dir", &made_text, "start", "-d"]);
    let out = run(&daemon_args);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mode = std::fs::metadata(&made).unwrap().permissions().mode() & 0o777;
    let stopped = run(&["--run-dir", &made_text, "stop"]);
    assert_eq!(mode, 0o700);
    assert!(
        stopped.status.success(),
        "{}",
        String::from_utf8_lossy(&stopped.stderr)
    );
}

/// The control socket answers only the app's user and root, whatever its file's mode.
#[test]
fn the_control_socket_refuses_another_user() {
    use std::os::unix::fs::PermissionsExt;
    use std::os::unix::process::CommandExt;
    let d = demo(1);
    let socket = d.server.run_dir.join("brisk-demo.sock");
    let mode = std::fs::metadata(&socket).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
    // As if someone loosened it: the file no longer keeps others out.
    std::fs::set_permissions(&socket, std::fs::Permissions::from_mode(0o666)).unwrap();
    // A `status` request: a 4-byte length, then JSON.
    let script = r#"
import socket, sys
s = socket.socket(socket.AF_UNIX)
s.settimeout(10)
s.connect(sys.argv[1])
try:
    s.sendall(b'\x00\x00\x00\x08"Status"')
except BrokenPipeError:
    pass  # refused before it read anything
data = b''
while True:
    chunk = s.recv(4096)
    if not chunk:
        break
    data += chunk
sys.stdout.write(data.decode('utf-8', 'replace'))
"#;
    let out = Command::new("python3")
        .args(["-c", script, &socket.display().to_string()])
        .uid(65534)
        .gid(65534)
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        said.contains("refused a connection from uid 65534"),
        "stdout {said:?} stderr {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!said.contains("workers"), "{said}");
    // The app's own user still gets an answer.
    assert!(d.server.status().is_ok());
}

#[test]
fn a_stale_pid_file_from_a_crash_does_not_block_a_start() {
    // The pid a crashed master left behind is either gone or, reused, another program's.
    let mut gone = Command::new("true").spawn().unwrap();
    let gone_pid = gone.id();
    gone.wait().unwrap();
    let mut stranger = Command::new("sleep").arg("60").spawn().unwrap();
    for pid in [gone_pid, stranger.id()] {
        let run_dir = temp_dir("stale-pid");
        let pid_file = run_dir.path().join("brisk-demo.pid");
        std::fs::write(&pid_file, format!("{pid}\n")).unwrap();
        let (args, _, _) = demo_args(1);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let mut server = ServerProcess::spawn(DEMO, &args, run_dir.path().to_path_buf()).unwrap();
        server
            .wait_workers(4, Duration::from_secs(30))
            .unwrap_or_else(|e| {
                panic!("start with a stale pid file ({pid}): {e}\n{}", server.log())
            });
        let written = std::fs::read_to_string(&pid_file).unwrap();
        assert_eq!(written.trim(), server.pid().to_string());
        let out = server.cli(&["stop"]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    // `stop` signalled the app, never the program that had the old pid.
    assert!(
        stranger.try_wait().unwrap().is_none(),
        "the stranger was signalled"
    );
    let _ = stranger.kill();
    let _ = stranger.wait();
}

#[test]
fn daemon_start_writes_pid_file_and_log_and_stop_removes_them() {
    let dir = temp_dir("daemon");
    let rd = dir.path().join("run");
    let rds = rd.display().to_string();
    let (text, frame) = (free_port(), free_port());
    let t = format!("text://127.0.0.1:{text}");
    let f = format!("frame://127.0.0.1:{frame}");
    let h = format!("http://127.0.0.1:{}", free_port());
    let ws = format!("websocket://127.0.0.1:{}", free_port());
    let args = [
        "--run-dir",
        &rds,
        "--workers",
        "1",
        "--text",
        &t,
        "--frame",
        &f,
        "--http",
        &h,
        "--websocket",
        &ws,
    ];
    // Killed on drop whatever happens (the harness reads the pid file).
    let guard = RunDirGuard(rd.clone());
    let out = Command::new(DEMO)
        .args(args)
        .args(["start", "-d"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let msg = String::from_utf8_lossy(&out.stdout);
    assert!(msg.contains("started in the background"), "{msg}");
    let pid: i32 = std::fs::read_to_string(rd.join("brisk-demo.pid"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let mut s = connect(text);
    assert_eq!(text_round_trip(&mut s, "daemon"), "daemon");
    // The daemon is in its own session, detached from ours.
    // SAFETY: getsid only reads a process's session id.
    let (theirs, ours) = unsafe { (libc::getsid(pid), libc::getsid(0)) };
    assert_ne!(theirs, ours);
    let out = Command::new(DEMO).args(args).arg("stop").output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("brisk-demo stopped"));
    assert!(!rd.join("brisk-demo.pid").exists());
    assert!(!rd.join("brisk-demo.sock").exists());
    let log = std::fs::read_to_string(rd.join("brisk-demo.log")).unwrap();
    assert!(
        log.contains("brisk-demo started") && log.contains("brisk-demo stopped"),
        "{log}"
    );
    drop(guard);
}

#[test]
fn signals_stop_and_reload() {
    let mut d = demo(1);
    let before = d.server.worker_pids().unwrap();
    // SAFETY: signalling our own test server.
    unsafe { libc::kill(d.server.pid(), libc::SIGUSR1) };
    wait_until(
        Duration::from_secs(10),
        "SIGUSR1 replaced all 4 workers",
        || {
            let now = d.server.worker_pids().unwrap_or_default();
            now.len() == 4 && now.iter().all(|p| !before.contains(p))
        },
    );
    // SAFETY: signalling the test's own server.
    unsafe { libc::kill(d.server.pid(), libc::SIGTERM) };
    assert!(d.server.wait_exit(Duration::from_secs(10)).unwrap());
    assert!(TcpStream::connect(("127.0.0.1", d.text)).is_err());
}

#[test]
fn restart_replaces_a_running_master() {
    let mut d = demo(1);
    let old = d.server.pid();
    // Killed on drop whatever happens (the new master is a daemon).
    let _guard = RunDirGuard(d.server.run_dir.clone());
    let out = d.server.cli(&["restart", "-d"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("brisk-demo stopped") && stdout.contains("started in the background"),
        "{stdout}"
    );
    assert!(
        d.server.wait_exit(Duration::from_secs(10)).is_ok(),
        "the old master exited"
    );
    let new: i32 = std::fs::read_to_string(d.server.run_dir.join("brisk-demo.pid"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert_ne!(new, old);
    let mut s = connect(d.text);
    assert_eq!(text_round_trip(&mut s, "after restart"), "after restart");
    let out = d.server.cli(&["stop"]);
    assert!(out.status.success());
}
