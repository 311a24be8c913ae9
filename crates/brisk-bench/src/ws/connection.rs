//! One load connection: open it on its ramp slot, then hold, echo or
//! receive broadcasts until the coordinator says stop.

use std::cell::RefCell;
use std::net::{IpAddr, SocketAddr};
use std::rc::Rc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::{SinkExt, StreamExt};
use tokio::net::TcpStream;
use tokio::sync::watch;
use tokio::time::{sleep_until, timeout};
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::WebSocketStream;

use crate::ws::payload::{self, Seen, SeenSet};
use crate::ws::protocol::WsProtocol;
use crate::ws::source::connect_from;
use crate::ws::stats::{WsFailureKind, WsStats};
use crate::ws::WsMode;

/// An open client WebSocket.
pub type Ws = WebSocketStream<TcpStream>;

/// How long closing a connection politely may take.
const CLOSE_TIMEOUT: Duration = Duration::from_secs(1);

/// The run phase announced by the coordinator.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Phase {
    /// Connections are being opened.
    Ramp,
    /// The message phase runs.
    Go,
    /// Everything stops.
    Stop,
}

/// State shared by every connection of a run and its coordinator.
pub struct RunContext {
    /// URLs of the load connections and their resolved addresses: connection `i` opens
    /// `targets[i % targets.len()]`.
    pub targets: Vec<(String, SocketAddr)>,
    /// What the connections speak.
    pub protocol: WsProtocol,
    /// Source addresses, used round-robin by connection index.
    pub sources: Vec<IpAddr>,
    /// Connect plus handshake timeout.
    pub timeout: Duration,
    /// Common clock origin for payload timestamps and the ramp schedule.
    pub start: Instant,
    /// Time between two connection attempts, if ramped.
    pub ramp_interval: Option<Duration>,
    /// What connections do.
    pub mode: WsMode,
    /// Payload size.
    pub size: usize,
    /// Echo: time between two sends of one connection.
    pub echo_interval: Duration,
    /// Echo: how long to wait for outstanding echoes after stop.
    pub drain: Duration,
    /// Number of load connections.
    pub connections: usize,
    /// Phase announcements.
    pub phase: watch::Receiver<Phase>,
    /// Attempts finished (successfully or not).
    pub attempts_done: AtomicU64,
    /// When the last attempt finished, ns since `start`.
    pub last_attempt_ns: AtomicU64,
    /// Connections currently open.
    pub open: AtomicU64,
    /// Distinct messages delivered so far, all connections.
    pub delivered: AtomicU64,
    /// When the last distinct message was delivered, ns since `start`.
    pub last_delivery_ns: AtomicU64,
}

impl RunContext {
    /// Nanoseconds since the common clock origin.
    #[inline]
    pub fn now_ns(&self) -> u64 {
        self.start.elapsed().as_nanos() as u64
    }

    /// `at` as nanoseconds since the common clock origin.
    #[inline]
    pub fn ns_of(&self, at: Instant) -> u64 {
        at.saturating_duration_since(self.start).as_nanos() as u64
    }
}

/// Opens a WebSocket to `url` at `addr`, optionally from `source`, and joins as `protocol`
/// asks.
pub async fn open(
    url: &str,
    addr: SocketAddr,
    source: Option<IpAddr>,
    limit: Duration,
    protocol: WsProtocol,
) -> Result<Ws, WsFailureKind> {
    let attempt = async {
        let stream = connect_from(addr, source)
            .await
            .map_err(|_| WsFailureKind::Connect)?;
        let (mut ws, _response) = tokio_tungstenite::client_async(url, stream)
            .await
            .map_err(|_| WsFailureKind::Handshake)?;
        protocol.join(&mut ws).await?;
        Ok(ws)
    };
    timeout(limit, attempt)
        .await
        .map_err(|_| WsFailureKind::Timeout)?
}

/// Records a received binary message; returns true when it was new.
fn record_message(
    ctx: &RunContext,
    stats: &RefCell<WsStats>,
    seen: &mut SeenSet,
    data: &[u8],
) -> bool {
    let Some((seq, sent_ns)) = payload::decode(data) else {
        return false;
    };
    let now = ctx.now_ns();
    let mut st = stats.borrow_mut();
    let seen = seen.insert(seq);
    if seen == Seen::Late {
        st.reordered += 1;
    }
    match seen {
        Seen::New | Seen::Late => {
            st.delivered += 1;
            st.latency.record(now.saturating_sub(sent_ns) / 1_000);
            ctx.delivered.fetch_add(1, Ordering::Relaxed);
            ctx.last_delivery_ns.fetch_max(now, Ordering::Relaxed);
            true
        }
        Seen::Duplicate => {
            st.duplicates += 1;
            false
        }
        Seen::Invalid => false,
    }
}

