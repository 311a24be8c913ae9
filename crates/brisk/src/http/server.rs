//! [`HttpServer`]: an `http://` listener whose requests go to an async handler or any
//! `tower::Service` (an axum `Router`, for one), on Brisk's workers.

use std::future::Future;
use std::rc::Rc;

use futures_util::FutureExt;
use http::{Request, Response};

use super::handler::DynHandler;
use super::limits::HttpLimits;
use super::{Body, RequestBody};
use crate::address::{Address, Scheme};
use crate::error::{Error, Result};
use crate::limits::LimitOverrides;
use crate::listen::ListenConfig;
use crate::runtime::handler::BoxError;
use crate::runtime::listener::Listener;
use crate::runtime::{Service, WorkerCallbacks};

/// An HTTP/1.1 server: keep-alive, pipelining, chunked bodies both ways, `Expect:
/// 100-continue`, HEAD, upgrades (WebSocket).
///
/// ```no_run
/// use brisk::http::{Body, HttpServer};
/// let hello = HttpServer::new("http://127.0.0.1:8080").unwrap().handler(|_req| async {
///     http::Response::new(Body::from("Hello World"))
/// });
/// ```
pub struct HttpServer {
    pub(crate) listen: ListenConfig,
    pub(crate) limits: LimitOverrides,
    pub(crate) http: HttpLimits,
    pub(crate) worker_callbacks: WorkerCallbacks,
    pub(crate) handler: Option<DynHandler>,
    pub(crate) http2: bool,
}

impl HttpServer {
    /// A server for an `http://host:port` or `https://host:port` address (`https` needs
    /// [`tls`](Self::tls)).
    pub fn new(address: &str) -> Result<Self> {
        let address: Address = address.parse()?;
        if !matches!(address.scheme(), Scheme::Http | Scheme::Https) {
            return Err(Error::Config(format!(
                "{address}: HttpServer needs an http:// or https:// address"
            )));
        }
        Ok(HttpServer {
            listen: ListenConfig::new(address),
            limits: LimitOverrides::default(),
            http: HttpLimits::default(),
            worker_callbacks: WorkerCallbacks::default(),
            handler: None,
            http2: false,
        })
    }

    /// Answers every request with `f`.
    pub fn handler<F, Fut>(mut self, f: F) -> Self
    where
        F: Fn(Request<RequestBody>) -> Fut + 'static,
        Fut: Future<Output = Response<Body>> + 'static,
    {
        self.handler = Some(Rc::new(move |req| Box::pin(f(req).map(Ok))));
        self
    }

    /// Answers every request with a `tower::Service`, cloned per request (an axum `Router`
    /// runs unchanged).
    pub fn service<S, B>(mut self, service: S) -> Self
    where
        S: tower_service::Service<Request<RequestBody>, Response = Response<B>> + Clone + 'static,
        S::Error: Into<BoxError>,
        S::Future: 'static,
        B: http_body::Body<Data = bytes::Bytes> + 'static,
        B::Error: Into<BoxError>,
    {
        self.handler = Some(Rc::new(move |req| {
            let mut svc = service.clone();
            Box::pin(async move {
                std::future::poll_fn(|cx| svc.poll_ready(cx))
                    .await
                    .map_err(Into::into)?;
                let resp = svc.call(req).await.map_err(Into::into)?;
                Ok(resp.map(Body::new))
            })
        }));
        self
    }

    crate::server::builder_setters!();
    crate::server::tls_setter!("required by `https://`");

    /// Offers HTTP/2 to TLS clients through ALPN (default off: HTTP/1.1 only). Plain
    /// `http://` listeners always speak HTTP/1.1.
    pub fn http2(mut self, on: bool) -> Self {
        self.http2 = on;
        self
    }

    /// Largest request body (the max package size); over it: 413.
    pub fn max_body_size(mut self, bytes: usize) -> Self {
        self.limits.max_package_size = Some(bytes);
        self
    }

    /// Sets the HTTP limits.
    pub fn http_limits(mut self, limits: HttpLimits) -> Self {
        self.http = limits;
        self
    }
}

impl From<HttpServer> for Service {
    fn from(server: HttpServer) -> Self {
        let HttpServer {
            listen,
            limits: overrides,
            http,
            worker_callbacks,
            handler,
            http2,
        } = server;
        let alpn: &[&[u8]] = if http2 {
            &[b"h2", b"http/1.1"]
        } else {
            &[b"http/1.1"]
        };
        let tls = listen.tls_config(alpn);
        let tls_handshake = listen.tls.as_ref().map(|t| t.handshake_deadline());
        let handler = handler.unwrap_or_else(super::start::not_found_handler);
        Service {
            listen,
            worker_callbacks,
            limits: overrides,
            start: Box::new(move |worker, listener, limits| {
                let Listener::Tcp(l) = listener else {
                    unreachable!("HttpServer only takes http:// and https:// addresses")
                };
                let l = tokio::net::TcpListener::from_std(l)?;
                super::start::start(worker, l, limits, http, handler, tls.zip(tls_handshake));
                Ok(())
            }),
        }
    }
}
