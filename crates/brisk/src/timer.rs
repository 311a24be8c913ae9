//! Timers on the worker's event loop: one-shot or repeating, millisecond resolution.
//!
//! All timers of a worker share one driver task and one ordered map keyed by deadline, so a
//! timer costs a map entry and its boxed callback (well under 200 bytes), not a task of its own:
//! 100,000 live timers stay cheap to add, fire and delete.
//!
//! Call these functions from code running on a worker (a callback, or a task spawned there):
//! the timers are the worker's, kept in its context.
//! Called anywhere else (a thread of the app's own, the master), they panic saying so.
//!
//! ```no_run
//! use std::time::Duration;
//! # async fn on_worker_start() {
//! let id = brisk::timer::add(Duration::from_secs(1), true, || println!("tick"));
//! brisk::timer::add(Duration::from_millis(3500), false, move || {
//!     brisk::timer::del(id);
//! });
//! # }
//! ```

use std::time::Duration;

use crate::runtime::context::running;
pub use crate::runtime::timers::TimerId;

/// Adds a timer that calls `callback` after `interval`, and again every `interval` if `repeat`.
///
/// An interval under one millisecond is raised to one. A panic in the callback is caught,
/// counted and logged; a repeating timer goes on.
pub fn add(interval: Duration, repeat: bool, callback: impl FnMut() + 'static) -> TimerId {
    running("brisk::timer::add")
        .timers
        .add(interval, repeat, callback)
}

/// Deletes a timer. Returns false if it does not exist (already fired, or deleted).
pub fn del(id: TimerId) -> bool {
    running("brisk::timer::del").timers.del(id)
}

/// Deletes every timer of this worker.
pub fn del_all() {
    running("brisk::timer::del_all").timers.del_all()
}

/// How many timers are live on this worker.
pub fn count() -> usize {
    running("brisk::timer::count").timers.count()
}

#[cfg(test)]
mod tests {
    #[test]
    #[should_panic(expected = "brisk::timer::add was called outside a Brisk worker")]
    fn a_timer_off_a_worker_says_so() {
        super::add(std::time::Duration::from_secs(1), false, || {});
    }
}
