//! Encoding an HTTP/1.1 response head for Brisk's own HTTP/1.1 path, with the same choices
//! hyper makes: a `date` header, `content-length` when the body's size is known, chunked
//! transfer coding when it is not, no body for HEAD, 204 and 304, and `connection: close`
//! when the connection ends after this response. An HTTP/1.0 request gets an HTTP/1.0 answer:
//! no chunked coding (a body of unknown size runs until the close), and
//! `connection: keep-alive` when the connection stays open.

use std::cell::RefCell;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use http::header::{self, HeaderValue};
use http::{Method, StatusCode};

/// How a response body is delimited on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Framing {
    /// No body is sent (HEAD, 204, 304).
    NoBody,
    /// Exactly this many bytes.
    Length(u64),
    /// Chunked transfer coding.
    Chunked,
    /// The body runs until the connection closes (a handler's own `transfer-encoding`
    /// without `chunked`).
    UntilClose,
}

/// What the head commits the connection to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct HeadOutcome {
    pub framing: Framing,
    /// The connection closes once the response is sent.
    pub close: bool,
}

/// What the head needs to know besides the response itself.
pub(crate) struct HeadContext<'a> {
    pub method: &'a Method,
    /// The connection closes after this response: the request asked for `Connection: close`,
    /// or is HTTP/1.0 without `Connection: keep-alive`.
    pub close_requested: bool,
    /// The request is HTTP/1.0: the answer is too, with no chunked coding (a body of unknown
    /// size runs until the connection closes) and `connection: keep-alive` when it stays.
    pub http10: bool,
    /// The body's exact size, if known.
    pub body_len: Option<u64>,
}

/// Appends the status line and headers of a response to `dst`.
///
/// The status must not be informational (1xx): a handler cannot answer with one.
pub(crate) fn encode(
    dst: &mut Vec<u8>,
    status: StatusCode,
    headers: &http::HeaderMap,
    cx: &HeadContext<'_>,
) -> HeadOutcome {
    if status == StatusCode::OK && !cx.http10 {
        dst.extend_from_slice(b"HTTP/1.1 200 OK\r\n");
    } else {
        dst.extend_from_slice(if cx.http10 {
            b"HTTP/1.0 "
        } else {
            b"HTTP/1.1 "
        });
        dst.extend_from_slice(status.as_str().as_bytes());
        dst.push(b' ');
        let reason = status.canonical_reason().unwrap_or("<none>");
        dst.extend_from_slice(reason.as_bytes());
        dst.extend_from_slice(b"\r\n");
    }
    // 204 and 304 carry no body and no framing headers; HEAD carries no body.
    let bodyless_status = matches!(status, StatusCode::NO_CONTENT | StatusCode::NOT_MODIFIED);
    let head = cx.method == Method::HEAD;
    let mut declared: Option<Framing> = None;
    let mut close = cx.close_requested;
    let mut connection_close_written = false;
    let mut keep_alive_written = false;
    let mut date_written = false;
    for (name, value) in headers {
        match *name {
            header::CONTENT_LENGTH | header::TRANSFER_ENCODING if bodyless_status => continue,
            // As hyper: no transfer codings for HTTP/1.0.
            header::TRANSFER_ENCODING if cx.http10 => continue,
            header::CONTENT_LENGTH => {
                if let Some(n) = parse_length(value) {
                    declared.get_or_insert(Framing::Length(n));
                }
            }
            header::TRANSFER_ENCODING => {
                declared = Some(if is_chunked(value) {
                    Framing::Chunked
                } else {
                    Framing::UntilClose
                });
            }
            header::CONNECTION if has_token(value.as_bytes(), "close") => {
                close = true;
                connection_close_written = true;
            }
            header::CONNECTION if has_token(value.as_bytes(), "keep-alive") => {
                keep_alive_written = true;
            }
            header::DATE => date_written = true,
            _ => {}
        }
        dst.extend_from_slice(name.as_str().as_bytes());
        dst.extend_from_slice(b": ");
        dst.extend_from_slice(value.as_bytes());
        dst.extend_from_slice(b"\r\n");
    }
    if !date_written {
        dst.extend_from_slice(b"date: ");
        with_http_date(|d| dst.extend_from_slice(d));
        dst.extend_from_slice(b"\r\n");
    }
    let framing = match declared {
        _ if bodyless_status => Framing::NoBody,
        Some(f) => f,
        None => match cx.body_len {
            // As hyper: HEAD with an empty body says nothing about length.
            Some(0) if head => Framing::NoBody,
            Some(n) => {
                dst.extend_from_slice(b"content-length: ");
                dst.extend_from_slice(itoa::Buffer::new().format(n).as_bytes());
                dst.extend_from_slice(b"\r\n");
                Framing::Length(n)
            }
            None if head => Framing::NoBody,
            None if cx.http10 => Framing::UntilClose,
            None => {
                dst.extend_from_slice(b"transfer-encoding: chunked\r\n");
                Framing::Chunked
            }
        },
    };
    if framing == Framing::UntilClose {
        close = true;
    }
    if close && !connection_close_written {
        dst.extend_from_slice(b"connection: close\r\n");
    } else if !close && cx.http10 && !keep_alive_written {
        dst.extend_from_slice(b"connection: keep-alive\r\n");
    }
    dst.extend_from_slice(b"\r\n");
    let framing = if head { Framing::NoBody } else { framing };
    HeadOutcome { framing, close }
}

