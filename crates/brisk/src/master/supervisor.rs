//! Starting, watching, replacing and stopping workers.
//!
//! Signals and control requests become [`Event`]s handled one at a time by the master loop;
//! each worker has a task that waits for it to exit and one that reads its messages. A worker
//! that exits unexpectedly is restarted at once the first time and with a growing delay if it
//! keeps dying young.

mod recycling;

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::process::{CommandExt as _, ExitStatusExt};
use std::process::{ExitStatus, Stdio};
use std::rc::Rc;
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use tokio::signal::unix::{signal, SignalKind};
use tokio::sync::{mpsc, oneshot, Notify};

use super::alerting::Alerting;
use super::control::{self, Controlled};
use super::kpi_history::KpiHistory;
use super::metrics::{self, Scrape};
use super::metrics_listener::{self, Observed};
use super::scheduler::Scheduler;
use super::status_page::{self, StatusView};
use super::Plan;
use crate::env::{ENV_DAEMON, ENV_IPC_FD, ENV_LISTEN_FD, ENV_WORKER};
use crate::error::{Error, Result};
use crate::ipc::codec::{read_packet, write_broadcast, write_msg};
use crate::ipc::{
    self, Answer, BroadcastFrames, MasterStatus, Packet, Question, ToMaster, ToWorker,
};
use crate::runtime::listener::Listener;
use crate::stats::{ConnectionInfo, WorkerStatus};

/// How long a new worker may take to open its listener and run `on_worker_start`.
const READY_TIMEOUT: Duration = Duration::from_secs(15);
/// A worker that dies younger than this counts as failing to start.
const YOUNG: Duration = Duration::from_secs(1);
/// Longest delay between restarts of a worker that keeps failing.
const MAX_BACKOFF: Duration = Duration::from_secs(10);
/// The longest a plain (not graceful) reload lets an old worker answer what it has received.
const RELOAD_DRAIN: Duration = Duration::from_secs(5);
/// How much longer than its drain time a stopping worker gets before it is killed.
const STOP_MARGIN: Duration = Duration::from_secs(3);
/// How long a graceful stop lets the handshakes under way when its listeners stop taking
/// SYNs complete (a client's round trip) before the workers stop accepting.
const HANDSHAKE_GRACE: Duration = Duration::from_millis(250);
/// How often the master looks at its workers' counters.
const COUNTERS_PERIOD: Duration = Duration::from_secs(1);
/// Bytes of broadcasts the master queues for one worker; past it (the worker is stalled),
/// further broadcasts to that worker are dropped, counted and logged.
const MAX_QUEUED_BROADCASTS: usize = 16 << 20;

/// What the master loop acts on.
enum Event {
    Stop {
        graceful: bool,
    },
    Reload {
        graceful: bool,
        done: Option<oneshot::Sender<std::result::Result<String, String>>>,
    },
}

/// What the master writes to a worker: a message, or a broadcast's frames (a binary packet).
enum Outgoing {
    Msg(ToWorker),
    Frames {
        group: String,
        frames: BroadcastFrames,
    },
}

/// The master's end of one worker's control channel.
struct Channel {
    tx: mpsc::UnboundedSender<Outgoing>,
    /// Bytes of broadcast frames queued for the worker and not yet written to it.
    queued: Rc<Cell<usize>>,
    /// Who waits for the answer to each question asked, by the question's id.
    replies: RefCell<HashMap<u64, oneshot::Sender<Answer>>>,
    /// The id of the next question.
    next_question: Cell<u64>,
    ready: RefCell<Option<oneshot::Sender<std::result::Result<(), String>>>>,
    /// The worker's end closed (it exited): nothing it is asked now will be answered.
    closed: Cell<bool>,
}

/// One worker process.
struct Worker {
    pub pid: i32,
    slot: usize,
    started: Instant,
    channel: Rc<Channel>,
    ready: RefCell<Option<oneshot::Receiver<std::result::Result<(), String>>>>,
    /// Being replaced or stopped: its exit is expected.
    retiring: Cell<bool>,
    /// Whether it is to be replaced by recycling, and how that goes.
    recycle: recycling::RecycleState,
}

impl Worker {
    /// Asks a question and waits for its answer (`None`: none within `timeout`, or the
    /// worker is gone). Answers are matched by id: a late one is dropped, never taken for
    /// the answer to another question.
    async fn ask(&self, question: Question, timeout: Duration) -> Option<Answer> {
        let channel = &self.channel;
        if channel.closed.get() {
            return None;
        }
        let id = channel.next_question.get();
        channel.next_question.set(id + 1);
        let (tx, rx) = oneshot::channel();
        channel.replies.borrow_mut().insert(id, tx);
        if channel
            .tx
            .send(Outgoing::Msg(ToWorker::Ask { id, question }))
            .is_err()
        {
            channel.replies.borrow_mut().remove(&id);
            return None;
        }
        let answer = tokio::time::timeout(timeout, rx).await;
        channel.replies.borrow_mut().remove(&id);
        answer.ok()?.ok()
    }

    fn tell(&self, msg: ToWorker) {
        let _ = self.channel.tx.send(Outgoing::Msg(msg));
    }

