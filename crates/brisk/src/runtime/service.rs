//! [`Service`]: any server, type-erased: how to listen, and how to start serving in a worker
//! once the listener is open. Each builder (`Server`, `UdpServer`, `HttpServer`, `WsServer`)
//! turns into one; the worker entry starts the one it was given.

use std::io;
use std::rc::Rc;

use super::context::{WorkerCallbacks, WorkerCtx};
use super::listener::Listener;
use crate::limits::{LimitOverrides, Limits};
use crate::listen::ListenConfig;

/// Starts serving on an open listener in a worker: spawns the accept loop and the sweeps.
pub(crate) type Start = Box<dyn FnOnce(Rc<WorkerCtx>, Listener, Limits) -> io::Result<()>>;

/// A server of any kind, as [`App::server`](crate::App::server) and
/// [`run_all`](crate::run_all) take it. Made with `.into()` from a [`Server`](crate::Server),
/// [`UdpServer`](crate::UdpServer), `HttpServer` or `WsServer`.
pub struct Service {
    pub(crate) listen: ListenConfig,
    pub(crate) worker_callbacks: WorkerCallbacks,
    pub(crate) limits: LimitOverrides,
    pub(crate) start: Start,
}
