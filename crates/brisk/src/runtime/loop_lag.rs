//! When a worker samples its event-loop lag, without waking an idle loop to do it and without
//! a task of its own running at every wake-up of a busy one.
//!
//! A probe on a 10 ms timer costs a worker that holds quiet connections 100 wake-ups a second
//! (on a VM about 1 % of a core per worker; 50 workers on one core spent half of it there).
//! Instead the worker runtime calls [`after_unpark`] each time its loop wakes up and
//! [`before_park`] each time it goes back to sleep: the time between the two is one turn of
//! the loop, which is how long anything that became ready at the wake-up waited at most (a
//! handler that blocks the loop shows in full). The hooks keep the longest turn; the probe
//! task hands it out as a sample at most once per [`BUSY_TICK`], woken by the first wake-up
//! after that (so the probe runs at most 100 times a second, not at every wake-up: on
//! `/updates?queries=1` a wake-up serves one or two requests). The probe's timer covers a loop
//! that stops sleeping: due [`IDLE_TICK`] after the last sample, then every [`BUSY_TICK`] for
//! as long as the loop does not sleep (it wakes nothing then: the loop is awake), and late by
//! however long the loop kept it waiting. A quiet loop wakes for the probe every
//! [`IDLE_TICK`].
//!
//! What it misses: without the hooks (another runtime), the timer alone samples every
//! [`BUSY_TICK`], and a stall in a turn that ends in sleep is not seen.

use std::cell::Cell;
use std::rc::Rc;
use std::time::{Duration, Instant};

use tokio::sync::Notify;

/// The shortest time between two samples.
pub(crate) const BUSY_TICK: Duration = Duration::from_millis(10);
/// The longest time between two samples of a loop that sleeps between its turns.
pub(crate) const IDLE_TICK: Duration = Duration::from_millis(250);

/// What the hooks and the probe share on this thread.
#[derive(Default)]
struct LoopTurns {
    /// When the turn under way began (the loop's last wake-up), until it goes to sleep.
    began: Cell<Option<Instant>>,
    /// The longest turn that ended since the probe's last sample.
    longest: Cell<Duration>,
    /// When the next sample is due; `None` while the probe is not watching, or once it has
    /// been woken for that sample.
    due: Cell<Option<Instant>>,
    /// Wakes the probe.
    probe: Rc<Notify>,
    /// How many times the probe ran (the tests count them).
    #[cfg(test)]
    looks: Cell<u64>,
}

thread_local! {
    /// Per thread, not per worker: tokio's park and unpark hooks are given no context, and
    /// they run on the runtime's one thread.
    static TURNS: LoopTurns = LoopTurns::default();
}

/// The worker runtime's `on_thread_unpark` hook: the loop just woke up, a turn begins. Wakes
/// the probe if a sample is due (it then runs after the tasks woken with it).
pub(crate) fn after_unpark() {
    TURNS.with(|t| {
        let now = Instant::now();
        t.began.set(Some(now));
        if t.due.get().is_some_and(|due| now >= due) {
            t.due.set(None);
            t.probe.notify_one();
        }
    });
}

/// The worker runtime's `on_thread_park` hook: the loop is going to sleep, its turn ends.
pub(crate) fn before_park() {
    TURNS.with(|t| {
        if let Some(began) = t.began.take() {
            t.longest.set(t.longest.get().max(began.elapsed()));
        }
    });
}

/// Watches the loop for as long as it runs and hands `sample` a lag sample at most once per
/// [`BUSY_TICK`]: the longest turn the loop took since the last one (or how late the
/// probe's timer ran, if more), as the instant the probe should have run (it ran now, late by
/// that much).
pub(crate) async fn watch(sample: impl Fn(Instant)) {
    let probe = TURNS.with(|t| t.probe.clone());
    TURNS.with(|t| t.due.set(Some(Instant::now() + BUSY_TICK)));
    let timer = tokio::time::sleep(BUSY_TICK);
    tokio::pin!(timer);
    loop {
        let woken = probe.notified();
        let (now, late) = tokio::select! {
            biased;
            _ = woken => {
                // The loop woke up after a sample came due. The timer is only for a loop that
                // stops sleeping, so it waits long: a shorter one would wake the loop.
                let now = Instant::now();
                timer.as_mut().reset((now + IDLE_TICK).into());
                (now, Duration::ZERO)
            }
            _ = &mut timer => {
                // No wake-up since the last sample (the first would have come first): the
                // loop never slept, or the hooks are not installed. Late by the time it
                // waited for the loop; looked at every tick from now on.
                let now = Instant::now();
                let late = now.saturating_duration_since(timer.deadline().into_std());
                timer.as_mut().reset((now + BUSY_TICK).into());
                (now, late)
            }
        };
        let longest = TURNS.with(|t| {
            #[cfg(test)]
            t.looks.set(t.looks.get() + 1);
            t.due.set(Some(now + BUSY_TICK));
            t.longest.replace(Duration::ZERO)
        });
        sample(now - longest.max(late));
    }
}

#[cfg(test)]
mod tests {
    use std::cell::RefCell;

    use super::*;

    thread_local! {
        /// How many times the test runtime's loop woke up.
        static WAKE_UPS: Cell<u64> = const { Cell::new(0) };
    }

    fn wakes() -> u64 {
        WAKE_UPS.with(|n| n.get())
    }