/// The whole life of load connection `index`.
pub async fn connection_task(ctx: Arc<RunContext>, index: usize, stats: Rc<RefCell<WsStats>>) {
    if let Some(interval) = ctx.ramp_interval {
        sleep_until((ctx.start + interval.mul_f64(index as f64)).into()).await;
    }
    stats.borrow_mut().attempted += 1;
    let source = (!ctx.sources.is_empty()).then(|| ctx.sources[index % ctx.sources.len()]);
    let (url, addr) = &ctx.targets[index % ctx.targets.len()];
    let opened = open(url, *addr, source, ctx.timeout, ctx.protocol).await;
    ctx.last_attempt_ns
        .fetch_max(ctx.now_ns(), Ordering::Relaxed);
    let mut ws = match opened {
        Ok(ws) => {
            stats.borrow_mut().succeeded += 1;
            ctx.open.fetch_add(1, Ordering::Relaxed);
            ctx.attempts_done.fetch_add(1, Ordering::Release);
            ws
        }
        Err(kind) => {
            stats.borrow_mut().failures.add(kind);
            ctx.attempts_done.fetch_add(1, Ordering::Release);
            return;
        }
    };

    let mut phase_rx = ctx.phase.clone();
    let mut phase = *phase_rx.borrow_and_update();
    let mut seen = SeenSet::default();
    let mut next_send: Option<Instant> = None;
    let mut seq = 0u64;
    let mut received = 0u64;
    let mut drain_until: Option<Instant> = None;
    let mut last_send_done = Instant::now();
    let echo = ctx.mode == WsMode::Echo;
    let interval = ctx.echo_interval;
    let dropped = loop {
        if phase == Phase::Stop
            && (!echo || received >= seq || drain_until.is_some_and(|d| Instant::now() >= d))
        {
            break false;
        }
        let wake = if phase == Phase::Go && echo {
            next_send
        } else {
            drain_until
        };
        tokio::select! {
            changed = phase_rx.changed(), if phase != Phase::Stop => {
                phase = if changed.is_ok() { *phase_rx.borrow_and_update() } else { Phase::Stop };
                match phase {
                    Phase::Go if echo => {
                        let offset = interval.mul_f64(index as f64 / ctx.connections as f64);
                        next_send = Some(Instant::now() + offset);
                    }
                    Phase::Stop => {
                        stats.borrow_mut().open_at_end += 1;
                        drain_until = Some(Instant::now() + ctx.drain);
                    }
                    _ => {}
                }
            }
            msg = ws.next() => match msg {
                Some(Ok(Message::Close(_))) | Some(Err(_)) | None => break phase != Phase::Stop,
                Some(Ok(msg)) => {
                    let incoming = ctx.protocol.unwrap(&msg);
                    for data in incoming.payloads {
                        if record_message(&ctx, &stats, &mut seen, &data) {
                            received += 1;
                        }
                    }
                    if let Some(reply) = incoming.answer {
                        if ws.send(reply).await.is_err() {
                            break true;
                        }
                    }
                }
            },
            () = sleep_until(wake.unwrap_or_else(Instant::now).into()), if wake.is_some() => {
                if phase == Phase::Go {
                    let at = next_send.unwrap_or_else(Instant::now);
                    next_send = Some(at + interval);
                    // Stamp the intended time only when the previous send held
                    // us past it (coordinated omission); otherwise the real
                    // time, so timer wake-up lag is not charged to the server.
                    let stamp = if last_send_done > at { at } else { Instant::now() };
                    let data = payload::encode(seq, ctx.ns_of(stamp), ctx.size);
                    if ws.send(ctx.protocol.wrap(&data)).await.is_err() {
                        break true;
                    }
                    last_send_done = Instant::now();
                    seq += 1;
                    stats.borrow_mut().sent += 1;
                } else {
                    // Drain time is over.
                    break false;
                }
            }
        }
    };
    if dropped {
        stats.borrow_mut().failures.add(WsFailureKind::Closed);
    } else {
        let _ = timeout(CLOSE_TIMEOUT, ws.close(None)).await;
    }
    ctx.open.fetch_sub(1, Ordering::Relaxed);
}
