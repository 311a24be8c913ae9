//! Strict request framing for HTTP/1.x, checked on every request before its handler runs,
//! whichever path parsed it (Brisk's own or hyper's): a request that two servers in a chain
//! could read differently — the request-smuggling vectors — gets 400 and the connection
//! closes, as nginx does. The parsers already refuse the rest (bare CR, NUL and other control
//! bytes, obsolete line folding, a space before the colon, an invalid `Content-Length`, a
//! `Transfer-Encoding` whose last coding is not chunked, HTTP/1.0 with `Transfer-Encoding`).

use http::header::{CONTENT_LENGTH, HOST, TRANSFER_ENCODING};
use http::{Request, Version};

/// Why `req` must not be served, if it must not: the sentence the 400 answer carries.
pub(super) fn violation<B>(req: &Request<B>) -> Option<&'static str> {
    let h = req.headers();
    if !matches!(req.version(), Version::HTTP_10 | Version::HTTP_11) {
        return None;
    }
    if h.contains_key(TRANSFER_ENCODING) {
        if h.contains_key(CONTENT_LENGTH) {
            return Some("both Content-Length and Transfer-Encoding\n");
        }
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
        let cases: [(Request<()>, Option<&str>); 9] = [
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
                        ("content-length", "3"),
                        ("transfer-encoding", "chunked"),
                    ],
                ),
                Some("both Content-Length and Transfer-Encoding\n"),
            ),
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
