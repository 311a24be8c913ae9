//! Writing a response on Brisk's HTTP/1.1 path: the head encoded into the staging buffer,
//! then the body framed as the head promised (`content-length` or chunked), and a file
//! range sent with `sendfile(2)` where its pages are in the page cache.

use std::future::poll_fn;
use std::io;
use std::pin::Pin;
use std::task::Poll;

use bytes::Bytes;
use http::header::HeaderMap;
use http::{Response, StatusCode};
use http_body::Body as _;

use super::buffers::Output;
use super::Keep;
use crate::http::file_body::FileBody;
use crate::http::io::HttpIo;
use crate::http::response_head::{self, Framing, HeadContext};
use crate::http::state::HttpShared;
use crate::http::Body;
use crate::stats::Stats;

/// Stages (and, for streamed bodies, sends) one response.
pub(super) async fn write_response(
    io: &HttpIo,
    out: &mut Output,
    resp: Response<Body>,
    mut cx: HeadContext<'_>,
    shared: &HttpShared,
) -> io::Result<Keep> {
    let stats = &shared.worker.stats;
    let (parts, mut body) = resp.into_parts();
    let (status, headers) = if parts.status.is_informational() {
        // As hyper: a 1xx cannot be the final answer.
        tracing::warn!(status = %parts.status, "handler answered with a 1xx status; sent 500");
        Stats::add(&stats.throw_exception, 1);
        body = Body::empty();
        (StatusCode::INTERNAL_SERVER_ERROR, HeaderMap::new())
    } else {
        (parts.status, parts.headers)
    };
    cx.body_len = body.size_hint().exact();
    out.make_room(io).await?;
    let head = response_head::encode(out.stage(), status, &headers, &cx);
    let streaming = body.is_streaming();
    let mut writer = BodyWriter::new(head.framing);
    if let (Framing::Length(len), Some(file)) = (head.framing, body.as_file_mut()) {
        if file.remaining() == len {
            let complete = send_file(io, out, file).await?;
            return Ok(if head.close || !complete {
                Keep::Close
            } else {
                Keep::Open
            });
        }
    }
    if head.framing != Framing::NoBody {
        loop {
            let frame = poll_fn(|cx| match Pin::new(&mut body).poll_frame(cx) {
                Poll::Ready(frame) => Poll::Ready(Ok(frame)),
                // Send what is staged (the head, at least) while the body waits, and the
                // CRLF that ends a big chunk sent on its own: a client that reads whole
                // chunks (an event-stream reader) then has it now, not with the next one.
                Poll::Pending => match out.poll_flush(io, cx) {
                    Poll::Ready(Ok(())) if writer.settle(out) => match out.poll_flush(io, cx) {
                        Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
                        _ => Poll::Pending,
                    },
                    Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
                    _ => Poll::Pending,
                },
            })
            .await?;
            match frame {
                None => break,
                Some(Err(e)) => {
                    Stats::add(&stats.throw_exception, 1);
                    tracing::warn!(error = %e, "response body failed; closing the connection");
                    return Ok(Keep::Close);
                }
                Some(Ok(frame)) => {
                    // Trailers are dropped, as hyper does unless the client asked for them.
                    let Ok(data) = frame.into_data() else {
                        continue;
                    };
                    out.make_room(io).await?;
                    writer.data(out, data);
                    if streaming {
                        out.flush(io).await?;
                    }
                }
            }
        }
    }
    out.make_room(io).await?;
    let complete = writer.finish(out);
    Ok(if head.close || !complete {
        Keep::Close
    } else {
        Keep::Open
    })
}

/// Whether [`stage_in_memory`] can take `resp`: not when [`write_response`] must send it (a
/// streamed body or a file, a 1xx status, or a tail staged before it that must go first).
pub(super) fn stages_in_memory(out: &Output, resp: &Response<Body>) -> bool {
    !(resp.body().is_streaming() || resp.status().is_informational() || out.has_tail())
}

/// Stages a response whose body is in memory, without waiting; only for a response
/// [`stages_in_memory`] takes.
pub(super) fn stage_in_memory(
    out: &mut Output,
    resp: Response<Body>,
    cx: &HeadContext<'_>,
) -> Keep {
    debug_assert!(stages_in_memory(out, &resp));
    let (parts, body) = resp.into_parts();
    let cx = HeadContext {
        body_len: body.size_hint().exact(),
        ..*cx
    };
    let head = response_head::encode(out.stage(), parts.status, &parts.headers, &cx);
    let mut writer = BodyWriter::new(head.framing);
    if let Some(data) = body.into_full() {
        // A chunked body's end follows its data in the staging buffer, so the data goes
        // there too (a handler that sets `transfer-encoding` itself; rare).
        let copy = head.framing == Framing::Chunked;
        writer.frame(out, data, copy);
    }
    let complete = writer.finish(out);
    if head.close || !complete {
        Keep::Close
    } else {
        Keep::Open
    }
}

