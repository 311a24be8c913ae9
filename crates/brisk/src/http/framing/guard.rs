//! Strict framing on hyper's path. hyper reads a request that carries both `Content-Length`
//! and `Transfer-Encoding` by its `Transfer-Encoding` (RFC 9112 allows it) and drops the
//! `Content-Length` before Brisk sees the request, so the handler cannot refuse it. A proxy in
//! front that chose the other length would see a different request boundary: the stuff of
//! request smuggling.
//!
//! [`FramingGuard`] sits under hyper on the connections hyper serves (TLS, and those Brisk's
//! own path handed over) and follows the request stream: it holds each request head back
//! until the head is whole, reads its framing, and hands it on. A head with both lengths
//! reaches hyper as a request line hyper refuses, so hyper answers 400 and closes, after the
//! responses to any requests before it. Bodies pass through, followed by their length
//! (`Content-Length`, or chunk by chunk). A request that asks for an upgrade has no body: if
//! hyper switches protocols, what follows is taken from the guard with the connection
//! ([`FramingGuard::into_parts`]); if not, the next request is checked like any other. After
//! anything it cannot follow (a head it cannot parse, one over the head limits, a body hyper
//! will refuse) it steps aside and passes everything through: hyper refuses those itself and
//! closes.

use std::io;
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use bytes::{Buf, BytesMut};
use tokio::io::{AsyncRead, ReadBuf};

use super::head::{body_framing, BodyFraming};

/// What hyper reads instead of a head with both lengths: a request line it answers with 400.
const REFUSED: &[u8] = b"\x01 / HTTP/1.1\r\n\r\n";

/// Where the request stream stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Between requests: the next bytes are a head.
    Head,
    /// In a body of this many bytes still to come.
    Body(u64),
    /// In a chunked body.
    Chunked(Chunk),
    /// Not following any more: everything passes.
    Through,
    /// A refused head was replaced: the stream ends once [`REFUSED`] is read.
    Refused,
}

/// Where a chunked body stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Chunk {
    /// In a chunk-size line (`ext`: in its extensions).
    Size {
        n: u64,
        ext: bool,
    },
    /// After the size line's CR.
    SizeLf {
        n: u64,
    },
    /// In a chunk's data, this many bytes to come.
    Data(u64),
    /// After a chunk's data: its CR, then its LF.
    DataCr,
    DataLf,
    /// At the start of a trailer line (or of the empty line that ends the body).
    TrailerStart,
    /// In a trailer line.
    TrailerLine,
    /// After a trailer line's CR (`empty`: the line was empty, so the body ends).
    TrailerLf {
        empty: bool,
    },
}

/// A stream under hyper that refuses requests with both `Content-Length` and
/// `Transfer-Encoding` (see the [module](self)). Writes pass through unchanged.
pub(crate) struct FramingGuard<T> {
    inner: T,
    state: State,
    /// The largest head held back; past it hyper's own limit answers (431).
    max_head: usize,
    /// The most fields parsed in a head; a head with more is hyper's to refuse.
    max_headers: usize,
    /// How far past the approved bytes the search for a head's end has looked.
    scanned: usize,
    /// Bytes read from `inner` and not yet given to hyper.
    held: BytesMut,
    /// How many bytes at the front of `held` have been looked at and may go to hyper.
    approved: usize,
}

impl<T> FramingGuard<T> {
    /// A guard for heads of at most `max_head` bytes and `max_headers` fields (hyper's
    /// limits on the connection).
    pub(crate) fn new(inner: T, max_head: usize, max_headers: usize) -> Self {
        FramingGuard {
            inner,
            state: State::Head,
            max_head,
            max_headers,
            scanned: 0,
            held: BytesMut::new(),
            approved: 0,
        }
    }

    /// The stream underneath and the bytes read from it that hyper has not had (for a
    /// WebSocket upgrade, which leaves HTTP behind).
    pub(crate) fn into_parts(self) -> (T, BytesMut) {
        (self.inner, self.held)
    }

    /// The stream ended: a head cut short is dropped (hyper sees the stream end between
    /// requests and closes quietly), unless it is one hyper refuses anyway.
    fn at_end(&mut self) {
        let rest = &self.held[self.approved..];
        if self.state == State::Head
            && !rest.is_empty()
            && matches!(parse_head(rest, self.max_headers), Parsed::Other)
        {
            self.approved = self.held.len();
        } else {
            self.held.truncate(self.approved);
        }
    }

