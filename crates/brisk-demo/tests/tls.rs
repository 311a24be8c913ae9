//! TLS end to end, with a self-signed certificate made at test time: HTTPS over HTTP/1.1
//! and HTTP/2 (ALPN), `wss://` listeners, WebSocket upgrades on an HTTPS route, and clients
//! that speak no TLS, stall in the handshake or distrust the certificate.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use brisk_testkit::*;
use rustls::pki_types::{CertificateDer, ServerName};
use rustls::{ClientConfig, ClientConnection, RootCertStore, StreamOwned};
use tungstenite::Message;

const DEMO: &str = env!("CARGO_BIN_EXE_brisk-demo");

type TlsStream = StreamOwned<ClientConnection, TcpStream>;

struct Demo {
    server: ServerProcess,
    https: u16,
    wss: u16,
    websocket: u16,
    tls_text: u16,
    cert: CertificateDer<'static>,
    /// Holds the certificate and key (workers load them again on reload); removed on drop,
    /// after the server.
    _dir: TempDir,
}

/// Writes a fresh self-signed certificate for `localhost` and 127.0.0.1 into `dir`.
fn self_signed(dir: &Path) -> (CertificateDer<'static>, String, String) {
    let names = vec!["localhost".to_string(), "127.0.0.1".to_string()];
    let ck = rcgen::generate_simple_self_signed(names).unwrap();
    let cert = dir.join("cert.pem");
    let key = dir.join("key.pem");
    std::fs::write(&cert, ck.cert.pem()).unwrap();
    std::fs::write(&key, ck.key_pair.serialize_pem()).unwrap();
    let path = |p: &Path| p.to_str().unwrap().to_string();
    (ck.cert.der().clone(), path(&cert), path(&key))
}

fn demo() -> Demo {
    demo_with(&[])
}

/// [`demo`] with more command-line arguments.
fn demo_with(extra: &[String]) -> Demo {
    let dir = temp_dir("tls");
    let (cert, cert_path, key_path) = self_signed(dir.path());
    let (https, wss, websocket, tls_text) = (free_port(), free_port(), free_port(), free_port());
    let args = [
        format!("--https=https://127.0.0.1:{https}"),
        format!("--wss=wss://127.0.0.1:{wss}"),
        format!("--tls-text=text://127.0.0.1:{tls_text}"),
        format!("--tls-cert={cert_path}"),
        format!("--tls-key={key_path}"),
        format!("--http=http://127.0.0.1:{}", free_port()),
        format!("--websocket=websocket://127.0.0.1:{websocket}"),
        format!("--text=text://127.0.0.1:{}", free_port()),
        format!("--frame=frame://127.0.0.1:{}", free_port()),
        "--header-read-timeout-ms=500".to_string(),
        "--workers=1".to_string(),
    ];
    let args: Vec<&str> = args.iter().chain(extra).map(String::as_str).collect();
    let server = ServerProcess::start(DEMO, &args, 7).unwrap();
    Demo {
        server,
        https,
        wss,
        websocket,
        tls_text,
        cert,
        _dir: dir,
    }
}

