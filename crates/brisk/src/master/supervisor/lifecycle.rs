//! How workers end: an exit watched (restarted at once, or after a growing delay when they
//! keep dying young), a worker retired with a drain, a stop of all, a reload that replaces
//! each in turn.

use super::*;

impl Supervisor {
    /// `worker I of SERVER (pid P)`.
    pub(super) fn describe_worker(&self, w: &Worker) -> String {
        format!("{} (pid {})", self.describe(w.slot), w.pid)
    }

    pub(super) fn describe(&self, slot: usize) -> String {
        let (service, index) = self.slots[slot];
        format!("worker {index} of {}", self.plan.services[service].name)
    }

    pub(super) fn on_exit(self: &Rc<Self>, pid: i32, status: Option<ExitStatus>) {
        let Some(worker) = self.live.borrow_mut().remove(&pid) else {
            return;
        };
        self.exited.notify_waiters();
        let how = describe_status(status);
        let slot = worker.slot;
        let is_current = self.current.borrow()[slot]
            .as_ref()
            .is_some_and(|w| w.pid == pid);
        if worker.retiring.get() || self.stopping.get() || !is_current {
            tracing::debug!(pid, "{} exited: {how}", self.describe(slot));
            return;
        }
        let young = worker.started.elapsed() < YOUNG;
        let failures = {
            let mut f = self.failures.borrow_mut();
            f[slot] = if young { f[slot] + 1 } else { 0 };
            f[slot]
        };
        let delay = backoff(failures);
        self.restarts.set(self.restarts.get() + 1);
        tracing::warn!(
            pid,
            "{} exited unexpectedly ({how}); restarting in {} ms",
            self.describe(slot),
            delay.as_millis()
        );
        let sup = self.clone();
        tokio::task::spawn_local(async move {
            tokio::time::sleep(delay).await;
            if sup.stopping.get() {
                return;
            }
            match sup.spawn(slot) {
                Ok(w) => {
                    sup.current.borrow_mut()[slot] = Some(w.clone());
                    match w.wait_ready().await {
                        Ok(()) => sup.no_more_handovers_to(&w),
                        Err(e) => tracing::error!("{}: {e}", sup.describe(slot)),
                    }
                }
                Err(e) => {
                    tracing::error!("cannot restart {}: {e}", sup.describe(slot));
                    sup.current.borrow_mut()[slot] = None;
                }
            }
        });
    }

