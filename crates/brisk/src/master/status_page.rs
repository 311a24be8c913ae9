//! The `/status` page of the metrics listener: one HTML page with the KPIs now (in total and
//! per worker), the alerts, and SVG charts of the last minutes drawn by the server from the
//! KPI history. No script: the page reloads itself every few seconds.

use std::fmt::Write as _;

use crate::latency::LatencyWindow;
use crate::stats::WorkerStatus;

use super::kpi_history::KpiSample;

/// Seconds between reloads of the page.
const REFRESH_S: u32 = 5;
/// A chart's drawing area, in SVG units.
const WIDTH: f64 = 560.0;
const HEIGHT: f64 = 120.0;

/// What the page shows.
pub(crate) struct StatusView<'a> {
    /// The app's name.
    pub name: &'a str,
    /// Seconds since the master started.
    pub uptime_s: u64,
    /// Each current worker's latest snapshot.
    pub workers: &'a [WorkerStatus],
    /// The KPI history, oldest first.
    pub history: Vec<&'a KpiSample>,
    /// Each alert and whether it fires.
    pub alerts: &'a [(&'static str, bool)],
    /// The machine's load averages.
    pub load_average: [f64; 3],
}

/// The page's HTML.
pub(crate) fn render(v: &StatusView<'_>) -> String {
    let mut h = String::with_capacity(32 << 10);
    let name = escape(v.name);
    let _ = write!(
        h,
        "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta http-equiv=\"refresh\" content=\"{REFRESH_S}\">\
         <title>{name} · Brisk status</title><style>{STYLE}</style></head><body>\
         <h1>{name} <small>Brisk status</small></h1>\
         <p class=\"meta\">up {} · {} workers · load {:.2} {:.2} {:.2} · refreshed every {REFRESH_S} s</p>",
        duration(v.uptime_s),
        v.workers.len(),
        v.load_average[0],
        v.load_average[1],
        v.load_average[2],
    );
    h += &summary(v);
    h += &alerts(v.alerts);
    h += "<div class=\"charts\">";
    let points = |f: fn(&KpiSample) -> Option<f64>| -> Vec<(u64, Option<f64>)> {
        v.history.iter().map(|s| (s.at_unix_s, f(s))).collect()
    };
    h += &chart(
        "Throughput",
        "requests/s",
        &[("", points(|s| Some(s.throughput)))],
    );
    h += &chart(
        "HTTP latency (last 10 s)",
        "ms",
        &[("p99", points(|s| s.p99_ms)), ("p50", points(|s| s.p50_ms))],
    );
    h += &chart(
        "Workers' memory",
        "MiB",
        &[("", points(|s| Some(s.rss_bytes as f64 / (1 << 20) as f64)))],
    );
    h += &chart(
        "Connections",
        "open",
        &[("", points(|s| Some(s.connections as f64)))],
    );
    h += &chart(
        "Error rate (last 10 s)",
        "%",
        &[("", points(|s| s.error_rate.map(|r| r * 100.0)))],
    );
    h += &chart(
        "Event-loop lag p99 (worst worker)",
        "ms",
        &[("", points(|s| s.loop_lag_p99_ms))],
    );
    h += "</div>";
    h += &workers_table(v.workers);
    h += "</body></html>\n";
    h
}

