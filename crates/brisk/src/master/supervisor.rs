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
        done: Option<oneshot::Sender<std::result::Result<String, String>>>,
    },
    Upgrade {
        ready_timeout: Duration,
        done: oneshot::Sender<std::result::Result<String, String>>,
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
    /// The number of the last broadcast from another instance relayed to the workers.
    bus_seq: Cell<u64>,
    /// Workers gone while another kept broadcasts: their groups leave the bus once none does.
    gone_holders: RefCell<Vec<i32>>,
    /// Broadcasts not relayed to a stalled worker.
    dropped_broadcasts: Cell<u64>,
    /// The cluster bus, if the app spans machines.
    cluster: Option<Rc<super::cluster_bus::ClusterBus>>,
    /// This master's end of the bridge to the other during an upgrade.
    bridge: RefCell<Option<Rc<bridge::Bridge>>>,
    /// Started by an `upgrade` whose old master may still pass connections on: the workers
    /// keep broadcasts for them until it has ended.
    awaiting_predecessor: Cell<bool>,
    /// The control socket's listener, once it is served (for an `upgrade` to hand over).
    control_fd: Cell<RawFd>,
    /// Control connections being answered, on whichever listener.
    control_in_flight: Rc<control::InFlight>,
    /// The metrics listener's socket, if there is one.
    metrics_fd: Cell<Option<RawFd>>,
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
        let metrics_fd = metrics_socket.as_ref().map(|s| s.as_raw_fd());
        let predecessor = plan.predecessor.take();
        let control_socket = plan.control.take();
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
            bus_seq: Cell::new(0),
            gone_holders: RefCell::default(),
            cluster,
            bridge: RefCell::new(None),
            awaiting_predecessor: Cell::new(false),
            control_fd: Cell::new(-1),
            control_in_flight: Rc::default(),
            metrics_fd: Cell::new(metrics_fd),
            started: Instant::now(),
            exited: Notify::new(),
            events,
        });
        if let Some(bus) = &sup.cluster {
            // Broadcasts from other instances go to the workers of this one that hold members
            // of the group, and to those that may still be handed members (they keep every
            // broadcast for them), numbered in this master's name: a member handed to a new
            // worker is sent those it missed, as with the workers' own.
            let weak = Rc::downgrade(&sup);
            bus.start(move |topic, broadcast| {
                if let Some(sup) = weak.upgrade() {
                    if let Some(bus) = &sup.cluster {
                        let holders = bus.holders(topic);
                        let seq = sup.bus_seq.get() + 1;
                        sup.bus_seq.set(seq);
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
        sup.install_signal_handlers()?;
        // Started by `upgrade`: the bridge to the old master, before any worker broadcasts.
        let predecessor = match predecessor {
            Some(p) => {
                if let Some(bridge) = p.bridge {
                    sup.open_bridge(bridge, true, p.bridge_speaks_frames)
                        .map_err(|e| Error::io("upgrade: the bridge", e))?;
                    sup.awaiting_predecessor.set(true);
                }
                Some((p.link, p.old_pid))
            }
            None => None,
        };
        if let Err(msg) = sup.start_all().await {
            sup.stop_all(false, false).await;
            return Err(Error::Config(msg));
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
        sup.control_fd.set(control_socket.as_raw_fd());
        let in_flight = sup.control_in_flight.clone();
        let mut control = control::serve(sup.clone(), control_socket, in_flight)?;
        let mut metrics_server = match metrics_socket {
            Some(socket) => Some(sup.serve_metrics(socket)?),
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
        // (With `MAINPID`: systemd follows a new master before the old one exits.)
        super::sd_notify::ready();
        if let Some((link, old_pid)) = taken_over {
            super::upgrade::say_serving(&link).await;
            sup.take_connections_on(link);
            tracing::info!("took over from the old master (pid {old_pid})");
        }
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
        let dev_loop = std::env::var(crate::env::ENV_DEV_LOOP_PID).ok();
        if let Some(pid) = dev_loop.and_then(|p| p.parse().ok()) {
            tokio::task::spawn_local(stop_without_dev_loop(sup.events.clone(), pid));
        }
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
                    sup.stop_all(graceful, false).await;
                    break;
                }
                Event::Reload { graceful, done } => {
                    if sup.reloading.get() {
                        if let Some(d) = done {
                            let _ = d.send(Err("a reload is already running".into()));
                        }
                        continue;
                    }
                    // Set here, not in the task: an upgrade queued next must see it.
                    sup.reloading.set(true);
                    let sup = sup.clone();
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
                    if sup.reloading.get() {
                        let _ =
                            done.send(Err("a reload is under way: upgrade once it ends".into()));
                        continue;
                    }
                    let serving = (&mut control, &mut metrics_server);
                    match sup.upgrade(ready_timeout, serving).await {
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
                            sup.stop_all(true, true).await;
                            sup.close_bridge().await;
                            break;
                        }
                        Err(why) => {
                            let _ = done.send(Err(why));
                        }
                    }
                }
            }
        }
        control.abort();
        if let Some(m) = metrics_server {
            m.abort();
        }
        if !sup.plan.shared.get() {
            let _ = std::fs::remove_file(&sup.plan.control_socket);
        }
        // (The `upgrade` that handed over among them.)
        control::answered(&sup.control_in_flight, Duration::from_secs(5)).await;
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

    async fn upgrade(&self, ready_timeout: Duration) -> std::result::Result<String, String> {
        let (done, rx) = oneshot::channel();
        let _ = self.events.send(Event::Upgrade {
            ready_timeout,
            done,
        });
        match rx.await {
            Ok(result) => result,
            Err(_) => Err("the master stopped before the upgrade".into()),
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
            let _ = done.send(Err(format!(
                "an upgrade has just replaced this master with pid {new_master}: run upgrade \
                 again for a newer build"
            )));
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
