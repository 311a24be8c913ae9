//! [`HttpClient`]: calls to other HTTP services from a handler, on hyper-util's pooled client
//! with rustls for HTTPS.
//!
//! One client per worker: the handle is cheap to clone and `Send + Sync`, and its connection
//! pool is made on first use, inside the worker that uses it (never in the master). Idle
//! connections are kept per host and reused ([`ClientOptions::max_idle_per_host`]; `0` opens
//! one per request). Every call has a connect timeout and a total timeout, a response body
//! limit, and follows redirects only when told to. [`HttpClient::multi`] sends several
//! requests at once and returns each result in order.
//!
//! A failed call is a [`ClientError`] that says which upstream and what went wrong (URLs
//! without their passwords and queries, header values never); its
//! [`status`](ClientError::status) is 502 (refused, broken, too large) or 504 (too slow), and
//! it is a [`brisk::http::IntoResponse`](crate::http::IntoResponse), so `?` in a
//! `try_handler` answers with it: the status and general words
//! ([`ClientError::client_message`]), the details going to the log.
//!
//! A redirect that changes scheme, host or port drops `Authorization`, `Proxy-Authorization`
//! and `Cookie`. [`ClientOptions::refuse_private_addresses`] and
//! [`ClientOptions::refuse_private_redirects`] keep URLs that others chose away from loopback,
//! link-local and private addresses.
//!
//! ```no_run
//! use brisk::http::client::{ClientError, ClientOptions, HttpClient};
//! use brisk::http::{Body, HttpServer};
//!
//! let client = HttpClient::new(ClientOptions::default());
//! let server = HttpServer::new("http://127.0.0.1:8080").unwrap().try_handler(move |_req| {
//!     let client = client.clone();
//!     async move {
//!         let price = client.get("http://127.0.0.1:9000/price").send().await?;
//!         Ok::<_, ClientError>(http::Response::new(Body::from(price.into_body())))
//!     }
//! });
//! ```

mod address;
mod error;
mod options;
mod redirect;
mod request;
mod response;

use std::sync::{Arc, OnceLock};

use bytes::Bytes;
use http::{header, HeaderValue, Method, Request, Uri};
use http_body_util::{BodyExt, Full, LengthLimitError, Limited};
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use tokio::time::Instant;

pub use error::ClientError;
pub use options::ClientOptions;
pub use request::ClientRequest;
pub use response::ClientResponse;

use crate::error::chain;
use address::Resolver;
use error::has_io_kind;
use request::Parts;

/// hyper-util's pooled client over TCP or rustls.
type Pool = Client<HttpsConnector<HttpConnector<Resolver>>, Full<Bytes>>;

/// An HTTP client; see the [module docs](self).
#[derive(Clone)]
pub struct HttpClient {
    inner: Arc<Inner>,
}

struct Inner {
    options: ClientOptions,
    pool: OnceLock<Result<Pool, ClientError>>,
    /// For redirects' targets when only those must be public addresses.
    public_pool: OnceLock<Result<Pool, ClientError>>,
}

impl std::fmt::Debug for HttpClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HttpClient")
            .field("options", &self.inner.options)
            .finish_non_exhaustive()
    }
}

impl Default for HttpClient {
    fn default() -> Self {
        HttpClient::new(ClientOptions::default())
    }
}

impl HttpClient {
    /// A client with these options. Opens nothing until the first request.
    pub fn new(options: ClientOptions) -> Self {
        HttpClient {
            inner: Arc::new(Inner {
                options,
                pool: OnceLock::new(),
                public_pool: OnceLock::new(),
            }),
        }
    }

    /// The client's options.
    pub fn options(&self) -> &ClientOptions {
        &self.inner.options
    }

    /// A request with `method` to `url` (`http://…` or `https://…`).
    pub fn request(&self, method: Method, url: &str) -> ClientRequest {
        ClientRequest::new(self.clone(), method, url)
    }

    /// A GET request.
    pub fn get(&self, url: &str) -> ClientRequest {
        self.request(Method::GET, url)
    }

