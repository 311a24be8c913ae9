//! [`Control`]: what a worker does with each message of its master, one handler per message.
//! Answers go to the master through the worker's outgoing queue, behind what the worker's
//! own code queued there before (the groups its restored connections joined, say), so the
//! master reads them in the order they were made.

use std::os::fd::OwnedFd;
use std::rc::Rc;
use std::time::Duration;

use tokio::sync::mpsc;

use crate::ipc::{Answer, Question, ToMaster, ToWorker};
use crate::runtime::context::WorkerCallback;
use crate::runtime::WorkerCtx;
use crate::stats::Stats;

/// One of the app's readiness checks: `Ok` when what it checks is reachable.
pub(crate) type ReadinessCheck = Rc<dyn Fn() -> crate::runtime::handler::HandlerFuture>;

/// How long each readiness check may take before it counts as failed.
const READINESS_TIMEOUT: Duration = Duration::from_millis(1500);

/// What the worker's loop does after a message.
pub(super) enum Next {
    /// Goes on serving.
    Serve,
    /// Stops: lets work in flight finish for up to `drain`, after handing over the
    /// connections that survive reloads if `hand_over`.
    Stop { drain: Duration, hand_over: bool },
}

/// A worker's side of its control channel: what its handlers need.
pub(super) struct Control {
    pub(super) worker: Rc<WorkerCtx>,
    /// The app's readiness checks, shared with the tasks that run them (one per question).
    pub(super) readiness: Rc<Vec<(String, ReadinessCheck)>>,
    /// The service's jobs (its schedules), by index.
    pub(super) jobs: Vec<WorkerCallback>,
    /// Messages for the master, written by the worker's loop in order.
    pub(super) to_master: mpsc::UnboundedSender<ToMaster>,
    /// Where connections handed over to this worker arrive, if the master gave it one.
    pub(super) handover: Option<OwnedFd>,
}

impl Control {
    /// Handles one message of the master's.
    pub(super) fn handle(&self, msg: ToWorker) -> Next {
        match msg {
            ToWorker::Ask { id, question } => self.answer(id, question),
            ToWorker::Stop {
                drain_ms,
                hand_over,
                to_another_master,
            } => return self.stop(drain_ms, hand_over, to_another_master),
            ToWorker::NoMoreHandovers => self.no_more_handovers(),
            ToWorker::Restore { count } => self.restore(count),
            ToWorker::ReopenLogs => crate::log_file::reopen_all(),
            ToWorker::RunJob { job, run } => self.run_job(job, run),
        }
        Next::Serve
    }

    /// Answers question `id`. A readiness check runs off the loop: a slow one (a database
    /// that does not answer) holds up neither the master's other questions nor the
    /// broadcasts relayed here.
    fn answer(&self, id: u64, question: Question) {
        let answer = match question {
            Question::Status => Answer::Status(Box::new(self.worker.snapshot())),
            Question::Connections => Answer::Connections(self.worker.connection_list()),
            Question::Readiness => {
                let (checks, answers) = (self.readiness.clone(), self.to_master.clone());
                tokio::task::spawn_local(async move {
                    let answer = Answer::Readiness(failed_checks(&checks).await);
                    let _ = answers.send(ToMaster::Answer { id, answer });
                });
                return;
            }
        };
        let _ = self.to_master.send(ToMaster::Answer { id, answer });
    }

    /// A stop: with `to_another_master` (an upgrade), group members of an app that spans
    /// machines stay here, to be closed.
    fn stop(&self, drain_ms: u64, hand_over: bool, to_another_master: bool) -> Next {
        crate::ws::handover::members_stay(&self.worker, to_another_master);
        Next::Stop {
            drain: Duration::from_millis(drain_ms),
            hand_over,
        }
    }

    /// No connection will be handed to this worker any more: it stops keeping broadcasts
    /// for them, and says so behind the groups its restored connections joined.
    fn no_more_handovers(&self) {
        (self.worker.part::<crate::ws::replay::Replay>()).stop_keeping();
        let _ = self.to_master.send(ToMaster::KeepingStopped);
    }

    /// Takes the `count` connections the master put on the handover socket.
    fn restore(&self, count: usize) {
        match &self.handover {
            Some(socket) => crate::ws::handover::restore(&self.worker, socket, count),
            None => tracing::error!("{count} connections handed over, but no handover socket"),
        }
    }

    /// Runs job `job` (one of the service's schedules) as its own task, and reports how it
    /// ended: an error or a panic is logged, counted as `throw_exception`, and reported.
    fn run_job(&self, job: usize, run: u64) {
        use futures_util::FutureExt;
        let (worker, done) = (self.worker.clone(), self.to_master.clone());
        let f = self.jobs.get(job).cloned();
        tokio::task::spawn_local(async move {
            let error = match f {
                None => Some(format!("this worker has no job {job}")),
                Some(f) => match std::panic::AssertUnwindSafe(f(worker.info.clone()))
                    .catch_unwind()
                    .await
                {
                    Ok(Ok(())) => None,
                    Ok(Err(e)) => Some(e.to_string()),
                    Err(panic) => Some(format!(
                        "panicked: {}",
                        crate::runtime::handler::panic_message(&panic)
                    )),
                },
            };
            if error.is_some() {
                Stats::add(&worker.stats.throw_exception, 1);
            }
            let _ = done.send(ToMaster::JobDone { job, run, error });
        });
    }
}

/// Runs `checks` all at once (the answer takes as long as the slowest, at most
/// [`READINESS_TIMEOUT`]); the ones that failed, and why.
async fn failed_checks(checks: &[(String, ReadinessCheck)]) -> Vec<(String, String)> {
    let runs = checks.iter().map(|(name, check)| async move {
        match tokio::time::timeout(READINESS_TIMEOUT, check()).await {
            Ok(Ok(())) => None,
            Ok(Err(e)) => Some((name.clone(), e.to_string())),
            Err(_) => Some((
                name.clone(),
                format!("no answer within {} ms", READINESS_TIMEOUT.as_millis()),
            )),
        }
    });
    futures_util::future::join_all(runs)
        .await
        .into_iter()
        .flatten()
        .collect()
}
