//! [`JwksUrl`]: the token keys an identity provider publishes as a JWKS document at a URL
//! (features `jwt` and `client`), fetched on first use in each worker, refreshed in the
//! background, and fetched again at once when a token names a key the document lacks (the
//! provider rotated its keys).
//!
//! While the provider cannot be reached, or answers something that is not a usable JWKS
//! document, the keys fetched last stay in use and the failure goes to the log; before any
//! fetch has worked, [`JwksUrl::verify`] answers [`JwtError::Keys`] (HTTP 500, close code
//! 1011) saying what went wrong, and tries again at most once a second.
//!
//! ```no_run
//! use std::time::Duration;
//! use brisk::jwks_url::JwksUrl;
//!
//! # async fn f(token: &str) -> Result<(), brisk::jwt::JwtError> {
//! let keys = JwksUrl::new("https://auth.example/.well-known/jwks.json")?
//!     .refresh_every(Duration::from_secs(300))
//!     .audience("chat")
//!     .issuer("https://auth.example");
//! let claims: serde_json::Value = keys.verify(token).await?;
//! println!("{}", claims["sub"]);
//! # Ok(()) }
//! ```

use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use serde::de::DeserializeOwned;
use tokio::time::Instant;

use crate::http::client::{ClientError, ClientOptions, HttpClient};
use crate::jwt::{Jwt, JwtError};

/// Why the key set could not be had this time.
#[derive(Debug, thiserror::Error)]
#[error("JWKS {url}: {why}")]
struct Unfetched {
    url: String,
    why: Why,
}

/// What went wrong fetching the key set.
#[derive(Debug, thiserror::Error)]
enum Why {
    /// The request failed.
    #[error("{0}")]
    Request(ClientError),
    /// The answer was not a success.
    #[error("answered {0}")]
    Status(http::StatusCode),
    /// The body is not text.
    #[error("the document is not UTF-8")]
    NotUtf8,
    /// The body is not a key set Brisk takes.
    #[error("{0}")]
    Keys(JwtError),
}

/// How long a fetch may take before it counts as failed.
const FETCH_TIMEOUT: Duration = Duration::from_secs(5);

/// The longest JWKS document taken (providers publish a few keys, a few KiB).
const MAX_DOCUMENT: usize = 1 << 20;

/// While no keys were ever fetched, the least time between two tries.
const RETRY_WITHOUT_KEYS: Duration = Duration::from_secs(1);

/// The least time between two fetches caused by tokens naming unknown keys, at most.
const UNKNOWN_KEY_REFETCH: Duration = Duration::from_secs(10);

/// A JWKS document at a URL, with the claims tokens must carry (see the module docs). Cheap
/// to clone (clones share the keys), `Send + Sync`. Make it where it is used, in the
/// worker: its HTTP connection and its refresh task belong to the worker that fetches.
#[derive(Clone)]
pub struct JwksUrl {
    inner: Arc<Inner>,
}

struct Inner {
    url: String,
    refresh: Duration,
    audience: Option<String>,
    issuer: Option<String>,
    leeway: Option<u64>,
    client: HttpClient,
    state: Mutex<State>,
    /// One fetch at a time; others wait for it and take its result.
    fetching: tokio::sync::Mutex<()>,
}

#[derive(Default)]
struct State {
    keys: Option<Arc<Jwt>>,
    /// When the last fetch ended, worked or not, and why it did not.
    last_try: Option<Instant>,
    last_error: Option<String>,
    /// Fetches that ended, to know whether one ended while waiting for the lock.
    generation: u64,
    refresher: bool,
}

impl std::fmt::Debug for JwksUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JwksUrl")
            .field("url", &self.inner.url)
            .field("refresh", &self.inner.refresh)
            .finish()
    }
}

