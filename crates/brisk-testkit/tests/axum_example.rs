//! `examples/axum.rs` end to end: an unchanged axum `Router` behind `HttpServer::service`, run
//! as a real master with two workers and spoken to over loopback sockets.
//!
//! The example binary is built by `cargo build --workspace --examples` (scripts/test) or
//! `cargo build -p brisk --features axum,jwt --example axum`, next to this test's own target directory.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::time::Duration;

use brisk_testkit::*;

/// The `axum` example binary: `<target>/<profile>/examples/axum`, beside `deps/` where this
/// test runs from.
fn axum_example() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let profile = exe.parent().unwrap().parent().unwrap();
    let path = profile.join("examples").join("axum");
    assert!(
        path.exists(),
        "{} is missing: build it first with `cargo build -p brisk --features axum,jwt --example axum` \
         (scripts/test runs `cargo build --workspace --examples`)",
        path.display()
    );
    path
}

/// JSON bodies of the example's answers.
trait Json {
    fn json(&self) -> serde_json::Value;
}

impl Json for HttpResponse {
    fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {:?}", self.text()))
    }
}

/// Sends one request on `s` and reads its response.
fn request(
    s: &mut TcpStream,
    method: &str,
    path: &str,
    content_type: Option<&str>,
    body: &[u8],
) -> HttpResponse {
    let mut req = format!("{method} {path} HTTP/1.1\r\nHost: localhost\r\n");
    if let Some(ct) = content_type {
        req.push_str(&format!("Content-Type: {ct}\r\n"));
    }
    if method != "GET" || !body.is_empty() {
        req.push_str(&format!("Content-Length: {}\r\n", body.len()));
    }
    req.push_str("\r\n");
    let mut wire = req.into_bytes();
    wire.extend_from_slice(body);
    s.write_all(&wire).unwrap();
    read_response(s)
}

fn get(s: &mut TcpStream, path: &str) -> HttpResponse {
    request(s, "GET", path, None, b"")
}

fn post_json(s: &mut TcpStream, path: &str, body: &[u8]) -> HttpResponse {
    request(s, "POST", path, Some("application/json"), body)
}

/// Whether the server closed `s` (EOF or reset) within a few seconds.
fn closed(s: &mut TcpStream) -> bool {
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut b = [0u8; 1];
    match s.read(&mut b) {
        Ok(0) => true,
        Err(e) => e.kind() == std::io::ErrorKind::ConnectionReset,
        Ok(_) => false,
    }
}

const MAX_BODY: usize = 64 * 1024;

fn start_example() -> (ServerProcess, u16) {
    start_example_with(&[])
}

/// The example with `extra` arguments.
fn start_example_with(extra: &[&str]) -> (ServerProcess, u16) {
    let port = free_port();
    let listen = format!("http://127.0.0.1:{port}");
    let max = MAX_BODY.to_string();
    let mut args = vec!["--listen", &listen, "--max-body-size", &max];
    args.extend_from_slice(extra);
    let server = ServerProcess::start(axum_example(), &args, 2).unwrap();
    (server, port)
}

