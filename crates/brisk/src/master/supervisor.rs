//! Starting, watching, replacing and stopping workers.
//!
//! Signals and control requests become [`Event`]s handled one at a time by the master loop;
//! each worker has a task that waits for it to exit and one that reads its messages. A worker
//! that exits unexpectedly is restarted at once the first time and with a growing delay if it
//! keeps dying young.
//!
//! This file holds the supervisor's state, its loop and signals, and the control socket's
//! view of it; the rest by job: [`spawn`] (starting a worker process), [`worker_handle`] (the
//! master's end of a worker: questions by id, messages, readiness), [`lifecycle`] (exits,
//! restarts, retiring, stop, reload), [`recycling`], [`relay`] (broadcasts between workers
//! and instances), [`observe`] (counters, status, metrics, KPIs, probes, schedules),
//! [`handover`] (`upgrade`, on the old master's side and the new one's) and [`bridge`] (what
//! the two masters pass each other during an upgrade).

mod bridge;
mod conn_handover;
mod lifecycle;
mod observe;
mod recycling;
mod relay;
mod spawn;
mod upgrading;
mod worker_handle;

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
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
use super::failure::{NotReady, ReloadError, StartError, UpgradeRefused};
use super::kpi_history::KpiHistory;
use super::metrics::{self, Scrape};
use super::metrics_listener::{self, Observed};
use super::scheduler::Scheduler;
use super::status_page::{self, StatusView};
use super::{dup_high, Plan};
use crate::env::{
    ENV_DAEMON, ENV_HANDOVER_FD, ENV_IPC_FD, ENV_IPC_VERSION, ENV_LISTEN_FD, ENV_WORKER,
    HANDOVER_FD,
};
use crate::error::{Error, Result};
use crate::ipc::codec::{read_packet, write_broadcast, write_msg};
use crate::ipc::{
    self, Answer, Broadcast, MasterStatus, Packet, Question, Stamp, ToMaster, ToWorker,
};
use crate::runtime::listener::Listener;
use crate::stats::{ConnectionInfo, WorkerStatus};
use worker_handle::{Channel, Outgoing, Worker};

/// How long the master waits, once a worker has exited, to read what it wrote before.
const CHANNEL_END_WAIT: Duration = Duration::from_secs(2);
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
        done: Option<oneshot::Sender<std::result::Result<String, ReloadError>>>,
    },
    Upgrade {
        ready_timeout: Duration,
        done: oneshot::Sender<std::result::Result<String, UpgradeRefused>>,
    },
}

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
    /// What it sees of its workers' counters (observe.rs).
    observed: observe::Observation,
    /// The app's schedules and the slot of the worker that runs them (worker 0 of the last
    /// service, the `schedules` process).
    scheduler: Option<(Rc<Scheduler>, usize)>,
    /// What relaying broadcasts keeps (relay.rs).
    relaying: relay::Relaying,
    /// The cluster bus, if the app spans machines.
    cluster: Option<Rc<super::cluster_bus::ClusterBus>>,
    /// The bridge to the other master during an upgrade (bridge.rs).
    bridging: bridge::Bridging,
    /// Its own listeners, which an upgrade hands over (upgrading.rs).
    listeners: upgrading::Listeners,
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
        let (events, rx) = mpsc::unbounded_channel();
        let metrics_socket = plan.metrics.take();
        let predecessor = plan.predecessor.take();
        let control_socket = plan.control.take();
        let sup = Supervisor::new(plan, metrics_socket.as_ref().map(|s| s.as_raw_fd()), events);
        sup.start_bus();
        sup.install_signal_handlers()?;
        // Started by `upgrade`: the bridge to the old master, before any worker broadcasts.
        let predecessor = match predecessor {
            Some(p) => {
                if let Some(bridge) = p.bridge {
                    sup.open_bridge(bridge, true, p.bridge_speaks_frames)
                        .map_err(|e| Error::io("upgrade: the bridge", e))?;
                    sup.bridging.awaiting_predecessor.set(true);
                }
                Some((p.link, p.old_pid))
            }
            None => None,
        };
        if let Err(why) = sup.start_all().await {
            sup.stop_all(false, false).await;
            return Err(Error::Config(why.to_string()));
        }
        // Started by `upgrade`: the old master lets go once this one's workers are ready.
        let taken_over = match predecessor {
            Some((link, old_pid)) => match sup.take_over(link, old_pid).await {
                Ok(link) => Some((link, old_pid)),
                Err(e) => {
                    sup.stop_all(true, false).await;
                    return Err(e);
                }
            },
            None => None,
        };
        let control_socket = match control_socket {
            Some(listener) => listener,
            None => control::bind(&sup.plan.control_socket)?,
        };
        sup.listeners.control_fd.set(control_socket.as_raw_fd());
        let in_flight = sup.listeners.control_in_flight.clone();
        let control = control::serve(sup.clone(), control_socket, in_flight)?;
        let metrics_server = match metrics_socket {
            Some(socket) => Some(sup.serve_metrics(socket)?),
            None => None,
        };
        sup.say_started();
        // (With `MAINPID`: systemd follows a new master before the old one exits.)
        super::sd_notify::ready();
        if let Some((link, old_pid)) = taken_over {
            super::upgrade::say_serving(&link).await;
            sup.take_connections_on(link);
            tracing::info!("took over from the old master (pid {old_pid})");
        }
        sup.spawn_background_tasks();
        let mut serving = Serving {
            control,
            metrics: metrics_server,
        };
        sup.handle_events(rx, &mut serving).await;
        serving.control.abort();
        if let Some(m) = serving.metrics {
            m.abort();
        }
        if !sup.plan.shared.get() {
            let _ = std::fs::remove_file(&sup.plan.control_socket);
        }
        // (The `upgrade` that handed over among them.)
        control::answered(&sup.listeners.control_in_flight, Duration::from_secs(5)).await;
        tracing::info!("{} stopped", sup.plan.name);
        Ok(())
    })
}