impl JwksUrl {
    /// The document at `url`, refreshed every 5 minutes: `https://`, or `http://` to a
    /// loopback address only (anyone on the path of a plain-text fetch could hand the app
    /// keys of their own, and so sign any token).
    pub fn new(url: &str) -> Result<Self, JwtError> {
        let uri: http::Uri = url
            .parse()
            .map_err(|e| JwtError::Keys(format!("JWKS URL {url:?}: {e}")))?;
        let Some(host) = uri.host() else {
            return Err(JwtError::Keys(format!(
                "JWKS URL {url:?}: needs https:// and a host"
            )));
        };
        let loopback = host == "localhost"
            || (host.trim_start_matches('[').trim_end_matches(']'))
                .parse::<std::net::IpAddr>()
                .is_ok_and(|ip| ip.is_loopback());
        match uri.scheme_str() {
            Some("https") => {}
            Some("http") if loopback => {}
            Some("http") => {
                return Err(JwtError::Keys(format!(
                    "JWKS URL {url:?}: plain http:// is taken for a loopback address only; \
                     use https://"
                )))
            }
            _ => {
                return Err(JwtError::Keys(format!(
                    "JWKS URL {url:?}: needs https:// and a host"
                )))
            }
        }
        let options = ClientOptions {
            timeout: FETCH_TIMEOUT,
            connect_timeout: FETCH_TIMEOUT,
            max_body_size: MAX_DOCUMENT,
            ..ClientOptions::default()
        };
        Ok(JwksUrl {
            inner: Arc::new(Inner {
                url: url.to_string(),
                refresh: Duration::from_secs(300),
                audience: None,
                issuer: None,
                leeway: None,
                client: HttpClient::new(options),
                state: Mutex::new(State::default()),
                fetching: tokio::sync::Mutex::new(()),
            }),
        })
    }

    fn edit(mut self, f: impl FnOnce(&mut Inner)) -> Self {
        let inner = Arc::get_mut(&mut self.inner)
            .expect("JwksUrl is configured before it is cloned or used");
        f(inner);
        self
    }

    /// How often the document is fetched again in the background (default 5 minutes, at
    /// least a second). A token naming a key the document lacks fetches it sooner, at most
    /// once per `every` or 10 seconds, whichever is shorter.
    pub fn refresh_every(self, every: Duration) -> Self {
        self.edit(|i| i.refresh = every.max(Duration::from_secs(1)))
    }

    /// Tokens must carry `audience` in their `aud` ([`Jwt::audience`]).
    pub fn audience(self, audience: &str) -> Self {
        self.edit(|i| i.audience = Some(audience.to_string()))
    }

    /// Tokens must carry `issuer` as their `iss` ([`Jwt::issuer`]).
    pub fn issuer(self, issuer: &str) -> Self {
        self.edit(|i| i.issuer = Some(issuer.to_string()))
    }

    /// Seconds of clock difference `exp` and `nbf` allow ([`Jwt::leeway`], default 30).
    pub fn leeway(self, seconds: u64) -> Self {
        self.edit(|i| i.leeway = Some(seconds))
    }

    /// The URL the keys come from.
    pub fn url(&self) -> &str {
        &self.inner.url
    }

    /// The claims of `token` if it passes every check against the provider's current keys.
    /// A token naming a key the keys lack makes one early fetch (rate-limited) before it is
    /// refused.
    pub async fn verify<C: DeserializeOwned>(&self, token: &str) -> Result<C, JwtError> {
        let keys = self.keys().await?;
        match keys.verify(token) {
            Err(JwtError::UnknownKey(why)) => {
                if !self.inner.may_refetch() {
                    return Err(JwtError::UnknownKey(why));
                }
                let seen = self.inner.generation();
                self.inner.fetch(seen).await;
                let keys = self.keys().await?;
                keys.verify(token)
            }
            outcome => outcome,
        }
    }

