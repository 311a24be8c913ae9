//! The session cookie's name, lifetime and attributes.

use std::time::Duration;

/// The session cookie's `SameSite` attribute.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SameSite {
    /// Sent on same-site requests and top-level navigations (the default: links into the site
    /// keep the login, cross-site form posts do not carry it).
    Lax,
    /// Sent on same-site requests only.
    Strict,
    /// Sent everywhere, cross-site requests included; refused without `secure` (browsers
    /// drop such a cookie).
    None,
}

impl From<SameSite> for cookie::SameSite {
    fn from(s: SameSite) -> Self {
        match s {
            SameSite::Lax => cookie::SameSite::Lax,
            SameSite::Strict => cookie::SameSite::Strict,
            SameSite::None => cookie::SameSite::None,
        }
    }
}

/// How session cookies are named and scoped, and how long they last.
///
/// ```
/// use std::time::Duration;
/// use brisk::http::session::SessionOptions;
///
/// let options = SessionOptions {
///     max_age: Duration::from_secs(15 * 60),
///     ..SessionOptions::default()
/// };
/// assert_eq!(options.cookie_name, "brisk_session");
/// assert!(options.secure, "HTTPS only unless told otherwise");
/// ```
#[derive(Debug, Clone)]
pub struct SessionOptions {
    /// The cookie's name (default `brisk_session`); letters, digits, `-` and `_`.
    pub cookie_name: String,
    /// How long a session lasts from its login or last renewal (default one hour). Signed into
    /// the cookie's value, so a client cannot extend it.
    pub max_age: Duration,
    /// Send the cookie over HTTPS only (default true). Browsers accept such a cookie from
    /// `http://localhost` and `http://127.0.0.1` too; turn it off only for a site served over
    /// plain HTTP elsewhere, which should not carry logins.
    pub secure: bool,
    /// The cookie's `SameSite` attribute (default `Lax`).
    pub same_site: SameSite,
    /// The cookie's `Path` (default `/`).
    pub path: String,
}

impl Default for SessionOptions {
    fn default() -> Self {
        SessionOptions {
            cookie_name: "brisk_session".into(),
            max_age: Duration::from_secs(3600),
            secure: true,
            same_site: SameSite::Lax,
            path: "/".into(),
        }
    }
}

impl SessionOptions {
    /// What is wrong with these options, if anything.
    pub(super) fn problem(&self) -> Option<String> {
        let name_ok = !self.cookie_name.is_empty()
            && self
                .cookie_name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
        if !name_ok {
            return Some(format!(
                "cookie name {:?}: use letters, digits, '-' and '_'",
                self.cookie_name
            ));
        }
        let path_ok = self.path.starts_with('/')
            && self
                .path
                .bytes()
                .all(|b| b.is_ascii_graphic() && b != b';' && b != b',');
        if !path_ok {
            return Some(format!(
                "cookie path {:?}: an absolute path without ';', ',' or spaces",
                self.path
            ));
        }
        if self.max_age.as_secs() == 0 {
            return Some("max_age: at least one second".into());
        }
        if self.same_site == SameSite::None && !self.secure {
            return Some(
                "SameSite=None without secure: browsers drop such a cookie (and it would be sent \
                 to every site's requests over plain HTTP)"
                    .into(),
            );
        }
        None
    }
}