/// The tasks that answer on the master's own listeners, which an upgrade stops and, if it
/// fails, starts again.
struct Serving {
    control: tokio::task::JoinHandle<()>,
    metrics: Option<tokio::task::JoinHandle<()>>,
}

impl Supervisor {
    /// The supervisor of `plan`'s workers, none started yet, with the metrics listener
    /// `metrics_fd` (if any) and its event queue `events`.
    fn new(
        mut plan: Plan,
        metrics_fd: Option<RawFd>,
        events: mpsc::UnboundedSender<Event>,
    ) -> Rc<Self> {
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
        Rc::new(Supervisor {
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
            observed: observe::Observation::new(alerting),
            scheduler,
            relaying: relay::Relaying::default(),
            cluster,
            bridging: bridge::Bridging::default(),
            listeners: upgrading::Listeners::new(metrics_fd),
            started: Instant::now(),
            exited: Notify::new(),
            events,
        })
    }

    /// With a cluster bus, relays what other instances broadcast to the workers of this one
    /// that hold members of the group, and to those that may still be handed members (they
    /// keep every broadcast for them), numbered in this master's name: a member handed to a
    /// new worker is sent those it missed, as with the workers' own.
    fn start_bus(self: &Rc<Self>) {
        if let Some(bus) = &self.cluster {
            let weak = Rc::downgrade(self);
            bus.start(move |topic, broadcast| {
                if let Some(sup) = weak.upgrade() {
                    if let Some(bus) = &sup.cluster {
                        let holders = bus.holders(topic);
                        let seq = sup.relaying.bus_seq.get() + 1;
                        sup.relaying.bus_seq.set(seq);
                        let stamp = Stamp {
                            origin: std::process::id(),
                            seq,
                        };
                        sup.relay_to(topic, stamp, broadcast, |w| {
                            w.keeping.get() || holders.contains(&w.pid)
                        });
                    }
                }
            });
        }
    }