fn client_config(trusted: Option<&CertificateDer<'static>>, alpn: &[&[u8]]) -> Arc<ClientConfig> {
    let mut roots = RootCertStore::empty();
    if let Some(cert) = trusted {
        roots.add(cert.clone()).unwrap();
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    Arc::new(config)
}

/// A TLS client connection to `port`, handshake done, trusting the demo's certificate.
fn tls_connect(d: &Demo, port: u16, alpn: &[&[u8]]) -> TlsStream {
    let config = client_config(Some(&d.cert), alpn);
    let name = ServerName::try_from("localhost").unwrap();
    let session = ClientConnection::new(config, name).unwrap();
    let mut stream = StreamOwned::new(session, connect(port));
    while stream.conn.is_handshaking() {
        stream
            .conn
            .complete_io(&mut stream.sock)
            .expect("TLS handshake");
    }
    stream
}

#[test]
fn https_serves_http1_with_keep_alive() {
    let d = demo();
    for alpn in [&[][..], &[&b"http/1.1"[..]][..]] {
        let mut s = tls_connect(&d, d.https, alpn);
        let picked = s.conn.alpn_protocol().map(<[u8]>::to_vec);
        assert_eq!(picked, (!alpn.is_empty()).then(|| b"http/1.1".to_vec()));
        s.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\nGET /json HTTP/1.1\r\nHost: x\r\n\r\n")
            .unwrap();
        let (head, body) = read_http_response(&mut s);
        assert!(head.starts_with("HTTP/1.1 200"), "{head}");
        assert_eq!(body, b"Hello World");
        let (head, body) = read_http_response(&mut s);
        assert!(head.starts_with("HTTP/1.1 200"), "{head}");
        assert_eq!(body, br#"{"message":"Hello, World!"}"#);
    }
    // A 1 MiB body both ways: many TLS records, partial socket writes.
    let mut s = tls_connect(&d, d.https, &[]);
    let payload = vec![b'z'; 1 << 20];
    let head = format!(
        "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: {}\r\n\r\n",
        payload.len()
    );
    s.write_all(head.as_bytes()).unwrap();
    s.write_all(&payload).unwrap();
    let (head, body) = read_http_response(&mut s);
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    assert!(body == payload, "echoed {} bytes", body.len());
}

#[test]
fn https_refuses_a_request_with_both_lengths_after_answering_the_one_before() {
    let d = demo();
    let mut s = tls_connect(&d, d.https, &[]);
    s.sock
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    // One request, then one with both lengths, pipelined in one write: hyper alone would read
    // the second by Transfer-Encoding and answer it.
    s.write_all(
        b"GET / HTTP/1.1\r\nHost: x\r\n\r\n\
          POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\
          Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
    )
    .unwrap();
    let (head, body) = read_http_response(&mut s);
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    assert_eq!(body, b"Hello World");
    let rest = read_until_closed(&mut s, Duration::from_secs(5));
    let rest = String::from_utf8_lossy(&rest);
    assert!(rest.starts_with("HTTP/1.1 400"), "{rest}");
}

/// An HTTP/2 client connection to the demo's `port` over TLS (`config`), ALPN having picked
/// `h2`; its connection task runs on the current runtime.
async fn h2_sender<B>(
    config: Arc<ClientConfig>,
    port: u16,
) -> hyper::client::conn::http2::SendRequest<B>
where
    B: hyper::body::Body + Send + Unpin + 'static,
    B::Data: Send,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let tcp = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .unwrap();
    let name = ServerName::try_from("localhost").unwrap();
    let tls = tokio_rustls::TlsConnector::from(config)
        .connect(name, tcp)
        .await
        .unwrap();
    assert_eq!(tls.get_ref().1.alpn_protocol(), Some(&b"h2"[..]));
    let io = hyper_util::rt::TokioIo::new(tls);
    let exec = hyper_util::rt::TokioExecutor::new();
    let (sender, conn) = hyper::client::conn::http2::handshake(exec, io)
        .await
        .unwrap();
    tokio::spawn(conn);
    sender
}

#[test]
fn https_speaks_http2_when_alpn_picks_it() {
    let d = demo();
    let config = client_config(Some(&d.cert), &[b"h2", b"http/1.1"]);
    let port = d.https;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async move {
        let mut sender = h2_sender(config, port).await;
        // Several streams at once on one connection.
        let paths = ["/", "/json", "/static/index.html", "/missing"];
        let requests = paths.map(|path| {
            let req = http::Request::get(format!("https://localhost{path}"))
                .body(http_body_util::Empty::<bytes::Bytes>::new())
                .unwrap();
            sender.send_request(req)
        });
        let mut answers = Vec::new();
        for r in requests {
            let resp = r.await.unwrap();
            assert_eq!(resp.version(), http::Version::HTTP_2);
            let status = resp.status().as_u16();
            let body = http_body_util::BodyExt::collect(resp.into_body())
                .await
                .unwrap();
            answers.push((status, body.to_bytes()));
        }
        assert_eq!(answers[0], (200, bytes::Bytes::from_static(b"Hello World")));
        assert_eq!(answers[1].1, &br#"{"message":"Hello, World!"}"#[..]);
        assert_eq!(answers[2].0, 200);
        assert!(!answers[2].1.is_empty());
        assert_eq!(answers[3].0, 404);
    });
    assert!(d.server.total("total_request").unwrap() >= 4);
}

fn wss_client(d: &Demo, port: u16, path: &str) -> tungstenite::WebSocket<TlsStream> {
    let stream = tls_connect(d, port, &[b"http/1.1"]);
    let (ws, resp) = tungstenite::client(format!("wss://localhost:{port}{path}"), stream)
        .expect("WebSocket handshake over TLS");
    assert_eq!(resp.status(), 101);
    ws
}

fn echo_round_trips(ws: &mut tungstenite::WebSocket<TlsStream>) {
    ws.send(Message::text("hello over TLS")).unwrap();
    assert_eq!(ws.read().unwrap(), Message::text("hello over TLS"));
    // Many messages back to back: several arrive in one read, decrypted together.
    for i in 0..200 {
        ws.write(Message::text(format!("m{i}"))).unwrap();
    }
    ws.flush().unwrap();
    for i in 0..200 {
        assert_eq!(ws.read().unwrap(), Message::text(format!("m{i}")));
    }
    // 4 MiB: hundreds of records each way; the server's writes outrun the socket.
    let big: Vec<u8> = (0..4 << 20).map(|i| (i % 251) as u8).collect();
    ws.send(Message::binary(big.clone())).unwrap();
    match ws.read().unwrap() {
        Message::Binary(b) => assert!(b[..] == big[..], "echoed {} bytes", b.len()),
        other => panic!("expected binary, got {other:?}"),
    }
    ws.close(None).unwrap();
    loop {
        match ws.read() {
            Ok(Message::Close(_)) | Err(tungstenite::Error::ConnectionClosed) => break,
            Ok(_) => {}
            Err(e) => panic!("closing: {e}"),
        }
    }
}

#[test]
fn wss_listener_echoes() {
    let d = demo();
    let mut ws = wss_client(&d, d.wss, "/");
    echo_round_trips(&mut ws);
}

#[test]
fn websocket_upgrade_on_an_https_route() {
    let d = demo();
    let mut ws = wss_client(&d, d.https, "/ws");
    echo_round_trips(&mut ws);
}

/// Waits until the server ends the connection (EOF or reset); panics after `limit`.
fn assert_closed(s: &mut TcpStream, limit: Duration) -> Vec<u8> {
    s.set_read_timeout(Some(limit)).unwrap();
    read_until_closed(s, limit)
}

/// Everything read until the server ends the connection (EOF, reset, or over TLS a close
/// without close_notify); panics after `limit`. The socket's read timeout must be `limit`.
fn read_until_closed(s: &mut impl Read, limit: Duration) -> Vec<u8> {
    let start = Instant::now();
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        let r = s.read(&mut buf);
        assert!(
            start.elapsed() < limit,
            "connection still open after {limit:?}"
        );
        match r {
            Ok(0) | Err(_) => return got,
            Ok(n) => got.extend_from_slice(&buf[..n]),
        }
    }
}

