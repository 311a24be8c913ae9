//! The app's figures in Prometheus's text exposition format (version 0.0.4, which
//! `promtool check metrics` reads), built from the workers' snapshots and the totals of the
//! workers that have exited, so that no counter goes backwards when a worker is replaced.
//!
//! Counters and the latency histogram are the app's totals (labelled by what they count, never
//! by worker); gauges and `process_*` are per process, labelled `server`, `worker` and `pid`
//! (during a reload the old and the new worker of one index are both there, told apart by
//! their pid).

use prometheus::proto::{
    Bucket, Counter, Gauge, Histogram, LabelPair, Metric, MetricFamily, MetricType,
};

use std::collections::BTreeMap;

use crate::latency::LatencyTotals;
use crate::metrics::{Sample, Value};
use crate::process_sample::ProcessSample;
use crate::response_counts::{self, ResponseCount};
use crate::stats::{HandoverCounts, RetiredTotals, WorkerStatus};

/// What one scrape shows.
pub(crate) struct Scrape<'a> {
    /// The totals of the workers that have exited.
    pub retired: &'a RetiredTotals,
    /// Every live worker's latest snapshot (those being retired too).
    pub workers: &'a [WorkerStatus],
    /// Workers restarted after an unexpected exit.
    pub restarts: u64,
    /// Workers replaced by recycling, by cause.
    pub recycles: crate::recycle::RecycleCounts,
    /// Broadcasts dropped between workers: by the master for a stalled worker, and by workers
    /// for a stalled master.
    pub dropped_broadcasts: u64,
    /// The master's pid.
    pub master_pid: i32,
    /// Each alert rule and whether it is firing.
    pub alerts: Vec<(&'static str, bool)>,
    /// Alert webhook calls that failed.
    pub webhook_failures: u64,
}

/// The exposition of `scrape`.
pub(crate) fn exposition(scrape: &Scrape<'_>) -> String {
    let families = families(scrape);
    let mut out = String::new();
    if let Err(e) = prometheus::TextEncoder::new().encode_utf8(&families, &mut out) {
        // Only a malformed family fails; the families here are built to be valid.
        tracing::error!("cannot encode the metrics: {e}");
    }
    out
}

/// The content type of [`exposition`]'s text.
pub(crate) const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

fn families(s: &Scrape<'_>) -> Vec<MetricFamily> {
    let mut out = totals(s);
    out.extend(alert_families(s));
    out.extend(worker_gauges(s));
    out.extend(process_families(s));
    out.push(family(
        "brisk_resident_memory_peak_bytes",
        "Peak resident memory of each worker (VmHWM), in bytes.",
        MetricType::GAUGE,
        per_worker(s, |w| (w.rss_peak_kib * 1024) as f64),
    ));
    out.extend(app_families(s));
    // A family with no sample (no worker answered yet) is left out: the format has no empty
    // family.
    out.retain(|f| !f.get_metric().is_empty());
    out
}

/// A gauge per live worker, of `f`.
fn per_worker(s: &Scrape<'_>, f: fn(&WorkerStatus) -> f64) -> Vec<Metric> {
    s.workers
        .iter()
        .map(|w| gauge(&worker_labels(w), f(w)))
        .collect()
}

