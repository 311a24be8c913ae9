//! In-test servers on loopback: a counting HTTP/1.1 server, a WebSocket
//! echo server and a WebSocket broadcast relay. Each runs on its own thread
//! and runtime and stops when dropped.

#![allow(dead_code)]

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, oneshot};
use tokio_tungstenite::tungstenite::Message;

/// How the HTTP test server frames its response bodies.
#[derive(Clone, Copy)]
pub(crate) enum Body {
    /// `Content-Length: 5`, body `hello`.
    Fixed,
    /// Chunked, several chunks, with a trailer.
    Chunked,
    /// Status 503 with a short fixed body.
    Unavailable,
}

/// Counters of the HTTP test server.
#[derive(Default)]
pub(crate) struct Counters {
    /// Accepted TCP connections.
    pub accepted: AtomicU64,
    /// Requests answered.
    pub requests: AtomicU64,
}

/// A server running on its own thread; stopped on drop.
pub(crate) struct TestServer {
    /// Listening address.
    pub addr: SocketAddr,
    /// HTTP counters (unused by WebSocket servers).
    pub counters: Arc<Counters>,
    stop: Option<oneshot::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl TestServer {
    /// `http://addr/path`.
    pub(crate) fn http_url(&self, path: &str) -> String {
        format!("http://{}{}", self.addr, path)
    }

    /// `ws://addr/path`.
    pub(crate) fn ws_url(&self, path: &str) -> String {
        format!("ws://{}{}", self.addr, path)
    }

    /// Requests answered so far.
    pub(crate) fn requests(&self) -> u64 {
        self.counters.requests.load(Ordering::SeqCst)
    }

    /// Connections accepted so far.
    pub(crate) fn accepted(&self) -> u64 {
        self.counters.accepted.load(Ordering::SeqCst)
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

fn spawn_server<F, Fut>(serve: F) -> TestServer
where
    F: FnOnce(TcpListener, Arc<Counters>) -> Fut + Send + 'static,
    Fut: std::future::Future<Output = ()> + 'static,
{
    let counters = Arc::new(Counters::default());
    let (stop_tx, stop_rx) = oneshot::channel::<()>();
    let (addr_tx, addr_rx) = std::sync::mpsc::channel();
    let c = Arc::clone(&counters);
    let thread = std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let local = tokio::task::LocalSet::new();
        local.block_on(&rt, async move {
            let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
            addr_tx.send(listener.local_addr().unwrap()).unwrap();
            tokio::select! {
                _ = serve(listener, c) => {}
                _ = stop_rx => {}
            }
        });
        // Dropping the runtime cancels every connection task.
    });
    let addr = addr_rx.recv().unwrap();
    TestServer {
        addr,
        counters,
        stop: Some(stop_tx),
        thread: Some(thread),
    }
}

/// Starts the counting HTTP/1.1 server.
pub(crate) fn http_server(body: Body) -> TestServer {
    http_server_with_delay(body, Duration::ZERO)
}

/// Starts the counting HTTP/1.1 server, waiting `delay` before each response.
pub(crate) fn http_server_with_delay(body: Body, delay: Duration) -> TestServer {
    spawn_server(move |listener, counters| async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                continue;
            };
            counters.accepted.fetch_add(1, Ordering::SeqCst);
            let counters = Arc::clone(&counters);
            tokio::task::spawn_local(serve_http(stream, counters, body, delay));
        }
    })
}