#[test]
fn clients_without_tls_are_refused_and_others_keep_being_served() {
    let d = demo();
    let mut ws = wss_client(&d, d.wss, "/");
    let rejected = d.server.total("rejected").unwrap();
    // Plain HTTP on the HTTPS port and on the wss port: a TLS alert, then close.
    for port in [d.https, d.wss] {
        let mut s = connect(port);
        s.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
        let answer = assert_closed(&mut s, Duration::from_secs(5));
        assert!(
            answer.is_empty() || answer[0] == 0x15,
            "expected nothing or a TLS alert, got {answer:?}"
        );
    }
    // A client that does not trust the certificate gives up; the server is unharmed.
    let config = client_config(None, &[]);
    let session =
        ClientConnection::new(config, ServerName::try_from("localhost").unwrap()).unwrap();
    let mut s = StreamOwned::new(session, connect(d.https));
    assert!(s
        .write_all(b"GET / HTTP/1.1\r\n\r\n")
        .and_then(|_| s.flush())
        .is_err());
    // The established connection and new ones still work.
    ws.send(Message::text("still here")).unwrap();
    assert_eq!(ws.read().unwrap(), Message::text("still here"));
    let mut s = tls_connect(&d, d.https, &[]);
    s.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    assert_eq!(read_http_response(&mut s).1, b"Hello World");
    let after = d.server.total("rejected").unwrap();
    assert!(after >= rejected + 2, "rejected {rejected} -> {after}");
}

/// The workers' `rejected` total once it reaches `want`, or as it is after `limit`: `status`
/// asks every worker, and one that is slow to answer (a loaded CI machine) is left out of
/// that answer.
fn rejected_reaching(d: &Demo, want: u64, limit: Duration) -> u64 {
    poll(limit, || {
        let n = d.server.total("rejected").unwrap_or(0);
        (n >= want).then_some(n)
    })
    .unwrap_or_else(|| d.server.total("rejected").unwrap_or(0))
}

