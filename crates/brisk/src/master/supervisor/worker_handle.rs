//! The master's handle on one worker process: its control channel (questions answered by id,
//! messages, relayed broadcasts), its readiness, and how to kill it.

use super::*;

/// What the master writes to a worker: a message, or a broadcast (a binary packet).
pub(super) enum Outgoing {
    Msg(ToWorker),
    Broadcast {
        topic: String,
        stamp: Stamp,
        broadcast: Broadcast,
    },
}

/// The master's end of one worker's control channel.
pub(super) struct Channel {
    pub(super) tx: mpsc::UnboundedSender<Outgoing>,
    /// Bytes of broadcasts queued for the worker and not yet written to it.
    pub(super) queued: Rc<Cell<usize>>,
    /// Who waits for the answer to each question asked, by the question's id.
    pub(super) replies: RefCell<HashMap<u64, oneshot::Sender<Answer>>>,
    /// The id of the next question.
    pub(super) next_question: Cell<u64>,
    pub(super) ready: RefCell<Option<oneshot::Sender<std::result::Result<(), NotReady>>>>,
    /// The worker's end closed (it exited): nothing it is asked now will be answered.
    pub(super) closed: Cell<bool>,
    /// Notified when `closed` is set, everything the worker wrote having been read.
    pub(super) read_to_end: Notify,
}

/// One worker process.
pub(super) struct Worker {
    pub(super) pid: i32,
    pub(super) slot: usize,
    pub(super) started: Instant,
    pub(super) channel: Rc<Channel>,
    pub(super) ready: RefCell<Option<oneshot::Receiver<std::result::Result<(), NotReady>>>>,
    /// Being replaced or stopped: its exit is expected.
    pub(super) retiring: Cell<bool>,
    /// Keeping every broadcast for connections that may be handed to it: from its start
    /// until it says it took `NoMoreHandovers` (by then the master knows the groups those
    /// connections joined), it is sent everything from other instances.
    pub(super) keeping: Cell<bool>,
    /// Whether it is to be replaced by recycling, and how that goes.
    pub(super) recycle: recycling::RecycleState,
    /// The master's end of its handover socket: connections it hands over come out here.
    pub(super) handover: std::os::fd::OwnedFd,
    /// What goes into its handover socket (connections from its predecessor), in order.
    pub(super) forwarding: conn_handover::Forwarding,
}

impl Worker {
    /// Asks a question and waits for its answer (`None`: none within `timeout`, or the
    /// worker is gone). Answers are matched by id: a late one is dropped, never taken for
    /// the answer to another question.
    pub(super) async fn ask(&self, question: Question, timeout: Duration) -> Option<Answer> {
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

    pub(super) fn tell(&self, msg: ToWorker) {
        let _ = self.channel.tx.send(Outgoing::Msg(msg));
    }

    /// Tells it `msg` after the connections on their way to it.
    pub(super) fn tell_after_handovers(&self, msg: ToWorker) {
        if let Err(unsent) = self.forwarding.send(conn_handover::Forward::Tell(msg)) {
            if let conn_handover::Forward::Tell(msg) = unsent.0 {
                self.tell(msg);
            }
        }
    }

    /// Tells it that no connection will be handed to it any more, after those on their way.
    pub(super) fn no_more_handovers(&self) {
        let _ = self.forwarding.send(conn_handover::Forward::Done);
    }

    /// Waits until the worker reports ready, fails, or exits.
    pub(super) async fn wait_ready(&self) -> std::result::Result<(), NotReady> {
        let Some(rx) = self.ready.borrow_mut().take() else {
            return Ok(());
        };
        match tokio::time::timeout(READY_TIMEOUT, rx).await {
            Ok(Ok(r)) => r,
            Ok(Err(_)) => Err(NotReady::Exited(self.pid)),
            Err(_) => Err(NotReady::TimedOut {
                pid: self.pid,
                secs: READY_TIMEOUT.as_secs(),
            }),
        }
    }

    pub(super) fn kill(&self) {
        let _ = kill(Pid::from_raw(self.pid), Signal::SIGKILL);
    }
}
