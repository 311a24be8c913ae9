//! The control CLI every app gets, and its client side: commands that talk to a running master
//! over its control socket. It knows the app only by its run paths (where the pid file and
//! control socket are) and its graceful timeout.

use std::time::{Duration, Instant};

use clap::{Parser, Subcommand};

use crate::error::{Error, Result};
use crate::ipc::codec::{read_msg, write_msg};
use crate::ipc::{self, ControlReply, ControlRequest, MasterStatus};
use crate::latency::LatencyWindow;
use crate::master::pidfile;
use crate::run_paths::RunPaths;
use crate::stats::{ConnectionInfo, WorkerStatus};

/// The default command line: just the control commands.
#[derive(Debug, Parser)]
#[command(about = "A Brisk server")]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The control commands. Add them to your own `clap` parser with `#[command(subcommand)]`,
/// then call [`App::run_command`](crate::App::run_command).
#[derive(Debug, Clone, Subcommand)]
pub enum Command {
    /// Start the master and its workers (in the foreground unless -d).
    Start {
        /// Run in the background; logs go to RUN_DIR/NAME.log.
        #[arg(short = 'd', long)]
        daemon: bool,
    },
    /// Stop the running app.
    Stop {
        /// Stop accepting, let open requests finish (up to the graceful timeout), then stop.
        #[arg(short = 'g', long)]
        graceful: bool,
    },
    /// Stop the running app (if any), then start it again.
    Restart {
        /// Run in the background.
        #[arg(short = 'd', long)]
        daemon: bool,
    },
    /// Replace every worker, one at a time, with a fresh process of the current binary.
    Reload {
        /// Let each old worker finish its in-flight work before it exits.
        #[arg(short = 'g', long)]
        graceful: bool,
    },
    /// Replace the master and workers with the program's file as it is now, keeping every
    /// listening socket open.
    ///
    /// The running master starts the file as a new master and hands it the sockets; once its
    /// workers are ready the old one lets its workers finish and exits. A new build that
    /// fails to start leaves the running one serving (and the command fails).
    Upgrade {
        /// How long the new master may take to start its workers (and run start-up hooks
        /// such as migrations) before the upgrade is abandoned.
        #[arg(long, value_name = "SECONDS", default_value_t = 60)]
        timeout: u64,
    },
    /// Development loop: start the app, and on each change to a watched file run the build
    /// command and `upgrade` to what it built.
    ///
    /// The app's log goes to this terminal; a build that fails leaves the last good one
    /// serving; Ctrl-C stops the app and the loop.
    Dev {
        /// A file or directory to watch (walked, `target` and hidden directories skipped);
        /// repeat for more.
        #[arg(long, value_name = "PATH", default_value = "src")]
        watch: Vec<std::path::PathBuf>,
        /// The command that rebuilds this program, run by `sh -c`.
        #[arg(long, value_name = "COMMAND", default_value = "cargo build")]
        build: String,
        /// How long each new build may take to start before it is abandoned.
        #[arg(long, value_name = "SECONDS", default_value_t = 60)]
        timeout: u64,
    },
    /// One row per worker: pid, memory, connections, messages, errors, timers, uptime.
    Status {
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Make every worker open its log files again (after logrotate moved them); the same as
    /// `SIGHUP` to the master.
    ReopenLogs,
    /// One row per open connection.
    Connections {
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
}

/// Sends one request to the running master and returns its reply.
fn request(app: &RunPaths, req: ControlRequest, timeout: Duration) -> Result<ControlReply> {
    let pid_file = app.pid_file();
    if pidfile::running_pid(&pid_file).is_none() {
        return Err(not_running(app));
    }
    let socket = app.control_socket();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| Error::io("cannot start the CLI runtime", e))?;
    rt.block_on(async {
        let exchange = async {
            let (rd, wr) = tokio::net::UnixStream::connect(&socket).await?.into_split();
            let (mut rd, mut wr) = (ipc::reader(rd), ipc::writer(wr));
            write_msg(&mut wr, &req).await?;
            read_msg::<_, ControlReply>(&mut rd).await
        };
        match tokio::time::timeout(timeout, exchange).await {
            Ok(Ok(Some(reply))) => Ok(reply),
            Ok(Ok(None)) => Err(Error::Control("the master closed the connection".into())),
            Ok(Err(e)) => Err(Error::Control(format!(
                "cannot talk to the master at {}: {e}",
                socket.display()
            ))),
            Err(_) => Err(Error::Control(format!(
                "the master did not answer within {} s",
                timeout.as_secs()
            ))),
        }
    })
}

fn not_running(app: &RunPaths) -> Error {
    Error::NotRunning {
        name: app.name.clone(),
        pid_file: app.pid_file().display().to_string(),
    }
}

fn unexpected(reply: ControlReply) -> Error {
    match reply {
        ControlReply::Error(e) => Error::Control(e),
        other => Error::Control(format!("unexpected reply {other:?}")),
    }
}

/// `stop [-g]`: asks the master to stop and waits until it has exited.
pub(crate) fn stop(app: &RunPaths, graceful_timeout: Duration, graceful: bool) -> Result<()> {
    let pid = pidfile::running_pid(&app.pid_file()).ok_or_else(|| not_running(app))?;
    if let Err(e) = request(
        app,
        ControlRequest::Stop { graceful },
        Duration::from_secs(5),
    ) {
        // The control socket is gone or stuck: fall back to the signal.
        tracing::debug!("control request failed ({e}); signalling pid {pid}");
        use nix::sys::signal::{kill, Signal};
        let sig = if graceful {
            Signal::SIGQUIT
        } else {
            Signal::SIGTERM
        };
        let _ = kill(nix::unistd::Pid::from_raw(pid), sig);
    }
    let limit = if graceful {
        graceful_timeout + Duration::from_secs(10)
    } else {
        Duration::from_secs(15)
    };
    let start = Instant::now();
    while pidfile::alive(pid) {
        if start.elapsed() > limit {
            return Err(Error::Control(format!(
                "{} (pid {pid}) did not stop within {} s",
                app.name,
                limit.as_secs()
            )));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    println!("{} stopped", app.name);
    Ok(())
}

/// `reload [-g]`: replaces every worker and waits until done.
pub(crate) fn reload(app: &RunPaths, graceful_timeout: Duration, graceful: bool) -> Result<()> {
    let timeout = graceful_timeout * 2 + Duration::from_secs(60);
    match request(app, ControlRequest::Reload { graceful }, timeout)? {
        ControlReply::Done(msg) => {
            println!("{msg}");
            Ok(())
        }
        other => Err(unexpected(other)),
    }
}

/// Whether `stop` found nothing to stop.
pub(crate) fn is_not_running(e: &Error) -> bool {
    matches!(e, Error::NotRunning { .. })
}

/// `upgrade`: hands over to a new master started from the program's file; waits until it
/// serves (or failed, the running master serving on).
pub(crate) fn upgrade(app: &RunPaths, ready_timeout_s: u64) -> Result<()> {
    if ready_timeout_s == 0 {
        return Err(Error::Config(
            "upgrade --timeout must be at least 1 second".into(),
        ));
    }
    // The new master's start-up, its take-over (10 s at most), and a margin.
    let timeout = Duration::from_secs(ready_timeout_s.saturating_add(30));
    match request(app, ControlRequest::Upgrade { ready_timeout_s }, timeout)? {
        ControlReply::Done(msg) => {
            println!("{msg}");
            Ok(())
        }
        other => Err(unexpected(other)),
    }
}

/// `reopen-logs`.
pub(crate) fn reopen_logs(app: &RunPaths) -> Result<()> {
    match request(app, ControlRequest::ReopenLogs, Duration::from_secs(10))? {
        ControlReply::Done(msg) => {
            println!("{msg}");
            Ok(())
        }
        other => Err(unexpected(other)),
    }
}

/// `status [--json]`.
pub(crate) fn status(app: &RunPaths, json: bool) -> Result<()> {
    match request(app, ControlRequest::Status, Duration::from_secs(10))? {
        ControlReply::Status(s) => {
            if json {
                let v = status_json(&s);
                println!("{}", serde_json::to_string_pretty(&v).unwrap_or_default());
            } else {
                print!("{}", format_status(&s));
            }
            Ok(())
        }
        other => Err(unexpected(other)),
    }
}

/// `connections [--json]`.
pub(crate) fn connections(app: &RunPaths, json: bool) -> Result<()> {
    match request(app, ControlRequest::Connections, Duration::from_secs(30))? {
        ControlReply::Connections(list) => {
            if json {
                println!("{}", serde_json::to_string(&list).unwrap_or_default());
            } else {
                print!("{}", format_connections(&list));
            }
            Ok(())
        }
        other => Err(unexpected(other)),
    }
}

/// Formats seconds as `1d02h`, `3h04m`, `5m06s` or `7s`.
pub(crate) fn duration_short(s: u64) -> String {
    match s {
        0..=59 => format!("{s}s"),
        60..=3599 => format!("{}m{:02}s", s / 60, s % 60),
        3600..=86399 => format!("{}h{:02}m", s / 3600, s % 3600 / 60),
        _ => format!("{}d{:02}h", s / 86400, s % 86400 / 3600),
    }
}

fn mib(kib: u64) -> String {
    format!("{:.1} MiB", kib as f64 / 1024.0)
}

/// The `status` table.
pub fn format_status(s: &MasterStatus) -> String {
    let mut out = format!(
        "{}  master pid {}  uptime {}  workers {}  restarts {}  load {:.2} {:.2} {:.2}\n",
        s.name,
        s.master_pid,
        duration_short(s.uptime_s),
        s.workers.len(),
        s.restarts,
        s.load_average[0],
        s.load_average[1],
        s.load_average[2]
    );
    if s.recycles.total() > 0 {
        out.insert_str(
            out.len() - 1,
            &format!(
                "  recycled {} (requests {}, memory {})",
                s.recycles.total(),
                s.recycles.requests,
                s.recycles.memory
            ),
        );
    }
    if s.dropped_broadcasts > 0 {
        out.insert_str(
            out.len() - 1,
            &format!("  dropped broadcasts {}", s.dropped_broadcasts),
        );
    }
    if let Some(c) = &s.cluster {
        out += &format!(
            "cluster {}  {}  groups {}  published {}  received {}  publish failed {}  lost {}  reconnects {}\n",
            c.url,
            if c.connected { "connected" } else { "NOT CONNECTED" },
            c.groups,
            c.published,
            c.received,
            c.publish_failed,
            c.lost,
            c.reconnects
        );
    }
    let width = s
        .workers
        .iter()
        .map(|w| w.server.len())
        .max()
        .unwrap_or(6)
        .max(6);
    out += &format!(
        "{:<width$}  {:>6}  {:>8}  {:>10}  {:>11}  {:>11}  {:>6}  {:>8}  {:>7}  {:>8}\n",
        "server",
        "worker",
        "pid",
        "memory",
        "connections",
        "messages",
        "errors",
        "rejected",
        "timers",
        "uptime"
    );
    for w in &s.workers {
        out += &format!(
            "{:<width$}  {:>6}  {:>8}  {:>10}  {:>11}  {:>11}  {:>6}  {:>8}  {:>7}  {:>8}\n",
            w.server,
            w.worker,
            w.pid,
            mib(w.rss_kib),
            w.connections,
            w.total_request,
            w.throw_exception,
            w.rejected,
            w.timers,
            duration_short(w.uptime_s)
        );
    }
    let sum = |f: fn(&WorkerStatus) -> u64| s.workers.iter().map(f).sum::<u64>();
    out += &format!(
        "{:<width$}  {:>6}  {:>8}  {:>10}  {:>11}  {:>11}  {:>6}  {:>8}  {:>7}  {:>8}\n",
        "total",
        s.workers.len(),
        "",
        mib(sum(|w| w.rss_kib)),
        sum(|w| w.connections),
        sum(|w| w.total_request),
        sum(|w| w.throw_exception),
        sum(|w| w.rejected),
        sum(|w| w.timers),
        ""
    );
    out += &format_kpis(s, width);
    let (hits, misses) = (sum(|w| w.cache_hits), sum(|w| w.cache_misses));
    if hits + misses > 0 {
        out += &format!("query cache: {hits} hits, {misses} misses\n");
    }
    let r = &s.retired;
    if r.workers > 0 {
        out += &format!(
            "exited workers ({}): {} messages, {} errors, {} rejected\n",
            r.workers, r.total_request, r.throw_exception, r.rejected
        );
    }
    let jobs = |f: fn(&WorkerStatus) -> u64| sum(f);
    if jobs(|w| w.jobs.pushed + w.jobs.done + w.jobs.retried + w.jobs.dead + w.jobs.running) > 0 {
        out += &format!(
            "jobs: {} pushed, {} done, {} retried, {} dead, {} running\n",
            jobs(|w| w.jobs.pushed),
            jobs(|w| w.jobs.done),
            jobs(|w| w.jobs.retried),
            jobs(|w| w.jobs.dead),
            jobs(|w| w.jobs.running)
        );
    }
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    for sc in &s.schedules {
        let next = match sc.next_unix_s {
            Some(t) => format!("next in {}", duration_short(t.saturating_sub(now))),
            None => "no next run".into(),
        };
        out += &format!(
            "schedule {} ({}): {next}, {} runs, {} failed, {} skipped, {} running\n",
            sc.name, sc.spec, sc.runs, sc.failures, sc.skipped, sc.running
        );
    }
    for pid in &s.unresponsive {
        out += &format!("worker pid {pid} did not answer\n");
    }
    out
}

/// `status --json`: the status as the master sent it, with the percentiles the table prints
/// (milliseconds, `null` without samples: HTTP over the last 10 s, WebSocket handlers and
/// event-loop lag) under `percentiles`, in each worker's row and at the top for every worker
/// together, so that a script need not rebuild them from the buckets.
///
/// ```text
/// "percentiles": {"http": {"p50_ms": 0.21, "p95_ms": 0.9, "p99_ms": 2.3}, "ws": {…}, "loop_lag": {…}}
/// ```
pub fn status_json(s: &MasterStatus) -> serde_json::Value {
    let quantiles = |w: &LatencyWindow| {
        serde_json::json!({
            "p50_ms": w.quantile_ms(0.5),
            "p95_ms": w.quantile_ms(0.95),
            "p99_ms": w.quantile_ms(0.99),
        })
    };
    let percentiles = |rows: &[&WorkerStatus]| {
        let (mut http, mut ws, mut lag) = Default::default();
        for w in rows {
            LatencyWindow::merge(&mut http, &w.http_latency);
            LatencyWindow::merge(&mut ws, &w.ws_latency);
            LatencyWindow::merge(&mut lag, &w.loop_lag);
        }
        serde_json::json!({
            "http": quantiles(&http),
            "ws": quantiles(&ws),
            "loop_lag": quantiles(&lag),
        })
    };
    let mut v = serde_json::to_value(s).unwrap_or_default();
    if let Some(rows) = v.get_mut("workers").and_then(|w| w.as_array_mut()) {
        for (row, w) in rows.iter_mut().zip(&s.workers) {
            row["percentiles"] = percentiles(&[w]);
        }
    }
    let all: Vec<&WorkerStatus> = s.workers.iter().collect();
    v["percentiles"] = percentiles(&all);
    v
}

/// The KPI table of `status`: per worker and in total, HTTP requests/s over the last 10 s and
/// messages/s since start, HTTP latency percentiles over the last 10 s, the error rate since
/// start (handler errors per message, every protocol), peak memory (the total row adds up each
/// worker's peak), WebSocket handler p99 and event-loop lag p99.
fn format_kpis(s: &MasterStatus, width: usize) -> String {
    let ms = |w: &LatencyWindow, q: f64| match w.quantile_ms(q) {
        Some(v) => format!("{v:.2}"),
        None => "-".into(),
    };
    let line = |name: &str, worker: String, rows: &[&WorkerStatus]| {
        let mut http = LatencyWindow::default();
        let mut ws = LatencyWindow::default();
        let mut lag = LatencyWindow::default();
        for w in rows {
            http.merge(&w.http_latency);
            ws.merge(&w.ws_latency);
            lag.merge(&w.loop_lag);
        }
        let recent: f64 = rows.iter().map(|w| w.http_rate_recent()).sum();
        let since: f64 = rows.iter().map(|w| w.rate_since_start()).sum();
        let errors = WorkerStatus {
            total_request: rows.iter().map(|w| w.total_request).sum(),
            throw_exception: rows.iter().map(|w| w.throw_exception).sum(),
            ..WorkerStatus::default()
        }
        .error_rate();
        let peak: u64 = rows.iter().map(|w| w.rss_peak_kib).sum();
        format!(
            "{:<width$}  {:>6}  {:>9.1}  {:>9.1}  {:>7}  {:>7}  {:>7}  {:>7.3}  {:>10}  {:>7}  {:>8}\n",
            name,
            worker,
            recent,
            since,
            ms(&http, 0.5),
            ms(&http, 0.95),
            ms(&http, 0.99),
            100.0 * errors,
            mib(peak),
            ms(&ws, 0.99),
            ms(&lag, 0.99),
        )
    };
    let mut out = format!(
        "{:<width$}  {:>6}  {:>9}  {:>9}  {:>7}  {:>7}  {:>7}  {:>7}  {:>10}  {:>7}  {:>8}\n",
        "kpis (http over 10 s)",
        "worker",
        "req/s 10s",
        "msg/s all",
        "p50 ms",
        "p95 ms",
        "p99 ms",
        "err% all",
        "peak mem",
        "ws p99",
        "lag p99",
    );
    for w in &s.workers {
        out += &line(&w.server, w.worker.to_string(), &[w]);
    }
    let all: Vec<&WorkerStatus> = s.workers.iter().collect();
    out += &line("total", s.workers.len().to_string(), &all);
    out
}

/// The `connections` table.
pub fn format_connections(list: &[ConnectionInfo]) -> String {
    let mut out = format!(
        "{:<24}  {:>6}  {:>8}  {:>8}  {:<40}  {:>12}  {:>12}  {:>8}\n",
        "server", "worker", "pid", "id", "remote", "bytes in", "bytes out", "age"
    );
    for c in list {
        out += &format!(
            "{:<24}  {:>6}  {:>8}  {:>8}  {:<40}  {:>12}  {:>12}  {:>8}\n",
            c.server,
            c.worker,
            c.pid,
            c.id,
            c.remote,
            c.bytes_in,
            c.bytes_out,
            duration_short(c.age_s)
        );
    }
    out += &format!("{} connections\n", list.len());
    out
}
