//! Broadcasts relayed between workers (and from other instances), and messages to every
//! current worker.

use super::*;

impl Supervisor {
    /// Hands a broadcast's frames from worker `from` to every other current worker; a
    /// worker that has [`MAX_QUEUED_BROADCASTS`] waiting already (it is stalled) misses it.
    pub(super) fn relay_broadcast(
        &self,
        from: i32,
        group: &str,
        stamp: Stamp,
        frames: &BroadcastFrames,
    ) {
        self.relay_to(group, stamp, frames, |pid| pid != from);
        self.bridge_broadcast(group, stamp, frames);
    }

    /// Hands a broadcast's frames to the current workers that `takes`.
    pub(super) fn relay_to(
        &self,
        group: &str,
        stamp: Stamp,
        frames: &BroadcastFrames,
        takes: impl Fn(i32) -> bool,
    ) {
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
                stamp,
                frames: frames.clone(),
            });
        }
    }

    /// Tells every worker to open its log files again; returns how many were told.
    pub(super) fn reopen_logs(&self) -> usize {
        let workers = self.current_workers();
        for w in &workers {
            w.tell(ToWorker::ReopenLogs);
        }
        tracing::info!(workers = workers.len(), "reopening log files");
        workers.len()
    }

    pub(super) fn current_workers(&self) -> Vec<Rc<Worker>> {
        self.current.borrow().iter().flatten().cloned().collect()
    }
}
