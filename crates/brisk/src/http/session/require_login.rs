//! The gate in front of pages that need a login: a tower layer for axum routers, and
//! [`login_redirect`] for hand-written routing.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use http::{header, HeaderValue, Request, Response, StatusCode, Uri};
use percent_encoding::{utf8_percent_encode, NON_ALPHANUMERIC};
use tower_layer::Layer;
use tower_service::Service;

use super::Sessions;

/// The 303 that sends an anonymous visitor of `uri` to `login_path?next=<uri>`, so the login
/// can bring them back. The body is empty; `Cache-Control: no-store` keeps it out of caches.
///
/// ```
/// use brisk::http::session::login_redirect;
///
/// let r = login_redirect::<String>("/admin", &"/admin/dashboard?tab=2".parse().unwrap());
/// assert_eq!(r.status(), 303);
/// assert_eq!(r.headers()["location"], "/admin?next=%2Fadmin%2Fdashboard%3Ftab%3D2");
/// ```
pub fn login_redirect<B: Default>(login_path: &str, uri: &Uri) -> Response<B> {
    redirect(&login_location(login_path, uri))
}

fn login_location(login_path: &str, uri: &Uri) -> String {
    let back = uri.path_and_query().map_or("/", |pq| pq.as_str());
    format!(
        "{login_path}?next={}",
        utf8_percent_encode(back, NON_ALPHANUMERIC)
    )
}

/// `next` if it is a path on this site, else `fallback`: a login page that redirects to
/// whatever `next` says would send users to any site an attacker links (an open redirect).
///
/// ```
/// use brisk::http::session::safe_next;
///
/// assert_eq!(safe_next(Some("/admin/dashboard"), "/"), "/admin/dashboard");
/// assert_eq!(safe_next(Some("//evil.example/"), "/"), "/");
/// assert_eq!(safe_next(Some("https://evil.example/"), "/"), "/");
/// assert_eq!(safe_next(None, "/"), "/");
/// ```
pub fn safe_next<'a>(next: Option<&'a str>, fallback: &'a str) -> &'a str {
    match next {
        Some(n)
            if n.starts_with('/')
                && !n.starts_with("//")
                && !n.starts_with("/\\")
                && n.bytes().all(|b| b.is_ascii_graphic()) =>
        {
            n
        }
        _ => fallback,
    }
}

fn redirect<B: Default>(location: &str) -> Response<B> {
    let mut r = Response::new(B::default());
    *r.status_mut() = StatusCode::SEE_OTHER;
    // Percent-encoded above, or the app's own login path.
    if let Ok(v) = HeaderValue::try_from(location) {
        r.headers_mut().insert(header::LOCATION, v);
    }
    r.headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    r
}

/// A tower layer: requests with a logged-in session go on with the [`Session`](super::Session)
/// in their extensions; the others get a 303 to the login page, or, when they ask for JSON
/// and not for HTML (`Accept: application/json`: an API client, a page's `fetch`), 401 with
/// `{"error": "login required"}`, which a script can act on where a redirect to an HTML page
/// would only confuse it. The session cookie is renewed on the way out once half of its
/// lifetime has passed.
///
/// ```no_run
/// use axum::{routing::get, Extension, Router};
/// use brisk::http::session::{Session, Sessions};
///
/// let sessions = Sessions::new(&[7u8; 32]).unwrap();
/// let admin: Router = Router::new()
///     .route("/admin/dashboard", get(|Extension(s): Extension<Session>| async move {
///         format!("hello {}", s.user().unwrap_or_default())
///     }))
///     .layer(sessions.require_login("/login"));
/// ```
#[derive(Clone, Debug)]
pub struct RequireLogin {
    sessions: Sessions,
    login_path: Arc<str>,
}

impl RequireLogin {
    /// Requires a login, sending anonymous visitors to `login_path`.
    pub fn new(sessions: Sessions, login_path: &str) -> Self {
        RequireLogin {
            sessions,
            login_path: login_path.into(),
        }
    }
}

impl<S> Layer<S> for RequireLogin {
    type Service = RequireLoginService<S>;