/// The app's totals: what retired and live workers counted, summed.
fn totals(s: &Scrape<'_>) -> Vec<MetricFamily> {
    let r = s.retired;
    let sum = |f: fn(&WorkerStatus) -> u64| s.workers.iter().map(f).sum::<u64>();
    let mut responses: Vec<ResponseCount> = r.http_responses.clone();
    let mut duration: LatencyTotals = r.http_duration.clone();
    for w in s.workers {
        response_counts::merge(&mut responses, &w.http_responses);
        duration.merge(&w.http_duration);
    }
    responses.sort_by(|a, b| (&a.method, &a.code).cmp(&(&b.method, &b.code)));

    vec![
        family(
            "brisk_http_requests_total",
            "HTTP responses sent, by request method and status class.",
            MetricType::COUNTER,
            responses
                .iter()
                .map(|c| counter(&[("code", &c.code), ("method", &c.method)], c.count as f64))
                .collect(),
        ),
        family(
            "brisk_http_request_duration_seconds",
            "How long HTTP handlers took to produce a response head.",
            MetricType::HISTOGRAM,
            vec![histogram(&duration)],
        ),
        family(
            "brisk_requests_total",
            "Messages of every protocol handed to a handler (Workerman's total_request).",
            MetricType::COUNTER,
            vec![counter(
                &[],
                (r.total_request + sum(|w| w.total_request)) as f64,
            )],
        ),
        family(
            "brisk_ws_messages_total",
            "WebSocket messages received and handled (in) and sent (out; broadcasts aside).",
            MetricType::COUNTER,
            vec![
                counter(
                    &[("direction", "in")],
                    (r.ws_messages + sum(|w| w.ws_messages)) as f64,
                ),
                counter(
                    &[("direction", "out")],
                    (r.ws_sent + sum(|w| w.ws_sent)) as f64,
                ),
            ],
        ),
        family(
            "brisk_broadcast_deliveries_total",
            "Broadcast frames handed to members of a group.",
            MetricType::COUNTER,
            vec![counter(
                &[],
                (r.broadcast_deliveries + sum(|w| w.broadcast_deliveries)) as f64,
            )],
        ),
        family(
            "brisk_ws_handover_total",
            "WebSocket connections of endpoints that survive reloads: handed to a new worker, \
             taken over by one, or skipped (closed as a stop closes them).",
            MetricType::COUNTER,
            [
                ("handed_over", (|h| h.handed_over) as fn(&HandoverCounts) -> u64),
                ("resumed", |h| h.resumed),
                ("skipped", |h| h.skipped),
            ]
            .into_iter()
            .map(|(outcome, of)| {
                counter(
                    &[("outcome", outcome)],
                    (of(&r.ws_handover) + s.workers.iter().map(|w| of(&w.ws_handover)).sum::<u64>())
                        as f64,
                )
            })
            .collect(),
        ),
        family(
            "brisk_errors_total",
            "Errors by kind: handler errors and panics, protocol violations, send buffers that \
             filled and the messages they dropped, peers closed for not reading (send timeout), \
             values refused from Redis for a seal that did not match, accepts paused at the max connections, \
             access-log lines dropped, \
             broadcasts dropped for a stalled worker or master.",
            MetricType::COUNTER,
            [
                ("handler", r.throw_exception + sum(|w| w.throw_exception)),
                ("protocol", r.rejected + sum(|w| w.rejected)),
                ("send_buffer_full", r.buffer_full + sum(|w| w.buffer_full)),
                ("send_dropped", r.sends_dropped + sum(|w| w.sends_dropped)),
                ("send_timeout", r.send_timeouts + sum(|w| w.send_timeouts)),
                ("redis_refused", r.redis_refused + sum(|w| w.redis_refused)),
                ("accept_paused", r.accept_paused + sum(|w| w.accept_paused)),
                (
                    "log_lines_dropped",
                    r.log_lines_dropped + sum(|w| w.log_lines_dropped),
                ),
                ("broadcast_dropped", s.dropped_broadcasts),
            ]
            .iter()
            .map(|(kind, n)| counter(&[("kind", kind)], *n as f64))
            .collect(),
        ),
        family(
            "brisk_jobs_total",
            "Queue jobs by what happened: pushed, done, retried (a failed run put back), dead \
             (sent to the dead-letter list).",
            MetricType::COUNTER,
            [
                ("pushed", r.jobs.pushed + sum(|w| w.jobs.pushed)),
                ("done", r.jobs.done + sum(|w| w.jobs.done)),
                ("retried", r.jobs.retried + sum(|w| w.jobs.retried)),
                ("dead", r.jobs.dead + sum(|w| w.jobs.dead)),
            ]
            .iter()
            .map(|(outcome, n)| counter(&[("outcome", outcome)], *n as f64))
            .collect(),
        ),
        family(
            "brisk_db_waits_total",
            "Queries and transactions that found every place of their database pool taken \
             and waited.",
            MetricType::COUNTER,
            vec![counter(&[], (r.db.waits + sum(|w| w.db.waits)) as f64)],
        ),
        family(
            "brisk_db_timeouts_total",
            "Database calls past a timeout: waiting for a place in the pool (acquire), or \
             for the server's answer (query).",
            MetricType::COUNTER,
            vec![
                counter(
                    &[("kind", "acquire")],
                    (r.db.acquire_timeouts + sum(|w| w.db.acquire_timeouts)) as f64,
                ),
                counter(
                    &[("kind", "query")],
                    (r.db.query_timeouts + sum(|w| w.db.query_timeouts)) as f64,
                ),
            ],
        ),
        family(
            "brisk_connections_accepted_total",
            "Connections accepted.",
            MetricType::COUNTER,
            vec![counter(&[], (r.accepted + sum(|w| w.accepted)) as f64)],
        ),
        family(
            "brisk_network_bytes_total",
            "Bytes received from (in) and sent to (out) peers.",
            MetricType::COUNTER,
            vec![
                counter(
                    &[("direction", "in")],
                    (r.bytes_in + sum(|w| w.bytes_in)) as f64,
                ),
                counter(
                    &[("direction", "out")],
                    (r.bytes_out + sum(|w| w.bytes_out)) as f64,
                ),
            ],
        ),
        family(
            "brisk_worker_restarts_total",
            "Workers restarted after an unexpected exit.",
            MetricType::COUNTER,
            vec![counter(&[], s.restarts as f64)],
        ),
        family(
            "brisk_worker_recycles_total",
            "Workers replaced by recycling (max_requests, max_memory_mib), by cause.",
            MetricType::COUNTER,
            vec![
                counter(&[("cause", "requests")], s.recycles.requests as f64),
                counter(&[("cause", "memory")], s.recycles.memory as f64),
            ],
        ),
        family(
            "brisk_workers_exited_total",
            "Workers that have exited (replaced by a reload, or after a crash).",
            MetricType::COUNTER,
            vec![counter(&[], r.workers as f64)],
        ),
    ]
}

