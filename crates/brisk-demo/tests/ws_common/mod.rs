//! What the WebSocket tests share: the demo they start and the raw frames they speak.
#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::TcpStream;

use brisk_testkit::*;
use tungstenite::WebSocket;

pub(crate) const DEMO: &str = env!("CARGO_BIN_EXE_brisk-demo");

pub(crate) struct Demo {
    pub(crate) server: ServerProcess,
    pub(crate) http: u16,
    pub(crate) ws: u16,
}

pub(crate) fn demo(workers: usize) -> Demo {
    demo_with(workers, &[])
}

/// The demo with `workers` workers per server and `extra` flags.
pub(crate) fn demo_with(workers: usize, extra: &[&str]) -> Demo {
    let (http, ws) = (free_port(), free_port());
    let h = format!("http://127.0.0.1:{http}");
    let w = format!("websocket://127.0.0.1:{ws}");
    let t = format!("text://127.0.0.1:{}", free_port());
    let f = format!("frame://127.0.0.1:{}", free_port());
    let n = workers.to_string();
    let args = [
        "--workers",
        &n,
        "--http",
        &h,
        "--websocket",
        &w,
        "--text",
        &t,
        "--frame",
        &f,
    ];
    let args: Vec<&str> = args.iter().chain(extra).copied().collect();
    let server = ServerProcess::start(DEMO, &args, workers * 4).unwrap();
    Demo { server, http, ws }
}

pub(crate) fn client(port: u16, path: &str) -> WebSocket<TcpStream> {
    let s = connect(port);
    let (ws, resp) =
        tungstenite::client(format!("ws://127.0.0.1:{port}{path}"), s).expect("handshake");
    assert_eq!(resp.status(), 101);
    ws
}

/// A raw, already-handshaken connection for sending hand-made frames.
pub(crate) fn raw(port: u16) -> TcpStream {
    raw_with(port, "/", None).0
}

/// A raw connection to `path`, handshaken offering `extensions` (a
/// `Sec-WebSocket-Extensions` value), and the response head (names lower-case).
pub(crate) fn raw_with(port: u16, path: &str, extensions: Option<&str>) -> (TcpStream, String) {
    let mut s = connect(port);
    let offer = extensions.map_or(String::new(), |e| {
        format!("Sec-WebSocket-Extensions: {e}\r\n")
    });
    s.write_all(format!("GET {path} HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n{offer}\r\n").as_bytes()).unwrap();
    let mut head = Vec::new();
    let mut b = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        s.read_exact(&mut b).unwrap();
        head.push(b[0]);
    }
    let head = String::from_utf8(head).unwrap().to_ascii_lowercase();
    assert!(head.starts_with("http/1.1 101"), "{head}");
    assert!(
        head.contains("sec-websocket-accept: s3pplmbitxaq9kygzzhzrbk+xoo="),
        "{head}"
    );
    (s, head)
}

/// A client frame: FIN + opcode, masked unless `unmasked`.
pub(crate) fn frame(fin: bool, opcode: u8, payload: &[u8], unmasked: bool) -> Vec<u8> {
    let mut f = vec![(if fin { 0x80 } else { 0 }) | opcode];
    let mask_bit = if unmasked { 0 } else { 0x80 };
    match payload.len() {
        n @ 0..=125 => f.push(mask_bit | n as u8),
        n @ 126..=65535 => {
            f.push(mask_bit | 126);
            f.extend_from_slice(&(n as u16).to_be_bytes());
        }
        n => {
            f.push(mask_bit | 127);
            f.extend_from_slice(&(n as u64).to_be_bytes());
        }
    }
    if unmasked {
        f.extend_from_slice(payload);
    } else {
        let mask = [0x11, 0x22, 0x33, 0x44];
        f.extend_from_slice(&mask);
        f.extend(payload.iter().enumerate().map(|(i, b)| b ^ mask[i % 4]));
    }
    f
}

/// Reads one server frame: (opcode, payload).
pub(crate) fn read_frame(s: &mut TcpStream) -> (u8, Vec<u8>) {
    let (b0, payload) = read_frame_head(s);
    (b0 & 0x0f, payload)
}

/// Reads one server frame: (its first byte, with FIN, RSV1 and the opcode; payload).
pub(crate) fn read_frame_head(s: &mut TcpStream) -> (u8, Vec<u8>) {
    let mut h = [0u8; 2];
    s.read_exact(&mut h).unwrap();
    let len = match h[1] & 0x7f {
        126 => {
            let mut l = [0u8; 2];
            s.read_exact(&mut l).unwrap();
            u16::from_be_bytes(l) as usize
        }
        127 => {
            let mut l = [0u8; 8];
            s.read_exact(&mut l).unwrap();
            u64::from_be_bytes(l) as usize
        }
        n => n as usize,
    };
    let mut p = vec![0u8; len];
    s.read_exact(&mut p).unwrap();
    (h[0], p)
}

pub(crate) fn expect_close(s: &mut TcpStream, code: u16) {
    let (op, p) = read_frame(s);
    assert_eq!(op, 8, "a close frame");
    assert_eq!(
        u16::from_be_bytes([p[0], p[1]]),
        code,
        "reason: {}",
        String::from_utf8_lossy(&p[2..])
    );
    let mut b = [0u8; 1];
    assert!(
        matches!(s.read(&mut b), Ok(0) | Err(_)),
        "then the connection closes"
    );
}
