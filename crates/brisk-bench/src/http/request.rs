//! Pre-encoding of the HTTP/1.1 request sent by every connection.

use bytes::Bytes;

use crate::error::BenchError;
use crate::target::Target;

/// What to send: method, extra headers, body and connection persistence.
#[derive(Clone, Debug)]
pub struct RequestSpec {
    /// Request method, e.g. `GET`.
    pub method: String,
    /// Extra headers as `(name, value)` pairs, sent in order.
    pub headers: Vec<(String, String)>,
    /// Request body; when present a `Content-Length` header is added.
    pub body: Option<String>,
    /// When false, `Connection: close` is sent.
    pub keep_alive: bool,
}

impl Default for RequestSpec {
    fn default() -> Self {
        Self {
            method: "GET".to_string(),
            headers: Vec::new(),
            body: None,
            keep_alive: true,
        }
    }
}

/// Splits a `"Name: value"` command-line header.
pub fn parse_header(text: &str) -> Result<(String, String), BenchError> {
    let (name, value) = text.split_once(':').ok_or_else(|| {
        BenchError::InvalidArgument(format!(
            "the header \"{text}\" must look like \"Name: value\""
        ))
    })?;
    let name = name.trim();
    if name.is_empty() || !name.bytes().all(|b| b.is_ascii_graphic() && b != b':') {
        return Err(BenchError::InvalidArgument(format!(
            "the header name in \"{text}\" is not a valid token"
        )));
    }
    Ok((name.to_string(), value.trim().to_string()))
}

impl RequestSpec {
    /// True when the request is `HEAD` (its responses carry no body).
    pub fn is_head(&self) -> bool {
        self.method.eq_ignore_ascii_case("HEAD")
    }

    /// Encodes the full request (head and body) once, for reuse on every send.
    pub fn encode(&self, target: &Target) -> Result<Bytes, BenchError> {
        if self.method.is_empty()
            || !self
                .method
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        {
            return Err(BenchError::InvalidArgument(format!(
                "the method \"{}\" is not a valid token",
                self.method
            )));
        }
        let has = |name: &str| {
            self.headers
                .iter()
                .any(|(n, _)| n.eq_ignore_ascii_case(name))
        };
        let mut out = String::with_capacity(256);
        out.push_str(&self.method);
        out.push(' ');
        out.push_str(&target.path_and_query);
        out.push_str(" HTTP/1.1\r\n");
        if !has("host") {
            out.push_str("Host: ");
            out.push_str(&target.authority);
            out.push_str("\r\n");
        }
        for (name, value) in &self.headers {
            out.push_str(name);
            out.push_str(": ");
            out.push_str(value);
            out.push_str("\r\n");
        }
        if !self.keep_alive && !has("connection") {
            out.push_str("Connection: close\r\n");
        }
        if let Some(body) = &self.body {
            if !has("content-length") {
                out.push_str(&format!("Content-Length: {}\r\n", body.len()));
            }
        }
        out.push_str("\r\n");
        if let Some(body) = &self.body {
            out.push_str(body);
        }
        Ok(Bytes::from(out))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::target::Scheme;

    #[test]
    fn encodes_post_with_body() {
        let t = Target::parse("http://h:81/p?q=1", Scheme::Http).unwrap();
        let spec = RequestSpec {
            method: "POST".into(),
            headers: vec![parse_header("X-A:  b ").unwrap()],
            body: Some("hello".into()),
            keep_alive: false,
        };
        let bytes = spec.encode(&t).unwrap();
        assert_eq!(
            &bytes[..],
            b"POST /p?q=1 HTTP/1.1\r\nHost: h:81\r\nX-A: b\r\nConnection: close\r\nContent-Length: 5\r\n\r\nhello"
        );
    }

    #[test]
    fn bad_header() {
        assert!(parse_header("nocolon").is_err());
        assert!(parse_header(": v").is_err());
    }
}
