//! [`HttpServer`]: an `http://` listener whose requests go to an async handler or any
//! `tower::Service` (an axum `Router`, for one), on Brisk's workers.

use std::future::Future;
use std::rc::Rc;
use std::time::Duration;

use super::file_body::FileClaim;
use super::{Body, RequestBody};
use crate::address::{Address, Scheme};
use crate::error::{Error, Result};
use crate::server::{BoxError, LimitOverrides, ListenConfig, WorkerCallbacks};
use futures_util::future::LocalBoxFuture;
use futures_util::FutureExt;
use http::{Request, Response};

pub(crate) type DynHandler =
    Rc<dyn Fn(Request<RequestBody>) -> LocalBoxFuture<'static, Result<Response<Body>, BoxError>>>;

/// HTTP limits. The body limit is the server's max package size.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HttpLimits {
    /// Largest request head (request line and headers) in bytes; over it: 431. Default 16 KiB
    /// (hyper's minimum is 8 KiB).
    pub max_header_bytes: usize,
    /// Most header lines in a request; over it: 431. Default 100.
    pub max_headers: usize,
    /// Time a client has to send a complete request head; then 408 and close (slowloris).
    /// Default 10 s.
    pub header_read_timeout: Duration,
    /// A keep-alive connection idle this long is closed. Default 75 s.
    pub keep_alive_timeout: Duration,
    /// Close a connection after this many requests (`Connection: close` on the last).
    /// Default: no limit.
    pub max_requests_per_connection: Option<u64>,
}

impl Default for HttpLimits {
    fn default() -> Self {
        HttpLimits {
            max_header_bytes: 16 * 1024,
            max_headers: 100,
            header_read_timeout: Duration::from_secs(10),
            keep_alive_timeout: Duration::from_secs(75),
            max_requests_per_connection: None,
        }
    }
}

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
                Ok(brisk_response(resp))
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

/// A `tower::Service`'s response with a [`Body`]: the service's body boxed (or kept, when
/// it is a `Body` already), or, when the response carries a claim on a file range and the
/// body is evidently that range unread (see [`FileClaim`]), the file range itself, so that
/// it is sent with `sendfile(2)` even after a router boxed it.
pub(crate) fn brisk_response<B>(mut resp: Response<B>) -> Response<Body>
where
    B: http_body::Body<Data = bytes::Bytes> + 'static,
    B::Error: Into<BoxError>,
{
    if let Some(claim) = resp.extensions_mut().remove::<FileClaim>() {
        if let Some(file) = claim.take(resp.body(), resp.headers()) {
            return resp.map(|_| Body::from_file_body(file));
        }
    }
    resp.map(Body::new)
}