    /// Looks at the held bytes not yet approved, as far as they go.
    fn follow(&mut self) {
        while self.approved < self.held.len() {
            let rest = &self.held[self.approved..];
            match self.state {
                State::Through | State::Refused => self.approved = self.held.len(),
                State::Body(n) => {
                    let k = n.min(rest.len() as u64);
                    self.approved += k as usize;
                    self.state = if k == n {
                        State::Head
                    } else {
                        State::Body(n - k)
                    };
                }
                State::Chunked(chunk) => {
                    let (used, next) = follow_chunked(chunk, rest);
                    self.approved += used;
                    self.state = next;
                }
                State::Head => {
                    // A head ends with an empty line (CRLF or a bare LF, as httparse and hyper
                    // take it), and httparse finds a bad line when it has its end: parse
                    // again only once a line has ended since the last look.
                    let line_ended = rest[self.scanned.min(rest.len())..].contains(&b'\n');
                    let parsed = match line_ended {
                        true => parse_head(rest, self.max_headers),
                        false => Parsed::Partial,
                    };
                    let (end, next) = match parsed {
                        Parsed::Partial => {
                            self.scanned = rest.len();
                            if rest.len() > self.max_head {
                                self.state = State::Through;
                                continue;
                            }
                            return;
                        }
                        Parsed::Other => {
                            self.state = State::Through;
                            continue;
                        }
                        // Over the limit once whole, as when it arrives in pieces: hyper's.
                        Parsed::Head(end, _) if end > self.max_head => {
                            self.state = State::Through;
                            continue;
                        }
                        Parsed::Head(end, next) => (end, next),
                    };
                    self.scanned = 0;
                    match next {
                        Some(next) => {
                            self.approved += end;
                            self.state = next;
                        }
                        None => {
                            // Requests before it still go to hyper; this one becomes a line
                            // hyper refuses, and nothing after it is read.
                            self.held.truncate(self.approved);
                            self.held.extend_from_slice(REFUSED);
                            self.approved = self.held.len();
                            self.state = State::Refused;
                        }
                    }
                }
            }
        }
    }
}

/// What hyper reads from `stream` under a guard when it arrives `step` bytes at a time (the
/// same as [`AsyncRead`] gives, without a runtime): for the tests and the fuzz target.
#[cfg(any(test, feature = "fuzzing"))]
pub(crate) fn pass(stream: &[u8], step: usize, max_head: usize, max_headers: usize) -> Vec<u8> {
    let mut guard = FramingGuard::new((), max_head, max_headers);
    let mut out = Vec::new();
    for piece in stream.chunks(step.max(1)) {
        if guard.state == State::Refused {
            break;
        }
        guard.held.extend_from_slice(piece);
        guard.follow();
        out.extend_from_slice(&guard.held.split_to(guard.approved));
        guard.approved = 0;
    }
    guard.at_end();
    out.extend_from_slice(&guard.held.split_to(guard.approved));
    out
}

/// The request line that replaces a refused head (for the fuzz target's property).
#[cfg(feature = "fuzzing")]
pub(crate) const REFUSED_LINE: &[u8] = REFUSED;

/// What the held bytes start with.
enum Parsed {
    /// A whole head of this many bytes, and the state after it (`None`: it has both
    /// lengths).
    Head(usize, Option<State>),
    /// Not a whole head yet.
    Partial,
    /// Not a head httparse can read (hyper refuses it), or one with too many fields.
    Other,
}

/// Reads the head `bytes` start with (httparse skips empty lines before it, as hyper does).
fn parse_head(bytes: &[u8], max_headers: usize) -> Parsed {
    // On the stack for the usual limits (this runs for every request on hyper's path).
    let mut small = [httparse::EMPTY_HEADER; 128];
    let mut large = Vec::new();
    let headers = if max_headers <= small.len() {
        &mut small[..max_headers]
    } else {
        large.resize(max_headers, httparse::EMPTY_HEADER);
        &mut large[..]
    };
    let mut req = httparse::Request::new(headers);
    let end = match req.parse(bytes) {
        Ok(httparse::Status::Complete(end)) => end,
        Ok(httparse::Status::Partial) => return Parsed::Partial,
        Err(_) => return Parsed::Other,
    };
    Parsed::Head(end, next_after_head(&req))
}