    /// Waits until the worker reports ready, fails, or exits.
    async fn wait_ready(&self) -> std::result::Result<(), String> {
        let Some(rx) = self.ready.borrow_mut().take() else {
            return Ok(());
        };
        match tokio::time::timeout(READY_TIMEOUT, rx).await {
            Ok(Ok(r)) => r,
            Ok(Err(_)) => Err(format!(
                "worker pid {} exited before it was ready",
                self.pid
            )),
            Err(_) => Err(format!(
                "worker pid {} was not ready after {} s",
                self.pid,
                READY_TIMEOUT.as_secs()
            )),
        }
    }

    fn kill(&self) {
        let _ = kill(Pid::from_raw(self.pid), Signal::SIGKILL);
    }
}

/// How old a scrape's look at the workers may be (see `Supervisor::refresh_looks`).
const SCRAPE_FRESHNESS: Duration = Duration::from_secs(1);

struct Supervisor {
    plan: Plan,
    slots: Vec<(usize, usize)>,
    current: RefCell<Vec<Option<Rc<Worker>>>>,
    live: RefCell<HashMap<i32, Rc<Worker>>>,
    failures: RefCell<Vec<u32>>,
    stopping: Cell<bool>,
    reloading: Cell<bool>,
    restarts: Cell<u64>,
    /// Workers replaced by recycling, by cause.
    recycles: RefCell<crate::recycle::RecycleCounts>,
    /// Held while workers are replaced (a reload, a recycle): one replacement at a time.
    replacing: tokio::sync::Mutex<()>,
    /// The counters of workers that have exited.
    retired: RefCell<crate::stats::RetiredTotals>,
    /// The latest counters of each worker whose channel is open, by pid. When the channel
    /// closes they move into `retired` in the same step, so the sum of the two never goes
    /// backwards.
    looks: RefCell<HashMap<i32, WorkerStatus>>,
    /// When `looks` were last refreshed for a scrape, and the refresh under way: scrapes
    /// within a second of one another share one round of questions to the workers.
    looked_at: Cell<Option<Instant>>,
    looking: tokio::sync::Mutex<()>,
    /// The KPIs of the last minutes, a sample a second.
    history: RefCell<KpiHistory>,
    /// The alert rules, if the app has any.
    alerting: RefCell<Option<Alerting>>,
    /// The app's schedules and the slot of the worker that runs them (worker 0 of the last
    /// service, the `schedules` process).
    scheduler: Option<(Rc<Scheduler>, usize)>,
    /// Broadcasts not relayed to a stalled worker.
    dropped_broadcasts: Cell<u64>,
    /// The cluster bus, if the app spans machines.
    cluster: Option<Rc<super::cluster_bus::ClusterBus>>,
    started: Instant,
    exited: Notify,
    events: mpsc::UnboundedSender<Event>,
}

/// Starts the workers and supervises them until a stop; the master's whole life.
pub(crate) fn run(mut plan: Plan) -> Result<()> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| Error::io("cannot build the master runtime", e))?;
    let local = tokio::task::LocalSet::new();
    let span = tracing::info_span!("master");
    let _entered = span.enter();
    local.block_on(&rt, async move {
        let (events, mut rx) = mpsc::unbounded_channel();
        let metrics_socket = plan.metrics.take();
        let alerting = plan.alerting.take();
        let schedules = std::mem::take(&mut plan.schedules);
        let cluster = plan.cluster.take();
        let slots = plan.slots();
        let n = slots.len();
        let scheduler = (!schedules.is_empty()).then(|| {
            let last = plan.services.len() - 1;
            let slot = slots
                .iter()
                .position(|s| *s == (last, 0))
                .expect("the schedules process has a worker 0");
            (Rc::new(Scheduler::new(schedules)), slot)
        });
        let sup = Rc::new(Supervisor {
            plan,
            slots,
            current: RefCell::new(vec![None; n]),
            live: RefCell::new(HashMap::new()),
            failures: RefCell::new(vec![0; n]),
            stopping: Cell::new(false),
            reloading: Cell::new(false),
            restarts: Cell::new(0),
            recycles: RefCell::default(),
            replacing: tokio::sync::Mutex::new(()),
            retired: RefCell::default(),
            looks: RefCell::default(),
            looked_at: Cell::new(None),
            looking: tokio::sync::Mutex::new(()),
            history: RefCell::default(),
            alerting: RefCell::new(alerting),
            scheduler,
            dropped_broadcasts: Cell::new(0),
            cluster,
            started: Instant::now(),
            exited: Notify::new(),
            events,
        });
        if let Some(bus) = &sup.cluster {
            // Broadcasts from other instances go to the workers of this one that hold members
            // of the group.
            let weak = Rc::downgrade(&sup);
            bus.start(move |group, frames| {
                if let Some(sup) = weak.upgrade() {
                    if let Some(bus) = &sup.cluster {
                        let holders = bus.holders(group);
                        sup.relay_to(group, frames, |pid| holders.contains(&pid));
                    }
                }
            });
        }
        sup.install_signal_handlers()?;
        if let Err(msg) = sup.start_all().await {
            sup.stop_all(false).await;
            return Err(Error::Config(msg));
        }
        let control = control::serve(sup.clone(), &sup.plan.control_socket)?;
        let metrics_server = match metrics_socket {
            Some(socket) => {
                let token = sup.plan.metrics_token.clone();
                Some(metrics_listener::serve(sup.clone(), socket, token)?)
            }
            None => None,
        };
        let browse: Vec<String> = sup
            .plan
            .services
            .iter()
            .filter_map(|s| browser_url(&s.name))
            .collect();
        tracing::info!(
            "{} started: master pid {}, {}{}",
            sup.plan.name,
            std::process::id(),
            sup.plan
                .services
                .iter()
                .map(|s| match s.workers {
                    1 => format!("{} × 1 worker", s.name),
                    n => format!("{} × {n} workers", s.name),
                })
                .collect::<Vec<_>>()
                .join(", "),
            match browse.is_empty() {
                true => String::new(),
                false => format!("; open {} in a browser", browse.join(" or ")),
            }
        );
        super::sd_notify::ready();
        if let Some(period) = super::sd_notify::watchdog_period() {
            // Pinged from the master's loop: a loop that stalls stops pinging.
            tokio::task::spawn_local(async move {
                let mut tick = tokio::time::interval(period);
                loop {
                    tick.tick().await;
                    super::sd_notify::notify("WATCHDOG=1");
                }
            });
        }
        tokio::task::spawn_local(sup.clone().watch_counters());
        if let Some((scheduler, _)) = &sup.scheduler {
            for i in 0..scheduler.len() {
                tokio::task::spawn_local(sup.clone().keep_schedule(i));
            }
        }
        while let Some(ev) = rx.recv().await {
            match ev {
                Event::Stop { graceful } => {
                    super::sd_notify::stopping();
                    tracing::info!(graceful, "stopping");
                    sup.stop_all(graceful).await;
                    break;
                }
                Event::Reload { graceful, done } => {
                    if sup.reloading.get() {
                        if let Some(d) = done {
                            let _ = d.send(Err("a reload is already running".into()));
                        }
                        continue;
                    }
                    let sup = sup.clone();
                    tokio::task::spawn_local(async move {
                        sup.reloading.set(true);
                        super::sd_notify::reloading();
                        let r = sup.reload(graceful).await;
                        sup.reloading.set(false);
                        super::sd_notify::ready();
                        match &r {
                            Ok(m) => tracing::info!("{m}"),
                            Err(m) => tracing::error!("reload stopped: {m}"),
                        }
                        if let Some(d) = done {
                            let _ = d.send(r);
                        }
                    });
                }
            }
        }
        drop(control);
        if let Some(m) = metrics_server {
            m.abort();
        }
        let _ = std::fs::remove_file(&sup.plan.control_socket);
        tracing::info!("{} stopped", sup.plan.name);
        Ok(())
    })
}

