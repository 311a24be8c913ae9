//! The worker's local task set, for code that may run in a worker or elsewhere: a task it
//! spawns with [`spawn`] runs in the set of the worker this thread runs when there is one
//! (polled in the same turn of the loop as the connections' tasks that wake it), on the
//! runtime otherwise.
//!
//! A database connection's driver is such a task: requests queued by a turn's connections
//! go out in that turn, and the answers it hands back wake tasks of the same set, not a
//! second scheduler that then wakes the set.

use std::future::Future;

use super::context::current;

/// Spawns `task` in the task set of the worker this thread runs if there is one, else on the
/// current runtime (`tokio::spawn`), as a task that is not waited for.
#[cfg_attr(not(feature = "postgres"), allow(dead_code))]
pub(crate) fn spawn<F>(task: F)
where
    F: Future<Output = ()> + Send + 'static,
{
    match current().and_then(|w| w.task_set()) {
        Some(set) => drop(set.spawn_local(task)),
        None => drop(tokio::spawn(task)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::rc::Rc;
    use tokio::task::LocalSet;

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
        let worker = crate::runtime::context::test_worker();
        worker.set_task_set(set.clone());
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
        crate::runtime::context::set_current(None);
    }
}
