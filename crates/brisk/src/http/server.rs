//! [`HttpServer`]: an `http://` listener whose requests go to an async handler or any
//! `tower::Service` (an axum `Router`, for one), on Brisk's workers.

use std::future::Future;
use std::rc::Rc;

use super::answers::{not_found_handler, Answers, Logging, Recording};
use super::file_body::FileClaim;
use super::limits::HttpLimits;
use super::{Body, RequestBody};
use crate::address::{Address, Scheme};
use crate::error::{Error, Result};
use crate::limits::LimitOverrides;
use crate::listen::ListenConfig;
use crate::runtime::handler::BoxError;
use crate::runtime::listener::Listener;
use crate::runtime::{Service, WorkerCallbacks};
use crate::ws::named::NamedEndpoint;
use futures_util::FutureExt;
use http::{Request, Response, StatusCode};

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
    /// Its handler (404 for everything until one is given) and compression, as each worker
    /// serves them.
    pub(crate) answers: Answers,
    pub(crate) http2: bool,
    pub(crate) access_log: Option<super::access_log::AccessLog>,
    pub(crate) recording: Recording,
    /// Its named WebSocket endpoints, registered in each worker when the server starts there.
    pub(crate) ws_endpoints: Vec<NamedEndpoint>,
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
            answers: Answers {
                handler: not_found_handler(),
                #[cfg(feature = "compression")]
                compression: None,
            },
            http2: false,
            access_log: None,
            recording: Recording {
                request_spans: true,
                latency_histograms: true,
            },
            ws_endpoints: Vec::new(),
        })
    }

    /// Answers every request with `f`.
    pub fn handler<F, Fut>(mut self, f: F) -> Self
    where
        F: Fn(Request<RequestBody>) -> Fut + 'static,
        Fut: Future<Output = Response<Body>> + 'static,
    {
        self.answers.handler = Rc::new(move |req| Box::pin(f(req).map(Ok)));
        self
    }

    /// Answers every request with `f`, which may fail: an `Err` is answered with its
    /// [`IntoResponse`] (an `io::Error` as 404, 403 or 500, a [`StatusCode`] as itself, or
    /// your own error type), so handlers can use `?`.
    ///
    /// ```no_run
    /// use brisk::http::{Body, HttpServer};
    ///
    /// let server = HttpServer::new("http://127.0.0.1:8080").unwrap().try_handler(|_req| async {
    ///     let motd = std::fs::read_to_string("/etc/motd")?; // missing: 404
    ///     Ok::<_, std::io::Error>(http::Response::new(Body::from(motd)))
    /// });
    /// ```
    pub fn try_handler<F, Fut, E>(mut self, f: F) -> Self
    where
        F: Fn(Request<RequestBody>) -> Fut + 'static,
        Fut: Future<Output = std::result::Result<Response<Body>, E>> + 'static,
        E: IntoResponse,
    {
        self.answers.handler = Rc::new(move |req| {
            Box::pin(f(req).map(|r| Ok(r.unwrap_or_else(IntoResponse::into_response))))
        });
        self
    }

    /// Answers every request with a `tower::Service`, cloned per request (an axum `Router`
    /// runs unchanged). With feature `axum`, each request carries the client's address as
    /// axum's `ConnectInfo<SocketAddr>`, so the `ConnectInfo` extractor works as it does
    /// under `axum::serve` with connect info (absent on a Unix socket).
    pub fn service<S, B>(mut self, service: S) -> Self
    where
        S: tower_service::Service<Request<RequestBody>, Response = Response<B>> + Clone + 'static,
        S::Error: Into<BoxError>,
        S::Future: 'static,
        B: http_body::Body<Data = bytes::Bytes> + 'static,
        B::Error: Into<BoxError>,
    {
        self.answers.handler = Rc::new(move |req: Request<RequestBody>| {
            // For axum's `ConnectInfo<SocketAddr>` extractor: who sent the request.
            #[cfg(feature = "axum")]
            let req = with_connect_info(req);
            let mut svc = service.clone();
            Box::pin(async move {
                std::future::poll_fn(|cx| svc.poll_ready(cx))
                    .await
                    .map_err(Into::into)?;
                let resp = svc.call(req).await.map_err(Into::into)?;
                Ok(brisk_response(resp))
            })
        });
        self
    }

    /// Registers `endpoint` under `name` for the WebSocket routes of this server's
    /// `tower::Service` (an axum route answers with
    /// [`WebSocketUpgrade::on`](crate::ws::WebSocketUpgrade::on)`(name)`, feature `axum`):
    /// the endpoint stays on the worker's thread, where routes find it. The name carries the
    /// type of the endpoint's connection data, so a route attaches that type or does not
    /// compile. Two endpoints of one name on a server are a mistake: it panics, naming it.
    ///
    /// ```no_run
    /// use brisk::ws::{EndpointName, WsEndpoint};
    /// const ECHO: EndpointName = EndpointName::new("echo");
    /// let echo = WsEndpoint::new().on_message(|ws, msg| async move { ws.send(msg) });
    /// let server = brisk::http::HttpServer::new("http://127.0.0.1:8080")
    ///     .unwrap()
    ///     .ws_endpoint(ECHO, echo);
    /// ```
    pub fn ws_endpoint<T: 'static>(
        mut self,
        name: crate::ws::EndpointName<T>,
        endpoint: crate::ws::WsEndpoint<T>,
    ) -> Self {
        let taken = self.ws_endpoints.iter().any(|e| e.name() == name.as_str());
        assert!(
            !taken,
            "HttpServer::ws_endpoint: two WebSocket endpoints named {:?} on one server",
            name.as_str()
        );
        self.ws_endpoints.push(NamedEndpoint::new(name, endpoint));
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

    /// Logs every request to a file, off the request path (see
    /// [`access_log`](super::access_log)).
    pub fn access_log(mut self, log: super::access_log::AccessLog) -> Self {
        self.access_log = Some(log);
        self
    }

    /// Whether the handler of each request runs inside a `request{conn=N}` tracing span
    /// (default on), so that what the app logs while answering carries the connection id
    /// beside the worker's. The span is made once per connection (when a subscriber wants
    /// spans at `INFO`) and entered while a handler runs; off saves even that.
    pub fn request_spans(mut self, on: bool) -> Self {
        self.recording.request_spans = on;
        self
    }

    /// Whether each request's handler time is counted in the worker's latency histogram
    /// (default on: `status` shows p50 / p95 / p99 from it). Off is for measuring what the
    /// histogram costs.
    pub fn latency_histograms(mut self, on: bool) -> Self {
        self.recording.latency_histograms = on;
        self
    }

    /// Compresses the responses of the handler or service with gzip or brotli, as each
    /// request's `Accept-Encoding` allows (see [`compression`](super::compression)).
    #[cfg(feature = "compression")]
    pub fn compression(mut self, compression: super::compression::Compression) -> Self {
        self.answers.compression = Some(compression);
        self
    }
}