#[test]
fn a_stalled_handshake_is_closed() {
    let d = demo();
    let rejected = d.server.total("rejected").unwrap();
    // Half a ClientHello, then nothing: closed after the demo's handshake timeouts (500 ms
    // for HTTPS; WebSocket and Text listeners count whole seconds, so 1 s).
    let mut stalled = Vec::new();
    for port in [d.https, d.wss, d.tls_text] {
        let mut s = connect(port);
        s.write_all(&[0x16, 0x03, 0x01, 0x02, 0x00, 0x01]).unwrap();
        stalled.push(s);
    }
    // Half an upgrade request on the plain WebSocket listener.
    let mut s = connect(d.websocket);
    s.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n").unwrap();
    stalled.push(s);
    for s in &mut stalled {
        assert_closed(s, Duration::from_secs(5));
    }
    let after = rejected_reaching(&d, rejected + 4, Duration::from_secs(5));
    assert!(after >= rejected + 4, "rejected {rejected} -> {after}");
    let mut s = tls_connect(&d, d.https, &[]);
    s.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    assert_eq!(read_http_response(&mut s).1, b"Hello World");
}

#[test]
fn a_handshake_closed_by_the_head_sweep_is_counted_once() {
    // The head timeout (500 ms) runs out long before the handshake timeout (3 s): the sweep
    // closes the stalled handshake and counts it; the handshake must not time out later
    // and count it again.
    let d = demo_with(&["--tls-handshake-timeout-ms=3000".to_string()]);
    let rejected = d.server.total("rejected").unwrap();
    let started = Instant::now();
    let mut s = connect(d.https);
    s.write_all(&[0x16, 0x03, 0x01, 0x02, 0x00, 0x01]).unwrap();
    assert_closed(&mut s, Duration::from_secs(5));
    let closed_after = started.elapsed();
    assert!(
        closed_after < Duration::from_millis(2500),
        "closed after {closed_after:?}: by the handshake timeout, not the head sweep"
    );
    // Past the handshake timeout, with room for a late second count to show: a window for
    // something that must not happen, so a fixed one.
    std::thread::sleep(Duration::from_millis(3500).saturating_sub(started.elapsed()));
    assert_eq!(
        rejected_reaching(&d, rejected + 2, Duration::from_millis(500)),
        rejected + 1
    );
}

#[test]
fn a_request_head_that_stalls_over_tls_gets_408() {
    let d = demo();
    let rejected = d.server.total("rejected").unwrap();
    // Part of a head, then nothing: 408 through the TLS session after the demo's 500 ms
    // head timeout, then the connection ends.
    let mut stalled = tls_connect(&d, d.https, &[]);
    stalled.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n").unwrap();
    stalled.flush().unwrap();
    // A handshake and no request at all: closed without an answer.
    let mut silent = tls_connect(&d, d.https, &[]);
    let limit = Duration::from_secs(5);
    for s in [&mut stalled, &mut silent] {
        s.sock.set_read_timeout(Some(limit)).unwrap();
    }
    let answer = read_until_closed(&mut stalled, limit);
    let answer = String::from_utf8_lossy(&answer);
    assert!(answer.starts_with("HTTP/1.1 408 "), "{answer:?}");
    assert!(answer.contains("connection: close"), "{answer:?}");
    assert_eq!(read_until_closed(&mut silent, limit), b"");
    assert!(d.server.total("rejected").unwrap() >= rejected + 2);
    // The worker serves the next client as before.
    let mut s = tls_connect(&d, d.https, &[]);
    s.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    assert_eq!(read_http_response(&mut s).1, b"Hello World");
}

