//! The worker's local task set, for code that may run in a worker or elsewhere: a task it
//! spawns with [`spawn`] runs in the worker's set when there is one (polled in the same turn
//! of the loop as the connections' tasks that wake it), on the runtime otherwise.
//!
//! A database connection's driver is such a task: requests queued by a turn's connections
//! go out in that turn, and the answers it hands back wake tasks of the same set, not a
//! second scheduler that then wakes the set.

use std::cell::RefCell;
use std::future::Future;
use std::rc::Rc;

use tokio::task::LocalSet;

thread_local! {
    /// This thread's worker task set, while the worker runs.
    static WORKER_SET: RefCell<Option<Rc<LocalSet>>> = const { RefCell::new(None) };
}

/// Makes `set` this thread's worker task set (`None` when the worker ends).
pub(crate) fn set_worker_set(set: Option<Rc<LocalSet>>) {
    WORKER_SET.with(|s| *s.borrow_mut() = set);
}

/// Spawns `task` in this thread's worker task set if there is one, else on the current
/// runtime (`tokio::spawn`), as a task that is not waited for.
#[cfg_attr(not(feature = "postgres"), allow(dead_code))]
pub(crate) fn spawn<F>(task: F)
where
    F: Future<Output = ()> + Send + 'static,
{
    let set = WORKER_SET.with(|s| s.borrow().clone());
    match set {
        Some(set) => drop(set.spawn_local(task)),
        None => drop(tokio::spawn(task)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tasks_run_in_the_worker_set_when_there_is_one_and_on_the_runtime_otherwise() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        // No worker set: a task of the runtime, which runs outside any local set.
        let (tx, rx) = tokio::sync::oneshot::channel();
        rt.block_on(async {
            spawn(async move {
                let in_set = std::panic::catch_unwind(|| drop(tokio::task::spawn_local(async {})));
                let _ = tx.send(in_set.is_ok());
            });
            assert!(!rx.await.unwrap(), "ran outside a local set");
        });
        // With one: spawned from a task of the runtime too, it runs in the set.
        let set = Rc::new(LocalSet::new());
        set_worker_set(Some(set.clone()));
        let (tx, rx) = tokio::sync::oneshot::channel();
        set.block_on(&rt, async {
            let from_runtime = tokio::spawn(async move {
                spawn(async move {
                    let in_set =
                        std::panic::catch_unwind(|| drop(tokio::task::spawn_local(async {})));
                    let _ = tx.send(in_set.is_ok());
                });
            });
            from_runtime.await.unwrap();
            assert!(rx.await.unwrap(), "ran in the worker's set");
        });
        set_worker_set(None);
    }
}