/// A `content-length` value: digits only.
fn parse_length(value: &HeaderValue) -> Option<u64> {
    let v = value.as_bytes();
    if v.is_empty() || !v.iter().all(u8::is_ascii_digit) {
        return None;
    }
    std::str::from_utf8(v).ok()?.parse().ok()
}

/// Whether the last transfer coding is `chunked`.
fn is_chunked(value: &HeaderValue) -> bool {
    value
        .as_bytes()
        .rsplit(|&b| b == b',')
        .next()
        .is_some_and(|last| last.trim_ascii().eq_ignore_ascii_case(b"chunked"))
}

/// Whether a comma-separated header value (`Connection`, `Upgrade`, …) holds `token`
/// (case-insensitive).
pub(crate) fn has_token(value: &[u8], token: &str) -> bool {
    value
        .split(|&b| b == b',')
        .any(|t| t.trim_ascii().eq_ignore_ascii_case(token.as_bytes()))
}

thread_local! {
    /// The current second and its HTTP date, formatted once per second.
    static DATE: RefCell<(u64, [u8; 29])> = const { RefCell::new((u64::MAX, [0; 29])) };
}

/// Calls `f` with the current time as an HTTP date (`Sun, 22 Nov 2026 08:00:00 GMT`).
fn with_http_date<R>(f: impl FnOnce(&[u8]) -> R) -> R {
    let secs = unix_secs();
    DATE.with(|cell| {
        let mut date = cell.borrow_mut();
        if date.0 != secs {
            let text = httpdate::fmt_http_date(UNIX_EPOCH + Duration::from_secs(secs));
            if let Ok(bytes) = <[u8; 29]>::try_from(text.as_bytes()) {
                *date = (secs, bytes);
            }
        }
        f(&date.1)
    })
}