/// Each alert rule's state and the webhook's failures, for an app with alert rules.
fn alert_families(s: &Scrape<'_>) -> Vec<MetricFamily> {
    if s.alerts.is_empty() {
        return Vec::new();
    }
    vec![
        family(
            "brisk_alert_firing",
            "1 while the alert is firing, 0 otherwise.",
            MetricType::GAUGE,
            s.alerts
                .iter()
                .map(|(name, firing)| gauge(&[("alert", *name)], f64::from(u8::from(*firing))))
                .collect(),
        ),
        family(
            "brisk_alert_webhook_failures_total",
            "Alert webhook calls that failed, timed out or were dropped.",
            MetricType::COUNTER,
            vec![counter(&[], s.webhook_failures as f64)],
        ),
    ]
}

/// What each worker holds now: connections, database connections, loop lag, jobs, timers.
fn worker_gauges(s: &Scrape<'_>) -> Vec<MetricFamily> {
    let per_worker = |f| per_worker(s, f);
    let mut out = vec![family(
        "brisk_connections",
        "Connections open now.",
        MetricType::GAUGE,
        per_worker(|w| w.connections as f64),
    )];
    // Only the workers that hold database connections: most servers of an app hold none.
    let db_connections = s
        .workers
        .iter()
        .filter(|w| w.db.connections_open > 0)
        .flat_map(|w| {
            let busy = w.db.connections_busy;
            let idle = w.db.connections_open.saturating_sub(busy);
            [("busy", busy), ("idle", idle)].map(|(state, n)| {
                let mut pairs = worker_labels(w);
                pairs.push(("state", state.to_string()));
                gauge(&pairs, n as f64)
            })
        })
        .collect();
    out.push(family(
        "brisk_db_connections",
        "Database connections open now, busy (a query in flight, a transaction under way) or \
         idle.",
        MetricType::GAUGE,
        db_connections,
    ));
    out.push(family(
        "brisk_event_loop_lag_seconds",
        "How late the worker's 10 ms tick fired: the 99th percentile over the last 10 complete \
         seconds.",
        MetricType::GAUGE,
        per_worker(|w| w.loop_lag.quantile_us(0.99).unwrap_or(0) as f64 / 1e6),
    ));
    out.push(family(
        "brisk_jobs_running",
        "Queue jobs running now.",
        MetricType::GAUGE,
        per_worker(|w| w.jobs.running as f64),
    ));
    out.push(family(
        "brisk_timers",
        "Live timers.",
        MetricType::GAUGE,
        per_worker(|w| w.timers as f64),
    ));
    out
}

