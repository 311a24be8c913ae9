//! A minimal HTTP/1.1 keep-alive server answering every request with
//! `hello`, for measuring brisk-bench itself on loopback.
//!
//! `cargo run --release -p brisk-bench --example hello_server -- 127.0.0.1:8080 [threads]`

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

const RESPONSE: &[u8] =
    b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Type: text/plain\r\n\r\nhello";

fn main() -> std::io::Result<()> {
    let mut args = std::env::args().skip(1);
    let addr = args.next().unwrap_or_else(|| "127.0.0.1:8080".into());
    let threads: usize = args.next().and_then(|t| t.parse().ok()).unwrap_or(1);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(threads)
        .enable_all()
        .build()?;
    runtime.block_on(async move {
        let listener = TcpListener::bind(&addr).await?;
        eprintln!("hello_server listening on {addr}");
        loop {
            let (mut stream, _) = listener.accept().await?;
            let _ = stream.set_nodelay(true);
            tokio::spawn(async move {
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
                    while let Some(pos) =
                        buf[start..filled].windows(4).position(|w| w == b"\r\n\r\n")
                    {
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
            });
        }
    })
}
