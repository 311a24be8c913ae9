//! [`Compression`]: gzip and brotli for dynamic responses, chosen by the request's
//! `Accept-Encoding`.
//!
//! Set on a server with [`HttpServer::compression`](super::HttpServer::compression), it looks
//! at each response the handler returns: a body held in memory, at least
//! [`min_size`](Compression::min_size) bytes long, of a type that compresses (text, JSON,
//! JavaScript, XML, SVG, …, not images, video, archives or fonts that are compressed
//! already), not encoded yet, is compressed with the best encoding the client accepts (brotli,
//! then gzip) and gets `Content-Encoding` and a new length. Every response that could have
//! been compressed carries `Vary: Accept-Encoding`, so caches keep the encodings apart.
//! Streamed bodies (SSE, proxies) and files are sent as they are: static files have their
//! own precompressed `.br`/`.gz` siblings (see `http::static_files`).
//!
//! ```no_run
//! use brisk::http::{compression::Compression, Body, HttpServer};
//!
//! let server = HttpServer::new("http://127.0.0.1:8080")
//!     .unwrap()
//!     .compression(Compression::default())
//!     .handler(|_req| async { http::Response::new(Body::from("a long page …")) });
//! ```
//!
//! An axum `Router` given to [`HttpServer::service`](super::HttpServer::service) may use
//! tower-http's `CompressionLayer` instead; this one keeps Brisk's own path for the
//! responses it leaves alone.

use std::io::Write;

use bytes::Bytes;
use http::header::{self, HeaderMap, HeaderValue};
use http::{Method, Response, StatusCode};

use super::accept_encoding::{choose, compressible, vary_on_accept_encoding, Encoding};
use super::Body;

/// Which encodings to offer, from which size, at which levels.
#[derive(Debug, Clone)]
pub struct Compression {
    /// Smaller bodies are sent as they are: compressing them saves less than it costs.
    pub min_size: usize,
    /// Offer gzip.
    pub gzip: bool,
    /// gzip level, 1 (fast) to 9 (small).
    pub gzip_level: u32,
    /// Offer brotli (preferred when the client accepts both).
    pub brotli: bool,
    /// brotli quality, 0 (fast) to 11 (small); 4 suits dynamic pages.
    pub brotli_quality: u32,
}

impl Default for Compression {
    /// gzip level 6 and brotli quality 4, from 1 KiB on.
    fn default() -> Self {
        Compression {
            min_size: 1024,
            gzip: true,
            gzip_level: 6,
            brotli: true,
            brotli_quality: 4,
        }
    }
}

impl Compression {
    /// `resp`, compressed if `accept` (the request's `Accept-Encoding`) allows it and the
    /// response qualifies (see the [module docs](self)).
    pub fn apply(
        &self,
        method: &Method,
        accept: Option<&HeaderValue>,
        mut resp: Response<Body>,
    ) -> Response<Body> {
        if !self.may_compress(method, &resp) {
            return resp;
        }
        vary_on_accept_encoding(resp.headers_mut());
        let offered = [(self.brotli, Encoding::Brotli), (self.gzip, Encoding::Gzip)];
        let Some(encoding) = choose(accept, offered) else {
            return resp;
        };
        let Some(plain) = resp.body().as_full() else {
            return resp;
        };
        let Ok(packed) = self.compress(plain, encoding) else {
            return resp;
        };
        let headers = resp.headers_mut();
        headers.insert(
            header::CONTENT_ENCODING,
            HeaderValue::from_static(encoding.token()),
        );
        headers.remove(header::CONTENT_LENGTH);
        weaken_etag(headers);
        *resp.body_mut() = Body::from(packed);
        resp
    }

    /// Whether `resp` is a response this may compress, whatever the client accepts.
    fn may_compress(&self, method: &Method, resp: &Response<Body>) -> bool {
        let status = resp.status();
        let headers = resp.headers();
        (self.gzip || self.brotli)
            && method != Method::HEAD
            && status != StatusCode::NO_CONTENT
            && status != StatusCode::NOT_MODIFIED
            && !status.is_informational()
            && !headers.contains_key(header::CONTENT_ENCODING)
            && !headers.contains_key(header::CONTENT_RANGE)
            && (resp.body().as_full()).is_some_and(|b| b.len() >= self.min_size)
            && (headers.get(header::CONTENT_TYPE)).is_some_and(|t| compressible(t.as_bytes()))
    }

