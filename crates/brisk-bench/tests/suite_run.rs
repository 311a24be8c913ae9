//! The suite end to end: a target that does not start is one plain
//! sentence and a non-zero exit with nothing left running; a tiny real
//! target runs through one quick scenario and yields the report files.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use brisk_bench::suite::{run_suite, SuiteOptions};

/// A fresh directory, removed when dropped.
fn temp_dir(tag: &str) -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix(&format!("brisk-bench-{tag}-"))
        .tempdir()
        .unwrap()
}

/// The `[settings]` of the tests' configs: short runs, target and load on CPU 0.
const SETTINGS: &str = r#"[settings]
duration = "200ms"
warmup = "100ms"
start_timeout = "1500ms"
stop_timeout = "1s"
target_cpus = "0"
load_cpus = "0"
"#;

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn write_config(dir: &Path, command: &str, port: u16, extra: &str) -> PathBuf {
    let path = dir.join("suite.toml");
    let text = format!(
        r#"[settings]
duration = "300ms"
warmup = "100ms"
start_timeout = "1500ms"
stop_timeout = "1s"
target_cpus = "0"
load_cpus = "0"
connections = 4

[targets.tiny]
description = "the test target"
command = {command}
port = {port}

[scenarios.hello_keepalive]
{extra}
"#
    );
    std::fs::write(&path, text).unwrap();
    path
}

fn suite(config: &Path, out: &Path) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_brisk-bench"))
        .args(["suite", "--no-progress", "--reps", "1", "--config"])
        .arg(config)
        .arg("--out")
        .arg(out)
        .output()
        .unwrap()
}

/// True while a process whose command line contains `marker` exists.
fn running(marker: &str) -> bool {
    std::fs::read_dir("/proc").unwrap().flatten().any(|e| {
        std::fs::read(e.path().join("cmdline"))
            .map(|c| String::from_utf8_lossy(&c).contains(marker))
            .unwrap_or(false)
    })
}

