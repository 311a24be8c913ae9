//! brisk-bench: load generators and a performance lab for Brisk and its
//! peers.
//!
//! The library runs the generators in-process ([`http::run_http`],
//! [`ws::run_ws`]) and returns serializable reports; the `brisk-bench`
//! binary is a thin command-line front end.

pub mod error;
pub mod fd_limit;
pub mod histogram;
pub mod http;
pub mod report;
pub mod runtime;
pub mod suite;
pub mod target;
pub mod units;
pub mod ws;

pub use error::BenchError;
pub use histogram::{LatencyHistogram, LatencySummary};
pub use report::{HttpReport, WsReport};
pub use target::{Scheme, Target};
