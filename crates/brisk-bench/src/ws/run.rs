//! The WebSocket run coordinator: starts the connection shards, announces
//! the phases, publishes broadcasts and builds the report.

use std::cell::RefCell;
use std::rc::Rc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::{SinkExt, StreamExt};
use tokio::sync::watch;
use tokio::time::{sleep, sleep_until};
use tokio_tungstenite::tungstenite::Message;

use crate::error::BenchError;
use crate::report::{WsMessageReport, WsReport};
use crate::runtime::spawn_sharded;
use crate::ws::connection::{connection_task, open, Phase, RunContext};
use crate::ws::payload;
use crate::ws::stats::WsStats;
use crate::ws::{WsConfig, WsMode};

/// How often the coordinator checks shared progress counters.
const POLL: Duration = Duration::from_millis(2);

/// What the coordinator observed.
struct Outcome {
    go: Instant,
    stop: Instant,
    sent_by_sender: u64,
    receivers_at_go: u64,
    sender_connected: bool,
}

/// Runs the WebSocket load described by `config` and returns its report.
///
/// Blocks the calling thread; call it from `spawn_blocking` in async code.
pub fn run_ws(config: &WsConfig) -> Result<WsReport, BenchError> {
    if config.connections == 0 {
        return Err(BenchError::InvalidArgument(
            "the connection count must be at least 1".into(),
        ));
    }
    if config.mode != WsMode::Hold && !(config.rate.is_finite() && config.rate > 0.0) {
        return Err(BenchError::InvalidArgument(
            "the message rate must be a positive number".into(),
        ));
    }
    if let Some(r) = config.ramp {
        if !(r.is_finite() && r > 0.0) {
            return Err(BenchError::InvalidArgument(
                "the ramp must be a positive number of connections per second".into(),
            ));
        }
    }
    let mut targets = vec![(config.target.url(), config.target.resolve()?)];
    for t in &config.spread {
        targets.push((t.url(), t.resolve()?));
    }
    let sender_target = config
        .sender
        .clone()
        .unwrap_or_else(|| config.target.clone());
    let sender_addr = sender_target.resolve()?;
    let coordinator = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(BenchError::Runtime)?;

    let (phase_tx, phase_rx) = watch::channel(Phase::Ramp);
    let start = Instant::now();
    let ctx = Arc::new(RunContext {
        targets,
        protocol: config.protocol,
        sources: config.source_ips.clone(),
        timeout: config.timeout,
        start,
        ramp_interval: config.ramp.map(|r| Duration::from_secs_f64(1.0 / r)),
        mode: config.mode,
        size: config.size.max(payload::MIN_SIZE),
        echo_interval: Duration::from_secs_f64(config.connections as f64 / config.rate.max(1e-9)),
        drain: config.drain,
        connections: config.connections,
        phase: phase_rx,
        attempts_done: AtomicU64::new(0),
        last_attempt_ns: AtomicU64::new(0),
        open: AtomicU64::new(0),
        delivered: AtomicU64::new(0),
        last_delivery_ns: AtomicU64::new(0),
    });
    let threads = config.threads.clamp(1, config.connections);
    let connections = config.connections;
    let shard_ctx = Arc::clone(&ctx);
    let shards = spawn_sharded(threads, move |shard| {
        let ctx = Arc::clone(&shard_ctx);
        async move {
            let stats = Rc::new(RefCell::new(WsStats::default()));
            let tasks: Vec<_> = (shard..connections)
                .step_by(threads)
                .map(|index| {
                    tokio::task::spawn_local(connection_task(
                        Arc::clone(&ctx),
                        index,
                        Rc::clone(&stats),
                    ))
                })
                .collect();
            for task in tasks {
                let _ = task.await;
            }
            let stats = stats.borrow().clone();
            stats
        }
    })?;

    let outcome = coordinator.block_on(coordinate(
        config,
        &ctx,
        &phase_tx,
        &sender_target.url(),
        sender_addr,
    ));
    let per_shard = shards.join()?;
    let elapsed = start.elapsed();

    let mut stats = WsStats::default();
    for s in &per_shard {
        stats.merge(s);
    }
    stats.ramp = Duration::from_nanos(ctx.last_attempt_ns.load(Ordering::Relaxed));
    let messages = match config.mode {
        WsMode::Hold => None,
        WsMode::Echo => {
            let phase_s = outcome.stop.duration_since(outcome.go).as_secs_f64();
            Some(WsMessageReport {
                sent: stats.sent,
                expected: stats.sent,
                delivered: stats.delivered,
                duplicates: stats.duplicates,
                reordered: stats.reordered,
                delivered_per_sec: stats.delivered as f64 / phase_s.max(f64::MIN_POSITIVE),
                phase_s,
                sender_connected: None,
            })
        }
        WsMode::Broadcast => {
            let go_ns = ctx.ns_of(outcome.go);
            let last = ctx.last_delivery_ns.load(Ordering::Relaxed).max(go_ns);
            let phase_s = Duration::from_nanos(last - go_ns).as_secs_f64();
            Some(WsMessageReport {
                sent: outcome.sent_by_sender,
                expected: outcome.sent_by_sender * outcome.receivers_at_go,
                delivered: stats.delivered,
                duplicates: stats.duplicates,
                reordered: stats.reordered,
                delivered_per_sec: stats.delivered as f64 / phase_s.max(f64::MIN_POSITIVE),
                phase_s,
                sender_connected: Some(outcome.sender_connected),
            })
        }
    };
    Ok(WsReport::new(
        config.target.url(),
        config.mode.name(),
        elapsed,
        &stats,
        messages,
    ))
}

