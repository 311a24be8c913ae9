//! Signed cookie sessions: who is logged in, and a CSRF token for forms (feature `sessions`).
//!
//! The whole session lives in one cookie signed with HMAC-SHA256 (the `cookie` crate's signed
//! jar) under a key derived from the app's secret. Brisk keeps no session store, and that is the
//! choice made here on purpose:
//! - reading a session is a signature check in the worker, with no round trip to SQLite or
//!   Redis on each request of a page that is measured for speed (report R4's dashboard);
//! - every worker and every machine that shares the secret accepts the cookie, so nothing has to
//!   stick a client to a worker or replicate a store.
//!
//! The cost: logging out deletes the cookie in the browser, but a copy taken before cannot be
//! revoked until it expires. So the expiry is signed into the value (a client cannot stretch it
//! by keeping the cookie longer), `max_age` is short (one hour by default), and the layer renews
//! the cookie of an active user once half of it has passed. Changing the secret logs everyone
//! out. An app that must revoke single sessions at once keeps a server-side list in its
//! database and checks it after [`Sessions::read`].
//!
//! A cookie that is tampered with, signed with another key, malformed or past its expiry reads
//! as no session: the visitor is anonymous, never shown an error.
//!
//! ```
//! use brisk::http::session::Sessions;
//! use http::HeaderMap;
//!
//! let sessions = Sessions::new(b"a secret of at least thirty-two bytes!").unwrap();
//! let session = sessions.login("ada");
//! let cookie = sessions.set_cookie(&session);
//!
//! // The browser sends the cookie back:
//! let pair = cookie.to_str().unwrap().split(';').next().unwrap().to_string();
//! let mut headers = HeaderMap::new();
//! headers.insert(http::header::COOKIE, pair.parse().unwrap());
//! let back = sessions.read(&headers).unwrap();
//! assert_eq!(back.user(), Some("ada"));
//! assert!(back.check_csrf(session.csrf_token()));
//! ```

mod options;
mod require_login;
mod state;

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use cookie::{Cookie, CookieJar, Key};
use http::{header, HeaderMap, HeaderValue};

pub use options::{SameSite, SessionOptions};
pub use require_login::{login_redirect, safe_next, RequireLogin, RequireLoginService};
pub use state::Session;

/// The shortest secret [`Sessions::new`] accepts, in bytes.
pub const MIN_SECRET_LEN: usize = 32;

/// Why sessions could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum SessionError {
    /// The secret is shorter than [`MIN_SECRET_LEN`] bytes.
    #[error("the session secret is {0} bytes; it needs at least {MIN_SECRET_LEN}")]
    ShortSecret(usize),
    /// The options cannot make a valid cookie.
    #[error("bad session options: {0}")]
    BadOptions(String),
}

/// Issues and reads signed session cookies. Cheap to clone: one per app, cloned into handlers.
#[derive(Clone)]
pub struct Sessions {
    key: Arc<Key>,
    options: Arc<SessionOptions>,
}

impl std::fmt::Debug for Sessions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the key.
        f.debug_struct("Sessions")
            .field("options", &self.options)
            .finish_non_exhaustive()
    }
}

impl Sessions {
    /// Sessions signed with a key derived from `secret` (at least 32 bytes, random, the same on
    /// every worker and machine that must accept the cookies), with default options.
    pub fn new(secret: &[u8]) -> Result<Self, SessionError> {
        Self::with_options(secret, SessionOptions::default())
    }

    /// Sessions with the given cookie name, lifetime and attributes.
    pub fn with_options(secret: &[u8], options: SessionOptions) -> Result<Self, SessionError> {
        if secret.len() < MIN_SECRET_LEN {
            return Err(SessionError::ShortSecret(secret.len()));
        }
        if let Some(problem) = options.problem() {
            return Err(SessionError::BadOptions(problem));
        }
        // The cookie's name goes into the key: two session types that share a secret (an
        // admin area's cookie and a shop's) never accept each other's cookies.
        let mut material = secret.to_vec();
        material.extend_from_slice(b"\0brisk-session\0");
        material.extend_from_slice(options.cookie_name.as_bytes());
        Ok(Sessions {
            key: Arc::new(Key::derive_from(&material)),
            options: Arc::new(options),
        })
    }