#[test]
fn a_target_that_exits_is_one_sentence_and_a_failure() {
    let tmp = temp_dir("exits");
    let dir = tmp.path();
    let config = write_config(dir, r#"["false"]"#, free_port(), "");
    let out = suite(&config, &dir.join("out"));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(stderr.contains("The target \"tiny\" exited"), "{stderr}");
    assert_eq!(
        stderr.trim().lines().filter(|l| l.contains("tiny")).count(),
        1,
        "{stderr}"
    );
    // The report still records why.
    let md = std::fs::read_to_string(dir.join("out/report.md")).unwrap();
    assert!(md.contains("failed: The target \"tiny\" exited"), "{md}");
}

#[test]
fn a_missing_binary_is_one_sentence_and_a_failure() {
    let tmp = temp_dir("missing");
    let dir = tmp.path();
    let config = write_config(dir, r#"["/nonexistent/brisk-target"]"#, free_port(), "");
    let out = suite(&config, &dir.join("out"));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        stderr.contains("The target \"tiny\" could not be started"),
        "{stderr}"
    );
}

#[test]
fn a_target_that_never_answers_is_stopped_with_its_children() {
    let tmp = temp_dir("silent");
    let dir = tmp.path();
    let marker = format!("41.{}", std::process::id());
    let command = format!(r#"["sh", "-c", "sleep {marker} & sleep {marker}; wait"]"#);
    let config = write_config(dir, &command, free_port(), "");
    let started = Instant::now();
    let out = suite(&config, &dir.join("out"));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(stderr.contains("did not answer"), "{stderr}");
    assert!(started.elapsed() < Duration::from_secs(15));
    assert!(
        !running(&marker),
        "a process of the target is still running"
    );
}

#[test]
fn an_unknown_target_name_is_a_usage_error() {
    let tmp = temp_dir("unknown");
    let dir = tmp.path();
    let config = write_config(dir, r#"["true"]"#, free_port(), "");
    let out = Command::new(env!("CARGO_BIN_EXE_brisk-bench"))
        .args(["suite", "--no-progress", "--targets", "nope", "--config"])
        .arg(&config)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("unknown target \"nope\""), "{stderr}");
}

/// Options for an in-process suite run of every target with `reps`
/// repetitions, of one scenario or all of them.
fn options(config: PathBuf, out: &Path, reps: usize, scenario: Option<&str>) -> SuiteOptions {
    SuiteOptions {
        config,
        targets: None,
        scenarios: scenario.map(|s| vec![s.to_string()]),
        out: Some(out.to_path_buf()),
        reps: Some(reps),
        quick: false,
        duration: None,
        progress: false,
        note: None,
        command_line: "brisk-bench suite (test)".into(),
    }
}

/// The `hello_server` example, built by `cargo test` next to the test binaries.
fn hello_server() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let debug = exe.parent().unwrap().parent().unwrap();
    let path = debug.join("examples").join("hello_server");
    assert!(
        path.exists(),
        "{} is missing: run through `cargo test`, which builds the examples",
        path.display()
    );
    path
}

#[test]
fn a_tiny_target_runs_end_to_end() {
    let tmp = temp_dir("tiny");
    let dir = tmp.path();
    let port = free_port();
    let command = format!(
        r#"["{}", "127.0.0.1:{{port}}", "1"]"#,
        hello_server().display()
    );
    let config = write_config(dir, &command, port, "");
    let out = dir.join("out");
    let outcome = run_suite(&options(config, &out, 3, None)).unwrap();
    assert!(outcome.failures.is_empty(), "{:?}", outcome.failures);
    let row = &outcome.report.scenarios[0].rows[0];
    let rate = row.rate.expect("a measured rate");
    assert_eq!((rate.kept, rate.dropped), (1, 2));
    assert!(rate.median > 0.0);
    assert_eq!(row.errors, Some(0));
    assert!(row.rss_peak_kb.unwrap() > 0);
    let cpu = row.cpu_us_per_req.expect("CPU per request");
    let (user, kernel) = (row.user_us_per_req.unwrap(), row.kernel_us_per_req.unwrap());
    // Medians of two series (clock ticks are 10 ms): their sum is near the total's median.
    assert!(user >= 0.0 && kernel >= 0.0, "{user} + {kernel}");
    assert!(
        (user + kernel - cpu).abs() <= cpu * 0.5 + 1.0,
        "{user} + {kernel} vs {cpu}"
    );
    for file in ["report.json", "report.md", "report.html"] {
        assert!(out.join(file).exists(), "{file}");
    }
    let md = std::fs::read_to_string(out.join("report.md")).unwrap();
    assert!(md.contains("| tiny | 4 connections |"), "{md}");
    assert!(md.contains("user + kernel µs/req"), "{md}");
    // Stopped: nothing answers on the port any more.
    assert!(std::net::TcpStream::connect(("127.0.0.1", port)).is_err());
}

#[test]
fn two_targets_take_turns_at_each_point_of_the_chosen_scenario() {
    let tmp = temp_dir("turns");
    let dir = tmp.path();
    let (port_a, port_b) = (free_port(), free_port());
    let server = hello_server().display().to_string();
    let config = dir.join("suite.toml");
    std::fs::write(
        &config,
        format!(
            r#"{SETTINGS}
[targets.a]
description = "first"
command = ["{server}", "127.0.0.1:{{port}}", "1"]
port = {port_a}

[targets.b]
description = "second"
command = ["{server}", "127.0.0.1:{{port}}", "1"]
port = {port_b}

[scenarios.hello_keepalive]

[scenarios.connections]
points = [2, 4]
"#
        ),
    )
    .unwrap();
    let out = dir.join("out");
    let outcome = run_suite(&options(config, &out, 2, Some("connections"))).unwrap();
    assert!(outcome.failures.is_empty(), "{:?}", outcome.failures);
    // Only the chosen scenario ran; its rows are grouped by target, in point order.
    let names: Vec<_> = outcome
        .report
        .scenarios
        .iter()
        .map(|s| s.name.as_str())
        .collect();
    assert_eq!(names, ["connections"]);
    let rows: Vec<_> = outcome.report.scenarios[0]
        .rows
        .iter()
        .map(|r| (r.target.as_str(), r.point.as_str(), r.rate.map(|r| r.kept)))
        .collect();
    assert_eq!(
        rows,
        [
            ("a", "2", Some(2)),
            ("a", "4", Some(2)),
            ("b", "2", Some(2)),
            ("b", "4", Some(2))
        ]
    );
    // Both targets were started for each point before the next point:
    // launches 1 and 2 are the first point's, 3 and 4 the second's.
    let mut logs: Vec<_> = std::fs::read_dir(out.join("work/logs"))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    logs.sort_by_key(|name| {
        name.trim_end_matches(".log")
            .rsplit('-')
            .next()
            .unwrap()
            .parse::<u32>()
            .unwrap()
    });
    assert_eq!(logs, ["a-1.log", "b-2.log", "a-3.log", "b-4.log"]);
    for port in [port_a, port_b] {
        assert!(std::net::TcpStream::connect(("127.0.0.1", port)).is_err());
    }
}

#[test]
fn an_unknown_scenario_name_is_an_error_that_lists_the_known_ones() {
    let tmp = temp_dir("unknown-scenario");
    let dir = tmp.path();
    let config = write_config(dir, r#"["true"]"#, free_port(), "");
    let out = Command::new(env!("CARGO_BIN_EXE_brisk-bench"))
        .args([
            "suite",
            "--no-progress",
            "--scenarios",
            "hello,connections",
            "--config",
        ])
        .arg(&config)
        .arg("--out")
        .arg(dir.join("out"))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("unknown scenario \"hello\""), "{stderr}");
    assert!(stderr.contains("hello_keepalive"), "{stderr}");
}

#[test]
fn a_database_scenario_starts_its_database_gives_its_url_to_the_targets_and_stops_it() {
    let tmp = temp_dir("database");
    let dir = tmp.path();
    let (port_a, port_b, db_port) = (free_port(), free_port(), free_port());
    let server = hello_server().display().to_string();
    // The "database": a real listener that stays in the foreground, its command line marked.
    let marker = format!("brisk-bench-test-db-{db_port}");
    let database = format!(
        "import socket, time; s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); s.bind(('127.0.0.1', {db_port})); s.listen(); time.sleep(600)  # {marker}"
    );
    // Each target writes the DATABASE_URL it was given into its run directory.
    let target = |port: u16| {
        format!(
            r#"["sh", "-c", "echo \"$DATABASE_URL\" > {{run_dir}}/database-url; exec {server} 127.0.0.1:{port} 1"]"#
        )
    };
    let config = dir.join("suite.toml");
    std::fs::write(
        &config,
        format!(
            r#"{SETTINGS}
[targets.a]
description = "first"
command = {}
port = {port_a}

[targets.b]
description = "a variant that only runs the database scenario"
command = {}
port = {port_b}
only = ["database_blocking"]

[databases.fake]
description = "a listener"
command = ["python3", "-c", "{}"]
port = {db_port}
url = "postgres://u:p@127.0.0.1:{db_port}/db"

[scenarios.hello_keepalive]

[scenarios.database_blocking]
database = "fake"
paths = ["/r5"]
workers = [1]
connections = [2, 4]
"#,
            target(port_a),
            target(port_b),
            database.replace('\\', "\\\\").replace('"', "\\\"")
        ),
    )
    .unwrap();
    let out = dir.join("out");
    let mut opts = options(config, &out, 1, None);
    opts.scenarios = Some(vec!["hello_keepalive".into(), "database_blocking".into()]);
    let outcome = run_suite(&opts).unwrap();
    assert!(outcome.failures.is_empty(), "{:?}", outcome.failures);
    let by_name = |name: &str| {
        let s = outcome
            .report
            .scenarios
            .iter()
            .find(|s| s.name == name)
            .unwrap();
        s.rows
            .iter()
            .map(|r| (r.target.clone(), r.point.clone(), r.outcome.clone()))
            .collect::<Vec<_>>()
    };
    // The variant is left out of the scenario it does not take part in.
    assert_eq!(
        by_name("hello_keepalive"),
        [(
            "a".to_string(),
            "100 connections".to_string(),
            brisk_bench::suite::model::Outcome::Measured
        )]
    );
    let measured = brisk_bench::suite::model::Outcome::Measured;
    assert_eq!(
        by_name("database_blocking"),
        [
            ("a".into(), "2 connections".into(), measured.clone()),
            ("a".into(), "4 connections".into(), measured.clone()),
            ("b".into(), "2 connections".into(), measured.clone()),
            ("b".into(), "4 connections".into(), measured),
        ]
    );
    // Every target started for the database scenario got the database's URL; the one
    // started for hello_keepalive did not.
    let mut urls = Vec::new();
    for entry in std::fs::read_dir(out.join("work/run")).unwrap() {
        let path = entry.unwrap().path();
        if let Ok(url) = std::fs::read_to_string(path.join("database-url")) {
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            urls.push((name, url.trim().to_string()));
        }
    }
    urls.sort();
    let want = format!("postgres://u:p@127.0.0.1:{db_port}/db");
    assert_eq!(
        urls,
        [
            ("a-1".to_string(), String::new()),
            ("a-2".to_string(), want.clone()),
            ("a-4".to_string(), want.clone()),
            ("b-3".to_string(), want.clone()),
            ("b-5".to_string(), want),
        ]
    );
    // The database was stopped with the scenario.
    assert!(!running(&marker), "the database is still running");
    let md = std::fs::read_to_string(out.join("report.md")).unwrap();
    assert!(md.contains("one server for every target"), "{md}");
}