/// The `process_*` families, of every worker and the master.
fn process_families(s: &Scrape<'_>) -> Vec<MetricFamily> {
    let mut processes: Vec<(Vec<(&str, String)>, ProcessSample)> = s
        .workers
        .iter()
        .filter_map(|w| Some((worker_labels(w), ProcessSample::of(w.pid)?)))
        .collect();
    if let Some(me) = ProcessSample::of(s.master_pid) {
        let labels = vec![
            ("server", String::new()),
            ("worker", "master".to_string()),
            ("pid", s.master_pid.to_string()),
        ];
        processes.push((labels, me));
    }
    let process = |name: &str, help: &str, kind: MetricType, f: fn(&ProcessSample) -> f64| {
        let metrics = processes
            .iter()
            .map(|(labels, p)| {
                let v = f(p);
                match kind {
                    MetricType::COUNTER => counter_owned(labels, v),
                    _ => gauge(labels, v),
                }
            })
            .collect();
        family(name, help, kind, metrics)
    };
    vec![
        process(
            "process_cpu_seconds_total",
            "User and system CPU time spent, in seconds.",
            MetricType::COUNTER,
            |p| p.cpu_seconds,
        ),
        process(
            "process_resident_memory_bytes",
            "Resident memory size in bytes.",
            MetricType::GAUGE,
            |p| p.resident_bytes as f64,
        ),
        process(
            "process_virtual_memory_bytes",
            "Virtual memory size in bytes.",
            MetricType::GAUGE,
            |p| p.virtual_bytes as f64,
        ),
        process(
            "process_open_fds",
            "Open file descriptors.",
            MetricType::GAUGE,
            |p| p.open_fds as f64,
        ),
        process(
            "process_max_fds",
            "The limit on open file descriptors.",
            MetricType::GAUGE,
            |p| p.max_fds as f64,
        ),
        process(
            "process_start_time_seconds",
            "Start time of the process since the Unix epoch, in seconds.",
            MetricType::GAUGE,
            |p| p.start_time_seconds,
        ),
    ]
}

/// The app's own metrics (see [`crate::metrics`]), a family per name in name order:
/// counters and histograms summed over the live workers and those that exited, gauges per
/// worker.
fn app_families(s: &Scrape<'_>) -> Vec<MetricFamily> {
    let mut totals: Vec<Sample> = s.retired.app_metrics.clone();
    let mut families: BTreeMap<&str, (&str, MetricType, Vec<Metric>)> = BTreeMap::new();
    let kind = |v: &Value| match v {
        Value::Counter(_) => MetricType::COUNTER,
        Value::Gauge(_) => MetricType::GAUGE,
        Value::Histogram { .. } => MetricType::HISTOGRAM,
    };
    for w in s.workers {
        for m in &w.app_metrics {
            let Value::Gauge(v) = m.value else {
                crate::metrics::merge_into(&mut totals, m);
                continue;
            };
            let mut pairs: Vec<(&str, String)> = m
                .labels
                .iter()
                .map(|(k, v)| (k.as_str(), v.clone()))
                .collect();
            pairs.extend(worker_labels(w));
            let entry = families
                .entry(&m.name)
                .or_insert((&m.help, kind(&m.value), vec![]));
            entry.2.push(gauge(&pairs, v));
        }
    }
    for m in &totals {
        let metric = match &m.value {
            Value::Counter(n) => counter_owned(&m.labels, *n as f64),
            Value::Gauge(_) => continue,
            Value::Histogram {
                bounds,
                counts,
                sum,
            } => app_histogram(&m.labels, bounds, counts, *sum),
        };
        let entry = families
            .entry(&m.name)
            .or_insert((&m.help, kind(&m.value), vec![]));
        entry.2.push(metric);
    }
    families
        .into_iter()
        .map(|(name, (help, kind, metrics))| family(name, help, kind, metrics))
        .collect()
}

