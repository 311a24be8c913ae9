//! `report.html`: one self-contained page (inline CSS and SVG, no external
//! assets) with the header, the tables, the published figures and charts
//! of requests/s, latency and RSS against connections and of scaling
//! efficiency.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use crate::suite::model::{Outcome, Row, ScenarioResult, SuiteReport};
use crate::suite::published::for_scenario;
use crate::suite::render_md::published_as_table;
use crate::suite::svg::{line_chart, xml, Series};
use crate::suite::table::{scenario_table, Table};

fn html_table(t: &Table, class: &str) -> String {
    let mut out = format!("<table class=\"{class}\"><thead><tr>");
    for h in &t.header {
        let _ = write!(out, "<th>{}</th>", xml(h));
    }
    out.push_str("</tr></thead><tbody>");
    for r in &t.rows {
        out.push_str("<tr>");
        for c in r {
            let _ = write!(out, "<td>{}</td>", xml(c));
        }
        out.push_str("</tr>");
    }
    out.push_str("</tbody></table>");
    out
}

fn series_of(s: &ScenarioResult, value: Value) -> Vec<Series> {
    let mut by_target: BTreeMap<&str, Vec<(f64, f64)>> = BTreeMap::new();
    for r in &s.rows {
        if r.outcome != Outcome::Measured {
            continue;
        }
        if let Some(v) = value(r) {
            by_target.entry(&r.target).or_default().push((r.x, v));
        }
    }
    by_target
        .into_iter()
        .map(|(name, mut points)| {
            points.sort_by(|a, b| a.0.total_cmp(&b.0));
            Series {
                name: name.into(),
                points,
            }
        })
        .collect()
}

/// A value of a row drawn in a chart; `None` leaves the row out.
type Value = fn(&Row) -> Option<f64>;

fn rate(r: &Row) -> Option<f64> {
    r.rate.map(|s| s.median)
}

fn p50(r: &Row) -> Option<f64> {
    r.latency_ms.map(|l| l.p50)
}

fn p99(r: &Row) -> Option<f64> {
    r.latency_ms.map(|l| l.p99)
}

fn rss_mib(r: &Row) -> Option<f64> {
    r.rss_peak_kb.map(|v| v as f64 / 1024.0)
}

fn efficiency_percent(r: &Row) -> Option<f64> {
    r.efficiency.map(|e| e * 100.0)
}

fn rss_per_conn(r: &Row) -> Option<f64> {
    r.rss_per_conn_bytes.map(|v| v.median)
}

/// The charts of one scenario: a value against x, one line per target.
/// Scenarios with no charts give none; an empty chart is left out.
fn charts(s: &ScenarioResult) -> Vec<String> {
    // The x axis (label, logarithmic) and the (title, y label, value) of each chart.
    let (x_label, log_x, plots): (&str, bool, &[(&str, &str, Value)]) = match s.name.as_str() {
        "connections" => (
            "connections (log)",
            true,
            &[
                ("Requests/s against connections", "req/s", rate),
                ("p50 latency against connections", "ms", p50),
                ("p99 latency against connections", "ms", p99),
                ("Peak RSS against connections", "MiB", rss_mib),
            ],
        ),
        "workers" => (
            "workers",
            false,
            &[
                ("Requests/s against workers", "req/s", rate),
                (
                    "Scaling efficiency",
                    "actual / (N × single), %",
                    efficiency_percent,
                ),
            ],
        ),
        "static_files" => (
            "bytes (log)",
            true,
            &[
                ("Requests/s against file size", "req/s", rate),
                ("Peak RSS against file size", "MiB", rss_mib),
            ],
        ),
        "ws_idle" => (
            "connections (log)",
            true,
            &[
                ("RSS per idle WebSocket connection", "bytes", rss_per_conn),
                ("Peak RSS against connections", "MiB", rss_mib),
            ],
        ),
        "ws_broadcast" => (
            "receivers (log)",
            true,
            &[
                ("Deliveries/s against receivers", "msgs/s", rate),
                ("p99 delivery latency", "ms", p99),
            ],
        ),
        _ => ("", false, &[]),
    };
    let mut out: Vec<String> = plots
        .iter()
        .map(|&(title, y_label, value)| {
            line_chart(title, x_label, y_label, &series_of(s, value), log_x)
        })
        .collect();
    if matches!(s.name.as_str(), "hello_keepalive" | "hello_close") {
        // Latency percentiles of each target, x = percentile.
        let mut series = Vec::new();
        for r in &s.rows {
            if let (Outcome::Measured, Some(l)) = (&r.outcome, r.latency_ms) {
                series.push(Series {
                    name: r.target.clone(),
                    points: vec![(50.0, l.p50), (90.0, l.p90), (99.0, l.p99)],
                });
            }
        }
        out.push(line_chart(
            "Latency percentiles (median run)",
            "percentile",
            "ms",
            &series,
            false,
        ));
    }
    out.retain(|c| !c.is_empty());
    out
}

