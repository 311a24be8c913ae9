//! WebSocket end to end: echo on `websocket://` and through HTTP upgrades, control frames,
//! the closing handshake, every kind of protocol violation getting its close code, bad
//! handshakes and other pages' origins refused, and broadcast across workers, from the
//! moment a member's handshake is answered. permessage-deflate is in `ws_deflate.rs`, slow
//! members and stalled processes in `ws_backpressure.rs`.

use std::io::{Read, Write};
use std::time::{Duration, Instant};

use brisk_testkit::*;
use tungstenite::Message;

mod ws_common;
use ws_common::*;
// Ours, not brisk_testkit's frames (a WebSocket's, not a length-prefixed one).
use ws_common::{frame, read_frame};

#[test]
fn echo_text_and_binary_on_both_listeners() {
    let d = demo(1);
    for (port, path) in [(d.ws, "/"), (d.http, "/ws")] {
        let mut ws = client(port, path);
        ws.send(Message::text("hello")).unwrap();
        assert_eq!(ws.read().unwrap(), Message::text("hello"));
        ws.send(Message::binary(vec![0u8, 1, 2, 255])).unwrap();
        assert_eq!(ws.read().unwrap(), Message::binary(vec![0u8, 1, 2, 255]));
        let big = "x".repeat(200_000);
        ws.send(Message::text(big.clone())).unwrap();
        assert_eq!(ws.read().unwrap(), Message::text(big));
        ws.close(None).unwrap();
        // The server answers the close and closes the connection.
        loop {
            match ws.read() {
                Ok(Message::Close(_)) => continue,
                Err(tungstenite::Error::ConnectionClosed) => break,
                other => panic!("{path}: {other:?}"),
            }
        }
    }
}

#[test]
fn an_upgrade_after_keep_alive_requests_keeps_the_bytes_that_follow_it() {
    let d = demo(1);
    let mut s = connect(d.http);
    // A plain request, the upgrade, and a first message, all in one write.
    let message = "m".repeat(20_000);
    let mut batch = b"GET / HTTP/1.1\r\nHost: x\r\n\r\nGET /ws HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n".to_vec();
    batch.extend(frame(true, 0x1, message.as_bytes(), false));
    s.write_all(&batch).unwrap();
    let hello = read_response(&mut s);
    assert_eq!(hello.text(), "Hello World");
    let upgraded = read_response_head(&mut s);
    assert_eq!(upgraded.status, 101, "{}", upgraded.head);
    assert_eq!(read_frame(&mut s), (0x1, message.into_bytes()));
}

#[test]
fn fragments_pings_and_the_closing_handshake() {
    let d = demo(1);
    let mut s = raw(d.ws);
    // A text message in three fragments, with a ping in the middle.
    s.write_all(&frame(false, 0x1, "héll".as_bytes(), false))
        .unwrap();
    s.write_all(&frame(true, 0x9, b"are you there", false))
        .unwrap();
    s.write_all(&frame(false, 0x0, "o wo".as_bytes(), false))
        .unwrap();
    s.write_all(&frame(true, 0x0, b"rld", false)).unwrap();
    assert_eq!(read_frame(&mut s), (0xA, b"are you there".to_vec()));
    assert_eq!(read_frame(&mut s), (0x1, "héllo world".as_bytes().to_vec()));
    let mut close = 1000u16.to_be_bytes().to_vec();
    close.extend_from_slice(b"bye");
    s.write_all(&frame(true, 0x8, &close, false)).unwrap();
    expect_close(&mut s, 1000);
}