impl Supervisor {
    fn install_signal_handlers(self: &Rc<Self>) -> Result<()> {
        let table = [
            (SignalKind::interrupt(), Some(false), false),
            (SignalKind::terminate(), Some(false), false),
            (SignalKind::quit(), Some(true), false),
            (SignalKind::user_defined1(), None, false),
            (SignalKind::user_defined2(), None, true),
        ];
        for (kind, stop, graceful_reload) in table {
            let mut sig =
                signal(kind).map_err(|e| Error::io("cannot install signal handlers", e))?;
            let events = self.events.clone();
            tokio::task::spawn_local(async move {
                while sig.recv().await.is_some() {
                    let ev = match stop {
                        Some(graceful) => Event::Stop { graceful },
                        None => Event::Reload {
                            graceful: graceful_reload,
                            done: None,
                        },
                    };
                    if events.send(ev).is_err() {
                        return;
                    }
                }
            });
        }
        // SIGHUP: the workers reopen their log files (logrotate's postrotate).
        let mut hup = signal(SignalKind::hangup())
            .map_err(|e| Error::io("cannot install signal handlers", e))?;
        let me = Rc::downgrade(self);
        tokio::task::spawn_local(async move {
            while hup.recv().await.is_some() {
                match me.upgrade() {
                    Some(sup) => {
                        sup.reopen_logs();
                    }
                    None => return,
                }
            }
        });
        Ok(())
    }

    /// Starts every worker and waits until all are ready.
    async fn start_all(self: &Rc<Self>) -> std::result::Result<(), String> {
        let mut started = Vec::new();
        for slot in 0..self.slots.len() {
            let w = self
                .spawn(slot)
                .map_err(|e| format!("cannot start a worker: {e}"))?;
            self.current.borrow_mut()[slot] = Some(w.clone());
            started.push(w);
        }
        for w in started {
            w.wait_ready().await?;
        }
        Ok(())
    }