    /// Waits until `pid` has exited, or `timeout` passed; true if it exited.
    pub(super) async fn wait_exit(&self, pid: i32, timeout: Duration) -> bool {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let notified = self.exited.notified();
            if !self.live.borrow().contains_key(&pid) {
                return true;
            }
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                return !self.live.borrow().contains_key(&pid);
            }
        }
    }

    /// How long an old worker may drain: a graceful stop or reload lets in-flight work run
    /// for the graceful timeout; a plain reload still answers every request its connections
    /// have sent, for up to [`RELOAD_DRAIN`]; a plain stop closes everything at once.
    pub(super) fn drain_time(&self, graceful: bool, reloading: bool) -> Duration {
        match (graceful, reloading) {
            (true, _) => self.plan.graceful_timeout,
            (false, true) => RELOAD_DRAIN.min(self.plan.graceful_timeout),
            (false, false) => Duration::ZERO,
        }
    }

    /// Tells `worker` to stop after draining for `drain`, first handing its WebSocket
    /// connections that survive reloads to its slot's new worker if `hand_over`; true once it
    /// has exited (killed if it takes more than `drain` and a margin).
    pub(super) async fn retire(&self, worker: &Worker, drain: Duration, hand_over: bool) -> bool {
        worker.retiring.set(true);
        // Behind the connections on their way to it (a reload right after another).
        worker.tell_after_handovers(ToWorker::Stop {
            drain_ms: drain.as_millis() as u64,
            hand_over,
            to_another_master: hand_over && self.passes_to_new_master(),
        });
        if self.wait_exit(worker.pid, drain + STOP_MARGIN).await {
            return true;
        }
        tracing::warn!(pid = worker.pid, "worker did not stop in time; killing it");
        worker.kill();
        self.wait_exit(worker.pid, Duration::from_secs(2)).await
    }

    /// Stops every worker; kills those that do not exit in time. While another master holds
    /// the sockets ([`Plan::shared`]: an upgrade), they are left as they are, and with
    /// `hand_over` (the upgrade's old master) the workers first hand their connections that
    /// survive reloads to it.
    pub(crate) async fn stop_all(&self, graceful: bool, hand_over: bool) {
        self.stopping.set(true);
        let shared = self.plan.shared.get();
        // No new connection may be queued from here on (the last worker's close would reset
        // it); the workers hold the only other copies: each socket closes once the last of
        // them has taken what was queued on it. A Unix socket's file goes (a connect then
        // fails at once); a TCP socket drops new SYNs, and a graceful stop gives the
        // handshakes already under way a round trip to complete, while the workers accept.
        if !shared {
            for f in &self.plan.socket_files {
                f.remove_if_ours();
            }
        }
        let mut tcp = false;
        for l in self.plan.listeners.borrow_mut().drain(..) {
            if shared || self.plan.systemd_sockets.contains(&l.as_raw_fd()) {
                continue;
            }
            tcp |= matches!(l, Listener::Tcp(_));
            if let Err(e) = l.refuse_new_connections() {
                tracing::warn!(error = %e, "cannot stop a listener's handshakes before closing it");
            }
        }
        // (A Unix `connect` that found the file just before it went may still be queueing.)
        if graceful && !shared && (tcp || !self.plan.socket_files.is_empty()) {
            tokio::time::sleep(HANDSHAKE_GRACE).await;
        }
        let workers: Vec<_> = self.live.borrow().values().cloned().collect();
        let drain = self.drain_time(graceful, false);
        let retired = workers.iter().map(|w| self.retire(w, drain, hand_over));
        futures_util::future::join_all(retired).await;
    }

    /// Replaces every worker, one at a time: start the new one, wait until it is ready, then
    /// stop the old one.
    pub(super) async fn reload(
        self: &Rc<Self>,
        graceful: bool,
    ) -> std::result::Result<String, ReloadError> {
        let t0 = Instant::now();
        let _turn = self.replacing.lock().await;
        let mut replaced = 0;
        for slot in 0..self.slots.len() {
            if self.stopping.get() {
                return Err(ReloadError::Stopping);
            }
            let new = self.spawn(slot).map_err(|error| ReloadError::Spawn {
                worker: self.describe(slot),
                error,
            })?;
            if let Err(why) = new.wait_ready().await {
                new.retiring.set(true);
                new.kill();
                let worker = self.describe(slot);
                return Err(ReloadError::NotReady { worker, why });
            }
            let old = self.current.borrow_mut()[slot].replace(new.clone());
            if let Some(old) = old {
                self.retire(&old, self.drain_time(graceful, true), true)
                    .await;
            }
            self.no_more_handovers_to(&new);
            replaced += 1;
        }
        Ok(format!(
            "reloaded {replaced} workers in {:.1} s",
            t0.elapsed().as_secs_f64()
        ))
    }
}

/// Restart delay after `failures` young deaths in a row: none, then 100 ms doubling to 10 s.
fn backoff(failures: u32) -> Duration {
    if failures == 0 {
        return Duration::ZERO;
    }
    let ms = 100u64.saturating_mul(1 << (failures - 1).min(10));
    Duration::from_millis(ms).min(MAX_BACKOFF)
}

fn describe_status(status: Option<ExitStatus>) -> String {
    match status {
        None => "status unknown".into(),
        Some(s) => match (s.code(), s.signal()) {
            (Some(code), _) => format!("exit code {code}"),
            (None, Some(sig)) => format!(
                "killed by signal {sig}{}",
                if s.core_dumped() { ", core dumped" } else { "" }
            ),
            _ => s.to_string(),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_grows_and_caps() {
        assert_eq!(backoff(0), Duration::ZERO);
        assert_eq!(backoff(1), Duration::from_millis(100));
        assert_eq!(backoff(2), Duration::from_millis(200));
        assert_eq!(backoff(30), MAX_BACKOFF);
    }
}
