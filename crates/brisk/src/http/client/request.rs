//! [`ClientRequest`]: a request being built, sent with [`ClientRequest::send`].

use std::time::Duration;

use bytes::Bytes;
use http::header::{HeaderName, HeaderValue};
use http::{HeaderMap, Method, Uri};

use super::{ClientError, ClientResponse, HttpClient};

/// A request of an [`HttpClient`], built step by step; a bad URL or header is reported by
/// [`send`](ClientRequest::send).
///
/// ```no_run
/// # async fn f(client: brisk::http::client::HttpClient) -> Result<(), brisk::http::client::ClientError> {
/// let created = client
///     .post("http://127.0.0.1:9000/users")
///     .header("x-request-id", "42")
///     .json(&serde_json::json!({"name": "Ada"}))
///     .timeout(std::time::Duration::from_millis(500))
///     .send()
///     .await?;
/// # Ok(()) }
/// ```
#[must_use = "a request does nothing until it is sent"]
pub struct ClientRequest {
    pub(super) client: HttpClient,
    pub(super) parts: Result<Parts, ClientError>,
}

/// `url` for an error message: without its password, and with its query (which may hold
/// tokens) cut to `?…`.
pub(super) fn shown_url(url: &str) -> String {
    let redacted = crate::redact::redacted(url);
    match redacted.split_once('?') {
        Some((before, _)) => format!("{before}?…"),
        None => redacted.into_owned(),
    }
}

/// What a request is made of.
#[derive(Debug, Clone)]
pub(super) struct Parts {
    pub method: Method,
    pub uri: Uri,
    pub headers: HeaderMap,
    pub body: Bytes,
    pub timeout: Option<Duration>,
}

impl ClientRequest {
    pub(super) fn new(client: HttpClient, method: Method, url: &str) -> Self {
        let parts = url
            .parse::<Uri>()
            .map_err(|e| ClientError::InvalidRequest(format!("{}: {e}", shown_url(url))))
            .and_then(|uri| match uri.scheme_str() {
                Some("http" | "https") if uri.authority().is_some() => Ok(uri),
                _ => Err(ClientError::InvalidRequest(format!(
                    "{}: not an http:// or https:// URL",
                    shown_url(url)
                ))),
            })
            .map(|uri| Parts {
                method,
                uri,
                headers: HeaderMap::new(),
                body: Bytes::new(),
                timeout: None,
            });
        ClientRequest { client, parts }
    }

    /// Adds a header.
    pub fn header(mut self, name: &str, value: &str) -> Self {
        if let Ok(parts) = &mut self.parts {
            match (HeaderName::try_from(name), HeaderValue::try_from(value)) {
                (Ok(n), Ok(v)) => {
                    parts.headers.append(n, v);
                }
                // The value is not shown: it may be a token.
                (Ok(_), Err(_)) => {
                    self.parts = Err(ClientError::InvalidRequest(format!(
                        "header {name:?} has a value that cannot be sent"
                    )))
                }
                (Err(_), _) => {
                    self.parts = Err(ClientError::InvalidRequest(format!(
                        "{:?} is not a header name",
                        name.escape_debug().take(64).collect::<String>()
                    )))
                }
            }
        }
        self
    }

    /// Sets the body.
    pub fn body(mut self, body: impl Into<Bytes>) -> Self {
        if let Ok(parts) = &mut self.parts {
            parts.body = body.into();
        }
        self
    }

    /// Sets the body to `value` as JSON, with `Content-Type: application/json`.
    pub fn json<T: serde::Serialize + ?Sized>(mut self, value: &T) -> Self {
        match serde_json::to_vec(value) {
            Ok(body) => {
                if let Ok(parts) = &mut self.parts {
                    parts.body = body.into();
                    parts.headers.insert(
                        http::header::CONTENT_TYPE,
                        HeaderValue::from_static("application/json"),
                    );
                }
            }
            Err(e) => self.parts = Err(ClientError::InvalidRequest(format!("JSON body: {e}"))),
        }
        self
    }

    /// This request's timeout instead of the client's.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        if let Ok(parts) = &mut self.parts {
            parts.timeout = Some(timeout);
        }
        self
    }

    /// Sends the request and reads the whole response.
    pub async fn send(self) -> Result<ClientResponse, ClientError> {
        #[cfg_attr(not(feature = "otel"), allow(unused_mut))]
        let mut parts = self.parts?;
        #[cfg(feature = "otel")]
        if let Some(span) =
            crate::otel::client_request(&mut parts.headers, &parts.method, &parts.uri)
        {
            let answer = self.client.execute(parts).await;
            span.end_client(match &answer {
                Ok(resp) => Ok(resp.status.as_u16()),
                Err(e) => Err(e as &dyn std::fmt::Display),
            });
            return answer;
        }
        self.client.execute(parts).await
    }
}
