//! WebSocket permessage-deflate end to end: negotiation on both listeners, compressed
//! messages both ways with and without client context takeover, clients held to no context
//! takeover, size limits on inflated messages (zip bombs), and broadcast to a mix of
//! compressing and plain members.

use std::io::Write;
use std::net::TcpStream;

use flate2::{Compress, Compression, Decompress, FlushCompress, FlushDecompress};
use tungstenite::{Message, WebSocket};

mod ws_common;
use ws_common::*;
// Ours, not brisk_testkit's frame (a WebSocket's, not a length-prefixed one).
use ws_common::frame;

/// RSV1: the frame starts a compressed message.
const RSV1: u8 = 0x40;

/// What a permessage-deflate client sends: `data` deflated with a sync flush, without the
/// trailing `00 00 ff ff`. `c` keeps its window across calls (context takeover).
fn deflate(c: &mut Compress, data: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(data.len() + 1024);
    let before = c.total_in();
    c.compress_vec(data, &mut out, FlushCompress::Sync).unwrap();
    assert_eq!(c.total_in() - before, data.len() as u64);
    assert!(out.ends_with(&[0, 0, 0xff, 0xff]));
    out.truncate(out.len() - 4);
    out
}

/// Inflates a compressed server message of at most `max` bytes.
fn inflate(payload: &[u8], max: usize) -> Vec<u8> {
    let mut input = payload.to_vec();
    input.extend_from_slice(&[0, 0, 0xff, 0xff]);
    let mut out = Vec::with_capacity(max + 1);
    Decompress::new(false)
        .decompress_vec(&input, &mut out, FlushDecompress::Sync)
        .unwrap();
    out
}

/// Reads one final server frame, which must be compressed (RSV1) if `compressed`, else not:
/// (opcode, payload inflated).
fn read_message(s: &mut TcpStream, compressed: bool) -> (u8, Vec<u8>) {
    let (b0, payload) = read_frame_head(s);
    assert_eq!(b0 & 0x80, 0x80, "final");
    assert_eq!(b0 & RSV1 != 0, compressed, "RSV1 in {b0:#x}");
    match compressed {
        true => (b0 & 0x0f, inflate(&payload, 4 << 20)),
        false => (b0 & 0x0f, payload),
    }
}

/// The `sec-websocket-extensions` value of a response head, if any.
fn extensions(head: &str) -> Option<&str> {
    head.lines()
        .find_map(|l| l.strip_prefix("sec-websocket-extensions:"))
        .map(str::trim)
}

#[test]
fn permessage_deflate_is_negotiated_on_both_listeners() {
    let d = demo(1);
    let base = "permessage-deflate; server_no_context_takeover";
    let cases: [(Option<&str>, Option<String>); 6] = [
        (None, None),
        (Some("x-webkit-deflate-frame"), None),
        (Some("permessage-deflate"), Some(base.into())),
        (
            Some("permessage-deflate; client_max_window_bits"),
            Some(base.into()),
        ),
        // The 8-bit window is declined, the next offer taken with its parameters echoed.
        (
            Some(
                "permessage-deflate; server_max_window_bits=8, permessage-deflate; \
                 client_no_context_takeover; server_max_window_bits=10",
            ),
            Some(format!(
                "{base}; client_no_context_takeover; server_max_window_bits=10"
            )),
        ),
        (Some("permessage-deflate; bogus"), None),
    ];
    for (port, path) in [(d.ws, "/"), (d.http, "/ws")] {
        for (offer, want) in &cases {
            let (mut s, head) = raw_with(port, path, *offer);
            assert_eq!(extensions(&head), want.as_deref(), "{path} {offer:?}");
            // The connection works either way; even a short echo is compressed if agreed.
            s.write_all(&frame(true, 0x1, b"ok", false)).unwrap();
            assert_eq!(read_message(&mut s, want.is_some()), (0x1, b"ok".to_vec()));
        }
    }
}

