//! A minimal WebSocket echo server, for measuring brisk-bench itself on
//! loopback.
//!
//! `cargo run --release -p brisk-bench --example ws_echo_server -- 127.0.0.1:9001 [threads]`

mod common;

use futures_util::{SinkExt, StreamExt};

fn main() -> std::io::Result<()> {
    common::serve("ws_echo_server", "127.0.0.1:9001", |stream| async move {
        let Ok(mut ws) = tokio_tungstenite::accept_async(stream).await else {
            return;
        };
        while let Some(Ok(msg)) = ws.next().await {
            if (msg.is_binary() || msg.is_text()) && ws.send(msg).await.is_err() {
                return;
            }
        }
    })
}
