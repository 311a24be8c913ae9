//! Traces of requests exported over OTLP to an OpenTelemetry collector: off unless the app
//! asks for them ([`App::tracing`](crate::App::tracing)), and then sampled.
//!
//! With the `otel` feature and a [`Tracing`] set, each worker exports, over OTLP/HTTP
//! (protobuf), a span for:
//! - each sampled HTTP request (kind server, named by its method; a W3C `traceparent` the
//!   request brings is its parent and decides its sampling);
//! - each database call (the queries and statements of `db::Db`) and Redis command
//!   made while a sampled span is current, and each request of the HTTP client, which sends
//!   the trace on as `traceparent`;
//! - each WebSocket message handed to `on_message` and each queue job run (sampled as
//!   requests are).
//!
//! A request that is not sampled costs a header lookup and a random draw; without the
//! feature, nothing. Spans leave in batches from a thread of each worker, once a second;
//! a collector that does not answer is logged once (and its recovery), its spans dropped,
//! and no request waits for it.
//!
//! ```no_run
//! # fn main() -> brisk::Result<()> {
//! # let server = brisk::Server::new("text://127.0.0.1:7000").unwrap();
//! brisk::App::new("app")
//!     .server(server)
//!     // 1 request in 100, to the collector's OTLP/HTTP port.
//!     .tracing(brisk::otel::Tracing::otlp("http://127.0.0.1:4318")?.sample(0.01))
//!     .run();
//! # Ok(()) }
//! ```

#[cfg(feature = "otel")]
mod exporter;
#[cfg(feature = "otel")]
mod settings;
// Which of its functions are called depends on the other features (databases, client).
#[cfg(feature = "otel")]
#[allow(dead_code)]
mod span;
#[cfg(feature = "otel")]
mod traced;
#[cfg(feature = "otel")]
mod worker;

#[cfg(feature = "otel")]
pub use settings::Tracing;
#[cfg(feature = "otel")]
#[allow(unused_imports)]
pub(crate) use span::{call, client_request, root, server_span, HttpSpan};
#[cfg(feature = "otel")]
pub(crate) use worker::{start, stop};

/// Without the `otel` feature: `fut` itself, untraced.
#[cfg(not(feature = "otel"))]
#[inline(always)]
#[allow(dead_code)] // without a database or Redis feature
pub(crate) fn call<F, D>(fut: F, _describe: D) -> F {
    fut
}

/// Without the `otel` feature: `fut` itself, untraced.
#[cfg(not(feature = "otel"))]
#[inline(always)]
pub(crate) fn root<F, D>(fut: F, _describe: D) -> F {
    fut
}

/// What a traced call does, named by the caller and turned into a span's name and attributes
/// only when the call is traced.
#[allow(dead_code)] // which variants are made depends on the features
pub(crate) enum Op<'a> {
    /// A database statement: the system (`postgresql`, `mysql`, `sqlite`) and its text.
    Db {
        /// OpenTelemetry's `db.system.name`.
        system: &'static str,
        /// The statement, without its parameters.
        statement: &'a str,
    },
    /// A Redis command.
    #[cfg(feature = "redis")]
    Redis(&'a ::redis::Cmd),
    /// Several Redis commands in one round trip.
    #[cfg(feature = "redis")]
    RedisPipeline,
    /// A queue job's run.
    #[cfg(feature = "redis")]
    Job {
        /// The queue's name.
        queue: &'a str,
        /// The job's id.
        id: u64,
        /// Which attempt this is, from 1.
        attempt: u32,
    },
    /// A WebSocket message handed to `on_message`.
    WsMessage {
        /// The connection's id in its worker.
        conn: u64,
        /// The message's size in bytes.
        size: usize,
        /// Whether it is text.
        text: bool,
    },
}
