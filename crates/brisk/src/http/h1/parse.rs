//! Parsing a request head (and a small body) with `httparse`, and deciding whether the
//! request is Brisk's to answer or hyper's (see the [module documentation](super)).

use std::mem::MaybeUninit;

use bytes::Bytes;
use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use http::{Method, Request, StatusCode, Uri, Version};

use crate::http::framing::head::{body_framing, BodyFraming};
use crate::http::response_head::has_token;
use crate::http::{HttpLimits, RequestBody};

/// Header slots on the stack; a higher `max_headers` limit parses into a heap array.
const STACK_HEADERS: usize = 128;
/// Request bodies up to this size (and the max package size) are read here, whole; larger
/// ones stream through hyper.
const BODY_MAX: usize = 64 * 1024;

/// What parsing the start of the received bytes found.
// The request is moved once, straight to the handler: boxing it would allocate per request.
#[allow(clippy::large_enum_variant)]
pub(crate) enum Parsed {
    /// A complete request (head and body), `len` bytes long.
    Request {
        req: Request<RequestBody>,
        len: usize,
        /// The client asked for `Connection: close`.
        close: bool,
    },
    /// The head is not complete yet.
    Partial,
    /// The head is complete, its body is not.
    AwaitingBody,
    /// This request is hyper's (see the module documentation).
    ForHyper,
    /// The request must not be served: answer with this status and sentence, and close.
    Reject(StatusCode, &'static str),
}

/// Parses the request at the start of `data`; bodies over `max_body` are hyper's (413).
pub(crate) fn parse(data: &Bytes, limits: &HttpLimits, max_body: usize) -> Parsed {
    let slots = limits.max_headers;
    if slots <= STACK_HEADERS {
        let mut headers = [const { MaybeUninit::uninit() }; STACK_HEADERS];
        parse_into(data, limits, max_body, &mut headers[..slots])
    } else {
        let mut headers = Vec::with_capacity(slots);
        headers.resize_with(slots, MaybeUninit::uninit);
        parse_into(data, limits, max_body, &mut headers)
    }
}

fn parse_into<'b>(
    data: &'b Bytes,
    limits: &HttpLimits,
    max_body: usize,
    slots: &mut [MaybeUninit<httparse::Header<'b>>],
) -> Parsed {
    let mut head = httparse::Request::new(&mut []);
    let len = match head.parse_with_uninit_headers(data, slots) {
        Ok(httparse::Status::Complete(len)) if len <= limits.max_header_bytes => len,
        Ok(httparse::Status::Partial) if data.len() <= limits.max_header_bytes => {
            return Parsed::Partial
        }
        // A request line that alone passes the head limit: 414, as nginx answers.
        _ if data.len() > limits.max_header_bytes
            && !data[..limits.max_header_bytes].contains(&b'\n') =>
        {
            return Parsed::Reject(StatusCode::URI_TOO_LONG, "request line too long\n")
        }
        // Too long, too many headers, or malformed: hyper answers 431 or 400.
        _ => return Parsed::ForHyper,
    };
    let http10 = match head.version {
        Some(1) => false,
        Some(0) => true,
        _ => return Parsed::ForHyper,
    };
    let (Some(method), Some(path)) = (head.method, head.path) else {
        return Parsed::ForHyper;
    };
    let Ok(method) = Method::from_bytes(method.as_bytes()) else {
        return Parsed::ForHyper;
    };
    if method == Method::CONNECT {
        return Parsed::ForHyper;
    }
    let Ok(uri) = Uri::from_maybe_shared(data.slice_ref(path.as_bytes())) else {
        return Parsed::ForHyper;
    };
    // Read as the guard under hyper reads it (see `framing`): a small body with a length is
    // this path's, a chunked or unreadable one hyper's, both lengths refused.
    let body_len = match body_framing(head.headers) {
        BodyFraming::None => 0,
        BodyFraming::Length(n) if n <= BODY_MAX.min(max_body) as u64 => n as usize,
        BodyFraming::Length(_) | BodyFraming::Chunked | BodyFraming::Unreadable => {
            return Parsed::ForHyper
        }
        BodyFraming::Refused(why) => return Parsed::Reject(StatusCode::BAD_REQUEST, why),
    };
    let mut headers = HeaderMap::with_capacity(head.headers.len());
    let mut close = false;
    let mut keep_alive = false;
    for h in head.headers.iter() {
        let Ok(name) = HeaderName::from_bytes(h.name.as_bytes()) else {
            return Parsed::ForHyper;
        };
        let Ok(value) = HeaderValue::from_maybe_shared(data.slice_ref(h.value)) else {
            return Parsed::ForHyper;
        };
        match name {
            header::EXPECT | header::UPGRADE => return Parsed::ForHyper,
            header::CONNECTION => {
                if has_token(h.value, "upgrade") {
                    return Parsed::ForHyper;
                }
                close |= has_token(h.value, "close");
                keep_alive |= has_token(h.value, "keep-alive");
            }
            _ => {}
        }
        headers.append(name, value);
    }
    let body = match body_len {
        0 => RequestBody::empty(),
        n if data.len() - len < n => return Parsed::AwaitingBody,
        n => RequestBody::full(data.slice(len..len + n)),
    };
    let mut req = Request::new(body);
    if http10 {
        // HTTP/1.0 keeps the connection only when asked to.
        close |= !keep_alive;
        *req.version_mut() = Version::HTTP_10;
    }
    *req.method_mut() = method;
    *req.uri_mut() = uri;
    *req.headers_mut() = headers;
    let len = len + body_len;
    Parsed::Request { req, len, close }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parsed(raw: &str) -> Parsed {
        let limits = HttpLimits::default();
        parse(&Bytes::copy_from_slice(raw.as_bytes()), &limits, 1 << 20)
    }

    #[test]
    fn simple_requests_are_taken_with_their_length_and_close() {
        let raw =
            "GET /a?b=1 HTTP/1.1\r\nHost: x\r\nConnection: Close\r\nX-A: 1\r\nX-A: 2\r\n\r\nGET /";
        let Parsed::Request { req, len, close } = parsed(raw) else {
            panic!("not taken")
        };
        assert_eq!(len, raw.len() - "GET /".len());
        assert!(close);
        assert_eq!(req.method(), Method::GET);
        assert_eq!(req.uri().path(), "/a");
        assert_eq!(req.uri().query(), Some("b=1"));
        assert_eq!(req.headers().get_all("x-a").iter().count(), 2);
        assert!(matches!(parsed("GET / HTTP/1.1\r\nHost"), Parsed::Partial));
        assert!(matches!(
            parsed("DELETE /x HTTP/1.1\r\nContent-Length: 00\r\n\r\n"),
            Parsed::Request { close: false, .. }
        ));
    }

    #[test]
    fn http_1_0_is_taken_and_keeps_the_connection_only_when_asked() {
        let Parsed::Request { req, close, .. } = parsed("GET / HTTP/1.0\r\n\r\n") else {
            panic!("not taken")
        };
        assert_eq!(req.version(), Version::HTTP_10);
        assert!(close, "HTTP/1.0 closes by default");
        let raw = "GET / HTTP/1.0\r\nConnection: Keep-Alive\r\n\r\n";
        let Parsed::Request { req, close, .. } = parsed(raw) else {
            panic!("not taken")
        };
        assert_eq!(req.version(), Version::HTTP_10);
        assert!(!close);
        let Parsed::Request { req, .. } = parsed("GET / HTTP/1.1\r\n\r\n") else {
            panic!("not taken")
        };
        assert_eq!(req.version(), Version::HTTP_11);
    }

    #[test]
    fn small_bodies_with_a_length_are_taken_whole() {
        let raw = "POST /e HTTP/1.1\r\nContent-Length: 5\r\n\r\nhelloGET";
        let Parsed::Request { req, len, .. } = parsed(raw) else {
            panic!("not taken")
        };
        assert_eq!(len, raw.len() - 3);
        let body = futures_util::FutureExt::now_or_never(http_body_util::BodyExt::collect(
            req.into_body(),
        ));
        assert_eq!(&body.unwrap().unwrap().to_bytes()[..], b"hello");
        let head = "POST /e HTTP/1.1\r\nContent-Length: 5\r\n\r\nhel";
        assert!(matches!(parsed(head), Parsed::AwaitingBody));
        // The same length said twice, as hyper takes it.
        let twice = "POST /e HTTP/1.1\r\nContent-Length: 5\r\ncontent-length: 5, 05\r\n\r\nhello";
        assert!(matches!(parsed(twice), Parsed::Request { len, .. } if len == twice.len()));
    }

    #[test]
    fn both_lengths_are_refused() {
        for raw in [
            "POST / HTTP/1.1\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n",
            "POST / HTTP/1.1\r\ntransfer-encoding: chunked\r\ncontent-length: 3\r\n\r\n",
        ] {
            assert!(
                matches!(parsed(raw), Parsed::Reject(StatusCode::BAD_REQUEST, _)),
                "{raw:?}"
            );
        }
    }

    #[test]
    fn anything_else_goes_to_hyper() {
        for raw in [
            "POST / HTTP/1.1\r\nContent-Length: 65537\r\n\r\nabc",
            "POST / HTTP/1.1\r\nContent-Length: +3\r\n\r\nabc",
            "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
            "POST / HTTP/1.1\r\nContent-Length: 0\r\nContent-Length: 4\r\n\r\n",
            "POST / HTTP/1.1\r\nContent-Length: 4, 5\r\n\r\nabcd",
            "PUT / HTTP/1.1\r\nExpect: 100-continue\r\n\r\n",
            "GET /ws HTTP/1.1\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n",
            "GET / HTTP/2.0\r\n\r\n",
            "CONNECT example.com:443 HTTP/1.1\r\n\r\n",
            "GARBAGE\r\n\r\n",
            "GET / HTTP/1.1\r\nBad Header: v\r\n\r\n",
        ] {
            assert!(matches!(parsed(raw), Parsed::ForHyper), "{raw:?}");
        }
        let long_line = format!("GET /{} HTTP/1.1\r\n\r\n", "a".repeat(20_000));
        assert!(
            matches!(
                parsed(&long_line),
                Parsed::Reject(StatusCode::URI_TOO_LONG, _)
            ),
            "a request line over the head limit"
        );
        let big = format!("GET / HTTP/1.1\r\nX: {}", "a".repeat(20_000));
        assert!(
            matches!(parsed(&big), Parsed::ForHyper),
            "over the head limit"
        );
        let many: String = (0..101).map(|i| format!("X-{i}: v\r\n")).collect();
        let many = format!("GET / HTTP/1.1\r\n{many}\r\n");
        assert!(
            matches!(parsed(&many), Parsed::ForHyper),
            "over the header count"
        );
    }
}