const STYLE: &str = "body{font:14px/1.4 system-ui,sans-serif;margin:24px;color:#1d2733;background:#f7f8fa}\
h1{margin:0 0 4px;font-size:22px}h1 small{color:#6b7785;font-weight:400;font-size:14px}\
.meta{color:#6b7785;margin:0 0 16px}\
.tiles{display:flex;flex-wrap:wrap;gap:10px;margin-bottom:14px}\
.tile{background:#fff;border:1px solid #dde2e8;border-radius:6px;padding:8px 12px;min-width:110px}\
.tile b{display:block;font-size:20px}.tile span{color:#6b7785;font-size:12px}\
.alerts{margin:0 0 14px}.alert{display:inline-block;padding:3px 8px;border-radius:4px;margin-right:6px;font-size:12px}\
.ok{background:#e3f4e8;color:#1b6b34}.firing{background:#fbe2e2;color:#a01b1b;font-weight:600}\
.charts{display:grid;grid-template-columns:repeat(auto-fill,minmax(600px,1fr));gap:12px}\
figure{margin:0;background:#fff;border:1px solid #dde2e8;border-radius:6px;padding:8px 12px}\
figcaption{font-weight:600;margin-bottom:4px}figcaption span{color:#6b7785;font-weight:400}\
svg text{font-size:10px;fill:#6b7785}\
table{border-collapse:collapse;margin-top:16px;background:#fff}\
td,th{border:1px solid #dde2e8;padding:4px 8px;text-align:right}th{background:#eef1f4}td:first-child{text-align:left}";

/// The tiles of the figures now, for the whole app.
fn summary(v: &StatusView<'_>) -> String {
    let mut http = LatencyWindow::default();
    for w in v.workers {
        http.merge(&w.http_latency);
    }
    let recent: Vec<&&KpiSample> = v.history.iter().rev().take(10).collect();
    let rate = if recent.is_empty() {
        0.0
    } else {
        recent.iter().map(|s| s.throughput).sum::<f64>() / recent.len() as f64
    };
    let since_start: f64 = v.workers.iter().map(WorkerStatus::rate_since_start).sum();
    let last = v.history.last();
    let at = |q: f64| http.quantile_us(q).map_or("–".into(), latency);
    let rss: u64 = v.workers.iter().map(|w| w.rss_kib).sum();
    let peak: u64 = v.workers.iter().map(|w| w.rss_peak_kib).sum();
    let tiles = [
        (format!("{rate:.0}/s"), "requests, last 10 s".to_string()),
        (format!("{since_start:.0}/s"), "since start".to_string()),
        (at(0.5), "p50, last 10 s".to_string()),
        (at(0.95), "p95".to_string()),
        (at(0.99), "p99".to_string()),
        (
            last.and_then(|s| s.error_rate)
                .map_or("–".into(), |r| format!("{:.2} %", r * 100.0)),
            "error rate, last 10 s".to_string(),
        ),
        (mib(rss), format!("memory (peak {})", mib(peak))),
        (
            v.workers
                .iter()
                .map(|w| w.connections)
                .sum::<u64>()
                .to_string(),
            "connections".to_string(),
        ),
        (
            last.and_then(|s| s.loop_lag_p99_ms)
                .map_or("–".into(), |ms| latency((ms * 1000.0) as u64)),
            "loop lag p99".to_string(),
        ),
    ];
    let mut h = String::from("<div class=\"tiles\">");
    for (value, label) in tiles {
        let _ = write!(
            h,
            "<div class=\"tile\"><b>{value}</b><span>{label}</span></div>"
        );
    }
    h + "</div>"
}