/// Sends what is staged (a response head, at least), then the file range: each chunk whose
/// pages are in the page cache with `sendfile(2)`, from the file to the socket; any other
/// chunk read through the body (on the blocking pool when it would wait for the disk) and
/// written. Yields between chunks, as the body does when read. Returns whether the whole
/// range went: a file that ends early (truncated since its length was taken) leaves the
/// response short, and the connection must close.
async fn send_file(io: &HttpIo, out: &mut Output, file: &mut FileBody) -> io::Result<bool> {
    let mut first = true;
    while file.remaining() > 0 {
        poll_fn(|cx| file.poll_yield(cx)).await;
        let Some((mut pos, len)) = file.resident_chunk() else {
            // Not (known to be) in memory: read it as the body would be read.
            out.flush(io).await?;
            first = false;
            match poll_fn(|cx| Pin::new(&mut *file).poll_frame(cx)).await {
                Some(Ok(frame)) => {
                    let data = frame.into_data().unwrap_or_default();
                    if data.is_empty() {
                        continue;
                    }
                    out.push(data);
                    out.flush(io).await?;
                }
                Some(Err(e)) => {
                    tracing::warn!(error = %e, "static file failed while sent; closing the connection");
                    return Ok(false);
                }
                None => return Ok(false),
            }
            continue;
        };
        if std::mem::take(&mut first) {
            // The head goes with the start of the file.
            out.flush_more(io).await?;
        }
        let end = pos + len as u64;
        while pos < end {
            let want = (end - pos) as usize;
            let n = poll_fn(|cx| io.poll_sendfile(cx, file.file(), &mut pos, want)).await?;
            if n == 0 {
                tracing::warn!(
                    missing = file.remaining(),
                    "static file ended before its content-length; closing the connection"
                );
                return Ok(false);
            }
            file.sent(n as u64, pos == end);
        }
    }
    // Whatever is still staged (nothing, unless the range was empty).
    out.flush(io).await?;
    Ok(true)
}

/// Frames body data as the head promised.
struct BodyWriter {
    framing: Framing,
    sent: u64,
    /// More data came than `content-length` allowed (dropped).
    overflow: bool,
    /// The last chunk went out as the output's tail, its CRLF not staged yet.
    owes_crlf: bool,
}

impl BodyWriter {
    fn new(framing: Framing) -> Self {
        BodyWriter {
            framing,
            sent: 0,
            overflow: false,
            owes_crlf: false,
        }
    }

    /// Stages the CRLF owed by the last chunk, if one is; whether it did. `out` must have
    /// no tail (all of it sent).
    fn settle(&mut self, out: &mut Output) -> bool {
        if !self.owes_crlf || out.has_tail() {
            return false;
        }
        out.stage().extend_from_slice(b"\r\n");
        self.owes_crlf = false;
        true
    }

    /// Stages one chunk of data. `out` must have room (no unsent data after its stage).
    fn data(&mut self, out: &mut Output, data: Bytes) {
        self.frame(out, data, false)
    }

    /// [`data`](Self::data), copied into the staging buffer if `copy`, whatever its size.
    fn frame(&mut self, out: &mut Output, mut data: Bytes, copy: bool) {
        if data.is_empty() {
            return;
        }
        match self.framing {
            Framing::NoBody => return,
            Framing::Length(len) => {
                let room = len - self.sent;
                if data.len() as u64 > room {
                    data.truncate(room as usize);
                    self.overflow = true;
                }
            }
            Framing::Chunked => {
                let buf = out.stage();
                if std::mem::take(&mut self.owes_crlf) {
                    buf.extend_from_slice(b"\r\n");
                }
                let mut hex = [0u8; 16];
                buf.extend_from_slice(hex_len(data.len(), &mut hex));
                buf.extend_from_slice(b"\r\n");
            }
            Framing::UntilClose => {}
        }
        self.sent += data.len() as u64;
        if copy {
            out.stage().extend_from_slice(&data);
        } else {
            out.push(data);
        }
        // A chunk copied into the stage is ended at once; one kept as the tail is ended when
        // more is staged or the body waits (`settle`).
        if self.framing == Framing::Chunked {
            if out.has_tail() {
                self.owes_crlf = true;
            } else {
                out.stage().extend_from_slice(b"\r\n");
            }
        }
    }

    /// Stages the end of the body; returns whether the body matched its framing (when not,
    /// the connection must close: the client cannot tell where the next response starts).
    fn finish(self, out: &mut Output) -> bool {
        match self.framing {
            Framing::Chunked if self.owes_crlf => out.stage().extend_from_slice(b"\r\n0\r\n\r\n"),
            Framing::Chunked => out.stage().extend_from_slice(b"0\r\n\r\n"),
            Framing::Length(len) if len != self.sent || self.overflow => {
                tracing::warn!(
                    declared = len,
                    sent = self.sent,
                    "response body did not match its content-length; closing the connection"
                );
                return false;
            }
            _ => {}
        }
        true
    }
}

