//! The WebSocket scenarios of the suite: idle connections (memory per connection) and
//! broadcast (deliveries per second, latency), run target after target.

use std::time::Duration;

use super::runner::{beyond_fd_limit, pick, Lab};
use crate::fd_limit::fd_hard_limit;
use crate::suite::measure::Runs;
use crate::suite::model::Latency;
use crate::suite::model::{Outcome, Row, ScenarioResult};
use crate::suite::procfs::{snapshot, Sampler};
use crate::suite::stats::spread;
use crate::units::parse_duration;
use crate::ws::{run_ws, WsMode};

impl Lab<'_> {
    pub(super) fn ws_idle(&mut self) -> Option<ScenarioResult> {
        let s = self.config.scenarios.ws_idle.clone()?;
        let points = pick(&s.points, &s.quick_points, self.quick);
        let reps = self.reps(s.reps);
        let hold = parse_duration(&s.hold).unwrap_or(Duration::from_secs(3));
        let hard = fd_hard_limit();
        let rows = self.sweep(
            "ws_idle",
            &points,
            |n| format!("{n} connections"),
            |lab, target, &n| {
                let point = format!("{n}");
                beyond_fd_limit(
                    target,
                    &point,
                    n,
                    hard,
                    "this machine's open-file hard limit",
                )
                .unwrap_or_else(|| lab.ws_idle_point(target, &point, n, &s, hold, reps))
            },
        );
        Some(ScenarioResult {
            name: "ws_idle".into(),
            title: "Idle WebSocket connections".into(),
            mirrors: "R1.4".into(),
            x_label: "connections".into(),
            method: format!(
                "open N connections to /ws and hold them {hold:.0?}; RSS per connection = (peak RSS - RSS before) / connections open; target restarted for each of {reps} runs"
            ),
            rows,
        })
    }

    fn ws_idle_point(
        &mut self,
        target: &str,
        point: &str,
        n: usize,
        s: &crate::suite::config::WsIdleScenario,
        hold: Duration,
        reps: usize,
    ) -> Row {
        let path = self.config.targets[target].paths.ws.clone();
        let mut per_conn = Vec::new();
        let mut opened = Vec::new();
        let mut failures = 0;
        let mut best = Row::empty(target, point, n as f64, Outcome::Measured);
        for _ in 0..reps {
            let result = self
                .ws_config(target, &path, n, s.ramp, &s.source_ips)
                .and_then(|mut config| {
                    config.mode = WsMode::Hold;
                    config.hold = hold;
                    let mut running = self.start_default(target)?;
                    let pid = running.pid();
                    std::thread::sleep(Duration::from_millis(300));
                    let idle = snapshot(pid, pid);
                    let sampler = Sampler::start(pid, pid, self.timing.sample_interval);
                    let report = run_ws(&config).map_err(|e| e.to_string());
                    let peak = sampler.finish();
                    running.stop();
                    Ok((idle, peak, report?))
                });
            match result {
                Ok((idle, peak, report)) => {
                    let open = report.connections.succeeded.max(1);
                    per_conn.push(
                        peak.rss_kb.saturating_sub(idle.rss_kb) as f64 * 1024.0 / open as f64,
                    );
                    opened.push(report.connections.succeeded);
                    failures += report.connections.failed.total;
                    if peak.rss_kb > best.rss_peak_kb.unwrap_or(0) {
                        best.rss_peak_kb = Some(peak.rss_kb);
                        best.rss_per_process_kb = peak.per_process_kb;
                        best.rss_idle_kb = Some(idle.rss_kb);
                    }
                }
                Err(e) => return Row::empty(target, point, n as f64, Outcome::Failed(e)),
            }
        }
        best.rss_per_conn_bytes = spread(&per_conn);
        best.open_connections = opened.iter().copied().min();
        best.errors = Some(failures);
        best
    }

    pub(super) fn ws_broadcast(&mut self) -> Option<ScenarioResult> {
        let s = self.config.scenarios.ws_broadcast.clone()?;
        let points = pick(&s.points, &s.quick_points, self.quick);
        let reps = self.reps(s.reps);
        let hard = fd_hard_limit();
        let rows = self.sweep(
            "ws_broadcast",
            &points,
            |n| format!("{n} receivers"),
            |lab, target, &n| {
                let point = format!("{n}");
                beyond_fd_limit(target, &point, n, hard, "the open-file hard limit")
                    .unwrap_or_else(|| lab.broadcast_point(target, &point, n, &s, reps))
            },
        );
        Some(ScenarioResult {
            name: "ws_broadcast".into(),
            title: "WebSocket broadcast".into(),
            mirrors: "R1.5".into(),
            x_label: "connections".into(),
            method: format!(
                "N receivers on /chat, one sender publishing {} msgs/s{} of {} bytes for {:.0?}; rate = deliveries/s; latency = publish to delivery; {reps} runs",
                s.rate,
                s.max_deliveries.map_or(String::new(), |cap| format!(
                    " (fewer where N × rate would pass {cap} deliveries/s: {})",
                    points
                        .iter()
                        .map(|&n| format!("{} msgs/s to {n}", s.sender_rate(n)))
                        .collect::<Vec<_>>()
                        .join(", ")
                )),
                s.size,
                self.timing.duration
            ),
            rows,
        })
    }

    fn broadcast_point(
        &mut self,
        target: &str,
        point: &str,
        n: usize,
        s: &crate::suite::config::WsBroadcastScenario,
        reps: usize,
    ) -> Row {
        let path = self.config.targets[target].paths.chat.clone();
        let result = self
            .ws_config(target, &path, n, s.ramp, &s.source_ips)
            .and_then(|mut config| {
                config.mode = WsMode::Broadcast;
                config.rate = s.sender_rate(n);
                config.size = s.size;
                config.hold = self.timing.duration;
                let mut running = self.start_default(target)?;
                let mut runs = Runs::new(running.pid(), self.timing.sample_interval);
                for _ in 0..reps {
                    runs.measure(
                        || run_ws(&config).map_err(|e| e.to_string()),
                        |r| r.messages.as_ref().map_or(0, |m| m.delivered),
                    )?;
                }
                running.stop();
                Ok(runs)
            });
        match result {
            Ok(runs) => {
                let (mut row, median) = runs.row(target, point, n as f64, |r| {
                    r.messages.as_ref().map_or(0.0, |m| m.delivered_per_sec)
                });
                if let Some(i) = median {
                    row.latency_ms = Some(Latency::from_micros(&runs.reports[i].latency_us));
                    row.open_connections = Some(runs.reports[i].connections.open_at_end);
                }
                row.errors = Some(
                    runs.reports
                        .iter()
                        .map(|r| {
                            r.connections.failed.total
                                + r.messages
                                    .as_ref()
                                    .map_or(0, |m| m.expected.saturating_sub(m.delivered))
                        })
                        .sum(),
                );
                row
            }
            Err(e) => Row::empty(target, point, n as f64, Outcome::Failed(e)),
        }
    }
}