    /// The keys now in use, fetched first if there are none yet (and the background refresh
    /// started in this process).
    pub async fn keys(&self) -> Result<Arc<Jwt>, JwtError> {
        self.start_refresher();
        let seen = {
            let state = self.inner.state.lock().unwrap_or_else(|e| e.into_inner());
            if let Some(keys) = &state.keys {
                return Ok(keys.clone());
            }
            if let (Some(at), Some(error)) = (state.last_try, &state.last_error) {
                if at.elapsed() < RETRY_WITHOUT_KEYS {
                    return Err(JwtError::Keys(error.clone()));
                }
            }
            state.generation
        };
        self.inner.fetch(seen).await;
        let state = self.inner.state.lock().unwrap_or_else(|e| e.into_inner());
        match (&state.keys, &state.last_error) {
            (Some(keys), _) => Ok(keys.clone()),
            (None, Some(error)) => Err(JwtError::Keys(error.clone())),
            (None, None) => Err(JwtError::Keys(format!(
                "no keys fetched from {} yet",
                self.inner.url
            ))),
        }
    }

    /// Starts this process's background refresh, once; it ends when the last clone is
    /// dropped.
    fn start_refresher(&self) {
        {
            let mut state = self.inner.state.lock().unwrap_or_else(|e| e.into_inner());
            if state.refresher {
                return;
            }
            state.refresher = true;
        }
        let weak: Weak<Inner> = Arc::downgrade(&self.inner);
        let refresh = self.inner.refresh;
        tokio::spawn(async move {
            // Should the task end without the keys being dropped (its runtime shut down), the
            // next use starts another.
            let _restart = RestartOnDrop(weak.clone());
            let mut wait = refresh;
            loop {
                tokio::time::sleep(wait).await;
                let Some(inner) = weak.upgrade() else { return };
                let seen = inner.generation();
                inner.fetch(seen).await;
                let failed = inner
                    .state
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .last_error
                    .is_some();
                // After a failure, try again sooner than the refresh period.
                wait = if failed {
                    refresh.min(Duration::from_secs(15))
                } else {
                    refresh
                };
            }
        });
    }
}

/// Marks the refresh task gone when it ends, so that the next use starts one.
struct RestartOnDrop(Weak<Inner>);

impl Drop for RestartOnDrop {
    fn drop(&mut self) {
        if let Some(inner) = self.0.upgrade() {
            inner
                .state
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .refresher = false;
        }
    }
}

impl Inner {
    fn generation(&self) -> u64 {
        self.state
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .generation
    }

    /// Whether a token with an unknown key may cause a fetch now.
    fn may_refetch(&self) -> bool {
        let state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let least = self.refresh.min(UNKNOWN_KEY_REFETCH);
        state.last_try.is_none_or(|at| at.elapsed() >= least)
    }

    /// Fetches the document unless a fetch ended since generation `seen` (a caller that
    /// waited for another's fetch takes its result).
    async fn fetch(&self, seen: u64) {
        let _one = self.fetching.lock().await;
        if self.generation() != seen {
            return;
        }
        let outcome = self.download().await;
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        state.last_try = Some(Instant::now());
        state.generation += 1;
        match outcome {
            Ok(jwt) => {
                state.keys = Some(Arc::new(jwt));
                state.last_error = None;
            }
            Err(error) => {
                if state.keys.is_some() {
                    tracing::warn!("{error}; the keys fetched before stay in use");
                } else {
                    tracing::error!("{error}");
                }
                state.last_error = Some(error.to_string());
            }
        }
    }

    /// The document, read into keys with the claims asked for.
    async fn download(&self) -> Result<Jwt, Unfetched> {
        let url = &self.url;
        let failed = |why| Unfetched {
            url: url.clone(),
            why,
        };
        let response = self
            .client
            .get(url)
            .header("accept", "application/json")
            .send()
            .await
            .map_err(|e| failed(Why::Request(e)))?;
        if !response.status().is_success() {
            return Err(failed(Why::Status(response.status())));
        }
        let text = std::str::from_utf8(response.body()).map_err(|_| failed(Why::NotUtf8))?;
        let mut jwt = Jwt::jwks(text).map_err(|e| failed(Why::Keys(e)))?;
        if let Some(audience) = &self.audience {
            jwt = jwt.audience(audience);
        }
        if let Some(issuer) = &self.issuer {
            jwt = jwt.issuer(issuer);
        }
        if let Some(leeway) = self.leeway {
            jwt = jwt.leeway(leeway);
        }
        Ok(jwt)
    }
}