fn alerts(alerts: &[(&'static str, bool)]) -> String {
    if alerts.is_empty() {
        return String::new();
    }
    let mut h = String::from("<div class=\"alerts\">Alerts: ");
    for (name, firing) in alerts {
        let (class, state) = if *firing {
            ("firing", "firing")
        } else {
            ("ok", "ok")
        };
        let _ = write!(h, "<span class=\"alert {class}\">{name}: {state}</span>");
    }
    h + "</div>"
}

/// A series to draw: its label (empty for a chart's only one) and its points, `(second since
/// the Unix epoch, figure)`, `None` where there was no figure.
type Series<'a> = (&'a str, Vec<(u64, Option<f64>)>);

/// A line chart of one or more series over the history's time span.
fn chart(title: &str, unit: &str, series: &[Series<'_>]) -> String {
    const COLOURS: [&str; 2] = ["#2563c9", "#e08a1e"];
    let all = series.iter().flat_map(|(_, p)| p.iter());
    let (t0, t1) = all
        .clone()
        .fold((u64::MAX, 0), |(a, b), (t, _)| (a.min(*t), b.max(*t)));
    let max = all.filter_map(|(_, v)| *v).fold(0.0f64, f64::max);
    let top = nice_ceiling(max);
    let span = t1.saturating_sub(t0).max(1) as f64;
    let (left, bottom) = (44.0, 18.0);
    let x = |t: u64| left + (t.saturating_sub(t0)) as f64 / span * (WIDTH - left - 4.0);
    let y = |v: f64| 4.0 + (1.0 - v / top) * (HEIGHT - bottom - 4.0);
    let mut h = format!(
        "<figure><figcaption>{} <span>{}</span></figcaption>\
         <svg viewBox=\"0 0 {WIDTH} {HEIGHT}\" width=\"{WIDTH}\" height=\"{HEIGHT}\" role=\"img\">",
        escape(title),
        escape(unit)
    );
    // Grid: zero, half and top, with their values.
    for frac in [0.0, 0.5, 1.0] {
        let gy = y(top * frac);
        let _ = write!(
            h,
            "<line x1=\"{left}\" y1=\"{gy:.1}\" x2=\"{}\" y2=\"{gy:.1}\" stroke=\"#e6e9ee\"/>\
             <text x=\"{}\" y=\"{:.1}\" text-anchor=\"end\">{}</text>",
            WIDTH - 4.0,
            left - 4.0,
            gy + 3.0,
            short(top * frac)
        );
    }
    let minutes = (t1.saturating_sub(t0) as f64 / 60.0).max(0.0);
    let _ = write!(
        h,
        "<text x=\"{left}\" y=\"{}\">{:.1} min ago</text><text x=\"{}\" y=\"{}\" text-anchor=\"end\">now</text>",
        HEIGHT - 4.0,
        minutes,
        WIDTH - 4.0,
        HEIGHT - 4.0
    );
    for (i, (label, points)) in series.iter().enumerate() {
        let colour = COLOURS[i % COLOURS.len()];
        // A gap (no figure) breaks the line.
        let mut runs: Vec<Vec<String>> = vec![Vec::new()];
        for (t, v) in points {
            match v {
                Some(v) => runs.last_mut().expect("one run at least").push(format!(
                    "{:.1},{:.1}",
                    x(*t),
                    y(*v)
                )),
                None => runs.push(Vec::new()),
            }
        }
        for run in runs.iter().filter(|r| !r.is_empty()) {
            let _ = write!(
                h,
                "<polyline fill=\"none\" stroke=\"{colour}\" stroke-width=\"1.5\" points=\"{}\"/>",
                run.join(" ")
            );
        }
        if !label.is_empty() {
            let _ = write!(
                h,
                "<text x=\"{}\" y=\"{}\" style=\"fill:{colour}\">{}</text>",
                left + 6.0 + 40.0 * i as f64,
                14.0,
                escape(label)
            );
        }
    }
    h + "</svg></figure>"
}

/// The per-worker table.
fn workers_table(workers: &[WorkerStatus]) -> String {
    let mut h = String::from(
        "<table><tr><th>server</th><th>worker</th><th>pid</th><th>req/s (10 s)</th>\
         <th>p50</th><th>p99</th><th>errors</th><th>memory</th><th>peak</th>\
         <th>connections</th><th>loop lag p99</th><th>uptime</th></tr>",
    );
    let ms = |w: &LatencyWindow, q: f64| w.quantile_us(q).map_or("–".into(), latency);
    for w in workers {
        let _ = write!(
            h,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{:.0}</td><td>{}</td><td>{}</td>\
             <td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            escape(&w.server),
            w.worker,
            w.pid,
            w.http_rate_recent(),
            ms(&w.http_latency, 0.5),
            ms(&w.http_latency, 0.99),
            w.throw_exception,
            mib(w.rss_kib),
            mib(w.rss_peak_kib),
            w.connections,
            ms(&w.loop_lag, 0.99),
            duration(w.uptime_s)
        );
    }
    h + "</table>"
}

/// The smallest of 1, 2 or 5 times a power of ten at or above `v` (1 for nothing).
fn nice_ceiling(v: f64) -> f64 {
    if v.is_nan() || v <= 0.0 || !v.is_finite() {
        return 1.0;
    }
    let p = 10f64.powf(v.log10().floor());
    [1.0, 2.0, 5.0, 10.0]
        .iter()
        .map(|m| m * p)
        .find(|c| *c >= v)
        .unwrap_or(10.0 * p)
}

/// A number in a few characters: 1.5k, 2M, 0.25.
fn short(v: f64) -> String {
    match v {
        v if v >= 1e6 => format!("{}M", trim(v / 1e6)),
        v if v >= 1e3 => format!("{}k", trim(v / 1e3)),
        v => trim(v),
    }
}

fn trim(v: f64) -> String {
    let s = format!("{v:.2}");
    s.trim_end_matches('0').trim_end_matches('.').to_string()
}

/// A duration given in µs, in µs below a millisecond and in ms above.
fn latency(us: u64) -> String {
    if us < 1000 {
        format!("{us} µs")
    } else {
        format!("{:.2} ms", us as f64 / 1000.0)
    }
}

fn mib(kib: u64) -> String {
    format!("{:.1} MiB", kib as f64 / 1024.0)
}

fn duration(s: u64) -> String {
    match s {
        s if s >= 86_400 => format!("{}d {}h", s / 86_400, s % 86_400 / 3600),
        s if s >= 3600 => format!("{}h {}m", s / 3600, s % 3600 / 60),
        s if s >= 60 => format!("{}m {}s", s / 60, s % 60),
        s => format!("{s}s"),
    }
}

/// `text` safe inside HTML text and attribute values.
fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(at: u64, throughput: f64, p99: Option<f64>) -> KpiSample {
        KpiSample {
            at_unix_s: at,
            total_request: 0,
            errors: 0,
            throughput,
            p50_ms: p99.map(|v| v / 2.0),
            p99_ms: p99,
            error_rate: None,
            rss_bytes: 64 << 20,
            connections: 3,
            loop_lag_p99_ms: Some(1.0),
        }
    }

    #[test]
    fn the_page_draws_every_chart_and_escapes_names() {
        let history = [
            sample(1000, 10.0, Some(4.0)),
            sample(1001, 2000.0, None),
            sample(1002, 1500.0, Some(8.0)),
        ];
        let workers = [WorkerStatus {
            server: "http://<x>".into(),
            ..WorkerStatus::default()
        }];
        let html = render(&StatusView {
            name: "a<b>",
            uptime_s: 3700,
            workers: &workers,
            history: history.iter().collect(),
            alerts: &[("p99_above", true)],
            load_average: [0.5, 0.25, 0.0],
        });
        assert!(
            html.contains("<title>a&lt;b&gt; · Brisk status</title>"),
            "{html}"
        );
        assert!(html.contains("http://&lt;x&gt;"));
        assert!(!html.contains("<x>") && !html.contains("a<b>"));
        assert_eq!(html.matches("<svg").count(), 6);
        // The latency lines break where a second had no request (two runs each); the error
        // rate has no point at all; the other four are one run each.
        assert_eq!(html.matches("<polyline").count(), 8, "{html}");
        assert!(html.contains("alert firing\">p99_above: firing"));
        assert!(html.contains("up 1h 1m"));
        assert!(html.contains(&format!("content=\"{REFRESH_S}\"")));
    }

    #[test]
    fn axes_end_on_round_numbers() {
        assert_eq!(nice_ceiling(0.0), 1.0);
        assert_eq!(nice_ceiling(1.2), 2.0);
        assert_eq!(nice_ceiling(3000.0), 5000.0);
        assert_eq!(nice_ceiling(0.07), 0.1);
        assert_eq!(short(1500.0), "1.5k");
        assert_eq!(short(0.25), "0.25");
        assert_eq!(latency(7), "7 µs");
        assert_eq!(latency(2500), "2.50 ms");
    }
}
