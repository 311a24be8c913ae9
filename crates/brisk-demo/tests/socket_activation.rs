//! systemd socket activation (issue 36): started by `systemd-socket-activate` (systemd's own
//! tool, from Debian's systemd package), which listens, and on the first connection execs
//! the demo with the listening socket as descriptor 3 (`LISTEN_PID`, `LISTEN_FDS`). The demo
//! serves its HTTP listener on that socket (the connection that woke it included) instead of
//! binding one; a socket no listener names stops the start, saying which.

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
        let log = run_dir.join("activator.log");
        let out = std::fs::File::create(&log).unwrap();
        let child = Command::new("systemd-socket-activate")
            .arg("-l")
            .arg(format!("127.0.0.1:{port}"))
            .arg("--")
            .arg(DEMO)
            .args(args)
            .arg("--run-dir")
            .arg(run_dir)
            .arg("start")
            .env_remove("DATABASE_URL")
            .env_remove("REDIS_URL")
            .stdin(Stdio::null())
            .stdout(out.try_clone().unwrap())
            .stderr(out)
            .process_group(0)
            .spawn()
            .expect("systemd-socket-activate (Debian's systemd package)");
        let activator = Activator { child, log };
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
    // The demo runs in the activator's process (exec), and stops as usual.
    let status = Command::new(DEMO)
        .arg("--run-dir")
        .arg(run.path())
        .args(["status", "--json"])
        .output()
        .unwrap();
    let status: serde_json::Value = serde_json::from_slice(&status.stdout).unwrap();
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
