//! What an HTTP server answers and records, as its builder sets it and each worker serves
//! it: [`Answers`] (the handler and how its responses are compressed), [`Recording`] (spans
//! and latency histograms), and a worker's [`Logging`] (its open access log beside them).

use std::rc::Rc;

use super::access_log::AccessLogWriter;
use super::handler::DynHandler;
use super::Body;

/// The handler of a server given none: 404 for everything.
pub(super) fn not_found_handler() -> DynHandler {
    Rc::new(|_req| {
        Box::pin(async {
            let mut r = http::Response::new(Body::from("no handler\n"));
            *r.status_mut() = http::StatusCode::NOT_FOUND;
            Ok(r)
        })
    })
}

/// What answers a server's requests: its handler, and how its responses are compressed.
#[derive(Clone)]
pub(crate) struct Answers {
    pub handler: DynHandler,
    /// Applied to the handler's responses as each request's `Accept-Encoding` allows, in
    /// the request's own future (`respond.rs`), not a second boxed one.
    #[cfg(feature = "compression")]
    pub compression: Option<super::compression::Compression>,
}

/// What a server records of each request beside its answer, as its builder says.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Recording {
    /// Handlers run in a `request{conn}` span.
    pub request_spans: bool,
    /// Handler times are counted in the worker's latency histogram.
    pub latency_histograms: bool,
}

/// How a server's requests are logged in one worker: its open access log, and what else is
/// recorded.
pub(super) struct Logging {
    pub access_log: Option<AccessLogWriter>,
    pub recording: Recording,
}
