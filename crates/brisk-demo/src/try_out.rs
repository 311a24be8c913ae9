//! The demo's try-out endpoints, served to loopback clients only unless `--open-try-out`:
//! `GET /connection/token` (mints a channel token for any user and channel), `POST /chat/kick`
//! and `POST /chat/say` (act on any `/chat` room), `POST /jobs` (queues work) and `POST /mail`
//! (sends mail through `--smtp`: an open relay). They let a visitor on the same machine try
//! the demo out; a deployed demo (`deploy/`) must not hand them to the world. A request that
//! came through a proxy (`X-Forwarded-For` or `Forwarded`) is not a loopback client's, even
//! from 127.0.0.1.

use brisk::http::{Body, RequestBody};
use http::{header, HeaderValue, Method, Request, Response, StatusCode};

/// Whether the try-out endpoints answer everyone.
#[derive(Clone, Copy, Debug)]
pub(crate) struct TryOut {
    open: bool,
}

impl TryOut {
    /// `open`: `--open-try-out` was given.
    pub(crate) fn new(open: bool) -> Self {
        TryOut { open }
    }

    /// A 403 for `req` when it asks a try-out endpoint from elsewhere than this machine and
    /// they are not open; `None` to serve it.
    pub(crate) fn refusal(&self, req: &Request<RequestBody>) -> Option<Response<Body>> {
        if self.open || !is_try_out(req.method(), req.uri().path()) || from_this_machine(req) {
            return None;
        }
        let mut r = Response::new(Body::from(format!(
            "{} is a try-out endpoint, served to clients on this machine only; start the demo \
             with --open-try-out to serve it to everyone (a demo, never production)\n",
            req.uri().path()
        )));
        *r.status_mut() = StatusCode::FORBIDDEN;
        r.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("text/plain; charset=utf-8"),
        );
        Some(r)
    }
}

fn is_try_out(method: &Method, path: &str) -> bool {
    match *method {
        Method::GET | Method::HEAD => path == "/connection/token",
        Method::POST => matches!(path, "/chat/kick" | "/chat/say" | "/jobs" | "/mail"),
        _ => false,
    }
}

fn from_this_machine(req: &Request<RequestBody>) -> bool {
    let proxied = req.headers().contains_key("x-forwarded-for")
        || req.headers().contains_key(header::FORWARDED);
    let loopback = (req.body().remote_addr()).is_some_and(|a| a.ip().is_loopback());
    loopback && !proxied
}