async fn serve_http(mut stream: TcpStream, counters: Arc<Counters>, body: Body, delay: Duration) {
    let _ = stream.set_nodelay(true);
    let mut buf = Vec::with_capacity(4096);
    let mut chunk = [0u8; 4096];
    loop {
        // Parse one request head (and skip its body).
        let (head_len, body_len, close) = loop {
            let mut headers = [httparse::EMPTY_HEADER; 32];
            let mut req = httparse::Request::new(&mut headers);
            if let Ok(httparse::Status::Complete(len)) = req.parse(&buf) {
                let mut body_len = 0usize;
                let mut close = false;
                for h in req.headers.iter() {
                    if h.name.eq_ignore_ascii_case("content-length") {
                        body_len = std::str::from_utf8(h.value)
                            .unwrap()
                            .trim()
                            .parse()
                            .unwrap();
                    }
                    if h.name.eq_ignore_ascii_case("connection")
                        && h.value.eq_ignore_ascii_case(b"close")
                    {
                        close = true;
                    }
                }
                break (len, body_len, close);
            }
            match stream.read(&mut chunk).await {
                Ok(0) | Err(_) => return,
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
            }
        };
        while buf.len() < head_len + body_len {
            match stream.read(&mut chunk).await {
                Ok(0) | Err(_) => return,
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
            }
        }
        buf.drain(..head_len + body_len);
        if !delay.is_zero() {
            tokio::time::sleep(delay).await;
        }
        let conn = if close { "Connection: close\r\n" } else { "" };
        let response = match body {
            Body::Fixed => format!("HTTP/1.1 200 OK\r\nContent-Length: 5\r\n{conn}\r\nhello"),
            Body::Unavailable => format!("HTTP/1.1 503 Service Unavailable\r\nContent-Length: 4\r\n{conn}\r\nbusy"),
            Body::Chunked => format!(
                "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n{conn}\r\n\
                 4\r\nWiki\r\n6;name=v\r\npedia \r\nE\r\nin \r\n\r\nchunks.\r\n1a\r\nabcdefghijklmnopqrstuvwxyz\r\n0\r\nX-Trailer: t\r\n\r\n"
            ),
        };
        counters.requests.fetch_add(1, Ordering::SeqCst);
        // Write in two pieces to exercise partial reads on the client.
        let bytes = response.as_bytes();
        let mid = bytes.len() / 2;
        if stream.write_all(&bytes[..mid]).await.is_err() {
            return;
        }
        tokio::task::yield_now().await;
        if stream.write_all(&bytes[mid..]).await.is_err() {
            return;
        }
        if close {
            return;
        }
    }
}

/// Starts a WebSocket server echoing every data message back.
pub(crate) fn ws_echo_server() -> TestServer {
    spawn_server(|listener, counters| async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                continue;
            };
            counters.accepted.fetch_add(1, Ordering::SeqCst);
            tokio::task::spawn_local(async move {
                let Ok(mut ws) = tokio_tungstenite::accept_async(stream).await else {
                    return;
                };
                while let Some(Ok(msg)) = ws.next().await {
                    if (msg.is_binary() || msg.is_text()) && ws.send(msg).await.is_err() {
                        return;
                    }
                }
            });
        }
    })
}

/// Starts a WebSocket relay: every data message from any client goes to
/// every connected client (the sender included).
pub(crate) fn ws_broadcast_server() -> TestServer {
    spawn_server(|listener, counters| async move {
        let clients: Arc<Mutex<Vec<mpsc::UnboundedSender<Message>>>> = Arc::default();
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                continue;
            };
            counters.accepted.fetch_add(1, Ordering::SeqCst);
            let clients = Arc::clone(&clients);
            tokio::task::spawn_local(async move {
                let (tx, mut rx) = mpsc::unbounded_channel::<Message>();
                let registry = Arc::clone(&clients);
                // Register inside the handshake callback, before the 101
                // response goes out, so no broadcast can be missed.
                // The error type is fixed by tungstenite's callback API.
                #[allow(clippy::result_large_err)]
                let register = move |_req: &tokio_tungstenite::tungstenite::handshake::server::Request,
                                     resp: tokio_tungstenite::tungstenite::handshake::server::Response| {
                    registry.lock().unwrap().push(tx);
                    Ok(resp)
                };
                let Ok(ws) = tokio_tungstenite::accept_hdr_async(stream, register).await else {
                    return;
                };
                let (mut sink, mut source) = ws.split();
                let writer = tokio::task::spawn_local(async move {
                    while let Some(msg) = rx.recv().await {
                        if sink.send(msg).await.is_err() {
                            return;
                        }
                    }
                });
                while let Some(Ok(msg)) = source.next().await {
                    if msg.is_binary() || msg.is_text() {
                        clients
                            .lock()
                            .unwrap()
                            .retain(|c| c.send(msg.clone()).is_ok());
                    }
                }
                writer.abort();
            });
        }
    })
}

/// Runs the binary with a wall-clock limit; returns (exit code, stdout, stderr, elapsed).
pub(crate) fn run_bin(args: &[&str], limit: Duration) -> (i32, String, String, Duration) {
    let start = std::time::Instant::now();
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_brisk-bench"))
        .args(args)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    loop {
        if child.try_wait().unwrap().is_some() {
            break;
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            panic!("brisk-bench {args:?} did not finish within {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let elapsed = start.elapsed();
    let out = child.wait_with_output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
        elapsed,
    )
}