    fn layer(&self, inner: S) -> Self::Service {
        RequireLoginService {
            inner,
            gate: self.clone(),
        }
    }
}

/// The service [`RequireLogin`] wraps around an inner one.
#[derive(Clone, Debug)]
pub struct RequireLoginService<S> {
    inner: S,
    gate: RequireLogin,
}

impl<S, B, R> Service<Request<B>> for RequireLoginService<S>
where
    S: Service<Request<B>, Response = Response<R>> + Clone,
    R: Default + From<&'static str>,
{
    type Response = Response<R>;
    type Error = S::Error;
    type Future = RequireLoginFuture<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut req: Request<B>) -> Self::Future {
        let sessions = &self.gate.sessions;
        match sessions.read(req.headers()).filter(|s| s.user().is_some()) {
            Some(session) => {
                let renew = sessions.renewed(&session).map(|s| sessions.set_cookie(&s));
                req.extensions_mut().insert(session);
                // The clone that was made ready is the one to call (tower's rule).
                let clone = self.inner.clone();
                let mut inner = std::mem::replace(&mut self.inner, clone);
                RequireLoginFuture::Inner {
                    future: Box::pin(inner.call(req)),
                    renew,
                }
            }
            None if wants_json(req.headers()) => RequireLoginFuture::Unauthorized,
            None => {
                RequireLoginFuture::Redirect(Some(login_location(&self.gate.login_path, req.uri())))
            }
        }
    }
}

/// The response future of [`RequireLoginService`].
pub enum RequireLoginFuture<F> {
    /// A logged-in request: the inner service's answer, plus a renewed cookie if one is due.
    Inner {
        /// The inner service's future (boxed, so this future is `Unpin`).
        future: Pin<Box<F>>,
        /// A `Set-Cookie` renewing the session.
        renew: Option<HeaderValue>,
    },
    /// An anonymous request: a redirect to this location.
    Redirect(Option<String>),
    /// An anonymous request that asked for JSON: 401.
    Unauthorized,
}

/// Whether a request asks for JSON and not for HTML.
fn wants_json(headers: &http::HeaderMap) -> bool {
    let accept = headers
        .get_all(header::ACCEPT)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .collect::<Vec<_>>()
        .join(",")
        .to_ascii_lowercase();
    accept.contains("application/json") && !accept.contains("text/html")
}

/// 401 with a JSON body a script can show.
fn unauthorized<B: Default + From<&'static str>>() -> Response<B> {
    let mut r = Response::new(B::from(r#"{"error":"login required"}"#));
    *r.status_mut() = StatusCode::UNAUTHORIZED;
    let headers = r.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    headers.insert(
        header::WWW_AUTHENTICATE,
        HeaderValue::from_static("Cookie realm=\"login\""),
    );
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    r
}

impl<F, R, E> Future for RequireLoginFuture<F>
where
    F: Future<Output = Result<Response<R>, E>>,
    R: Default + From<&'static str>,
{
    type Output = Result<Response<R>, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.get_mut() {
            RequireLoginFuture::Inner { future, renew } => {
                let mut response = std::task::ready!(future.as_mut().poll(cx))?;
                if let Some(cookie) = renew.take() {
                    // A handler that set the session cookie itself (a logout, a new login)
                    // has the last word: a renewal after it would undo it.
                    let name = cookie
                        .as_bytes()
                        .split(|&b| b == b'=')
                        .next()
                        .unwrap_or(b"");
                    let set_by_handler = response
                        .headers()
                        .get_all(header::SET_COOKIE)
                        .iter()
                        .any(|v| v.as_bytes().split(|&b| b == b'=').next() == Some(name));
                    if !set_by_handler {
                        response.headers_mut().append(header::SET_COOKIE, cookie);
                    }
                }
                Poll::Ready(Ok(response))
            }
            RequireLoginFuture::Redirect(location) => {
                let location = location.take().expect("polled after completion");
                Poll::Ready(Ok(redirect(&location)))
            }
            RequireLoginFuture::Unauthorized => Poll::Ready(Ok(unauthorized())),
        }
    }
}
