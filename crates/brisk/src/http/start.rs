//! Starting an HTTP server in a worker: hyper's settings, the accept loop, and HTTP's own
//! sweep (request heads that arrive too slowly, keep-alive connections idle too long).

use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

use super::answers::{Answers, Logging};
use super::conn::serve;
use super::limits::HttpLimits;
use super::state::{HttpConn, HttpShared, TlsShared};
use crate::limits::Limits;
use crate::runtime::accept::{accept_loop, take_queued_tcp};
use crate::runtime::sweep::close_idle;
use crate::runtime::WorkerCtx;

/// Serves `listener` in `worker` with `answers` until the worker stops; `tls` is the rustls
/// configuration and handshake timeout of an `https://` listener; `logging` how requests are
/// logged.
pub(super) fn start(
    worker: Rc<WorkerCtx>,
    listener: tokio::net::TcpListener,
    limits: Limits,
    http: HttpLimits,
    answers: Answers,
    tls: Option<(Arc<rustls::ServerConfig>, Duration)>,
    logging: Logging,
) {
    let mut builder = hyper::server::conn::http1::Builder::new();
    // Brisk times request heads itself (`sweep_http`): hyper's timer would arm and disarm a
    // timer for every request.
    builder
        .timer(hyper_util::rt::TokioTimer::new())
        .header_read_timeout(None)
        .max_buf_size(http.max_header_bytes.max(8192))
        .max_headers(http.max_headers)
        .keep_alive(true)
        .pipeline_flush(false);
    let shared = Rc::new(HttpShared {
        worker: worker.clone(),
        answers,
        limits,
        http,
        builder,
        tls: tls.map(|(c, handshake)| TlsShared::new(c, &http, handshake)),
        access_log: logging.access_log,
        recording: logging.recording,
    });
    tokio::task::spawn_local(sweep_http(worker, http));
    tokio::task::spawn_local(accept_http(shared, listener));
}

async fn accept_http(shared: Rc<HttpShared>, listener: tokio::net::TcpListener) {
    let worker = shared.worker.clone();
    accept_loop(
        &worker,
        || listener.accept(),
        || take_queued_tcp(&listener),
        |stream, addr| {
            // TCP_NODELAY comes with the second send (`HttpIo`).
            tokio::task::spawn_local(serve(shared.clone(), stream, addr));
        },
    )
    .await;
}

/// HTTP's clock: advances the worker's coarse clock, answers request heads that take longer
/// than the header timeout and bodies that take longer than the body timeout with 408, and
/// closes keep-alive connections idle for the keep-alive timeout.
async fn sweep_http(worker: Rc<WorkerCtx>, http: HttpLimits) {
    let keep_alive = http.keep_alive_timeout;
    let idle_limit = keep_alive.as_secs().max(1) as u32;
    let period = (keep_alive
        .min(http.header_read_timeout)
        .min(http.body_read_timeout)
        / 4)
    .clamp(Duration::from_millis(50), Duration::from_secs(1));
    // Heads and bodies are stamped with a clock up to one period old: allow for it.
    let head_limit = (http.header_read_timeout + period).as_millis() as u64;
    let body_limit = (http.body_read_timeout + period).as_millis() as u64;
    let min_rate = http.min_body_rate;
    let mut tick = tokio::time::interval(period);
    loop {
        tick.tick().await;
        let now_ms = worker.io.tick();
        let late = |c: &dyn crate::runtime::ConnView| {
            c.as_any().downcast_ref::<HttpConn>().is_some_and(|h| {
                h.head_overdue(now_ms, head_limit) || h.body_overdue(now_ms, body_limit, min_rate)
            })
        };
        for conn in worker.connections_where(late) {
            if let Some(h) = conn.as_any().downcast_ref::<HttpConn>() {
                if h.head_overdue(now_ms, head_limit) {
                    h.reject_slow_head();
                } else {
                    h.reject_slow_body();
                }
            }
        }
        close_idle(&worker, idle_limit);
    }
}
