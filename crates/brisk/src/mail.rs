//! [`Mailer`]: sending mail through an SMTP server (feature `mail`), on `lettre`'s async
//! transport with rustls, from a handler, a schedule or a job, without blocking the worker.
//!
//! The server's URL says how to reach it:
//! - `smtp://host:25`: no encryption (a relay on the same machine or network);
//! - `smtp://host:587?tls=required`: STARTTLS, refusing a server that does not offer it;
//! - `smtp://host:587?tls=opportunistic`: STARTTLS when the server offers it;
//! - `smtps://host:465`: TLS from the first byte.
//!
//! Credentials go in the URL (`smtps://user:password@host`, percent-encoded). Each message
//! opens its own connection from the worker that sends it, and closes it with `QUIT`: a worker
//! sends few messages next to the requests it serves, and a connection kept open would only
//! meet a server that closed it for idleness.
//!
//! **Failures are errors, never a hang.** A server that is down, refuses a recipient, or stops
//! answering gives a [`MailError`] within [`MailOptions::send_timeout`]. Sent from a [queue](crate::queue) job, returning the
//! error makes the queue retry the job with its backoff and, after its attempts, keep it in the
//! dead-letter list with the SMTP server's answer.

use crate::redact::redacted;
use std::sync::Arc;
use std::time::Duration;

use lettre::transport::smtp::client::{Certificate, Tls, TlsParameters};
use lettre::{AsyncSmtpTransport, AsyncTransport, Tokio1Executor};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::CertificateDer;

/// A message to send, built with [`Message::builder`] or [`text`].
pub use lettre::Message;

/// How a worker talks to an SMTP server.
#[derive(Debug, Clone)]
pub struct MailOptions {
    /// How long connecting (TCP) may take (default 10 s).
    pub connect_timeout: Duration,
    /// How long sending one message may take in all: connecting, TLS, every command and the
    /// message itself (default 30 s).
    pub send_timeout: Duration,
    /// A PEM certificate to trust besides the usual web roots: a server with a certificate of
    /// its own (a company's CA, a test server's self-signed certificate).
    pub root_certificate: Option<Vec<u8>>,
}

impl Default for MailOptions {
    fn default() -> Self {
        MailOptions {
            connect_timeout: Duration::from_secs(10),
            send_timeout: Duration::from_secs(30),
            root_certificate: None,
        }
    }
}

/// Why mail was not sent.
#[derive(Debug, Clone, thiserror::Error)]
pub enum MailError {
    /// The URL or the certificate cannot be used.
    #[error("bad SMTP configuration: {0}")]
    Config(String),
    /// The message cannot be sent as given (an address that is not one, a missing field).
    /// Answer 400.
    #[error("bad message: {0}")]
    Message(String),
    /// The server could not be reached, or the connection broke. Answer 503.
    #[error("the SMTP server is unavailable: {0}")]
    Unavailable(String),
    /// TLS failed: the server's certificate is not trusted, or it offers no STARTTLS. Answer 502.
    #[error("TLS with the SMTP server failed: {0}")]
    Tls(String),
    /// The server answered with an error: `code` is its reply code (`550`: no such mailbox,
    /// `451`: try again later). Answer 502.
    #[error("the SMTP server refused the message: {code} {message}")]
    Refused {
        /// The reply code (4xx: transient, 5xx: permanent).
        code: u16,
        /// The reply's text.
        message: String,
    },
    /// Connecting or the whole send took longer than allowed. Answer 504.
    #[error("the SMTP server did not answer within {} ms", .0.as_millis())]
    Timeout(Duration),
}

impl MailError {
    /// The HTTP status that answers a request that failed with this error.
    pub fn http_status(&self) -> u16 {
        match self {
            MailError::Message(_) => 400,
            MailError::Unavailable(_) => 503,
            MailError::Tls(_) | MailError::Refused { .. } => 502,
            MailError::Timeout(_) => 504,
            MailError::Config(_) => 500,
        }
    }

