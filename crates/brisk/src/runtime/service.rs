//! [`Service`]: any server, type-erased: how to listen, and how to start serving in a worker
//! once the listener is open. Each builder (`Server`, `UdpServer`, `HttpServer`, `WsServer`)
//! turns into one; so does a custom process (`Process`), which has workers but no listener.
//! The worker entry starts the one it was given.

use std::io;
use std::rc::Rc;

use super::context::{WorkerCallback, WorkerCallbacks, WorkerCtx};
use super::listener::Listener;
use crate::limits::{LimitOverrides, Limits};
use crate::listen::ListenConfig;

/// Starts serving on an open listener in a worker: spawns the accept loop and the sweeps.
pub(crate) type Start = Box<dyn FnOnce(Rc<WorkerCtx>, Listener, Limits) -> io::Result<()>>;

/// A server of any kind, as [`App::server`](crate::App::server) and
/// [`run_all`](crate::run_all) take it. Made with `.into()` from a [`Server`](crate::Server),
/// [`UdpServer`](crate::UdpServer), `HttpServer` or `WsServer`, or from a
/// [`Process`](crate::Process) (workers without a listener).
pub struct Service {
    /// What `status` calls it: its listener's address, or the custom process's name.
    pub(crate) name: String,
    /// How many workers run it (`None`: one per CPU).
    pub(crate) workers: Option<usize>,
    /// Its listener; `None` for a custom process.
    pub(crate) listen: Option<ListenConfig>,
    pub(crate) worker_callbacks: WorkerCallbacks,
    pub(crate) limits: LimitOverrides,
    /// Starts serving on the listener (never called for a custom process).
    pub(crate) start: Start,
    /// Jobs the master may tell this service's workers to run (the app's schedules, in the
    /// `schedules` process), by index.
    pub(crate) jobs: Vec<WorkerCallback>,
}

impl Service {
    /// A server listening as `listen` says.
    pub(crate) fn listening(
        listen: ListenConfig,
        worker_callbacks: WorkerCallbacks,
        limits: LimitOverrides,
        start: Start,
    ) -> Self {
        Service {
            name: listen.address.to_string(),
            workers: listen.workers,
            listen: Some(listen),
            worker_callbacks,
            limits,
            start,
            jobs: Vec::new(),
        }
    }

    /// A custom process: `workers` workers with these callbacks and no listener.
    pub(crate) fn without_listener(
        name: String,
        workers: usize,
        worker_callbacks: WorkerCallbacks,
    ) -> Self {
        Service {
            name,
            workers: Some(workers),
            listen: None,
            worker_callbacks,
            limits: LimitOverrides::default(),
            start: Box::new(|_, _, _| Ok(())),
            jobs: Vec::new(),
        }
    }
}
