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
//!
//! ## Layers
//!
//! Each layer imports only from the layers below it; no two files import each other, directly
//! or around a circle.
//!
//! ```text
//!  app + cli        app.rs (what to run), cli.rs (talks to the master through the run paths),
//!                   dev_loop.rs (`dev`: rebuild and upgrade on a change),
//!                   fuzzing.rs (the fuzz targets' entry points)
//!  process roles    master/ (plan, supervisor, control socket, daemon, pid file),
//!                   worker.rs (the worker entry: takes its spec, answers the master),
//!                   startup.rs (the start-up hooks' process)
//!  builders         server.rs (Server, UdpServer), http/server.rs (HttpServer),
//!                   ws/server.rs (WsServer), process.rs (Process, no listener): each
//!                   turns into a runtime Service; schedule.rs (Schedule)
//!  protocols        protocol/text, protocol/frame, protocol/raw (on the Protocol trait of
//!                   protocol/mod.rs), http/ (own HTTP/1.1 path, hyper glue, static files,
//!                   SSE), ws/ (codec, frames, deflate, endpoint, groups by typed keys,
//!                   broadcasts and their encodings): each owns its set-up and its sweeps;
//!                   and the application layer beside them: db/, redis.rs,
//!                   queue/, mail.rs, template/, jwks_url (token keys from a URL, on
//!                   the HTTP client), channels/ (the channel protocol and its server API,
//!                   on ws/, jwt and jwks_url)
//!  worker runtime   runtime/ (worker context and registry, the parts the layers above
//!                   keep per worker, timers, streams and TLS sessions, connections,
//!                   accept loops, sweeps, UDP, Service), timer.rs (the worker's timers
//!                   from anywhere it runs), protocol (the Protocol trait the runtime drives)
//!  core types       address, error, limits, listen, stats, env, run_paths, tls (config),
//!                   ipc/ (wire types and codec), log, log_file, latency, response_counts,
//!                   process_sample, alerts (thresholds and their hysteresis), redact,
//!                   conninfo, civil (dates as numbers and ISO text), cluster_setting
//!                   (whether a worker's app spans machines), secret_env (secrets kept
//!                   out of started processes' environment), recycle (when workers are
//!                   replaced), metrics (the app's own counters, gauges and histograms),
//!                   db_figures (what a worker's database pools report), config (the
//!                   app's settings, loaded once by the master), open_files, jwt
//!                   (tokens checked at connect time), otel/ (each worker's tracer and
//!                   its spans), redis_seal (the HMAC that seals what Brisk keeps in
//!                   Redis), secret_key (the app's secret as HMAC keys, and its rule)
//! ```
//!
//! A worker's state is one value, its context: its own fields, and one value of each type the
//! layers above keep per worker (WebSocket's groups, replay, handover bookkeeping, named
//! endpoints, presence). Code reaches it through the connection or context it is given; the
//! free functions (`ws::broadcast`, `timer::add`) through the worker the thread runs, and
//! they panic, saying so, anywhere else. Broadcasts cross IPC, the master and the cluster bus
//! as messages under an opaque topic; only `ws/` builds WebSocket frames.
//!
//! Protocol-specific behaviour reaches the runtime through traits the protocol implements:
//! [`protocol::Protocol`] (decode, encode, heartbeat, handshake state) for connections the
//! runtime drives, and the registry's connection view (downcast by the protocol's own sweep)
//! for HTTP, which drives its connections itself. The runtime never names HTTP or WebSocket.

#![warn(missing_docs)]

