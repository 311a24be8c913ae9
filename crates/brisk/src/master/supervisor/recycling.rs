//! Worker recycling (see [`crate::recycle`]): the master replaces a worker that asked for it
//! (it served its `max_requests`) or whose private memory passed its server's `max_memory`,
//! one slot as a graceful `reload` replaces each: the new worker first, then the old one
//! drains and exits. Recycles and reloads take turns (`Supervisor::replacing`).

use std::rc::Rc;
use std::time::{Duration, Instant};

use super::{Supervisor, Worker};
use crate::recycle::RecycleCause;

/// How long after a failed replacement (the new worker did not start) the master tries
/// again; the old worker serves meanwhile.
const RETRY_AFTER: Duration = Duration::from_secs(10);

/// A worker's recycling state, as the master keeps it.
#[derive(Debug, Default)]
pub(super) struct RecycleState {
    /// Why the worker is to be replaced, once it is.
    wanted: std::cell::Cell<Option<RecycleCause>>,
    /// A replacement is under way.
    under_way: std::cell::Cell<bool>,
    /// The last replacement failed: not before then.
    not_before: std::cell::Cell<Option<Instant>>,
}

impl Supervisor {
    /// Worker `pid` is to be replaced for `cause` (once: a later cause changes nothing).
    pub(super) fn want_recycle(self: &Rc<Self>, pid: i32, cause: RecycleCause) {
        let Some(worker) = self.live.borrow().get(&pid).cloned() else {
            return;
        };
        if worker.recycle.wanted.get().is_none() {
            worker.recycle.wanted.set(Some(cause));
        }
        self.try_recycle(&worker);
    }

    /// Once a second: replaces the current workers whose private memory passed their server's
    /// `max_memory`, and tries again those whose replacement failed a while ago.
    pub(super) fn check_recycling(self: &Rc<Self>, current: &[Rc<Worker>]) {
        for w in current {
            let (service, _) = self.slots[w.slot];
            if let Some(max) = self.plan.services[service].recycle.max_memory {
                let private = crate::process_sample::private_bytes(w.pid);
                if private.is_some_and(|b| b > max) && w.recycle.wanted.get().is_none() {
                    tracing::info!(
                        pid = w.pid,
                        private_mib = private.unwrap_or(0) >> 20,
                        max_mib = max >> 20,
                        "{} passed max_memory: replacing it",
                        self.describe(w.slot)
                    );
                    w.recycle.wanted.set(Some(RecycleCause::Memory));
                }
            }
            if w.recycle.wanted.get().is_some() {
                self.try_recycle(w);
            }
        }
    }

    /// Starts replacing `worker` unless a replacement is under way, failed too recently, or
    /// the master is stopping.
    fn try_recycle(self: &Rc<Self>, worker: &Rc<Worker>) {
        let Some(cause) = worker.recycle.wanted.get() else {
            return;
        };
        let waiting = worker
            .recycle
            .not_before
            .get()
            .is_some_and(|t| Instant::now() < t);
        if worker.recycle.under_way.get() || waiting || self.stopping.get() {
            return;
        }
        worker.recycle.under_way.set(true);
        let (sup, worker) = (self.clone(), worker.clone());
        tokio::task::spawn_local(async move {
            sup.recycle(&worker, cause).await;
            worker.recycle.under_way.set(false);
        });
    }

    /// Replaces `old` (if it is still its slot's current worker) for `cause`: starts the new
    /// worker, waits until it is ready, then retires the old one as a graceful reload does.
    async fn recycle(self: &Rc<Self>, old: &Rc<Worker>, cause: RecycleCause) {
        let slot = old.slot;
        let replaced = {
            let _turn = self.replacing.lock().await;
            let is_current = self.current.borrow()[slot]
                .as_ref()
                .is_some_and(|w| w.pid == old.pid);
            if !is_current || self.stopping.get() {
                return;
            }
            let new = match self.spawn(slot) {
                Ok(new) => new,
                Err(e) => {
                    self.recycle_failed(old, &format!("cannot start a new one: {e}"));
                    return;
                }
            };
            if let Err(e) = new.wait_ready().await {
                new.retiring.set(true);
                new.kill();
                self.recycle_failed(old, &e.to_string());
                return;
            }
            if self.stopping.get() {
                // The stop retires the new worker with the others.
                return;
            }
            self.current.borrow_mut()[slot].replace(new.clone());
            self.recycles.borrow_mut().add(cause);
            new
        };
        tracing::info!(
            old = old.pid,
            new = replaced.pid,
            "recycled {} ({})",
            self.describe(slot),
            cause.label()
        );
        self.retire(old, self.drain_time(true, true), true).await;
        self.no_more_handovers_to(&replaced);
    }

    /// A replacement of `old` failed for `why`: it keeps serving, and is tried again later.
    fn recycle_failed(&self, old: &Worker, why: &str) {
        tracing::error!(
            pid = old.pid,
            "cannot recycle {}: {why}; it keeps serving, trying again in {} s",
            self.describe(old.slot),
            RETRY_AFTER.as_secs()
        );
        old.recycle
            .not_before
            .set(Some(Instant::now() + RETRY_AFTER));
    }
}
