//! Target URL parsing (`http://host:port/path?query`, `ws://...`) and
//! address resolution.

use std::net::{SocketAddr, ToSocketAddrs};

use crate::error::BenchError;

/// URL schemes understood by the load generators.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scheme {
    /// Plain HTTP/1.1.
    Http,
    /// Plain WebSocket.
    Ws,
}

impl Scheme {
    fn name(self) -> &'static str {
        match self {
            Scheme::Http => "http",
            Scheme::Ws => "ws",
        }
    }
}

/// A parsed target URL.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Target {
    /// The scheme.
    pub scheme: Scheme,
    /// Host name or IP literal, without brackets.
    pub host: String,
    /// Port (explicit or the scheme default 80).
    pub port: u16,
    /// Path and query, always starting with `/`.
    pub path_and_query: String,
    /// The value for the `Host` header (`host` or `host:port`).
    pub authority: String,
}

impl Target {
    /// Parses `url`, which must use `scheme`.
    ///
    /// Errors are one plain sentence naming the problem.
    pub fn parse(url: &str, scheme: Scheme) -> Result<Target, BenchError> {
        let invalid =
            |why: &str| BenchError::InvalidUrl(format!("The URL \"{url}\" is not valid: {why}."));
        let (given_scheme, rest) = url
            .split_once("://")
            .ok_or_else(|| invalid(&format!("expected {}://host:port/path", scheme.name())))?;
        if !given_scheme.eq_ignore_ascii_case(scheme.name()) {
            return Err(BenchError::InvalidUrl(format!(
                "The URL \"{url}\" uses the scheme \"{given_scheme}\" but only {}:// is supported.",
                scheme.name()
            )));
        }
        let (authority, path) = match rest.find(['/', '?', '#']) {
            Some(i) => (&rest[..i], &rest[i..]),
            None => (rest, ""),
        };
        let path = path.split('#').next().unwrap_or("");
        if authority.is_empty() {
            return Err(invalid("the host is missing"));
        }
        if authority.contains('@') {
            return Err(invalid("user information in URLs is not supported"));
        }
        let (host, port) = if let Some(stripped) = authority.strip_prefix('[') {
            let (host, after) = stripped
                .split_once(']')
                .ok_or_else(|| invalid("the IPv6 address is missing its closing bracket"))?;
            let port = match after {
                "" => None,
                p => Some(
                    p.strip_prefix(':')
                        .ok_or_else(|| invalid("junk follows the IPv6 address"))?,
                ),
            };
            (host, port)
        } else {
            match authority.rsplit_once(':') {
                Some((h, p)) => (h, Some(p)),
                None => (authority, None),
            }
        };
        if host.is_empty() || host.chars().any(|c| c.is_whitespace() || c.is_control()) {
            return Err(invalid("the host is missing or contains spaces"));
        }
        let port = match port {
            None => 80,
            Some(p) => p.parse::<u16>().ok().filter(|p| *p != 0).ok_or_else(|| {
                invalid(&format!(
                    "the port \"{p}\" is not a number between 1 and 65535"
                ))
            })?,
        };
        let path_and_query = if path.is_empty() {
            "/".to_string()
        } else if path.starts_with('?') {
            format!("/{path}")
        } else {
            path.to_string()
        };
        if path_and_query
            .chars()
            .any(|c| c.is_whitespace() || c.is_control())
        {
            return Err(invalid("the path contains spaces or control characters"));
        }
        Ok(Target {
            scheme,
            host: host.to_string(),
            port,
            path_and_query,
            authority: authority.to_string(),
        })
    }

    /// Resolves the host to its first socket address.
    pub fn resolve(&self) -> Result<SocketAddr, BenchError> {
        let resolve_err = |source| BenchError::Resolve {
            host: self.host.clone(),
            source,
        };
        (self.host.as_str(), self.port)
            .to_socket_addrs()
            .map_err(resolve_err)?
            .next()
            .ok_or_else(|| {
                resolve_err(std::io::Error::new(
                    std::io::ErrorKind::NotFound,
                    "no address found",
                ))
            })
    }

    /// The URL rebuilt from its parts.
    pub fn url(&self) -> String {
        format!(
            "{}://{}{}",
            self.scheme.name(),
            self.authority,
            self.path_and_query
        )
    }

    /// The same target with another path (and query).
    pub fn with_path(&self, path_and_query: &str) -> Target {
        let mut t = self.clone();
        t.path_and_query = if path_and_query.starts_with('/') {
            path_and_query.to_string()
        } else {
            format!("/{path_and_query}")
        };
        t
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_full_url() {
        let t = Target::parse("http://127.0.0.1:8080/a/b?x=1", Scheme::Http).unwrap();
        assert_eq!(t.host, "127.0.0.1");
        assert_eq!(t.port, 8080);
        assert_eq!(t.path_and_query, "/a/b?x=1");
        assert_eq!(t.authority, "127.0.0.1:8080");
    }

    #[test]
    fn defaults() {
        let t = Target::parse("http://localhost", Scheme::Http).unwrap();
        assert_eq!(t.port, 80);
        assert_eq!(t.path_and_query, "/");
        let t = Target::parse("http://[::1]:9/?q", Scheme::Http).unwrap();
        assert_eq!(t.host, "::1");
        assert_eq!(t.path_and_query, "/?q");
    }

    #[test]
    fn rejects() {
        for bad in [
            "",
            "localhost:80",
            "ftp://x/",
            "http://",
            "http://h:99999/",
            "http://h:x/",
        ] {
            assert!(Target::parse(bad, Scheme::Http).is_err(), "{bad}");
        }
        assert!(Target::parse("http://h/", Scheme::Ws).is_err());
    }
}
