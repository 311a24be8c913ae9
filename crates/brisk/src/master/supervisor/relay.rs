//! Broadcasts relayed between workers (and from other instances), and messages to every
//! current worker.

use super::*;

/// What relaying broadcasts keeps.
#[derive(Default)]
pub(super) struct Relaying {
    /// The number of the last broadcast from another instance relayed to the workers.
    pub(super) bus_seq: Cell<u64>,
    /// Workers gone while another kept broadcasts: their groups leave the bus once none does.
    pub(super) gone_holders: RefCell<Vec<i32>>,
    /// Broadcasts not relayed to a stalled worker.
    pub(super) dropped_broadcasts: Cell<u64>,
}

impl Supervisor {
    /// Hands a broadcast to `topic` from worker `from` to every other current worker; a
    /// worker that has [`MAX_QUEUED_BROADCASTS`] waiting already (it is stalled) misses it.
    pub(super) fn relay_broadcast(
        &self,
        from: i32,
        topic: &str,
        stamp: Stamp,
        broadcast: &Broadcast,
    ) {
        self.relay_to(topic, stamp, broadcast, |w| w.pid != from);
        self.bridge_broadcast(topic, stamp, broadcast);
    }

    /// Hands a broadcast to `topic` to the current workers that `takes`.
    pub(super) fn relay_to(
        &self,
        topic: &str,
        stamp: Stamp,
        broadcast: &Broadcast,
        takes: impl Fn(&Worker) -> bool,
    ) {
        for w in self.current_workers() {
            if !takes(&w) {
                continue;
            }
            let queued = &w.channel.queued;
            if queued.get() + broadcast.len() > MAX_QUEUED_BROADCASTS {
                let dropped = self.relaying.dropped_broadcasts.get() + 1;
                self.relaying.dropped_broadcasts.set(dropped);
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
            queued.set(queued.get() + broadcast.len());
            let _ = w.channel.tx.send(Outgoing::Broadcast {
                topic: topic.to_string(),
                stamp,
                broadcast: broadcast.clone(),
            });
        }
    }

    /// Worker `pid` exited: it holds no group any more. While a worker that may have been
    /// handed its members keeps broadcasts (it has not yet said which groups they joined),
    /// its groups stay subscribed on the cluster bus: dropped now, a group whose members
    /// all moved would be unsubscribed, and what other instances send it lost, until the new
    /// worker's report came.
    pub(super) fn bus_worker_gone(&self, pid: i32) {
        let Some(bus) = &self.cluster else {
            return;
        };
        match self.current_workers().iter().any(|w| w.keeping.get()) {
            true => self.relaying.gone_holders.borrow_mut().push(pid),
            false => bus.worker_gone(pid),
        }
    }

    /// Worker `pid` took `NoMoreHandovers`, after reporting the groups of the connections
    /// handed to it: from now on it gets what comes from other instances for those only,
    /// and once no worker keeps broadcasts, the groups of those gone meanwhile are dropped.
    pub(super) fn keeping_stopped(&self, pid: i32) {
        if let Some(w) = self.live.borrow().get(&pid) {
            w.keeping.set(false);
        }
        let Some(bus) = &self.cluster else {
            return;
        };
        if self.current_workers().iter().any(|w| w.keeping.get()) {
            return;
        }
        for gone in self.relaying.gone_holders.take() {
            bus.worker_gone(gone);
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
