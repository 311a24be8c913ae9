//! Serving UDP datagrams: one receive loop per worker, a task per datagram.

use std::io;
use std::net::SocketAddr;
use std::rc::Rc;

use bytes::Bytes;
use futures_util::FutureExt;
use tokio::net::UdpSocket;

use super::context::WorkerCtx;
use super::handler::{panic_message, HandlerFuture};
use crate::stats::Stats;

/// `on_message` of a UDP server: the sender and the datagram.
pub(crate) type DatagramCallback = Rc<dyn Fn(UdpPeer, Bytes) -> HandlerFuture>;

/// The sender of a datagram, with the socket to answer on.
#[derive(Clone)]
pub struct UdpPeer {
    socket: Rc<UdpSocket>,
    peer: SocketAddr,
}

impl UdpPeer {
    /// The sender's address.
    pub fn remote_addr(&self) -> SocketAddr {
        self.peer
    }

    /// Sends one datagram back to the sender.
    pub async fn send(&self, datagram: &[u8]) -> io::Result<()> {
        self.socket.send_to(datagram, self.peer).await.map(drop)
    }
}

/// Receives datagrams until the worker stops.
pub(crate) async fn serve(
    worker: Rc<WorkerCtx>,
    socket: UdpSocket,
    on_message: Option<DatagramCallback>,
) {
    let socket = Rc::new(socket);
    let mut stop = worker.stop_signal();
    let mut buf = vec![0u8; 65536];
    loop {
        let (n, peer) = tokio::select! {
            r = socket.recv_from(&mut buf) => match r {
                Ok(x) => x,
                Err(e) => {
                    tracing::debug!(error = %e, "udp receive error");
                    continue;
                }
            },
            _ = stop.changed() => return,
        };
        let stats = &worker.stats;
        Stats::add(&stats.total_request, 1);
        Stats::add(&stats.bytes_in, n as u64);
        let Some(cb) = &on_message else { continue };
        let fut = cb(
            UdpPeer {
                socket: socket.clone(),
                peer,
            },
            Bytes::copy_from_slice(&buf[..n]),
        );
        let w = worker.clone();
        tokio::task::spawn_local(async move {
            match std::panic::AssertUnwindSafe(fut).catch_unwind().await {
                Ok(Ok(())) => {}
                Ok(Err(e)) => {
                    Stats::add(&w.stats.throw_exception, 1);
                    tracing::warn!(%peer, error = %e, "datagram handler error");
                }
                Err(p) => {
                    Stats::add(&w.stats.throw_exception, 1);
                    tracing::error!(%peer, panic = panic_message(&p), "datagram handler panicked");
                }
            }
        });
    }
}