    /// A POST request.
    pub fn post(&self, url: &str) -> ClientRequest {
        self.request(Method::POST, url)
    }

    /// A PUT request.
    pub fn put(&self, url: &str) -> ClientRequest {
        self.request(Method::PUT, url)
    }

    /// A DELETE request.
    pub fn delete(&self, url: &str) -> ClientRequest {
        self.request(Method::DELETE, url)
    }

    /// Sends all `requests` at once and returns their results in the same order, each with
    /// its own error: one slow or failed upstream does not spoil the others.
    ///
    /// ```no_run
    /// # async fn f(client: brisk::http::client::HttpClient) {
    /// let [user, orders] = <[_; 2]>::try_from(
    ///     client
    ///         .multi([client.get("http://users/1"), client.get("http://orders/?user=1")])
    ///         .await,
    /// )
    /// .unwrap();
    /// # }
    /// ```
    pub async fn multi(
        &self,
        requests: impl IntoIterator<Item = ClientRequest>,
    ) -> Vec<Result<ClientResponse, ClientError>> {
        futures_util::future::join_all(requests.into_iter().map(ClientRequest::send)).await
    }

    /// Sends `parts`, following redirects if the options say so, within the timeout.
    async fn execute(&self, mut parts: Parts) -> Result<ClientResponse, ClientError> {
        let options = &self.inner.options;
        let after = parts.timeout.unwrap_or(options.timeout);
        let deadline = Instant::now() + after;
        let mut redirects = 0;
        loop {
            let authority = authority_of(&parts.uri);
            let public_only = options.refuse_private_addresses
                || (redirects > 0 && options.refuse_private_redirects);
            let literal = parts.uri.host().and_then(|h| {
                h.trim_start_matches('[')
                    .trim_end_matches(']')
                    .parse::<std::net::IpAddr>()
                    .ok()
            });
            let refused = || ClientError::RefusedAddress {
                authority: authority.clone(),
                redirect: redirects > 0,
            };
            if public_only && literal.is_some_and(address::is_private) {
                return Err(refused());
            }
            let exchange = self.exchange(&parts, public_only);
            let resp = match tokio::time::timeout_at(deadline, exchange).await {
                Ok(Err(ClientError::RefusedAddress { .. })) => return Err(refused()),
                Ok(resp) => resp?,
                Err(_) => return Err(ClientError::Timeout { authority, after }),
            };
            if options.max_redirects == 0 || !redirect::is_redirect(resp.status) {
                return Ok(resp);
            }
            let Some(next) = (resp.headers.get(header::LOCATION))
                .and_then(|location| redirect::resolve(&parts.uri, location))
            else {
                return Ok(resp);
            };
            if redirects == options.max_redirects {
                return Err(ClientError::TooManyRedirects {
                    authority,
                    limit: options.max_redirects,
                });
            }
            redirects += 1;
            let method = redirect::next_method(resp.status, &parts.method);
            if method != parts.method {
                parts.body = Bytes::new();
                parts.headers.remove(header::CONTENT_TYPE);
            }
            if !redirect::same_origin(&next, &parts.uri) {
                parts.headers.remove(header::AUTHORIZATION);
                parts.headers.remove(header::PROXY_AUTHORIZATION);
                parts.headers.remove(header::COOKIE);
            }
            parts.method = method;
            parts.uri = next;
        }
    }