    /// The options these sessions were made with.
    pub fn options(&self) -> &SessionOptions {
        &self.options
    }

    /// The session the request's cookie carries, if it is signed with this key and has not
    /// expired; `None` otherwise (no cookie, tampered, foreign key, malformed or expired).
    pub fn read(&self, headers: &HeaderMap) -> Option<Session> {
        let name = self.options.cookie_name.as_str();
        let now = unix_now();
        headers
            .get_all(header::COOKIE)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(Cookie::split_parse)
            .filter_map(Result::ok)
            .filter(|c| c.name() == name)
            .find_map(|c| {
                let mut jar = CookieJar::new();
                jar.add_original(c.into_owned());
                let verified = jar.signed(&self.key).get(name)?;
                Session::decode(verified.value()).filter(|s| s.expires() > now)
            })
    }

    /// A new anonymous session: no user, a fresh CSRF token (for a login form).
    pub fn anonymous(&self) -> Session {
        Session::new(None, self.expiry())
    }

    /// A new session for `user`, with a fresh CSRF token (a new token on each login, so a token
    /// seen before the login is worth nothing after it).
    pub fn login(&self, user: &str) -> Session {
        Session::new(Some(user.to_string()), self.expiry())
    }

    /// The same session with a new expiry, when less than half of its lifetime is left.
    pub fn renewed(&self, session: &Session) -> Option<Session> {
        let half = self.options.max_age.as_secs() / 2;
        (session.expires() <= unix_now() + half).then(|| session.with_expiry(self.expiry()))
    }

    /// The `Set-Cookie` value that stores `session` in the browser.
    pub fn set_cookie(&self, session: &Session) -> HeaderValue {
        let o = &self.options;
        let max_age = session.expires().saturating_sub(unix_now());
        let cookie = Cookie::build((o.cookie_name.clone(), session.encode()))
            .path(o.path.clone())
            .http_only(true)
            .secure(o.secure)
            .same_site(o.same_site.into())
            .max_age(cookie::time::Duration::seconds(max_age as i64));
        let mut jar = CookieJar::new();
        jar.signed_mut(&self.key).add(cookie);
        let signed = jar.delta().next().expect("the cookie just added");
        header_value(signed)
    }

    /// The `Set-Cookie` value that deletes the session cookie (logout).
    pub fn clear_cookie(&self) -> HeaderValue {
        let o = &self.options;
        let cookie = Cookie::build((o.cookie_name.clone(), ""))
            .path(o.path.clone())
            .http_only(true)
            .secure(o.secure)
            .same_site(o.same_site.into())
            .max_age(cookie::time::Duration::ZERO)
            .expires(cookie::time::OffsetDateTime::UNIX_EPOCH)
            .build();
        header_value(&cookie)
    }

    /// A tower layer that lets requests with a logged-in session through (the [`Session`] in
    /// their extensions, for axum's `Extension<Session>`) and answers the others: a browser
    /// with a 303 to `login_path?next=…`, a request that asks for JSON (and not HTML) with
    /// 401 and `{"error": "…"}`.
    pub fn require_login(&self, login_path: &str) -> RequireLogin {
        RequireLogin::new(self.clone(), login_path)
    }

    fn expiry(&self) -> u64 {
        unix_now() + self.options.max_age.as_secs()
    }
}

fn header_value(cookie: &Cookie<'_>) -> HeaderValue {
    // Name, base64 and percent-encoded value and fixed attributes: always a valid header.
    HeaderValue::try_from(cookie.to_string()).expect("a cookie is a valid header value")
}

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or(Duration::ZERO)
        .as_secs()
}

#[cfg(test)]
mod tests;
