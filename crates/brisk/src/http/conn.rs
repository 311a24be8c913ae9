//! One HTTP connection: hyper's HTTP/1.1 state machine on an [`HttpIo`] (on one of the
//! [stacks](super::upgraded) named once for upgrades: under the framing guard, through
//! rustls for `https://`), with HTTP/2 when ALPN picks it, registered with the worker for stats,
//! `connections`, idle timeout and graceful stop.

use std::cell::Cell;
use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::os::fd::AsRawFd;
use std::pin::{pin, Pin};
use std::rc::Rc;
use std::sync::Arc;
use std::task::Poll;

use http::Request;
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;

use super::activity::Activity;
use super::conn_state::{ConnState, Transport};
use super::h1;
use super::io::HttpIo;
use super::request_body::Timing;
use super::respond::{respond, until_sent};
use super::state::{HttpConn, HttpShared};
use super::upgraded;
use super::RequestBody;
use crate::runtime::WorkerCtx;
use crate::stats::Stats;

/// Registers one HTTP connection with its worker; the future serves it until it closes.
///
/// Not an `async fn`: its arguments would stay in every connection's task. Everything a
/// connection keeps is reached through `conn`, as each value that lives across an await is
/// space in every connection's task.
pub(crate) fn serve(
    shared: Rc<HttpShared>,
    stream: TcpStream,
    remote: SocketAddr,
) -> impl Future<Output = ()> {
    let conn = open(&shared, &stream, remote);
    serve_registered(shared, conn, stream)
}

/// Serves a registered connection until it closes, then unregisters it.
async fn serve_registered(shared: Rc<HttpShared>, conn: Rc<HttpConn>, stream: TcpStream) {
    let io = HttpIo::new(stream, conn.activity.clone(), conn.worker.io.clone());
    let svc = {
        let (shared, conn) = (shared.clone(), conn.clone());
        hyper::service::service_fn(move |req: Request<Incoming>| {
            let (shared, conn) = (shared.clone(), conn.clone());
            async move {
                let max_body = shared.limits.max_package_size;
                let req = req.map(|body| {
                    // HTTP/2's streams share the connection: each body times itself.
                    let timing = if http_body::Body::is_end_stream(&body) {
                        Timing::Untimed
                    } else if conn.state.times_requests() {
                        Timing::Swept(conn.activity.clone())
                    } else {
                        Timing::own(shared.http.body_read_timeout, shared.http.min_body_rate)
                    };
                    RequestBody::limited(body, max_body, timing)
                });
                let resp = respond(&shared, &conn, req).await;
                Ok::<_, Infallible>(until_sent(resp, &conn.activity))
            }
        })
    };
    let failed = match &shared.tls {
        // Plaintext: Brisk's own HTTP/1.1 path first, hyper for what it does not take.
        None => match drive(&conn, pin!(h1::serve(&shared, &conn, io)), Shutdown::AtOnce, |_| {}).await {
            // Boxed: a connection that never needs hyper does not carry its state.
            Some(h1::Exit::ToHyper(io)) => {
                let io = upgraded::plain(io, &shared.http);
                let http = Box::pin(shared.builder.serve_connection(io, svc).with_upgrades());
                drive(&conn, http, Shutdown::AfterGrace, |c| c.graceful_shutdown())
                    .await
                    .and_then(Result::err)
            }
            Some(h1::Exit::Closed) | None => None,
        },
        Some(tls) => Box::pin(async {
            // Driven like the connection: a handshake that the head sweep closes first
            // (counted there) ends here, instead of timing out and being counted again.
            let handshake = pin!(tokio::time::timeout(
                tls.handshake_timeout,
                tls.acceptor.accept(io)
            ));
            match drive(&conn, handshake, Shutdown::AtOnce, |_| {}).await? {
                Ok(Ok(stream)) => {
                    // The handshake's bytes were not part of a request head.
                    conn.activity.handshake_done();
                    let h2 = stream.get_ref().1.alpn_protocol() == Some(b"h2");
                    conn.state.tls_done(h2);
                    if h2 {
                        let io = TokioIo::new(stream);
                        let http = pin!(tls.h2.serve_connection(io, svc));
                        drive(&conn, http, Shutdown::AtOnce, |c| c.graceful_shutdown()).await
                    } else {
                        let io = upgraded::tls(stream, conn.activity.clone(), &shared.http);
                        let http = pin!(shared.builder.serve_connection(io, svc).with_upgrades());
                        drive(&conn, http, Shutdown::AfterGrace, |c| c.graceful_shutdown()).await
                    }
                    .and_then(Result::err)
                }
                Ok(Err(e)) => {
                    Stats::add(&conn.worker.stats.rejected, 1);
                    tracing::debug!(conn = conn.id, remote = %conn.remote, error = %e, "TLS handshake failed");
                    None
                }
                Err(_) => {
                    Stats::add(&conn.worker.stats.rejected, 1);
                    tracing::debug!(conn = conn.id, remote = %conn.remote, "TLS handshake timed out");
                    None
                }
            }
        })
        .await,
    };
    if let Some(e) = failed {
        on_connection_error(&conn.worker, &conn, &e);
    }
    conn.worker.unregister(conn.id);
}

