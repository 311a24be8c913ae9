//! Who may connect and subscribe: a connection's [`Subject`], from a JWT or the app's own
//! check, and the claims of connect and subscription tokens.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, OnceLock};
use std::time::{SystemTime, UNIX_EPOCH};

use serde::Deserialize;

use crate::jwks_url::JwksUrl;
use crate::jwt::{Jwt, JwtError};

/// Who a connection is, once `connect` succeeded.
///
/// ```
/// let alice = brisk::channels::Subject::new("alice").expires(1_900_000_000);
/// assert_eq!(alice.user, "alice");
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Subject {
    /// The user (the token's `sub`); never empty.
    pub user: String,
    /// When the credentials expire (Unix seconds): the connection closes with
    /// [`close::TOKEN_EXPIRED`](super::close::TOKEN_EXPIRED) unless a `refresh` came first.
    pub expires: Option<u64>,
    /// Channels the user may subscribe to without a subscription token (the token's
    /// `channels` claim).
    pub channels: Vec<String>,
}

impl Subject {
    /// `user`, with no expiry and no channels of its own.
    pub fn new(user: impl Into<String>) -> Self {
        Subject {
            user: user.into(),
            expires: None,
            channels: Vec::new(),
        }
    }

    /// Expires at `unix_seconds`.
    pub fn expires(mut self, unix_seconds: u64) -> Self {
        self.expires = Some(unix_seconds);
        self
    }
}

/// Why a `connect` (or the app's check) refused a client: the close code it gets and a
/// reason (cut to what a close frame holds).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    /// A close code: 4000–4999, or 1011 when the server cannot check now (see
    /// [`close`](super::close)).
    pub code: u16,
    /// Why, for the client.
    pub reason: String,
}

impl Refusal {
    /// A refusal with `code` and `reason`.
    pub fn new(code: u16, reason: impl Into<String>) -> Self {
        Refusal {
            code,
            reason: reason.into(),
        }
    }
}

impl From<JwtError> for Refusal {
    fn from(e: JwtError) -> Self {
        Refusal::new(e.close_code(), e.to_string())
    }
}

/// The app's own check of a connect token.
pub(crate) type AuthFn = Arc<
    dyn Fn(Option<String>) -> Pin<Box<dyn Future<Output = Result<Subject, Refusal>>>> + Send + Sync,
>;

/// The app's own check of a subscription: (user, channel) → allowed.
pub(crate) type CheckFn =
    Arc<dyn Fn(String, String) -> Pin<Box<dyn Future<Output = bool>>> + Send + Sync>;

/// Where token keys come from: a [`Jwt`] given, one made on first use in each process (from
/// a key file a worker creates, say; a failed load is tried again on the next use), or an
/// identity provider's JWKS URL.
#[derive(Clone)]
pub(crate) enum KeySource {
    Loaded {
        load: Arc<dyn Fn() -> Result<Jwt, JwtError> + Send + Sync>,
        loaded: Arc<OnceLock<Jwt>>,
    },
    Url(JwksUrl),
}

impl KeySource {
    pub(crate) fn ready(jwt: Jwt) -> Self {
        let loaded = OnceLock::new();
        let _ = loaded.set(jwt);
        KeySource::Loaded {
            load: Arc::new(|| Err(JwtError::Keys("loaded already".into()))),
            loaded: Arc::new(loaded),
        }
    }

    pub(crate) fn lazy(load: impl Fn() -> Result<Jwt, JwtError> + Send + Sync + 'static) -> Self {
        KeySource::Loaded {
            load: Arc::new(load),
            loaded: Arc::new(OnceLock::new()),
        }
    }