    /// Runs `scenario` on a worker-like runtime (the hook installed, tasks on a local set)
    /// beside the probe, and returns the probe's samples: when each was taken, and its lag.
    fn samples_during(
        scenario: impl std::future::Future<Output = ()> + 'static,
    ) -> Vec<(Instant, Duration)> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .on_thread_unpark(|| {
                WAKE_UPS.with(|n| n.set(n.get() + 1));
                after_unpark();
            })
            .on_thread_park(before_park)
            .build()
            .unwrap();
        let samples = Rc::new(RefCell::new(Vec::new()));
        let seen = samples.clone();
        let local = tokio::task::LocalSet::new();
        local.block_on(&rt, async move {
            tokio::task::spawn_local(watch(move |due: Instant| {
                let now = Instant::now();
                seen.borrow_mut()
                    .push((now, now.saturating_duration_since(due)));
            }));
            tokio::task::spawn_local(scenario).await.unwrap();
        });
        let taken = samples.borrow().clone();
        taken
    }

    #[test]
    fn an_idle_loop_is_woken_a_few_times_a_second_not_a_hundred() {
        let woke = Rc::new(Cell::new(0));
        let seen = woke.clone();
        let samples = samples_during(async move {
            let before = wakes();
            tokio::time::sleep(Duration::from_secs(1)).await;
            seen.set(wakes() - before);
        });
        // The probe's timer every 250 ms (tokio's timer wheel may wake the loop once more on
        // the way to each): 4 to 8. A 10 ms timer made 100 (183 with tokio's extra wake-ups).
        let woke = woke.get();
        assert!(woke <= 20, "{woke} wake-ups in 1 s");
        assert!(samples.len() >= 2, "{} samples", samples.len());
    }

    #[test]
    fn a_handler_that_blocks_a_quiet_loop_shows_in_full() {
        let samples = samples_during(async {
            tokio::time::sleep(Duration::from_millis(300)).await;
            // A handler that blocks the loop, woken on a quiet loop.
            std::thread::sleep(Duration::from_millis(150));
            tokio::time::sleep(Duration::from_millis(50)).await;
        });
        let worst = samples.iter().map(|s| s.1).max().unwrap();
        assert!(worst >= Duration::from_millis(140), "{samples:?}");
    }

    #[test]
    fn a_stall_right_after_a_look_shows_too() {
        let samples = samples_during(async {
            for _ in 0..3 {
                // Two wake-ups 3 ms apart: the second one's handler blocks.
                tokio::time::sleep(Duration::from_millis(40)).await;
                tokio::time::sleep(Duration::from_millis(3)).await;
                std::thread::sleep(Duration::from_millis(60));
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        });
        let stalls = samples
            .iter()
            .filter(|s| s.1 >= Duration::from_millis(55))
            .count();
        assert_eq!(stalls, 3, "{samples:?}");
    }

    #[test]
    fn a_loop_that_never_sleeps_is_sampled_every_tick_and_a_block_in_it_shows() {
        let samples = samples_during(async {
            let start = Instant::now();
            let mut blocked = false;
            while start.elapsed() < Duration::from_millis(400) {
                if !blocked && start.elapsed() > Duration::from_millis(200) {
                    std::thread::sleep(Duration::from_millis(100));
                    blocked = true;
                }
                // Busy: always ready again, so the loop never sleeps.
                tokio::task::yield_now().await;
            }
        });
        let busy = samples.len();
        assert!(busy >= 15, "{busy} samples in 400 ms of a busy loop");
        let worst = samples.iter().map(|s| s.1).max().unwrap();
        assert!(worst >= Duration::from_millis(90), "{samples:?}");
    }

    #[test]
    fn a_busy_loop_that_sleeps_between_turns_runs_the_probe_per_tick_not_per_wake_up() {
        let woke = Rc::new(Cell::new(0));
        let looked = Rc::new(Cell::new(0));
        let (seen_woke, seen_looked) = (woke.clone(), looked.clone());
        let samples = samples_during(async move {
            // Another thread wakes the loop 2,000 times in about 200 ms, one message at a time.
            let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
            let feeder = std::thread::spawn(move || {
                for i in 0..2_000u32 {
                    if tx.send(i).is_err() {
                        return;
                    }
                    std::thread::sleep(Duration::from_micros(100));
                }
            });
            let (before, looks_before) = (wakes(), TURNS.with(|t| t.looks.get()));
            while rx.recv().await.is_some() {}
            seen_woke.set(wakes() - before);
            seen_looked.set(TURNS.with(|t| t.looks.get()) - looks_before);
            feeder.join().unwrap();
        });
        let (woke, looked) = (woke.get(), looked.get());
        assert!(
            woke >= 500,
            "the loop woke only {woke} times: the test did not test"
        );
        // One look per 10 ms of the run (at most ~40 on a slow machine), not one per wake-up.
        assert!(
            looked <= 60,
            "the probe ran {looked} times for {woke} wake-ups"
        );
        assert!(!samples.is_empty());
    }

    #[test]
    fn a_stall_in_a_task_woken_later_in_the_turn_shows_too() {
        let samples = samples_during(async {
            tokio::time::sleep(Duration::from_millis(30)).await;
            // Woken by this task during the turn, not by the wake-up: it runs after the probe.
            tokio::task::spawn_local(async {
                std::thread::sleep(Duration::from_millis(80));
            })
            .await
            .unwrap();
            tokio::time::sleep(Duration::from_millis(30)).await;
        });
        let worst = samples.iter().map(|s| s.1).max().unwrap();
        assert!(worst >= Duration::from_millis(75), "{samples:?}");
    }
}
