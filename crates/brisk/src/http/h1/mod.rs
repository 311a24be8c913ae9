//! Brisk's own HTTP/1.1 path for plaintext connections: the requests servers see most
//! (HTTP/1.1 or 1.0, no body or a small one with a `Content-Length`) are parsed with `httparse` and
//! answered here, with buffers taken from a per-worker pool only while a request is in
//! flight, so an idle keep-alive connection holds no buffer at all.
//!
//! The first request this path does not take — a chunked or large body, `Expect`, an upgrade,
//! `CONNECT`, or anything `httparse` or the `http` types reject, or a head over
//! the size or count limits — hands the connection, with every byte not yet answered, to
//! hyper, which serves it from then on as it serves every HTTPS connection. The error answers
//! this path does not give itself (400 for what `httparse` refuses, 413, 431) are therefore
//! hyper's; where each framing check lives, on this path and on hyper's, is in
//! [`framing`](super::framing).
//!
//! The loop here reads and hands each complete request on: [`parse`] decides what is this
//! path's, [`dispatch`] runs the handler, [`write`] sends the response (a file range with
//! `sendfile(2)`), and [`buffers`] lends the staging and read buffers.

mod buffers;
mod dispatch;
pub(crate) mod parse;
mod write;

use std::future::poll_fn;
use std::io;
use std::task::{ready, Poll};

use bytes::{Buf, BytesMut};

use super::io::HttpIo;
use super::state::{HttpConn, HttpShared};
use buffers::{pool, Output};
use dispatch::{start, Started};
use parse::{parse, Parsed};

/// How Brisk's HTTP/1.1 path ended.
pub(crate) enum Exit {
    /// The connection is done: closed by either side, failed, or drained.
    Closed,
    /// hyper takes over; the socket's unread bytes come first.
    ToHyper(HttpIo),
}

/// Bytes asked of each `recv`.
const READ_CHUNK: usize = 4096;
/// Pipelined responses are sent once this many bytes are staged.
const FLUSH_AT: usize = 64 * 1024;

/// Serves requests on `io` until the connection ends or needs hyper.
pub(crate) async fn serve(shared: &HttpShared, conn: &HttpConn, mut io: HttpIo) -> Exit {
    let mut input = BytesMut::new();
    let mut out = Output::default();
    // When the bytes being answered were read: every request of one read arrived then (a
    // pipelined one's latency includes its wait behind those before it).
    let mut began = None;
    loop {
        // Answer every complete request received so far, in order.
        let mut data = input.split().freeze();
        let mut for_hyper = false;
        while !data.is_empty() {
            let (req, close) = match parse(&data, &shared.http, shared.limits.max_package_size) {
                Parsed::Partial => break,
                Parsed::AwaitingBody => {
                    // Bytes now are the body's: a body that trickles in is not a slow head,
                    // but a slow body (timed from its head).
                    conn.activity.body_started(conn.worker.io.now_ms());
                    break;
                }
                Parsed::ForHyper => {
                    for_hyper = true;
                    break;
                }
                Parsed::Reject(status, why) => {
                    let _ = Box::pin(refuse(shared, &io, &mut out, status, why)).await;
                    return Exit::Closed;
                }
                Parsed::Request { req, len, close } => {
                    data.advance(len);
                    (req, close)
                }
            };
            // Called and polled once here; an answer that must wait is boxed: the handler's
            // and the writer's state exist only while a request is in flight, so an idle
            // connection's task does not carry their space. (Awaited after the `match`: what
            // `start` returns would otherwise be kept in the task across the wait.)
            let sent = {
                let waiting = match start(shared, conn, &mut out, req, close, began) {
                    Started::Staged(keep) => Ok(keep),
                    Started::Waiting(rest) => {
                        Err(Box::pin(rest.answer(shared, conn, &io, &mut out)))
                    }
                };
                match waiting {
                    Ok(keep) => Ok(keep),
                    Err(answer) => answer.await,
                }
            };
            match sent {
                Ok(Keep::Open) if out.staged() < FLUSH_AT || data.is_empty() => {}
                Ok(Keep::Open) => {
                    if out.flush(&io).await.is_err() {
                        return Exit::Closed;
                    }
                }
                Ok(Keep::Close) => {
                    // Closing the socket sends FIN after the response: no shutdown call.
                    let _ = out.flush(&io).await;
                    return Exit::Closed;
                }
                Err(_) => return Exit::Closed,
            }
        }
        if out.flush(&io).await.is_err() {
            return Exit::Closed;
        }
        if for_hyper {
            io.unread(data);
            return Exit::ToHyper(io);
        }
        out.release();
        // Keep what is left (part of a head) and read more; an idle connection keeps no
        // buffer.
        let spare = std::mem::take(&mut input);
        if data.is_empty() {
            drop(data);
            pool::put_read(spare);
        } else {
            // Once the spare capacity is let go, the rest is usually the only user of its
            // buffer and becomes the input without a copy.
            drop(spare);
            input = data
                .try_into_mut()
                .unwrap_or_else(|data| BytesMut::from(&data[..]));
        }
        let grace_over = || conn.worker.drain_grace_over();
        let draining = || conn.state.is_draining();
        match read_more(&mut io, draining, grace_over, &mut input).await {
            Ok(Some(n)) if n > 0 => {
                began = shared
                    .recording
                    .latency_histograms
                    .then(std::time::Instant::now);
            }
            // End of stream, drained, or failed: hyper would close too (a partial head at
            // the end is an incomplete message, with nobody to answer).
            _ => {
                pool::put_read(input);
                return Exit::Closed;
            }
        }
    }
}

