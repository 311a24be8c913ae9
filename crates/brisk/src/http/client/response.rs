//! [`ClientResponse`]: an upstream's answer, its body read in full.

use bytes::Bytes;
use http::{HeaderMap, StatusCode, Uri};

/// An upstream's response with its whole body (at most the client's `max_body_size`).
#[derive(Debug, Clone)]
pub struct ClientResponse {
    pub(super) status: StatusCode,
    pub(super) headers: HeaderMap,
    pub(super) body: Bytes,
    pub(super) uri: Uri,
}

impl ClientResponse {
    /// The status code.
    pub fn status(&self) -> StatusCode {
        self.status
    }

    /// The response headers.
    pub fn headers(&self) -> &HeaderMap {
        &self.headers
    }

    /// The body.
    pub fn body(&self) -> &Bytes {
        &self.body
    }

    /// The body, taken.
    pub fn into_body(self) -> Bytes {
        self.body
    }

    /// The URL that answered (after redirects, when the client follows them).
    pub fn uri(&self) -> &Uri {
        &self.uri
    }

    /// The body as text (invalid UTF-8 replaced).
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    /// The body parsed as JSON.
    pub fn json<T: serde::de::DeserializeOwned>(&self) -> Result<T, serde_json::Error> {
        serde_json::from_slice(&self.body)
    }
}
