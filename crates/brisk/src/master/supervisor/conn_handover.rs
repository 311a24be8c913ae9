//! WebSocket connections handed over on a reload: a stopping worker puts them on its
//! handover socket and says how many ([`ToMaster::Detached`]); the master passes the message
//! on to its slot's new worker's socket and tells it to take them ([`ToWorker::Restore`]).
//! The order matters: the new worker reads `Restore` after every broadcast the master relayed
//! to it before, and the message is on its socket before `Restore` is sent.
//!
//! The master never waits on a worker's socket: each worker has a queue of messages to pass
//! on ([`Forwarding`]), sent without blocking and retried while the worker's socket is full
//! (it empties it one message per `Restore`, which the master could not write while blocked
//! in a send). [`ToWorker::NoMoreHandovers`] goes through the same queue, after them, and so
//! does a worker's `Stop`: told to stop before it was told to take connections already on
//! their way, it would close them unserved.

use std::collections::VecDeque;

use super::*;
use crate::ipc::fds::{recv_fds_now, send_fds_now};

/// How long a handover message may wait for room on a new worker's socket.
const FORWARD_TIMEOUT: Duration = Duration::from_secs(10);

/// What goes to a worker through its handover queue, in order.
pub(super) enum Forward {
    /// A handover message of `count` connections for its socket, then `Restore`.
    Batch {
        bytes: Vec<u8>,
        fds: Vec<OwnedFd>,
        count: usize,
    },
    /// `NoMoreHandovers`, once every message before it is on its way.
    Done,
    /// A message for the worker, once every message before it is on its way.
    Tell(ToWorker),
}

/// A worker's handover queue: the sender, and the task that drains it.
pub(super) type Forwarding = mpsc::UnboundedSender<Forward>;

/// Starts the task that passes handover messages on to a worker's `socket` and tells it on
/// `channel`; returns its queue. The task ends when the queue's sender (the worker's handle)
/// is dropped.
pub(super) fn forwarding(socket: OwnedFd, channel: Rc<Channel>) -> Forwarding {
    let (tx, mut rx) = mpsc::unbounded_channel::<Forward>();
    tokio::task::spawn_local(async move {
        let mut queue: VecDeque<Forward> = VecDeque::new();
        while let Some(next) = rx.recv().await {
            queue.push_back(next);
            while let Some(f) = queue.pop_front() {
                let msg = match f {
                    Forward::Batch { bytes, fds, count } => {
                        if let Err(e) = pass_on(&socket, &bytes, &fds).await {
                            tracing::error!(
                                "cannot pass on {count} WebSocket connections: {e}; closing them"
                            );
                            continue;
                        }
                        ToWorker::Restore { count }
                    }
                    Forward::Done => ToWorker::NoMoreHandovers,
                    Forward::Tell(msg) => msg,
                };
                let _ = channel.tx.send(Outgoing::Msg(msg));
            }
        }
    });
    tx
}

/// Sends one handover message on `socket`, waiting (without blocking the master) while it is
/// full, for up to [`FORWARD_TIMEOUT`].
pub(super) async fn pass_on(
    socket: &OwnedFd,
    bytes: &[u8],
    fds: &[OwnedFd],
) -> std::io::Result<()> {
    let raw: Vec<RawFd> = fds.iter().map(|fd| fd.as_raw_fd()).collect();
    let deadline = tokio::time::Instant::now() + FORWARD_TIMEOUT;
    loop {
        match send_fds_now(socket, bytes, &raw) {
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                if tokio::time::Instant::now() >= deadline {
                    return Err(std::io::Error::other("the new worker took none for 10 s"));
                }
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
            other => return other,
        }
    }
}

impl Supervisor {
    /// Worker `pid` put `count` connections on its handover socket: passes them to the
    /// current worker of its slot. With none to take them (the slot's new worker is gone),
    /// they close here: their clients see the connection end.
    pub(super) fn pass_on_handed_over(&self, pid: i32, count: usize) {
        let Some(from) = self.live.borrow().get(&pid).cloned() else {
            return;
        };
        let (bytes, fds) = match recv_fds_now(&from.handover, 64) {
            Ok(m) => m,
            Err(e) => {
                tracing::error!(
                    pid,
                    "{count} WebSocket connections handed over were lost: {e}"
                );
                return;
            }
        };
        if self.passes_to_new_master() {
            self.pass_to_new_master(from.slot, bytes, fds, count);
            return;
        }
        let to = self.current.borrow()[from.slot].clone();
        let Some(to) = to.filter(|w| w.pid != pid && !w.channel.closed.get()) else {
            tracing::error!(
                pid,
                "no new {} to take {count} WebSocket connections: closing them",
                self.describe(from.slot)
            );
            return;
        };
        let _ = to.forwarding.send(Forward::Batch { bytes, fds, count });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ipc::fds::seqpacket_pair;

    /// A new worker whose socket is full (it has not yet read what it was told to take)
    /// holds up neither the master's thread nor the order: its `Restore` comes once the
    /// message is on the socket, and `NoMoreHandovers` and a `Stop` after it.
    #[tokio::test(flavor = "current_thread")]
    async fn a_full_socket_delays_the_restore_without_blocking_and_done_comes_last() {
        let local = tokio::task::LocalSet::new();
        local
            .run_until(async {
                let (ours, theirs) = seqpacket_pair().unwrap();
                let mut filled = 0;
                while send_fds_now(&ours, b"earlier", &[]).is_ok() {
                    filled += 1;
                }
                assert!(filled > 0);
                let (tx, mut told) = mpsc::unbounded_channel();
                let channel = Rc::new(Channel {
                    tx,
                    queued: Rc::default(),
                    replies: RefCell::new(HashMap::new()),
                    next_question: Cell::new(0),
                    ready: RefCell::new(None),
                    closed: Cell::new(false),
                    read_to_end: Notify::new(),
                });
                let queue = forwarding(ours, channel);
                let file = tempfile::tempfile().unwrap();
                let fds = vec![OwnedFd::from(file)];
                queue
                    .send(Forward::Batch {
                        bytes: b"batch".to_vec(),
                        fds,
                        count: 1,
                    })
                    .unwrap();
                queue.send(Forward::Done).unwrap();
                queue
                    .send(Forward::Tell(ToWorker::Stop {
                        drain_ms: 0,
                        hand_over: false,
                        to_another_master: false,
                    }))
                    .unwrap();
                for _ in 0..20 {
                    tokio::task::yield_now().await;
                }
                assert!(told.try_recv().is_err(), "told before the message was sent");
                for _ in 0..filled {
                    assert_eq!(recv_fds_now(&theirs, 64).unwrap().0, b"earlier");
                }
                let next = |m: Option<Outgoing>| match m {
                    Some(Outgoing::Msg(msg)) => format!("{msg:?}"),
                    _ => "something else".to_string(),
                };
                assert_eq!(next(told.recv().await), "Restore { count: 1 }");
                assert_eq!(next(told.recv().await), "NoMoreHandovers");
                assert!(
                    next(told.recv().await).starts_with("Stop"),
                    "Stop came last"
                );
                let (bytes, fds) = recv_fds_now(&theirs, 64).unwrap();
                assert_eq!((bytes.as_slice(), fds.len()), (&b"batch"[..], 1));
            })
            .await;
    }
}