mod address;
pub mod alerts;
mod app;
#[cfg(feature = "channels")]
pub mod channels;
mod civil;
pub mod cli;
mod cluster_setting;
#[cfg(feature = "config")]
pub mod config;
mod conninfo;
#[cfg(any(feature = "sqlite", feature = "postgres", feature = "mysql"))]
pub mod db;
mod db_figures;
mod dev_loop;
mod env;
mod error;
#[cfg(feature = "fuzzing")]
#[doc(hidden)]
pub mod fuzzing;
pub mod http;
mod ipc;
#[cfg(all(feature = "jwt", feature = "client"))]
pub mod jwks_url;
#[cfg(feature = "jwt")]
pub mod jwt;
pub mod latency;
mod limits;
mod listen;
mod log;
mod log_file;
#[cfg(feature = "mail")]
pub mod mail;
mod master;
pub mod metrics;
mod open_files;
#[cfg(feature = "otel")]
pub mod otel;
#[cfg(not(feature = "otel"))]
mod otel;
pub mod process;
mod process_sample;
pub mod protocol;
#[cfg(feature = "redis")]
pub mod queue;
mod recycle;
mod redact;
#[cfg(feature = "redis")]
pub mod redis;
#[cfg(feature = "redis")]
mod redis_seal;
pub mod response_counts;
mod run_paths;
mod runtime;
pub mod schedule;
mod secret_env;
mod secret_key;
mod server;
mod startup;
pub mod stats;
#[cfg(feature = "templates")]
pub mod template;
pub mod timer;
pub mod tls;
mod worker;
pub mod ws;

pub use address::{Address, Endpoint, Scheme};
pub use app::{run_all, App};
#[cfg(any(feature = "sqlite", feature = "postgres", feature = "mysql"))]
pub use brisk_macros::migrations;
pub use cli::Command;
pub use error::{Error, Result};
pub use ipc::{MasterStatus, ScheduleStatus};
pub use limits::Limits;
pub use process::Process;
pub use recycle::RecycleCounts;
pub use runtime::connection::{Connection, SendError};
pub use runtime::context::WorkerInfo;
pub use runtime::handler::{BoxError, HandlerOutput};
pub use runtime::service::Service;
pub use runtime::stream::PeerAddr;
pub use runtime::udp::UdpPeer;
pub use secret_env::secret_env;
pub use server::{Server, UdpServer};

/// The README's examples, compiled as doctests (its database example needs `sqlite`, which
/// the workspace's test run enables through the demo).
#[cfg(all(doctest, feature = "sqlite"))]
#[doc = include_str!("../../../README.md")]
pub struct ReadmeDoctests;

/// The guide's Databases chapter, its examples compiled as doctests.
#[cfg(all(doctest, feature = "sqlite", feature = "chrono", feature = "uuid"))]
#[doc = include_str!("../../../docs/guide/databases.md")]
pub struct GuideDatabases;
/// The guide's Background work chapter, its examples compiled as doctests (as the README's).
#[cfg(all(doctest, feature = "sqlite"))]
#[doc = include_str!("../../../docs/guide/background.md")]
pub struct GuideBackground;

/// The guide's Databases and Redis reference chapter, its examples compiled as doctests (as the README's).
#[cfg(all(doctest, feature = "sqlite"))]
#[doc = include_str!("../../../docs/guide/data.md")]
pub struct GuideData;

/// The guide's HTTP chapter, its examples compiled as doctests (as the README's).
#[cfg(all(doctest, feature = "sqlite"))]
#[doc = include_str!("../../../docs/guide/http.md")]
pub struct GuideHttp;

/// The guide's Operations chapter, its examples compiled as doctests (as the README's).
#[cfg(all(doctest, feature = "sqlite"))]
#[doc = include_str!("../../../docs/guide/operations.md")]
pub struct GuideOperations;

/// The guide's WebSocket chapter, its examples compiled as doctests.
#[cfg(doctest)]
#[doc = include_str!("../../../docs/guide/websocket.md")]
pub struct GuideWebSocket;

/// The guide's Traces chapter, its examples compiled as doctests.
#[cfg(all(doctest, feature = "otel"))]
#[doc = include_str!("../../../docs/guide/tracing.md")]
pub struct GuideTracing;

/// The guide's Channels chapter, its examples compiled as doctests.
#[cfg(all(doctest, feature = "channels"))]
#[doc = include_str!("../../../docs/guide/channels.md")]
pub struct GuideChannels;

/// The guide's TLS chapter, its examples compiled as doctests (as the README's).
#[cfg(all(doctest, feature = "sqlite"))]
#[doc = include_str!("../../../docs/guide/tls.md")]
pub struct GuideTls;
