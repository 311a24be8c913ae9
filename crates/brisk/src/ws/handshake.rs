//! The opening handshake (RFC 6455, section 4.2), one for both ways in: a `websocket://`
//! listener's connection, whose request head the codec parsed, and an HTTP route's upgrade
//! request, which hyper parsed. What the request must say, which pages may connect and what
//! compression is agreed are decided here, once ([`check`]); the answer is the same headers
//! either way, written as bytes on the listener's socket or as the route's `http::Response`.

use bytes::Bytes;
use http::{header, HeaderMap, HeaderValue, Response, StatusCode};

use super::deflate::Agreement;
use super::origin::OriginPolicy;
use crate::http::has_token;

/// A handshake's request headers, however they were parsed.
pub(crate) trait Headers {
    /// The first value of `name` (lower-case), if it is text.
    fn first(&self, name: &str) -> Option<&str>;
    /// Every value of `name` that is text, in order.
    fn all(&self, name: &str) -> Vec<&str>;
}

/// A listener's parsed head: names lower-case, in order.
impl Headers for Vec<(String, String)> {
    fn first(&self, name: &str) -> Option<&str> {
        self.iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
    fn all(&self, name: &str) -> Vec<&str> {
        (self.iter().filter(|(n, _)| n == name))
            .map(|(_, v)| v.as_str())
            .collect()
    }
}

impl Headers for HeaderMap {
    fn first(&self, name: &str) -> Option<&str> {
        self.get(name).and_then(|v| v.to_str().ok())
    }
    fn all(&self, name: &str) -> Vec<&str> {
        (self.get_all(name).iter())
            .filter_map(|v| v.to_str().ok())
            .collect()
    }
}

/// Why a handshake is refused; each says it with its status.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Refused {
    /// A listener's request head over the most it reads.
    HeadTooLarge,
    /// A listener's request head that is not HTTP.
    Malformed,
    /// Not a GET asking to upgrade to `websocket`.
    NotAnUpgrade,
    /// Another WebSocket version than 13.
    Version,
    /// No `Sec-WebSocket-Key`, or not one of 16 bytes in base64.
    Key,
    /// A browser page of an origin the endpoint does not allow.
    Origin,
}

impl Refused {
    /// The HTTP status it is answered with.
    pub(crate) fn status(self) -> StatusCode {
        match self {
            Refused::HeadTooLarge => StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
            Refused::Malformed | Refused::NotAnUpgrade | Refused::Key => StatusCode::BAD_REQUEST,
            Refused::Version => StatusCode::UPGRADE_REQUIRED,
            Refused::Origin => StatusCode::FORBIDDEN,
        }
    }

    /// What the answer's body says.
    pub(crate) fn why(self) -> &'static str {
        match self {
            Refused::HeadTooLarge => "request head too large\n",
            Refused::Malformed => "malformed request\n",
            Refused::NotAnUpgrade => "expected a WebSocket upgrade\n",
            Refused::Version => "only WebSocket version 13 is supported\n",
            Refused::Key => "missing or malformed Sec-WebSocket-Key\n",
            Refused::Origin => "this page's origin may not connect\n",
        }
    }

    /// The refusal's headers beyond the status (426 names the version it takes).
    fn headers(self) -> &'static [(&'static str, &'static str)] {
        match self {
            Refused::Version => &[("sec-websocket-version", "13")],
            _ => &[],
        }
    }

    /// The refusal as a route answers it.
    pub(crate) fn response(self) -> Response<&'static str> {
        let mut r = Response::new(self.why());
        *r.status_mut() = self.status();
        for (name, value) in self.headers() {
            r.headers_mut()
                .insert(*name, HeaderValue::from_static(value));
        }
        r
    }

    /// The refusal as a listener writes it, the connection closing after it.
    pub(crate) fn bytes(self) -> Bytes {
        let status = self.status();
        let why = self.why();
        let mut reply = format!(
            "HTTP/1.1 {} {}\r\nconnection: close\r\ncontent-type: text/plain\r\ncontent-length: {}\r\n",
            status.as_u16(),
            status.canonical_reason().unwrap_or("Bad Request"),
            why.len()
        );
        for (name, value) in self.headers() {
            reply += &format!("{name}: {value}\r\n");
        }
        reply += "\r\n";
        reply += why;
        Bytes::from(reply)
    }
}

/// A handshake to answer with `101 Switching Protocols`.
#[derive(Debug, Clone)]
pub(crate) struct Accepted {
    /// `Sec-WebSocket-Accept`.
    accept: String,
    /// The permessage-deflate agreement, if one was made.
    pub(crate) agreed: Option<Agreement>,
}

impl Accepted {
    /// The answer's headers beyond the status.
    fn headers(&self) -> Vec<(&'static str, String)> {
        let mut headers = vec![
            ("upgrade", "websocket".to_string()),
            ("connection", "Upgrade".to_string()),
            ("sec-websocket-accept", self.accept.clone()),
        ];
        if let Some(a) = self.agreed {
            headers.push(("sec-websocket-extensions", a.response()));
        }
        headers
    }