    /// What a client of the server may be told: what was wrong with a message it gave, or
    /// general words for the rest (the SMTP server's name and answers go to the log).
    pub fn client_message(&self) -> String {
        match self {
            MailError::Message(_) => self.to_string(),
            MailError::Unavailable(_) | MailError::Tls(_) => {
                "the mail server is unavailable".into()
            }
            // The code says why (550: no such mailbox); its text may name internal hosts.
            MailError::Refused { code, .. } => {
                format!("the mail server refused the message ({code})")
            }
            MailError::Timeout(_) => "the mail server did not answer in time".into(),
            MailError::Config(_) => "mail is not set up correctly".into(),
        }
    }
}

/// What the server answered when it accepted a message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Delivered {
    /// The reply code (`250`).
    pub code: u16,
    /// The reply's text (often with the server's id for the message).
    pub message: String,
}

/// A plain-text message from `from` to `to` (addresses like `a@b.c` or `Name <a@b.c>`).
///
/// ```
/// let m = brisk::mail::text("Brisk <noreply@example.com>", "ops@example.com", "Hello", "Hi")?;
/// assert!(brisk::mail::text("noreply@example.com", "not an address", "s", "b").is_err());
/// # Ok::<(), brisk::mail::MailError>(())
/// ```
pub fn text(from: &str, to: &str, subject: &str, body: &str) -> Result<Message, MailError> {
    let address = |what: &str, v: &str| {
        v.parse::<lettre::message::Mailbox>()
            .map_err(|e| MailError::Message(format!("{what} {v:?}: {e}")))
    };
    Message::builder()
        .from(address("from", from)?)
        .to(address("to", to)?)
        .subject(subject)
        .header(lettre::message::header::ContentType::TEXT_PLAIN)
        .body(body.to_owned())
        .map_err(|e| MailError::Message(e.to_string()))
}

/// An SMTP server; cheap to clone, `Send + Sync`. Making one connects nothing: each
/// [`send`](Self::send) connects.
///
/// ```no_run
/// # async fn f() -> Result<(), brisk::mail::MailError> {
/// use brisk::mail::{self, MailOptions, Mailer};
/// let mailer = Mailer::new("smtp://127.0.0.1:2525?tls=required", MailOptions::default())?;
/// let message = mail::text("noreply@example.com", "ops@example.com", "Disk", "90 % full")?;
/// let delivered = mailer.send(message).await?;
/// println!("{} {}", delivered.code, delivered.message);
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Mailer {
    inner: Arc<Inner>,
}

struct Inner {
    options: MailOptions,
    transport: AsyncSmtpTransport<Tokio1Executor>,
}

impl Mailer {
    /// A server at `url` (see the [module](self) for its forms). Checks the URL and the
    /// certificate now, so that a bad one fails the start, not the first message.
    pub fn new(url: &str, options: MailOptions) -> Result<Self, MailError> {
        let transport = transport(url, &options)?;
        Ok(Mailer {
            inner: Arc::new(Inner { options, transport }),
        })
    }

    /// Sends `message`. Awaiting it yields to the worker's other work; it never blocks.
    pub async fn send(&self, message: Message) -> Result<Delivered, MailError> {
        let inner = &self.inner;
        let limit = inner.options.send_timeout;
        match tokio::time::timeout(limit, inner.transport.send(message)).await {
            Err(_) => Err(MailError::Timeout(limit)),
            Ok(Err(e)) => Err(mail_error(e, inner.options.connect_timeout)),
            Ok(Ok(response)) => Ok(Delivered {
                code: u16::from(response.code()),
                message: response.message().collect::<Vec<_>>().join(" "),
            }),
        }
    }
}

