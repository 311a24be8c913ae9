//! Which web pages may open a WebSocket connection. A browser sends the page's origin
//! (`Origin: https://chat.example.com`) with every WebSocket handshake and lets any page
//! connect to any server, cookies included: a server that knows its users by a cookie must
//! refuse other sites' pages (cross-site WebSocket hijacking). Clients that are not browsers
//! send no `Origin` and are not concerned: they are let through.

/// The pages an endpoint accepts: any (the default), or those of the listed origins and, if
/// asked, of the host the client connected to.
#[derive(Debug, Clone, Default)]
pub(crate) struct OriginPolicy {
    /// Pages of the host named by the request's `Host` are allowed.
    same_host: bool,
    /// Origins allowed besides, normalised (`https://a.example`, no default port).
    allowed: Vec<String>,
}

impl OriginPolicy {
    /// This policy, also allowing `origin`.
    pub(crate) fn allow(mut self, origin: &str) -> Self {
        self.allowed.push(normalise(origin));
        self
    }

    /// This policy, also allowing pages of the host the client connected to.
    pub(crate) fn allow_same_host(mut self) -> Self {
        self.same_host = true;
        self
    }

    /// Whether a handshake with `origin` (its `Origin` header) to `host` (its `Host` header)
    /// may open a connection.
    pub(crate) fn allows(&self, origin: Option<&str>, host: Option<&str>) -> bool {
        if !self.same_host && self.allowed.is_empty() {
            return true;
        }
        let Some(origin) = origin else {
            // Not a browser.
            return true;
        };
        let origin = normalise(origin);
        if self.allowed.contains(&origin) {
            return true;
        }
        let Some((scheme, authority)) = origin.split_once("://") else {
            // `null` (a sandboxed page, a file) and anything else that is not an origin.
            return false;
        };
        self.same_host
            && host
                .is_some_and(|h| authority == strip_default_port(scheme, &h.to_ascii_lowercase()))
    }
}

/// An origin as compared: lower case, no trailing `/`, no default port.
fn normalise(origin: &str) -> String {
    let origin = origin.trim().trim_end_matches('/').to_ascii_lowercase();
    match origin.split_once("://") {
        Some((scheme, authority)) => {
            format!("{scheme}://{}", strip_default_port(scheme, authority))
        }
        None => origin,
    }
}

fn strip_default_port<'a>(scheme: &str, authority: &'a str) -> &'a str {
    let default = match scheme {
        "https" | "wss" => ":443",
        "http" | "ws" => ":80",
        _ => return authority,
    };
    authority.strip_suffix(default).unwrap_or(authority)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn listed_and_same_host_pages_pass_other_sites_do_not() {
        let any = OriginPolicy::default();
        assert!(any.allows(Some("https://evil.example"), Some("chat.example")));
        let policy = OriginPolicy::default()
            .allow("https://app.example/")
            .allow_same_host();
        assert!(policy.allows(Some("https://APP.example:443"), Some("chat.example")));
        assert!(policy.allows(Some("http://chat.example:8080"), Some("chat.example:8080")));
        assert!(policy.allows(Some("https://chat.example"), Some("chat.example:443")));
        assert!(policy.allows(None, Some("chat.example")), "not a browser");
        assert!(!policy.allows(Some("https://evil.example"), Some("chat.example")));
        assert!(!policy.allows(Some("http://chat.example:9999"), Some("chat.example:8080")));
        assert!(!policy.allows(Some("null"), Some("chat.example")));
        let listed = OriginPolicy::default().allow("https://app.example");
        assert!(!listed.allows(Some("https://chat.example"), Some("chat.example")));
    }
}
