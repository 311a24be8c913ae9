//! [`ClientOptions`]: timeouts, limits and pooling of an [`HttpClient`](super::HttpClient).

use std::time::Duration;

use rustls_pki_types::CertificateDer;

/// How an [`HttpClient`](super::HttpClient) connects, reuses connections and gives up.
///
/// ```
/// use std::time::Duration;
/// use brisk::http::client::ClientOptions;
///
/// let options = ClientOptions {
///     timeout: Duration::from_secs(3),
///     max_redirects: 5,
///     ..ClientOptions::default()
/// };
/// ```
#[derive(Debug, Clone)]
pub struct ClientOptions {
    /// How long opening a TCP connection may take (the TLS handshake counts towards
    /// `timeout`). Past it: [`ClientError::ConnectTimeout`](super::ClientError::ConnectTimeout).
    pub connect_timeout: Duration,
    /// How long a whole exchange may take, from connecting to the last byte of the body.
    /// Past it: [`ClientError::Timeout`](super::ClientError::Timeout).
    pub timeout: Duration,
    /// The largest response body read; a larger one is
    /// [`ClientError::BodyTooLarge`](super::ClientError::BodyTooLarge).
    pub max_body_size: usize,
    /// Idle connections kept per host for reuse; `0` opens a new connection for every
    /// request.
    pub max_idle_per_host: usize,
    /// How long an idle connection is kept.
    pub idle_timeout: Duration,
    /// Redirects followed (301, 302, 303, 307, 308); `0` (the default) returns them as they
    /// are.
    pub max_redirects: usize,
    /// Sent as `User-Agent` unless a request sets its own.
    pub user_agent: Option<String>,
    /// Certificate authorities trusted for HTTPS besides the Mozilla roots (webpki-roots):
    /// an internal CA, or a test's self-signed certificate.
    pub extra_roots: Vec<CertificateDer<'static>>,
    /// Refuse every request to a loopback, link-local or private address (a name is
    /// checked once resolved, by the resolver the connection uses):
    /// [`ClientError::RefusedAddress`](super::ClientError::RefusedAddress). For clients
    /// that fetch URLs that others choose (webhooks, link previews). Default: off.
    pub refuse_private_addresses: bool,
    /// Refuse to follow a redirect to such an address (the first request may go anywhere).
    /// Default: off.
    pub refuse_private_redirects: bool,
}

impl Default for ClientOptions {
    fn default() -> Self {
        ClientOptions {
            connect_timeout: Duration::from_secs(2),
            timeout: Duration::from_secs(10),
            max_body_size: 8 << 20,
            max_idle_per_host: 64,
            idle_timeout: Duration::from_secs(60),
            max_redirects: 0,
            user_agent: Some(concat!("brisk/", env!("CARGO_PKG_VERSION")).into()),
            extra_roots: Vec::new(),
            refuse_private_addresses: false,
            refuse_private_redirects: false,
        }
    }
}