    /// Logs that the app started: its workers, and where a browser reaches it.
    fn say_started(&self) {
        let browse: Vec<String> = self
            .plan
            .services
            .iter()
            .filter_map(|s| browser_url(&s.name))
            .collect();
        tracing::info!(
            "{} started: master pid {}, {}{}",
            self.plan.name,
            std::process::id(),
            self.plan
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
    }

    /// The master's own tasks: the systemd watchdog, the counters, the dev loop's watch and
    /// the schedules.
    fn spawn_background_tasks(self: &Rc<Self>) {
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
        tokio::task::spawn_local(self.clone().watch_counters());
        let dev_loop = std::env::var(crate::env::ENV_DEV_LOOP_PID).ok();
        if let Some(pid) = dev_loop.and_then(|p| p.parse().ok()) {
            tokio::task::spawn_local(stop_without_dev_loop(self.events.clone(), pid));
        }
        if let Some((scheduler, _)) = &self.scheduler {
            for i in 0..scheduler.len() {
                tokio::task::spawn_local(self.clone().keep_schedule(i));
            }
        }
    }

    /// Acts on each event until a stop, or an upgrade that handed over.
    async fn handle_events(
        self: &Rc<Self>,
        mut rx: mpsc::UnboundedReceiver<Event>,
        serving: &mut Serving,
    ) {
        while let Some(ev) = rx.recv().await {
            match ev {
                Event::Stop { graceful } => {
                    super::sd_notify::stopping();
                    tracing::info!(graceful, "stopping");
                    self.stop_all(graceful, false).await;
                    break;
                }
                Event::Reload { graceful, done } => {
                    if self.reloading.get() {
                        if let Some(d) = done {
                            let _ = d.send(Err(ReloadError::AlreadyRunning));
                        }
                        continue;
                    }
                    // Set here, not in the task: an upgrade queued next must see it.
                    self.reloading.set(true);
                    let sup = self.clone();
                    tokio::task::spawn_local(async move {
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
                Event::Upgrade {
                    ready_timeout,
                    done,
                } => {
                    if self.reloading.get() {
                        let _ = done.send(Err(UpgradeRefused::ReloadUnderWay));
                        continue;
                    }
                    let serving = (&mut serving.control, &mut serving.metrics);
                    match self.upgrade(ready_timeout, serving).await {
                        Ok((msg, new_master)) => {
                            let _ = done.send(Ok(msg));
                            // What was asked meanwhile is the new master's to do.
                            rx.close();
                            while let Ok(ev) = rx.try_recv() {
                                pass_on(ev, new_master);
                            }
                            // The new master answers now; this one's workers hand over
                            // the connections that survive reloads and finish what they
                            // have, the sockets untouched.
                            self.stop_all(true, true).await;
                            self.close_bridge().await;
                            break;
                        }
                        Err(why) => {
                            let _ = done.send(Err(UpgradeRefused::Failed(why)));
                        }
                    }
                }
            }
        }
    }
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
    async fn start_all(self: &Rc<Self>) -> std::result::Result<(), StartError> {
        let mut started = Vec::new();
        for slot in 0..self.slots.len() {
            let w = self.spawn(slot).map_err(StartError::Spawn)?;
            self.current.borrow_mut()[slot] = Some(w.clone());
            started.push(w);
        }
        for w in started {
            w.wait_ready().await?;
            self.no_more_handovers_to(&w);
        }
        Ok(())
    }
}

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

    async fn reload(&self, graceful: bool) -> std::result::Result<String, ReloadError> {
        let (tx, rx) = oneshot::channel();
        let _ = self.events.send(Event::Reload {
            graceful,
            done: Some(tx),
        });
        match rx.await {
            Ok(result) => result,
            Err(_) => Err(ReloadError::MasterGone),
        }
    }

    fn reopen_logs(&self) -> usize {
        Supervisor::reopen_logs(self)
    }

    async fn upgrade(
        &self,
        ready_timeout: Duration,
    ) -> std::result::Result<String, UpgradeRefused> {
        let (done, rx) = oneshot::channel();
        let _ = self.events.send(Event::Upgrade {
            ready_timeout,
            done,
        });
        match rx.await {
            Ok(result) => result,
            Err(_) => Err(UpgradeRefused::MasterGone),
        }
    }
}

/// Stops the master once the `dev` loop `pid` that started it is gone (killed, say, where it
/// could not stop the app itself).
async fn stop_without_dev_loop(events: mpsc::UnboundedSender<Event>, pid: i32) {
    let mut tick = tokio::time::interval(Duration::from_millis(500));
    loop {
        tick.tick().await;
        if !super::pidfile::alive(pid) {
            tracing::warn!("the dev loop (pid {pid}) is gone; stopping");
            let _ = events.send(Event::Stop { graceful: false });
            return;
        }
    }
}

/// An event that came while this master handed over to `new_master` (an upgrade), passed
/// on to it as the signal that asks the same, or answered saying where it went.
fn pass_on(ev: Event, new_master: u32) {
    let pid = Pid::from_raw(new_master as i32);
    match ev {
        Event::Stop { graceful } => {
            let _ = kill(
                pid,
                if graceful {
                    Signal::SIGQUIT
                } else {
                    Signal::SIGTERM
                },
            );
        }
        Event::Reload { graceful, done } => {
            let _ = kill(
                pid,
                if graceful {
                    Signal::SIGUSR2
                } else {
                    Signal::SIGUSR1
                },
            );
            if let Some(d) = done {
                let _ = d.send(Ok(format!("the new master (pid {new_master}) reloads")));
            }
        }
        Event::Upgrade { done, .. } => {
            let _ = done.send(Err(UpgradeRefused::JustUpgraded(new_master)));
        }
    }
}

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
}