/// Waits for the ramp, runs the message phase, then announces the stop.
async fn coordinate(
    config: &WsConfig,
    ctx: &RunContext,
    phase: &watch::Sender<Phase>,
    sender_url: &str,
    sender_addr: std::net::SocketAddr,
) -> Outcome {
    let total = config.connections as u64;
    while ctx.attempts_done.load(Ordering::Acquire) < total {
        sleep(POLL).await;
    }
    // Idle connections for a while, so that an outside observer (told by the ready file)
    // can sample the servers between the ramp and the messages.
    if let Some(path) = &config.ready_file {
        let _ = std::fs::write(path, ctx.open.load(Ordering::Relaxed).to_string());
    }
    sleep(config.settle).await;
    let mut sender = None;
    if config.mode == WsMode::Broadcast {
        let source = ctx.sources.first().copied();
        sender = open(
            sender_url,
            sender_addr,
            source,
            config.timeout,
            config.protocol,
        )
        .await
        .ok();
    }
    let sender_connected = sender.is_some();
    let receivers_at_go = ctx.open.load(Ordering::Relaxed);
    let go = Instant::now();
    let _ = phase.send(Phase::Go);
    let mut sent_by_sender = 0;
    match sender {
        Some(ws) => {
            let mut sender;
            (sent_by_sender, sender) = publish(config, ctx, ws, go).await;
            let expected = sent_by_sender * receivers_at_go;
            let give_up = Instant::now() + config.drain;
            while ctx.delivered.load(Ordering::Relaxed) < expected && Instant::now() < give_up {
                sleep(POLL).await;
                sender.answer().await;
            }
            // Only now: a socket closed with unread data (the server's replies, our own
            // messages relayed back) is reset, and a reset discards what the server has not
            // read yet, i.e. the last messages sent.
            sender.close().await;
        }
        None => sleep_until((go + config.hold).into()).await,
    }
    let stop = Instant::now();
    // Before the connections close, for an outside observer sampling the servers.
    if let Some(path) = &config.done_file {
        let _ = std::fs::write(path, ctx.delivered.load(Ordering::Relaxed).to_string());
    }
    let _ = phase.send(Phase::Stop);
    Outcome {
        go,
        stop,
        sent_by_sender,
        receivers_at_go,
        sender_connected,
    }
}

/// The broadcast sender's connection once it has sent, still reading (and discarding) what
/// the server sends it.
struct OpenSender {
    sink: futures_util::stream::SplitSink<crate::ws::connection::Ws, Message>,
    drainer: tokio::task::JoinHandle<()>,
    /// What the protocol must answer (pings), read by the drainer.
    to_answer: tokio::sync::mpsc::UnboundedReceiver<Message>,
}

impl OpenSender {
    /// Answers what came since the last call (a server that pings must hear back).
    async fn answer(&mut self) {
        while let Ok(answer) = self.to_answer.try_recv() {
            let _ = self.sink.send(answer).await;
        }
    }

    async fn close(mut self) {
        let _ = self.sink.close().await;
        self.drainer.abort();
    }
}

/// Broadcast sender: publishes at the configured rate, either the configured
/// number of messages or until the hold time ends; returns how many it sent, and the
/// connection, to be closed once the messages have arrived.
async fn publish(
    config: &WsConfig,
    ctx: &RunContext,
    ws: crate::ws::connection::Ws,
    go: Instant,
) -> (u64, OpenSender) {
    let (mut sink, mut stream) = ws.split();
    // The server may relay our own messages back: read and discard them, but hand what the
    // protocol must answer (pings) to the sending loop.
    let protocol = config.protocol;
    let (answers, mut to_answer) = tokio::sync::mpsc::unbounded_channel();
    let drainer = tokio::spawn(async move {
        while let Some(Ok(msg)) = stream.next().await {
            if let Some(answer) = protocol.unwrap(&msg).answer {
                let _ = answers.send(answer);
            }
        }
    });
    let interval = Duration::from_secs_f64(1.0 / config.rate);
    let end = go + config.hold;
    let size = config.size.max(payload::MIN_SIZE);
    let mut sent = 0u64;
    loop {
        if config.messages.is_some_and(|m| sent >= m) {
            break;
        }
        let at = go + interval.mul_f64(sent as f64);
        if config.messages.is_none() && at >= end {
            break;
        }
        // Intended time when behind schedule (coordinated omission), the
        // real send time otherwise (timer wake-up lag is ours, not the server's).
        let stamp = if Instant::now() >= at {
            at
        } else {
            sleep_until(at.into()).await;
            Instant::now()
        };
        let mut answered = true;
        while let Ok(answer) = to_answer.try_recv() {
            answered &= sink.send(answer).await.is_ok();
        }
        let data = payload::encode(sent, ctx.ns_of(stamp), size);
        if !answered || sink.send(config.protocol.wrap(&data)).await.is_err() {
            break;
        }
        sent += 1;
    }
    (
        sent,
        OpenSender {
            sink,
            drainer,
            to_answer,
        },
    )
}
