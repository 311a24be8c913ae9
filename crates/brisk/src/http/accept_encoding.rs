//! `Accept-Encoding`: which encoding a client prefers, which types compress, and `Vary`.
//! Shared by dynamic compression (`http::compression`) and the precompressed siblings of
//! static files (`http::static_files`).

use http::header::{self, HeaderMap, HeaderValue};

/// An encoding the client may get.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Encoding {
    /// `br`
    Brotli,
    /// `gzip`
    Gzip,
}

impl Encoding {
    /// The token in `Content-Encoding`.
    pub(crate) fn token(self) -> &'static str {
        match self {
            Encoding::Brotli => "br",
            Encoding::Gzip => "gzip",
        }
    }
}

/// The first of `offered` (those switched on) that `accept` allows, by the client's
/// preference (`q`), ties going to the order of `offered`. No header: nothing.
pub(crate) fn choose<const N: usize>(
    accept: Option<&HeaderValue>,
    offered: [(bool, Encoding); N],
) -> Option<Encoding> {
    let accept = accept?.to_str().ok()?;
    let mut best: Option<(u32, Encoding)> = None;
    for (on, encoding) in offered {
        if !on {
            continue;
        }
        let q = quality(accept, encoding.token());
        if q > 0 && best.is_none_or(|(b, _)| q > b) {
            best = Some((q, encoding));
        }
    }
    best.map(|(_, e)| e)
}

/// The client's preference for `token` in an `Accept-Encoding` value, in thousandths: its own
/// entry, else `*`'s, else 0.
fn quality(accept: &str, token: &str) -> u32 {
    let mut star = None;
    for item in accept.split(',') {
        let mut parts = item.split(';');
        let name = parts.next().unwrap_or("").trim();
        let q = parts
            .find_map(|p| {
                let (k, v) = p.split_once('=')?;
                (k.trim().eq_ignore_ascii_case("q")).then(|| parse_q(v.trim()))
            })
            .unwrap_or(1000);
        if name.eq_ignore_ascii_case(token) {
            return q;
        }
        if name == "*" {
            star = Some(q);
        }
    }
    star.unwrap_or(0)
}

/// `0.5` → 500; anything unreadable → 0.
fn parse_q(v: &str) -> u32 {
    let v: f32 = v.parse().unwrap_or(0.0);
    (v.clamp(0.0, 1.0) * 1000.0).round() as u32
}

/// Whether a `Content-Type` names something that compresses well (compared in place: it
/// runs for every response that may be compressed).
pub(crate) fn compressible(content_type: &[u8]) -> bool {
    let essence = content_type
        .split(|&b| b == b';')
        .next()
        .unwrap_or_default()
        .trim_ascii();
    let is = |name: &[u8]| essence.eq_ignore_ascii_case(name);
    let starts = |p: &[u8]| essence.len() >= p.len() && is_prefix(essence, p);
    let ends = |s: &[u8]| {
        essence.len() >= s.len() && essence[essence.len() - s.len()..].eq_ignore_ascii_case(s)
    };
    if is(b"text/event-stream") {
        return false;
    }
    const NAMED: [&[u8]; 11] = [
        b"application/json",
        b"application/javascript",
        b"application/xml",
        b"application/wasm",
        b"application/x-ndjson",
        b"image/svg+xml",
        b"image/x-icon",
        b"image/bmp",
        b"font/ttf",
        b"font/otf",
        b"application/vnd.ms-fontobject",
    ];
    starts(b"text/") || ends(b"+json") || ends(b"+xml") || NAMED.iter().any(|n| is(n))
}

/// Whether `s` begins with `prefix`, ASCII case ignored.
fn is_prefix(s: &[u8], prefix: &[u8]) -> bool {
    s[..prefix.len()].eq_ignore_ascii_case(prefix)
}

/// Adds `Accept-Encoding` to `Vary` unless it is there (or `Vary: *`).
pub(crate) fn vary_on_accept_encoding(headers: &mut HeaderMap) {
    let present = headers.get_all(header::VARY).iter().any(|v| {
        v.to_str().is_ok_and(|v| {
            v.split(',')
                .any(|t| t.trim() == "*" || t.trim().eq_ignore_ascii_case("accept-encoding"))
        })
    });
    if !present {
        headers.append(header::VARY, HeaderValue::from_static("accept-encoding"));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pick(accept: &str) -> Option<Encoding> {
        let offered = [(true, Encoding::Brotli), (true, Encoding::Gzip)];
        choose(Some(&HeaderValue::from_str(accept).unwrap()), offered)
    }

    #[test]
    fn the_clients_preference_wins_and_brotli_breaks_ties() {
        assert_eq!(pick("gzip, deflate, br"), Some(Encoding::Brotli));
        assert_eq!(pick("gzip"), Some(Encoding::Gzip));
        assert_eq!(pick("br;q=0.5, gzip;q=0.8"), Some(Encoding::Gzip));
        assert_eq!(pick("gzip;q=0, br;q=0"), None);
        assert_eq!(pick("identity"), None);
        assert_eq!(pick("*"), Some(Encoding::Brotli));
        assert_eq!(pick("*;q=0.1, br;q=0"), Some(Encoding::Gzip));
        assert_eq!(pick("GZIP;Q=1"), Some(Encoding::Gzip));
        assert_eq!(pick("br;q=nonsense, gzip"), Some(Encoding::Gzip));
        let gzip_only = [(false, Encoding::Brotli), (true, Encoding::Gzip)];
        let h = HeaderValue::from_static("br, gzip");
        assert_eq!(choose(Some(&h), gzip_only), Some(Encoding::Gzip));
        assert_eq!(choose(None, gzip_only), None);
    }

    #[test]
    fn only_types_that_compress_are_compressed() {
        for t in [
            "text/html; charset=utf-8",
            "application/json",
            "application/problem+json",
            "image/svg+xml",
            "TEXT/Plain",
            " Application/JSON ; charset=utf-8",
            "application/x-ndjson",
            "Image/SVG+XML",
        ] {
            assert!(compressible(t.as_bytes()), "{t}");
        }
        // Shorter than every name, empty, or not text at all.
        for t in [
            &b"text"[..],
            b"",
            b"json",
            b"\xff\xfe/\xff",
            b"Text/Event-Stream",
        ] {
            assert!(!compressible(t), "{t:?}");
        }
        for t in [
            "image/png",
            "image/jpeg",
            "video/mp4",
            "application/zip",
            "application/gzip",
            "font/woff2",
            "text/event-stream",
            "application/octet-stream",
        ] {
            assert!(!compressible(t.as_bytes()), "{t}");
        }
    }

    #[test]
    fn vary_is_added_once() {
        let mut h = HeaderMap::new();
        vary_on_accept_encoding(&mut h);
        vary_on_accept_encoding(&mut h);
        assert_eq!(h.get_all(header::VARY).iter().count(), 1);
        let mut h = HeaderMap::new();
        h.insert(
            header::VARY,
            HeaderValue::from_static("Origin, Accept-Encoding"),
        );
        vary_on_accept_encoding(&mut h);
        assert_eq!(h.get_all(header::VARY).iter().count(), 1);
    }
}
