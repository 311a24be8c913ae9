//! [`Timers`]: a worker's timers on its event loop, one-shot or repeating, millisecond
//! resolution; the worker's context holds them, and `brisk::timer` reaches them from the
//! code a worker runs.
//!
//! All timers of a worker share one driver task and one ordered map keyed by deadline, so a
//! timer costs a map entry and its boxed callback (well under 200 bytes), not a task of its own:
//! 100,000 live timers stay cheap to add, fire and delete.

use std::cell::{Cell, RefCell};
use std::collections::{BTreeSet, HashMap};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::rc::Rc;
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

/// Identifies a timer for `brisk::timer::del`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TimerId(u64);

type Callback = Box<dyn FnMut()>;

struct Entry {
    deadline: Instant,
    interval: Option<Duration>,
    callback: Callback,
}

/// A worker's timers.
#[derive(Default)]
pub(crate) struct Timers {
    next_id: Cell<u64>,
    entries: RefCell<HashMap<u64, Entry>>,
    queue: RefCell<BTreeSet<(Instant, u64)>>,
    /// The id whose callback runs now, and whether it was deleted meanwhile.
    running: Cell<Option<(u64, bool)>>,
    rearm: Notify,
    driver_started: Cell<bool>,
    /// Panics caught in timer callbacks.
    panics: Cell<u64>,
}

impl Timers {
    /// Adds a timer that calls `callback` after `interval`, and again every `interval` if
    /// `repeat`.
    ///
    /// An interval under one millisecond is raised to one. A panic in the callback is caught,
    /// counted and logged; a repeating timer goes on.
    pub(crate) fn add(
        self: &Rc<Self>,
        interval: Duration,
        repeat: bool,
        callback: impl FnMut() + 'static,
    ) -> TimerId {
        let interval = interval.max(Duration::from_millis(1));
        let id = self.next_id.get() + 1;
        self.next_id.set(id);
        let deadline = Instant::now() + interval;
        self.entries.borrow_mut().insert(
            id,
            Entry {
                deadline,
                interval: repeat.then_some(interval),
                callback: Box::new(callback),
            },
        );
        let earliest = {
            let mut q = self.queue.borrow_mut();
            q.insert((deadline, id));
            q.first() == Some(&(deadline, id))
        };
        if !self.driver_started.replace(true) {
            tokio::task::spawn_local(drive(self.clone()));
        } else if earliest {
            self.rearm.notify_one();
        }
        TimerId(id)
    }

    /// Deletes a timer. Returns false if it does not exist (already fired, or deleted).
    pub(crate) fn del(&self, id: TimerId) -> bool {
        if let Some((running, _)) = self.running.get() {
            if running == id.0 {
                self.running.set(Some((running, true)));
                return true;
            }
        }
        match self.entries.borrow_mut().remove(&id.0) {
            Some(e) => {
                self.queue.borrow_mut().remove(&(e.deadline, id.0));
                true
            }
            None => false,
        }
    }

    /// Deletes every timer.
    pub(crate) fn del_all(&self) {
        self.entries.borrow_mut().clear();
        self.queue.borrow_mut().clear();
        if let Some((id, _)) = self.running.get() {
            self.running.set(Some((id, true)));
        }
    }

    /// How many timers are live.
    pub(crate) fn count(&self) -> usize {
        self.entries.borrow().len()
    }

    /// Panics caught in timer callbacks.
    pub(crate) fn panics(&self) -> u64 {
        self.panics.get()
    }
}

async fn drive(t: Rc<Timers>) {
    loop {
        let next = t.queue.borrow().first().map(|(d, _)| *d);
        match next {
            None => t.rearm.notified().await,
            Some(deadline) => {
                tokio::select! {
                    _ = tokio::time::sleep_until(deadline) => fire_due(&t),
                    _ = t.rearm.notified() => {}
                }
            }
        }
    }
}