    /// Starts one worker process for `slot`.
    fn spawn(self: &Rc<Self>, slot: usize) -> std::io::Result<Rc<Worker>> {
        let (service, index) = self.slots[slot];
        let plan = &self.plan;
        let (ours, theirs) = std::os::unix::net::UnixStream::pair()?;
        // Move the child's descriptors above the numbers they get in the child (3 and 4), so
        // the dup2 calls after fork cannot clobber each other.
        let ipc_hi = dup_high(theirs.as_raw_fd())?;
        drop(theirs);
        // A custom process has no socket.
        let listen_hi = plan.services[service]
            .listen_fd(index)
            .map(dup_high)
            .transpose()?;
        let mut cmd = tokio::process::Command::new(&plan.exe);
        cmd.args(&plan.args)
            .env(ENV_WORKER, format!("{service}:{index}"))
            .env(ENV_IPC_FD, "3")
            .stdin(Stdio::null());
        if listen_hi.is_some() {
            cmd.env(ENV_LISTEN_FD, "4");
        } else {
            cmd.env_remove(ENV_LISTEN_FD);
        }
        let secrets_hi = crate::secret_env::pass_to(cmd.as_std_mut())?;
        // Workers are not background masters, whatever the master is; and only the master
        // speaks to systemd.
        cmd.env_remove(ENV_DAEMON)
            .env_remove("NOTIFY_SOCKET")
            .env_remove("WATCHDOG_USEC")
            .env_remove("WATCHDOG_PID");
        if let Some(gid) = plan.gid {
            cmd.as_std_mut().gid(gid);
        }
        if let Some(uid) = plan.uid {
            cmd.as_std_mut().uid(uid);
        }
        let ipc_raw = ipc_hi.as_raw_fd();
        let listen_raw = listen_hi.as_ref().map(|fd| fd.as_raw_fd());
        let secrets_raw = secrets_hi.as_ref().map(|fd| fd.as_raw_fd());
        // SAFETY: only async-signal-safe calls (prctl, dup2) run between fork and exec.
        unsafe {
            cmd.pre_exec(move || {
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM);
                if libc::dup2(ipc_raw, 3) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                if let Some(fd) = listen_raw {
                    if libc::dup2(fd, 4) < 0 {
                        return Err(std::io::Error::last_os_error());
                    }
                }
                if let Some(fd) = secrets_raw {
                    if libc::dup2(fd, crate::secret_env::SECRETS_FD) < 0 {
                        return Err(std::io::Error::last_os_error());
                    }
                }
                Ok(())
            });
        }
        let mut child = cmd.spawn()?;
        drop(ipc_hi);
        drop(listen_hi);
        drop(secrets_hi);
        let pid = child.id().unwrap_or(0) as i32;
        ours.set_nonblocking(true)?;
        let stream = tokio::net::UnixStream::from_std(ours)?;
        let (rd, wr) = stream.into_split();
        let (mut rd, mut wr) = (ipc::reader(rd), ipc::writer(wr));
        let (tx, mut rx) = mpsc::unbounded_channel::<Outgoing>();
        let (ready_tx, ready_rx) = oneshot::channel();
        let queued = Rc::new(Cell::new(0usize));
        let channel = Rc::new(Channel {
            tx,
            queued: queued.clone(),
            replies: RefCell::new(HashMap::new()),
            next_question: Cell::new(0),
            closed: Cell::new(false),
            ready: RefCell::new(Some(ready_tx)),
        });
        let worker = Rc::new(Worker {
            pid,
            slot,
            started: Instant::now(),
            channel: channel.clone(),
            ready: RefCell::new(Some(ready_rx)),
            retiring: Cell::new(false),
            recycle: Default::default(),
        });
        self.live.borrow_mut().insert(pid, worker.clone());
        tokio::task::spawn_local(async move {
            while let Some(msg) = rx.recv().await {
                let written = match msg {
                    Outgoing::Frames { group, frames } => {
                        let written = write_broadcast(&mut wr, &group, &frames).await;
                        queued.set(queued.get().saturating_sub(frames.len()));
                        written
                    }
                    Outgoing::Msg(msg) => write_msg(&mut wr, &msg).await,
                };
                if written.is_err() {
                    return;
                }
            }
        });
        let sup = self.clone();
        tokio::task::spawn_local(async move {
            while let Ok(Some(packet)) = read_packet::<_, ToMaster>(&mut rd).await {
                let msg = match packet {
                    Packet::Broadcast { group, frames } => {
                        sup.relay_broadcast(pid, &group, &frames);
                        if let Some(bus) = &sup.cluster {
                            bus.publish(&group, &frames);
                        }
                        continue;
                    }
                    Packet::Msg(m) => m,
                };
                match msg {
                    ToMaster::Ready => {
                        if let Some(r) = channel.ready.borrow_mut().take() {
                            let _ = r.send(Ok(()));
                        }
                    }
                    ToMaster::Failed(reason) => {
                        tracing::error!(pid, "{reason}");
                        if let Some(r) = channel.ready.borrow_mut().take() {
                            let _ = r.send(Err(reason));
                        }
                    }
                    ToMaster::Final(s) => {
                        sup.looks.borrow_mut().insert(pid, *s);
                    }
                    ToMaster::GroupJoined(group) => {
                        if let Some(bus) = &sup.cluster {
                            bus.joined(pid, &group);
                        }
                    }
                    ToMaster::GroupLeft(group) => {
                        if let Some(bus) = &sup.cluster {
                            bus.left(pid, &group);
                        }
                    }
                    ToMaster::JobDone { job, run, error } => {
                        if let Some((scheduler, _)) = &sup.scheduler {
                            scheduler.end_run(pid, job, run, error);
                        }
                    }
                    ToMaster::Recycle(cause) => sup.want_recycle(pid, cause),
                    ToMaster::Answer { id, answer } => {
                        if let Answer::Status(s) = &answer {
                            sup.looks.borrow_mut().insert(pid, (**s).clone());
                        }
                        if let Some(waiter) = channel.replies.borrow_mut().remove(&id) {
                            let _ = waiter.send(answer);
                        }
                    }
                }
            }
            // The channel closes when the worker exits: nothing more will come from it (those
            // waiting on an answer get none at once, instead of at their timeout), and its
            // counters as last seen are its totals.
            channel.closed.set(true);
            channel.replies.borrow_mut().clear();
            if let Some(bus) = &sup.cluster {
                bus.worker_gone(pid);
            }
            if let Some(s) = sup.looks.borrow_mut().remove(&pid) {
                sup.retired.borrow_mut().add(&s);
            }
            if let Some((scheduler, _)) = &sup.scheduler {
                scheduler.worker_gone(pid);
            }
        });
        let sup = self.clone();
        tokio::task::spawn_local(async move {
            let status = child.wait().await;
            sup.on_exit(pid, status.ok());
        });
        tracing::debug!(pid, service, index, "worker started");
        Ok(worker)
    }

    /// `worker I of SERVER (pid P)`.
    fn describe_worker(&self, w: &Worker) -> String {
        format!("{} (pid {})", self.describe(w.slot), w.pid)
    }

    fn describe(&self, slot: usize) -> String {
        let (service, index) = self.slots[slot];
        format!("worker {index} of {}", self.plan.services[service].name)
    }

    fn on_exit(self: &Rc<Self>, pid: i32, status: Option<ExitStatus>) {
        let Some(worker) = self.live.borrow_mut().remove(&pid) else {
            return;
        };
        self.exited.notify_waiters();
        let how = describe_status(status);
        let slot = worker.slot;
        let is_current = self.current.borrow()[slot]
            .as_ref()
            .is_some_and(|w| w.pid == pid);
        if worker.retiring.get() || self.stopping.get() || !is_current {
            tracing::debug!(pid, "{} exited: {how}", self.describe(slot));
            return;
        }
        let young = worker.started.elapsed() < YOUNG;
        let failures = {
            let mut f = self.failures.borrow_mut();
            f[slot] = if young { f[slot] + 1 } else { 0 };
            f[slot]
        };
        let delay = backoff(failures);
        self.restarts.set(self.restarts.get() + 1);
        tracing::warn!(
            pid,
            "{} exited unexpectedly ({how}); restarting in {} ms",
            self.describe(slot),
            delay.as_millis()
        );
        let sup = self.clone();
        tokio::task::spawn_local(async move {
            tokio::time::sleep(delay).await;
            if sup.stopping.get() {
                return;
            }
            match sup.spawn(slot) {
                Ok(w) => {
                    sup.current.borrow_mut()[slot] = Some(w.clone());
                    if let Err(e) = w.wait_ready().await {
                        tracing::error!("{}: {e}", sup.describe(slot));
                    }
                }
                Err(e) => {
                    tracing::error!("cannot restart {}: {e}", sup.describe(slot));
                    sup.current.borrow_mut()[slot] = None;
                }
            }
        });
    }

    /// Waits until `pid` has exited, or `timeout` passed; true if it exited.
    async fn wait_exit(&self, pid: i32, timeout: Duration) -> bool {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let notified = self.exited.notified();
            if !self.live.borrow().contains_key(&pid) {
                return true;
            }
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                return !self.live.borrow().contains_key(&pid);
            }
        }
    }

    /// How long an old worker may drain: a graceful stop or reload lets in-flight work run
    /// for the graceful timeout; a plain reload still answers every request its connections
    /// have sent, for up to [`RELOAD_DRAIN`]; a plain stop closes everything at once.
    fn drain_time(&self, graceful: bool, reloading: bool) -> Duration {
        match (graceful, reloading) {
            (true, _) => self.plan.graceful_timeout,
            (false, true) => RELOAD_DRAIN.min(self.plan.graceful_timeout),
            (false, false) => Duration::ZERO,
        }
    }

    /// Tells `worker` to stop after draining for `drain`; true once it has exited (killed
    /// if it takes more than `drain` and a margin).
    async fn retire(&self, worker: &Worker, drain: Duration) -> bool {
        worker.retiring.set(true);
        worker.tell(ToWorker::Stop {
            drain_ms: drain.as_millis() as u64,
        });
        if self.wait_exit(worker.pid, drain + STOP_MARGIN).await {
            return true;
        }
        tracing::warn!(pid = worker.pid, "worker did not stop in time; killing it");
        worker.kill();
        self.wait_exit(worker.pid, Duration::from_secs(2)).await
    }

    /// Stops every worker; kills those that do not exit in time.
    pub(crate) async fn stop_all(&self, graceful: bool) {
        self.stopping.set(true);
        // No new connection may be queued from here on (the last worker's close would reset
        // it); the workers hold the only other copies: each socket closes once the last of
        // them has taken what was queued on it. A Unix socket's file goes (a connect then
        // fails at once); a TCP socket drops new SYNs, and a graceful stop gives the
        // handshakes already under way a round trip to complete, while the workers accept.
        for f in &self.plan.socket_files {
            f.remove_if_ours();
        }
        let mut tcp = false;
        for l in self.plan.listeners.borrow_mut().drain(..) {
            tcp |= matches!(l, Listener::Tcp(_));
            if let Err(e) = l.refuse_new_connections() {
                tracing::warn!(error = %e, "cannot stop a listener's handshakes before closing it");
            }
        }
        // (A Unix `connect` that found the file just before it went may still be queueing.)
        if graceful && (tcp || !self.plan.socket_files.is_empty()) {
            tokio::time::sleep(HANDSHAKE_GRACE).await;
        }
        let workers: Vec<_> = self.live.borrow().values().cloned().collect();
        let drain = self.drain_time(graceful, false);
        futures_util::future::join_all(workers.iter().map(|w| self.retire(w, drain))).await;
    }

    /// Replaces every worker, one at a time: start the new one, wait until it is ready, then
    /// stop the old one.
    async fn reload(self: &Rc<Self>, graceful: bool) -> std::result::Result<String, String> {
        let t0 = Instant::now();
        let _turn = self.replacing.lock().await;
        let mut replaced = 0;
        for slot in 0..self.slots.len() {
            if self.stopping.get() {
                return Err("the master is stopping".into());
            }
            let new = self
                .spawn(slot)
                .map_err(|e| format!("cannot start a new {}: {e}", self.describe(slot)))?;
            if let Err(e) = new.wait_ready().await {
                new.retiring.set(true);
                new.kill();
                return Err(format!(
                    "new {} failed: {e}; old workers kept",
                    self.describe(slot)
                ));
            }
            let old = self.current.borrow_mut()[slot].replace(new);
            if let Some(old) = old {
                self.retire(&old, self.drain_time(graceful, true)).await;
            }
            replaced += 1;
        }
        Ok(format!(
            "reloaded {replaced} workers in {:.1} s",
            t0.elapsed().as_secs_f64()
        ))
    }

    /// Asks every worker for its counters each [`COUNTERS_PERIOD`], so that a worker that is
    /// killed leaves its totals as of at most that long ago (one that stops in order reports
    /// its final ones).
    async fn watch_counters(self: Rc<Self>) {
        let mut tick = tokio::time::interval(COUNTERS_PERIOD);
        while !self.stopping.get() {
            tick.tick().await;
            let workers = self.current_workers();
            ask_each(&workers, Question::Status, COUNTERS_PERIOD).await;
            self.take_kpi_sample(&workers);
            self.check_recycling(&workers);
        }
    }

    /// Runs schedule `i` for as long as the master does: sleeps until each due time, then tells
    /// the current worker of the schedules slot to run it (unless the scheduler skips it).
    async fn keep_schedule(self: Rc<Self>, i: usize) {
        let Some((scheduler, slot)) = self.scheduler.clone() else {
            return;
        };
        while !self.stopping.get() {
            let Some(due) = scheduler.next_due(i) else {
                return;
            };
            let wait = due
                .duration_since(std::time::SystemTime::now())
                .unwrap_or_default();
            tokio::time::sleep(wait).await;
            if self.stopping.get() {
                return;
            }
            let worker = self.current.borrow()[slot].clone();
            if let Some(run) = scheduler.begin_run(i, worker.as_ref().map(|w| w.pid)) {
                if let Some(w) = worker {
                    w.tell(ToWorker::RunJob { job: i, run });
                }
            }
        }
    }

    /// Adds a second to the KPI history from the latest looks, and judges it for alerts.
    fn take_kpi_sample(&self, current: &[Rc<Worker>]) {
        let looks = self.looks.borrow();
        let now: Vec<WorkerStatus> = current
            .iter()
            .filter_map(|w| looks.get(&w.pid).cloned())
            .collect();
        let all: Vec<WorkerStatus> = looks.values().cloned().collect();
        drop(looks);
        let mut history = self.history.borrow_mut();
        let sample = history.add(&now, &all, &self.retired.borrow());
        if let Some(alerting) = self.alerting.borrow_mut().as_mut() {
            alerting.observe(sample);
        }
    }

    /// Hands a broadcast's frames from worker `from` to every other current worker; a
    /// worker that has [`MAX_QUEUED_BROADCASTS`] waiting already (it is stalled) misses it.
    fn relay_broadcast(&self, from: i32, group: &str, frames: &BroadcastFrames) {
        self.relay_to(group, frames, |pid| pid != from);
    }

    /// Hands a broadcast's frames to the current workers that `takes`.
    fn relay_to(&self, group: &str, frames: &BroadcastFrames, takes: impl Fn(i32) -> bool) {
        for w in self.current_workers() {
            if !takes(w.pid) {
                continue;
            }
            let queued = &w.channel.queued;
            if queued.get() + frames.len() > MAX_QUEUED_BROADCASTS {
                let dropped = self.dropped_broadcasts.get() + 1;
                self.dropped_broadcasts.set(dropped);
                if dropped.is_power_of_two() {
                    tracing::warn!(
                        pid = w.pid,
                        queued = queued.get(),
                        dropped,
                        "a worker is not reading its broadcasts: dropping them"
                    );
                }
                continue;
            }
            queued.set(queued.get() + frames.len());
            let _ = w.channel.tx.send(Outgoing::Frames {
                group: group.to_string(),
                frames: frames.clone(),
            });
        }
    }

    /// Tells every worker to open its log files again; returns how many were told.
    fn reopen_logs(&self) -> usize {
        let workers = self.current_workers();
        for w in &workers {
            w.tell(ToWorker::ReopenLogs);
        }
        tracing::info!(workers = workers.len(), "reopening log files");
        workers.len()
    }

    fn current_workers(&self) -> Vec<Rc<Worker>> {
        self.current.borrow().iter().flatten().cloned().collect()
    }

    /// Asks every worker for its status.
    async fn status(&self) -> MasterStatus {
        let workers = self.current_workers();
        let answers = ask_each(&workers, Question::Status, Duration::from_secs(3)).await;
        let mut rows: Vec<WorkerStatus> = Vec::new();
        let mut unresponsive = Vec::new();
        for (w, a) in workers.iter().zip(answers) {
            match a {
                Some(Answer::Status(s)) => rows.push(*s),
                _ => unresponsive.push(w.pid),
            }
        }
        MasterStatus {
            name: self.plan.name.clone(),
            master_pid: std::process::id() as i32,
            uptime_s: self.started.elapsed().as_secs(),
            restarts: self.restarts.get(),
            recycles: *self.recycles.borrow(),
            dropped_broadcasts: self.dropped_broadcasts.get()
                + self.retired.borrow().broadcasts_dropped
                + rows.iter().map(|w| w.broadcasts_dropped).sum::<u64>(),
            retired: self.retired.borrow().clone(),
            workers: rows,
            unresponsive,
            load_average: crate::stats::load_average(),
            schedules: self
                .scheduler
                .as_ref()
                .map(|(s, _)| s.status())
                .unwrap_or_default(),
            cluster: self.cluster.as_ref().map(|bus| bus.status()),
        }
    }

    /// The metrics exposition: asks every live worker (those being retired too) for fresh
    /// counters, then adds what the master kept of the workers that have exited. A worker that
    /// does not answer in time counts as of its last answer.
    async fn metrics(&self) -> String {
        self.refresh_looks().await;
        let mut rows: Vec<WorkerStatus> = self.looks.borrow().values().cloned().collect();
        rows.sort_by(|a, b| (&a.server, a.worker, a.pid).cmp(&(&b.server, b.worker, b.pid)));
        let retired = self.retired.borrow().clone();
        let alerting = self.alerting.borrow();
        metrics::exposition(&Scrape {
            retired: &retired,
            workers: &rows,
            restarts: self.restarts.get(),
            recycles: *self.recycles.borrow(),
            dropped_broadcasts: self.dropped_broadcasts.get()
                + retired.broadcasts_dropped
                + rows.iter().map(|w| w.broadcasts_dropped).sum::<u64>(),
            master_pid: std::process::id() as i32,
            alerts: alerting.as_ref().map(Alerting::states).unwrap_or_default(),
            webhook_failures: alerting.as_ref().map_or(0, Alerting::webhook_failures),
        })
    }

    /// Asks every live worker (those being retired too) for fresh counters, which land in
    /// `looks`; one that does not answer within 2 s keeps its last look. Looks less than a
    /// second old are fresh enough, and a scrape that comes while another's refresh is under
    /// way waits for it instead of asking again: however many scrape at once, the workers
    /// answer one round a second.
    async fn refresh_looks(&self) {
        let _one_at_a_time = self.looking.lock().await;
        if self
            .looked_at
            .get()
            .is_some_and(|t| t.elapsed() < SCRAPE_FRESHNESS)
        {
            return;
        }
        self.ask_for_looks().await;
        self.looked_at.set(Some(Instant::now()));
    }

    async fn ask_for_looks(&self) {
        let workers: Vec<_> = self.live.borrow().values().cloned().collect();
        ask_each(&workers, Question::Status, Duration::from_secs(2)).await;
    }

    /// The status page, from fresh looks at the current workers and the KPI history.
    async fn status_page(&self) -> String {
        self.refresh_looks().await;
        let looks = self.looks.borrow();
        let mut workers: Vec<WorkerStatus> = self
            .current_workers()
            .iter()
            .filter_map(|w| looks.get(&w.pid).cloned())
            .collect();
        drop(looks);
        workers.sort_by(|a, b| (&a.server, a.worker).cmp(&(&b.server, b.worker)));
        let history = self.history.borrow();
        let alerting = self.alerting.borrow();
        let alerts = alerting.as_ref().map(Alerting::states).unwrap_or_default();
        status_page::render(&StatusView {
            name: &self.plan.name,
            uptime_s: self.started.elapsed().as_secs(),
            workers: &workers,
            history: history.samples().iter().collect(),
            alerts: &alerts,
            load_average: crate::stats::load_average(),
        })
    }

    /// Asks every worker for its connections.
    async fn connections(&self) -> Vec<ConnectionInfo> {
        let workers = self.current_workers();
        let answers = ask_each(&workers, Question::Connections, Duration::from_secs(10)).await;
        answers
            .into_iter()
            .flat_map(|a| match a {
                Some(Answer::Connections(list)) => list,
                _ => Vec::new(),
            })
            .collect()
    }
}

