//! systemd socket activation and the units in `deploy/systemd` (issue 36): started by
//! `systemd-socket-activate` (systemd's own tool, from Debian's systemd package), which
//! listens, and on the first connection execs the demo with the listening socket as
//! descriptor 3 (`LISTEN_PID`, `LISTEN_FDS`). The demo serves its HTTP listener on that socket
//! (the connection that woke it included) instead of binding one; a socket no listener names
//! stops the start, saying which. The units pass `systemd-analyze verify`, and their
//! commands, run as systemd runs them (the socket unit's socket, `NOTIFY_SOCKET`), start,
//! reload and stop the demo with the notifications `Type=notify` waits for.

use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use brisk_testkit::*;

mod common;
use common::{demo_args, get, DEMO};

/// `systemd-socket-activate` listening on `port`, set to exec the demo with `args`; killed
/// with its process group on drop.
struct Activator {
    child: Child,
    log: std::path::PathBuf,
}

impl Activator {
    fn start(port: u16, args: &[String], run_dir: &Path) -> Activator {
        let mut command = vec![DEMO.to_string()];
        command.extend(args.iter().cloned());
        command.extend([
            "--run-dir".into(),
            run_dir.display().to_string(),
            "start".into(),
        ]);
        Self::run(&format!("127.0.0.1:{port}"), &command, &[], run_dir)
    }

    /// `command` in its own process group, its output appended to `dir/activator.log`.
    fn spawn(mut command: Command, dir: &Path) -> Activator {
        let log = dir.join("activator.log");
        let out = (std::fs::OpenOptions::new().create(true).append(true))
            .open(&log)
            .unwrap();
        let child = command
            .env_remove("DATABASE_URL")
            .env_remove("REDIS_URL")
            .stdin(Stdio::null())
            .stdout(out.try_clone().unwrap())
            .stderr(out)
            .process_group(0)
            .spawn()
            .unwrap_or_else(|e| panic!("{command:?}: {e}"));
        Activator { child, log }
    }

    /// `systemd-socket-activate -l LISTEN -- COMMAND…` with `env`, its output in `dir`.
    fn run(listen: &str, command: &[String], env: &[(&str, &str)], dir: &Path) -> Activator {
        let mut activate = Command::new("systemd-socket-activate");
        activate
            .arg("-l")
            .arg(listen)
            // Passed on with -E: the activator gives the program only what it is told to.
            .args(env.iter().map(|(k, v)| format!("--setenv={k}={v}")))
            .arg("--")
            .args(command);
        let activator = Self::spawn(activate, dir);
        // It listens before it execs anything.
        wait_until(Duration::from_secs(10), "the activator to listen", || {
            activator.output().contains("Listening on")
        });
        activator
    }