    /// The claims of `token`; [`JwtError::Keys`] (logged here) when the keys are not to be
    /// had.
    pub(crate) async fn verify<C: serde::de::DeserializeOwned>(
        &self,
        token: &str,
    ) -> Result<C, JwtError> {
        let outcome = match self {
            KeySource::Loaded { load, loaded } => match loaded.get() {
                Some(jwt) => jwt.verify(token),
                None => match load() {
                    Ok(jwt) => loaded.get_or_init(|| jwt).verify(token),
                    Err(e) => Err(e),
                },
            },
            KeySource::Url(url) => url.verify(token).await,
        };
        if let Err(JwtError::Keys(why)) = &outcome {
            tracing::error!("channels: the token keys cannot be had: {why}");
        }
        outcome
    }
}

/// What a client hears when the server's keys are not to be had (the log says why).
const NO_KEYS: &str = "the server cannot check tokens now";

/// How `connect` learns who the client is.
#[derive(Clone)]
pub(crate) enum Authenticator {
    Jwt(KeySource),
    App(AuthFn),
}

/// The claims of a connect token.
#[derive(Deserialize)]
struct ConnectClaims {
    sub: String,
    exp: Option<u64>,
    #[serde(default)]
    channels: Vec<String>,
    /// Only subscription tokens have it: one of those does not connect.
    channel: Option<serde::de::IgnoredAny>,
}

/// The claims of a subscription token.
#[derive(Deserialize)]
struct SubscriptionClaims {
    sub: String,
    channel: String,
    exp: Option<u64>,
}

impl Authenticator {
    /// The subject of a connect (or refresh) token.
    pub(crate) async fn subject(&self, token: Option<String>) -> Result<Subject, Refusal> {
        let subject = match self {
            Authenticator::Jwt(keys) => {
                let token = token.ok_or_else(|| {
                    Refusal::new(super::close::INVALID_TOKEN, "connect needs a token")
                })?;
                let claims: ConnectClaims = match keys.verify(&token).await {
                    Err(JwtError::Keys(_)) => {
                        return Err(Refusal::new(super::close::SERVER_ERROR, NO_KEYS))
                    }
                    outcome => outcome?,
                };
                if claims.channel.is_some() {
                    return Err(Refusal::new(
                        super::close::INVALID_TOKEN,
                        "a subscription token (it names a channel) does not connect",
                    ));
                }
                Subject {
                    user: claims.sub,
                    expires: claims.exp,
                    channels: claims.channels,
                }
            }
            Authenticator::App(check) => check(token).await?,
        };
        if subject.user.is_empty() {
            return Err(Refusal::new(
                super::close::INVALID_TOKEN,
                "the token names no user (an empty sub)",
            ));
        }
        // Within the JWT leeway a token past its `exp` still verifies; the connection would
        // close at once, and the client come back in a loop.
        if subject.expires.is_some_and(|at| at <= now_seconds()) {
            return Err(Refusal::new(
                super::close::TOKEN_EXPIRED,
                "the token has expired",
            ));
        }
        Ok(subject)
    }
}

