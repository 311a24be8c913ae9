//! How a request head says its body is framed, read from `httparse`'s fields: one reading for
//! both HTTP/1 readers, Brisk's own path (`h1::parse`) and the guard under hyper
//! (`guard.rs`), so the two cannot disagree on where a request ends.

/// The body a head declares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum BodyFraming {
    /// No `Content-Length` and no `Transfer-Encoding`: no body.
    None,
    /// A `Content-Length` of this many bytes: one value, or the same value repeated (in a
    /// comma list or in several fields), digits only, as hyper accepts it.
    Length(u64),
    /// `Transfer-Encoding` whose last coding is `chunked`.
    Chunked,
    /// Both `Content-Length` and `Transfer-Encoding`: a server before this one may have read
    /// the other length (RFC 9112, 6.1). The sentence is the 400's.
    Refused(&'static str),
    /// A length hyper refuses (a sign, a space inside, values that differ, too many digits)
    /// or a last coding other than `chunked`: not followed here; hyper answers it.
    Unreadable,
}

/// The sentence a head with both lengths is refused with.
pub(crate) const BOTH_LENGTHS: &str = "both Content-Length and Transfer-Encoding\n";

/// Reads the framing `headers` declare, in one pass and without allocating (the tests below
/// show each case).
pub(crate) fn body_framing(headers: &[httparse::Header<'_>]) -> BodyFraming {
    let mut length: Option<Option<u64>> = None;
    let mut last_coding: Option<&[u8]> = None;
    for h in headers {
        if h.name.eq_ignore_ascii_case("content-length") {
            length = Some(match length {
                None => same_length(h.value, None),
                Some(known) => known.and_then(|n| same_length(h.value, Some(n))),
            });
        } else if h.name.eq_ignore_ascii_case("transfer-encoding") {
            last_coding = Some(h.value.rsplit(|&b| b == b',').next().unwrap_or_default());
        }
    }
    match (length, last_coding) {
        (Some(_), Some(_)) => BodyFraming::Refused(BOTH_LENGTHS),
        (None, Some(coding)) if coding.trim_ascii().eq_ignore_ascii_case(b"chunked") => {
            BodyFraming::Chunked
        }
        (None, Some(_)) | (Some(None), None) => BodyFraming::Unreadable,
        (Some(Some(n)), None) => BodyFraming::Length(n),
        (None, None) => BodyFraming::None,
    }
}

/// The length a `Content-Length` value gives (each item of a comma list digits only and
/// equal to the others and to `known`), or `None` if it gives none.
fn same_length(value: &[u8], mut known: Option<u64>) -> Option<u64> {
    for item in value.split(|&b| b == b',') {
        let digits = item.trim_ascii();
        if digits.is_empty() || !digits.iter().all(u8::is_ascii_digit) {
            return None;
        }
        let n = std::str::from_utf8(digits).ok()?.parse::<u64>().ok()?;
        if known.is_some_and(|k| k != n) {
            return None;
        }
        known = Some(n);
    }
    known
}

#[cfg(test)]
mod tests {
    use super::*;

    fn of(head: &str) -> BodyFraming {
        let mut fields = [httparse::EMPTY_HEADER; 8];
        let mut req = httparse::Request::new(&mut fields);
        let raw = format!("POST / HTTP/1.1\r\n{head}\r\n");
        assert!(req.parse(raw.as_bytes()).unwrap().is_complete(), "{head:?}");
        body_framing(req.headers)
    }

    #[test]
    fn each_declaration_is_read_as_hyper_reads_it() {
        use BodyFraming::*;
        for (head, want) in [
            ("Host: x\r\n", None),
            ("Content-Length: 5\r\n", Length(5)),
            ("content-length: 05\r\nContent-Length: 5, 5\r\n", Length(5)),
            ("Content-Length: 0\r\n", Length(0)),
            ("Transfer-Encoding: gzip, chunked\r\n", Chunked),
            (
                "Transfer-Encoding: gzip\r\nTransfer-Encoding: Chunked \r\n",
                Chunked,
            ),
            (
                "Content-Length: 3\r\nTransfer-Encoding: chunked\r\n",
                Refused(BOTH_LENGTHS),
            ),
            (
                "transfer-encoding: chunked\r\ncontent-length: 3\r\n",
                Refused(BOTH_LENGTHS),
            ),
            (
                "Content-Length: +3\r\nTransfer-Encoding: chunked\r\n",
                Refused(BOTH_LENGTHS),
            ),
            ("Transfer-Encoding: chunked, gzip\r\n", Unreadable),
            ("Transfer-Encoding: xchunked\r\n", Unreadable),
            ("Content-Length: +5\r\n", Unreadable),
            ("Content-Length: 5 5\r\n", Unreadable),
            ("Content-Length: 5, 6\r\n", Unreadable),
            ("Content-Length: 5\r\nContent-Length: 6\r\n", Unreadable),
            (
                "Content-Length: 6\r\nContent-Length: x\r\nContent-Length: 6\r\n",
                Unreadable,
            ),
            ("Content-Length: \r\n", Unreadable),
            ("Content-Length: 0x5\r\n", Unreadable),
            ("Content-Length: 99999999999999999999\r\n", Unreadable),
        ] {
            assert_eq!(of(head), want, "{head:?}");
        }
    }
}