impl Observed for Supervisor {
    async fn metrics(&self) -> String {
        Supervisor::metrics(self).await
    }

    async fn status_page(&self) -> String {
        Supervisor::status_page(self).await
    }

    async fn health(&self) -> (bool, String) {
        let workers = self.current_workers();
        let answers = ask_each(&workers, Question::Status, PROBE_TIMEOUT).await;
        let silent: Vec<String> = workers
            .iter()
            .zip(&answers)
            .filter(|(_, a)| !matches!(a, Some(Answer::Status(_))))
            .map(|(w, _)| self.describe_worker(w))
            .collect();
        match silent.is_empty() {
            true => (
                true,
                format!("ok: the master and its {} workers answer\n", workers.len()),
            ),
            false => (
                false,
                format!(
                    "not answering within {} s: {}\n",
                    PROBE_TIMEOUT.as_secs(),
                    silent.join(", ")
                ),
            ),
        }
    }

    async fn readiness(&self) -> (bool, String) {
        if self.stopping.get() {
            return (false, "stopping\n".into());
        }
        let slots = self.current.borrow().len();
        let waiting: Vec<String> = self
            .current
            .borrow()
            .iter()
            .enumerate()
            .filter(|(_, w)| {
                w.as_ref()
                    .is_none_or(|w| w.channel.ready.borrow().is_some())
            })
            .map(|(slot, _)| self.describe(slot))
            .collect();
        if !waiting.is_empty() {
            return (false, format!("not ready yet: {}\n", waiting.join(", ")));
        }
        let workers = self.current_workers();
        let answers = ask_each(&workers, Question::Readiness, PROBE_TIMEOUT).await;
        let mut failing = Vec::new();
        for (w, answer) in workers.iter().zip(answers) {
            let who = self.describe_worker(w);
            match answer {
                Some(Answer::Readiness(failed)) => failing.extend(
                    failed
                        .into_iter()
                        .map(|(name, why)| format!("{name}: {why} ({who})")),
                ),
                _ => failing.push(format!(
                    "no answer within {} s ({who})",
                    PROBE_TIMEOUT.as_secs()
                )),
            }
        }
        match failing.is_empty() {
            true => (true, format!("ready: {slots} workers\n")),
            false => (false, format!("not ready: {}\n", failing.join("; "))),
        }
    }
}