/// Whole seconds since the Unix epoch, from the kernel's coarse clock
/// (`CLOCK_REALTIME_COARSE`): the time of the last timer tick, read from memory the kernel
/// shares (a few nanoseconds), where the precise clock reads the TSC and scales it (~25 ns,
/// once per response). A second shows at most a tick (1 to 4 ms) late.
fn unix_secs() -> u64 {
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `now` is a timespec the call may write.
    if unsafe { libc::clock_gettime(libc::CLOCK_REALTIME_COARSE, &mut now) } == 0 {
        return u64::try_from(now.tv_sec).unwrap_or(0);
    }
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn encoded(
        status: StatusCode,
        headers: &[(&str, &str)],
        cx: HeadContext<'_>,
    ) -> (String, HeadOutcome) {
        let mut map = http::HeaderMap::new();
        for (k, v) in headers {
            map.append(
                header::HeaderName::from_bytes(k.as_bytes()).unwrap(),
                HeaderValue::from_str(v).unwrap(),
            );
        }
        let mut dst = Vec::new();
        let out = encode(&mut dst, status, &map, &cx);
        (String::from_utf8(dst).unwrap(), out)
    }

    fn head(
        status: StatusCode,
        headers: &[(&str, &str)],
        method: Method,
        len: Option<u64>,
    ) -> (String, HeadOutcome) {
        let cx = HeadContext {
            method: &method,
            close_requested: false,
            http10: false,
            body_len: len,
        };
        encoded(status, headers, cx)
    }

    #[test]
    fn known_length_unknown_length_and_bodyless_responses() {
        let (h, o) = head(
            StatusCode::OK,
            &[("content-type", "text/plain")],
            Method::GET,
            Some(11),
        );
        assert!(h.starts_with("HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ndate: "));
        assert!(h.ends_with(" GMT\r\ncontent-length: 11\r\n\r\n"), "{h}");
        assert_eq!(
            o,
            HeadOutcome {
                framing: Framing::Length(11),
                close: false
            }
        );

        let (h, o) = head(StatusCode::OK, &[], Method::GET, None);
        assert!(h.ends_with("transfer-encoding: chunked\r\n\r\n"), "{h}");
        assert_eq!(o.framing, Framing::Chunked);

        let (h, o) = head(StatusCode::OK, &[], Method::HEAD, Some(11));
        assert!(
            h.ends_with("content-length: 11\r\n\r\n"),
            "HEAD keeps the length: {h}"
        );
        assert_eq!(o.framing, Framing::NoBody);

        let (h, o) = head(
            StatusCode::NOT_MODIFIED,
            &[("content-length", "5")],
            Method::GET,
            Some(5),
        );
        assert!(
            h.starts_with("HTTP/1.1 304 Not Modified\r\n") && !h.contains("content-length"),
            "{h}"
        );
        assert_eq!(o.framing, Framing::NoBody);
    }

    #[test]
    fn the_date_is_the_current_second() {
        let precise = SystemTime::now();
        let (h, _) = head(StatusCode::OK, &[], Method::GET, Some(0));
        let date = h
            .lines()
            .find_map(|l| l.strip_prefix("date: "))
            .unwrap_or_else(|| panic!("no date in {h}"));
        let sent = httpdate::parse_http_date(date).unwrap();
        // The coarse clock may show the second before, for a tick after it turned.
        let apart = match sent.duration_since(precise) {
            Ok(ahead) => ahead,
            Err(behind) => behind.duration(),
        };
        assert!(apart < Duration::from_secs(2), "{date} against {precise:?}");
    }

    #[test]
    fn handler_framing_close_and_date_are_respected() {
        let (h, o) = head(
            StatusCode::OK,
            &[("content-length", "3")],
            Method::GET,
            None,
        );
        assert_eq!(h.matches("content-length").count(), 1, "{h}");
        assert_eq!(o.framing, Framing::Length(3));

        let (_, o) = head(
            StatusCode::OK,
            &[("transfer-encoding", "gzip, chunked")],
            Method::GET,
            None,
        );
        assert_eq!(o.framing, Framing::Chunked);

        let (h, o) = head(
            StatusCode::OK,
            &[("connection", "Close")],
            Method::GET,
            Some(0),
        );
        assert!(o.close && h.matches("onnection").count() == 1, "{h}");

        let (h, _) = head(StatusCode::OK, &[("date", "x")], Method::GET, Some(0));
        assert_eq!(h.matches("date:").count(), 1, "{h}");

        let (h, _) = head(
            StatusCode::from_u16(599).unwrap(),
            &[],
            Method::GET,
            Some(0),
        );
        assert!(h.starts_with("HTTP/1.1 599 <none>\r\n"), "{h}");
    }

    fn head_1_0(headers: &[(&str, &str)], len: Option<u64>, close: bool) -> (String, HeadOutcome) {
        let cx = HeadContext {
            method: &Method::GET,
            close_requested: close,
            http10: true,
            body_len: len,
        };
        encoded(StatusCode::OK, headers, cx)
    }

    #[test]
    fn http_1_0_answers_in_1_0_without_chunks() {
        let (h, o) = head_1_0(&[], Some(5), false);
        assert!(h.starts_with("HTTP/1.0 200 OK\r\n"), "{h}");
        assert!(
            h.ends_with("content-length: 5\r\nconnection: keep-alive\r\n\r\n"),
            "{h}"
        );
        assert_eq!(
            o,
            HeadOutcome {
                framing: Framing::Length(5),
                close: false
            }
        );

        let (h, o) = head_1_0(&[], Some(5), true);
        assert!(!h.contains("keep-alive"), "{h}");
        assert!(o.close);

        // A body of unknown size, even one the handler calls chunked, runs until the close.
        for headers in [&[][..], &[("transfer-encoding", "chunked")][..]] {
            let (h, o) = head_1_0(headers, None, false);
            assert!(!h.contains("chunked") && !h.contains("keep-alive"), "{h}");
            assert!(h.ends_with("connection: close\r\n\r\n"), "{h}");
            assert_eq!(
                o,
                HeadOutcome {
                    framing: Framing::UntilClose,
                    close: true
                }
            );
        }

        let (h, _) = head_1_0(&[("connection", "keep-alive")], Some(0), false);
        assert_eq!(h.matches("keep-alive").count(), 1, "{h}");
    }

    #[test]
    fn a_requested_close_is_announced() {
        let mut dst = Vec::new();
        let cx = HeadContext {
            method: &Method::GET,
            close_requested: true,
            http10: false,
            body_len: Some(0),
        };
        let o = encode(&mut dst, StatusCode::OK, &http::HeaderMap::new(), &cx);
        assert!(o.close);
        assert!(String::from_utf8(dst)
            .unwrap()
            .contains("connection: close\r\n"));
    }
}
