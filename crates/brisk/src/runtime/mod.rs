//! The worker runtime: what runs inside a worker process, below every protocol. The worker
//! context and its registry of connections, streams (TCP, TLS, Unix), the connection task
//! that drives a [`Protocol`](crate::protocol::Protocol), accept loops, sweeps, UDP, and the
//! type-erased [`Service`] a worker starts.
//!
//! Nothing here names HTTP or WebSocket: protocols reach the runtime through the `Protocol`
//! trait (decode, encode, heartbeat, handshake state) and the [`ConnView`] trait.

pub(crate) mod accept;
pub(crate) mod conn_view;
pub(crate) mod connection;
pub(crate) mod context;
pub(crate) mod handler;
pub(crate) mod io_counters;
pub(crate) mod listener;
pub(crate) mod local_tasks;
pub(crate) mod loop_lag;
pub(crate) mod parts;
pub(crate) mod service;
pub(crate) mod stream;
pub(crate) mod sweep;
pub(crate) mod tcp_read;
pub(crate) mod timers;
pub(crate) mod tls_stream;
pub(crate) mod udp;

pub(crate) use conn_view::ConnView;
pub(crate) use context::{WorkerCallbacks, WorkerCtx};
pub(crate) use service::Service;
