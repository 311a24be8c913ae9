//! [`Service`]: any server, type-erased, ready to start in a worker.

use std::io;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

use crate::protocol::Protocol;
use crate::server::{LimitOverrides, Limits, ListenConfig, Server, UdpServer, WorkerCallbacks};
use crate::tls::TlsSocket;
use crate::worker::connection::{self, ConnView, ServerShared};
use crate::worker::listener::Listener;
use crate::worker::stream::{PeerAddr, Stream};
use crate::worker::{udp, WorkerCtx};

type Start = Box<dyn FnOnce(Rc<WorkerCtx>, Listener, Limits) -> io::Result<()>>;

/// A server of any kind, as [`App::server`](crate::App::server) and
/// [`run_all`](crate::run_all) take it. Made with `.into()` from a [`Server`] or [`UdpServer`].
pub struct Service {
    pub(crate) listen: ListenConfig,
    pub(crate) worker_callbacks: WorkerCallbacks,
    pub(crate) limits: LimitOverrides,
    pub(crate) start: Start,
}

impl<P: Protocol> From<Server<P>> for Service {
    fn from(server: Server<P>) -> Self {
        let Server {
            listen,
            protocol,
            limits,
            worker_callbacks,
            callbacks,
        } = server;
        let tls = listen.tls_config(&[]);
        let tls_handshake = listen.tls.as_ref().map(|t| t.handshake_deadline());
        Service {
            listen,
            worker_callbacks,
            limits,
            start: Box::new(move |worker, listener, limits| {
                let shared = Rc::new(ServerShared {
                    worker: worker.clone(),
                    callbacks,
                    limits,
                    protocol,
                });
                if let Some(timeout) = tls_handshake {
                    tokio::task::spawn_local(sweep_handshakes(worker.clone(), timeout));
                }
                if let Some(timeout) = limits.idle_timeout {
                    tokio::task::spawn_local(sweep_idle(worker, timeout));
                }
                match listener {
                    Listener::Tcp(l) => {
                        let l = tokio::net::TcpListener::from_std(l)?;
                        tokio::task::spawn_local(accept_tcp(shared, l, tls));
                    }
                    Listener::Unix(l) => {
                        let l = tokio::net::UnixListener::from_std(l)?;
                        tokio::task::spawn_local(accept_unix(shared, l));
                    }
                    Listener::Udp(_) => unreachable!("Server never takes a udp:// address"),
                }
                Ok(())
            }),
        }
    }
}

impl From<crate::http::HttpServer> for Service {
    fn from(server: crate::http::HttpServer) -> Self {
        let crate::http::HttpServer {
            listen,
            limits: overrides,
            http,
            worker_callbacks,
            handler,
            http2,
        } = server;
        let alpn: &[&[u8]] = if http2 {
            &[b"h2", b"http/1.1"]
        } else {
            &[b"http/1.1"]
        };
        let tls = listen.tls_config(alpn);
        let tls_handshake = listen.tls.as_ref().map(|t| t.handshake_deadline());
        let handler = handler.unwrap_or_else(|| {
            Rc::new(|_req| {
                Box::pin(async {
                    let mut r = http::Response::new(crate::http::Body::from("no handler\n"));
                    *r.status_mut() = http::StatusCode::NOT_FOUND;
                    Ok(r)
                })
            })
        });
        Service {
            listen,
            worker_callbacks,
            limits: overrides,
            start: Box::new(move |worker, listener, limits| {
                let Listener::Tcp(l) = listener else {
                    unreachable!("HttpServer only takes http:// and https:// addresses")
                };
                let mut builder = hyper::server::conn::http1::Builder::new();
                // Brisk times request heads itself (`sweep_http`): hyper's timer would arm and
                // disarm a timer for every request.
                builder
                    .timer(hyper_util::rt::TokioTimer::new())
                    .header_read_timeout(None)
                    .max_buf_size(http.max_header_bytes.max(8192))
                    .max_headers(http.max_headers)
                    .keep_alive(true)
                    .pipeline_flush(false);
                let shared = Rc::new(crate::http::HttpShared {
                    worker: worker.clone(),
                    handler,
                    limits,
                    http,
                    builder,
                    tls: tls
                        .zip(tls_handshake)
                        .map(|(c, handshake)| crate::http::TlsShared::new(c, &http, handshake)),
                });
                tokio::task::spawn_local(sweep_http(
                    worker,
                    http.keep_alive_timeout,
                    http.header_read_timeout,
                ));
                let l = tokio::net::TcpListener::from_std(l)?;
                tokio::task::spawn_local(accept_http(shared, l));
                Ok(())
            }),
        }
    }
}

async fn accept_http(shared: Rc<crate::http::HttpShared>, listener: tokio::net::TcpListener) {
    let worker = shared.worker.clone();
    accept_loop(
        &worker,
        || listener.accept(),
        |stream, addr| {
            // TCP_NODELAY comes with the second send (`HttpIo`).
            tokio::task::spawn_local(crate::http::serve(shared.clone(), stream, addr));
        },
    )
    .await;
}

