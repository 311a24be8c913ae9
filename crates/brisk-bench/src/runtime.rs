//! Sharded execution: one OS thread per shard, each running a tokio
//! `current_thread` runtime with a `LocalSet`, so connection tasks of a
//! shard share their statistics without locks.

use std::future::Future;
use std::sync::Arc;
use std::thread::JoinHandle;

use crate::error::BenchError;

/// Shard threads started by [`spawn_sharded`].
pub struct Shards<R> {
    handles: Vec<JoinHandle<Result<R, BenchError>>>,
}

impl<R> Shards<R> {
    /// Waits for every shard and returns the results in shard order.
    pub fn join(self) -> Result<Vec<R>, BenchError> {
        self.handles
            .into_iter()
            .map(|h| h.join().map_err(|_| BenchError::WorkerPanicked)?)
            .collect()
    }
}

/// Starts `make(shard)` for each shard in `0..threads` on its own thread and
/// runtime.
pub fn spawn_sharded<F, Fut, R>(threads: usize, make: F) -> Result<Shards<R>, BenchError>
where
    F: Fn(usize) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = R> + 'static,
    R: Send + 'static,
{
    let make = Arc::new(make);
    let mut handles = Vec::with_capacity(threads);
    for shard in 0..threads.max(1) {
        let make = Arc::clone(&make);
        let handle = std::thread::Builder::new()
            .name(format!("brisk-bench-{shard}"))
            .spawn(move || -> Result<R, BenchError> {
                let runtime = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .map_err(BenchError::Runtime)?;
                let local = tokio::task::LocalSet::new();
                Ok(local.block_on(&runtime, make(shard)))
            })
            .map_err(BenchError::Runtime)?;
        handles.push(handle);
    }
    Ok(Shards { handles })
}

/// Runs `make(shard)` on `threads` shards and waits for all of them.
pub fn run_sharded<F, Fut, R>(threads: usize, make: F) -> Result<Vec<R>, BenchError>
where
    F: Fn(usize) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = R> + 'static,
    R: Send + 'static,
{
    spawn_sharded(threads, make)?.join()
}
