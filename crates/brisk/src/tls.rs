//! TLS for listeners, through rustls: [`TlsConfig`] loads a certificate chain and its key
//! from PEM files; `https://` and `wss://` listeners need one, and `tcp://`, `text://` and
//! `frame://` listeners take one to speak TLS (Workerman's `ssl` transport).
//!
//! Workers load the files when they start, so `reload` picks up a renewed certificate
//! without dropping the listening sockets.
//!
//! Connections on the connection runtime (WebSocket, Text, Frame, raw TCP) drive a
//! `rustls::ServerConnection` straight over the non-blocking socket (`TlsSocket`), with the
//! same readiness model as plain sockets; HTTP connections run hyper over `tokio-rustls`.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

use crate::error::{Error, Result};

/// A server certificate chain and private key, ready for TLS listeners.
///
/// ```no_run
/// use brisk::http::HttpServer;
/// use brisk::tls::TlsConfig;
///
/// # fn main() -> brisk::Result<()> {
/// let tls = TlsConfig::from_pem_files("cert.pem", "key.pem")?;
/// let site = HttpServer::new("https://0.0.0.0:8443")?.tls(tls).http2(true);
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct TlsConfig {
    config: Arc<rustls::ServerConfig>,
    handshake_timeout: Duration,
}

/// Time a client has to complete its TLS handshake, unless set otherwise.
const DEFAULT_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

impl std::fmt::Debug for TlsConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TlsConfig").finish_non_exhaustive()
    }
}

impl TlsConfig {
    /// Loads the certificate chain (leaf first) and the private key (PKCS#8, PKCS#1 or SEC1)
    /// from PEM files. Fails with a message naming the file and what is wrong with it.
    pub fn from_pem_files(cert: impl AsRef<Path>, key: impl AsRef<Path>) -> Result<Self> {
        let (cert, key) = (cert.as_ref(), key.as_ref());
        let read = |path: &Path, what: &str| {
            std::fs::read(path)
                .map_err(|e| Error::io(format!("cannot read TLS {what} {}", path.display()), e))
        };
        let cert_pem = read(cert, "certificate")?;
        let key_pem = read(key, "key")?;
        Self::build(&cert_pem, &key_pem, &cert.display(), &key.display())
    }

    /// Like [`from_pem_files`](Self::from_pem_files), from PEM text in memory.
    ///
    /// ```
    /// let err = brisk::tls::TlsConfig::from_pem(b"not pem", b"").unwrap_err();
    /// assert!(err.to_string().contains("no certificate"), "{err}");
    /// ```
    pub fn from_pem(cert_pem: &[u8], key_pem: &[u8]) -> Result<Self> {
        Self::build(cert_pem, key_pem, &"the certificate PEM", &"the key PEM")
    }

    /// Uses a rustls configuration as it is (client authentication, session tickets, your own
    /// crypto provider). Brisk only sets its ALPN protocols per listener.
    pub fn from_rustls(config: Arc<rustls::ServerConfig>) -> Self {
        TlsConfig {
            config,
            handshake_timeout: DEFAULT_HANDSHAKE_TIMEOUT,
        }
    }

    /// Time a client has to complete its TLS handshake; then it is closed and counted as
    /// `rejected` (a client that opens connections and stalls them must not hold them).
    /// Default 10 s. `tcp://`, `text://` and `frame://` listeners check it once a second;
    /// `wss://` listeners use their endpoint's WebSocket handshake timeout, which covers the
    /// TLS handshake too.
    ///
    /// ```no_run
    /// # fn main() -> brisk::Result<()> {
    /// use std::time::Duration;
    /// let tls = brisk::tls::TlsConfig::from_pem_files("cert.pem", "key.pem")?
    ///     .handshake_timeout(Duration::from_secs(5));
    /// # Ok(()) }
    /// ```
    pub fn handshake_timeout(mut self, timeout: Duration) -> Self {
        self.handshake_timeout = timeout;
        self
    }

    /// The handshake timeout (see [`handshake_timeout`](Self::handshake_timeout)).
    pub(crate) fn handshake_deadline(&self) -> Duration {
        self.handshake_timeout
    }

