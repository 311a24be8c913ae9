//! The master's clock for the app's schedules: when each is due, whether a due time may start
//! a run (one at a time unless overlap is allowed), which runs are going in which worker, and
//! the counts `status` shows. The supervisor does the sleeping and the telling.

use std::cell::RefCell;
use std::time::{SystemTime, UNIX_EPOCH};

use crate::ipc::ScheduleStatus;
use crate::schedule::Schedule;

/// What happened to one schedule so far.
#[derive(Default)]
struct State {
    runs: u64,
    failures: u64,
    skipped: u64,
    /// Runs going now: (worker pid, run id).
    running: Vec<(i32, u64)>,
    next: Option<SystemTime>,
    last_run: u64,
}

/// The app's schedules and their states.
pub(crate) struct Scheduler {
    schedules: Vec<Schedule>,
    states: RefCell<Vec<State>>,
    started: SystemTime,
}

impl Scheduler {
    pub(crate) fn new(schedules: Vec<Schedule>) -> Self {
        let states = schedules.iter().map(|_| State::default()).collect();
        Scheduler {
            schedules,
            states: RefCell::new(states),
            started: SystemTime::now(),
        }
    }

    /// How many schedules there are.
    pub(crate) fn len(&self) -> usize {
        self.schedules.len()
    }

    /// Schedule `i`'s next due time from now (kept for `status`).
    pub(crate) fn next_due(&self, i: usize) -> Option<SystemTime> {
        let next = self.schedules[i].next_after(SystemTime::now(), self.started);
        self.states.borrow_mut()[i].next = next;
        next
    }

    /// A due time of schedule `i` came: the run id to send to worker `pid`, or `None` when
    /// it is skipped (no worker, or the previous run still going and no overlap).
    pub(crate) fn begin_run(&self, i: usize, pid: Option<i32>) -> Option<u64> {
        let s = &self.schedules[i];
        let mut states = self.states.borrow_mut();
        let state = &mut states[i];
        let Some(pid) = pid else {
            state.skipped += 1;
            tracing::warn!(schedule = %s.name, "due, but its worker is not running: skipped");
            return None;
        };
        if !s.overlap && !state.running.is_empty() {
            state.skipped += 1;
            if state.skipped.is_power_of_two() {
                tracing::warn!(
                    schedule = %s.name,
                    skipped = state.skipped,
                    "due while its previous run is still going: skipped"
                );
            }
            return None;
        }
        state.last_run += 1;
        state.running.push((pid, state.last_run));
        Some(state.last_run)
    }

    /// Run `run` of schedule `job` ended in worker `pid`.
    pub(crate) fn end_run(&self, pid: i32, job: usize, run: u64, error: Option<String>) {
        let mut states = self.states.borrow_mut();
        let Some(state) = states.get_mut(job) else {
            return;
        };
        let before = state.running.len();
        state.running.retain(|r| *r != (pid, run));
        if state.running.len() == before {
            return;
        }
        state.runs += 1;
        if let Some(error) = error {
            state.failures += 1;
            tracing::error!(schedule = %self.schedules[job].name, "run failed: {error}");
        }
    }

    /// Worker `pid` is gone: its runs that were going count as failed.
    pub(crate) fn worker_gone(&self, pid: i32) {
        let mut states = self.states.borrow_mut();
        for (state, s) in states.iter_mut().zip(&self.schedules) {
            let lost = state.running.iter().filter(|r| r.0 == pid).count() as u64;
            if lost > 0 {
                state.running.retain(|r| r.0 != pid);
                state.runs += lost;
                state.failures += lost;
                tracing::error!(schedule = %s.name, pid, "its worker exited during a run");
            }
        }
    }

    /// What `status` shows.
    pub(crate) fn status(&self) -> Vec<ScheduleStatus> {
        let states = self.states.borrow();
        self.schedules
            .iter()
            .zip(states.iter())
            .map(|(s, st)| ScheduleStatus {
                name: s.name.clone(),
                spec: s.spec.clone(),
                next_unix_s: st
                    .next
                    .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
                    .map(|d| d.as_secs()),
                runs: st.runs,
                failures: st.failures,
                skipped: st.skipped,
                running: st.running.len() as u64,
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn a_run_at_a_time_unless_overlap_and_lost_runs_count_as_failed() {
        let every = |name: &str| Schedule::every(name, Duration::from_secs(1), |_| async {});
        let s = Scheduler::new(vec![every("one"), every("many").overlap(true)]);
        assert_eq!(s.begin_run(0, Some(7)), Some(1));
        assert_eq!(s.begin_run(0, Some(7)), None);
        assert_eq!(s.begin_run(0, None), None);
        assert_eq!(s.begin_run(1, Some(7)), Some(1));
        assert_eq!(s.begin_run(1, Some(7)), Some(2));
        s.end_run(7, 0, 1, None);
        // A second report of the same run counts nothing.
        s.end_run(7, 0, 1, Some("again".into()));
        assert_eq!(s.begin_run(0, Some(8)), Some(2));
        s.end_run(7, 1, 1, Some("boom".into()));
        s.worker_gone(7);
        let st = s.status();
        assert_eq!(
            (st[0].runs, st[0].failures, st[0].skipped, st[0].running),
            (1, 0, 2, 1)
        );
        assert_eq!(
            (st[1].runs, st[1].failures, st[1].skipped, st[1].running),
            (2, 2, 0, 0)
        );
        assert!(s.next_due(0).is_some());
        assert!(s.status()[0].next_unix_s.is_some());
    }
}
