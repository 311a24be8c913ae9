//! Custom processes (`App::process`), through the fixture's `ticker`: workers without a
//! listener that run, are listed by `status`, are restarted when killed, are replaced by a
//! reload and stopped by `stop -g` only after they finish what they were doing.

use std::path::Path;
use std::time::Duration;

use brisk_testkit::*;

const FIXTURE: &str = env!("CARGO_BIN_EXE_brisk-fixture");

/// The fixture with a Text server (1 worker) and `ticker` with 2 workers logging to `log`.
fn with_ticker(log: &Path) -> ServerProcess {
    let text = format!("text://127.0.0.1:{}", free_port());
    let log = log.display().to_string();
    let args = ["--text", &text, "--process", "2", "--process-log", &log];
    ServerProcess::start(FIXTURE, &args, 3).unwrap()
}

/// The pids `status` lists under the process `ticker`, sorted.
fn ticker_pids(server: &ServerProcess) -> Vec<i64> {
    let pids = server.pids_of("ticker").unwrap();
    pids.into_iter().map(i64::from).collect()
}

/// The lines `pid` logged.
fn lines_of(log: &Path, pid: i64) -> Vec<String> {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .filter(|l| l.ends_with(&format!(" {pid}")))
        .map(|l| l.split(' ').next().unwrap().to_string())
        .collect()
}

fn ticks(log: &Path, pid: i64) -> usize {
    lines_of(log, pid).iter().filter(|l| *l == "tick").count()
}

/// What `pid` logged after its last tick.
fn ending(log: &Path, pid: i64) -> Vec<String> {
    let lines = lines_of(log, pid);
    let last_tick = lines.iter().rposition(|l| l == "tick").map_or(0, |i| i + 1);
    lines[last_tick..].to_vec()
}

#[test]
fn a_custom_process_runs_is_listed_and_is_restarted_when_killed() {
    let dir = temp_dir("ticker");
    let log = dir.path().join("ticker.log");
    let server = with_ticker(&log);
    let pids = ticker_pids(&server);
    assert_eq!(pids.len(), 2, "{}", server.status().unwrap());
    for &pid in &pids {
        wait_until(Duration::from_secs(10), "ticks from each worker", || {
            ticks(&log, pid) >= 5
        });
    }
    let status = server.status().unwrap();
    let row = status["workers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|w| w["server"] == "ticker")
        .unwrap()
        .clone();
    assert_eq!(row["connections"], 0, "{row}");
    assert_eq!(row["accepted"], 0, "{row}");
    // `status` prints it by name, like a server by address.
    let text = String::from_utf8(server.cli(&["status"]).stdout).unwrap();
    assert_eq!(
        text.lines().filter(|l| l.starts_with("ticker")).count(),
        4,
        "{text}"
    );

    // SAFETY: kill(2) on a pid status just listed.
    assert_eq!(unsafe { libc::kill(pids[0] as i32, libc::SIGKILL) }, 0);
    let replaced = wait_for(Duration::from_secs(10), "a new ticker worker", || {
        let now = ticker_pids(&server);
        (now.len() == 2 && !now.contains(&pids[0])).then_some(now)
    });
    let new = *replaced.iter().find(|p| **p != pids[1]).unwrap();
    wait_until(Duration::from_secs(10), "ticks from the new worker", || {
        ticks(&log, new) >= 3
    });
    assert_eq!(server.status().unwrap()["restarts"], 1);
    // The killed one never finished: it had no chance to.
    assert_eq!(ending(&log, pids[0]), Vec::<String>::new());
}

#[test]
fn reload_and_graceful_stop_let_each_worker_finish_its_work() {
    let dir = temp_dir("ticker");
    let log = dir.path().join("ticker.log");
    let mut server = with_ticker(&log);
    let old = ticker_pids(&server);
    let out = server.cli(&["reload"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let new = ticker_pids(&server);
    assert_eq!(new.len(), 2);
    assert!(new.iter().all(|p| !old.contains(p)), "{old:?} {new:?}");
    // Each old worker stopped ticking, took its 200 ms to finish, then on_worker_stop ran.
    for &pid in &old {
        // Both lines, or the process gone without the second: `finished` and `stopped` are
        // two writes, and the check must not fall between them.
        let gone = || !std::path::Path::new(&format!("/proc/{pid}")).exists();
        wait_until(Duration::from_secs(10), "the old worker's end", || {
            ending(&log, pid).len() >= 2 || gone()
        });
        assert_eq!(ending(&log, pid), ["finished", "stopped"], "pid {pid}");
    }
    for &pid in &new {
        wait_until(
            Duration::from_secs(10),
            "ticks from the new workers",
            || ticks(&log, pid) >= 3,
        );
    }
    let out = server.cli(&["stop", "-g"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(server.wait_exit(Duration::from_secs(20)).unwrap());
    for &pid in &new {
        assert_eq!(ending(&log, pid), ["finished", "stopped"], "pid {pid}");
    }
}

#[test]
fn a_process_without_workers_fails_the_start_saying_so() {
    let dir = temp_dir("ticker");
    let log = dir.path().join("ticker.log").display().to_string();
    let args = ["--process", "0", "--process-log", &log];
    let out = ServerProcess::start_fails(FIXTURE, &args, &[]);
    assert!(out.contains("ticker: workers must be at least 1"), "{out}");
}

/// A worker started by a master of another build (a `reload` after the binary was replaced
/// by one whose master-worker messages changed) says so and exits, instead of misreading the
/// master's messages.
#[test]
fn a_worker_refuses_a_master_that_speaks_another_version() {
    for (version, says) in [
        (Some("1"), "its running master version 1"),
        (None, "an older one"),
    ] {
        let mut command = std::process::Command::new(FIXTURE);
        command
            .args(["--text", "text://127.0.0.1:0", "start"])
            .env("BRISK_WORKER", "0:0")
            .env("BRISK_IPC_FD", "3")
            .env_remove("BRISK_IPC_VERSION");
        if let Some(v) = version {
            command.env("BRISK_IPC_VERSION", v);
        }
        let out = command.output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{stderr}");
        assert!(stderr.contains(says), "{stderr}");
        assert!(stderr.contains("restart the app"), "{stderr}");
    }
}
