//! The Markdown and HTML reports render from a recorded `report.json`.

use std::path::Path;

use brisk_bench::suite::{read_report, render_html, render_markdown, write_reports};

fn fixture() -> brisk_bench::suite::SuiteReport {
    read_report(Path::new(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/report.json"
    )))
    .unwrap()
}

#[test]
fn markdown_has_header_tables_and_published_figures() {
    let md = render_markdown(&fixture());
    for needle in [
        "Reproduce with:",
        "| kernel |",
        "| pinning | target on CPU 0, load generator on CPU 1 |",
        "## Hello World, keep-alive on (R1.1, R3)",
        "| target | connections | req/s median | min..max (kept runs) | p50 / p90 / p99 ms |",
        "## Generator check",
        "brisk-bench / wrk",
        "## Worker-process scaling (R1.7)",
        "efficiency",
        "## Static files by size (R1.3)",
        "## Idle WebSocket connections (R1.4)",
        "RSS per conn",
        "not supported by this target",
        "not yet measured: no db",
        "Published, R1.1 Localzet Server",
        "hardware: Intel Xeon E5-2680 v4",
        "(not measured here)",
    ] {
        assert!(md.contains(needle), "missing {needle:?} in\n{md}");
    }
}

#[test]
fn html_is_self_contained_with_charts() {
    let html = render_html(&fixture());
    assert!(html.starts_with("<!DOCTYPE html>"));
    assert!(html.contains("<svg"), "no chart");
    assert!(html.contains("Scaling efficiency"));
    assert!(html.contains("Latency percentiles"));
    assert!(html.contains("Published, R1.3 Localzet Server"));
    for external in ["<script src", "<link ", "http://cdn", "https://"] {
        assert!(!html.contains(external), "external asset {external:?}");
    }
}

#[test]
fn write_reports_round_trips() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("report");
    let report = fixture();
    write_reports(&report, &dir).unwrap();
    let again = read_report(&dir.join("report.json")).unwrap();
    assert_eq!(again.scenarios.len(), report.scenarios.len());
    assert!(dir.join("report.md").exists() && dir.join("report.html").exists());
}
