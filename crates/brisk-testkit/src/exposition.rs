//! Reading a Prometheus metrics listener: scraping it, its samples, and `promtool`'s verdict.

use std::collections::HashMap;
use std::io::Write;
use std::process::{Command, Stdio};

use crate::servers::http_get;

/// The text of `GET /metrics` on `port`; panics unless it answers 200.
pub fn scrape(port: u16) -> String {
    let (status, body) = http_get(port, "/metrics").expect("the metrics listener answers");
    assert_eq!(status, 200);
    String::from_utf8(body).unwrap()
}

/// Every sample of an exposition: `name{labels}` → value.
pub fn samples(text: &str) -> HashMap<String, f64> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .map(|l| {
            let (key, value) = l.rsplit_once(' ').unwrap();
            (key.to_string(), value.parse().unwrap())
        })
        .collect()
}

/// What `promtool check metrics` says of `text`; panics (with its words) if it finds fault.
pub fn promtool_check(text: &str) {
    let mut child = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("promtool (Debian's prometheus package: scripts/install-test-servers)");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "promtool check metrics: {}{}\n--- exposition ---\n{text}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}