/// lettre's transport for `url`, trusting `options.root_certificate` too.
fn transport(
    url: &str,
    options: &MailOptions,
) -> Result<AsyncSmtpTransport<Tokio1Executor>, MailError> {
    let bad = |e: &dyn std::fmt::Display| MailError::Config(format!("{}: {e}", redacted(url)));
    let mut builder = AsyncSmtpTransport::<Tokio1Executor>::from_url(url).map_err(|e| bad(&e))?;
    builder = builder.timeout(Some(options.connect_timeout));
    if let Some(pem) = &options.root_certificate {
        let host = url
            .parse::<http::Uri>()
            .ok()
            .and_then(|u| u.host().map(str::to_owned))
            .ok_or_else(|| bad(&"no host"))?;
        let found = CertificateDer::pem_slice_iter(pem)
            .filter(Result::is_ok)
            .count();
        if found == 0 {
            return Err(bad(&"the root certificate holds no PEM certificate"));
        }
        let certificate = Certificate::from_pem(pem).map_err(|e| bad(&e))?;
        let parameters = TlsParameters::builder(host)
            .add_root_certificate(certificate)
            .build_rustls()
            .map_err(|e| bad(&e))?;
        let query = url.split_once('?').map_or("", |(_, q)| q);
        let tls = if url.starts_with("smtps:") {
            Tls::Wrapper(parameters)
        } else if query.split('&').any(|kv| kv == "tls=required") {
            Tls::Required(parameters)
        } else if query.split('&').any(|kv| kv == "tls=opportunistic") {
            Tls::Opportunistic(parameters)
        } else {
            Tls::None
        };
        builder = builder.tls(tls);
    }
    Ok(builder.build())
}

/// A [`MailError`] for lettre's error.
fn mail_error(e: lettre::transport::smtp::Error, connect_timeout: Duration) -> MailError {
    if let Some(code) = e.status() {
        let code = u16::from(code);
        // lettre's text is "permanent error (550): <server's text>"; keep the server's part.
        let text = e.to_string();
        let message = text
            .split_once("): ")
            .map_or(text.as_str(), |(_, m)| m)
            .to_owned();
        return MailError::Refused { code, message };
    }
    if e.is_timeout() {
        return MailError::Timeout(connect_timeout);
    }
    let why = crate::error::chain(&e);
    // lettre calls a missing STARTTLS a client error, and a refused certificate a connection
    // error (rustls's error inside an I/O error).
    if e.is_tls() || (e.is_client() && why.contains("STARTTLS")) || from_rustls(&e) {
        MailError::Tls(why)
    } else {
        MailError::Unavailable(why)
    }
}

/// Whether `e` or one of its sources is a TLS failure of rustls (a certificate, a handshake).
fn from_rustls(e: &(dyn std::error::Error + 'static)) -> bool {
    let mut next = Some(e);
    while let Some(err) = next {
        let io_inner = err
            .downcast_ref::<std::io::Error>()
            .and_then(|io| io.get_ref());
        if err.is::<rustls::Error>() || io_inner.is_some_and(|i| i.is::<rustls::Error>()) {
            return true;
        }
        next = err.source();
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bad_url_fails_when_the_mailer_is_made() {
        let e = Mailer::new("http://example.com", MailOptions::default())
            .err()
            .expect("an error");
        assert!(
            matches!(&e, MailError::Config(m) if m.contains("http://example.com")),
            "{e}"
        );
        let options = MailOptions {
            root_certificate: Some(b"not a certificate".to_vec()),
            ..Default::default()
        };
        assert!(matches!(
            Mailer::new("smtps://127.0.0.1:465", options),
            Err(MailError::Config(_))
        ));
    }

    #[test]
    fn each_error_answers_with_its_status() {
        assert_eq!(MailError::Message(String::new()).http_status(), 400);
        assert_eq!(MailError::Unavailable(String::new()).http_status(), 503);
        let refused = MailError::Refused {
            code: 550,
            message: "no such user".into(),
        };
        assert_eq!(refused.http_status(), 502);
        assert_eq!(
            refused.to_string(),
            "the SMTP server refused the message: 550 no such user"
        );
        assert_eq!(MailError::Timeout(Duration::ZERO).http_status(), 504);
    }
}