#[test]
fn compressed_messages_round_trip_with_and_without_client_context_takeover() {
    let d = demo(1);
    let long = |i: usize| format!("message {i}: {}", "compressible words ".repeat(50 + i));
    for (port, path) in [(d.ws, "/"), (d.http, "/ws")] {
        for offer in [
            "permessage-deflate",
            "permessage-deflate; client_no_context_takeover",
        ] {
            let (mut s, _) = raw_with(port, path, Some(offer));
            let takeover = !offer.contains("client_no_context_takeover");
            let mut client = Compress::new(Compression::default(), false);
            for i in 0..3 {
                if !takeover {
                    client.reset();
                }
                let msg = long(i);
                let z = deflate(&mut client, msg.as_bytes());
                assert!(z.len() < msg.len() / 4);
                s.write_all(&frame(true, RSV1 | 0x1, &z, false)).unwrap();
                let echo = read_message(&mut s, true);
                assert_eq!(echo, (0x1, msg.into_bytes()), "{path} {offer}");
            }
            // Fragmented, RSV1 on the first frame only, binary; then an uncompressed short
            // message, whose echo is compressed all the same.
            client.reset();
            let data: Vec<u8> = (0..5000u32).map(|i| (i % 7) as u8).collect();
            let z = deflate(&mut client, &data);
            s.write_all(&frame(false, RSV1 | 0x2, &z[..z.len() / 2], false))
                .unwrap();
            s.write_all(&frame(true, 0x0, &z[z.len() / 2..], false))
                .unwrap();
            assert_eq!(read_message(&mut s, true), (0x2, data));
            s.write_all(&frame(true, 0x1, b"tiny", false)).unwrap();
            assert_eq!(read_message(&mut s, true), (0x1, b"tiny".to_vec()));
        }
    }
}

/// `/chat` holds every compressing client to `client_no_context_takeover`, offered or not, so
/// it keeps no inflater per member: messages compressed on their own are served, and one that
/// refers back to an earlier message (context taken over anyway) is closed with 1007.
#[test]
fn chat_holds_compressing_clients_to_no_context_takeover() {
    let d = demo(1);
    for offer in [
        "permessage-deflate",
        "permessage-deflate; client_no_context_takeover",
    ] {
        let (mut s, head) = raw_with(d.http, "/chat", Some(offer));
        assert_eq!(
            extensions(&head),
            Some("permessage-deflate; server_no_context_takeover; client_no_context_takeover"),
            "{offer}"
        );
        let msg = "the same compressible words ".repeat(20);
        let mut client = Compress::new(Compression::default(), false);
        for _ in 0..2 {
            client.reset();
            let z = deflate(&mut client, msg.as_bytes());
            s.write_all(&frame(true, RSV1 | 0x1, &z, false)).unwrap();
            assert_eq!(read_message(&mut s, true), (0x1, msg.clone().into_bytes()));
        }
        // Without a reset the message is one back-reference into the previous one.
        let z = deflate(&mut client, msg.as_bytes());
        assert!(z.len() < 16, "{} bytes", z.len());
        s.write_all(&frame(true, RSV1 | 0x1, &z, false)).unwrap();
        expect_close(&mut s, 1007);
    }
    // Endpoints that do not ask for it still let clients keep their context (`/ws`).
    let (_, head) = raw_with(d.http, "/ws", Some("permessage-deflate"));
    assert_eq!(
        extensions(&head),
        Some("permessage-deflate; server_no_context_takeover")
    );
}