/// Accepts connections until the worker stops, handing each to `serve`; backs off when
/// out of descriptors.
async fn accept_loop<S, A, F>(
    worker: &WorkerCtx,
    mut accept: impl FnMut() -> F,
    mut serve: impl FnMut(S, A),
) where
    F: std::future::Future<Output = io::Result<(S, A)>>,
{
    let mut stop = worker.stop_signal();
    loop {
        tokio::select! {
            r = accept() => match r {
                Ok((stream, addr)) => serve(stream, addr),
                Err(e) => accept_failed(e).await,
            },
            _ = stop.changed() => return,
        }
    }
}

impl From<crate::ws::WsServer> for Service {
    fn from(server: crate::ws::WsServer) -> Self {
        let crate::ws::WsServer {
            listen,
            limits,
            worker_callbacks,
            endpoint,
        } = server;
        let tls = listen.tls_config(&[b"http/1.1"]);
        Service {
            listen,
            worker_callbacks,
            limits,
            start: Box::new(move |worker, listener, limits| {
                let Listener::Tcp(l) = listener else {
                    unreachable!("WsServer only takes websocket:// and wss:// addresses")
                };
                let l = tokio::net::TcpListener::from_std(l)?;
                crate::ws::WsServer::start(endpoint, worker, l, limits, tls);
                Ok(())
            }),
        }
    }
}

impl From<UdpServer> for Service {
    fn from(server: UdpServer) -> Self {
        let UdpServer {
            listen,
            worker_callbacks,
            on_message,
        } = server;
        Service {
            listen,
            worker_callbacks,
            limits: LimitOverrides::default(),
            start: Box::new(move |worker, listener, _limits| {
                let Listener::Udp(s) = listener else {
                    unreachable!("UdpServer only takes udp:// addresses")
                };
                let s = tokio::net::UdpSocket::from_std(s)?;
                tokio::task::spawn_local(udp::serve(worker, s, on_message));
                Ok(())
            }),
        }
    }
}

/// Errors from accept that mean "out of descriptors or memory": the connection stays queued
/// in the kernel, so wait a little instead of spinning.
fn accept_backoff(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::EMFILE | libc::ENFILE | libc::ENOBUFS | libc::ENOMEM)
    )
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

async fn accept_unix<P: Protocol>(shared: Rc<ServerShared<P>>, listener: tokio::net::UnixListener) {
    let worker = shared.worker.clone();
    accept_loop(
        &worker,
        || listener.accept(),
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

async fn accept_failed(e: io::Error) {
    if accept_backoff(&e) {
        tracing::warn!(error = %e, "accept failed; retrying in 100 ms");
        tokio::time::sleep(Duration::from_millis(100)).await;
    } else {
        tracing::debug!(error = %e, "accept failed");
    }
}

/// HTTP's clock: advances the worker's coarse clock, answers request heads that take longer
/// than `header_timeout` with 408, and closes keep-alive connections idle for `keep_alive`.
async fn sweep_http(worker: Rc<WorkerCtx>, keep_alive: Duration, header_timeout: Duration) {
    let idle_limit = keep_alive.as_secs().max(1) as u32;
    let period = (keep_alive.min(header_timeout) / 4)
        .clamp(Duration::from_millis(50), Duration::from_secs(1));
    // Heads are stamped with a clock up to one period old: allow for it.
    let head_limit = (header_timeout + period).as_millis() as u64;
    let mut tick = tokio::time::interval(period);
    loop {
        tick.tick().await;
        let now_ms = worker.io.tick();
        for conn in worker.connections_where(|c| c.head_overdue(now_ms, head_limit)) {
            conn.reject_slow_head();
        }
        close_idle(&worker, idle_limit);
    }
}

/// Closes connections that received nothing for `timeout`.
async fn sweep_idle(worker: Rc<WorkerCtx>, timeout: Duration) {
    let limit = timeout.as_secs().max(1) as u32;
    let period = (timeout / 4).clamp(Duration::from_millis(100), Duration::from_secs(1));
    let mut tick = tokio::time::interval(period);
    loop {
        tick.tick().await;
        close_idle(&worker, limit);
    }
}

/// Closes connections still in their opening handshake (TLS, or the protocol's own) after
/// `timeout`.
async fn sweep_handshakes(worker: Rc<WorkerCtx>, timeout: Duration) {
    let limit = timeout.as_secs().max(1) as u32;
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    loop {
        tick.tick().await;
        close_stalled_handshakes(&worker, limit);
    }
}

/// Closes (and counts as rejected) the worker's connections that have been in their opening
/// handshake for `limit_s` seconds or more.
pub(crate) fn close_stalled_handshakes(worker: &WorkerCtx, limit_s: u32) {
    let now = worker.uptime_secs();
    let stalled = |c: &dyn ConnView| c.handshake_age(now).is_some_and(|a| a >= limit_s);
    for c in worker.connections_where(stalled) {
        tracing::debug!("closing a connection that did not finish its opening handshake");
        c.count_rejected();
        c.destroy();
    }
}

/// Closes the worker's connections that received nothing for `limit_s` seconds.
fn close_idle(worker: &WorkerCtx, limit_s: u32) {
    let now = worker.uptime_secs();
    for conn in worker.connections_where(|c| c.idle_secs(now) >= limit_s) {
        tracing::debug!("closing idle connection");
        conn.destroy();
    }
}
