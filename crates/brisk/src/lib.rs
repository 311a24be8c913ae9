//! # Brisk
//!
//! A framework for event-driven network servers that stay resident in memory, in the model of
//! Workerman: a **master process** supervises **worker processes**; each worker runs one
//! single-threaded event loop and serves many thousands of connections. Every app gets the
//! control CLI (`start [-d]`, `stop [-g]`, `restart`, `reload [-g]`, `status`, `connections`).
//!
//! ```no_run
//! use brisk::{App, Server};
//!
//! fn main() -> std::process::ExitCode {
//!     let echo = Server::new("text://127.0.0.1:7000")
//!         .unwrap()
//!         .workers(2)
//!         .on_connect(|conn| async move { conn.send("welcome") })
//!         .on_message(|conn, line| async move { conn.send(line) });
//!     App::new("echo").server(echo).run()
//! }
//! ```
//!
//! Listeners are written `scheme://host:port` ([`Address`]); protocols turn bytes into
//! messages ([`protocol`]); [`timer`] runs callbacks on the worker loop; [`Limits`] keep
//! slow or hostile peers from growing a worker's memory.

mod address;
mod app;
pub mod cli;
mod error;
pub mod http;
mod ipc;
mod log;
mod master;
pub mod protocol;
mod server;
mod service;
pub mod stats;
pub mod timer;
pub mod tls;
mod worker;
pub mod ws;

pub use address::{Address, Endpoint, Scheme};
pub use app::{run_all, App};
pub use cli::Command;
pub use error::{Error, Result};
pub use ipc::MasterStatus;
pub use server::{BoxError, HandlerOutput, Limits, Server, UdpServer};
pub use service::Service;
pub use worker::connection::{Connection, SendError};
pub use worker::stream::PeerAddr;
pub use worker::udp::UdpPeer;
pub use worker::WorkerInfo;

/// The README's examples, compiled as doctests.
#[cfg(doctest)]
#[doc = include_str!("../../../README.md")]
pub struct ReadmeDoctests;
