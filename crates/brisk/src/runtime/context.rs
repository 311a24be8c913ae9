//! [`WorkerCtx`]: what every part of one worker shares — who it is, its counters, the registry
//! of its open connections, its stop signal, its timers, and the [`Parts`] the layers above
//! keep per worker (WebSocket's groups, replay and handover…) — and [`WorkerInfo`], what
//! callbacks are told. A worker's state is this one value: code reaches it through the
//! connection or context it was given, and Brisk's free functions (`ws::broadcast`,
//! `timer::add`) through [`running`], the worker this thread runs.
//!
//! The registry holds each connection as a [`ConnView`], the runtime's protocol-neutral view:
//! `status`, `connections`, sweeps and graceful stops go through it. A protocol that needs
//! more from its own connections (HTTP's request-head deadline) downcasts the view with
//! [`ConnView::as_any`] in its own sweep; nothing here names a protocol.

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::{mpsc, watch, Notify};

use super::conn_view::ConnView;
use super::handler::HandlerFuture;
use super::io_counters::WorkerIo;
use super::parts::Parts;
use super::timers::Timers;
use crate::ipc::{Broadcast, Stamp};

/// A broadcast for the other workers: its topic, stamp and message.
pub(crate) type Relayed = (String, Stamp, Broadcast);
use crate::limits::Limits;
use crate::stats::{self, ConnectionInfo, Stats, WorkerStatus};

/// Who a worker is: passed to `on_worker_start` and `on_worker_stop`.
#[derive(Debug, Clone)]
pub struct WorkerInfo {
    /// The address of the server it serves.
    pub server: String,
    /// Its index among that server's workers, from 0.
    pub id: usize,
    /// Its process id.
    pub pid: i32,
}

/// A callback run with the worker's [`WorkerInfo`].
pub(crate) type WorkerCallback = Rc<dyn Fn(WorkerInfo) -> HandlerFuture>;

/// The callbacks every kind of server has: when each worker starts and stops.
#[derive(Clone, Default)]
pub(crate) struct WorkerCallbacks {
    pub on_worker_start: Option<WorkerCallback>,
    pub on_worker_stop: Option<WorkerCallback>,
}

/// State every part of a worker shares.
pub(crate) struct WorkerCtx {
    pub info: WorkerInfo,
    pub stats: Stats,
    registry: RefCell<HashMap<u64, Rc<dyn ConnView>>>,
    next_id: Cell<u64>,
    started: Instant,
    stop_tx: watch::Sender<bool>,
    emptied: Notify,
    /// Accept loops still running (a stop waits for them to take what is queued).
    accepting: Cell<usize>,
    accepting_ended: Notify,
    /// Connections this worker holds at most before it stops accepting.
    max_connections: Cell<usize>,
    /// Fired when a connection closes (an accept loop at the limit waits for it).
    closed: Notify,
    /// When a graceful stop began.
    drain_started: Cell<Option<tokio::time::Instant>>,
    /// Byte counters and coarse clock of connections whose I/O must be `Send` (hyper's).
    pub io: Arc<WorkerIo>,
    /// The app's default limits (for connections upgraded from HTTP).
    limits: Limits,
    /// Broadcast frames for other workers, sent to the master by the worker loop.
    relay: mpsc::UnboundedSender<Relayed>,
    /// Bytes of broadcasts in `relay`, not yet written to the master.
    relay_queued: Cell<usize>,
    /// Messages for the master (jobs that ended, group membership), sent by the worker loop.
    to_master: mpsc::UnboundedSender<crate::ipc::ToMaster>,
    /// The app spans machines: the master wants to know which groups have members here.
    cluster: bool,
    /// When dropping broadcasts was last logged.
    relay_warned: Cell<Option<Instant>>,
    /// Requests after which this worker asks the master for a replacement (its server's
    /// `max_requests` and its share of the jitter); `None` once asked, or without a limit.
    recycle_after: Cell<Option<u64>>,
    /// The worker's timers (`brisk::timer`).
    pub timers: Rc<Timers>,
    /// What the layers above the runtime keep for this worker.
    parts: Parts,
    /// The task set the worker's tasks run in, once it runs (`local_tasks::spawn`).
    task_set: RefCell<Option<Rc<tokio::task::LocalSet>>>,
    /// Whether the sweep that enforces send timeouts runs (started by the first server).
    send_sweep: Cell<bool>,
}

