//! Running the handler for one request taken on Brisk's HTTP/1.1 path and handing its
//! response to the writer, keeping the connection marked busy as long as the response may
//! still read the request.

use std::io;
use std::sync::atomic::Ordering::Relaxed;

use http::{Request, Version};

use super::buffers::Output;
use super::write::write_response;
use super::Keep;
use crate::http::io::HttpIo;
use crate::http::respond::{respond, until_sent};
use crate::http::response_head::HeadContext;
use crate::http::state::{HttpConn, HttpShared};
use crate::http::RequestBody;

/// Runs the handler for one request and stages (or sends) its response.
pub(super) async fn answer(
    shared: &HttpShared,
    conn: &HttpConn,
    io: &HttpIo,
    out: &mut Output,
    req: Request<RequestBody>,
    close: bool,
) -> io::Result<Keep> {
    let method = req.method().clone();
    let http10 = req.version() == Version::HTTP_10;
    let resp = respond(shared, conn, req).await;
    let cx = HeadContext {
        method: &method,
        close_requested: close,
        http10,
        body_len: None,
    };
    // A file range stays one (for `sendfile`): it reads no request body, so the connection is
    // simply idle again once it is sent.
    if !resp.body().is_file() {
        let resp = until_sent(resp, &conn.activity);
        return write_response(io, out, resp, cx, shared).await;
    }
    let sent = write_response(io, out, resp, cx, shared).await;
    conn.activity.busy.store(false, Relaxed);
    sent
}