#[test]
fn axum_router_serves_routes_extractors_and_rejections_on_brisk_workers() {
    let (mut server, port) = start_example();
    let workers = server.worker_pids().unwrap();
    assert_eq!(workers.len(), 2, "two workers by default");

    // Everything below runs over one keep-alive connection: each rejection leaves it usable.
    let mut s = connect(port);

    let r = get(&mut s, "/");
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.text(), "Hello from axum on Brisk");

    // Path extractor; the JSON names the worker process that answered.
    let r = get(&mut s, "/users/42");
    assert_eq!(r.status, 200, "{r:?}");
    assert!(
        r.header("content-type")
            .is_some_and(|ct| ct.starts_with("application/json")),
        "{r:?}"
    );
    let user = r.json();
    assert_eq!(user["id"], 42, "{user}");
    let worker = user["worker"].as_i64().expect("worker pid") as i32;
    assert!(
        workers.contains(&worker),
        "worker {worker} not in {workers:?}"
    );
    let r = get(&mut s, "/users/not-a-number");
    assert_eq!(r.status, 400, "axum's Path rejection: {r:?}");

    // Json extractor: a round trip, then a malformed body gets axum's own 4xx, and the same
    // connection goes on serving.
    let sent =
        serde_json::json!({"name": "Ada", "tags": ["a", "b"], "n": 1.5, "nested": {"ok": true}});
    let r = post_json(&mut s, "/echo", sent.to_string().as_bytes());
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.json(), sent);
    let r = post_json(&mut s, "/echo", b"{\"name\": ");
    assert!(
        r.status == 400 || r.status == 422,
        "malformed JSON: {r:?} {}",
        r.text()
    );
    assert!(
        r.text().contains("JSON"),
        "axum's rejection text: {:?}",
        r.text()
    );
    let r = request(&mut s, "POST", "/echo", Some("text/plain"), b"{}");
    assert_eq!(r.status, 415, "missing JSON content type: {r:?}");
    let r = post_json(&mut s, "/echo", b"[1,2,3]");
    assert_eq!(r.status, 200, "served after the rejections: {r:?}");
    assert_eq!(r.json(), serde_json::json!([1, 2, 3]));

    // Query extractor.
    let r = get(&mut s, "/query?name=Ada%20Lovelace");
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.text(), "Hello, Ada Lovelace!");
    let r = get(&mut s, "/query");
    assert_eq!(r.status, 400, "missing query field: {r:?}");

    // axum's ConnectInfo extractor: the client's address, as the server saw it.
    let r = get(&mut s, "/whoami");
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.text().trim(), s.local_addr().unwrap().to_string());

    // Router fallbacks.
    let r = get(&mut s, "/nope");
    assert_eq!(r.status, 404, "{r:?}");
    let r = get(&mut s, "/echo");
    assert_eq!(r.status, 405, "{r:?}");

    // A body just under the limit is fine.
    let big = serde_json::Value::String("x".repeat(MAX_BODY - 100));
    let r = post_json(&mut s, "/echo", big.to_string().as_bytes());
    assert_eq!(r.status, 200, "{} bytes", big.to_string().len());
    assert_eq!(r.json(), big);

    // Over the limit by Content-Length: Brisk answers 413 before the router runs, and closes.
    let mut over = connect(port);
    over.write_all(
        format!(
            "POST /echo HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n\
             Content-Length: {}\r\n\r\n",
            MAX_BODY + 1
        )
        .as_bytes(),
    )
    .unwrap();
    let r = read_response(&mut over);
    assert_eq!(r.status, 413, "{r:?} {}", r.text());
    assert_eq!(r.text(), "request body too large\n", "Brisk's own 413");
    assert!(closed(&mut over), "the connection closes after a 413");

    // Over the limit in a chunked body (no length up front): axum's Json extractor hits the
    // limited body and answers 413 itself.
    let mut chunked = connect(port);
    let chunk = vec![b'1'; 16 * 1024];
    let mut wire = b"POST /echo HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n\
                     Transfer-Encoding: chunked\r\n\r\n"
        .to_vec();
    for _ in 0..(MAX_BODY / chunk.len() + 1) {
        wire.extend_from_slice(format!("{:x}\r\n", chunk.len()).as_bytes());
        wire.extend_from_slice(&chunk);
        wire.extend_from_slice(b"\r\n");
    }
    wire.extend_from_slice(b"0\r\n\r\n");
    // The server may stop reading once it has answered; its answer is what counts.
    let _ = chunked.write_all(&wire);
    let r = read_response(&mut chunked);
    assert_eq!(r.status, 413, "{r:?} {}", r.text());
    assert!(
        r.text().contains("length limit exceeded"),
        "axum's 413: {:?}",
        r.text()
    );

    // The first connection and new ones are still served after all of that.
    let r = get(&mut s, "/users/7");
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.json()["id"], 7);
    let mut fresh = connect(port);
    let r = get(&mut fresh, "/");
    assert_eq!(r.text(), "Hello from axum on Brisk");

    // Brisk counted the requests the router handled, and no worker died on the way.
    assert!(server.total("total_request").unwrap() >= 15);
    assert_eq!(server.worker_pids().unwrap(), workers);

    // The control CLI stops the master and its workers.
    let out = server.cli(&["stop"]);
    assert!(
        out.status.success(),
        "stop: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(server.wait_exit(Duration::from_secs(10)).unwrap());
    assert!(
        TcpStream::connect(("127.0.0.1", port)).is_err(),
        "nothing listens after stop"
    );
}