thread_local! {
    /// The worker this thread runs: the one way in for Brisk's free functions, which are
    /// given no context (`ws::broadcast`, `timer::add`). Its state is the context's, not
    /// this thread's.
    static CURRENT: RefCell<Option<Rc<WorkerCtx>>> = const { RefCell::new(None) };
}

/// The worker running on this thread, if any.
pub(crate) fn current() -> Option<Rc<WorkerCtx>> {
    CURRENT.with(|c| c.borrow().clone())
}

/// The worker running on this thread, for `what` (a free function of Brisk's API); a panic
/// that names `what` and the mistake when it runs anywhere else.
#[track_caller]
pub(crate) fn running(what: &str) -> Rc<WorkerCtx> {
    current().unwrap_or_else(|| {
        panic!(
            "{what} was called outside a Brisk worker: call it from code a worker runs (a \
             handler, a callback, a task spawned there), not from a thread of your own or \
             before App::run"
        )
    })
}

/// Runs `f` on the counters of the worker running the caller (nothing outside a worker).
#[cfg_attr(not(feature = "redis"), allow(dead_code))]
pub(crate) fn with_stats(f: impl FnOnce(&Stats)) {
    if let Some(w) = current() {
        f(&w.stats);
    }
}

/// Whether the worker running the caller has begun to stop (false outside a worker).
#[cfg_attr(not(feature = "redis"), allow(dead_code))]
pub(crate) fn is_stopping() -> bool {
    current().is_some_and(|w| w.is_stopping())
}

/// Resolves when the worker running the caller begins to stop; at once outside a worker.
pub(crate) async fn stopping() {
    let Some(worker) = current() else {
        return;
    };
    let mut signal = worker.stop_signal();
    let _ = signal.wait_for(|stopping| *stopping).await;
}

impl WorkerStatus {
    /// A snapshot of the counters of the worker running the caller (`None` outside a worker):
    /// the same row `status` shows for it.
    ///
    /// ```no_run
    /// # async fn handler() {
    /// if let Some(me) = brisk::stats::WorkerStatus::current() {
    ///     println!("{} requests, {} open connections", me.total_request, me.connections);
    /// }
    /// # }
    /// ```
    pub fn current() -> Option<WorkerStatus> {
        current().map(|w| w.snapshot())
    }
}

/// Makes `worker` the one [`current`] returns on this thread (None when it stops).
pub(crate) fn set_current(worker: Option<Rc<WorkerCtx>>) {
    CURRENT.with(|c| *c.borrow_mut() = worker);
}

/// Bytes of broadcasts a worker keeps for the master before it drops them.
pub(crate) const RELAY_LIMIT: usize = 16 << 20;

/// How long a graceful stop waits for a connection's first (or unfinished) message.
const DRAIN_GRACE: Duration = Duration::from_secs(1);

impl WorkerCtx {
    pub(crate) fn new(
        info: WorkerInfo,
        limits: Limits,
        relay: mpsc::UnboundedSender<Relayed>,
        to_master: mpsc::UnboundedSender<crate::ipc::ToMaster>,
    ) -> Self {
        WorkerCtx {
            limits,
            relay,
            to_master,
            cluster: crate::cluster_setting::get().is_some(),
            relay_queued: Cell::new(0),
            send_sweep: Cell::new(false),
            relay_warned: Cell::new(None),
            recycle_after: Cell::new(None),
            info,
            stats: Stats::default(),
            registry: RefCell::new(HashMap::new()),
            next_id: Cell::new(0),
            started: Instant::now(),
            stop_tx: watch::channel(false).0,
            emptied: Notify::new(),
            accepting: Cell::new(0),
            accepting_ended: Notify::new(),
            max_connections: Cell::new(crate::listen::DEFAULT_MAX_CONNECTIONS),
            closed: Notify::new(),
            drain_started: Cell::new(None),
            io: Arc::new(WorkerIo::new()),
            timers: Rc::default(),
            parts: Parts::default(),
            task_set: RefCell::new(None),
        }
    }

