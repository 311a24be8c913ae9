//! A minimal WebSocket echo server, for measuring brisk-bench itself on
//! loopback.
//!
//! `cargo run --release -p brisk-bench --example ws_echo_server -- 127.0.0.1:9001 [threads]`

use futures_util::{SinkExt, StreamExt};
use tokio::net::TcpListener;

fn main() -> std::io::Result<()> {
    let mut args = std::env::args().skip(1);
    let addr = args.next().unwrap_or_else(|| "127.0.0.1:9001".into());
    let threads: usize = args.next().and_then(|t| t.parse().ok()).unwrap_or(1);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(threads)
        .enable_all()
        .build()?;
    runtime.block_on(async move {
        let listener = TcpListener::bind(&addr).await?;
        eprintln!("ws_echo_server listening on {addr}");
        loop {
            let (stream, _) = listener.accept().await?;
            let _ = stream.set_nodelay(true);
            tokio::spawn(async move {
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
