//! [`WsServer`]: a `websocket://` or `wss://` listener for a [`WsEndpoint`].

use super::endpoint::{Endpoint, WsEndpoint};
use crate::address::{Address, Scheme};
use crate::error::{Error, Result};
use crate::limits::LimitOverrides;
use crate::listen::ListenConfig;
use crate::runtime::accept::accept_tcp;
use crate::runtime::listener::Listener;
use crate::runtime::{Service, WorkerCallbacks};
use crate::server::{builder_setters, tls_setter};

/// A `websocket://` or `wss://` listener serving a [`WsEndpoint`].
pub struct WsServer {
    pub(crate) listen: ListenConfig,
    pub(crate) limits: LimitOverrides,
    pub(crate) worker_callbacks: WorkerCallbacks,
    pub(crate) endpoint: Endpoint,
}

impl WsServer {
    /// A server for a `websocket://host:port` or `wss://host:port` address (`wss` needs
    /// [`tls`](Self::tls)).
    pub fn new(address: &str) -> Result<Self> {
        let address: Address = address.parse()?;
        if !matches!(address.scheme(), Scheme::Websocket | Scheme::Wss) {
            return Err(Error::Config(format!(
                "{address}: WsServer needs a websocket:// or wss:// address"
            )));
        }
        Ok(WsServer {
            listen: ListenConfig::new(address),
            limits: LimitOverrides::default(),
            worker_callbacks: WorkerCallbacks::default(),
            endpoint: WsEndpoint::new().core().clone(),
        })
    }

    /// What to do with the connections.
    pub fn endpoint<T: 'static>(mut self, endpoint: WsEndpoint<T>) -> Self {
        self.endpoint = endpoint.core().clone();
        self
    }

    builder_setters!();
    tls_setter!("required by `wss://`");

    /// Overrides [`Limits::max_send_buffer`](crate::Limits::max_send_buffer) for this server.
    pub fn max_send_buffer(mut self, bytes: usize) -> Self {
        self.limits.max_send_buffer = Some(bytes);
        self
    }

    /// Overrides [`Limits::send_timeout`](crate::Limits::send_timeout) for this server (`None`
    /// turns it off).
    pub fn send_timeout(mut self, timeout: Option<std::time::Duration>) -> Self {
        self.limits.send_timeout = Some(timeout);
        self
    }
}

impl From<WsServer> for Service {
    fn from(server: WsServer) -> Self {
        let WsServer {
            listen,
            limits,
            worker_callbacks,
            endpoint,
        } = server;
        let tls = listen.tls_config(&[b"http/1.1"]);
        Service::listening(
            listen,
            worker_callbacks,
            limits,
            Box::new(move |worker, listener, limits| {
                let Listener::Tcp(l) = listener else {
                    unreachable!("WsServer only takes websocket:// and wss:// addresses")
                };
                let l = tokio::net::TcpListener::from_std(l)?;
                let shared = endpoint.shared(&worker, limits);
                if tls.is_none() {
                    let key = format!("listener:{}", worker.info.server);
                    super::handover::register(&worker, key, &endpoint, Some(limits));
                }
                tokio::task::spawn_local(accept_tcp(shared, l, tls));
                Ok(())
            }),
        )
    }
}
