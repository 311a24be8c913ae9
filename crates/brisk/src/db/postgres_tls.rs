//! TLS to PostgreSQL through rustls: what `sslmode` and the root certificates ask for, and the
//! `SSLRequest` that starts it on a new TCP connection.
//!
//! - `sslmode=disable`: never. `prefer` (libpq's default, and here too): asked for on TCP; a
//!   server that declines, or whose handshake fails, gets a plain connection (a new one), on
//!   which a cleartext or MD5 password is not sent (whoever declined may be in the middle;
//!   SCRAM reveals no password): `sslmode=disable` sends them plain on purpose. `require`:
//!   asked for, and a server that declines is an error.
//! - Without root certificates the server's certificate is not checked, as with libpq's
//!   `require`: the connection is encrypted, which stops eavesdroppers, not a man in the
//!   middle. With them (`sslrootcert=PATH` in the URL, or
//!   [`PostgresOptions::tls_root_certs`](super::PostgresOptions::tls_root_certs)), TLS is
//!   required and the certificate must chain to them and name the host (libpq's
//!   `verify-full`), or only chain to them with `sslmode=verify-ca`.
//! - `sslmode=verify-ca` and `verify-full` without root certificates are refused at once
//!   (libpq would look for `~/.postgresql/root.crt`; Brisk wants them named).
//! - `sslrootcert=system` takes the system's root certificates, found where OpenSSL finds them
//!   (`SSL_CERT_FILE` / `SSL_CERT_DIR` if set, else the distribution's bundle), and always
//!   checks the host name: as with libpq, `verify-ca` is refused with it, since any public CA
//!   could vouch for any server.
//! - Unix sockets never use TLS, as with libpq: the server is on this machine.

use std::path::Path;
use std::sync::Arc;

use bytes::BytesMut;
use postgres_protocol::message::frontend;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::verify_server_cert_signed_by_trust_anchor;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::server::ParsedCertificate;
use rustls::{DigitallySignedStruct, SignatureScheme};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_postgres::config::SslMode;

use super::postgres_connect_error::{ConnectError, TlsError};

/// A connection's byte stream: TCP, TLS over TCP, or a Unix socket.
pub(super) trait Socket: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Socket for T {}

/// A new connection to a server: its stream, and over TLS the hash SCRAM's channel binding
/// proves both ends saw ([`tls_end_point`](super::tls_end_point)).
pub(super) struct Opened {
    pub(super) socket: Box<dyn Socket>,
    /// Whether it is TLS.
    pub(super) encrypted: bool,
    /// `None` on a plain connection, or when the certificate's signature names no hash.
    pub(super) end_point: Option<Vec<u8>>,
    /// Plain though TLS was asked for (`sslmode=prefer`: the server declined it, or its
    /// handshake failed): whoever declined may be in the middle, so no password is sent
    /// in a form they could read or replay.
    pub(super) downgraded: bool,
}

impl Opened {
    /// A connection without TLS, though TLS was asked for and `sslmode=prefer` let it go.
    pub(super) fn downgraded(socket: impl Socket + 'static) -> Self {
        Opened {
            downgraded: true,
            ..Opened::plain(socket)
        }
    }

    /// A connection without TLS.
    pub(super) fn plain(socket: impl Socket + 'static) -> Self {
        Opened {
            socket: Box::new(socket),
            encrypted: false,
            end_point: None,
            downgraded: false,
        }
    }
}

/// How much of the server's certificate `sslmode=verify-ca` / `verify-full` check.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Verify {
    /// `verify-ca`: it chains to the root certificates.
    Chain,
    /// `verify-full`: it chains to them and names the host.
    ChainAndHost,
}

impl Verify {
    fn sslmode(self) -> &'static str {
        match self {
            Verify::Chain => "verify-ca",
            Verify::ChainAndHost => "verify-full",
        }
    }
}

/// What a new TCP connection does about TLS.
#[derive(Clone)]
pub(super) enum PgTls {
    /// `sslmode=disable`: plain.
    Off,
    /// Asks for TLS; a server that declines gets a plain connection unless `required`.
    Ask {
        config: Arc<rustls::ClientConfig>,
        required: bool,
    },
}