    fn build(
        cert_pem: &[u8],
        key_pem: &[u8],
        cert_name: &dyn std::fmt::Display,
        key_name: &dyn std::fmt::Display,
    ) -> Result<Self> {
        let certs = CertificateDer::pem_slice_iter(cert_pem)
            .collect::<std::result::Result<Vec<_>, _>>()
            .map_err(|e| Error::Config(format!("bad certificate in {cert_name}: {e}")))?;
        if certs.is_empty() {
            return Err(Error::Config(format!(
                "no certificate in {cert_name} (expected a PEM \"BEGIN CERTIFICATE\" block)"
            )));
        }
        let key = PrivateKeyDer::from_pem_slice(key_pem)
            .map_err(|e| Error::Config(format!("no usable private key in {key_name}: {e}")))?;
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| Error::Config(format!("TLS: {e}")))?
            .with_no_client_auth()
            .with_single_cert(certs, key)
            .map_err(|e| {
                Error::Config(format!(
                    "certificate {cert_name} and key {key_name} cannot be used together: {e}"
                ))
            })?;
        Ok(Self::from_rustls(Arc::new(config)))
    }

    /// The rustls configuration for one listener, offering `alpn` (most preferred first).
    pub(crate) fn server_config(&self, alpn: &[&[u8]]) -> Arc<rustls::ServerConfig> {
        let mut config = (*self.config).clone();
        config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
        Arc::new(config)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pair() -> (String, String) {
        let ck = rcgen::generate_simple_self_signed(vec!["localhost".into()]).unwrap();
        (ck.cert.pem(), ck.key_pair.serialize_pem())
    }

    #[test]
    fn loads_a_certificate_and_its_key() {
        let (cert, key) = pair();
        let tls = TlsConfig::from_pem(cert.as_bytes(), key.as_bytes()).unwrap();
        let h2 = tls.server_config(&[b"h2", b"http/1.1"]);
        assert_eq!(
            h2.alpn_protocols,
            vec![b"h2".to_vec(), b"http/1.1".to_vec()]
        );
        assert!(tls.server_config(&[]).alpn_protocols.is_empty());
    }

    #[test]
    fn bad_files_get_messages_that_name_them() {
        let (cert, key) = pair();
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        let cert_path = dir.join("cert.pem");
        std::fs::write(&cert_path, &cert).unwrap();
        let missing = dir.join("missing.pem");
        let err = TlsConfig::from_pem_files(&cert_path, &missing)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("cannot read TLS key") && err.contains("missing.pem"),
            "{err}"
        );

        let err = TlsConfig::from_pem(key.as_bytes(), key.as_bytes())
            .unwrap_err()
            .to_string();
        assert!(err.contains("no certificate"), "{err}");
        let err = TlsConfig::from_pem(cert.as_bytes(), cert.as_bytes())
            .unwrap_err()
            .to_string();
        assert!(err.contains("no usable private key"), "{err}");
        // A key that belongs to another certificate.
        let (_, other_key) = pair();
        let err = TlsConfig::from_pem(cert.as_bytes(), other_key.as_bytes());
        let err = err.unwrap_err().to_string();
        assert!(err.contains("cannot be used together"), "{err}");
    }

    #[test]
    fn tls_goes_with_the_schemes_that_take_it() {
        let (cert, key) = pair();
        let tls = TlsConfig::from_pem(cert.as_bytes(), key.as_bytes()).unwrap();
        let https = crate::http::HttpServer::new("https://127.0.0.1:1").unwrap();
        let err = https.listen.check_tls().unwrap_err().to_string();
        assert!(err.contains("needs a certificate"), "{err}");
        assert!(https.tls(tls.clone()).listen.check_tls().is_ok());
        let http = crate::http::HttpServer::new("http://127.0.0.1:1").unwrap();
        let err = http
            .tls(tls.clone())
            .listen
            .check_tls()
            .unwrap_err()
            .to_string();
        assert!(err.contains("write https://"), "{err}");
        let wss = crate::ws::WsServer::new("wss://127.0.0.1:1").unwrap();
        assert!(wss.listen.check_tls().is_err());
        let text = crate::Server::new("text://127.0.0.1:1").unwrap();
        assert!(text.tls(tls.clone()).listen.check_tls().is_ok());
        let unix = crate::Server::new("unix:///tmp/brisk-tls-test.sock").unwrap();
        let err = unix.tls(tls).listen.check_tls().unwrap_err().to_string();
        assert!(err.contains("TCP listeners only"), "{err}");
    }
}
