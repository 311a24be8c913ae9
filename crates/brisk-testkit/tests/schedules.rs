//! Schedules (`App::schedule`), through the fixture's: each runs in one process however many
//! workers the app has, never overlaps itself, survives a failing run and a reload, shows its
//! next run in `status`, and a cron expression that does not parse fails the start.

use std::path::Path;
use std::time::Duration;

use brisk_testkit::*;
use serde_json::Value as Json;

const FIXTURE: &str = env!("CARGO_BIN_EXE_brisk-fixture");

/// The fixture with a Text server of 3 workers and the schedules `extra` asks for, logging
/// to `log`: 4 workers in all (the schedules process has one).
fn with_schedules(log: &Path, extra: &[&str]) -> ServerProcess {
    let text = format!("text://127.0.0.1:{}", free_port());
    let log = log.display().to_string();
    let mut args = vec!["--text", &text, "--workers", "3", "--schedule-log", &log];
    args.extend_from_slice(extra);
    ServerProcess::start(FIXTURE, &args, 4).unwrap()
}

fn log_lines(log: &Path) -> Vec<Vec<String>> {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .map(|l| l.split(' ').map(str::to_string).collect())
        .collect()
}

/// The `status --json` entry of schedule `name`.
fn schedule(server: &ServerProcess, name: &str) -> Json {
    server.status().unwrap()["schedules"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["name"] == name)
        .unwrap()
        .clone()
}

#[test]
fn a_schedule_runs_in_one_process_and_never_overlaps_itself() {
    let dir = temp_dir("schedules");
    let log = dir.path().join("schedules.log");
    // Due every 100 ms, each run takes 250 ms: two due times of three find it running.
    let server = with_schedules(
        &log,
        &["--schedule-every-ms", "100", "--schedule-sleep-ms", "250"],
    );
    wait_until(Duration::from_secs(20), "8 runs", || {
        schedule(&server, "beat")["runs"].as_u64().unwrap() >= 8
    });
    let s = schedule(&server, "beat");
    assert!(s["skipped"].as_u64().unwrap() >= 8, "{s}");
    assert_eq!(s["failures"], 0, "{s}");
    assert_eq!(s["spec"], "every 100ms", "{s}");
    let next = s["next_unix_s"].as_u64().unwrap();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    assert!(next >= now.saturating_sub(1) && next <= now + 2, "{s}");

    // Every run came from the one worker of the `schedules` process, one after another.
    let runner = server.pids_of("schedules").unwrap();
    assert_eq!(runner.len(), 1, "{runner:?}");
    let lines = log_lines(&log);
    let mut open: Option<u128> = None;
    let mut ends = 0;
    for l in &lines {
        assert_eq!(l[1], runner[0].to_string(), "{lines:?}");
        let at: u128 = l[2].parse().unwrap();
        match l[0].as_str() {
            "start" => {
                assert!(
                    open.is_none(),
                    "a run started while another was going: {lines:?}"
                );
                open = Some(at);
            }
            "end" => {
                let began = open.take().expect("an end after a start");
                assert!(at >= began + 240, "{lines:?}");
                ends += 1;
            }
            other => panic!("{other}"),
        }
    }
    assert!(ends >= 8);
    let text = String::from_utf8(server.cli(&["status"]).stdout).unwrap();
    assert!(
        text.contains("schedule beat (every 100ms): next in"),
        "{text}"
    );
}

#[test]
fn a_panicking_run_is_counted_and_the_schedule_goes_on_across_a_reload() {
    let dir = temp_dir("schedules");
    let log = dir.path().join("schedules.log");
    let server = with_schedules(&log, &["--schedule-panic-every-ms", "100"]);
    wait_until(Duration::from_secs(20), "3 failed runs", || {
        schedule(&server, "boom")["failures"].as_u64().unwrap() >= 3
    });
    let before = schedule(&server, "boom");
    assert_eq!(before["runs"], before["failures"], "{before}");
    let out = server.cli(&["reload"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let runs = before["runs"].as_u64().unwrap();
    wait_until(Duration::from_secs(20), "runs after the reload", || {
        schedule(&server, "boom")["runs"].as_u64().unwrap() >= runs + 3
    });
    // Runs came from two processes in turn (before and after the reload), never at once.
    let pids: std::collections::BTreeSet<String> =
        log_lines(&log).iter().map(|l| l[1].clone()).collect();
    assert_eq!(pids.len(), 2, "{pids:?}");
    let panics = server.log().matches("requested panic").count();
    assert!(panics >= 6, "{}", server.log());
}

#[test]
fn a_cron_schedule_runs_on_its_seconds_and_a_bad_one_fails_the_start() {
    let dir = temp_dir("schedules");
    let log = dir.path().join("schedules.log");
    let server = with_schedules(&log, &["--schedule-cron", "* * * * * *"]);
    wait_until(Duration::from_secs(10), "3 cron runs", || {
        log_lines(&log).iter().filter(|l| l[0] == "cron").count() >= 3
    });
    assert_eq!(schedule(&server, "cron")["spec"], "cron * * * * * *");
    drop(server);

    let log = log.display().to_string();
    let args = ["--schedule-log", &log, "--schedule-cron", "61 * * * *"];
    let out = ServerProcess::start_fails(FIXTURE, &args, &[]);
    assert!(
        out.contains("schedule cron: cron expression \"61 * * * *\":"),
        "{out}"
    );
}