    fn output(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Activator {
    fn drop(&mut self) {
        // Its process group: the activator became the demo's master, with its workers.
        let _ = Command::new("kill")
            .args(["-KILL", "--", &format!("-{}", self.child.id())])
            .stderr(Stdio::null())
            .status();
        let _ = self.child.wait();
    }
}

#[test]
fn the_http_listener_takes_the_socket_systemd_passed() {
    let run = temp_dir("activated");
    let (args, http) = demo_args(1);
    let mut activator = Activator::start(http, &args, run.path());
    // The first connection wakes the demo; it is answered on the passed socket.
    let r = get(http, "/");
    assert_eq!(r.status, 200, "{}", activator.output());
    assert_eq!(r.body, b"Hello World");
    let log = std::fs::read_to_string(run.path().join("brisk-demo.log")).unwrap_or_default()
        + &activator.output();
    assert!(
        log.contains("listening on the socket systemd passed"),
        "{log}"
    );
    // The demo runs in the activator's process (exec), and stops as usual. (Its workers may
    // answer before the master opens its control socket.)
    let status: serde_json::Value = wait_for(Duration::from_secs(10), "status", || {
        let out = Command::new(DEMO)
            .arg("--run-dir")
            .arg(run.path())
            .args(["status", "--json"])
            .output()
            .unwrap();
        serde_json::from_slice(&out.stdout).ok()
    });
    assert_eq!(status["master_pid"], activator.child.id(), "{status}");
    for _ in 0..3 {
        assert_eq!(get(http, "/").status, 200);
    }
    let stop = Command::new(DEMO)
        .arg("--run-dir")
        .arg(run.path())
        .arg("stop")
        .output()
        .unwrap();
    assert!(stop.status.success(), "{stop:?}");
    let exited = poll(Duration::from_secs(10), || {
        activator.child.try_wait().unwrap()
    });
    assert!(exited.is_some_and(|s| s.success()), "{exited:?}");
}

#[test]
fn a_socket_no_listener_names_stops_the_start() {
    let run = temp_dir("activated-wrong");
    let (args, _http) = demo_args(1);
    let elsewhere = free_port();
    let mut activator = Activator::start(elsewhere, &args, run.path());
    // Wake it: the connection is never answered, the demo refuses to start.
    let _ = std::net::TcpStream::connect(("127.0.0.1", elsewhere));
    let exited = poll(Duration::from_secs(20), || {
        activator.child.try_wait().unwrap()
    });
    let output = activator.output()
        + &std::fs::read_to_string(run.path().join("brisk-demo.log")).unwrap_or_default();
    assert!(exited.is_some_and(|s| !s.success()), "{exited:?}: {output}");
    assert!(
        output.contains(&format!(
            "systemd passed sockets no listener names: tcp 127.0.0.1:{elsewhere}"
        )),
        "{output}"
    );
}

/// `deploy/systemd/NAME` made to run here: the binary, the ports and the directories replaced
/// (and the demo's other listeners moved to free ports).
fn unit_here(name: &str, http: u16, metrics: u16, run_dir: &Path, state_dir: &Path) -> String {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../deploy/systemd/").to_string() + name;
    let mut text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    let others = format!(
        "--text text://127.0.0.1:{} --frame frame://127.0.0.1:{} --websocket websocket://127.0.0.1:{} --run-dir",
        free_port(),
        free_port(),
        free_port()
    );
    for (from, to) in [
        ("/usr/local/bin/brisk-demo", DEMO.to_string()),
        ("0.0.0.0:8080", format!("127.0.0.1:{http}")),
        ("127.0.0.1:9100", format!("127.0.0.1:{metrics}")),
        ("/var/lib/brisk-demo", state_dir.display().to_string()),
        ("/run/brisk-demo", run_dir.display().to_string()),
    ] {
        text = text.replace(from, &to);
    }
    if name.ends_with(".service") {
        text = text.replacen("--run-dir", &others, 1);
    }
    text
}

/// The value of `key=` in a unit, split at spaces (the units quote nothing).
fn setting(unit: &str, key: &str) -> Vec<String> {
    let line = (unit.lines())
        .find_map(|l| l.strip_prefix(&format!("{key}=")))
        .unwrap_or_else(|| panic!("no {key}= in\n{unit}"));
    line.split_whitespace().map(str::to_string).collect()
}

#[test]
fn the_systemd_units_verify_and_their_commands_run_as_systemd_runs_them() {
    let dir = temp_dir("units");
    let (run, state) = (dir.path().join("run"), dir.path().join("state"));
    // The master an upgrade starts leads a process group of its own: killed by its pid file.
    let _upgraded = RunDirGuard(run.clone());
    std::fs::create_dir_all(&state).unwrap();
    let (http, metrics) = (free_port(), free_port());
    let service = unit_here("brisk-demo.service", http, metrics, &run, &state);
    let socket = unit_here("brisk-demo.socket", http, metrics, &run, &state);
    let (service_file, socket_file) = (
        dir.path().join("brisk-demo.service"),
        dir.path().join("brisk-demo.socket"),
    );
    std::fs::write(&service_file, &service).unwrap();
    std::fs::write(&socket_file, &socket).unwrap();
    // systemd's own check of the units: no complaint at all.
    let verify = Command::new("systemd-analyze")
        .args(["verify", "--man=no"])
        .arg(&service_file)
        .arg(&socket_file)
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&verify.stdout).to_string()
        + &String::from_utf8_lossy(&verify.stderr);
    assert!(verify.status.success() && said.trim().is_empty(), "{said}");

    // ExecStart as systemd runs it: the socket unit's socket, a notification socket.
    let notify_path = dir.path().join("notify.sock");
    let systemd = systemd_at(&notify_path);
    let notify = notify_path.display().to_string();
    let listen = setting(&socket, "ListenStream").join(" ");
    let mut activator = Activator::run(
        &listen,
        &setting(&service, "ExecStart"),
        &[("NOTIFY_SOCKET", notify.as_str())],
        dir.path(),
    );
    assert_eq!(get(http, "/").status, 200, "{}", activator.output());
    assert_eq!(
        next_state(&systemd),
        format!("READY=1\nMAINPID={}", activator.child.id())
    );
    assert_eq!(http_get(metrics, "/readyz").unwrap().0, 200);
    assert!(
        state.join("brisk-demo.sqlite").exists(),
        "the database is in StateDirectory"
    );

    // ExecReload: an upgrade. systemd hears RELOADING=1, then READY=1 from the new master
    // with its pid as MAINPID (NotifyAccess=all lets it speak); the old one exits cleanly.
    let run_command = |key: &str, activator: &Activator| {
        let argv = setting(&service, key);
        let out = Command::new(&argv[0]).args(&argv[1..]).output().unwrap();
        assert!(
            out.status.success(),
            "{key}: {out:?}\n{}",
            activator.output()
        );
    };
    assert_eq!(setting(&service, "NotifyAccess"), ["all"]);
    run_command("ExecReload", &activator);
    assert!(next_state(&systemd).starts_with("RELOADING=1"));
    let ready = next_state(&systemd);
    let new_pid: i32 = (ready.strip_prefix("READY=1\nMAINPID="))
        .and_then(|pid| pid.trim().parse().ok())
        .unwrap_or_else(|| panic!("not READY=1 with MAINPID: {ready:?}"));
    assert_ne!(new_pid as u32, activator.child.id());
    let old_exit = poll(Duration::from_secs(20), || {
        activator.child.try_wait().unwrap()
    });
    assert!(old_exit.is_some_and(|s| s.success()), "{old_exit:?}");
    assert_eq!(get(http, "/").status, 200);
    assert_eq!(http_get(metrics, "/readyz").unwrap().0, 200);

    // ExecStop: a graceful stop, STOPPING=1, and the new master exits.
    run_command("ExecStop", &activator);
    assert_eq!(next_state(&systemd), "STOPPING=1");
    wait_until(Duration::from_secs(20), "the new master to exit", || {
        !servers::alive(new_pid)
    });
}

/// The demo started as systemd starts it on `listener`: descriptor 3, `LISTEN_FDS=1`, and
/// `LISTEN_PID` its own pid (`sh` sets it, then execs the demo in its place).
fn started_on(listener: &std::net::TcpListener, args: &[String], run_dir: &Path) -> Activator {
    use std::os::fd::AsRawFd;
    let fd = listener.as_raw_fd();
    let mut command = Command::new("sh");
    command
        .arg("-c")
        .arg("LISTEN_PID=$$ LISTEN_FDS=1 exec \"$@\"")
        .arg("sh")
        .arg(DEMO)
        .args(args)
        .arg("--run-dir")
        .arg(run_dir)
        .arg("start");
    // SAFETY: dup2 and fcntl are async-signal-safe; the child gets the socket as 3, open
    // across exec.
    unsafe {
        command.pre_exec(move || {
            if fd == 3 {
                let flags = libc::fcntl(3, libc::F_GETFD);
                if flags < 0 || libc::fcntl(3, libc::F_SETFD, flags & !libc::FD_CLOEXEC) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
            } else if libc::dup2(fd, 3) < 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    Activator::spawn(command, run_dir)
}

#[test]
fn a_systemd_socket_outlives_its_master_and_connections_wait_for_the_next() {
    use std::io::{Read, Write};
    let run = temp_dir("activated-twice");
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let http = listener.local_addr().unwrap().port();
    let (mut args, _) = demo_args(1);
    let at = args.iter().position(|a| a == "--http").unwrap();
    args[at + 1] = format!("http://127.0.0.1:{http}");
    // (The workers may answer before the master opens its control socket.)
    let stop = |run: &Path| {
        wait_until(Duration::from_secs(10), "stop -g to be taken", || {
            Command::new(DEMO)
                .arg("--run-dir")
                .arg(run)
                .args(["stop", "-g"])
                .output()
                .unwrap()
                .status
                .success()
        })
    };

    let mut first = started_on(&listener, &args, run.path());
    assert_eq!(get(http, "/").status, 200, "{}", first.output());
    stop(run.path());
    let exited = poll(Duration::from_secs(20), || first.child.try_wait().unwrap());
    assert!(exited.is_some_and(|s| s.success()), "{}", first.output());

    // No master now: a connection (as systemd's socket would hold it) waits in the queue,
    // and the next master, on the same socket, answers it.
    let mut waiting = connect(http);
    waiting
        .write_all(b"GET / HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
        .unwrap();
    let mut second = started_on(&listener, &args, run.path());
    waiting
        .set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    let mut answer = String::new();
    waiting.read_to_string(&mut answer).unwrap();
    assert!(
        answer.starts_with("HTTP/1.1 200"),
        "{answer:?}\n{}",
        second.output()
    );
    assert_eq!(get(http, "/").status, 200);
    stop(run.path());
    let exited = poll(Duration::from_secs(20), || second.child.try_wait().unwrap());
    assert!(exited.is_some_and(|s| s.success()), "{}", second.output());
}
