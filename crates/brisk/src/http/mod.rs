//! HTTP/1.1 with Brisk's process model, limits and stats: requests without a body on Brisk's
//! own path (`h1`), everything else on hyper (HTTP/1.1, and HTTP/2 over TLS).
//!
//! [`HttpServer`] takes an async handler or any `tower::Service`; responses carry a [`Body`].
//! Limits ([`HttpLimits`]) answer with the right status: 431 for oversized heads, 413 for
//! oversized bodies, 408 for heads that arrive too slowly; hyper answers malformed requests
//! with 400.

mod accept_encoding;
pub mod access_log;
mod activity;
mod answers;
pub mod body;
#[cfg(feature = "client")]
pub mod client;
#[cfg(feature = "compression")]
pub mod compression;
mod conn;
mod conn_state;
mod file_body;
mod framing;
mod h1;
#[cfg(feature = "fuzzing")]
pub(crate) use framing::guard::{pass as framing_guard_pass, REFUSED_LINE};
/// The own path's head parser, for the fuzz targets.
#[cfg(feature = "fuzzing")]
pub(crate) use h1::parse as h1_head;
mod handler;
mod head_timeout;
mod io;
mod limits;
pub mod login_throttle;
mod request_body;
mod respond;
mod response_head;
mod server;
#[cfg(feature = "sessions")]
pub mod session;
pub mod sse;
mod start;
mod state;
pub mod static_files;
mod sys;
#[cfg(test)]
mod testing;
mod upgraded;
mod write_through;

pub use body::Body;
pub use io::HttpIo;
pub use limits::HttpLimits;
pub use request_body::{BodyTimedOut, RequestBody};
pub use server::{HttpServer, IntoResponse};

pub(crate) use response_head::has_token;
pub(crate) use upgraded::take_upgraded;