impl PgTls {
    /// The TLS that `mode` (`verify`, when the URL said `verify-ca` or `verify-full`) and the
    /// root certificates in the PEM file `roots` (if any) ask for. Fails with a message when
    /// the file cannot be read or holds no certificate, when `roots` comes with
    /// `sslmode=disable`, or when `verify` comes without `roots`.
    pub(super) fn new(
        mode: SslMode,
        verify: Option<Verify>,
        roots: Option<&Path>,
    ) -> Result<Self, TlsError> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = rustls::ClientConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .map_err(TlsError::SetUp)?;
        let lax = |roots| {
            let verifier = Arc::new(HostNotChecked {
                provider: provider.clone(),
                roots,
            });
            builder
                .clone()
                .dangerous()
                .with_custom_certificate_verifier(verifier)
        };
        let config = match (mode, verify, roots) {
            (_, Some(v), None) => return Err(TlsError::NeedsRoots(v.sslmode())),
            (SslMode::Disable, None, None) => return Ok(PgTls::Off),
            (SslMode::Disable, _, _) => return Err(TlsError::RootsWithoutTls),
            (_, Some(Verify::Chain), Some(path)) if path == Path::new(SYSTEM) => {
                return Err(TlsError::ChainWithSystemRoots)
            }
            (_, Some(Verify::Chain), Some(path)) => lax(Some(root_store(path)?)),
            (_, _, Some(path)) => builder.with_root_certificates(root_store(path)?),
            (_, None, None) => lax(None),
        };
        let config = Arc::new(config.with_no_client_auth());
        let required = roots.is_some() || mode == SslMode::Require;
        Ok(PgTls::Ask { config, required })
    }

    /// Starts TLS on `stream` (a new connection to `host`) if this asks for it: sends
    /// `SSLRequest`, reads the one-byte answer, and shakes hands on `S`. `None`: the handshake
    /// failed and `sslmode=prefer` allows a plain connection, which the caller opens anew (as
    /// libpq does).
    pub(super) async fn start(
        &self,
        mut stream: TcpStream,
        host: &str,
    ) -> Result<Option<Opened>, ConnectError> {
        let PgTls::Ask { config, required } = self else {
            return Ok(Some(Opened::plain(stream)));
        };
        let mut out = BytesMut::new();
        frontend::ssl_request(&mut out);
        stream.write_all_buf(&mut out).await?;
        // One byte, read straight off the socket: nothing the server sends after it can
        // slip in ahead of the handshake.
        let answer = stream.read_u8().await?;
        match answer {
            b'S' => {
                let name =
                    ServerName::try_from(host.to_owned()).map_err(|e| TlsError::BadName {
                        host: host.to_owned(),
                        error: e.to_string(),
                    })?;
                match tokio_rustls::TlsConnector::from(config.clone())
                    .connect(name, stream)
                    .await
                {
                    Ok(tls) => {
                        let certificate = tls.get_ref().1.peer_certificates();
                        let end_point = certificate
                            .and_then(|chain| chain.first())
                            .and_then(|leaf| super::tls_end_point::end_point(leaf));
                        Ok(Some(Opened {
                            socket: Box::new(tls),
                            encrypted: true,
                            end_point,
                            downgraded: false,
                        }))
                    }
                    Err(e) if !required => {
                        tracing::debug!("{host}: TLS handshake: {e}; sslmode=prefer: plain");
                        Ok(None)
                    }
                    Err(e) => Err(TlsError::Handshake(e).into()),
                }
            }
            b'N' if !required => Ok(Some(Opened::downgraded(stream))),
            b'N' => Err(TlsError::Declined.into()),
            other => Err(TlsError::OddAnswer(other).into()),
        }
    }
}

/// The `sslrootcert` value that names the system's root certificates, as in libpq.
const SYSTEM: &str = "system";

/// The certificates of the PEM file at `path`, or the system's for [`SYSTEM`], as trust
/// anchors.
fn root_store(path: &Path) -> Result<rustls::RootCertStore, TlsError> {
    if path == Path::new(SYSTEM) {
        return system_root_store();
    }
    let shown = || path.display().to_string();
    let bad = |error: &dyn std::fmt::Display| TlsError::BadRoot {
        path: shown(),
        error: error.to_string(),
    };
    let certs = CertificateDer::pem_file_iter(path)
        .map_err(|e| TlsError::RootsUnreadable {
            path: shown(),
            error: e.to_string(),
        })?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| bad(&e))?;
    let mut store = rustls::RootCertStore::empty();
    for cert in certs {
        store.add(cert).map_err(|e| bad(&e))?;
    }
    if store.is_empty() {
        return Err(TlsError::NoRoot(shown()));
    }
    Ok(store)
}

/// The system's root certificates (`sslrootcert=system`); those it cannot parse are skipped.
fn system_root_store() -> Result<rustls::RootCertStore, TlsError> {
    let found = rustls_native_certs::load_native_certs();
    let mut store = rustls::RootCertStore::empty();
    store.add_parsable_certificates(found.certs);
    if store.is_empty() {
        let why = found.errors.iter().map(|e| e.to_string()).collect();
        return Err(TlsError::NoSystemRoot(why));
    }
    Ok(store)
}

/// The checks below libpq's `verify-full`: with `roots`, the certificate must chain to them
/// and its host name is not looked at (`verify-ca`); without, any certificate is taken
/// (`require`). Either way the server must prove it holds the certificate's key, so the
/// session is encrypted to whoever that is.
#[derive(Debug)]
struct HostNotChecked {
    provider: Arc<CryptoProvider>,
    roots: Option<rustls::RootCertStore>,
}

impl ServerCertVerifier for HostNotChecked {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        if let Some(roots) = &self.roots {
            let cert = ParsedCertificate::try_from(end_entity)?;
            let algorithms = self.provider.signature_verification_algorithms.all;
            verify_server_cert_signed_by_trust_anchor(
                &cert,
                roots,
                intermediates,
                now,
                algorithms,
            )?;
        }
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        let algorithms = &self.provider.signature_verification_algorithms;
        rustls::crypto::verify_tls12_signature(message, cert, dss, algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        let algorithms = &self.provider.signature_verification_algorithms;
        rustls::crypto::verify_tls13_signature(message, cert, dss, algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.provider
            .signature_verification_algorithms
            .supported_schemes()
    }
}
