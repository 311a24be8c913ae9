//! What the example servers share: the `[ADDR] [THREADS]` arguments, a
//! multi-threaded runtime and the accept loop.

use std::future::Future;

use tokio::net::{TcpListener, TcpStream};

/// Listens on the first argument (default `default_addr`) with as many
/// runtime threads as the second (default 1), and runs `handle` on its own
/// task for each accepted connection (with `TCP_NODELAY` set). `name` is
/// printed once listening.
pub(crate) fn serve<F, Fut>(name: &str, default_addr: &str, handle: F) -> std::io::Result<()>
where
    F: Fn(TcpStream) -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    let mut args = std::env::args().skip(1);
    let addr = args.next().unwrap_or_else(|| default_addr.into());
    let threads: usize = args.next().and_then(|t| t.parse().ok()).unwrap_or(1);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(threads)
        .enable_all()
        .build()?;
    runtime.block_on(async move {
        let listener = TcpListener::bind(&addr).await?;
        eprintln!("{name} listening on {addr}");
        loop {
            let (stream, _) = listener.accept().await?;
            let _ = stream.set_nodelay(true);
            tokio::spawn(handle(stream));
        }
    })
}