#[test]
fn requests_spread_over_both_workers() {
    let (server, port) = start_example();
    let workers = server.worker_pids().unwrap();
    let mut seen = std::collections::BTreeSet::new();
    // SO_REUSEPORT hashes each new connection to one worker's socket.
    for i in 0..200 {
        let mut s = connect(port);
        let r = get(&mut s, &format!("/users/{i}"));
        assert_eq!(r.status, 200, "{r:?}");
        let user = r.json();
        assert_eq!(user["id"], i);
        seen.insert(user["worker"].as_i64().unwrap() as i32);
        if seen.len() == workers.len() {
            break;
        }
    }
    assert_eq!(
        seen.into_iter().collect::<Vec<_>>(),
        workers,
        "every worker runs the router"
    );
}

#[test]
fn static_files_nested_in_the_router_are_byte_exact() {
    let dir = std::env::temp_dir().join(format!("brisk-axum-static-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("docs")).unwrap();
    // Past the default sendfile threshold (32 KiB) and several sendfile and read chunks'
    // worth of 64 KiB, not a multiple of anything.
    let big = noise(3 * 64 * 1024 + 4321);
    std::fs::write(dir.join("big.bin"), &big).unwrap();
    std::fs::write(dir.join("docs/index.html"), b"<h1>docs</h1>").unwrap();
    let (_server, port) = start_example_with(&["--static-dir", dir.to_str().unwrap()]);

    // Twice on one keep-alive connection: the second comes from the cache's open file.
    let mut s = connect(port);
    for _ in 0..2 {
        let r = get(&mut s, "/static/big.bin");
        assert_eq!(r.status, 200, "{r:?}");
        assert_eq!(r.header("content-length"), Some(&*big.len().to_string()));
        assert_eq!(r.header("accept-ranges"), Some("bytes"));
        assert!(r.body == big, "{} bytes, not the file", r.body.len());
    }
    // A range, across chunk boundaries.
    let wire =
        "GET /static/big.bin HTTP/1.1\r\nHost: localhost\r\nRange: bytes=1000-150000\r\n\r\n";
    s.write_all(wire.as_bytes()).unwrap();
    let r = read_response(&mut s);
    assert_eq!(r.status, 206, "{r:?}");
    let range = format!("bytes 1000-150000/{}", big.len());
    assert_eq!(r.header("content-range"), Some(&*range));
    assert!(r.body[..] == big[1000..=150_000]);
    // The router's own routes, and the file server's answers, on the same connection.
    assert_eq!(get(&mut s, "/").text(), "Hello from axum on Brisk");
    assert_eq!(get(&mut s, "/static/missing.txt").status, 404);
    assert_eq!(get(&mut s, "/static/.hidden").status, 404);
    let r = get(&mut s, "/static/docs");
    assert_eq!(r.status, 301, "{r:?}");
    assert_eq!(r.header("location"), Some("./docs/"));
    assert_eq!(get(&mut s, "/static/docs/").text(), "<h1>docs</h1>");
    let _ = std::fs::remove_dir_all(&dir);
}

/// A WebSocket client of the example's chat room `room` as `user`; the welcome line.
fn chat_client(port: u16, room: &str, user: &str) -> (tungstenite::WebSocket<TcpStream>, String) {
    use tungstenite::client::IntoClientRequest;
    let mut req = format!("ws://127.0.0.1:{port}/rooms/{room}/ws")
        .into_client_request()
        .unwrap();
    req.headers_mut().insert("x-user", user.parse().unwrap());
    let (mut ws, resp) = tungstenite::client(req, connect(port)).expect("handshake");
    assert_eq!(resp.status(), 101);
    ws.get_ref()
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let welcome = ws.read().unwrap().into_text().unwrap().to_string();
    (ws, welcome)
}

/// The worker pid a welcome line names.
fn worker_of(welcome: &str) -> &str {
    welcome
        .rsplit("worker ")
        .next()
        .unwrap()
        .trim_end_matches(')')
}

#[test]
fn with_a_jwt_secret_the_chat_takes_the_user_from_a_bearer_token() {
    let dir = temp_dir("axum-jwt");
    let secret_file = dir.path().join("jwt.secret");
    std::fs::write(&secret_file, "the example's token secret, long enough\n").unwrap();
    let secret_arg = secret_file.display().to_string();
    let (_server, port) = start_example_with(&["--jwt-secret-file", &secret_arg]);
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let token = |sub: &str, exp: u64, secret: &[u8]| {
        let claims = serde_json::json!({ "sub": sub, "exp": exp });
        let key = jsonwebtoken::EncodingKey::from_secret(secret);
        jsonwebtoken::encode(&jsonwebtoken::Header::default(), &claims, &key).unwrap()
    };
    let upgrade = |headers: &[(&'static str, String)]| {
        use tungstenite::client::IntoClientRequest;
        let mut req = format!("ws://127.0.0.1:{port}/rooms/ops/ws")
            .into_client_request()
            .unwrap();
        for (name, value) in headers {
            req.headers_mut().insert(*name, value.parse().unwrap());
        }
        match tungstenite::client(req, connect(port)) {
            Ok((mut ws, _)) => Ok(read_text(&mut ws)),
            Err(tungstenite::HandshakeError::Failure(tungstenite::Error::Http(r))) => {
                let body = String::from_utf8_lossy(r.body().as_deref().unwrap_or_default());
                Err((r.status().as_u16(), body.into_owned()))
            }
            Err(e) => panic!("handshake: {e}"),
        }
    };
    let secret = b"the example's token secret, long enough";
    // A secret too short to sign with (an empty file) fails the start, saying so.
    let empty = dir.path().join("empty.secret");
    std::fs::write(&empty, "").unwrap();
    let empty_arg = empty.display().to_string();
    let log = ServerProcess::start_fails(axum_example(), &["--jwt-secret-file", &empty_arg], &[]);
    assert!(log.contains("it needs at least 32"), "{log}");
    // The token says who the socket is; the x-user header no longer does.
    let welcome = upgrade(&[(
        "authorization",
        format!("Bearer {}", token("ada", now + 600, secret)),
    )]);
    assert!(
        welcome.as_ref().unwrap().starts_with("welcome ada to ops"),
        "{welcome:?}"
    );
    let refused = |headers: &[(&'static str, String)]| upgrade(headers).unwrap_err();
    assert_eq!(
        refused(&[("x-user", "eve".into())]),
        (401, "a bearer token, please\n".into())
    );
    let expired = format!("Bearer {}", token("ada", now - 600, secret));
    assert_eq!(
        refused(&[("authorization", expired)]),
        (401, "the token has expired\n".into())
    );
    let forged = format!("Bearer {}", token("ada", now + 600, b"another secret"));
    assert_eq!(
        refused(&[("authorization", forged)]),
        (401, "the token's signature is not valid\n".into())
    );
}

/// A plain WebSocket client of `path` on `port`.
fn ws_client(port: u16, path: &str) -> tungstenite::WebSocket<TcpStream> {
    let (ws, _) = tungstenite::client(format!("ws://127.0.0.1:{port}{path}"), connect(port))
        .expect("handshake");
    ws.get_ref()
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    ws
}

#[test]
fn the_fanout_route_and_its_plain_listener_reach_every_socket() {
    let (port, plain_port) = (free_port(), free_port());
    let listen = format!("http://127.0.0.1:{port}");
    let plain = format!("websocket://127.0.0.1:{plain_port}");
    let args = ["--listen", &listen, "--fanout-listen", &plain];
    // Two HTTP workers and two of the plain listener.
    let _server = ServerProcess::start(axum_example(), &args, 4).unwrap();
    // Through the router and on the plain listener: the same endpoint, the same group.
    let mut sockets: Vec<_> = (0..4).map(|_| ws_client(port, "/fanout/ws")).collect();
    sockets.push(ws_client(plain_port, "/"));
    // Each socket joins in on_open, after its handshake: all have once a probe reaches all.
    let mut waiting: Vec<usize> = (0..sockets.len()).collect();
    wait_until(Duration::from_secs(10), "every socket in the group", || {
        sockets[0]
            .send(tungstenite::Message::text("probe"))
            .unwrap();
        waiting.retain(|&i| {
            let ws = &mut sockets[i];
            ws.get_ref()
                .set_read_timeout(Some(Duration::from_millis(100)))
                .unwrap();
            let got = matches!(ws.read(), Ok(tungstenite::Message::Text(t)) if t == "probe");
            ws.get_ref()
                .set_read_timeout(Some(Duration::from_secs(10)))
                .unwrap();
            !got
        });
        waiting.is_empty()
    });
    // A message from each reaches all five (probes still in flight are skipped).
    for i in 0..sockets.len() {
        let text = format!("from socket {i}");
        sockets[i]
            .send(tungstenite::Message::text(text.clone()))
            .unwrap();
        for ws in sockets.iter_mut() {
            let got = std::iter::repeat_with(|| read_text(ws))
                .find(|t| t != "probe")
                .unwrap();
            assert_eq!(got, text);
        }
    }
}

/// The next text message on `ws`, within 10 s.
fn read_text(ws: &mut tungstenite::WebSocket<TcpStream>) -> String {
    next_text(ws, Duration::from_secs(10)).expect("a text message within 10 s")
}

#[test]
fn a_websocket_route_in_the_router_knows_its_user_and_reaches_every_worker() {
    let (_server, port) = start_example();
    let (mut ada, welcome) = chat_client(port, "ops", "ada");
    assert!(
        welcome.starts_with("welcome ada to ops (worker "),
        "{welcome}"
    );
    // Bob on the other worker (connections are spread by the kernel: a few tries).
    let (mut bob, bob_welcome) = (0..50)
        .map(|_| chat_client(port, "ops", "bob"))
        .find(|(_, w)| worker_of(w) != worker_of(&welcome))
        .expect("bob never landed on the other worker");
    assert!(
        bob_welcome.starts_with("welcome bob to ops"),
        "{bob_welcome}"
    );

    // What ada says reaches the room on both workers, signed with who the route said she is.
    ada.send(tungstenite::Message::text("hi")).unwrap();
    assert_eq!(read_text(&mut ada), "ada: hi");
    assert_eq!(read_text(&mut bob), "ada: hi");

    // A message to bob's key reaches his socket, whichever worker takes the POST.
    for i in 0..4 {
        let mut s = connect(port);
        let body = format!("ping {i}");
        let r = request(
            &mut s,
            "POST",
            "/users/bob/notify",
            Some("text/plain"),
            body.as_bytes(),
        );
        assert_eq!(r.status, 200, "{r:?}");
        assert_eq!(read_text(&mut bob), body);
    }

    // Bob removed: his sockets close with the app's code wherever they are; ada's stays.
    let mut s = connect(port);
    let r = request(&mut s, "POST", "/users/bob/kick", None, b"");
    assert_eq!(r.status, 200, "{r:?}");
    match bob.read() {
        Ok(tungstenite::Message::Close(Some(frame))) => {
            assert_eq!(u16::from(frame.code), 4003);
            assert_eq!(frame.reason.as_str(), "removed from the chat");
        }
        other => panic!("bob's socket was not closed with 4003: {other:?}"),
    }
    ada.send(tungstenite::Message::text("still here")).unwrap();
    assert_eq!(read_text(&mut ada), "ada: still here");

    // The same room and key as server-sent events, from a route of the router: what the
    // room says and what is sent to the user arrive as `data:` events, on whichever worker
    // the stream landed; kicking the user ends the stream.
    let mut events = connect(port);
    events
        .write_all(b"GET /rooms/ops/events HTTP/1.1\r\nHost: x\r\nx-user: cy\r\n\r\n")
        .unwrap();
    events
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let head = read_response_head(&mut events);
    assert_eq!(
        head.header("content-type"),
        Some("text/event-stream"),
        "{head:?}"
    );
    ada.send(tungstenite::Message::text("to the stream"))
        .unwrap();
    assert_eq!(read_text(&mut ada), "ada: to the stream");
    // The broadcast ada sent just before may still be on its way to the stream's worker
    // (through the master) and arrive first: a subscriber that joins while a message travels
    // may get it.
    let mut first = read_sse_event(&mut events);
    if first.as_deref() == Some("ada: still here") {
        first = read_sse_event(&mut events);
    }
    assert_eq!(first, Some("ada: to the stream".into()));
    let mut s = connect(port);
    let r = request(
        &mut s,
        "POST",
        "/users/cy/notify",
        Some("text/plain"),
        b"line 1\nline 2",
    );
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(read_sse_event(&mut events), Some("line 1\nline 2".into()));
    let mut s = connect(port);
    let r = request(&mut s, "POST", "/users/cy/kick", None, b"");
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(
        read_sse_event_named(&mut events),
        Some((
            Some("close".into()),
            r#"{"code":4003,"reason":"removed from the chat"}"#.into()
        )),
        "the kick's close event"
    );
    assert_eq!(
        read_sse_event(&mut events),
        None,
        "the stream goes on after the kick"
    );

    // No user, no socket: the route's own answer. Not an upgrade: the endpoint's 400.
    let mut s = connect(port);
    let r = request(&mut s, "GET", "/rooms/ops/ws", None, b"");
    assert_eq!(r.status, 401, "{r:?}");
    let mut s = connect(port);
    s.write_all(b"GET /rooms/ops/ws HTTP/1.1\r\nHost: x\r\nx-user: eve\r\n\r\n")
        .unwrap();
    let r = read_response(&mut s);
    assert_eq!(r.status, 400, "{r:?}");
    assert_eq!(r.text(), "expected a WebSocket upgrade\n");
}