/// The state after a whole head: `None` if the head has both lengths.
fn next_after_head(req: &httparse::Request<'_, '_>) -> Option<State> {
    Some(match body_framing(req.headers) {
        BodyFraming::Refused(_) => return None,
        BodyFraming::None | BodyFraming::Length(0) => State::Head,
        BodyFraming::Length(n) => State::Body(n),
        BodyFraming::Chunked => State::Chunked(Chunk::Size { n: 0, ext: false }),
        // hyper refuses it and closes: nothing after it is read as a request.
        BodyFraming::Unreadable => State::Through,
    })
}

/// Follows a chunked body over `bytes`: how many of them belong to it, and the state after.
fn follow_chunked(mut chunk: Chunk, bytes: &[u8]) -> (usize, State) {
    let mut i = 0;
    while i < bytes.len() {
        if let Chunk::Data(n) = chunk {
            let k = n.min((bytes.len() - i) as u64);
            i += k as usize;
            chunk = if k == n {
                Chunk::DataCr
            } else {
                Chunk::Data(n - k)
            };
            continue;
        }
        let b = bytes[i];
        i += 1;
        chunk = match (chunk, b) {
            (Chunk::Size { n, ext: false }, b) if b.is_ascii_hexdigit() => {
                let digit = (b as char).to_digit(16).unwrap_or(0) as u64;
                match n.checked_mul(16).and_then(|n| n.checked_add(digit)) {
                    Some(n) => Chunk::Size { n, ext: false },
                    None => return (i, State::Through),
                }
            }
            (Chunk::Size { n, .. }, b'\r') => Chunk::SizeLf { n },
            // Whitespace after the size, which hyper allows, then extensions if any.
            (Chunk::Size { n, ext: false }, b' ' | b'\t') => Chunk::Size { n, ext: true },
            (Chunk::Size { n, .. }, b';') | (Chunk::Size { n, ext: true }, _) => {
                Chunk::Size { n, ext: true }
            }
            (Chunk::SizeLf { n: 0 }, b'\n') => Chunk::TrailerStart,
            (Chunk::SizeLf { n }, b'\n') => Chunk::Data(n),
            (Chunk::DataCr, b'\r') => Chunk::DataLf,
            (Chunk::DataLf, b'\n') => Chunk::Size { n: 0, ext: false },
            (Chunk::TrailerStart, b'\r') => Chunk::TrailerLf { empty: true },
            (Chunk::TrailerLine, b'\r') => Chunk::TrailerLf { empty: false },
            (Chunk::TrailerStart | Chunk::TrailerLine, _) => Chunk::TrailerLine,
            (Chunk::TrailerLf { empty: true }, b'\n') => return (i, State::Head),
            (Chunk::TrailerLf { empty: false }, b'\n') => Chunk::TrailerStart,
            // Anything else is a body hyper will refuse: stop following.
            _ => return (i, State::Through),
        };
    }
    (i, State::Chunked(chunk))
}

impl<T: AsyncRead + Unpin> AsyncRead for FramingGuard<T> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        loop {
            if this.approved > 0 {
                let n = this.approved.min(buf.remaining());
                buf.put_slice(&this.held[..n]);
                this.held.advance(n);
                this.approved -= n;
                return Poll::Ready(Ok(()));
            }
            if this.state == State::Refused {
                return Poll::Ready(Ok(()));
            }
            if this.state == State::Through && this.held.is_empty() {
                return Pin::new(&mut this.inner).poll_read(cx, buf);
            }
            let mut scratch = [0u8; 8192];
            let mut more = ReadBuf::new(&mut scratch);
            ready!(Pin::new(&mut this.inner).poll_read(cx, &mut more))?;
            if more.filled().is_empty() {
                this.at_end();
                if this.approved > 0 {
                    continue;
                }
                return Poll::Ready(Ok(()));
            }
            this.held.extend_from_slice(more.filled());
            this.follow();
        }
    }
}

crate::http::write_through::write_through!(FramingGuard);

#[cfg(test)]
mod tests {
    use super::*;