/// What a failed [`HttpServer::try_handler`] answers with: implement it for your own error
/// type to choose the status and body.
///
/// ```
/// use brisk::http::{Body, IntoResponse};
/// use http::{Response, StatusCode};
///
/// enum ApiError {
///     NoSuchUser,
/// }
///
/// impl IntoResponse for ApiError {
///     fn into_response(self) -> Response<Body> {
///         match self {
///             ApiError::NoSuchUser => {
///                 let mut resp = Response::new(Body::from("no such user\n"));
///                 *resp.status_mut() = StatusCode::NOT_FOUND;
///                 resp
///             }
///         }
///     }
/// }
/// ```
pub trait IntoResponse {
    /// The response that answers the request.
    fn into_response(self) -> Response<Body>;
}

impl IntoResponse for Response<Body> {
    fn into_response(self) -> Response<Body> {
        self
    }
}

/// The status, with an empty body.
impl IntoResponse for StatusCode {
    fn into_response(self) -> Response<Body> {
        let mut resp = Response::new(Body::empty());
        *resp.status_mut() = self;
        resp
    }
}

/// `404 Not Found` for a missing file, `403 Forbidden` for one that may not be read, and
/// `500 Internal Server Error` (logged as a warning, not shown to the client) for anything
/// else.
impl IntoResponse for std::io::Error {
    fn into_response(self) -> Response<Body> {
        match self.kind() {
            std::io::ErrorKind::NotFound => StatusCode::NOT_FOUND.into_response(),
            std::io::ErrorKind::PermissionDenied => StatusCode::FORBIDDEN.into_response(),
            _ => {
                tracing::warn!(error = %self, "handler error");
                StatusCode::INTERNAL_SERVER_ERROR.into_response()
            }
        }
    }
}

