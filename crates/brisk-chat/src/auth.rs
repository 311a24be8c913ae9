//! Who is asking: accounts with argon2id password hashes, Brisk's signed cookie sessions, and
//! [`SignedIn`], the extractor every route behind the login takes. A request that changes
//! something must also carry the session's CSRF token in `x-csrf-token`.

use argon2::password_hash::{PasswordHash, PasswordHasher, PasswordVerifier, SaltString};
use argon2::Argon2;
use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use axum::http::Method;

use crate::routes::{ApiError, Chat};

/// The header that carries the session's CSRF token on requests that change something.
pub(crate) const CSRF_HEADER: &str = "x-csrf-token";

/// An argon2id hash, with the cost new accounts get, of a random password nobody kept: a
/// sign-in for a name without an account is checked against it, so that it takes as long as
/// one with a wrong password.
pub(crate) const UNKNOWN_ACCOUNT_HASH: &str =
    "$argon2id$v=19$m=19456,t=2,p=1$ELt/vlLnXcL/vyJBmJpgpA$TyjIl3EJnhaTQx4JgQpUJ/CkPEjw7vUGBI6Jqt/bZeA";

/// The user a request's session cookie names, still an account.
#[derive(Debug, Clone)]
pub(crate) struct SignedIn {
    pub(crate) id: i64,
    pub(crate) name: String,
}

impl FromRequestParts<Chat> for SignedIn {
    type Rejection = ApiError;

    /// 401 without a valid session (or for an account gone since); 403 when a request other
    /// than GET lacks the session's CSRF token.
    async fn from_request_parts(parts: &mut Parts, chat: &Chat) -> Result<Self, ApiError> {
        let session = chat.sessions.read(&parts.headers);
        let Some(name) = session.as_ref().and_then(|s| s.user()) else {
            return Err(ApiError::new(401, "sign in first"));
        };
        if parts.method != Method::GET && parts.method != Method::HEAD {
            let token = parts.headers.get(CSRF_HEADER).and_then(|v| v.to_str().ok());
            let valid = match (session.as_ref(), token) {
                (Some(s), Some(t)) => s.check_csrf(t),
                _ => false,
            };
            if !valid {
                return Err(ApiError::new(
                    403,
                    "missing or wrong x-csrf-token (GET /api/me gives it)",
                ));
            }
        }
        let Some(id) = chat.store.user_id(name).await? else {
            return Err(ApiError::new(401, "this account is gone; sign in again"));
        };
        Ok(SignedIn {
            id,
            name: name.to_string(),
        })
    }
}

/// Whether `name` may be an account or room name: 1 to 32 letters, digits, `-` or `_` (so a
/// name in a mention, a URL or a group key needs no escaping).
pub(crate) fn valid_name(name: &str) -> bool {
    (1..=32).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

/// Password hashes computed at once per worker: each takes ~19 MiB and a blocking thread
/// (the worker has 4, which static files share), so a flood of sign-ups or sign-ins waits
/// here and is refused with 503 rather than stall the worker's other blocking work.
const HASHING_SLOTS: usize = 2;
/// How long a sign-up or sign-in waits for a hashing slot before 503.
const HASHING_WAIT: std::time::Duration = std::time::Duration::from_secs(2);

/// A slot to hash in, or 503 with `Retry-After`.
async fn hashing_slot(
    slots: &tokio::sync::Semaphore,
) -> Result<tokio::sync::SemaphorePermit<'_>, ApiError> {
    match tokio::time::timeout(HASHING_WAIT, slots.acquire()).await {
        Ok(Ok(permit)) => Ok(permit),
        _ => Err(ApiError::busy(
            "too many sign-ins at once; try again in a moment",
        )),
    }
}

/// The slots of one worker (see [`HASHING_SLOTS`]).
pub(crate) fn hashing_slots() -> std::sync::Arc<tokio::sync::Semaphore> {
    std::sync::Arc::new(tokio::sync::Semaphore::new(HASHING_SLOTS))
}

/// The argon2id hash of `password`, computed off the event loop in one of `slots`.
pub(crate) async fn hash_password(
    slots: &tokio::sync::Semaphore,
    password: String,
) -> Result<String, ApiError> {
    let _slot = hashing_slot(slots).await?;
    let hashed = tokio::task::spawn_blocking(move || {
        let mut salt = [0u8; 16];
        getrandom::fill(&mut salt).map_err(|e| e.to_string())?;
        let salt = SaltString::encode_b64(&salt).map_err(|e| e.to_string())?;
        Argon2::default()
            .hash_password(password.as_bytes(), &salt)
            .map(|h| h.to_string())
            .map_err(|e| e.to_string())
    })
    .await;
    match hashed {
        Ok(Ok(hash)) => Ok(hash),
        Ok(Err(e)) => Err(ApiError::internal(format!("cannot hash a password: {e}"))),
        Err(e) => Err(ApiError::internal(format!("cannot hash a password: {e}"))),
    }
}

/// Whether `password` matches `hash`, checked off the event loop in one of `slots`.
pub(crate) async fn password_matches(
    slots: &tokio::sync::Semaphore,
    password: String,
    hash: String,
) -> Result<bool, ApiError> {
    let _slot = hashing_slot(slots).await?;
    let checked = tokio::task::spawn_blocking(move || {
        let parsed = PasswordHash::new(&hash).map_err(|e| e.to_string())?;
        Ok::<_, String>(
            Argon2::default()
                .verify_password(password.as_bytes(), &parsed)
                .is_ok(),
        )
    })
    .await;
    match checked {
        Ok(Ok(matches)) => Ok(matches),
        Ok(Err(e)) => Err(ApiError::internal(format!(
            "a stored hash is unreadable: {e}"
        ))),
        Err(e) => Err(ApiError::internal(format!("cannot check a password: {e}"))),
    }
}
