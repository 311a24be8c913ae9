//! Minimal HTTP/1.1 response framing: just enough parsing to know where a
//! response ends, its status, and whether the connection stays open.

use bytes::{Buf, BytesMut};

/// Longest response head accepted, in bytes.
const MAX_HEAD: usize = 64 * 1024;
/// Longest chunk-size or trailer line accepted, in bytes.
const MAX_LINE: usize = 4096;
/// Most headers parsed in one response head.
const MAX_HEADERS: usize = 64;

/// A response that does not follow HTTP/1.1 framing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParseError(pub &'static str);

/// A fully framed response.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ResponseInfo {
    /// Status code.
    pub status: u16,
    /// True when the server will close the connection after this response.
    pub close: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Head,
    Body { remaining: u64 },
    ChunkSize,
    ChunkData { remaining: u64 },
    ChunkCrlf,
    Trailers,
    UntilEof,
}

/// Incremental response framer; one per connection, reused across responses.
#[derive(Debug)]
pub struct ResponseParser {
    state: State,
    status: u16,
    close: bool,
    head_request: bool,
}

impl ResponseParser {
    /// A parser for responses to requests of the given kind (`HEAD` responses
    /// have no body).
    pub fn new(head_request: bool) -> Self {
        Self {
            state: State::Head,
            status: 0,
            close: false,
            head_request,
        }
    }

    /// Resets the parser for the next response on the same connection.
    pub fn reset(&mut self) {
        self.state = State::Head;
        self.status = 0;
        self.close = false;
    }

    fn done(&mut self) -> ResponseInfo {
        let info = ResponseInfo {
            status: self.status,
            close: self.close,
        };
        self.reset();
        info
    }

    /// Consumes bytes from `buf`; returns the response once it is complete.
    ///
    /// Bytes of a complete response are removed from `buf`; anything after
    /// it is left in place.
    pub fn feed(&mut self, buf: &mut BytesMut) -> Result<Option<ResponseInfo>, ParseError> {
        loop {
            match self.state {
                State::Head => {
                    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
                    let mut response = httparse::Response::new(&mut headers);
                    let len = match response.parse(buf) {
                        Ok(httparse::Status::Complete(len)) => len,
                        Ok(httparse::Status::Partial) => {
                            if buf.len() > MAX_HEAD {
                                return Err(ParseError("response head too large"));
                            }
                            return Ok(None);
                        }
                        Err(_) => return Err(ParseError("malformed response head")),
                    };
                    let status = response.code.unwrap_or(0);
                    let http10 = response.version == Some(0);
                    let mut content_length: Option<u64> = None;
                    let mut chunked = false;
                    let mut close = http10;
                    for h in response.headers.iter() {
                        if h.name.eq_ignore_ascii_case("content-length") {
                            let v = std::str::from_utf8(h.value)
                                .ok()
                                .and_then(|s| s.trim().parse::<u64>().ok())
                                .ok_or(ParseError("invalid Content-Length"))?;
                            if content_length.is_some_and(|old| old != v) {
                                return Err(ParseError("conflicting Content-Length headers"));
                            }
                            content_length = Some(v);
                        } else if h.name.eq_ignore_ascii_case("transfer-encoding") {
                            chunked =
                                h.value
                                    .split(|b| *b == b',')
                                    .next_back()
                                    .is_some_and(|last| {
                                        last.trim_ascii().eq_ignore_ascii_case(b"chunked")
                                    });
                        } else if h.name.eq_ignore_ascii_case("connection") {
                            for token in h.value.split(|b| *b == b',') {
                                let token = token.trim_ascii();
                                if token.eq_ignore_ascii_case(b"close") {
                                    close = true;
                                } else if token.eq_ignore_ascii_case(b"keep-alive") {
                                    close = false;
                                }
                            }
                        }
                    }
                    buf.advance(len);
                    if (100..200).contains(&status) {
                        // Interim response (100 Continue): skip it entirely.
                        continue;
                    }
                    self.status = status;
                    self.close = close;
                    let bodyless = self.head_request || status == 204 || status == 304;
                    self.state = if bodyless {
                        return Ok(Some(self.done()));
                    } else if chunked {
                        State::ChunkSize
                    } else if let Some(n) = content_length {
                        if n == 0 {
                            return Ok(Some(self.done()));
                        }
                        State::Body { remaining: n }
                    } else {
                        self.close = true;
                        State::UntilEof
                    };
                }
                State::Body { remaining } => {
                    let take = remaining.min(buf.len() as u64);
                    buf.advance(take as usize);
                    if take == remaining {
                        return Ok(Some(self.done()));
                    }
                    self.state = State::Body {
                        remaining: remaining - take,
                    };
                    return Ok(None);
                }
                State::ChunkSize => match httparse::parse_chunk_size(buf) {
                    Ok(httparse::Status::Complete((len, size))) => {
                        buf.advance(len);
                        self.state = if size == 0 {
                            State::Trailers
                        } else {
                            State::ChunkData { remaining: size }
                        };
                    }
                    Ok(httparse::Status::Partial) => {
                        if buf.len() > MAX_LINE {
                            return Err(ParseError("chunk size line too long"));
                        }
                        return Ok(None);
                    }
                    Err(_) => return Err(ParseError("invalid chunk size")),
                },
                State::ChunkData { remaining } => {
                    let take = remaining.min(buf.len() as u64);
                    buf.advance(take as usize);
                    if take < remaining {
                        self.state = State::ChunkData {
                            remaining: remaining - take,
                        };
                        return Ok(None);
                    }
                    self.state = State::ChunkCrlf;
                }
                State::ChunkCrlf => {
                    if buf.len() < 2 {
                        return Ok(None);
                    }
                    if &buf[..2] != b"\r\n" {
                        return Err(ParseError("chunk data not followed by CRLF"));
                    }
                    buf.advance(2);
                    self.state = State::ChunkSize;
                }
                State::Trailers => {
                    let Some(pos) = buf.windows(2).position(|w| w == b"\r\n") else {
                        if buf.len() > MAX_LINE {
                            return Err(ParseError("trailer line too long"));
                        }
                        return Ok(None);
                    };
                    buf.advance(pos + 2);
                    if pos == 0 {
                        return Ok(Some(self.done()));
                    }
                }
                State::UntilEof => {
                    buf.clear();
                    return Ok(None);
                }
            }
        }
    }