/// Answers a request that must not be served with `status` and `why`; the connection then
/// closes.
async fn refuse(
    shared: &HttpShared,
    io: &HttpIo,
    out: &mut Output,
    status: http::StatusCode,
    why: &'static str,
) {
    crate::stats::Stats::add(&shared.worker.stats.rejected, 1);
    let resp = super::respond::closing(status, why);
    let cx = super::response_head::HeadContext {
        method: &http::Method::GET,
        close_requested: true,
        http10: false,
        body_len: None,
    };
    if write::write_response(io, out, resp, cx, shared)
        .await
        .is_ok()
    {
        let _ = out.flush(io).await;
    }
}

/// Waits for bytes and appends them to `input` (buffer from the pool, taken only once the
/// socket is readable). `None` when the worker drains a connection that stays between
/// requests until `grace_over` (the worker wakes its connections then): until then a request
/// may already be on its way (its client cannot know the worker is stopping), and it gets its
/// answer, with `Connection: close`.
async fn read_more(
    io: &mut HttpIo,
    draining: impl Fn() -> bool,
    grace_over: impl Fn() -> bool,
    input: &mut BytesMut,
) -> io::Result<Option<usize>> {
    poll_fn(|cx| {
        if draining() && input.is_empty() && grace_over() {
            return Poll::Ready(Ok(None));
        }
        ready!(io.poll_read_ready(cx))?;
        if input.capacity() == 0 {
            *input = pool::take_read();
        }
        input.reserve(READ_CHUNK);
        let received = io.poll_recv(cx, input.spare_capacity_mut());
        if received.is_pending() && input.is_empty() {
            // Readable, yet nothing came (a new connection's first wake-up often is): wait
            // without the buffer, or every connection in a burst would hold one.
            pool::put_read(std::mem::take(input));
        }
        let n = ready!(received)?;
        // SAFETY: recv initialized the first `n` bytes of the spare capacity.
        unsafe { input.set_len(input.len() + n) };
        Poll::Ready(Ok(Some(n)))
    })
    .await
}

/// Whether the connection stays open after a response.
enum Keep {
    Open,
    Close,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reader_woken_with_nothing_to_read_waits_without_a_buffer() {
        use std::io::Write;

        use crate::http::io::tests::with_io;

        with_io(async |mut io, _, mut client| {
            let raw = io.raw_fd();
            // A byte makes the socket readable; taking it behind tokio's back leaves it
            // marked readable with nothing to read.
            client.write_all(b"x").unwrap();
            poll_fn(|cx| io.poll_read_ready(cx)).await.unwrap();
            let mut byte = 0u8;
            // SAFETY: one byte into `byte`, on the test's own socket.
            let n = unsafe { libc::recv(raw, (&raw mut byte).cast(), 1, 0) };
            assert_eq!(n, 1);
            let draining = || false;
            let mut input = BytesMut::new();
            let waited = futures_util::FutureExt::now_or_never(read_more(
                &mut io,
                draining,
                || true,
                &mut input,
            ));
            assert!(waited.is_none(), "nothing to read yet");
            assert_eq!(input.capacity(), 0, "waits holding a buffer");
            client.write_all(b"GET").unwrap();
            let n = read_more(&mut io, draining, || true, &mut input)
                .await
                .unwrap();
            assert_eq!((n, &input[..]), (Some(3), &b"GET"[..]));
        });
    }
}
