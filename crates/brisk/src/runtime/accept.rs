//! Accept loops: take connections off a listener until the worker stops, and hand each to the
//! protocol's serve function. Out of descriptors or memory, they back off instead of spinning.

use std::io;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

use super::connection::{self, ServerShared};
use super::context::WorkerCtx;
use super::stream::{PeerAddr, Stream};
use super::tls_stream::TlsSocket;
use crate::protocol::Protocol;

/// How long accepting pauses after running out of descriptors or memory.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(100);

/// Accepts connections until the worker stops, handing each to `serve`; backs off when
/// out of descriptors. When the worker stops, `take_queued` takes the connections the kernel
/// has already queued (their clients connected before the stop, and closing the listener
/// would reset them), and `serve` gets those too.
pub(crate) async fn accept_loop<S, A, F>(
    worker: &WorkerCtx,
    mut accept: impl FnMut() -> F,
    mut take_queued: impl FnMut() -> Option<(S, A)>,
    mut serve: impl FnMut(S, A),
) where
    F: std::future::Future<Output = io::Result<(S, A)>>,
{
    let _running = worker.accepting();
    let mut stop = worker.stop_signal();
    loop {
        tokio::select! {
            _ = worker.wait_below_max_connections() => {}
            _ = stop.changed() => break,
        }
        tokio::select! {
            r = accept() => match r {
                Ok((stream, addr)) => serve(stream, addr),
                Err(e) => accept_failed(e).await,
            },
            _ = stop.changed() => break,
        }
    }
    while let Some((stream, addr)) = take_queued() {
        serve(stream, addr);
    }
}

/// A TCP connection already queued on `listener`, accepted without waiting (None when the
/// queue is empty).
pub(crate) fn take_queued_tcp(
    listener: &tokio::net::TcpListener,
) -> Option<(tokio::net::TcpStream, std::net::SocketAddr)> {
    let (socket, addr) = socket2::SockRef::from(listener).accept().ok()?;
    socket.set_nonblocking(true).ok()?;
    let stream = tokio::net::TcpStream::from_std(socket.into()).ok()?;
    Some((stream, addr.as_socket()?))
}

/// A Unix-socket connection already queued on `listener` (None when the queue is empty).
fn take_queued_unix(
    listener: &tokio::net::UnixListener,
) -> Option<(tokio::net::UnixStream, tokio::net::unix::SocketAddr)> {
    let (socket, _) = socket2::SockRef::from(listener).accept().ok()?;
    socket.set_nonblocking(true).ok()?;
    let stream = tokio::net::UnixStream::from_std(socket.into()).ok()?;
    let addr = stream.peer_addr().ok()?;
    Some((stream, addr))
}

/// Errors from accept that mean "out of descriptors or memory": the connection stays queued
/// in the kernel, so wait a little instead of spinning.
fn accept_backoff(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::EMFILE | libc::ENFILE | libc::ENOBUFS | libc::ENOMEM)
    )
}

async fn accept_failed(e: io::Error) {
    if accept_backoff(&e) {
        tracing::warn!(error = %e, "accept failed; retrying in {} ms", ACCEPT_BACKOFF.as_millis());
        tokio::time::sleep(ACCEPT_BACKOFF).await;
    } else {
        tracing::debug!(error = %e, "accept failed");
    }
}

/// Accepts TCP connections for a connection-runtime server; with `tls`, each starts a TLS
/// handshake that its first reads drive.
pub(crate) async fn accept_tcp<P: Protocol>(
    shared: Rc<ServerShared<P>>,
    listener: tokio::net::TcpListener,
    tls: Option<Arc<rustls::ServerConfig>>,
) {
    let worker = shared.worker.clone();
    accept_loop(
        &worker,
        || listener.accept(),
        || take_queued_tcp(&listener),
        |stream, addr| {
            let _ = stream.set_nodelay(true);
            let stream = match &tls {
                None => Stream::Tcp(stream),
                Some(config) => match TlsSocket::accept(stream, config.clone()) {
                    Ok(s) => Stream::Tls(Box::new(s)),
                    Err(e) => {
                        tracing::warn!(error = %e, "cannot start a TLS session");
                        return;
                    }
                },
            };
            let peer = PeerAddr::Inet(addr);
            tokio::task::spawn_local(connection::serve(shared.clone(), stream, peer));
        },
    )
    .await;
}

/// Accepts Unix-socket connections for a connection-runtime server.
pub(crate) async fn accept_unix<P: Protocol>(
    shared: Rc<ServerShared<P>>,
    listener: tokio::net::UnixListener,
) {
    let worker = shared.worker.clone();
    accept_loop(
        &worker,
        || listener.accept(),
        || take_queued_unix(&listener),
        |stream, addr| {
            let peer = PeerAddr::Unix(addr.as_pathname().map(Into::into));
            tokio::task::spawn_local(connection::serve(
                shared.clone(),
                Stream::Unix(stream),
                peer,
            ));
        },
    )
    .await;
}