fn fire_due(t: &Timers) {
    let now = Instant::now();
    loop {
        let due = {
            let mut q = t.queue.borrow_mut();
            match q.first() {
                Some(&(deadline, id)) if deadline <= now => {
                    q.pop_first();
                    id
                }
                _ => break,
            }
        };
        let Some(mut entry) = t.entries.borrow_mut().remove(&due) else {
            continue;
        };
        t.running.set(Some((due, false)));
        if catch_unwind(AssertUnwindSafe(&mut entry.callback)).is_err() {
            t.panics.set(t.panics.get() + 1);
            tracing::error!(timer = due, "timer callback panicked");
        }
        let deleted = matches!(t.running.take(), Some((_, true)));
        if let (Some(interval), false) = (entry.interval, deleted) {
            // Keep the cadence; if we fell more than an interval behind, restart from now.
            let mut next = entry.deadline + interval;
            if next <= now {
                next = now + interval;
            }
            entry.deadline = next;
            t.queue.borrow_mut().insert((next, due));
            t.entries.borrow_mut().insert(due, entry);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs `f` on a current-thread runtime (a worker's) whose clock is paused: time moves only
    /// when every task waits, straight to the next deadline, so what fires when is exact and
    /// does not depend on how busy the machine is.
    fn paused<F: std::future::Future>(f: impl FnOnce(Rc<Timers>) -> F) -> F::Output {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .start_paused(true)
            .build()
            .unwrap();
        tokio::task::LocalSet::new().block_on(&rt, f(Rc::new(Timers::default())))
    }

    /// Sleeps until `ms` milliseconds after `start` (on the paused clock).
    async fn at(start: Instant, ms: u64) {
        tokio::time::sleep_until(start + Duration::from_millis(ms)).await;
    }

    fn counter() -> (Rc<Cell<u32>>, impl FnMut() + 'static) {
        let n = Rc::new(Cell::new(0));
        let m = n.clone();
        (n, move || m.set(m.get() + 1))
    }

    #[test]
    fn one_shot_repeat_and_delete() {
        paused(|t| async move {
            let start = Instant::now();
            let (fired, one_shot) = counter();
            let (ticks, tick) = counter();
            t.add(Duration::from_millis(20), false, one_shot);
            let rep = t.add(Duration::from_millis(10), true, tick);
            let gone = t.add(Duration::from_millis(5), false, || {
                panic!("deleted timer fired")
            });
            assert!(t.del(gone));
            assert!(!t.del(gone));
            // Checked a millisecond before and after each deadline.
            at(start, 9).await;
            assert_eq!((fired.get(), ticks.get()), (0, 0));
            at(start, 11).await;
            assert_eq!((fired.get(), ticks.get()), (0, 1));
            at(start, 19).await;
            assert_eq!((fired.get(), ticks.get()), (0, 1));
            at(start, 21).await;
            assert_eq!((fired.get(), ticks.get()), (1, 2));
            at(start, 105).await;
            assert_eq!(fired.get(), 1, "a one-shot fires once");
            assert_eq!(ticks.get(), 10, "every 10 ms: at 10, 20, ..., 100");
            assert_eq!(t.count(), 1);
            assert!(t.del(rep));
            assert_eq!(t.count(), 0);
            at(start, 500).await;
            assert_eq!(ticks.get(), 10, "a deleted timer does not fire");
            assert_eq!(t.panics(), 0);
        });
    }

    #[test]
    fn a_repeating_timer_can_delete_itself_and_panics_are_caught() {
        paused(|t| async move {
            let start = Instant::now();
            let n = Rc::new(Cell::new(0));
            let id = Rc::new(Cell::new(None));
            let (n2, id2, t2) = (n.clone(), id.clone(), t.clone());
            let me = t.add(Duration::from_millis(2), true, move || {
                n2.set(n2.get() + 1);
                if n2.get() == 3 {
                    t2.del(id2.get().unwrap());
                }
            });
            id.set(Some(me));
            t.add(Duration::from_millis(1), false, || panic!("boom"));
            at(start, 5).await;
            assert_eq!(
                (n.get(), t.panics()),
                (2, 1),
                "ticks at 2 and 4; the panic at 1"
            );
            at(start, 7).await;
            assert_eq!(n.get(), 3, "the third tick at 6");
            at(start, 100).await;
            assert_eq!(n.get(), 3, "deleted itself after the third tick");
            assert_eq!(t.panics(), 1);
            assert_eq!(t.count(), 0);
        });
    }

    #[test]
    fn a_sooner_timer_added_later_wakes_the_driver_earlier() {
        paused(|t| async move {
            let start = Instant::now();
            let (late, late_cb) = counter();
            let (soon, soon_cb) = counter();
            t.add(Duration::from_secs(60), false, late_cb);
            // Let the driver go to sleep until the 60 s deadline.
            at(start, 1).await;
            t.add(Duration::from_millis(10), false, soon_cb);
            at(start, 10).await;
            assert_eq!(soon.get(), 0);
            at(start, 12).await;
            assert_eq!(
                (soon.get(), late.get()),
                (1, 0),
                "fired at 11 ms, not after 60 s"
            );
            at(start, 60_002).await;
            assert_eq!(late.get(), 1);
        });
    }

    #[test]
    fn a_repeating_timer_that_falls_behind_restarts_from_now() {
        paused(|t| async move {
            let start = Instant::now();
            let ticks = Rc::new(RefCell::new(Vec::new()));
            let seen = ticks.clone();
            t.add(Duration::from_millis(10), true, move || {
                seen.borrow_mut().push(start.elapsed().as_millis());
            });
            at(start, 25).await;
            // The clock jumps 47 ms at once, as when the worker is busy elsewhere: the tick due
            // at 30 runs late, at 72, and the next is 10 ms after it, not a burst to catch up.
            tokio::time::advance(Duration::from_millis(47)).await;
            at(start, 95).await;
            assert_eq!(*ticks.borrow(), [10, 20, 72, 82, 92]);
        });
    }

    #[test]
    fn intervals_under_a_millisecond_are_raised_to_one_and_del_all_clears() {
        paused(|t| async move {
            let start = Instant::now();
            let (fired, cb) = counter();
            t.add(Duration::ZERO, false, cb);
            t.add(Duration::from_millis(5), true, || {});
            assert_eq!(t.count(), 2);
            tokio::task::yield_now().await;
            assert_eq!(fired.get(), 0, "not at once");
            at(start, 2).await;
            assert_eq!(fired.get(), 1);
            t.del_all();
            assert_eq!(t.count(), 0);
            at(start, 50).await;
            assert_eq!(t.count(), 0);
        });
    }
}
