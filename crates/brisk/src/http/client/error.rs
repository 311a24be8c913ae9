//! [`ClientError`]: why an upstream call failed, and the status that answers it.

use std::time::Duration;

use http::StatusCode;

/// Why a request of the [`HttpClient`](super::HttpClient) failed. Each names the upstream and
/// says what went wrong; [`ClientError::status`] is the status a handler answers with (502
/// for an upstream that refused or misbehaved, 504 for one that was too slow), and
/// `brisk::http::IntoResponse` turns it into that response.
#[derive(Debug, Clone, thiserror::Error)]
pub enum ClientError {
    /// The request cannot be sent: a bad URL, scheme, header or body.
    #[error("bad upstream request: {0}")]
    InvalidRequest(String),
    /// No connection could be made: refused, unreachable, or the TLS handshake failed.
    #[error("cannot connect to {authority}: {reason}")]
    Connect {
        /// `host:port` of the upstream.
        authority: String,
        /// What the operating system or TLS said.
        reason: String,
    },
    /// The TCP connection took longer than the connect timeout.
    #[error("connecting to {authority} took longer than {} ms", .after.as_millis())]
    ConnectTimeout {
        /// `host:port` of the upstream.
        authority: String,
        /// The connect timeout.
        after: Duration,
    },
    /// The exchange (connect, send, answer, body) took longer than the timeout.
    #[error("{authority} did not answer within {} ms", .after.as_millis())]
    Timeout {
        /// `host:port` of the upstream.
        authority: String,
        /// The timeout.
        after: Duration,
    },
    /// The response body is larger than the client's limit.
    #[error("the response of {authority} is larger than {limit} bytes")]
    BodyTooLarge {
        /// `host:port` of the upstream.
        authority: String,
        /// The limit.
        limit: usize,
    },
    /// More redirects than the client follows.
    #[error("more than {limit} redirects from {authority}")]
    TooManyRedirects {
        /// `host:port` of the upstream that sent the last redirect.
        authority: String,
        /// The limit.
        limit: usize,
    },
    /// The connection broke, or the upstream sent something that is not HTTP.
    #[error("{authority} broke the exchange: {reason}")]
    Upstream {
        /// `host:port` of the upstream.
        authority: String,
        /// What went wrong.
        reason: String,
    },
    /// The address is loopback, link-local or private, and the options refuse those
    /// ([`ClientOptions::refuse_private_addresses`](super::ClientOptions::refuse_private_addresses),
    /// or `refuse_private_redirects` for a redirect's target).
    #[error("refused to {} {authority}: it is a loopback, link-local or private address", if *.redirect { "follow a redirect to" } else { "connect to" })]
    RefusedAddress {
        /// `host:port` that was refused.
        authority: String,
        /// It was a redirect's target.
        redirect: bool,
    },
}

impl ClientError {
    /// The status that answers a request whose upstream call failed this way: 504 for the
    /// timeouts, 500 for a request that could not be made, 502 for everything else.
    pub fn status(&self) -> StatusCode {
        match self {
            ClientError::ConnectTimeout { .. } | ClientError::Timeout { .. } => {
                StatusCode::GATEWAY_TIMEOUT
            }
            ClientError::InvalidRequest(_) => StatusCode::INTERNAL_SERVER_ERROR,
            _ => StatusCode::BAD_GATEWAY,
        }
    }

    /// What a client of the server may be told: general words, without the upstream's
    /// name, address, URL or the operating system's text (those go to the log).
    ///
    /// ```
    /// use brisk::http::client::ClientError;
    /// let e = ClientError::Connect { authority: "10.0.0.7:8080".into(), reason: "refused".into() };
    /// assert_eq!(e.client_message(), "an upstream service is unavailable");
    /// ```
    pub fn client_message(&self) -> &'static str {
        match self {
            ClientError::ConnectTimeout { .. } | ClientError::Timeout { .. } => {
                "an upstream service did not answer in time"
            }
            ClientError::InvalidRequest(_) => "a request to an upstream service could not be made",
            ClientError::BodyTooLarge { .. } => "an upstream service answered with too much",
            ClientError::TooManyRedirects { .. } | ClientError::RefusedAddress { .. } => {
                "an upstream service sent the request somewhere it may not go"
            }
            ClientError::Connect { .. } | ClientError::Upstream { .. } => {
                "an upstream service is unavailable"
            }
        }
    }

    /// Whether this is one of the timeouts.
    pub fn is_timeout(&self) -> bool {
        self.status() == StatusCode::GATEWAY_TIMEOUT
    }
}

/// Whether an I/O error of `kind` is somewhere in `e`'s sources.
pub(super) fn has_io_kind(e: &(dyn std::error::Error + 'static), kind: std::io::ErrorKind) -> bool {
    let mut source = Some(e);
    while let Some(s) = source {
        if s.downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == kind)
        {
            return true;
        }
        source = s.source();
    }
    false
}