/// `n` in lower-case hexadecimal.
fn hex_len(mut n: usize, buf: &mut [u8; 16]) -> &[u8] {
    let mut i = buf.len();
    loop {
        i -= 1;
        buf[i] = b"0123456789abcdef"[n & 0xf];
        n >>= 4;
        if n == 0 {
            return &buf[i..];
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    mod sendfile {
        use std::cell::Cell;
        use std::io::Read;
        use std::sync::Arc;

        use super::*;
        use crate::http::file_body::tests::SMALL_CHUNKS;
        use crate::http::file_body::{tests as file_body, NowaitRead, Resident};
        use crate::http::io::tests::with_io;
        use crate::http::sys::in_page_cache;
        use crate::http::testing::noise;

        thread_local! {
            /// Chunks the fakes below were asked about / read.
            static ASKED: Cell<usize> = const { Cell::new(0) };
            static READ: Cell<usize> = const { Cell::new(0) };
        }

        fn always(_: &std::fs::File, _: u64, _: u64) -> bool {
            ASKED.with(|c| c.set(c.get() + 1));
            true
        }

        fn never(_: &std::fs::File, _: u64, _: u64) -> bool {
            ASKED.with(|c| c.set(c.get() + 1));
            false
        }

        fn every_other(_: &std::fs::File, _: u64, _: u64) -> bool {
            ASKED.with(|c| {
                c.set(c.get() + 1);
                c.get() % 2 == 0
            })
        }

        /// A read as from the page cache, counted.
        fn read_at(
            file: &std::fs::File,
            buf: &mut Vec<u8>,
            len: usize,
            pos: u64,
        ) -> io::Result<usize> {
            READ.with(|c| c.set(c.get() + 1));
            file_body::read_at(file, buf, len, pos)
        }

        /// Sends "HEAD" then `count` bytes of `path` from `start` through [`send_file`] to a
        /// loopback client; returns what the client received, whether `send_file` reported
        /// the range complete, the bytes counted out, and the chunks read through the body.
        fn send(
            path: &std::path::Path,
            start: u64,
            count: u64,
            resident: Resident,
        ) -> (Vec<u8>, bool, u64, usize) {
            let (reader, complete, out_bytes) = with_io(async |io, activity, mut client| {
                let reader = std::thread::spawn(move || {
                    let mut got = Vec::new();
                    client.read_to_end(&mut got).unwrap();
                    got
                });
                READ.with(|c| c.set(0));
                let file = std::fs::File::open(path).unwrap();
                let mut body = FileBody::new(Arc::new(file), start, count, SMALL_CHUNKS)
                    .with_seams(resident, Some(read_at as NowaitRead));
                let mut out = Output::default();
                out.stage().extend_from_slice(b"HEAD");
                let complete = send_file(&io, &mut out, &mut body).await.unwrap();
                // Dropping `io` closes the socket, which ends the reader.
                (reader, complete, activity.bytes().1)
            });
            (
                reader.join().unwrap(),
                complete,
                out_bytes,
                READ.with(Cell::get),
            )
        }

        #[test]
        fn file_ranges_are_byte_exact_with_sendfile_or_read_when_not_in_memory() {
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("f.bin");
            let contents = noise(123_457);
            std::fs::write(&path, &contents).unwrap();
            for (start, count) in [
                (0u64, 123_457u64),
                (1, 99_999),
                (12_345, 10_001),
                (123_000, 457),
            ] {
                let chunks = count.div_ceil(10_000) as usize;
                for (resident, reads) in [
                    (always as Resident, 0),
                    (never, chunks),
                    (every_other, chunks.div_ceil(2)),
                ] {
                    ASKED.with(|c| c.set(0));
                    let (got, complete, out, read) = send(&path, start, count, resident);
                    let range = &contents[start as usize..(start + count) as usize];
                    assert!(complete);
                    assert_eq!(&got[..4], b"HEAD");
                    assert!(got[4..] == *range, "{start} {count}: {} bytes", got.len());
                    assert_eq!(out, count + 4);
                    assert_eq!(read, reads, "{start} {count}");
                    assert_eq!(ASKED.with(Cell::get), chunks);
                }
            }
            // The real check: the file was just written, so it is in the page cache (where
            // cachestat is available) and nothing is read.
            let file = std::fs::File::open(&path).unwrap();
            if in_page_cache(&file, 0, contents.len() as u64) {
                let (got, complete, _, read) = send(&path, 0, 123_457, in_page_cache);
                assert!(complete && got[4..] == contents[..]);
                assert_eq!(read, 0);
            }
            // A file shorter than promised: what it has, then "incomplete" (the caller
            // closes the connection), whichever way its chunks go.
            for resident in [always as Resident, never, in_page_cache] {
                let (got, complete, _, _) = send(&path, 100_000, 30_000, resident);
                assert!(!complete);
                assert!(got.len() <= 4 + 23_457);
                assert!(got[4..] == contents[100_000..100_000 + got.len() - 4]);
            }
        }
    }

    #[test]
    fn chunk_sizes_are_hex() {
        let mut b = [0u8; 16];
        assert_eq!(hex_len(0, &mut b), b"0");
        assert_eq!(hex_len(255, &mut b), b"ff");
        assert_eq!(hex_len(65536, &mut b), b"10000");
    }
}