/// An app histogram's sample: `counts` per bucket (the last above every bound) made
/// cumulative.
fn app_histogram(pairs: &[(String, String)], bounds: &[f64], counts: &[u64], sum: f64) -> Metric {
    let mut below = 0;
    let cumulative = bounds.iter().zip(counts).map(|(bound, n)| {
        below += n;
        (*bound, below)
    });
    histogram_metric(labels(pairs), cumulative, counts.iter().sum(), sum)
}

fn worker_labels(w: &WorkerStatus) -> Vec<(&'static str, String)> {
    vec![
        ("server", w.server.clone()),
        ("worker", w.worker.to_string()),
        ("pid", w.pid.to_string()),
    ]
}

fn family(name: &str, help: &str, kind: MetricType, metrics: Vec<Metric>) -> MetricFamily {
    let mut f = MetricFamily::default();
    f.set_name(name.to_string());
    f.set_help(help.to_string());
    f.set_field_type(kind);
    f.set_metric(metrics);
    f
}

fn labels<K: AsRef<str>, V: AsRef<str>>(pairs: &[(K, V)]) -> Vec<LabelPair> {
    pairs
        .iter()
        .map(|(k, v)| {
            let mut p = LabelPair::default();
            p.set_name(k.as_ref().to_string());
            p.set_value(v.as_ref().to_string());
            p
        })
        .collect()
}

fn counter(pairs: &[(&str, &str)], v: f64) -> Metric {
    counter_owned(pairs, v)
}

fn counter_owned<K: AsRef<str>, V: AsRef<str>>(pairs: &[(K, V)], v: f64) -> Metric {
    let mut c = Counter::default();
    c.set_value(v);
    let mut m = Metric::from_label(labels(pairs));
    m.set_counter(c);
    m
}

fn gauge<K: AsRef<str>, V: AsRef<str>>(pairs: &[(K, V)], v: f64) -> Metric {
    let mut g = Gauge::default();
    g.set_value(v);
    let mut m = Metric::from_gauge(g);
    m.set_label(labels(pairs));
    m
}

fn histogram(t: &LatencyTotals) -> Metric {
    let cumulative = t
        .cumulative()
        .into_iter()
        .map(|(bound_us, n)| (bound_us as f64 / 1e6, n));
    histogram_metric(Vec::new(), cumulative, t.count(), t.sum_us as f64 / 1e6)
}

/// A histogram sample from its cumulative buckets (upper bound, observations at or under it).
fn histogram_metric(
    labels: Vec<LabelPair>,
    cumulative: impl Iterator<Item = (f64, u64)>,
    count: u64,
    sum: f64,
) -> Metric {
    let mut h = Histogram::default();
    h.set_sample_count(count);
    h.set_sample_sum(sum);
    h.set_bucket(
        cumulative
            .map(|(bound, n)| {
                let mut b = Bucket::default();
                b.set_upper_bound(bound);
                b.set_cumulative_count(n);
                b
            })
            .collect(),
    );
    let mut m = Metric::from_label(labels);
    m.set_histogram(h);
    m
}
