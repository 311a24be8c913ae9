//! The messages of the two control channels: master ↔ worker (a socketpair per worker) and
//! CLI → master (the control socket).

use bytes::Bytes;
use serde::{Deserialize, Serialize};

use crate::stats::{ConnectionInfo, RetiredTotals, WorkerStatus};

/// The version of [`ToWorker`] and [`ToMaster`]: a master and a worker of builds that differ
/// in it cannot understand each other (a `reload` after a new binary replaced one that spoke
/// another; the worker says so and exits, and the app needs a restart or an upgrade). 2:
/// questions carry ids. 3: WebSocket connections handed over on a reload. 4: the worker
/// says when it stopped keeping broadcasts ([`ToMaster::KeepingStopped`]). 5: broadcasts carry
/// their message ([`Broadcast`]), not frames.
pub(crate) const IPC_VERSION: u32 = 5;

/// Master to worker.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) enum ToWorker {
    /// A question: reply with [`ToMaster::Answer`] and the same `id`. Answers may come in
    /// any order (a slow readiness check holds up no other).
    Ask { id: u64, question: Question },
    /// Stop: stop accepting, then let in-flight work finish for up to `drain_ms`
    /// milliseconds (0: close everything at once). With `hand_over` (a reload: the slot's
    /// new worker is running), the WebSocket connections of endpoints that survive reloads
    /// are first handed to the master ([`ToMaster::Detached`]) for the new worker. With
    /// `to_another_master` as well (an upgrade), group members of an app that spans machines
    /// stay: the two masters are two instances of its bus, which number what they deliver
    /// each on its own.
    Stop {
        drain_ms: u64,
        #[serde(default)]
        hand_over: bool,
        #[serde(default)]
        to_another_master: bool,
    },
    /// `count` handed-over connections wait on the handover socket: take them and serve
    /// them.
    Restore { count: usize },
    /// No connection will be handed to this worker any more (the worker it replaced has
    /// exited, or it replaced none): it stops keeping broadcasts for them.
    NoMoreHandovers,
    /// Open every log file again (after logrotate moved it).
    ReopenLogs,
    /// Run job `job` of the worker's service (a schedule); reply [`ToMaster::JobDone`] with
    /// the same `run`.
    RunJob { job: usize, run: u64 },
}

/// What the master asks a worker ([`ToWorker::Ask`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) enum Question {
    /// Its counters: [`Answer::Status`].
    Status,
    /// Its open connections: [`Answer::Connections`].
    Connections,
    /// The app's readiness checks, run now: [`Answer::Readiness`].
    Readiness,
}

/// A worker's answer to a [`Question`].
#[derive(Debug, Serialize, Deserialize)]
pub(crate) enum Answer {
    /// Boxed: the other answers are a few words.
    Status(Box<WorkerStatus>),
    Connections(Vec<ConnectionInfo>),
    /// The checks that failed, by name, and why.
    Readiness(Vec<(String, String)>),
}

/// Worker to master.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) enum ToMaster {
    /// Listeners are open and `on_worker_start` has run.
    Ready,
    /// The worker cannot start; the message says why.
    Failed(String),
    /// The answer to the [`ToWorker::Ask`] with this `id`.
    Answer { id: u64, answer: Answer },
    /// The worker's counters as it exits, after its connections are closed.
    Final(Box<WorkerStatus>),
    /// A job the master asked for has ended; `error` says how it failed, if it did.
    JobDone {
        job: usize,
        run: u64,
        error: Option<String>,
    },
    /// The worker now holds members of this broadcast group (it held none). Sent only when
    /// the app spans machines.
    GroupJoined(String),
    /// The worker holds no members of this group any more.
    GroupLeft(String),
    /// The worker took [`ToWorker::NoMoreHandovers`], after reporting every group the
    /// connections handed to it joined: from here the master sends it what comes from other
    /// instances only for the groups it holds.
    KeepingStopped,
    /// The worker has served its `max_requests`: the master replaces it.
    Recycle(crate::recycle::RecycleCause),
    /// A stopping worker put `count` connections on its handover socket (one message: their
    /// state and their sockets): the master passes them to the slot's new worker.
    Detached { count: usize },
}

