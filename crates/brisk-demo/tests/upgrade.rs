//! `upgrade` (issue 36): the running master starts the program's file as a new master and
//! hands it the listening sockets, the control socket and the pid file; the new one serves,
//! the old one drains and exits. Five upgrades under brisk-bench's load lose no request (with
//! keep-alive and a connection per request, in both listener modes), every one changes the
//! master's pid, and `status` answers throughout. A new build that exits at once, or never
//! gets ready, is killed with what it started, `upgrade` fails saying why, and the running
//! master goes on serving.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use brisk_testkit::*;

mod common;
use common::{demo_args, every_request_answered, get, load, DEMO};

/// `status` asked every 50 ms until told to stop: how many answered, and what the others said.
struct StatusWatch {
    done: Arc<AtomicBool>,
    answered: Arc<AtomicU64>,
    thread: thread::JoinHandle<Vec<String>>,
}

impl StatusWatch {
    fn start(bin: &'static str, args: Vec<String>) -> StatusWatch {
        let done = Arc::new(AtomicBool::new(false));
        let answered = Arc::new(AtomicU64::new(0));
        let (d, a) = (done.clone(), answered.clone());
        let thread = thread::spawn(move || {
            let mut failures = Vec::new();
            while !d.load(Ordering::Relaxed) {
                let out = std::process::Command::new(bin)
                    .args(&args)
                    .args(["status", "--json"])
                    .output()
                    .unwrap();
                if out.status.success() {
                    a.fetch_add(1, Ordering::Relaxed);
                } else {
                    failures.push(String::from_utf8_lossy(&out.stderr).into_owned());
                }
                thread::sleep(Duration::from_millis(50));
            }
            failures
        });
        StatusWatch {
            done,
            answered,
            thread,
        }
    }

    /// Stops it; (answered, failures).
    fn stop(self) -> (u64, Vec<String>) {
        self.done.store(true, Ordering::Relaxed);
        let failures = self.thread.join().unwrap();
        (self.answered.load(Ordering::Relaxed), failures)
    }
}

/// Five upgrades during a 20 s run, with keep-alive and without at once.
fn five_upgrades_lose_nothing(extra: &[&str]) {
    let (mut args, http) = demo_args(2);
    args.extend(extra.iter().map(|s| s.to_string()));
    let argv: Vec<&str> = args.iter().map(String::as_str).collect();
    let server = ServerProcess::start(DEMO, &argv, 8).unwrap();
    let mut masters = vec![server.pid_file_pid().expect("a pid file")];
    assert_eq!(masters[0], server.pid());
    let mut cli_args = args.clone();
    cli_args.extend(["--run-dir".into(), server.run_dir.display().to_string()]);
    let watch = StatusWatch::start(DEMO, cli_args);
    let kept = load(http, 20, true, 20);
    let fresh = load(http, 10, false, 20);
    for _ in 0..5 {
        // Spread over the load (an upgrade takes under a second).
        thread::sleep(Duration::from_millis(2500));
        let out = server.cli_ok(&["upgrade"]);
        let said = String::from_utf8_lossy(&out.stdout).to_string();
        let now = server.pid_file_pid().expect("a pid file");
        assert!(!masters.contains(&now), "{masters:?} then {now}");
        assert!(said.contains(&format!("master pid {now} serves")), "{said}");
        masters.push(now);
    }
    let (kept, fresh) = (kept.join().unwrap(), fresh.join().unwrap());
    let (answered, failures) = watch.stop();
    eprintln!("{extra:?}: masters {masters:?}; status answered {answered} times");
    assert!(failures.is_empty(), "status failed: {failures:?}");
    assert!(answered > 20, "status answered only {answered} times");
    every_request_answered("upgrades", extra, [&kept, &fresh]);
    // Every old master has drained and exited; the last one serves alone.
    let (last, old) = masters.split_last().unwrap();
    wait_until(Duration::from_secs(20), "the old masters to exit", || {
        old.iter().all(|&pid| !servers::alive(pid))
    });
    assert_eq!(get(http, "/").status, 200);
    assert_eq!(server.worker_pids().unwrap().len(), 8);
    // A stop after upgrades stops the new master and cleans up after it.
    server.cli_ok(&["stop"]);
    assert!(!servers::alive(*last));
    assert_eq!(server.pid_file_pid(), None, "the pid file is left");
    assert!(
        !server.run_dir.join("brisk-demo.sock").exists(),
        "the control socket is left"
    );
}

#[test]
fn five_upgrades_under_load_lose_no_request_with_a_reuse_port_socket_per_worker() {
    five_upgrades_lose_nothing(&[]);
}

#[test]
fn five_upgrades_under_load_lose_no_request_with_one_shared_socket() {
    five_upgrades_lose_nothing(&["--shared-listener"]);
}

/// Points the link `link` at `target`, as a deploy switches a `current` link to a release.
fn point(link: &Path, target: &Path) {
    let staged = link.with_extension("next");
    let _ = std::fs::remove_file(&staged);
    std::os::unix::fs::symlink(target, &staged).unwrap();
    std::fs::rename(&staged, link).unwrap();
}

/// A shell script at `path`.
fn script(path: &Path, text: &str) {
    let draft = path.with_extension("draft");
    std::fs::write(&draft, text).unwrap();
    install(&draft, path);
}