/// Asks each of `workers` `question`, all at once: their answers in order (`None`: none
/// within `timeout`, or the worker is gone).
async fn ask_each(
    workers: &[Rc<Worker>],
    question: Question,
    timeout: Duration,
) -> Vec<Option<Answer>> {
    let asks = workers.iter().map(|w| w.ask(question, timeout));
    futures_util::future::join_all(asks).await
}

/// How long `/healthz` waits for each worker's answer.
const PROBE_TIMEOUT: Duration = Duration::from_secs(2);

impl Controlled for Supervisor {
    async fn status(&self) -> MasterStatus {
        Supervisor::status(self).await
    }

    async fn connections(&self) -> Vec<ConnectionInfo> {
        Supervisor::connections(self).await
    }

    fn stop(&self, graceful: bool) {
        let _ = self.events.send(Event::Stop { graceful });
    }

    async fn reload(&self, graceful: bool) -> std::result::Result<String, String> {
        let (tx, rx) = oneshot::channel();
        let _ = self.events.send(Event::Reload {
            graceful,
            done: Some(tx),
        });
        match rx.await {
            Ok(result) => result,
            Err(_) => Err("the master stopped during the reload".into()),
        }
    }

    fn reopen_logs(&self) -> usize {
        Supervisor::reopen_logs(self)
    }
}