/// The error's status ([`DbError::http_status`](crate::db::DbError::http_status)) with a
/// JSON body of general words (`{"error": "it exists already"}`); the whole error, the
/// server's message included, goes to the log.
#[cfg(any(feature = "sqlite", feature = "postgres", feature = "mysql"))]
impl IntoResponse for crate::db::DbError {
    fn into_response(self) -> Response<Body> {
        self.log();
        let status =
            StatusCode::from_u16(self.http_status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let mut resp = Response::new(Body::from(self.client_body()));
        *resp.status_mut() = status;
        resp.headers_mut().insert(
            http::header::CONTENT_TYPE,
            http::HeaderValue::from_static("application/json"),
        );
        resp
    }
}

/// `429 Too Many Requests` with `Retry-After` (whole seconds, at least 1) and the refusal as
/// plain text.
impl IntoResponse for super::login_throttle::Throttled {
    fn into_response(self) -> Response<Body> {
        let mut resp = Response::new(Body::from(format!("{self}\n")));
        *resp.status_mut() = StatusCode::TOO_MANY_REQUESTS;
        let seconds = self.retry_after.as_secs_f64().ceil().max(1.0) as u64;
        resp.headers_mut()
            .insert(http::header::RETRY_AFTER, http::HeaderValue::from(seconds));
        resp.headers_mut().insert(
            http::header::CONTENT_TYPE,
            http::HeaderValue::from_static("text/plain; charset=utf-8"),
        );
        resp
    }
}

/// The upstream error's status (502, 504, or 500 for a request that could not be made) with
/// general words as plain text ([`ClientError::client_message`](super::client::ClientError::client_message));
/// the whole error, which names the upstream, goes to the log as a warning.
#[cfg(feature = "client")]
impl IntoResponse for super::client::ClientError {
    fn into_response(self) -> Response<Body> {
        tracing::warn!(error = %self, "upstream call failed");
        let mut resp = Response::new(Body::from(format!("{}\n", self.client_message())));
        *resp.status_mut() = self.status();
        resp.headers_mut().insert(
            http::header::CONTENT_TYPE,
            http::HeaderValue::from_static("text/plain; charset=utf-8"),
        );
        resp
    }
}

/// `req` with its client's address among its extensions as axum's `ConnectInfo`.
#[cfg(feature = "axum")]
fn with_connect_info(mut req: Request<RequestBody>) -> Request<RequestBody> {
    if let Some(addr) = req.body().remote_addr() {
        req.extensions_mut()
            .insert(axum::extract::ConnectInfo(addr));
    }
    req
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

impl From<HttpServer> for Service {
    fn from(server: HttpServer) -> Self {
        let HttpServer {
            listen,
            limits: overrides,
            http,
            worker_callbacks,
            answers,
            http2,
            access_log,
            recording,
            ws_endpoints,
        } = server;
        let alpn: &[&[u8]] = if http2 {
            &[b"h2", b"http/1.1"]
        } else {
            &[b"http/1.1"]
        };
        let tls = listen.tls_config(alpn);
        let tls_handshake = listen.tls.as_ref().map(|t| t.handshake_deadline());
        Service::listening(
            listen,
            worker_callbacks,
            overrides,
            Box::new(move |worker, listener, limits| {
                let Listener::Tcp(l) = listener else {
                    unreachable!("HttpServer only takes http:// and https:// addresses")
                };
                let l = tokio::net::TcpListener::from_std(l)?;
                for named in &ws_endpoints {
                    crate::ws::named::register(&worker, named);
                }
                let access_log = match &access_log {
                    Some(log) => Some(log.open().map_err(|e| {
                        std::io::Error::new(
                            e.kind(),
                            format!("cannot open the access log {}: {e}", log.path().display()),
                        )
                    })?),
                    None => None,
                };
                let tls = tls.zip(tls_handshake);
                let answers = answers.clone();
                let logging = Logging {
                    access_log,
                    recording,
                };
                super::start::start(worker, l, limits, http, answers, tls, logging);
                Ok(())
            }),
        )
    }
}

#[cfg(test)]
mod tests {
    use futures_util::FutureExt;
    use http_body_util::BodyExt;

    use super::*;

    /// The response of `server`'s handler to a `GET /`.
    fn answer(server: &HttpServer) -> (StatusCode, Vec<u8>) {
        let handler = &server.answers.handler;
        let resp = handler(Request::new(RequestBody::empty()))
            .now_or_never()
            .expect("ready")
            .unwrap_or_else(|_| panic!("a response, not an error"));
        let status = resp.status();
        let body = resp.into_body().collect().now_or_never().unwrap();
        (status, body.unwrap().to_bytes().to_vec())
    }

    #[test]
    fn a_handler_may_fail_with_anything_that_turns_into_a_response() {
        let server = || HttpServer::new("http://127.0.0.1:1").unwrap();
        let ok =
            server().try_handler(|_| async { Ok::<_, StatusCode>(Response::new("hi".into())) });
        assert_eq!(answer(&ok), (StatusCode::OK, b"hi".to_vec()));
        let teapot =
            server().try_handler(|_| async { Err::<Response<Body>, _>(StatusCode::IM_A_TEAPOT) });
        assert_eq!(answer(&teapot), (StatusCode::IM_A_TEAPOT, vec![]));
        let missing = server().try_handler(|_| async {
            let text = std::fs::read("/definitely/not/here")?;
            Ok::<_, std::io::Error>(Response::new(Body::from(text)))
        });
        assert_eq!(answer(&missing).0, StatusCode::NOT_FOUND);
        let failed = server().try_handler(|_| async {
            Err::<Response<Body>, _>(std::io::Error::other("disk on fire"))
        });
        assert_eq!(answer(&failed).0, StatusCode::INTERNAL_SERVER_ERROR);
        // The infallible handler is unchanged.
        let plain = server().handler(|_| async { Response::new(Body::from("plain")) });
        assert_eq!(answer(&plain), (StatusCode::OK, b"plain".to_vec()));
    }
}
