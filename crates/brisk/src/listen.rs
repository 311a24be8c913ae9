//! [`ListenConfig`]: how one server's listeners are set up, whatever the kind of server.

use crate::address::{Address, Scheme};
use crate::error::{Error, Result};
use crate::recycle::Recycle;
use crate::tls::TlsConfig;

/// How a server's listeners are set up; shared by every kind of server.
#[derive(Debug, Clone)]
pub(crate) struct ListenConfig {
    pub address: Address,
    pub workers: Option<usize>,
    pub reuse_port: bool,
    pub backlog: u32,
    /// Connections one worker holds at most; past it, it stops accepting.
    pub max_connections: usize,
    pub tls: Option<TlsConfig>,
    /// When its workers are replaced by fresh ones.
    pub recycle: Recycle,
}

/// The default of [`ListenConfig::max_connections`].
pub(crate) const DEFAULT_MAX_CONNECTIONS: usize = 65_536;

impl ListenConfig {
    pub(crate) fn new(address: Address) -> Self {
        ListenConfig {
            address,
            workers: None,
            reuse_port: true,
            backlog: 1024,
            max_connections: DEFAULT_MAX_CONNECTIONS,
            tls: None,
            recycle: Recycle::default(),
        }
    }

    /// TLS is configured exactly where the scheme needs it (or allows it: `tcp`, `text`,
    /// `frame`).
    pub(crate) fn check_tls(&self) -> Result<()> {
        let scheme = self.address.scheme();
        let problem: &str = match (scheme, self.tls.is_some()) {
            (Scheme::Https | Scheme::Wss, false) => {
                "needs a certificate: add .tls(brisk::tls::TlsConfig::from_pem_files(cert, key)?)"
            }
            (Scheme::Http, true) => "has a certificate: write https:// to serve TLS",
            (Scheme::Websocket, true) => "has a certificate: write wss:// to serve TLS",
            (Scheme::Udp | Scheme::Unix, true) => "cannot serve TLS (TCP listeners only)",
            _ => return Ok(()),
        };
        Err(Error::Config(format!("{}: {problem}", self.address)))
    }

    /// The rustls configuration for this listener, offering `alpn`.
    pub(crate) fn tls_config(
        &self,
        alpn: &[&[u8]],
    ) -> Option<std::sync::Arc<rustls::ServerConfig>> {
        self.tls.as_ref().map(|t| t.server_config(alpn))
    }

    /// Unix sockets cannot be shared with SO_REUSEPORT: the master always binds them.
    pub(crate) fn shared_by_master(&self) -> bool {
        !self.reuse_port || self.address.scheme() == Scheme::Unix
    }
}