/// An executable copy of `from` at `to`, written by a `cp` of its own: a file this process
/// wrote itself could be run while another test's thread forks with it open for writing
/// (the child holds the descriptor until it execs), and fail with "Text file busy".
fn install(from: &Path, to: &Path) {
    let copied = std::process::Command::new("cp").arg(from).arg(to).status();
    assert!(copied.unwrap().success(), "cp {from:?} {to:?}");
    std::fs::set_permissions(to, std::fs::Permissions::from_mode(0o755)).unwrap();
}

#[test]
fn a_new_build_that_fails_or_never_gets_ready_leaves_the_running_master_serving() {
    let dir = temp_dir("upgrade-releases");
    let link = dir.path().join("brisk-demo");
    point(&link, Path::new(DEMO));
    let (args, http) = demo_args(1);
    let argv: Vec<&str> = args.iter().map(String::as_str).collect();
    // Started by the link: an upgrade starts what the link points at then.
    let server = ServerProcess::start(&link, &argv, 4).unwrap();
    let first = server.pid();
    let upgrade = |extra: &[&str]| {
        let command: Vec<&str> = ["upgrade"].iter().chain(extra).copied().collect();
        let out = server.cli_with(DEMO, &command);
        let said = String::from_utf8_lossy(&out.stdout).to_string()
            + &String::from_utf8_lossy(&out.stderr);
        (out.status.success(), said)
    };

    // A build that exits at once.
    let broken = dir.path().join("broken");
    script(
        &broken,
        "#!/bin/sh\necho 'this build is broken' >&2\nexit 3\n",
    );
    point(&link, &broken);
    let (ok, said) = upgrade(&[]);
    assert!(!ok, "the upgrade to a broken build succeeded: {said}");
    assert!(
        said.contains("exited before it was ready (exit status: 3)")
            && said.contains("the running master goes on serving"),
        "{said}"
    );
    assert!(server.log().contains("this build is broken"));
    assert_eq!(server.pid_file_pid(), Some(first));
    assert_eq!(get(http, "/").status, 200);

    // A real build that fails inside the new master, with the old master's sockets and pid
    // file in hand: its database (and so its migrations) cannot be reached.
    let no_database = dir.path().join("no-database");
    script(
        &no_database,
        &format!("#!/bin/sh\nDATABASE_URL=postgres://brisk@127.0.0.1:1/none exec {DEMO} \"$@\"\n"),
    );
    point(&link, &no_database);
    let (ok, said) = upgrade(&[]);
    assert!(
        !ok,
        "the upgrade to a build without its database succeeded: {said}"
    );
    assert!(said.contains("exited before it was ready"), "{said}");
    assert_eq!(
        server.pid_file_pid(),
        Some(first),
        "the failed build took the pid file"
    );
    assert!(server.cli_with(DEMO, &["status"]).status.success());
    assert_eq!(get(http, "/").status, 200);

    // A build that never says it is ready, and starts a process of its own.
    let hangs = dir.path().join("hangs");
    let child_pid = dir.path().join("child.pid");
    script(
        &hangs,
        &format!(
            "#!/bin/sh\nsleep 300 &\necho $! > {}\nwait\n",
            child_pid.display()
        ),
    );
    point(&link, &hangs);
    let (ok, said) = upgrade(&["--timeout", "2"]);
    assert!(!ok, "the upgrade to a build that hangs succeeded: {said}");
    assert!(said.contains("was not ready within 2 s"), "{said}");
    let child: i32 = wait_for(Duration::from_secs(5), "the script's child pid", || {
        std::fs::read_to_string(&child_pid)
            .ok()?
            .trim()
            .parse()
            .ok()
    });
    // Killed with its process group, not left behind.
    wait_until(
        Duration::from_secs(5),
        "the hung build's child to die",
        || !servers::alive(child),
    );
    assert_eq!(server.pid_file_pid(), Some(first));
    assert_eq!(get(http, "/").status, 200);
    let out = server.cli_with(DEMO, &["status", "--json"]);
    assert!(out.status.success());

    // A build anyone could have changed (issue 66): refused before it runs.
    let writable = dir.path().join("release-writable");
    std::fs::create_dir(&writable).unwrap();
    install(Path::new(DEMO), &writable.join("brisk-demo"));
    std::fs::set_permissions(
        writable.join("brisk-demo"),
        std::fs::Permissions::from_mode(0o757),
    )
    .unwrap();
    point(&link, &writable.join("brisk-demo"));
    let (ok, said) = upgrade(&[]);
    assert!(
        !ok,
        "the upgrade to a file others can write succeeded: {said}"
    );
    assert!(
        said.contains("others can write it") && said.contains("the upgrade is refused"),
        "{said}"
    );
    assert_eq!(server.pid_file_pid(), Some(first));
    assert_eq!(get(http, "/").status, 200);

    // A good build, in a release directory of its own: it takes over, and the CLI run
    // through the link (another file than the running master's) finds the master.
    let release = dir.path().join("release-2");
    std::fs::create_dir(&release).unwrap();
    install(Path::new(DEMO), &release.join("brisk-demo"));
    point(&link, &release.join("brisk-demo"));
    let out = server.cli(&["upgrade"]);
    let said =
        String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{said}");
    let now = server.pid_file_pid().expect("a pid file");
    assert_ne!(now, first);
    assert!(said.contains(&format!("master pid {now} serves")), "{said}");
    let exe = std::fs::read_link(format!("/proc/{now}/exe")).unwrap();
    assert_eq!(
        exe,
        release.join("brisk-demo"),
        "the new master runs the new release"
    );
    assert_eq!(get(http, "/").status, 200);
    wait_until(Duration::from_secs(20), "the old master to exit", || {
        !servers::alive(first)
    });
    server.cli_ok(&["status"]);
}
