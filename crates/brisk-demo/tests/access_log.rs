//! The access log over real requests: lines in the combined and JSON layouts with the worker
//! and connection ids, quoting that a client cannot break out of, credentials in the query
//! left out, `reopen-logs` after a rotation, and the app's own log lines carrying the same
//! ids.

use std::path::Path;
use std::time::Duration;

use brisk_testkit::*;
use serde_json::Value as Json;

mod common;
use common::{demo_with, get, request};

/// The lines of `path` once one contains `needle`.
fn lines_once(path: &Path, needle: &str) -> Vec<String> {
    wait_for(
        Duration::from_secs(10),
        &format!("{needle} in {}", path.display()),
        || {
            let text = std::fs::read_to_string(path).ok()?;
            text.contains(needle)
                .then(|| text.lines().map(str::to_string).collect())
        },
    )
}

#[test]
fn combined_lines_carry_the_ids_and_follow_a_rotation() {
    let dir = temp_dir("logs");
    let log = dir.path().join("access.log");
    let d = demo_with(1, &["--access-log", &log.display().to_string()]);
    let headers = [
        ("User-Agent", "tester \"quoted\"\tx"),
        ("Referer", "http://example.test/from"),
    ];
    let r = request(d.http, "GET", "/tpl/vars?x=1", &headers, "");
    assert_eq!(r.status, 200);
    let lines = lines_once(&log, "/tpl/vars?x=1");
    let line = lines.iter().find(|l| l.contains("/tpl/vars")).unwrap();
    assert!(line.starts_with("127.0.0.1 - - ["), "{line}");
    let expected = format!(
        "\"GET /tpl/vars?x=1 HTTP/1.1\" 200 {} \"http://example.test/from\" \
         \"tester \\\"quoted\\\"\\x09x\" w0 c",
        r.body.len()
    );
    assert!(line.contains(&expected), "{line}\nwanted {expected}");
    assert!(line.ends_with("ms"), "{line}");
    // Credentials in the query are not written; the file is not readable by others.
    let r = request(d.http, "GET", "/tpl/vars?token=eyJ-secret.jwt&x=2", &[], "");
    assert_eq!(r.status, 200);
    let lines = lines_once(&log, "x=2");
    assert!(
        lines
            .iter()
            .any(|l| l.contains("GET /tpl/vars?token=***&x=2 ")),
        "{lines:?}"
    );
    assert!(!lines.iter().any(|l| l.contains("eyJ-secret")), "{lines:?}");
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(&log).unwrap().permissions().mode();
    assert_eq!(mode & 0o007, 0, "readable by others: {mode:o}");

    // logrotate: move the file, then reopen-logs; new lines go to the new file.
    let rotated = dir.path().join("access.log.1");
    std::fs::rename(&log, &rotated).unwrap();
    let out = d.server.cli(&["reopen-logs"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("told 4 workers"));
    assert_eq!(get(d.http, "/view").status, 200);
    let lines = lines_once(&log, "GET /view");
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert!(!std::fs::read_to_string(&rotated).unwrap().contains("/view"));

    let status = d.server.status().unwrap();
    for w in status["workers"].as_array().unwrap() {
        assert_eq!(w["log_lines_dropped"], 0, "{w}");
    }
}

#[test]
fn json_lines_parse_and_app_logs_carry_the_connection() {
    let dir = temp_dir("logs");
    let log = dir.path().join("access.jsonl");
    let down = format!("http://127.0.0.1:{}", free_port());
    let args = [
        "--access-log",
        &log.display().to_string(),
        "--access-log-format",
        "json",
        "--upstream",
        &down,
    ];
    let d = demo_with(1, &args);
    assert_eq!(get(d.http, "/httpc/plain").status, 502);
    let lines = lines_once(&log, "/httpc/plain");
    let v: Json = serde_json::from_str(lines.last().unwrap()).unwrap();
    assert_eq!(v["method"], "GET");
    assert_eq!(v["path"], "/httpc/plain");
    assert_eq!(v["status"], 502);
    assert_eq!(v["worker"], 0);
    assert_eq!(v["remote"], "127.0.0.1");
    assert!(v["time"].as_str().unwrap().ends_with('Z'), "{v}");
    let conn = v["conn"].as_u64().unwrap();

    // The handler's warning about the upstream names the same worker and connection.
    let app = wait_for(Duration::from_secs(10), "the upstream warning", || {
        let log = d.server.log();
        log.lines()
            .find(|l| l.contains("upstream call failed"))
            .map(str::to_string)
    });
    assert!(app.contains("worker{id=0"), "{app}");
    assert!(app.contains(&format!("request{{conn={conn}}}")), "{app}");
}

#[test]
fn an_access_log_that_cannot_be_opened_stops_the_start_with_its_path() {
    let d = temp_dir("logs");
    let bad = d
        .path()
        .join("no/such/dir/access.log")
        .display()
        .to_string();
    let (args, _) = common::demo_args(1);
    let run = temp_dir("run");
    let out = std::process::Command::new(common::DEMO)
        .args(&args)
        .args([
            "--access-log",
            &bad,
            "--run-dir",
            &run.path().display().to_string(),
        ])
        .arg("start")
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!out.status.success(), "{text}");
    assert!(
        text.contains("cannot open the access log") && text.contains(&bad),
        "{text}"
    );
}
