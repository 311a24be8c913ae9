//! Running the handler for one request taken on Brisk's HTTP/1.1 path and handing its
//! response to the writer, keeping the connection marked busy as long as the response may
//! still read the request.

use std::future::Future;
use std::io;
use std::panic::AssertUnwindSafe;
use std::time::Instant;

use futures_util::FutureExt;
use http::{Request, Version};

use super::buffers::Output;
use super::write::{stage_in_memory, stages_in_memory, write_response};
use super::Keep;
use crate::http::io::HttpIo;
use crate::http::respond::{admit, finish, until_sent, Admitted};
use crate::http::response_head::HeadContext;
use crate::http::state::{HttpConn, HttpShared};
use crate::http::RequestBody;

/// Runs the handler for one request and stages (or sends) its response; `began` is when the
/// request's bytes were read.
///
/// Not an `async fn`: the request is handed to the handler before the future is made, so
/// the future holds the handler's (boxed) future and what the answer needs, not the request;
/// a response in memory is staged without a future of the writer's.
pub(super) fn answer<'a>(
    shared: &'a HttpShared,
    conn: &'a HttpConn,
    io: &'a HttpIo,
    out: &'a mut Output,
    req: Request<RequestBody>,
    close: bool,
    began: Option<Instant>,
) -> impl Future<Output = io::Result<Keep>> + 'a {
    let method = req.method().clone();
    let http10 = req.version() == Version::HTTP_10;
    let (admitted, ticket) = admit(shared, conn, req, began);
    async move {
        let resp = match admitted {
            Admitted::Refused(code, why) => ticket.refused(shared, conn, code, why),
            Admitted::Panicked(panic) => finish(shared, conn, ticket, Err(panic)),
            Admitted::Handling(handling) => {
                let outcome = AssertUnwindSafe(handling).catch_unwind().await;
                finish(shared, conn, ticket, outcome)
            }
        };
        let cx = HeadContext {
            method: &method,
            close_requested: close,
            http10,
            body_len: None,
        };
        // A file range stays one (for `sendfile`): it reads no request body, so the
        // connection is simply idle again once it is sent.
        if resp.body().is_file() {
            let sent = Box::pin(write_response(io, out, resp, cx, shared)).await;
            conn.activity.response_done();
            return sent;
        }
        let resp = until_sent(resp, &conn.activity);
        if stages_in_memory(out, &resp) {
            return Ok(stage_in_memory(out, resp, &cx));
        }
        // Boxed: most answers are in memory and never need the writer's state.
        Box::pin(write_response(io, out, resp, cx, shared)).await
    }
}
