//! Listener addresses written as `scheme://host:port`, the way Workerman writes them.
//!
//! The scheme names the transport and, for `text` and `frame`, the protocol:
//!
//! | scheme  | transport | protocol |
//! |---------|-----------|----------|
//! | `tcp`   | TCP       | raw bytes as they arrive |
//! | `text`  | TCP       | newline-delimited messages |
//! | `frame` | TCP       | 4-byte big-endian length (including itself) + payload |
//! | `udp`   | UDP       | one datagram per message |
//! | `unix`  | Unix stream socket at a path | raw bytes |
//! | `http`  | TCP       | HTTP/1.1 |
//! | `https` | TLS over TCP | HTTP/1.1, and HTTP/2 when enabled (ALPN) |
//! | `websocket` (or `ws`) | TCP | WebSocket (RFC 6455) |
//! | `wss`   | TLS over TCP | WebSocket |
//!
//! `https` and `wss` listeners need a certificate (`tls::TlsConfig`).
//!
//! ```
//! use brisk::{Address, Scheme};
//! let a: Address = "text://127.0.0.1:7000".parse().unwrap();
//! assert_eq!(a.scheme(), Scheme::Text);
//! assert!("text://127.0.0.1".parse::<Address>().is_err());
//! ```

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::str::FromStr;

use crate::error::Error;

/// The part before `://`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scheme {
    /// Plain TCP, messages are whatever bytes one read returned.
    Tcp,
    /// UDP datagrams.
    Udp,
    /// A Unix stream socket, raw bytes.
    Unix,
    /// TCP with the newline-delimited `protocol::Text` protocol.
    Text,
    /// TCP with the length-prefixed `protocol::Frame` protocol.
    Frame,
    /// HTTP/1.1 (`http::HttpServer`).
    Http,
    /// HTTP over TLS (`http::HttpServer` with a certificate).
    Https,
    /// WebSocket (`ws::WsServer`).
    Websocket,
    /// WebSocket over TLS (`ws::WsServer` with a certificate).
    Wss,
}

impl Scheme {
    fn from_name(name: &str) -> Option<Self> {
        Some(match name {
            "tcp" => Scheme::Tcp,
            "udp" => Scheme::Udp,
            "unix" => Scheme::Unix,
            "text" => Scheme::Text,
            "frame" => Scheme::Frame,
            "http" => Scheme::Http,
            "https" => Scheme::Https,
            "websocket" | "ws" => Scheme::Websocket,
            "wss" => Scheme::Wss,
            _ => return None,
        })
    }

    /// The scheme as written in an address.
    pub fn name(self) -> &'static str {
        match self {
            Scheme::Tcp => "tcp",
            Scheme::Udp => "udp",
            Scheme::Unix => "unix",
            Scheme::Text => "text",
            Scheme::Frame => "frame",
            Scheme::Http => "http",
            Scheme::Https => "https",
            Scheme::Websocket => "websocket",
            Scheme::Wss => "wss",
        }
    }
}

/// Where a listener lives: an IP socket address or a filesystem path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Endpoint {
    /// IPv4 or IPv6 address and port.
    Inet(SocketAddr),
    /// Path of a Unix socket.
    Unix(PathBuf),
}

/// A parsed listener address. Parse one with [`str::parse`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Address {
    scheme: Scheme,
    endpoint: Endpoint,
    text: String,
}

impl Address {
    /// The scheme (`tcp`, `text`, …).
    pub fn scheme(&self) -> Scheme {
        self.scheme
    }

    /// The socket address or path.
    pub fn endpoint(&self) -> &Endpoint {
        &self.endpoint
    }

    /// The socket address, if this is not a Unix socket.
    pub fn socket_addr(&self) -> Option<SocketAddr> {
        match &self.endpoint {
            Endpoint::Inet(a) => Some(*a),
            Endpoint::Unix(_) => None,
        }
    }
}

impl fmt::Display for Address {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

impl FromStr for Address {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self, Error> {
        let fail = |reason: &str| Error::Address {
            address: s.to_string(),
            reason: reason.to_string(),
        };
        let (name, rest) = s
            .split_once("://")
            .ok_or_else(|| fail("expected scheme://host:port"))?;
        let scheme = Scheme::from_name(&name.to_ascii_lowercase()).ok_or_else(|| {
            fail("unknown scheme; expected one of tcp, udp, unix, text, frame, http, websocket")
        })?;
        let endpoint = if scheme == Scheme::Unix {
            if rest.is_empty() {
                return Err(fail(
                    "a unix address needs a path, as in unix:///tmp/app.sock",
                ));
            }
            Endpoint::Unix(PathBuf::from(rest))
        } else {
            let (host, port) = rest.rsplit_once(':').ok_or_else(|| fail("missing :port"))?;
            if host.is_empty() {
                return Err(fail("missing host"));
            }
            let port: u16 = port
                .parse()
                .map_err(|_| fail("the port must be a number from 0 to 65535"))?;
            let host = host.trim_start_matches('[').trim_end_matches(']');
            // A listener binds an address: names are not looked up here (a blocking DNS query
            // inside `parse`), but `localhost` is the loopback address.
            let ip: IpAddr = match host {
                "localhost" => IpAddr::V4(Ipv4Addr::LOCALHOST),
                _ => host.parse().map_err(|_| {
                    fail("the host must be an IP address or localhost (names are not resolved)")
                })?,
            };
            Endpoint::Inet(SocketAddr::new(ip, port))
        };
        Ok(Address {
            scheme,
            endpoint,
            text: s.to_string(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_every_scheme() {
        for (s, scheme) in [
            ("tcp://127.0.0.1:1", Scheme::Tcp),
            ("udp://127.0.0.1:2", Scheme::Udp),
            ("text://127.0.0.1:3", Scheme::Text),
            ("frame://[::1]:4", Scheme::Frame),
            ("unix:///tmp/x.sock", Scheme::Unix),
        ] {
            let a: Address = s.parse().unwrap();
            assert_eq!(a.scheme(), scheme);
            assert_eq!(a.to_string(), s);
        }
        let a: Address = "frame://[::1]:4".parse().unwrap();
        assert_eq!(a.socket_addr().unwrap(), "[::1]:4".parse().unwrap());
        let l: Address = "http://localhost:8080".parse().unwrap();
        assert_eq!(l.socket_addr().unwrap(), "127.0.0.1:8080".parse().unwrap());
        let u: Address = "unix:///tmp/x.sock".parse().unwrap();
        assert_eq!(u.endpoint(), &Endpoint::Unix("/tmp/x.sock".into()));
    }

    #[test]
    fn rejects_bad_addresses_with_a_reason() {
        for (s, why) in [
            ("127.0.0.1:80", "expected scheme://host:port"),
            ("smtp://127.0.0.1:25", "unknown scheme"),
            ("tcp://127.0.0.1", "missing :port"),
            ("tcp://127.0.0.1:99999", "port must be a number"),
            ("tcp://:80", "missing host"),
            ("unix://", "needs a path"),
            (
                "http://example.com:80",
                "must be an IP address or localhost",
            ),
        ] {
            let err = s.parse::<Address>().unwrap_err().to_string();
            assert!(err.contains(why), "{s}: {err}");
            assert!(err.contains(s), "{s}: {err}");
        }
    }
}