#[test]
fn protocol_violations_get_their_close_codes_and_are_counted() {
    let d = demo(1);
    let cases: Vec<(&str, Vec<u8>, u16)> = vec![
        ("unmasked client frame", frame(true, 0x1, b"hi", true), 1002),
        (
            "invalid UTF-8 in text",
            frame(true, 0x1, &[0xce, 0xba, 0xff, 0xfe], false),
            1007,
        ),
        (
            "oversized control frame",
            frame(true, 0x9, &[0u8; 126], false),
            1002,
        ),
        (
            "fragmented control frame",
            frame(false, 0x9, b"x", false),
            1002,
        ),
        (
            "RSV1 without permessage-deflate",
            {
                let mut f = frame(true, 0x1, b"x", false);
                f[0] |= 0x40;
                f
            },
            1002,
        ),
        ("unknown opcode", frame(true, 0x3, b"x", false), 1002),
        (
            "continuation without a start",
            frame(true, 0x0, b"x", false),
            1002,
        ),
        (
            "invalid close code",
            frame(true, 0x8, &999u16.to_be_bytes(), false),
            1002,
        ),
    ];
    let mut ok = client(d.ws, "/");
    for (name, bytes, code) in &cases {
        let mut s = raw(d.ws);
        s.write_all(bytes).unwrap();
        let (op, p) = read_frame(&mut s);
        assert_eq!(op, 8, "{name}");
        assert_eq!(u16::from_be_bytes([p[0], p[1]]), *code, "{name}");
        ok.send(Message::text(*name)).unwrap();
        assert_eq!(
            ok.read().unwrap(),
            Message::text(*name),
            "others are served after {name}"
        );
    }
    // A message over the /ws endpoint's 16 MiB limit is refused from its header: 1009.
    let (mut s, _) = raw_with(d.http, "/ws", None);
    let mut hdr = vec![0x82u8, 0x80 | 127];
    hdr.extend_from_slice(&(17u64 << 20).to_be_bytes());
    hdr.extend_from_slice(&[1, 2, 3, 4]);
    s.write_all(&hdr).unwrap();
    expect_close(&mut s, 1009);
    let rejected = d.server.total("rejected").unwrap();
    assert_eq!(rejected, cases.len() as u64 + 1);
}

#[test]
fn bad_handshakes_get_http_errors() {
    let d = demo(1);
    let read_status = |req: &[u8], port: u16| {
        let mut s = connect(port);
        s.write_all(req).unwrap();
        let mut out = String::new();
        let _ = s.read_to_string(&mut out);
        out
    };
    let no_key = b"GET / HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Version: 13\r\n\r\n";
    let v8 = b"GET / HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 8\r\n\r\n";
    let plain = b"GET / HTTP/1.1\r\nHost: x\r\n\r\n";
    assert!(read_status(no_key, d.ws).starts_with("HTTP/1.1 400"));
    let r = read_status(v8, d.ws);
    assert!(
        r.starts_with("HTTP/1.1 426") && r.contains("sec-websocket-version: 13"),
        "{r}"
    );
    assert!(read_status(plain, d.ws).starts_with("HTTP/1.1 400"));
    let no_key_http = b"GET /ws HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Version: 13\r\nConnection: close\r\n\r\n";
    assert!(read_status(no_key_http, d.http).starts_with("HTTP/1.1 400"));
}

/// `/chat` takes handshakes from the demo's own pages (an `Origin` naming the host the client
/// connected to) and from clients that send no `Origin`, and refuses other sites' pages
/// (cross-site WebSocket hijacking) with 403; so does a `websocket://` listener's endpoint.
#[test]
fn chat_refuses_pages_of_other_origins() {
    let d = demo(1);
    let handshake = |origin: Option<&str>| {
        let mut s = connect(d.http);
        let origin = origin.map_or(String::new(), |o| format!("Origin: {o}\r\n"));
        let host = format!("127.0.0.1:{}", d.http);
        s.write_all(format!("GET /chat HTTP/1.1\r\nHost: {host}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n{origin}\r\n").as_bytes()).unwrap();
        read_response_head(&mut s).status
    };
    assert_eq!(
        handshake(Some(&format!("http://127.0.0.1:{}", d.http))),
        101
    );
    assert_eq!(handshake(None), 101, "not a browser");
    assert_eq!(handshake(Some("https://evil.example")), 403);
    assert_eq!(
        handshake(Some("http://127.0.0.1:1")),
        403,
        "another port is another origin"
    );
}