    /// One request and its whole response; `public_only`: through the pool whose resolver
    /// refuses private addresses.
    async fn exchange(
        &self,
        parts: &Parts,
        public_only: bool,
    ) -> Result<ClientResponse, ClientError> {
        let options = &self.inner.options;
        let authority = authority_of(&parts.uri);
        let mut req = Request::new(Full::new(parts.body.clone()));
        *req.method_mut() = parts.method.clone();
        *req.uri_mut() = parts.uri.clone();
        *req.headers_mut() = parts.headers.clone();
        if let Some(agent) = &options.user_agent {
            if let Ok(agent) = HeaderValue::try_from(agent.as_str()) {
                req.headers_mut().entry(header::USER_AGENT).or_insert(agent);
            }
        }
        let pool = match public_only && !options.refuse_private_addresses {
            true => self.public_pool()?,
            false => self.pool()?,
        };
        let resp = pool.request(req).await.map_err(|e| {
            let reason = std::error::Error::source(&e).map_or_else(|| e.to_string(), chain);
            if address::is_refusal(&e) {
                // `execute` says whether it was a redirect's target.
                ClientError::RefusedAddress {
                    authority: authority.clone(),
                    redirect: false,
                }
            } else if !e.is_connect() {
                ClientError::Upstream {
                    authority: authority.clone(),
                    reason,
                }
            } else if has_io_kind(&e, std::io::ErrorKind::TimedOut) {
                ClientError::ConnectTimeout {
                    authority: authority.clone(),
                    after: options.connect_timeout,
                }
            } else {
                ClientError::Connect {
                    authority: authority.clone(),
                    reason,
                }
            }
        })?;
        let (head, body) = resp.into_parts();
        let too_large = || ClientError::BodyTooLarge {
            authority: authority.clone(),
            limit: options.max_body_size,
        };
        let declared = (head.headers.get(header::CONTENT_LENGTH))
            .and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
        if declared.is_some_and(|n| n > options.max_body_size as u64) {
            return Err(too_large());
        }
        let body = match Limited::new(body, options.max_body_size).collect().await {
            Ok(body) => body.to_bytes(),
            Err(e) if e.is::<LengthLimitError>() => return Err(too_large()),
            Err(e) => {
                return Err(ClientError::Upstream {
                    authority: authority.clone(),
                    reason: chain(&*e),
                })
            }
        };
        Ok(ClientResponse {
            status: head.status,
            headers: head.headers,
            body,
            uri: parts.uri.clone(),
        })
    }

    /// The worker's connection pool, made on first use.
    fn pool(&self) -> Result<&Pool, ClientError> {
        let options = &self.inner.options;
        let pool =
            (self.inner.pool).get_or_init(|| make_pool(options, options.refuse_private_addresses));
        pool.as_ref().map_err(Clone::clone)
    }

    /// The pool for redirects' targets that must be public addresses, made on first use.
    fn public_pool(&self) -> Result<&Pool, ClientError> {
        let pool = (self.inner.public_pool).get_or_init(|| make_pool(&self.inner.options, true));
        pool.as_ref().map_err(Clone::clone)
    }
}

/// A pooled client with these options; `public_only`: its resolver keeps only public
/// addresses.
fn make_pool(options: &ClientOptions, public_only: bool) -> Result<Pool, ClientError> {
    let mut roots = rustls::RootCertStore::empty();
    roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
    for cert in &options.extra_roots {
        roots
            .add(cert.clone())
            .map_err(|e| ClientError::InvalidRequest(format!("extra root certificate: {e}")))?;
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let tls = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| ClientError::InvalidRequest(format!("TLS set-up: {e}")))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    let mut tcp = HttpConnector::new_with_resolver(Resolver::new(public_only));
    tcp.enforce_http(false);
    tcp.set_nodelay(true);
    tcp.set_connect_timeout(Some(options.connect_timeout));
    let connector = hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(tls)
        .https_or_http()
        .enable_http1()
        .wrap_connector(tcp);
    Ok(Client::builder(TokioExecutor::new())
        .pool_timer(TokioTimer::new())
        .pool_idle_timeout(options.idle_timeout)
        .pool_max_idle_per_host(options.max_idle_per_host)
        .build(connector))
}

/// `host:port` of `uri`, for error messages.
fn authority_of(uri: &Uri) -> String {
    let host = uri.host().unwrap_or("?");
    let port = uri
        .port_u16()
        .unwrap_or(if uri.scheme_str() == Some("https") {
            443
        } else {
            80
        });
    format!("{host}:{port}")
}
