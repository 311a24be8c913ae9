//! Client socket set-up for WebSocket connections: parsing `--source-ips`
//! and opening a TCP connection bound to one of them.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};

use tokio::net::{TcpSocket, TcpStream};

use crate::error::BenchError;

/// Most addresses a `--source-ips` list may expand to.
const MAX_SOURCES: u32 = 65_536;

/// Parses `127.0.0.1,127.0.0.2` or `127.0.0.1-127.0.0.8` (items of both
/// forms may be mixed, separated by commas).
pub fn parse_source_ips(text: &str) -> Result<Vec<IpAddr>, BenchError> {
    let bad = |item: &str| {
        BenchError::InvalidArgument(format!(
            "the source address \"{item}\" is not an IP address or an IPv4 range like 127.0.0.1-127.0.0.8"
        ))
    };
    let mut out = Vec::new();
    for item in text.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        if let Some((from, to)) = item.split_once('-') {
            let from: Ipv4Addr = from.trim().parse().map_err(|_| bad(item))?;
            let to: Ipv4Addr = to.trim().parse().map_err(|_| bad(item))?;
            let (from, to) = (u32::from(from), u32::from(to));
            if to < from || to - from >= MAX_SOURCES {
                return Err(bad(item));
            }
            out.extend((from..=to).map(|ip| IpAddr::V4(Ipv4Addr::from(ip))));
        } else {
            out.push(item.parse().map_err(|_| bad(item))?);
        }
    }
    if out.is_empty() {
        return Err(BenchError::InvalidArgument(
            "the source address list is empty".into(),
        ));
    }
    Ok(out)
}

/// Opens a TCP connection to `addr`, bound to `source` when given.
pub async fn connect_from(addr: SocketAddr, source: Option<IpAddr>) -> std::io::Result<TcpStream> {
    let socket = if addr.is_ipv4() {
        TcpSocket::new_v4()?
    } else {
        TcpSocket::new_v6()?
    };
    if let Some(ip) = source {
        defer_port_choice(&socket);
        socket.bind(SocketAddr::new(ip, 0))?;
    }
    let stream = socket.connect(addr).await?;
    stream.set_nodelay(true)?;
    Ok(stream)
}

/// Lets the kernel pick the source port at connect time rather than at bind
/// time, so each source address can reach the full 4-tuple space.
#[cfg(target_os = "linux")]
fn defer_port_choice(socket: &TcpSocket) {
    use std::os::fd::AsRawFd;
    let one: libc::c_int = 1;
    // SAFETY: valid socket fd and a correctly sized option value.
    unsafe {
        libc::setsockopt(
            socket.as_raw_fd(),
            libc::IPPROTO_IP,
            libc::IP_BIND_ADDRESS_NO_PORT,
            (&one as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        );
    }
}

#[cfg(not(target_os = "linux"))]
fn defer_port_choice(_socket: &TcpSocket) {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_and_ranges() {
        let v = parse_source_ips("127.0.0.1-127.0.0.3,127.0.1.1").unwrap();
        assert_eq!(v.len(), 4);
        assert_eq!(v[2], "127.0.0.3".parse::<IpAddr>().unwrap());
        assert!(parse_source_ips("127.0.0.5-127.0.0.1").is_err());
        assert!(parse_source_ips("nope").is_err());
        assert!(parse_source_ips("").is_err());
    }
}