#[test]
fn broadcast_reaches_every_member_in_every_worker_once() {
    let d = demo(2);
    let mut members: Vec<_> = (0..20).map(|_| client(d.http, "/chat")).collect();
    for m in members.iter_mut() {
        m.get_mut()
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
    }
    // Members landed on both HTTP workers (the kernel spreads connections).
    let http = format!("http://127.0.0.1:{}", d.http);
    let per_worker = d.server.connections_of(&http).unwrap();
    assert_eq!(per_worker.len(), 2);
    assert!(per_worker.iter().all(|&n| n > 0), "{per_worker:?}");
    let t0 = Instant::now();
    for (i, m) in members.iter_mut().take(5).enumerate() {
        m.send(Message::text(format!("message {i}"))).unwrap();
    }
    for (k, m) in members.iter_mut().enumerate() {
        let mut got: Vec<String> = (0..5)
            .map(|_| m.read().unwrap().into_text().unwrap().to_string())
            .collect();
        got.sort();
        assert_eq!(
            got,
            (0..5).map(|i| format!("message {i}")).collect::<Vec<_>>(),
            "member {k}"
        );
    }
    assert!(t0.elapsed() < Duration::from_secs(5));
    // Nothing more arrives: each message once.
    members[0]
        .get_mut()
        .set_read_timeout(Some(Duration::from_millis(300)))
        .unwrap();
    assert!(members[0].read().is_err());
}

/// A client that has its `101` may be told to expect a room's messages at once (another
/// client may post the moment it hears this one is in), but the worker serves the upgraded
/// connection, and runs the `on_open` that joins the room, in tasks of their own afterwards.
/// Clients join a room one after another while a publisher posts to it without pause: each
/// gets every message whose sending began after its handshake was answered, once. Before
/// the catch-up at join (`on_open`'s window), this lost messages here in every run.
#[test]
fn a_member_gets_every_broadcast_sent_after_its_handshake_was_answered() {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::{Arc, Mutex};
    let d = demo(2);
    let start = Instant::now();
    // When the sending of message `n` began (pushed before it is sent).
    let sent_at: Arc<Mutex<Vec<Duration>>> = Arc::default();
    let stop = Arc::new(AtomicBool::new(false));
    let mut publisher = client(d.http, "/chat?room=joiners");
    let publishing = {
        let (sent_at, stop) = (sent_at.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut n = 0u64;
            while !stop.load(Ordering::Relaxed) {
                sent_at.lock().unwrap().push(start.elapsed());
                publisher.send(Message::text(n.to_string())).unwrap();
                // Its own message comes back: wait for it before the next. A publisher that
                // outran a loaded server would pile seconds of messages in the socket, each
                // broadcast long after its `sent_at`, and the joiners would wait that long.
                let echo = next_text(&mut publisher, Duration::from_secs(10));
                assert_eq!(echo, Some(n.to_string()), "its own echo");
                n += 1;
                std::thread::sleep(Duration::from_micros(200));
            }
            let _ = publisher.close(None);
        })
    };
    // Each joiner: how many joins, and the messages that should have reached it and did not.
    let joiners: Vec<_> = (0..12)
        .map(|_| {
            let (sent_at, port) = (sent_at.clone(), d.http);
            std::thread::spawn(move || {
                let mut missing = Vec::new();
                for _ in 0..200 {
                    let mut ws = client(port, "/chat?room=joiners");
                    let answered = start.elapsed();
                    let first_due = sent_at.lock().unwrap().partition_point(|&t| t <= answered);
                    let mut got = std::collections::BTreeSet::new();
                    // Read until a message sent 5 ms after the answer has come.
                    loop {
                        let text = next_text(&mut ws, Duration::from_secs(10));
                        let n: usize = text.expect("messages keep coming").parse().unwrap();
                        assert!(got.insert(n), "message {n} came twice");
                        if sent_at.lock().unwrap()[n] > answered + Duration::from_millis(5) {
                            break;
                        }
                    }
                    let last = *got.last().unwrap();
                    missing.extend((first_due..last).filter(|n| !got.contains(n)));
                    let _ = ws.close(None);
                }
                missing
            })
        })
        .collect();
    let missing: Vec<usize> = joiners
        .into_iter()
        .flat_map(|j| j.join().unwrap())
        .collect();
    stop.store(true, Ordering::Relaxed);
    publishing.join().unwrap();
    let dropped = d.server.total("sends_dropped").unwrap();
    assert_eq!(
        dropped, 0,
        "members too slow to read: the test proves nothing"
    );
    assert!(
        missing.is_empty(),
        "{} messages sent after a member's handshake was answered never reached it: {:?}",
        missing.len(),
        &missing[..missing.len().min(20)]
    );
}