/// CLI to master.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) enum ControlRequest {
    Status,
    Connections,
    Stop { graceful: bool },
    Reload { graceful: bool },
    ReopenLogs,
    Upgrade { ready_timeout_s: u64 },
}

/// Master to CLI.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) enum ControlReply {
    Status(Box<MasterStatus>),
    Connections(Vec<ConnectionInfo>),
    Done(String),
    Error(String),
}

/// The whole app's status as the master sees it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct MasterStatus {
    /// The app's name.
    pub name: String,
    /// The master's pid.
    pub master_pid: i32,
    /// Seconds since the master started.
    pub uptime_s: u64,
    /// Worker restarts after unexpected exits.
    pub restarts: u64,
    /// Workers replaced by recycling (`max_requests`, `max_memory_mib`), by cause.
    #[serde(default)]
    pub recycles: crate::recycle::RecycleCounts,
    /// Broadcasts lost on the way between workers: those the master did not relay to a worker
    /// that had stopped reading them, and those a worker could not hand to a master that had.
    #[serde(default)]
    pub dropped_broadcasts: u64,
    /// The counters of the workers that have exited: add them to the rows' for the app's
    /// totals since start.
    #[serde(default)]
    pub retired: RetiredTotals,
    /// One row per worker; workers that did not answer in time are missing and counted here.
    pub workers: Vec<WorkerStatus>,
    /// Workers that did not answer the status request in time.
    pub unresponsive: Vec<i32>,
    /// The machine's load averages over 1, 5 and 15 minutes.
    #[serde(default)]
    pub load_average: [f64; 3],
    /// The app's schedules.
    #[serde(default)]
    pub schedules: Vec<ScheduleStatus>,
    /// The cluster bus, if the app spans machines (`App::cluster`).
    #[serde(default)]
    pub cluster: Option<crate::stats::ClusterStatus>,
}

/// One schedule as the master sees it.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct ScheduleStatus {
    /// Its name.
    pub name: String,
    /// `every 10s` or `cron EXPRESSION`.
    pub spec: String,
    /// Its next due time, in seconds since the Unix epoch.
    pub next_unix_s: Option<u64>,
    /// Runs that ended.
    pub runs: u64,
    /// Of those, the ones that failed, panicked or lost their worker.
    pub failures: u64,
    /// Due times skipped: the previous run was still going (and overlap is off), or no worker
    /// was there to run it.
    pub skipped: u64,
    /// Runs going now.
    pub running: u64,
}

/// What a broadcast says, whatever the protocol of the members that get it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum BroadcastKind {
    /// A text message (UTF-8).
    Text,
    /// A binary message.
    Binary,
    /// The members' end: a close code (two bytes, big-endian) and a reason in UTF-8.
    Close,
}

/// A message for the members of a group, as it travels between the processes of an app: the
/// workers, the master and the bridge of an upgrade carry it as it is, and the protocol of
/// each member encodes it for that member (a WebSocket frame, an event stream's event).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Broadcast {
    pub kind: BroadcastKind,
    pub payload: Bytes,
}

impl Broadcast {
    /// Bytes it holds.
    pub(crate) fn len(&self) -> usize {
        self.payload.len()
    }
}

/// Where a broadcast comes from and its place among that origin's broadcasts: a worker
/// numbers its own from 1, and every worker keeps the last number it has seen of each origin,
/// so that a connection handed to a new worker is sent exactly the ones it missed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Stamp {
    /// The pid of the worker that broadcast it, or of the master that delivers it from
    /// another instance (the cluster bus); 0 for one that is not numbered.
    pub origin: u32,
    /// Its number among its origin's broadcasts.
    pub seq: u64,
}

impl Stamp {
    /// A broadcast that is not numbered: never replayed.
    pub(crate) const NONE: Stamp = Stamp { origin: 0, seq: 0 };
}

/// What arrives on a master-worker channel: a JSON message, or a broadcast to a topic (a
/// group's name in the form it travels in, which only the workers' protocols read).
#[derive(Debug)]
pub(crate) enum Packet<T> {
    Msg(T),
    Broadcast {
        topic: String,
        stamp: Stamp,
        broadcast: Broadcast,
    },
}
