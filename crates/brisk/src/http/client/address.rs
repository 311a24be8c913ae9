//! Which addresses the client may connect to: with
//! [`ClientOptions::refuse_private_addresses`](super::ClientOptions::refuse_private_addresses)
//! (or, for redirects only, `refuse_private_redirects`), none that is loopback, link-local,
//! private, shared (carrier-grade NAT), unspecified or broadcast, so that a URL someone else
//! chose cannot reach the services behind the server (server-side request forgery).
//!
//! Names are checked after they are resolved, in the resolver the connection then uses (a
//! name that resolves to a public address when checked and a private one when used cannot
//! slip through); addresses written in the URL are checked before the request.

use std::future::Future;
use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::pin::Pin;
use std::task::{Context, Poll};

use hyper_util::client::legacy::connect::dns::{GaiResolver, Name};

/// Whether `ip` is an address of this machine or of a private network.
pub(super) fn is_private(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => is_private_v4(v4),
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => is_private_v4(v4),
            None => is_private_v6(v6),
        },
    }
}

fn is_private_v4(ip: Ipv4Addr) -> bool {
    let [a, b, ..] = ip.octets();
    ip.is_loopback()
        || ip.is_private()
        || ip.is_link_local()
        || ip.is_unspecified()
        || ip.is_broadcast()
        || a == 0
        // 100.64.0.0/10, shared address space (carrier-grade NAT).
        || (a == 100 && (64..128).contains(&b))
}

fn is_private_v6(ip: Ipv6Addr) -> bool {
    let first = ip.segments()[0];
    ip.is_loopback()
        || ip.is_unspecified()
        // fc00::/7 unique local, fe80::/10 link-local, fec0::/10 site-local (deprecated).
        || (first & 0xfe00) == 0xfc00
        || (first & 0xffc0) == 0xfe80
        || (first & 0xffc0) == 0xfec0
}

/// The error a refused address gives (inside the connect error hyper reports).
#[derive(Debug)]
pub(super) struct PrivateAddress;

impl std::fmt::Display for PrivateAddress {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("it resolves only to loopback, link-local or private addresses")
    }
}

impl std::error::Error for PrivateAddress {}

/// Whether `e` (or one of its sources) is a [`PrivateAddress`] refusal.
pub(super) fn is_refusal(e: &(dyn std::error::Error + 'static)) -> bool {
    let mut source = Some(e);
    while let Some(s) = source {
        let inner = s
            .downcast_ref::<io::Error>()
            .and_then(|io| io.get_ref())
            .is_some_and(|inner| inner.is::<PrivateAddress>());
        if inner || s.is::<PrivateAddress>() {
            return true;
        }
        source = s.source();
    }
    false
}

/// `getaddrinfo` (on tokio's blocking threads), keeping only public addresses when asked.
#[derive(Clone)]
pub(super) struct Resolver {
    gai: GaiResolver,
    refuse_private: bool,
}

impl Resolver {
    pub(super) fn new(refuse_private: bool) -> Self {
        Resolver {
            gai: GaiResolver::new(),
            refuse_private,
        }
    }
}

type Resolving = Pin<Box<dyn Future<Output = io::Result<std::vec::IntoIter<SocketAddr>>> + Send>>;

impl tower_service::Service<Name> for Resolver {
    type Response = std::vec::IntoIter<SocketAddr>;
    type Error = io::Error;
    type Future = Resolving;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.gai.poll_ready(cx)
    }

    fn call(&mut self, name: Name) -> Self::Future {
        let refuse_private = self.refuse_private;
        let resolving = self.gai.call(name);
        Box::pin(async move {
            let mut addrs: Vec<SocketAddr> = resolving.await?.collect();
            if refuse_private {
                addrs.retain(|a| !is_private(a.ip()));
                if addrs.is_empty() {
                    return Err(io::Error::other(PrivateAddress));
                }
            }
            Ok(addrs.into_iter())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::is_private;

    #[test]
    fn private_and_public_addresses() {
        for private in [
            "127.0.0.1",
            "127.9.9.9",
            "10.1.2.3",
            "172.16.0.1",
            "172.31.255.255",
            "192.168.1.1",
            "169.254.169.254",
            "100.64.0.1",
            "0.0.0.0",
            "255.255.255.255",
            "::1",
            "::",
            "fd00::1",
            "fe80::1",
            "::ffff:127.0.0.1",
            "::ffff:10.0.0.1",
        ] {
            assert!(is_private(private.parse().unwrap()), "{private}");
        }
        for public in [
            "8.8.8.8",
            "172.32.0.1",
            "100.128.0.1",
            "2001:4860:4860::8888",
            "::ffff:8.8.8.8",
        ] {
            assert!(!is_private(public.parse().unwrap()), "{public}");
        }
    }
}
