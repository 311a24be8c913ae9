//! Why a connection to PostgreSQL could not be made: the socket, the TLS Brisk asked for, the
//! start-up and authentication, or the session's kind. Each says it in the words the pool
//! reports (`DbError::Unavailable`, `status`'s last error); none shows a password.

use std::io;

/// Why opening a connection to one host failed.
#[derive(Debug, thiserror::Error)]
pub(super) enum ConnectError {
    /// The socket failed.
    #[error("{0}")]
    Io(#[from] io::Error),
    /// The server closed the connection.
    #[error("the server closed the connection")]
    Closed,
    /// A message too large, or unreadable.
    #[error(transparent)]
    Message(#[from] MessageError),
    /// The server's own error (`CODE: message`).
    #[error("{0}")]
    Server(String),
    /// TLS as asked for could not be had.
    #[error(transparent)]
    Tls(#[from] TlsError),
    /// Authentication went wrong, or would have sent the password where it should not.
    #[error(transparent)]
    Auth(#[from] AuthError),
    /// `target_session_attrs` asked for another kind of server.
    #[error("transaction_read_only is {0} here (target_session_attrs)")]
    OtherKind(String),
}

/// Why the TLS a URL asks for could not be set up or had.
#[derive(Debug, thiserror::Error)]
pub(super) enum TlsError {
    /// rustls refused its configuration.
    #[error("TLS set-up: {0}")]
    SetUp(#[source] rustls::Error),
    /// Verification without root certificates.
    #[error(
        "sslmode={0} needs root certificates: sslrootcert=PATH in the URL, or \
         PostgresOptions::tls_root_certs"
    )]
    NeedsRoots(&'static str),
    /// Root certificates with `sslmode=disable`.
    #[error(
        "root certificates (sslrootcert or tls_root_certs) ask for a verified TLS connection, \
         which sslmode=disable forbids"
    )]
    RootsWithoutTls,
    /// `verify-ca` with the system's roots.
    #[error(
        "sslmode=verify-ca may not be used with sslrootcert=system (any public CA could vouch \
         for any server): use verify-full"
    )]
    ChainWithSystemRoots,
    /// The PEM file of root certificates cannot be read.
    #[error("cannot read sslrootcert {path}: {error}")]
    RootsUnreadable {
        /// Its path.
        path: String,
        /// Why.
        error: String,
    },
    /// A certificate in it cannot be used.
    #[error("sslrootcert {path}: {error}")]
    BadRoot {
        /// Its path.
        path: String,
        /// Why.
        error: String,
    },
    /// The file holds no certificate.
    #[error("sslrootcert {0} holds no certificate")]
    NoRoot(String),
    /// The system has no readable root certificate.
    #[error(
        "sslrootcert=system: the system has no root certificate that can be read \
         (SSL_CERT_FILE, SSL_CERT_DIR, or the ca-certificates bundle){}",
        if .0.is_empty() { String::new() } else { format!(": {}", .0.join("; ")) }
    )]
    NoSystemRoot(Vec<String>),
    /// The host is not a name a certificate can be checked against.
    #[error("{host} is not a name TLS can check: {error}")]
    BadName {
        /// The host.
        host: String,
        /// Why.
        error: String,
    },
    /// The handshake failed.
    #[error("TLS handshake: {0}")]
    Handshake(#[source] io::Error),
    /// The server does not take TLS, which the URL requires.
    #[error(
        "the server does not accept TLS, which sslmode=require, verify-ca or verify-full, or \
         root certificates, ask for"
    )]
    Declined,
    /// An answer to the TLS request that is neither yes nor no.
    #[error("the server answered the TLS request with {:?}, not S or N", char::from(*.0))]
    OddAnswer(u8),
}

/// Why authentication failed, or was not attempted.
#[derive(Debug, thiserror::Error)]
pub(super) enum AuthError {
    /// The URL names no user.
    #[error("the URL names no user")]
    NoUser,
    /// A password is asked for and the URL has none.
    #[error("the server asks for a password")]
    NoPassword,
    /// A password in the clear, or MD5, after `sslmode=prefer` was declined TLS.
    #[error(
        "the server asks for {0} on a connection without TLS, though TLS was asked for \
         (sslmode=prefer) and declined: whoever declined it may be in the middle, so the \
         password is not sent. Make the server take TLS, or give sslmode=disable to send it \
         without TLS on a network you trust"
    )]
    AfterDowngrade(&'static str),
    /// `channel_binding=require` cannot be met.
    #[error("channel_binding=require, but {0}")]
    Unbound(&'static str),
    /// Authentication asked for again once done.
    #[error("the server asks to authenticate again after AuthenticationOk")]
    Again,
    /// The session went on without AuthenticationOk.
    #[error("the server went on without authenticating us (no AuthenticationOk)")]
    Skipped,
    /// SCRAM's final message was left out.
    #[error("the server skipped SCRAM's final message")]
    NoScramFinal,
    /// SCRAM-SHA-256-PLUS offered with a certificate Brisk cannot bind to.
    #[error(
        "the server offers SCRAM-SHA-256-PLUS, but its certificate's signature names no hash \
         Brisk can bind to (SHA-1, SHA-224, -256, -384, -512)"
    )]
    NoBindableHash,
    /// No SASL mechanism Brisk speaks.
    #[error("the server offers SASL {0:?}; Brisk speaks SCRAM-SHA-256")]
    Mechanisms(Vec<String>),
    /// SASL messages out of order.
    #[error("SASL {0} before SASL start")]
    OutOfOrder(&'static str),
    /// SCRAM's server-first message names no iteration count.
    #[error("the server's SCRAM message names no iteration count (i=)")]
    NoIterations,
    /// More SCRAM iterations than Brisk will compute.
    #[error("the server asks for {rounds} SCRAM iterations, over Brisk's limit of {max}")]
    TooManyIterations {
        /// What the server asked for.
        rounds: u32,
        /// The limit.
        max: u32,
    },
    /// The key derivation's thread failed.
    #[error("SCRAM key derivation: {0}")]
    Derivation(#[source] tokio::task::JoinError),
    /// SCRAM's exchange failed (a bad proof, a bad message).
    #[error("{0}")]
    Scram(#[source] io::Error),
    /// An authentication method Brisk does not speak.
    #[error("the server asks for an authentication Brisk does not speak")]
    Unsupported,
}

/// Why no host of a URL took the connection.
#[derive(Debug, thiserror::Error)]
pub(super) enum NoHost {
    /// The URL names none.
    #[error("the URL names no host")]
    Named,
    /// Each host's failure, in the URL's order.
    #[error("{}", .0.iter().map(|(host, why)| format!("{host}: {why}")).collect::<Vec<_>>().join("; "))]
    Failed(Vec<(String, HostFailure)>),
}

/// Why one host did not take the connection.
#[derive(Debug, thiserror::Error)]
pub(super) enum HostFailure {
    /// It refused, or failed.
    #[error(transparent)]
    Failed(#[from] ConnectError),
    /// It did not answer in time.
    #[error("no answer within {0} ms")]
    Timeout(u128),
}

/// A server message that cannot be taken.
#[derive(Debug, thiserror::Error)]
pub(super) enum MessageError {
    /// Larger than the connection takes.
    #[error("the server sent a message of {size} bytes (type {kind:?}), over the limit of {max}")]
    TooLarge {
        /// Its size on the wire.
        size: usize,
        /// Its type byte.
        kind: char,
        /// The limit.
        max: usize,
    },
    /// It cannot be parsed.
    #[error("unreadable message from the server: {0}")]
    Unreadable(#[source] std::io::Error),
}
