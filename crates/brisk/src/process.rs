//! [`Process`]: Workerman's listener-less worker, webman's custom process. Workers that serve
//! no socket and run what their callbacks start: queue consumers, periodic jobs, anything
//! long-running. The master supervises them like any server's workers: it restarts one that
//! dies, replaces them on `reload`, stops them with the graceful timeout on `stop -g`, and
//! `status` lists them under the process's name. Their callbacks run on the same
//! single-threaded runtime as a server's, so Brisk's database, Redis and HTTP clients work
//! in them as in a handler.

use std::cell::RefCell;
use std::rc::Rc;

use crate::runtime::context;
use crate::runtime::{Service, WorkerCallbacks};

/// A custom process: `count` workers running `on_worker_start` and, when they stop,
/// `on_worker_stop`.
///
/// A task that should run for the worker's life is spawned from `on_worker_start` (which
/// must return for the worker to count as started), and ends when [`stopping`] resolves;
/// `on_worker_stop` can wait for it, so that a graceful stop or a reload lets the task finish
/// what it is doing.
///
/// ```no_run
/// use std::cell::RefCell;
/// use std::rc::Rc;
/// use brisk::{App, Process};
///
/// let job = Rc::new(RefCell::new(None));
/// let (start, stop) = (job.clone(), job);
/// let ticker = Process::new("ticker")
///     .count(1)
///     .on_worker_start(move |_| {
///         let start = start.clone();
///         async move {
///             *start.borrow_mut() = Some(tokio::task::spawn_local(async {
///                 let mut tick = tokio::time::interval(std::time::Duration::from_secs(1));
///                 loop {
///                     tokio::select! {
///                         _ = tick.tick() => tracing::info!("tick"),
///                         _ = brisk::process::stopping() => return,
///                     }
///                 }
///             }));
///         }
///     })
///     .on_worker_stop(move |_| {
///         let task = stop.borrow_mut().take();
///         async move {
///             if let Some(task) = task {
///                 let _ = task.await;
///             }
///         }
///     });
/// App::new("app").process(ticker).run();
/// ```
pub struct Process {
    name: String,
    count: usize,
    worker_callbacks: WorkerCallbacks,
}

impl Process {
    /// A process called `name` (what `status` and the logs call its workers), with one worker.
    pub fn new(name: impl Into<String>) -> Self {
        Process {
            name: name.into(),
            count: 1,
            worker_callbacks: WorkerCallbacks::default(),
        }
    }

    /// How many workers run it (default 1; 0 fails the start).
    pub fn count(mut self, n: usize) -> Self {
        self.count = n;
        self
    }

    crate::server::worker_callback_setters!();

    /// Runs `task` for each worker's life: spawned when the worker starts, and awaited when
    /// it stops, so it should end soon after [`stopping`] resolves (a queue's `consume` does).
    /// It sets both `on_worker_start` and `on_worker_stop`.
    ///
    /// ```no_run
    /// use brisk::{App, Process};
    /// let beat = Process::new("beat").run(|_| async {
    ///     while tokio::time::timeout(std::time::Duration::from_secs(1), brisk::process::stopping())
    ///         .await
    ///         .is_err()
    ///     {
    ///         tracing::info!("beat");
    ///     }
    /// });
    /// App::new("app").process(beat).run();
    /// ```
    pub fn run<F, Fut>(self, task: F) -> Self
    where
        F: Fn(crate::WorkerInfo) -> Fut + 'static,
        Fut: std::future::Future<Output = ()> + 'static,
    {
        let running: Rc<RefCell<Option<tokio::task::JoinHandle<()>>>> = Rc::default();
        let (start, stop) = (running.clone(), running);
        self.on_worker_start(move |info| {
            *start.borrow_mut() = Some(tokio::task::spawn_local(task(info)));
            async {}
        })
        .on_worker_stop(move |_| {
            let task = stop.borrow_mut().take();
            async move {
                if let Some(task) = task {
                    let _ = task.await;
                }
            }
        })
    }
}

impl From<Process> for Service {
    fn from(p: Process) -> Self {
        Service::without_listener(p.name, p.count, p.worker_callbacks)
    }
}

/// Resolves when the worker running the caller begins to stop (`stop`, `reload`, or its
/// master gone); at once when called outside a worker. For loops started by a custom
/// process's `on_worker_start` (or a server's).
pub async fn stopping() {
    context::stopping().await
}