/// A request body that stops arriving over TLS gets its 408 through the session too.
#[test]
fn a_request_body_that_stalls_over_tls_gets_408() {
    let d = demo_with(&["--body-read-timeout-ms=500".to_string()]);
    let mut s = tls_connect(&d, d.https, &[]);
    s.write_all(b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\nhalf")
        .unwrap();
    s.flush().unwrap();
    let limit = Duration::from_secs(5);
    s.sock.set_read_timeout(Some(limit)).unwrap();
    let answer = read_until_closed(&mut s, limit);
    let answer = String::from_utf8_lossy(&answer);
    assert!(answer.starts_with("HTTP/1.1 408 "), "{answer:?}");
    let mut s = tls_connect(&d, d.https, &[]);
    s.write_all(b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\n\r\nfull")
        .unwrap();
    assert_eq!(read_http_response(&mut s).1, b"full");
}

/// Issue 66, low finding: an HTTP/2 request body had no timeout, so a client could hold a
/// handler waiting forever on each of its streams. Now a stream's body that stops arriving
/// fails with `BodyTimedOut` (the demo's `/echo` answers 408), and the connection's other
/// streams are served on.
#[test]
fn an_http2_request_body_that_stalls_times_out_and_the_connection_serves_on() {
    let d = demo_with(&["--body-read-timeout-ms=500".to_string()]);
    let config = client_config(Some(&d.cert), &[b"h2"]);
    let port = d.https;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async move {
        let mut sender = h2_sender(config, port).await;
        // A body that sends 4 bytes of 100, then nothing (its sender is kept, not dropped).
        type Frame = Result<hyper::body::Frame<bytes::Bytes>, std::convert::Infallible>;
        let (frames_tx, frames_rx) = tokio::sync::mpsc::channel::<Frame>(4);
        frames_tx
            .send(Ok(hyper::body::Frame::data(bytes::Bytes::from_static(
                b"half",
            ))))
            .await
            .unwrap();
        type Frames = std::pin::Pin<Box<dyn futures_util::Stream<Item = Frame> + Send>>;
        let frames: Frames = Box::pin(futures_util::stream::unfold(
            frames_rx,
            |mut rx| async move { rx.recv().await.map(|frame| (frame, rx)) },
        ));
        let stalled = http_body_util::StreamBody::new(frames);
        let req = http::Request::post("https://localhost/echo")
            .header("content-length", "100")
            .body(stalled)
            .unwrap();
        let started = std::time::Instant::now();
        let resp = tokio::time::timeout(Duration::from_secs(10), sender.send_request(req))
            .await
            .expect("an answer within the body timeout")
            .unwrap();
        assert_eq!(resp.status(), 408);
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "{:?}",
            started.elapsed()
        );
        drop(frames_tx);
        // The same connection serves the next stream.
        let none: Frames = Box::pin(futures_util::stream::empty());
        let req = http::Request::get("https://localhost/")
            .body(http_body_util::StreamBody::new(none))
            .unwrap();
        let resp = sender.send_request(req).await.unwrap();
        assert_eq!(resp.status(), 200);
    });
}

#[test]
fn text_over_tls_echoes_and_a_finished_handshake_outlives_the_timeout() {
    let d = demo();
    let mut s = tls_connect(&d, d.tls_text, &[]);
    s.write_all(b"hello\n").unwrap();
    let mut line = [0u8; 6];
    s.read_exact(&mut line).unwrap();
    assert_eq!(&line, b"hello\n");
    // Longer than the 1 s handshake timeout (the stimulus, not a wait): a connection past
    // its handshake stays.
    std::thread::sleep(Duration::from_millis(2500));
    s.write_all(b"again\n").unwrap();
    s.read_exact(&mut line).unwrap();
    assert_eq!(&line, b"again\n");
}

#[test]
fn static_files_sent_with_sendfile_in_plaintext_are_byte_exact_over_tls() {
    let root = temp_dir("tls-static");
    // A cached open file (over 32 KiB) and a file over the 2 MiB cache limit: file ranges,
    // read in chunks for TLS.
    let word = |salt: u32, len: usize| -> Vec<u8> {
        let mut v: Vec<u8> = (0..len.div_ceil(4) as u32)
            .flat_map(|w| ((w * 4) ^ salt).to_be_bytes())
            .collect();
        v.truncate(len);
        v
    };
    let cached = word(1, 300_017);
    let large = word(2, 3 * 1024 * 1024 + 5);
    std::fs::write(root.path().join("cached.bin"), &cached).unwrap();
    std::fs::write(root.path().join("large.bin"), &large).unwrap();
    let d = demo_with(&[format!("--static-root={}", root.path().display())]);
    let mut s = tls_connect(&d, d.https, &[]);
    for _ in 0..2 {
        for (path, contents) in [("cached.bin", &cached), ("large.bin", &large)] {
            let req = format!("GET /static/{path} HTTP/1.1\r\nHost: x\r\n\r\n");
            s.write_all(req.as_bytes()).unwrap();
            let (head, body) = read_http_response(&mut s);
            assert!(head.starts_with("HTTP/1.1 200"), "{head}");
            assert!(
                body == *contents,
                "{path}: {} bytes, not the file",
                body.len()
            );
            let req = format!(
                "GET /static/{path} HTTP/1.1\r\nHost: x\r\nRange: bytes=131000-200000\r\n\r\n"
            );
            s.write_all(req.as_bytes()).unwrap();
            let (head, body) = read_http_response(&mut s);
            assert!(head.starts_with("HTTP/1.1 206"), "{head}");
            assert!(body[..] == contents[131_000..=200_000], "{path}");
        }
    }
    drop(d);
}