    /// Called when the peer closed the connection: completes a response
    /// delimited by end-of-file, or reports that none was in progress
    /// (`Ok(None)`, nothing was received) or that it was cut short.
    pub fn on_eof(&mut self, nothing_received: bool) -> Result<Option<ResponseInfo>, ParseError> {
        match self.state {
            State::UntilEof => Ok(Some(self.done())),
            State::Head if nothing_received => Ok(None),
            _ => Err(ParseError("connection closed in the middle of a response")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn feed_all(parser: &mut ResponseParser, data: &[u8], step: usize) -> Vec<ResponseInfo> {
        let mut out = Vec::new();
        let mut buf = BytesMut::new();
        for piece in data.chunks(step) {
            buf.extend_from_slice(piece);
            while let Some(info) = parser.feed(&mut buf).unwrap() {
                out.push(info);
            }
        }
        out
    }

    #[test]
    fn content_length_any_split() {
        let data = b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhelloHTTP/1.1 404 NF\r\nContent-Length: 0\r\nConnection: close\r\n\r\n";
        for step in 1..data.len() {
            let got = feed_all(&mut ResponseParser::new(false), data, step);
            assert_eq!(
                got,
                vec![
                    ResponseInfo {
                        status: 200,
                        close: false
                    },
                    ResponseInfo {
                        status: 404,
                        close: true
                    }
                ],
                "step {step}"
            );
        }
    }

    #[test]
    fn chunked_any_split() {
        let data = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5;ext=1\r\nhello\r\n1\r\n \r\n10\r\n0123456789abcdef\r\n0\r\nX-T: y\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\nz";
        for step in 1..data.len() {
            let got = feed_all(&mut ResponseParser::new(false), data, step);
            assert_eq!(got.len(), 2, "step {step}");
        }
    }

    #[test]
    fn until_eof_and_errors() {
        let mut p = ResponseParser::new(false);
        let mut buf = BytesMut::from(&b"HTTP/1.0 200 OK\r\n\r\nbody"[..]);
        assert_eq!(p.feed(&mut buf).unwrap(), None);
        assert_eq!(
            p.on_eof(false).unwrap(),
            Some(ResponseInfo {
                status: 200,
                close: true
            })
        );
        let mut buf = BytesMut::from(&b"garbage\r\n\r\n"[..]);
        assert!(p.feed(&mut buf).is_err());
        let mut p = ResponseParser::new(true);
        let mut buf = BytesMut::from(&b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n"[..]);
        assert!(p.feed(&mut buf).unwrap().is_some());
    }
}