    fn compress(&self, plain: &[u8], encoding: Encoding) -> std::io::Result<Bytes> {
        let out = Vec::with_capacity(plain.len() / 3 + 64);
        let packed = match encoding {
            Encoding::Gzip => {
                let level = flate2::Compression::new(self.gzip_level.min(9));
                let mut w = flate2::write::GzEncoder::new(out, level);
                w.write_all(plain)?;
                w.finish()?
            }
            Encoding::Brotli => {
                let quality = self.brotli_quality.min(11);
                let mut w = brotli::CompressorWriter::new(out, 4096, quality, 22);
                w.write_all(plain)?;
                w.into_inner()
            }
        };
        Ok(packed.into())
    }
}

/// A strong `ETag` names the bytes, which compression changes: it becomes weak.
fn weaken_etag(headers: &mut HeaderMap) {
    if let Some(tag) = headers.get(header::ETAG) {
        if tag.as_bytes().starts_with(b"\"") {
            let mut weak = b"W/".to_vec();
            weak.extend_from_slice(tag.as_bytes());
            if let Ok(v) = HeaderValue::from_bytes(&weak) {
                headers.insert(header::ETAG, v);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt;
    use std::io::Read;

    fn page(content_type: &str, len: usize) -> Response<Body> {
        let mut r = Response::new(Body::from("hello, world! ".repeat(len / 14 + 1)));
        r.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_str(content_type).unwrap(),
        );
        r
    }

    fn bytes(resp: Response<Body>) -> Vec<u8> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        rt.block_on(resp.into_body().collect())
            .unwrap()
            .to_bytes()
            .to_vec()
    }

    fn apply(accept: &str, resp: Response<Body>) -> Response<Body> {
        let accept = HeaderValue::from_str(accept).unwrap();
        Compression::default().apply(&Method::GET, Some(&accept), resp)
    }

    #[test]
    fn a_page_is_compressed_with_what_the_client_accepts_and_decompresses_to_itself() {
        let plain = bytes(page("text/html", 4000));
        let gz = apply("gzip", page("text/html", 4000));
        assert_eq!(gz.headers()["content-encoding"], "gzip");
        assert_eq!(gz.headers()["vary"], "accept-encoding");
        let packed = bytes(gz);
        assert!(
            packed.len() < plain.len() / 4,
            "{} of {}",
            packed.len(),
            plain.len()
        );
        let mut out = Vec::new();
        flate2::read::GzDecoder::new(&packed[..])
            .read_to_end(&mut out)
            .unwrap();
        assert_eq!(out, plain);

        let br = apply("gzip, br", page("application/json", 4000));
        assert_eq!(br.headers()["content-encoding"], "br");
        let packed = bytes(br);
        let mut out = Vec::new();
        brotli::Decompressor::new(&packed[..], 4096)
            .read_to_end(&mut out)
            .unwrap();
        assert_eq!(out, plain);
    }

    #[test]
    fn small_bodies_other_types_head_and_encoded_bodies_are_left_alone() {
        let small = apply("gzip", page("text/html", 100));
        assert!(small.headers().get("content-encoding").is_none());
        assert!(
            small.headers().get("vary").is_none(),
            "never compressed, never varies"
        );
        let png = apply("gzip", page("image/png", 4000));
        assert!(png.headers().get("content-encoding").is_none());
        assert!(png.headers().get("vary").is_none());
        let mut encoded = page("text/html", 4000);
        encoded
            .headers_mut()
            .insert(header::CONTENT_ENCODING, HeaderValue::from_static("zstd"));
        let encoded = apply("gzip", encoded);
        assert_eq!(encoded.headers()["content-encoding"], "zstd");
        let accept = HeaderValue::from_static("gzip");
        let head =
            Compression::default().apply(&Method::HEAD, Some(&accept), page("text/html", 4000));
        assert!(head.headers().get("content-encoding").is_none());
        // A client that accepts nothing gets the page as it is, with Vary.
        let identity = apply("identity", page("text/html", 4000));
        assert!(identity.headers().get("content-encoding").is_none());
        assert_eq!(identity.headers()["vary"], "accept-encoding");
    }

    #[test]
    fn a_strong_etag_becomes_weak() {
        let mut r = page("text/css", 4000);
        r.headers_mut()
            .insert(header::ETAG, HeaderValue::from_static("\"v1\""));
        let r = apply("gzip", r);
        assert_eq!(r.headers()["etag"], "W/\"v1\"");
    }
}
