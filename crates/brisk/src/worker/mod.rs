//! A worker process: one single-threaded tokio runtime with a `LocalSet`, serving one server's
//! listener, answering the master over its socketpair.

pub(crate) mod connection;
pub(crate) mod listener;
pub(crate) mod stream;
pub(crate) mod udp;

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::os::fd::FromRawFd;
use std::process::ExitCode;
use std::rc::Rc;
use std::time::{Duration, Instant};

use tokio::sync::{mpsc, watch, Notify};

use self::connection::ConnView;
use self::listener::Listener;
use crate::app::App;
use crate::ipc::{read_packet, write_broadcast, write_msg, Packet, ToMaster, ToWorker};
use crate::server::Limits;
use crate::stats::{self, ConnectionInfo, Stats, WorkerStatus};
use crate::ws::BroadcastFrames;

/// Environment variable naming the worker to run: `SERVICE:INDEX`.
pub(crate) const ENV_WORKER: &str = "BRISK_WORKER";
/// Environment variable with the descriptor of the worker's end of the control socketpair.
pub(crate) const ENV_IPC_FD: &str = "BRISK_IPC_FD";
/// Environment variable with the descriptor of the listener the master bound, if it did.
pub(crate) const ENV_LISTEN_FD: &str = "BRISK_LISTEN_FD";

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

/// State every part of a worker shares.
pub(crate) struct WorkerCtx {
    pub info: WorkerInfo,
    pub stats: Stats,
    registry: RefCell<HashMap<u64, Rc<dyn ConnView>>>,
    next_id: Cell<u64>,
    started: Instant,
    stop_tx: watch::Sender<bool>,
    emptied: Notify,
    /// When a graceful stop began.
    drain_started: Cell<Option<tokio::time::Instant>>,
    /// Byte counters of HTTP connections (atomic: hyper's I/O must be `Send`).
    pub io: std::sync::Arc<crate::http::WorkerIoCounters>,
    /// The app's default limits (for connections upgraded from HTTP).
    limits: Limits,
    /// Broadcast frames for other workers, sent to the master by the worker loop.
    relay: mpsc::UnboundedSender<(String, BroadcastFrames)>,
}

thread_local! {
    static CURRENT: RefCell<Option<Rc<WorkerCtx>>> = const { RefCell::new(None) };
}

/// The worker running on this thread, if any.
pub(crate) fn current() -> Option<Rc<WorkerCtx>> {
    CURRENT.with(|c| c.borrow().clone())
}

/// How long a graceful stop waits for a connection's first (or unfinished) message.
const DRAIN_GRACE: Duration = Duration::from_secs(1);

impl WorkerCtx {
    fn new(
        info: WorkerInfo,
        limits: Limits,
        relay: mpsc::UnboundedSender<(String, BroadcastFrames)>,
    ) -> Self {
        WorkerCtx {
            limits,
            relay,
            info,
            stats: Stats::default(),
            registry: RefCell::new(HashMap::new()),
            next_id: Cell::new(0),
            started: Instant::now(),
            stop_tx: watch::channel(false).0,
            emptied: Notify::new(),
            drain_started: Cell::new(None),
            io: std::sync::Arc::new(crate::http::WorkerIoCounters::new()),
        }
    }

    /// The app's default limits.
    pub(crate) fn default_limits(&self) -> Limits {
        self.limits
    }

    /// Writes bytes in wire form to connection `id`; false if it is gone or cannot take them.
    pub(crate) fn send_raw_to(&self, id: u64, bytes: &[u8]) -> bool {
        let conn = self.registry.borrow().get(&id).cloned();
        conn.is_some_and(|c| c.send_raw(bytes))
    }