/// Seconds since the Unix epoch, as token claims count time.
pub(crate) fn now_seconds() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// Whether a subscription token lets `user` subscribe to `channel`, and until when (its
/// `exp`).
pub(crate) async fn subscription_allows(
    keys: &KeySource,
    token: &str,
    user: &str,
    channel: &str,
) -> Result<Option<u64>, (super::ErrorCode, String)> {
    use super::ErrorCode;
    match keys.verify::<SubscriptionClaims>(token).await {
        // Within the JWT leeway a token past its `exp` still verifies: it would end at once.
        Ok(c) if c.exp.is_some_and(|at| at <= now_seconds()) => Err((
            ErrorCode::TokenExpired,
            "the subscription token has expired".into(),
        )),
        Ok(c) if c.sub == user && c.channel == channel => Ok(c.exp),
        Ok(_) => Err((
            ErrorCode::PermissionDenied,
            "the subscription token is for another user or channel".into(),
        )),
        Err(JwtError::Expired) => Err((
            ErrorCode::TokenExpired,
            "the subscription token has expired".into(),
        )),
        Err(JwtError::Keys(_)) => Err((ErrorCode::Unavailable, NO_KEYS.into())),
        Err(e) => Err((
            ErrorCode::PermissionDenied,
            format!("subscription token: {e}"),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::channels::ErrorCode;
    use serde_json::json;

    const SECRET: &[u8] = b"a secret of at least thirty-two bytes";

    fn signed(claims: serde_json::Value) -> String {
        crate::jwt::hs256_token(SECRET, &claims).unwrap()
    }

    #[tokio::test]
    async fn a_subscription_token_is_for_one_user_and_one_channel() {
        let keys = KeySource::ready(Jwt::hs256(SECRET).unwrap());
        let exp = 4_000_000_000u64;
        let token = signed(json!({ "sub": "alice", "channel": "team:ops", "exp": exp }));
        assert_eq!(
            subscription_allows(&keys, &token, "alice", "team:ops").await,
            Ok(Some(exp))
        );
        let code = |r: Result<Option<u64>, (ErrorCode, String)>| r.unwrap_err().0;
        assert_eq!(
            code(subscription_allows(&keys, &token, "bob", "team:ops").await),
            ErrorCode::PermissionDenied
        );
        assert_eq!(
            code(subscription_allows(&keys, &token, "alice", "team:dev").await),
            ErrorCode::PermissionDenied
        );
        let old = signed(json!({ "sub": "alice", "channel": "team:ops", "exp": 1_000 }));
        assert_eq!(
            code(subscription_allows(&keys, &old, "alice", "team:ops").await),
            ErrorCode::TokenExpired
        );
        let other = crate::jwt::hs256_token(
            b"another secret of thirty-two bytes!!",
            &json!({ "sub": "alice", "channel": "team:ops", "exp": exp }),
        )
        .unwrap();
        assert_eq!(
            code(subscription_allows(&keys, &other, "alice", "team:ops").await),
            ErrorCode::PermissionDenied
        );
    }

    #[tokio::test]
    async fn connect_tokens_name_a_user_and_keys_load_on_first_use() {
        let loads = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let counted = loads.clone();
        let auth = Authenticator::Jwt(KeySource::lazy(move || {
            // The first load fails (a key file not there yet), the next succeeds.
            if counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst) == 0 {
                return Err(JwtError::Keys("not yet".into()));
            }
            Jwt::hs256(SECRET)
        }));
        let token = signed(json!({ "sub": "alice", "exp": 4_000_000_000u64, "channels": ["a"] }));
        let refused = auth.subject(Some(token.clone())).await.unwrap_err();
        assert_eq!(refused.code, super::super::close::SERVER_ERROR);
        let s = auth.subject(Some(token.clone())).await.unwrap();
        assert_eq!(
            (s.user.as_str(), s.expires, s.channels),
            ("alice", Some(4_000_000_000), vec!["a".to_owned()])
        );
        auth.subject(Some(token)).await.unwrap();
        assert_eq!(loads.load(std::sync::atomic::Ordering::SeqCst), 2);
        let nobody = signed(json!({ "sub": "", "exp": 4_000_000_000u64 }));
        assert_eq!(auth.subject(Some(nobody)).await.unwrap_err().code, 4001);
        // A subscription token does not connect.
        let one_channel =
            signed(json!({ "sub": "alice", "channel": "a", "exp": 4_000_000_000u64 }));
        assert_eq!(
            auth.subject(Some(one_channel)).await.unwrap_err().code,
            4001
        );
        // Past `exp` but within the JWT leeway (30 s): refused as expired all the same.
        let now = super::now_seconds();
        let lapsed = signed(json!({ "sub": "alice", "exp": now - 5 }));
        assert_eq!(auth.subject(Some(lapsed)).await.unwrap_err().code, 4002);
        assert_eq!(auth.subject(None).await.unwrap_err().code, 4001);
    }
}
