//! WebSocket connections handed over on a reload: a stopping worker puts them on its
//! handover socket and says how many ([`ToMaster::Detached`]); the master passes the message
//! on to its slot's new worker's socket and tells it to take them ([`ToWorker::Restore`]).
//! The order matters: the new worker reads `Restore` after every broadcast the master relayed
//! to it before, and the message is on its socket before `Restore` is sent.

use super::*;
use crate::ipc::fds::{recv_fds_now, send_fds};

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
        let to = self.current.borrow()[from.slot].clone();
        let Some(to) = to.filter(|w| w.pid != pid && !w.channel.closed.get()) else {
            tracing::error!(
                pid,
                "no new {} to take {count} WebSocket connections: closing them",
                self.describe(from.slot)
            );
            return;
        };
        let raw: Vec<RawFd> = fds.iter().map(|fd| fd.as_raw_fd()).collect();
        match send_fds(&to.handover, &bytes, &raw) {
            Ok(()) => to.tell(ToWorker::Restore { count }),
            Err(e) => tracing::error!(
                pid,
                to = to.pid,
                "cannot pass on {count} WebSocket connections: {e}; closing them"
            ),
        }
    }
}
