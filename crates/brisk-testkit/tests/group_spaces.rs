//! Group spaces (issue 67): an app that joins whatever group its client names, and tags a
//! socket with whatever key it names, beside the channel protocol (`brisk-groups`). When
//! groups were one string namespace, a client that asked for the group `brisk.ch:secret:x`
//! received channel `secret:x`'s publications past its namespace's permissions, and one
//! tagged `brisk.ch.user:guest` was closed by `disconnect("guest")`. Each socket here sends a
//! message to its own group after the server published and disconnected: the first thing it
//! reads must be that message, not a publication and not a close.

use std::io::Write;
use std::net::TcpStream;
use std::time::Duration;

use brisk_testkit::*;
use tungstenite::{Message, WebSocket};

const GROUPS: &str = env!("CARGO_BIN_EXE_brisk-groups");

fn start() -> (ServerProcess, u16) {
    let port = free_port();
    let http = format!("http://127.0.0.1:{port}");
    (
        ServerProcess::start(GROUPS, &["--http", &http], 1).unwrap(),
        port,
    )
}

/// A socket of `/room` with `query`, once the server says it joined.
fn room(port: u16, query: &str) -> WebSocket<TcpStream> {
    let url = format!("ws://127.0.0.1:{port}/room?{query}");
    let (mut ws, resp) = tungstenite::client(url, connect(port)).expect("handshake");
    assert_eq!(resp.status(), 101);
    assert_eq!(next_message(&mut ws).as_deref(), Some("joined"), "{query}");
    ws
}

/// The next text message; panics on a close or a binary message, naming it.
fn next_message(ws: &mut WebSocket<TcpStream>) -> Option<String> {
    ws.get_ref()
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    loop {
        match ws.read() {
            Ok(Message::Text(t)) => return Some(t.to_string()),
            Ok(Message::Close(frame)) => panic!("the server closed the socket: {frame:?}"),
            Ok(Message::Binary(b)) => panic!("a binary message: {b:?}"),
            Ok(_) => {}
            Err(e) if timed_out(&e) => return None,
            Err(e) => panic!("{e}"),
        }
    }
}

/// `POST path` with no body: the status and the body.
fn post(port: u16, path: &str) -> (u16, String) {
    let mut s = connect(port);
    write!(
        s,
        "POST {path} HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"
    )
    .unwrap();
    let r = read_response(&mut s);
    (r.status, r.text())
}

#[test]
fn names_a_client_chooses_never_reach_the_channel_protocols_groups() {
    let (_server, port) = start();
    // Every form a channel's or a channel user's group took when groups were one string
    // space, asked for as the app's group, or as its key.
    let asked = [
        "group=brisk.ch%3Asecret%3Ax",
        "group=brisk.chm%3Asecret%3Ax",
        "group=brisk.key%3Abrisk.ch.user%3Aguest",
        "group=plain&key=brisk.ch.user%3Aguest",
        "group=plain-too&key=brisk.key%3Abrisk.ch.user%3Aguest",
    ];
    let mut sockets: Vec<_> = asked.iter().map(|q| (q, room(port, q))).collect();

    let (status, body) = post(port, "/publish?channel=secret:x");
    assert_eq!((status, body.as_str()), (200, "published"));
    let (status, body) = post(port, "/disconnect?user=guest");
    assert_eq!(
        (status, body.as_str()),
        (200, "disconnected 0"),
        "no socket here is a channel user's"
    );

    // Broadcasts of one worker reach a member in the order they were made: had the
    // publication or the close reached a socket, it would come before its own message.
    for (i, (query, ws)) in sockets.iter_mut().enumerate() {
        let own = format!("own message {i}");
        ws.send(Message::text(own.clone())).unwrap();
        assert_eq!(next_message(ws), Some(own), "{query}");
    }
}

#[test]
fn an_apps_group_named_like_a_channels_is_the_apps_own() {
    let (_server, port) = start();
    // Two members of the app's group named like a channel's: each hears the other.
    let mut first = room(port, "group=brisk.ch%3Asecret%3Ax");
    let mut second = room(port, "group=brisk.ch%3Asecret%3Ax");
    first.send(Message::text("hello")).unwrap();
    assert_eq!(next_message(&mut first).as_deref(), Some("hello"));
    assert_eq!(next_message(&mut second).as_deref(), Some("hello"));
}
