//! HTTP/1.1 load generation: request encoding, response framing, the
//! connection loop and its statistics.

pub mod client;
pub mod request;
pub mod response;
pub mod stats;

pub use client::{run_http, HttpConfig};
pub use request::{parse_header, RequestSpec};
pub use stats::{ErrorCounts, ErrorKind, HttpStats};
