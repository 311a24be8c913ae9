//! A minimal HTTP/1.1 keep-alive server answering every request with
//! `hello`, for measuring brisk-bench itself on loopback.
//!
//! `cargo run --release -p brisk-bench --example hello_server -- 127.0.0.1:8080 [threads]`

mod common;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

const RESPONSE: &[u8] =
    b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Type: text/plain\r\n\r\nhello";

fn main() -> std::io::Result<()> {
    common::serve("hello_server", "127.0.0.1:8080", |mut stream| async move {
        let mut buf = vec![0u8; 16 * 1024];
        let mut filled = 0;
        let mut out = Vec::with_capacity(RESPONSE.len() * 16);
        loop {
            let n = match stream.read(&mut buf[filled..]).await {
                Ok(0) | Err(_) => return,
                Ok(n) => n,
            };
            filled += n;
            // Answer every complete body-less request head in the buffer.
            let mut start = 0;
            while let Some(pos) = buf[start..filled].windows(4).position(|w| w == b"\r\n\r\n") {
                out.extend_from_slice(RESPONSE);
                start += pos + 4;
            }
            buf.copy_within(start..filled, 0);
            filled -= start;
            if filled == buf.len() {
                return;
            }
            if !out.is_empty() {
                if stream.write_all(&out).await.is_err() {
                    return;
                }
                out.clear();
            }
        }
    })
}