/// Renders the whole report as one self-contained HTML page.
pub fn render_html(report: &SuiteReport) -> String {
    let h = &report.header;
    let mut out = String::new();
    out.push_str("<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>brisk-bench suite report</title><style>");
    out.push_str("body{font-family:sans-serif;max-width:1100px;margin:2em auto;padding:0 1em;color:#222}table{border-collapse:collapse;margin:.5em 0 1em}td,th{border:1px solid #ccc;padding:3px 7px;font-size:13px;text-align:left}th{background:#f0f0f0}table.published{color:#555;font-style:italic}code,pre{background:#f6f6f6;padding:2px 4px}.charts svg{margin:4px;border:1px solid #eee}");
    out.push_str("</style></head><body><h1>brisk-bench suite report</h1>");
    let _ = write!(out, "<p>Reproduce with:</p><pre>{}</pre>", xml(&h.command));
    let mut rows = vec![
        vec!["started (UTC)".to_string(), h.started.clone()],
        vec!["CPU".into(), format!("{} ({} online)", h.cpu_model, h.cpus)],
        vec!["kernel".into(), h.kernel.clone()],
        vec![
            "pinning".into(),
            format!("target on CPU {}, load generator on CPU {}", h.target_cpus, h.load_cpus),
        ],
        vec![
            "method".into(),
            format!(
                "{} runs per point of {:.1} s after a {:.1} s warm-up; highest and lowest dropped when >= 3; median and min..max of the kept runs{}",
                h.reps,
                h.duration_s,
                h.warmup_s,
                if h.quick { "; --quick (shortened run)" } else { "" }
            ),
        ],
    ];
    rows.push(vec![
        "reading".into(),
        crate::suite::render_md::READING.into(),
    ]);
    rows.extend(h.tools.iter().map(|(t, v)| vec![t.clone(), v.clone()]));
    if let Some(note) = &h.note {
        rows.push(vec!["note".into(), note.clone()]);
    }
    out.push_str(&html_table(
        &Table {
            header: vec![String::new(), String::new()],
            rows,
        },
        "header",
    ));
    out.push_str("<h2>Targets</h2>");
    let targets = Table {
        header: vec![
            "target".into(),
            "version".into(),
            "configuration".into(),
            "command".into(),
        ],
        rows: h
            .targets
            .iter()
            .map(|t| {
                vec![
                    t.name.clone(),
                    t.version.clone().unwrap_or_else(|| "-".into()),
                    t.description.clone(),
                    t.command.clone(),
                ]
            })
            .collect(),
    };
    out.push_str(&html_table(&targets, "targets"));
    for s in &report.scenarios {
        let _ = write!(
            out,
            "<h2>{} ({})</h2><p>Method: {}.</p>",
            xml(&s.title),
            xml(&s.mirrors),
            xml(&s.method)
        );
        out.push_str(&html_table(&scenario_table(s), "measured"));
        let charts = charts(s);
        if !charts.is_empty() {
            out.push_str("<div class=\"charts\">");
            for c in charts {
                out.push_str(&c);
            }
            out.push_str("</div>");
        }
        for p in for_scenario(&s.name) {
            let _ = write!(
                out,
                "<p>Published, {} — hardware: {} (not measured here):</p>",
                xml(p.source),
                xml(p.hardware)
            );
            out.push_str(&html_table(&published_as_table(&p), "published"));
        }
    }
    out.push_str("</body></html>\n");
    out
}
