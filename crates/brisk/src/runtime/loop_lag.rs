//! When a worker samples its event-loop lag, without waking an idle loop to do it.
//!
//! A probe on a 10 ms timer costs a worker that holds quiet connections 100 wake-ups a second
//! (on a VM about 1 % of a core per worker; 50 workers on one core spent half of it there).
//! Instead the worker runtime calls [`after_unpark`] each time its loop wakes up, and the probe
//! looks then: the time from the wake-up to the probe, which runs after the tasks woken with
//! it, so a handler that blocks the loop shows in full. The worst of these goes out as a sample
//! at most once per [`BUSY_TICK`]. The probe's timer only covers a loop that stops sleeping: it is due
//! [`IDLE_TICK`] after the last look, then every [`BUSY_TICK`] for as long as the loop does not
//! sleep (it wakes nothing then: the loop is awake), and is late by however long the loop kept
//! it waiting. A quiet loop wakes for the probe every [`IDLE_TICK`].
//!
//! What it misses: a stall shorter than [`IDLE_TICK`] in a task that runs after the probe in
//! the same turn of the loop (woken by another task, or spawned on the runtime rather than the
//! worker's local set), unless the loop then never sleeps. Without the hook (another runtime),
//! the timer alone samples every [`BUSY_TICK`].

use std::cell::Cell;
use std::rc::Rc;
use std::time::{Duration, Instant};

use tokio::sync::Notify;

/// The shortest time between two samples.
pub(crate) const BUSY_TICK: Duration = Duration::from_millis(10);
/// The longest time between two samples of a loop that sleeps between its turns.
pub(crate) const IDLE_TICK: Duration = Duration::from_millis(250);

/// What the hook and the probe share on this thread.
#[derive(Default)]
struct LoopWakes {
    /// When the loop woke up, for the probe's next look (the earliest wake it has not seen).
    at: Cell<Option<Instant>>,
    /// Wakes the probe.
    probe: Rc<Notify>,
}

thread_local! {
    static WAKES: LoopWakes = LoopWakes::default();
}

/// The worker runtime's `on_thread_unpark` hook: the loop just woke up. Notes when, and wakes
/// the probe to look: it runs after the tasks woken with it.
pub(crate) fn after_unpark() {
    WAKES.with(|w| {
        if w.at.get().is_none() {
            w.at.set(Some(Instant::now()));
            w.probe.notify_one();
        }
    });
}

/// Watches the loop for as long as it runs and hands `sample` a lag sample at most once per
/// [`BUSY_TICK`]: the worst lag it saw since the last one, as the instant the probe should
/// have run (it ran now, late by that much).
pub(crate) async fn watch(sample: impl Fn(Instant)) {
    let probe = WAKES.with(|w| w.probe.clone());
    let mut last_sample = Instant::now();
    let mut worst = Duration::ZERO;
    let timer = tokio::time::sleep(BUSY_TICK);
    tokio::pin!(timer);
    loop {
        let woken = probe.notified();
        let now = tokio::select! {
            biased;
            _ = woken => {
                // The loop woke up: how long it took to get here. The timer is only for a
                // loop that stops sleeping, so it waits long: a shorter one would wake the loop.
                let now = Instant::now();
                let since = WAKES.with(|w| w.at.take()).unwrap_or(now);
                worst = worst.max(now.saturating_duration_since(since));
                timer.as_mut().reset((now + IDLE_TICK).into());
                now
            }
            _ = &mut timer => {
                // No wake-up since the last look (any would have come first): the loop never
                // slept, or the hook is not installed. Late by the time it waited for the loop;
                // looked at every tick from now on.
                let now = Instant::now();
                worst = worst.max(now.saturating_duration_since(timer.deadline().into_std()));
                timer.as_mut().reset((now + BUSY_TICK).into());
                now
            }
        };
        if now >= last_sample + BUSY_TICK {
            sample(now - worst);
            worst = Duration::ZERO;
            last_sample = now;
        }
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
}