    /// The task set this worker's tasks run in (the runtime's tasks spawn into it through
    /// `local_tasks::spawn`).
    pub(crate) fn set_task_set(&self, set: Rc<tokio::task::LocalSet>) {
        *self.task_set.borrow_mut() = Some(set);
    }

    /// The task set this worker's tasks run in, once it runs.
    pub(crate) fn task_set(&self) -> Option<Rc<tokio::task::LocalSet>> {
        self.task_set.borrow().clone()
    }

    /// This worker's `T`, one of the [`Parts`] the layers above keep (made on first use).
    pub(crate) fn part<T: Default + 'static>(&self) -> Rc<T> {
        self.parts.get()
    }

    /// Drops the [`Parts`] and lets go of the task set, as the worker ends: some parts hold
    /// what holds the context (an endpoint and its per-worker state), which would keep both
    /// alive.
    pub(crate) fn drop_parts(&self) {
        self.parts.clear();
        self.task_set.borrow_mut().take();
    }

    /// The app's default limits.
    pub(crate) fn default_limits(&self) -> Limits {
        self.limits
    }

    /// True the first time only: whoever is told so starts the worker's sweep of send
    /// timeouts (`sweep::enforce_send_timeouts`).
    pub(crate) fn claim_send_sweep(&self) -> bool {
        !self.send_sweep.replace(true)
    }

    /// Writes bytes in wire form to connection `id`; false if it is gone or cannot take them.
    pub(crate) fn send_raw_to(&self, id: u64, bytes: &[u8]) -> bool {
        let conn = self.registry.borrow().get(&id).cloned();
        conn.is_some_and(|c| c.send_raw(bytes))
    }

    /// Writes the last bytes of connection `id` (a close frame) and closes it after what is
    /// queued; false if it is gone or closing already.
    pub(crate) fn send_last_to(&self, id: u64, bytes: &[u8]) -> bool {
        let conn = self.registry.borrow().get(&id).cloned();
        conn.is_some_and(|c| c.send_last(bytes))
    }

    /// Hands a broadcast to `topic` to the master for the other workers. Past
    /// [`RELAY_LIMIT`] bytes waiting for the master (it is not reading), the broadcast is
    /// dropped for the other workers, counted and logged (at most every 10 s).
    pub(crate) fn relay_broadcast(&self, topic: &str, stamp: Stamp, broadcast: Broadcast) {
        let size = broadcast.len();
        if self.relay_queued.get() + size > RELAY_LIMIT {
            Stats::add(&self.stats.broadcasts_dropped, 1);
            let now = Instant::now();
            if self
                .relay_warned
                .get()
                .is_none_or(|t| now - t >= Duration::from_secs(10))
            {
                self.relay_warned.set(Some(now));
                tracing::warn!(
                    dropped = self.stats.broadcasts_dropped.get(),
                    "the master is not reading broadcasts: dropping them for the other workers"
                );
            }
            return;
        }
        self.relay_queued.set(self.relay_queued.get() + size);
        let _ = self.relay.send((topic.to_string(), stamp, broadcast));
    }

    /// Tells the master (when the app spans machines) that this worker now holds members of
    /// the group of `topic` (`joined`), or none any more.
    pub(crate) fn group_membership(&self, topic: &str, joined: bool) {
        if self.cluster {
            let group = topic.to_string();
            let msg = match joined {
                true => crate::ipc::ToMaster::GroupJoined(group),
                false => crate::ipc::ToMaster::GroupLeft(group),
            };
            let _ = self.to_master.send(msg);
        }
    }

    /// A relayed broadcast of `size` bytes was written to the master.
    pub(crate) fn relay_sent(&self, size: usize) {
        self.relay_queued
            .set(self.relay_queued.get().saturating_sub(size));
    }

    pub(crate) fn next_connection_id(&self) -> u64 {
        let id = self.next_id.get() + 1;
        self.next_id.set(id);
        id
    }

    /// The `connections` row of one connection of this worker.
    pub(crate) fn connection_info(
        &self,
        id: u64,
        remote: &dyn std::fmt::Display,
        (bytes_in, bytes_out): (u64, u64),
        opened: u32,
    ) -> ConnectionInfo {
        ConnectionInfo {
            server: self.info.server.clone(),
            worker: self.info.id,
            pid: self.info.pid,
            id,
            remote: remote.to_string(),
            bytes_in,
            bytes_out,
            age_s: self.uptime_secs().saturating_sub(opened) as u64,
        }
    }

    pub(crate) fn uptime_secs(&self) -> u32 {
        self.started.elapsed().as_secs() as u32
    }

    /// Changes to `true` when the worker begins to stop.
    pub(crate) fn stop_signal(&self) -> watch::Receiver<bool> {
        self.stop_tx.subscribe()
    }

    pub(crate) fn is_stopping(&self) -> bool {
        *self.stop_tx.borrow()
    }

    /// Whether the drain grace (see [`drain_grace_deadline`](Self::drain_grace_deadline))
    /// has passed: a draining connection with nothing pending closes then.
    pub(crate) fn drain_grace_over(&self) -> bool {
        tokio::time::Instant::now() >= self.drain_grace_deadline()
    }

    /// Until when a draining connection may wait for its first or unfinished message.
    pub(crate) fn drain_grace_deadline(&self) -> tokio::time::Instant {
        let started = self
            .drain_started
            .get()
            .unwrap_or_else(tokio::time::Instant::now);
        started + DRAIN_GRACE
    }

    pub(crate) fn register(&self, id: u64, conn: Rc<dyn ConnView>) {
        self.register_resumed(id, conn);
        Stats::add(&self.stats.accepted, 1);
    }

    /// Registers a connection handed over by another worker (not counted as accepted).
    pub(crate) fn register_resumed(&self, id: u64, conn: Rc<dyn ConnView>) {
        self.registry.borrow_mut().insert(id, conn);
        Stats::add(&self.stats.connections, 1);
    }

    /// Stops accepting: the accept loops end (taking what is queued first), and connections
    /// that still arrive (an HTTP upgrade under way) are drained.
    pub(crate) fn stop_accepting(&self) {
        let _ = self.stop_tx.send(true);
    }

    pub(crate) fn unregister(&self, id: u64) {
        let mut reg = self.registry.borrow_mut();
        if reg.remove(&id).is_some() {
            Stats::dec(&self.stats.connections);
        }
        self.closed.notify_waiters();
        if reg.is_empty() {
            self.emptied.notify_waiters();
        }
    }

    /// Connections matching `pred` (collected, so callers may close them while iterating).
    pub(crate) fn connections_where(
        &self,
        pred: impl Fn(&dyn ConnView) -> bool,
    ) -> Vec<Rc<dyn ConnView>> {
        self.registry
            .borrow()
            .values()
            .filter(|c| pred(&***c))
            .cloned()
            .collect()
    }

    /// This worker's row of `status`.
    pub(crate) fn snapshot(&self) -> WorkerStatus {
        let s = &self.stats;
        WorkerStatus {
            server: self.info.server.clone(),
            worker: self.info.id,
            pid: self.info.pid,
            rss_kib: stats::self_rss_kib(),
            connections: s.connections.get(),
            accepted: s.accepted.get(),
            total_request: s.total_request.get(),
            throw_exception: s.throw_exception.get() + self.timers.panics(),
            rejected: s.rejected.get(),
            buffer_full: s.buffer_full.get(),
            sends_dropped: s.sends_dropped.get(),
            send_timeouts: s.send_timeouts.get(),
            accept_paused: s.accept_paused.get(),
            log_lines_dropped: crate::log_file::dropped_lines(),
            cache_hits: s.cache_hits.get(),
            cache_misses: s.cache_misses.get(),
            timers: self.timers.count() as u64,
            bytes_in: s.bytes_in.get()
                + self.io.bytes_in.load(std::sync::atomic::Ordering::Relaxed),
            bytes_out: s.bytes_out.get()
                + self.io.bytes_out.load(std::sync::atomic::Ordering::Relaxed),
            uptime_s: self.started.elapsed().as_secs(),
            rss_peak_kib: stats::self_rss_peak_kib(),
            http_requests: s.http_latency.total(),
            http_latency: s.http_latency.window(self.uptime_secs_u64()),
            ws_messages: s.ws_latency.total(),
            ws_latency: s.ws_latency.window(self.uptime_secs_u64()),
            loop_lag: s.loop_lag.window(self.uptime_secs_u64()),
            http_responses: s.http_responses.snapshot(),
            http_duration: s.http_latency.totals(),
            ws_sent: s.ws_sent.get(),
            broadcast_deliveries: s.broadcast_deliveries.get(),
            broadcasts_dropped: s.broadcasts_dropped.get(),
            ws_handover: stats::HandoverCounts {
                handed_over: s.ws_handed_over.get(),
                resumed: s.ws_resumed.get(),
                skipped: s.ws_handover_skipped.get(),
            },
            jobs: stats::JobCounts {
                pushed: s.jobs_pushed.get(),
                done: s.jobs_done.get(),
                retried: s.jobs_retried.get(),
                dead: s.jobs_dead.get(),
                running: s.jobs_running.get(),
            },
            #[cfg(feature = "redis")]
            redis_refused: crate::redis_seal::refused(),
            #[cfg(not(feature = "redis"))]
            redis_refused: 0,
            app_metrics: crate::metrics::samples(),
            db: crate::db_figures::DbFigures::current(),
        }
    }

    /// Whole seconds since the worker started: the clock of its latency windows.
    pub(crate) fn uptime_secs_u64(&self) -> u64 {
        self.started.elapsed().as_secs()
    }

    /// Counts a duration that ended now in `histogram` (one of this worker's `stats`).
    #[inline]
    pub(crate) fn record_latency(&self, histogram: &crate::latency::Recent, began: Instant) {
        let now = Instant::now();
        let us = now.saturating_duration_since(began).as_micros() as u64;
        histogram.record(now.saturating_duration_since(self.started).as_secs(), us);
    }

    /// Samples how late the event loop gets to what is ready, for as long as the worker
    /// runs, into `loop_lag` (see [`loop_lag`](super::loop_lag): the longest turn of the loop,
    /// at most every 10 ms, with no wake-up of its own while the worker has nothing to do).
    /// It also looks whether the worker has served its `max_requests` (see
    /// [`recycle_after`](Self::recycle_after)): a busy worker at most every 10 ms.
    pub(crate) async fn watch_loop_lag(self: Rc<Self>) {
        super::loop_lag::watch(|due| {
            self.record_latency(&self.stats.loop_lag, due);
            self.check_recycle();
        })
        .await
    }

    /// Asks the master for a replacement once this worker has served `limit` requests (HTTP
    /// requests, stream and datagram messages, WebSocket messages); `None`: never.
    pub(crate) fn recycle_after(&self, limit: Option<u64>) {
        self.recycle_after.set(limit);
    }

    /// Tells the master, once, that this worker has served its `max_requests`.
    fn check_recycle(&self) {
        let Some(limit) = self.recycle_after.get() else {
            return;
        };
        let served = self.stats.total_request.get() + self.stats.ws_latency.total();
        if served >= limit {
            self.recycle_after.set(None);
            tracing::info!(
                served,
                limit,
                "served max_requests: asking for a replacement"
            );
            let _ = self.to_master.send(crate::ipc::ToMaster::Recycle(
                crate::recycle::RecycleCause::Requests,
            ));
        }
    }

    /// This worker's rows of `connections`.
    pub(crate) fn connection_list(&self) -> Vec<ConnectionInfo> {
        let mut list: Vec<_> = self.registry.borrow().values().map(|c| c.info()).collect();
        list.sort_by_key(|c| c.id);
        list
    }

    /// Sets how many connections this worker holds at most before it stops accepting.
    pub(crate) fn set_max_connections(&self, n: usize) {
        self.max_connections.set(n);
    }

    /// If the worker holds its max connections: counts a pause and waits until one closes.
    pub(crate) async fn wait_below_max_connections(&self) {
        let max = self.max_connections.get() as u64;
        if self.stats.connections.get() < max {
            return;
        }
        Stats::add(&self.stats.accept_paused, 1);
        tracing::warn!(
            max,
            "at the max connections: not accepting until one closes"
        );
        loop {
            let closed = self.closed.notified();
            if self.stats.connections.get() < max {
                return;
            }
            closed.await;
        }
    }

    /// Counts an accept loop as running until the returned guard drops.
    pub(crate) fn accepting(&self) -> AcceptingGuard<'_> {
        self.accepting.set(self.accepting.get() + 1);
        AcceptingGuard(self)
    }

    /// Waits (until `deadline`) for `done` to hold, re-checking each time `notify` fires.
    async fn wait_for(
        &self,
        notify: &Notify,
        deadline: tokio::time::Instant,
        done: impl Fn() -> bool,
    ) -> bool {
        loop {
            let fired = notify.notified();
            if done() {
                return true;
            }
            if tokio::time::timeout_at(deadline, fired).await.is_err() {
                return done();
            }
        }
    }

    /// Stops accepting (each listener first takes the connections already queued on it);
    /// then lets each connection finish what it has received and flush, for up to `drain`;
    /// then destroys whatever is left. A zero `drain` closes everything at once.
    pub(crate) async fn shut_down(self: &Rc<Self>, drain: Duration) {
        let _ = self.stop_tx.send(true);
        let now = tokio::time::Instant::now();
        self.drain_started.set(Some(now));
        if !drain.is_zero() {
            let deadline = now + drain;
            self.wait_for(&self.accepting_ended, deadline, || {
                self.accepting.get() == 0
            })
            .await;
            for c in self.connections_where(|_| true) {
                c.drain();
            }
            // When the grace ends, wake them all again: those still waiting for a request
            // that did not come close then.
            let me = self.clone();
            tokio::task::spawn_local(async move {
                tokio::time::sleep_until(me.drain_grace_deadline()).await;
                for c in me.connections_where(|_| true) {
                    c.drain();
                }
            });
            let emptied = || self.registry.borrow().is_empty();
            if !self.wait_for(&self.emptied, deadline, emptied).await {
                tracing::warn!(
                    open = self.registry.borrow().len(),
                    "graceful stop timed out; closing the rest"
                );
            }
        }
        for c in self.connections_where(|_| true) {
            c.stop_now();
        }
        tokio::task::yield_now().await;
    }
}

/// A worker of its own for a test, this thread's ([`current`]) until the test's thread ends;
/// the master it would talk to is nobody.
#[cfg(test)]
pub(crate) fn test_worker() -> Rc<WorkerCtx> {
    let info = WorkerInfo {
        server: "test".into(),
        id: 0,
        pid: std::process::id() as i32,
    };
    let (relay, _) = mpsc::unbounded_channel();
    let (to_master, _) = mpsc::unbounded_channel();
    let worker = Rc::new(WorkerCtx::new(info, Limits::default(), relay, to_master));
    set_current(Some(worker.clone()));
    worker
}

/// Marks an accept loop as running (see [`WorkerCtx::accepting`]).
pub(crate) struct AcceptingGuard<'a>(&'a WorkerCtx);

impl Drop for AcceptingGuard<'_> {
    fn drop(&mut self) {
        let w = self.0;
        w.accepting.set(w.accepting.get() - 1);
        if w.accepting.get() == 0 {
            w.accepting_ended.notify_waiters();
        }
    }
}