/// Registers a new connection with its worker.
fn open(shared: &HttpShared, stream: &TcpStream, remote: SocketAddr) -> Rc<HttpConn> {
    let worker = &shared.worker;
    let now = worker.uptime_secs();
    let activity = Arc::new(Activity::default());
    activity.opened(now, worker.io.now_ms());
    let id = worker.next_connection_id();
    let span = match shared.recording.request_spans {
        true => tracing::info_span!("request", conn = id),
        false => tracing::Span::none(),
    };
    let conn = Rc::new(HttpConn {
        id,
        remote,
        opened: now,
        activity,
        worker: worker.clone(),
        requests: Cell::new(0),
        state: ConnState::opened(
            match shared.tls {
                None => Transport::Plain(stream.as_raw_fd()),
                Some(_) => Transport::TlsHandshake,
            },
            worker.is_stopping(),
        ),
        waker: Cell::new(None),
        span,
    });
    worker.register(conn.id, conn.clone());
    conn
}

/// When [`drive`] calls a draining connection's graceful shutdown.
#[derive(Clone, Copy, PartialEq)]
enum Shutdown {
    /// As soon as the worker drains (HTTP/2: GOAWAY tells the client which streams were
    /// taken).
    AtOnce,
    /// At the end of the drain grace (HTTP/1.1: hyper would close an idle connection at once,
    /// under a request its client may be sending; until then each response says
    /// `Connection: close`).
    AfterGrace,
}

/// Runs a connection future until it ends, calling `graceful` once when the worker drains
/// (Brisk's own path watches `draining` itself) and stopping when the connection is
/// destroyed (then: `None`).
///
/// The future comes pinned where the caller keeps it: taken by value, it would be stored
/// twice in the task (once as the argument, once pinned), doubling every connection's size.
async fn drive<P>(
    conn: &HttpConn,
    mut http: Pin<P>,
    when: Shutdown,
    graceful: impl Fn(Pin<&mut P::Target>),
) -> Option<<P::Target as Future>::Output>
where
    P: std::ops::DerefMut<Target: Future>,
{
    let mut shutting_down = false;
    std::future::poll_fn(|cx| {
        if conn.state.is_destroyed() {
            return Poll::Ready(None);
        }
        if conn.state.is_draining() && !shutting_down {
            // The worker wakes every connection again when the grace ends.
            let due = when == Shutdown::AtOnce || conn.worker.drain_grace_over();
            if due {
                shutting_down = true;
                graceful(http.as_mut());
            }
        }
        // The connection's span, entered once per wake-up of its task: HTTP/1.1 handlers run
        // inside this poll (16 pipelined requests pay for one enter); HTTP/2's run in tasks
        // of their own and enter it themselves (`respond.rs`).
        let entered = conn.span.enter();
        let polled = http.as_mut().poll(cx);
        drop(entered);
        if let Poll::Ready(r) = polled {
            return Poll::Ready(Some(r));
        }
        match conn.waker.take() {
            Some(w) if w.will_wake(cx.waker()) => conn.waker.set(Some(w)),
            _ => conn.waker.set(Some(cx.waker().clone())),
        }
        Poll::Pending
    })
    .await
}

/// Counts and logs how a connection failed.
fn on_connection_error(worker: &WorkerCtx, conn: &HttpConn, e: &hyper::Error) {
    if e.is_timeout() {
        tracing::debug!(conn = conn.id, error = %e, "connection timed out");
    } else if e.is_parse() || e.is_parse_too_large() {
        Stats::add(&worker.stats.rejected, 1);
        tracing::debug!(conn = conn.id, remote = %conn.remote, error = %e, "bad request");
    } else if e.is_user() {
        Stats::add(&worker.stats.throw_exception, 1);
        tracing::warn!(conn = conn.id, error = %e, "response failed");
    } else {
        tracing::debug!(conn = conn.id, error = %e, "connection error");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The size of the future an `async fn` of three owned arguments returns.
    fn future_size<A, B, C, F: Future>(_: impl Fn(A, B, C) -> F) -> usize {
        std::mem::size_of::<F>()
    }

    /// Every open HTTP connection is one task holding this future, idle or not. Its size
    /// once tripled, unnoticed, when the connection future was stored twice (passed by
    /// value, then pinned) and a request's state was kept inline across the idle wait.
    /// Features other crates turn on change it too (tokio's multi-thread runtime makes a
    /// `TcpStream` 8 bytes larger): `cargo test --workspace` is the size that counts.
    #[test]
    fn an_http_connection_task_stays_small() {
        let size = future_size(serve);
        println!("connection future: {size} bytes");
        assert!(
            size <= 1024,
            "the HTTP connection future grew to {size} bytes: every open connection pays it"
        );
    }
}