#[test]
fn deflate_violations_and_zip_bombs_are_closed_and_others_served() {
    let d = demo(1);
    let mut ok = client(d.http, "/ws");
    let check_others = |ok: &mut WebSocket<TcpStream>, name: &str| {
        ok.send(Message::text(name)).unwrap();
        assert_eq!(ok.read().unwrap(), Message::text(name), "after {name}");
    };
    let z = deflate(&mut Compress::new(Compression::default(), false), b"hello");
    let cases: Vec<(&str, Vec<u8>, u16)> = vec![
        ("RSV1 on a ping", frame(true, RSV1 | 0x9, b"", false), 1002),
        (
            "RSV1 on a continuation",
            {
                let mut f = frame(false, 0x1, b"he", false);
                f.extend(frame(true, RSV1, b"llo", false));
                f
            },
            1002,
        ),
        ("RSV2", frame(true, 0x20 | 0x1, b"x", false), 1002),
        (
            "invalid deflate data",
            frame(true, RSV1 | 0x2, &[0xff; 16], false),
            1007,
        ),
        (
            "invalid UTF-8 once inflated",
            {
                let bad = deflate(
                    &mut Compress::new(Compression::default(), false),
                    &[0xc3, 0x28],
                );
                frame(true, RSV1 | 0x1, &bad, false)
            },
            1007,
        ),
        (
            "a valid one for contrast",
            frame(true, RSV1 | 0x1, &z, false),
            0,
        ),
    ];
    for (name, bytes, code) in &cases {
        let (mut s, _) = raw_with(d.http, "/ws", Some("permessage-deflate"));
        s.write_all(bytes).unwrap();
        if *code == 0 {
            assert_eq!(read_message(&mut s, true), (0x1, b"hello".to_vec()));
        } else {
            expect_close(&mut s, *code);
        }
        check_others(&mut ok, name);
    }
    // 17 MiB of zeros deflate to a few KiB: inflating stops at /ws's 16 MiB limit with 1009.
    let bomb = deflate(
        &mut Compress::new(Compression::best(), false),
        &vec![0u8; 17 << 20],
    );
    assert!(bomb.len() < 64 << 10, "{} bytes", bomb.len());
    let (mut s, _) = raw_with(d.http, "/ws", Some("permessage-deflate"));
    s.write_all(&frame(true, RSV1 | 0x2, &bomb, false)).unwrap();
    expect_close(&mut s, 1009);
    check_others(&mut ok, "zip bomb");
    // Under the limit, the same kind of message is fine.
    let (mut s, _) = raw_with(d.http, "/ws", Some("permessage-deflate"));
    let z = deflate(
        &mut Compress::new(Compression::best(), false),
        &vec![0u8; 1 << 20],
    );
    s.write_all(&frame(true, RSV1 | 0x2, &z, false)).unwrap();
    assert_eq!(read_message(&mut s, true), (0x2, vec![0u8; 1 << 20]));
}

#[test]
fn broadcast_sends_compressed_and_plain_frames_to_the_right_members() {
    let d = demo(2);
    let offers = [
        Some("permessage-deflate"),
        None,
        Some("permessage-deflate; client_no_context_takeover"),
        // A smaller server window than the shared compressed frame's: plain frames.
        Some("permessage-deflate; server_max_window_bits=10"),
    ];
    let mut members: Vec<(TcpStream, bool)> = (0..16)
        .map(|i| {
            let offer = offers[i % offers.len()];
            let (s, head) = raw_with(d.http, "/chat", offer);
            let compressed = extensions(&head).is_some_and(|e| !e.contains("window_bits"));
            (s, compressed)
        })
        .collect();
    let status = d.server.status().unwrap();
    let on_http = |w: &&serde_json::Value| w["server"].as_str().unwrap().starts_with("http://");
    let workers = status["workers"].as_array().unwrap();
    let busy = workers
        .iter()
        .filter(on_http)
        .filter(|w| w["connections"] != 0);
    assert_eq!(busy.count(), 2, "members on both workers");
    let long = "everyone gets this, everyone gets this, everyone gets this".repeat(10);
    for msg in [long.as_str(), "short"] {
        // A member that did not negotiate sends it, so the echo is the broadcast's doing.
        members[1]
            .0
            .write_all(&frame(true, 0x1, msg.as_bytes(), false))
            .unwrap();
        let mut compressed_frames = Vec::new();
        for (i, (s, deflate)) in members.iter_mut().enumerate() {
            let (b0, payload) = read_frame_head(s);
            if *deflate {
                assert_eq!(b0, 0x80 | RSV1 | 0x1, "member {i}");
                assert_eq!(inflate(&payload, msg.len()), msg.as_bytes(), "member {i}");
                compressed_frames.push(payload);
            } else {
                assert_eq!((b0, payload), (0x81, msg.as_bytes().to_vec()), "member {i}");
            }
        }
        // Every compressing member, in either worker, got the same bytes.
        compressed_frames.dedup();
        assert!(compressed_frames.len() <= 1);
    }
}
