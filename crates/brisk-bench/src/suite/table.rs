//! The columns of a scenario table, shared by the Markdown and HTML
//! renderings: each column appears only when some row has a value for it.

use crate::suite::model::{Outcome, Row, ScenarioResult};

type Cell = fn(&Row) -> Option<String>;

fn num(v: f64) -> String {
    if v >= 100.0 {
        let s = format!("{:.0}", v);
        let mut out = String::new();
        for (i, c) in s.chars().enumerate() {
            if i > 0 && (s.len() - i) % 3 == 0 {
                out.push(',');
            }
            out.push(c);
        }
        out
    } else if v >= 10.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    }
}

fn kib(v: u64) -> String {
    if v >= 10 * 1024 {
        format!("{:.1} MiB", v as f64 / 1024.0)
    } else {
        format!("{v} KiB")
    }
}

/// False when the row has a rate and it is zero: nothing completed, so
/// latency and CPU per request mean nothing.
fn completed(r: &Row) -> bool {
    !matches!(r.rate, Some(s) if s.median <= 0.0)
}

/// A table: header cells and body rows of cells.
pub struct Table {
    /// Header cells.
    pub header: Vec<String>,
    /// Body rows.
    pub rows: Vec<Vec<String>>,
}

/// Builds the table of a scenario.
pub fn scenario_table(s: &ScenarioResult) -> Table {
    let rate_label = if s.name == "ws_broadcast" {
        "msgs/s median"
    } else if s.name == "generator_check" {
        "brisk-bench req/s"
    } else {
        "req/s median"
    };
    let columns: Vec<(String, Cell)> = vec![
        (rate_label.into(), |r| r.rate.map(|s| num(s.median))),
        ("min..max (kept runs)".into(), |r| {
            r.rate.map(|s| {
                format!(
                    "{}..{} ({} of {})",
                    num(s.min),
                    num(s.max),
                    s.kept,
                    s.kept + s.dropped
                )
            })
        }),
        ("wrk req/s".into(), |r| r.wrk_rate.map(|s| num(s.median))),
        ("brisk-bench / wrk".into(), |r| {
            r.ratio.map(|v| {
                let verdict = if (v - 1.0).abs() <= 0.10 {
                    "within 10 %"
                } else {
                    "NOT within 10 %"
                };
                format!("{v:.3} ({verdict})")
            })
        }),
        ("first call ms".into(), |r| r.first_call_ms.map(num)),
        ("p50 / p90 / p99 ms".into(), |r| {
            r.latency_ms
                .filter(|_| completed(r))
                .map(|l| format!("{} / {} / {}", num(l.p50), num(l.p90), num(l.p99)))
        }),
        ("errors".into(), |r| {
            r.errors.map(|e| match &r.error_kinds {
                Some(k) => format!("{e} ({k})"),
                None => e.to_string(),
            })
        }),
        ("CPU %".into(), |r| r.cpu_percent.map(|v| format!("{v:.0}"))),
        ("CPU µs/req".into(), |r| {
            r.cpu_us_per_req.filter(|_| completed(r)).map(num)
        }),
        ("user + kernel µs/req".into(), |r| {
            match (r.user_us_per_req, r.kernel_us_per_req) {
                (Some(u), Some(k)) if completed(r) => Some(format!("{} + {}", num(u), num(k))),
                _ => None,
            }
        }),
        ("efficiency".into(), |r| {
            r.efficiency.map(|v| format!("{:.0} %", v * 100.0))
        }),
        ("open".into(), |r| r.open_connections.map(|v| v.to_string())),
        ("RSS per conn".into(), |r| {
            r.rss_per_conn_bytes
                .map(|s| format!("{} B ({}..{})", num(s.median), num(s.min), num(s.max)))
        }),
        ("RSS idle".into(), |r| r.rss_idle_kb.map(kib)),
        ("RSS peak".into(), |r| r.rss_peak_kb.map(kib)),
        ("RSS per process".into(), |r| {
            (!r.rss_per_process_kb.is_empty()).then(|| {
                r.rss_per_process_kb
                    .iter()
                    .map(|v| kib(*v))
                    .collect::<Vec<_>>()
                    .join(" + ")
            })
        }),
    ];
    let used: Vec<&(String, Cell)> = columns
        .iter()
        .filter(|(_, f)| s.rows.iter().any(|r| f(r).is_some()))
        .collect();
    let mut header = vec!["target".to_string(), s.x_label_or_point()];
    if used.is_empty() {
        header.push("result".into());
    }
    header.extend(used.iter().map(|(h, _)| h.clone()));
    let mut shown: Vec<&Row> = Vec::new();
    for r in &s.rows {
        // One "not supported" row per target is enough.
        let repeat = r.outcome == Outcome::NotSupported
            && shown
                .iter()
                .any(|p| p.target == r.target && p.outcome == Outcome::NotSupported);
        if !repeat {
            shown.push(r);
        }
    }
    let rows = shown
        .into_iter()
        .map(|r| {
            let mut cells = vec![r.target.clone(), r.point.clone()];
            if r.outcome == Outcome::Measured {
                cells.extend(used.iter().map(|(_, f)| f(r).unwrap_or_default()));
                if used.is_empty() {
                    cells.push("measured".into());
                }
            } else {
                cells.push(r.outcome.label());
                let pad = used.len().saturating_sub(1);
                cells.resize(cells.len() + pad, String::new());
            }
            cells
        })
        .collect();
    Table { header, rows }
}

impl ScenarioResult {
    /// The header of the point column.
    pub fn x_label_or_point(&self) -> String {
        match self.x_label.as_str() {
            "" => "point".into(),
            "bytes" => "file size".into(),
            other => other.into(),
        }
    }
}