/// Restart delay after `failures` young deaths in a row: none, then 100 ms doubling to 10 s.
/// Where a browser reaches an `http://` or `https://` listener: its address with a wildcard
/// host as the loopback one, and a `/`; `None` for the other schemes.
fn browser_url(address: &str) -> Option<String> {
    let (scheme, rest) = address.split_once("://")?;
    if scheme != "http" && scheme != "https" {
        return None;
    }
    let rest = rest
        .replacen("0.0.0.0:", "127.0.0.1:", 1)
        .replacen("[::]:", "[::1]:", 1);
    Some(format!("{scheme}://{rest}/"))
}

fn backoff(failures: u32) -> Duration {
    if failures == 0 {
        return Duration::ZERO;
    }
    let ms = 100u64.saturating_mul(1 << (failures - 1).min(10));
    Duration::from_millis(ms).min(MAX_BACKOFF)
}

fn describe_status(status: Option<ExitStatus>) -> String {
    match status {
        None => "status unknown".into(),
        Some(s) => match (s.code(), s.signal()) {
            (Some(code), _) => format!("exit code {code}"),
            (None, Some(sig)) => format!(
                "killed by signal {sig}{}",
                if s.core_dumped() { ", core dumped" } else { "" }
            ),
            _ => s.to_string(),
        },
    }
}

/// Duplicates `fd` to a number of at least 10, close-on-exec.
fn dup_high(fd: RawFd) -> std::io::Result<OwnedFd> {
    // SAFETY: F_DUPFD_CLOEXEC on a descriptor we own returns a new one we then own.
    let new = unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, 10) };
    if new < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: `new` is a fresh descriptor owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(new) })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn browsers_get_a_loopback_url_for_http_listeners() {
        assert_eq!(
            browser_url("http://0.0.0.0:8080").as_deref(),
            Some("http://127.0.0.1:8080/")
        );
        assert_eq!(
            browser_url("https://[::]:8443").as_deref(),
            Some("https://[::1]:8443/")
        );
        assert_eq!(
            browser_url("http://127.0.0.1:80").as_deref(),
            Some("http://127.0.0.1:80/")
        );
        assert_eq!(browser_url("text://0.0.0.0:7000"), None);
    }

    #[test]
    fn backoff_grows_and_caps() {
        assert_eq!(backoff(0), Duration::ZERO);
        assert_eq!(backoff(1), Duration::from_millis(100));
        assert_eq!(backoff(2), Duration::from_millis(200));
        assert_eq!(backoff(30), MAX_BACKOFF);
    }
}