    /// Hands a broadcast's frames to the master for the other workers.
    pub(crate) fn relay_broadcast(&self, group: &str, frames: BroadcastFrames) {
        let _ = self.relay.send((group.to_string(), frames));
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
    ) -> crate::stats::ConnectionInfo {
        crate::stats::ConnectionInfo {
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

    /// Until when a draining connection may wait for its first or unfinished message.
    pub(crate) fn drain_grace_deadline(&self) -> tokio::time::Instant {
        let started = self
            .drain_started
            .get()
            .unwrap_or_else(tokio::time::Instant::now);
        started + DRAIN_GRACE
    }

    pub(crate) fn register(&self, id: u64, conn: Rc<dyn ConnView>) {
        self.registry.borrow_mut().insert(id, conn);
        Stats::add(&self.stats.connections, 1);
        Stats::add(&self.stats.accepted, 1);
    }

    pub(crate) fn unregister(&self, id: u64) {
        let mut reg = self.registry.borrow_mut();
        if reg.remove(&id).is_some() {
            Stats::dec(&self.stats.connections);
        }
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

    fn snapshot(&self) -> WorkerStatus {
        let s = &self.stats;
        WorkerStatus {
            server: self.info.server.clone(),
            worker: self.info.id,
            pid: self.info.pid,
            rss_kib: stats::self_rss_kib(),
            connections: s.connections.get(),
            accepted: s.accepted.get(),
            total_request: s.total_request.get(),
            throw_exception: s.throw_exception.get() + crate::timer::panics(),
            rejected: s.rejected.get(),
            buffer_full: s.buffer_full.get(),
            timers: crate::timer::count() as u64,
            bytes_in: s.bytes_in.get()
                + self.io.bytes_in.load(std::sync::atomic::Ordering::Relaxed),
            bytes_out: s.bytes_out.get()
                + self.io.bytes_out.load(std::sync::atomic::Ordering::Relaxed),
            uptime_s: self.started.elapsed().as_secs(),
        }
    }

    fn connection_list(&self) -> Vec<ConnectionInfo> {
        let mut list: Vec<_> = self.registry.borrow().values().map(|c| c.info()).collect();
        list.sort_by_key(|c| c.id);
        list
    }

    /// Stops accepting; if `graceful`, lets each connection finish its handler and flush,
    /// waiting up to `timeout`; then destroys whatever is left.
    async fn shut_down(&self, graceful: bool, timeout: Duration) {
        let _ = self.stop_tx.send(true);
        self.drain_started.set(Some(tokio::time::Instant::now()));
        if graceful {
            for c in self.connections_where(|_| true) {
                c.drain();
            }
            let deadline = tokio::time::Instant::now() + timeout;
            while !self.registry.borrow().is_empty() {
                let waiting = self.emptied.notified();
                if self.registry.borrow().is_empty() {
                    break;
                }
                if tokio::time::timeout_at(deadline, waiting).await.is_err() {
                    tracing::warn!(
                        open = self.registry.borrow().len(),
                        "graceful stop timed out; closing the rest"
                    );
                    break;
                }
            }
        }
        for c in self.connections_where(|_| true) {
            c.destroy();
        }
        tokio::task::yield_now().await;
    }
}

fn env_fd(name: &str) -> Option<i32> {
    std::env::var(name).ok()?.parse().ok()
}

/// Ignores the signals the master handles: a terminal sends them to the whole process group,
/// and the master tells each worker what to do over the control channel.
fn ignore_master_signals() {
    for sig in [
        libc::SIGINT,
        libc::SIGQUIT,
        libc::SIGUSR1,
        libc::SIGUSR2,
        libc::SIGHUP,
    ] {
        // SAFETY: setting a signal to SIG_IGN is always sound.
        unsafe {
            libc::signal(sig, libc::SIG_IGN);
        }
    }
}

/// Raises the open-files limit as far as allowed (to the kernel's `fs.nr_open` when running
/// as root, else to the hard limit), so a worker can hold many connections; logs the limit
/// when it stays low.
fn raise_nofile_limit() {
    let wanted: libc::rlim_t = std::fs::read_to_string("/proc/sys/fs/nr_open")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(1 << 20);
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: plain syscalls on a local struct.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) != 0 {
            return;
        }
        let raised = libc::rlimit {
            rlim_cur: wanted,
            rlim_max: wanted,
        };
        if lim.rlim_max >= wanted as libc::rlim_t
            || libc::setrlimit(libc::RLIMIT_NOFILE, &raised) != 0
        {
            let why = std::io::Error::last_os_error();
            lim.rlim_cur = lim.rlim_max;
            libc::setrlimit(libc::RLIMIT_NOFILE, &lim);
            if lim.rlim_max < wanted.min(100_000) {
                tracing::warn!(
                    "open-files limit is {}: this worker can hold at most about that many \
                     connections (raising it failed: {why})",
                    lim.rlim_max
                );
            }
        }
    }
}

/// Runs worker `index` of service `service` of `app`; the master started this process.
pub(crate) fn run(app: App, service: usize, index: usize) -> ExitCode {
    ignore_master_signals();
    let Some(ipc_fd) = env_fd(ENV_IPC_FD) else {
        eprintln!("{ENV_WORKER} is set but {ENV_IPC_FD} is not: workers are started by the master");
        return ExitCode::FAILURE;
    };
    let graceful_timeout = app.graceful_timeout;
    let defaults = app.limits;
    let Some(svc) = app.services.into_iter().nth(service) else {
        eprintln!("worker for service {service}, but the app defines fewer services");
        return ExitCode::FAILURE;
    };
    let info = WorkerInfo {
        server: svc.listen.address.to_string(),
        id: index,
        pid: std::process::id() as i32,
    };
    let span = tracing::info_span!("worker", id = index, server = %info.server);
    let _entered = span.enter();
    raise_nofile_limit();
    // A few threads for blocking work (file reads): each thread costs a stack and allocator
    // caches, and many concurrent downloads should queue rather than spawn a thread each.
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .max_blocking_threads(4)
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            tracing::error!("cannot build the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let local = tokio::task::LocalSet::new();
    local.block_on(&rt, async move {
        // SAFETY: the master passed this descriptor to us and nothing else owns it.
        let std_ipc = unsafe { std::os::unix::net::UnixStream::from_raw_fd(ipc_fd) };
        let _ = std_ipc.set_nonblocking(true);
        let ipc = match tokio::net::UnixStream::from_std(std_ipc) {
            Ok(s) => s,
            Err(e) => {
                tracing::error!("cannot use the control channel: {e}");
                return ExitCode::FAILURE;
            }
        };
        let (mut rx, mut tx) = ipc.into_split();
        let listener = match env_fd(ENV_LISTEN_FD) {
            // SAFETY: the master bound this socket for us and passed it down.
            Some(fd) => Ok(unsafe { Listener::from_fd(svc.listen.address.scheme(), fd) }),
            None => Listener::bind(&svc.listen, true),
        };
        let (relay_tx, mut relay_rx) = mpsc::unbounded_channel();
        let worker = Rc::new(WorkerCtx::new(info.clone(), defaults, relay_tx));
        CURRENT.with(|c| *c.borrow_mut() = Some(worker.clone()));
        let limits = svc.limits.apply(defaults);
        let started = listener.and_then(|l| (svc.start)(worker.clone(), l, limits));
        if let Err(e) = started {
            let msg = format!("cannot listen on {}: {e}", info.server);
            let _ = write_msg(&mut tx, &ToMaster::Failed(msg)).await;
            return ExitCode::FAILURE;
        }
        if let Some(cb) = &svc.worker_callbacks.on_worker_start {
            if let Err(e) = cb(info.clone()).await {
                Stats::add(&worker.stats.throw_exception, 1);
                tracing::error!(error = %e, "on_worker_start failed");
            }
        }
        if write_msg(&mut tx, &ToMaster::Ready).await.is_err() {
            return ExitCode::FAILURE;
        }
        tracing::debug!(pid = info.pid, "worker ready");
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).ok();
        let graceful = loop {
            let msg = tokio::select! {
                m = read_packet::<_, ToWorker>(&mut rx) => m,
                Some((group, frames)) = relay_rx.recv() => {
                    let _ = write_broadcast(&mut tx, &group, &frames).await;
                    continue;
                }
                _ = async { match term.as_mut() { Some(t) => { t.recv().await; } None => std::future::pending().await } } => break false,
            };
            let msg = match msg {
                Ok(Some(Packet::Broadcast { group, frames })) => {
                    crate::ws::deliver_local(&group, &frames);
                    continue;
                }
                Ok(Some(Packet::Msg(m))) => Ok(Some(m)),
                Ok(None) => Ok(None),
                Err(e) => Err(e),
            };
            match msg {
                Ok(Some(ToWorker::Broadcast { group, frames })) => {
                    crate::ws::deliver_local(&group, &frames);
                }
                Ok(Some(ToWorker::Status)) => {
                    let _ = write_msg(&mut tx, &ToMaster::Status(worker.snapshot())).await;
                }
                Ok(Some(ToWorker::Connections)) => {
                    let _ = write_msg(&mut tx, &ToMaster::Connections(worker.connection_list())).await;
                }
                Ok(Some(ToWorker::Stop { graceful })) => break graceful,
                Ok(None) | Err(_) => {
                    tracing::warn!("lost the master; stopping");
                    break false;
                }
            }
        };
        tracing::debug!(graceful, "worker stopping");
        worker.shut_down(graceful, graceful_timeout).await;
        CURRENT.with(|c| c.borrow_mut().take());
        crate::timer::del_all();
        if let Some(cb) = &svc.worker_callbacks.on_worker_stop {
            if let Err(e) = cb(info.clone()).await {
                tracing::error!(error = %e, "on_worker_stop failed");
            }
        }
        ExitCode::SUCCESS
    })
}