    /// What hyper reads from `input`, given in pieces of `step` bytes.
    fn seen(input: &[u8], step: usize) -> Vec<u8> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        rt.block_on(async {
            use tokio::io::AsyncReadExt;
            let (mut client, server) = tokio::io::duplex(1 << 20);
            for piece in input.chunks(step) {
                tokio::io::AsyncWriteExt::write_all(&mut client, piece)
                    .await
                    .unwrap();
            }
            drop(client);
            let mut guard = FramingGuard::new(server, 64 * 1024, 100);
            let mut out = Vec::new();
            guard.read_to_end(&mut out).await.unwrap();
            out
        })
    }

    const GOOD: &[u8] = b"POST /a HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello\
        POST /b HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n\
        5;ext=1\r\nhello\r\n0\r\nTrailer: t\r\n\r\n\
        GET /c HTTP/1.1\r\nHost: x\r\n\r\n";

    #[test]
    fn well_framed_requests_pass_unchanged_however_they_arrive() {
        for step in [1, 3, 7, 64, GOOD.len()] {
            assert_eq!(seen(GOOD, step), GOOD, "step {step}");
            // The same without a runtime (what the fuzz target drives).
            assert_eq!(pass(GOOD, step, 64 * 1024, 100), GOOD, "step {step}");
        }
    }

    #[test]
    fn a_head_with_both_lengths_becomes_a_refused_line_after_the_requests_before_it() {
        let bad = b"POST /d HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\nGET /e HTTP/1.1\r\n\r\n";
        let input = [GOOD, &bad[..]].concat();
        for step in [1, 5, input.len()] {
            assert_eq!(seen(&input, step), [GOOD, REFUSED].concat(), "step {step}");
        }
        // Either order of the two fields.
        let swapped = b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\nContent-Length: 4\r\n\r\n";
        assert_eq!(seen(swapped, 2), REFUSED);
    }

    #[test]
    fn a_body_that_looks_like_a_head_is_not_read_as_one() {
        let body = b"POST /x HTTP/1.1\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n";
        let head = format!("POST / HTTP/1.1\r\nContent-Length: {}\r\n\r\n", body.len());
        let input = [head.as_bytes(), &body[..], b"GET / HTTP/1.1\r\n\r\n"].concat();
        assert_eq!(seen(&input, 9), input);
    }

    #[test]
    fn heads_ending_in_bare_lf_are_followed_like_any_other() {
        let good = b"GET / HTTP/1.1\nHost: x\n\nPOST /p HTTP/1.1\nContent-Length: 3\n\nabc";
        assert_eq!(seen(good, 2), good);
        let bad = b"GET / HTTP/1.1\nHost: x\n\nPOST / HTTP/1.1\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n";
        assert_eq!(
            seen(bad, 5),
            [&b"GET / HTTP/1.1\nHost: x\n\n"[..], REFUSED].concat()
        );
    }

    #[test]
    fn a_request_asking_for_an_upgrade_does_not_switch_the_guard_off() {
        // Not upgraded (a 404, say): the next request is checked as usual.
        let input = b"GET /x HTTP/1.1\r\nUpgrade: websocket\r\n\r\nPOST / HTTP/1.1\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n";
        assert_eq!(
            seen(input, 7),
            [
                &b"GET /x HTTP/1.1\r\nUpgrade: websocket\r\n\r\n"[..],
                REFUSED
            ]
            .concat()
        );
    }

    #[test]
    fn lengths_and_chunk_sizes_hyper_accepts_are_followed() {
        let input = b"POST / HTTP/1.1\r\nContent-Length: 5, 5\r\ncontent-length: 05\r\n\r\nhello\
            POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n5 \r\nhello\r\n0\t\r\n\r\n\
            POST / HTTP/1.1\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n";
        let cut = input.windows(4).rposition(|w| w == b"POST").unwrap();
        assert_eq!(seen(input, 3), [&input[..cut], REFUSED].concat());
    }

    #[test]
    fn what_it_cannot_follow_passes_through() {
        for input in [
            &b"POST / HTTP/1.1\r\nTransfer-Encoding: gzip\r\n\r\nanything"[..],
            b"POST / HTTP/1.1\r\nContent-Length: +5\r\n\r\nanything",
            b"\x00garbage\r\n\r\nmore",
            b"\r\n\r\nGET / HTTP/1.1\r\n\r\n",
        ] {
            assert_eq!(seen(input, 4), input);
        }
    }

    #[test]
    fn a_head_cut_short_by_the_end_of_the_stream_is_dropped() {
        assert_eq!(
            seen(b"GET / HTTP/1.1\r\n\r\nGET /half HTTP/1.1\r\nHo", 6),
            b"GET / HTTP/1.1\r\n\r\n"
        );
    }
}