    /// The answer as a route gives it.
    pub(crate) fn response(&self) -> Response<&'static str> {
        let mut r = Response::new("");
        *r.status_mut() = StatusCode::SWITCHING_PROTOCOLS;
        for (name, value) in self.headers() {
            let value = HeaderValue::from_str(&value).expect("base64 and tokens are valid");
            r.headers_mut().insert(name, value);
        }
        r
    }

    /// The answer as a listener writes it.
    pub(crate) fn bytes(&self) -> Bytes {
        let mut reply = String::from("HTTP/1.1 101 Switching Protocols\r\n");
        for (name, value) in self.headers() {
            reply += &format!("{name}: {value}\r\n");
        }
        reply += "\r\n";
        Bytes::from(reply)
    }
}

/// Decides a handshake: a request that is a GET (`get`) with `headers`, to an endpoint that
/// allows `origins` and agrees to compression as `negotiate` says for the request's offers.
pub(crate) fn check(
    get: bool,
    headers: &impl Headers,
    origins: &OriginPolicy,
    negotiate: impl FnOnce(Vec<&str>) -> Option<Agreement>,
) -> Result<Accepted, Refused> {
    let has = |name: header::HeaderName, token: &str| {
        (headers.all(name.as_str()).iter()).any(|v| has_token(v.as_bytes(), token))
    };
    if !get || !has(header::UPGRADE, "websocket") || !has(header::CONNECTION, "upgrade") {
        return Err(Refused::NotAnUpgrade);
    }
    if headers.first("sec-websocket-version").map(str::trim) != Some("13") {
        return Err(Refused::Version);
    }
    let key = headers
        .first("sec-websocket-key")
        .map(str::trim)
        .filter(|k| k.len() == 24)
        .ok_or(Refused::Key)?;
    if !origins.allows(headers.first("origin"), headers.first("host")) {
        return Err(Refused::Origin);
    }
    let agreed = negotiate(headers.all("sec-websocket-extensions"));
    Ok(Accepted {
        accept: tungstenite::handshake::derive_accept_key(key.as_bytes()),
        agreed,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        (pairs.iter())
            .map(|(n, v)| (n.to_string(), v.to_string()))
            .collect()
    }

    const GOOD: &[(&str, &str)] = &[
        ("host", "chat.example"),
        ("upgrade", "websocket"),
        ("connection", "keep-alive, Upgrade"),
        ("sec-websocket-version", "13"),
        ("sec-websocket-key", "dGhlIHNhbXBsZSBub25jZQ=="),
    ];

    #[test]
    fn the_same_request_gets_the_same_answer_parsed_either_way() {
        let listener = request(GOOD);
        let mut route = HeaderMap::new();
        for (n, v) in GOOD {
            route.insert(*n, HeaderValue::from_static(v));
        }
        let origins = OriginPolicy::default();
        let a = check(true, &listener, &origins, |_| None).unwrap();
        let b = check(true, &route, &origins, |_| None).unwrap();
        // RFC 6455's example key and its answer.
        assert_eq!(a.accept, "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=");
        assert_eq!(a.bytes(), b.bytes());
        let r = b.response();
        assert_eq!(r.status(), StatusCode::SWITCHING_PROTOCOLS);
        assert_eq!(
            r.headers()["sec-websocket-accept"],
            "s3pPLMBiTxaQ9kYGzzhZRbK+xOo="
        );
    }

    #[test]
    fn each_refusal_has_its_status_and_says_why() {
        let without = |name: &str| {
            request(
                &GOOD
                    .iter()
                    .copied()
                    .filter(|(n, _)| *n != name)
                    .collect::<Vec<_>>(),
            )
        };
        let with = |name: &'static str, value: &'static str| {
            let mut r = without(name);
            r.push((name.to_string(), value.to_string()));
            r
        };
        let open = OriginPolicy::default();
        let cases = [
            (
                check(false, &request(GOOD), &open, |_| None),
                Refused::NotAnUpgrade,
            ),
            (
                check(true, &without("upgrade"), &open, |_| None),
                Refused::NotAnUpgrade,
            ),
            (
                check(true, &with("connection", "close"), &open, |_| None),
                Refused::NotAnUpgrade,
            ),
            (
                check(true, &with("sec-websocket-version", "8"), &open, |_| None),
                Refused::Version,
            ),
            (
                check(true, &without("sec-websocket-key"), &open, |_| None),
                Refused::Key,
            ),
            (
                check(true, &with("sec-websocket-key", "short"), &open, |_| None),
                Refused::Key,
            ),
        ];
        for (got, expected) in cases {
            assert_eq!(got.unwrap_err(), expected);
        }
        let same_host = OriginPolicy::default().allow_same_host();
        let page = with("origin", "https://evil.example");
        assert_eq!(
            check(true, &page, &same_host, |_| None).unwrap_err(),
            Refused::Origin
        );
        let version = Refused::Version.bytes();
        let text = std::str::from_utf8(&version).unwrap();
        assert!(
            text.starts_with("HTTP/1.1 426 Upgrade Required\r\n"),
            "{text}"
        );
        assert!(text.contains("sec-websocket-version: 13\r\n"), "{text}");
        assert!(
            text.ends_with("\r\n\r\nonly WebSocket version 13 is supported\n"),
            "{text}"
        );
        assert_eq!(Refused::Origin.response().status(), StatusCode::FORBIDDEN);
    }
}
