//! A small load tool for the core benchmarks (`bench/core.sh`): pipelined Text/Frame echo
//! throughput, and holding many idle connections open.
//!
//! ```text
//! brisk-load echo ADDR text|frame CONNECTIONS WINDOW SIZE SECONDS
//! brisk-load hold ADDR CONNECTIONS SECONDS [SOURCE_IPS]
//! ```
//!
//! `echo` keeps WINDOW messages of SIZE bytes in flight on each connection and prints one
//! JSON line: messages, seconds, msgs_per_s. `hold` opens CONNECTIONS idle connections
//! (spreading source addresses over 127.0.0.1..=127.0.0.N when N > 1), prints `ready N`,
//! and holds them for SECONDS.

use std::cell::Cell;
use std::net::{Ipv4Addr, SocketAddr};
use std::rc::Rc;
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};

fn usage() -> ! {
    eprintln!("usage: brisk-load echo ADDR text|frame CONNECTIONS WINDOW SIZE SECONDS | hold ADDR CONNECTIONS SECONDS [SOURCE_IPS]");
    std::process::exit(2)
}

fn arg<T: std::str::FromStr>(args: &[String], i: usize) -> T {
    args.get(i)
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| usage())
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let local = tokio::task::LocalSet::new();
    match args.get(1).map(String::as_str) {
        Some("echo") => local.block_on(
            &rt,
            echo(
                arg(&args, 2),
                args.get(3).cloned().unwrap_or_else(|| usage()),
                arg(&args, 4),
                arg(&args, 5),
                arg(&args, 6),
                arg(&args, 7),
            ),
        ),
        Some("hold") => local.block_on(
            &rt,
            hold(
                arg(&args, 2),
                arg(&args, 3),
                arg(&args, 4),
                args.get(5).and_then(|v| v.parse().ok()).unwrap_or(1),
            ),
        ),
        _ => usage(),
    }
}

fn encode(proto: &str, size: usize) -> Vec<u8> {
    match proto {
        "text" => {
            let mut m = vec![b'x'; size];
            m.push(b'\n');
            m
        }
        "frame" => {
            let mut m = ((size + 4) as u32).to_be_bytes().to_vec();
            m.extend(vec![b'x'; size]);
            m
        }
        _ => usage(),
    }
}

async fn echo(
    addr: SocketAddr,
    proto: String,
    conns: usize,
    window: usize,
    size: usize,
    secs: u64,
) {
    let msg = Rc::new(encode(&proto, size));
    let done = Rc::new(Cell::new(0u64));
    let deadline = Instant::now() + Duration::from_secs(secs);
    let mut tasks = Vec::new();
    let start = Instant::now();
    for _ in 0..conns {
        let (msg, done) = (msg.clone(), done.clone());
        tasks.push(tokio::task::spawn_local(async move {
            let mut s = TcpStream::connect(addr).await.expect("connect");
            s.set_nodelay(true).unwrap();
            let batch: Vec<u8> = msg
                .iter()
                .copied()
                .cycle()
                .take(msg.len() * window)
                .collect();
            let mut buf = vec![0u8; batch.len()];
            while Instant::now() < deadline {
                s.write_all(&batch).await.expect("write");
                s.read_exact(&mut buf).await.expect("read");
                done.set(done.get() + window as u64);
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let elapsed = start.elapsed().as_secs_f64();
    println!(
        "{{\"messages\":{},\"seconds\":{:.3},\"msgs_per_s\":{:.0}}}",
        done.get(),
        elapsed,
        done.get() as f64 / elapsed
    );
}

async fn hold(addr: SocketAddr, conns: usize, secs: u64, sources: u8) {
    let mut held = Vec::with_capacity(conns);
    let mut failed = 0;
    for i in 0..conns {
        let src = Ipv4Addr::new(127, 0, 0, 1 + (i % sources.max(1) as usize) as u8);
        let sock = TcpSocket::new_v4().unwrap();
        sock.bind(SocketAddr::new(src.into(), 0)).unwrap();
        match sock.connect(addr).await {
            Ok(s) => held.push(s),
            Err(_) => failed += 1,
        }
    }
    println!("ready {} failed {failed}", held.len());
    tokio::time::sleep(Duration::from_secs(secs)).await;
}
