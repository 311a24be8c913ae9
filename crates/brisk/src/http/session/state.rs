//! One session: its user (if logged in), its CSRF token and its expiry, and how they are
//! written into the cookie's value.

use percent_encoding::{percent_decode_str, utf8_percent_encode, NON_ALPHANUMERIC};
use subtle::ConstantTimeEq;

/// The version tag that starts every value; a future layout gets a new one.
const VERSION: &str = "v1";

/// Random bytes in a CSRF token (hex-encoded, so the token is twice as long).
const CSRF_BYTES: usize = 16;

/// A visitor's session as read from, or about to be written into, its signed cookie.
///
/// Its value is `v1.<expires>.<csrf>.<user>`: the expiry in Unix seconds, the CSRF token in
/// hex and the user percent-encoded (empty for an anonymous visitor). The signature around it is
/// the `cookie` crate's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Session {
    user: Option<String>,
    csrf: String,
    expires: u64,
}

impl Session {
    pub(super) fn new(user: Option<String>, expires: u64) -> Self {
        Session {
            user,
            csrf: new_csrf_token(),
            expires,
        }
    }

    /// The logged-in user, or `None` for an anonymous session.
    pub fn user(&self) -> Option<&str> {
        self.user.as_deref()
    }

    /// The CSRF token to put in this session's forms (a hidden field).
    pub fn csrf_token(&self) -> &str {
        &self.csrf
    }

    /// Whether `token` (from a submitted form) is this session's CSRF token; compared in
    /// constant time.
    pub fn check_csrf(&self, token: &str) -> bool {
        token.len() == self.csrf.len() && bool::from(token.as_bytes().ct_eq(self.csrf.as_bytes()))
    }

    /// When the session ends, in seconds since the Unix epoch.
    pub fn expires(&self) -> u64 {
        self.expires
    }

    pub(super) fn with_expiry(&self, expires: u64) -> Self {
        Session {
            expires,
            ..self.clone()
        }
    }

    pub(super) fn encode(&self) -> String {
        let user = self.user.as_deref().unwrap_or("");
        format!(
            "{VERSION}.{}.{}.{}",
            self.expires,
            self.csrf,
            utf8_percent_encode(user, NON_ALPHANUMERIC)
        )
    }

    /// The session a verified value holds; `None` if it is not one this version wrote.
    pub(super) fn decode(value: &str) -> Option<Self> {
        let mut parts = value.splitn(4, '.');
        if parts.next()? != VERSION {
            return None;
        }
        let expires = parts.next()?.parse().ok()?;
        let csrf = parts.next()?;
        if csrf.len() != 2 * CSRF_BYTES || !csrf.bytes().all(|b| b.is_ascii_hexdigit()) {
            return None;
        }
        let user = percent_decode_str(parts.next()?).decode_utf8().ok()?;
        Some(Session {
            user: (!user.is_empty()).then(|| user.into_owned()),
            csrf: csrf.to_string(),
            expires,
        })
    }
}

/// 16 bytes from the operating system's random source, in hex.
fn new_csrf_token() -> String {
    let mut bytes = [0u8; CSRF_BYTES];
    // getrandom fails only where there is no entropy source at all; a predictable token
    // would be worse than stopping.
    getrandom::fill(&mut bytes).expect("the operating system's random source");
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
