//! The rules an HTTP/1.x request's fields must keep, checked on every request before its
//! handler runs, whichever reader parsed it (Brisk's own path or hyper): the ambiguities that
//! survive both parsers — a second `chunked`, a missing or second `Host`, a `Host` the target
//! contradicts — get 400 with the sentence that names them, and the connection closes, as
//! nginx does. Where every other check lives: the framing module's table (`framing/mod.rs`).

use http::header::{HOST, TRANSFER_ENCODING};
use http::{Request, Version};

/// Why `req` must not be served, if it must not: the sentence the 400 answer carries.
pub(crate) fn violation<B>(req: &Request<B>) -> Option<&'static str> {
    let h = req.headers();
    if !matches!(req.version(), Version::HTTP_10 | Version::HTTP_11) {
        return None;
    }
    // Both lengths never get here: each reader refuses them (see `head`).
    if h.contains_key(TRANSFER_ENCODING) {
        let chunked = h
            .get_all(TRANSFER_ENCODING)
            .iter()
            .flat_map(|v| v.as_bytes().split(|&b| b == b','))
            .filter(|coding| coding.trim_ascii().eq_ignore_ascii_case(b"chunked"))
            .count();
        if chunked > 1 {
            return Some("chunked applied more than once\n");
        }
    }
    let mut hosts = h.get_all(HOST).iter();
    let host = hosts.next();
    if hosts.next().is_some() {
        return Some("more than one Host\n");
    }
    if req.version() == Version::HTTP_11 && host.is_none() {
        return Some("HTTP/1.1 request without Host\n");
    }
    // An absolute-form target names its host itself; a Host that says otherwise is one of
    // the two a proxy and this server could each pick.
    if let (Some(target), Some(host)) = (req.uri().authority(), host) {
        if !target
            .as_str()
            .eq_ignore_ascii_case(host.to_str().unwrap_or_default())
        {
            return Some("Host differs from the request target's host\n");
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::violation;
    use http::{Request, Version};

    fn req(version: Version, target: &str, headers: &[(&str, &str)]) -> Request<()> {
        let mut b = Request::builder().version(version).uri(target);
        for (k, v) in headers {
            b = b.header(*k, *v);
        }
        b.body(()).unwrap()
    }

    #[test]
    fn smuggling_vectors_are_named_and_plain_requests_pass() {
        let v11 = Version::HTTP_11;
        let cases: [(Request<()>, Option<&str>); 8] = [
            (req(v11, "/", &[("host", "x")]), None),
            (req(Version::HTTP_10, "/", &[]), None),
            (req(Version::HTTP_2, "/", &[]), None),
            (req(v11, "http://x:80/a", &[("host", "X:80")]), None),
            (
                req(
                    v11,
                    "/",
                    &[
                        ("host", "x"),
                        ("transfer-encoding", "chunked"),
                        ("transfer-encoding", "Chunked"),
                    ],
                ),
                Some("chunked applied more than once\n"),
            ),
            (req(v11, "/", &[]), Some("HTTP/1.1 request without Host\n")),
            (
                req(v11, "/", &[("host", "x"), ("host", "y")]),
                Some("more than one Host\n"),
            ),
            (
                req(v11, "http://other/", &[("host", "x")]),
                Some("Host differs from the request target's host\n"),
            ),
        ];
        for (r, want) in cases {
            assert_eq!(violation(&r), want, "{r:?}");
        }
    }
}
