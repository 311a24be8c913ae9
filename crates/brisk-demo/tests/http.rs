//! brisk-demo's HTTP server over real sockets: the endpoints, HTTP/1.1 features, and every
//! kind of bad input getting the right status while the worker keeps serving.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use brisk_testkit::*;

const DEMO: &str = env!("CARGO_BIN_EXE_brisk-demo");

struct Demo {
    server: ServerProcess,
    http: u16,
}

fn demo() -> Demo {
    demo_with(&[])
}

/// [`demo`] with more command-line arguments.
fn demo_with(extra: &[&str]) -> Demo {
    let http = free_port();
    let h = format!("http://127.0.0.1:{http}");
    let t = format!("text://127.0.0.1:{}", free_port());
    let f = format!("frame://127.0.0.1:{}", free_port());
    let w = format!("websocket://127.0.0.1:{}", free_port());
    let server = ServerProcess::start(
        DEMO,
        &[
            "--workers",
            "1",
            "--http",
            &h,
            "--text",
            &t,
            "--frame",
            &f,
            "--websocket",
            &w,
            "--header-read-timeout-ms",
            "1000",
        ]
        .iter()
        .chain(extra)
        .copied()
        .collect::<Vec<_>>(),
        4,
    )
    .unwrap();
    Demo { server, http }
}

/// Sends raw bytes and reads until the server closes or `timeout` passes.
fn exchange(port: u16, request: &[u8], timeout: Duration) -> (String, bool) {
    let mut s = connect(port);
    s.set_read_timeout(Some(timeout)).unwrap();
    s.write_all(request).unwrap();
    read_all(&mut s)
}

/// Reads what arrives; returns it and whether the server closed the connection.
fn read_all(s: &mut TcpStream) -> (String, bool) {
    let mut out = Vec::new();
    let mut buf = [0u8; 65536];
    loop {
        match s.read(&mut buf) {
            Ok(0) => return (String::from_utf8_lossy(&out).into_owned(), true),
            Ok(n) => out.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => {
                return (String::from_utf8_lossy(&out).into_owned(), true)
            }
            Err(_) => return (String::from_utf8_lossy(&out).into_owned(), false),
        }
    }
}

fn status_line(resp: &str) -> &str {
    resp.lines().next().unwrap_or("")
}

#[test]
fn hello_json_head_keep_alive_and_pipelining() {
    let d = demo();
    let (resp, _) = exchange(
        d.http,
        b"GET / HTTP/1.1\r\nHost: x\r\n\r\nGET /json HTTP/1.1\r\nHost: x\r\n\r\nHEAD / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
        Duration::from_secs(5),
    );
    let parts: Vec<&str> = resp.split("HTTP/1.1 ").skip(1).collect();
    assert_eq!(parts.len(), 3, "{resp}");
    assert!(
        parts[0].starts_with("200 OK")
            && parts[0].contains("content-type: text/plain")
            && parts[0].ends_with("\r\n\r\nHello World"),
        "{resp}"
    );
    assert!(
        parts[1].contains("content-type: application/json")
            && parts[1].ends_with(r#"{"message":"Hello, World!"}"#),
        "{resp}"
    );
    assert!(
        parts[2].starts_with("200 OK")
            && parts[2].contains("content-length: 11")
            && parts[2].ends_with("\r\n\r\n"),
        "HEAD has no body: {resp}"
    );
    assert!(parts.iter().all(|p| p.contains("date: ")));
    assert_eq!(d.server.total("total_request").unwrap(), 3);
    // One connection carried all three.
    assert_eq!(d.server.total("accepted").unwrap(), 1);
}

#[test]
fn chunked_bodies_both_ways_and_expect_continue() {
    let d = demo();
    let (resp, _) = exchange(
        d.http,
        b"POST /stream HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n5\r\nhello\r\n7\r\n, world\r\n0\r\n\r\n",
        Duration::from_secs(5),
    );
    assert!(resp.starts_with("HTTP/1.1 200 OK"), "{resp}");
    assert!(
        resp.to_ascii_lowercase()
            .contains("transfer-encoding: chunked"),
        "{resp}"
    );
    let body = resp.split("\r\n\r\n").nth(1).unwrap();
    let decoded: String = body
        .split("\r\n")
        .collect::<Vec<_>>()
        .chunks(2)
        .filter_map(|c| c.get(1).copied())
        .collect();
    assert_eq!(decoded, "hello, world");

    let mut s = connect(d.http);
    s.write_all(b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\nExpect: 100-continue\r\nConnection: close\r\n\r\n").unwrap();
    let mut buf = [0u8; 25];
    s.read_exact(&mut buf).unwrap();
    assert_eq!(&buf, b"HTTP/1.1 100 Continue\r\n\r\n");
    s.write_all(b"ping").unwrap();
    let (rest, _) = read_all(&mut s);
    assert!(
        rest.starts_with("HTTP/1.1 200 OK") && rest.contains("ping"),
        "{rest}"
    );
}

#[test]
fn bad_requests_get_the_right_status_and_the_worker_keeps_serving() {
    let d = demo();
    let cases: &[(&str, &[u8], &str)] = &[
        ("malformed request line", b"GARBAGE\r\n\r\n", "400"),
        (
            "bad header name",
            b"GET / HTTP/1.1\r\nHost: x\r\nBad Header: v\r\n\r\n",
            "400",
        ),
        (
            "two different content-lengths",
            b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\nabcd",
            "400",
        ),
        (
            "oversized headers",
            &[
                b"GET / HTTP/1.1\r\nHost: x\r\nX-Big: ".as_slice(),
                &vec![b'a'; 64 * 1024],
                b"\r\n\r\n",
            ]
            .concat(),
            "431",
        ),
        (
            "too many headers",
            &[
                b"GET / HTTP/1.1\r\n".as_slice(),
                &(0..200)
                    .map(|i| format!("X-{i}: v\r\n"))
                    .collect::<String>()
                    .into_bytes(),
                b"\r\n",
            ]
            .concat(),
            "431",
        ),
        (
            "oversized body",
            b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 11534336\r\n\r\n",
            "413",
        ),
    ];
    let mut rejected = 0;
    for (name, raw, code) in cases {
        let (resp, closed) = exchange(d.http, raw, Duration::from_secs(5));
        assert!(
            status_line(&resp).starts_with(&format!("HTTP/1.1 {code}")),
            "{name}: {resp:?}"
        );
        assert!(closed, "{name}: the connection closes");
        rejected += 1;
        // Everyone else is still served.
        let (ok, _) = exchange(
            d.http,
            b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
            Duration::from_secs(5),
        );
        assert!(ok.ends_with("Hello World"), "after {name}: {ok}");
    }
    assert_eq!(d.server.total("rejected").unwrap(), rejected);
}

#[test]
fn request_smuggling_content_length_with_transfer_encoding_closes_the_connection() {
    // RFC 9112 6.1: with both headers, Transfer-Encoding wins and the server must close the
    // connection after responding, so a smuggled second request is never read.
    let d = demo();
    let (resp, closed) = exchange(
        d.http,
        b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\nGET /json HTTP/1.1\r\nHost: x\r\n\r\n",
        Duration::from_secs(5),
    );
    assert!(closed, "{resp}");
    assert_eq!(
        resp.matches("HTTP/1.1 ").count(),
        1,
        "the smuggled request was not served: {resp}"
    );
    assert!(!resp.contains("Hello, World"), "{resp}");
}

#[test]
fn a_bad_chunk_size_closes_the_connection() {
    let d = demo();
    let (resp, closed) = exchange(
        d.http,
        b"POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nabc\r\n0\r\n\r\n",
        Duration::from_secs(5),
    );
    assert!(closed, "{resp}");
    assert!(status_line(&resp).starts_with("HTTP/1.1 400"), "{resp:?}");
    let (ok, _) = exchange(
        d.http,
        b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
        Duration::from_secs(5),
    );
    assert!(ok.ends_with("Hello World"));
}

#[test]
fn slowloris_gets_408_and_is_closed() {
    let d = demo();
    let mut s = connect(d.http);
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let t0 = Instant::now();
    // One byte every 200 ms: the head never completes within the 1 s limit.
    let mut sent = 0;
    for b in b"GET / HTTP/1.1\r\nHost: slow\r\nX-Slow: ".iter() {
        if s.write_all(&[*b]).is_err() {
            break;
        }
        sent += 1;
        // Pacing, not a wait: the slow client under test.
        std::thread::sleep(Duration::from_millis(200));
        if t0.elapsed() > Duration::from_millis(1500) {
            break;
        }
    }
    let (resp, closed) = read_all(&mut s);
    assert!(
        resp.starts_with("HTTP/1.1 408"),
        "after {sent} bytes: {resp:?}"
    );
    assert!(closed);
    assert!(t0.elapsed() < Duration::from_secs(4));
    assert_eq!(d.server.total("rejected").unwrap(), 1);
}

/// A request body that trickles in, or stops, gets 408 and a close after the body timeout
/// (1 s here), on Brisk's own path (a small body) and through hyper (chunked); a body that
/// comes in time, slowly or not, is answered.
#[test]
fn a_trickled_or_stalled_body_gets_408_and_is_closed() {
    let d = demo_with(&["--body-read-timeout-ms", "1000"]);
    let heads: [&[u8]; 2] = [
        b"POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: 100\r\n\r\n",
        b"POST /echo HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n64\r\n",
    ];
    for head in heads {
        let rejected = d.server.total("rejected").unwrap();
        // Trickled: a byte every 200 ms, for longer than the timeout.
        let mut s = connect(d.http);
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        s.write_all(head).unwrap();
        let t0 = Instant::now();
        while t0.elapsed() < Duration::from_millis(2500) {
            if s.write_all(b"x").is_err() {
                break;
            }
            // Pacing, not a wait: the slow client under test.
            std::thread::sleep(Duration::from_millis(200));
        }
        let (resp, closed) = read_all(&mut s);
        let head_text = String::from_utf8_lossy(head);
        assert!(resp.starts_with("HTTP/1.1 408"), "{head_text}: {resp:?}");
        assert!(closed);
        // Stalled: half the body, then nothing.
        let (resp, closed) = exchange(
            d.http,
            &[head, &b"half"[..]].concat(),
            Duration::from_secs(5),
        );
        assert!(resp.starts_with("HTTP/1.1 408"), "{head_text}: {resp:?}");
        assert!(closed);
        assert_eq!(d.server.total("rejected").unwrap(), rejected + 2);
    }
    // A body that takes longer than the timeout but keeps coming at more than 4 KiB/s earns
    // its time: 64 KiB over about 1.6 s.
    let mut s = connect(d.http);
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    s.write_all(b"POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: 65536\r\n\r\n")
        .unwrap();
    for _ in 0..8 {
        s.write_all(&[b'y'; 8192]).unwrap();
        std::thread::sleep(Duration::from_millis(200));
    }
    let (head, body) = read_http_response(&mut s);
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    assert_eq!(body.len(), 65536);
}

/// Reads one response with a Content-Length body; returns the status line and the body.
fn read_one(s: &mut TcpStream) -> (String, String) {
    let (head, body) = read_http_response(s);
    (
        status_line(&head).to_string(),
        String::from_utf8(body).unwrap(),
    )
}

#[test]
fn only_request_heads_are_timed() {
    let d = demo();
    // Silent from the start: closed after the 1 s head timeout, without an answer.
    let mut silent = connect(d.http);
    silent
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    let t0 = Instant::now();
    let (resp, closed) = read_all(&mut silent);
    assert!(closed && resp.is_empty(), "{resp:?}");
    assert!(
        t0.elapsed() >= Duration::from_millis(900),
        "{:?}",
        t0.elapsed()
    );

    // A body that trickles in for longer than the head timeout is still a request.
    let mut s = connect(d.http);
    s.write_all(b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\n")
        .unwrap();
    for b in b"0123456789" {
        // Pacing: the body takes 2 s, longer than the head timeout.
        std::thread::sleep(Duration::from_millis(200));
        s.write_all(&[*b]).unwrap();
    }
    assert_eq!(
        read_one(&mut s),
        ("HTTP/1.1 200 OK".into(), "0123456789".into())
    );
    // Idle between requests for longer than the head timeout (the stimulus, not a wait):
    // keep-alive still holds.
    std::thread::sleep(Duration::from_millis(2000));
    s.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    assert_eq!(
        read_one(&mut s),
        ("HTTP/1.1 200 OK".into(), "Hello World".into())
    );
    // A streamed response that reads the request body after the handler returned.
    s.write_all(b"POST /stream HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n")
        .unwrap();
    for _ in 0..8 {
        // Pacing: the request body trickles in after the handler returned.
        std::thread::sleep(Duration::from_millis(200));
        s.write_all(b"1\r\nz\r\n").unwrap();
    }
    s.write_all(b"0\r\n\r\n").unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    while !got.ends_with(b"0\r\n\r\n") {
        let n = s.read(&mut buf).unwrap();
        assert!(n > 0, "closed after {:?}", String::from_utf8_lossy(&got));
        got.extend_from_slice(&buf[..n]);
    }
    let got = String::from_utf8_lossy(&got);
    assert!(got.starts_with("HTTP/1.1 200"), "{got}");
    assert_eq!(got.matches('z').count(), 8, "{got}");
    s.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    assert_eq!(read_one(&mut s).1, "Hello World");
    assert_eq!(
        d.server.total("rejected").unwrap(),
        1,
        "only the silent connection"
    );
}

#[test]
fn http_connections_are_listed_and_graceful_stop_finishes_a_request() {
    let mut d = demo();
    let mut s = connect(d.http);
    s.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    let mut buf = [0u8; 512];
    let n = s.read(&mut buf).unwrap();
    assert!(String::from_utf8_lossy(&buf[..n]).ends_with("Hello World"));
    let out = d.server.cli(&["connections", "--json"]);
    let list: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let http: Vec<_> = list
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["server"].as_str().unwrap().starts_with("http://"))
        .collect();
    assert_eq!(http.len(), 1, "{list}");
    assert!(http[0]["bytes_in"].as_u64().unwrap() > 20);
    // Graceful stop closes the idle keep-alive connection and exits.
    let out = d.server.cli(&["stop", "-g"]);
    assert!(out.status.success());
    assert!(d.server.wait_exit(Duration::from_secs(10)).unwrap());
    let (_, closed) = read_all(&mut s);
    assert!(closed);
}

#[test]
fn static_files_and_server_sent_events() {
    let d = demo();
    let (resp, _) = exchange(
        d.http,
        b"GET /static/index.html HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
        Duration::from_secs(5),
    );
    assert!(
        resp.starts_with("HTTP/1.1 200")
            && resp.contains("text/html")
            && resp.contains("Brisk demo"),
        "{resp}"
    );
    let etag = resp
        .lines()
        .find_map(|l| l.strip_prefix("etag: "))
        .expect("etag")
        .to_string();
    let req = format!("GET /static/index.html HTTP/1.1\r\nHost: x\r\nIf-None-Match: {etag}\r\nConnection: close\r\n\r\n");
    let (resp, _) = exchange(d.http, req.as_bytes(), Duration::from_secs(5));
    assert!(resp.starts_with("HTTP/1.1 304"), "{resp}");
    for bad in [
        "/static/../Cargo.toml",
        "/static/%2e%2e/Cargo.toml",
        "/static/..%2fCargo.toml",
    ] {
        let req = format!("GET {bad} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
        let (resp, _) = exchange(d.http, req.as_bytes(), Duration::from_secs(5));
        assert!(
            resp.starts_with("HTTP/1.1 404") || resp.starts_with("HTTP/1.1 400"),
            "{bad}: {resp}"
        );
        assert!(!resp.contains("[package]"), "{bad} escaped the root");
    }
    let (resp, _) = exchange(
        d.http,
        b"GET /static/%zz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
        Duration::from_secs(5),
    );
    assert!(resp.starts_with("HTTP/1.1 400"), "{resp}");

    let mut s = connect(d.http);
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    s.write_all(b"GET /events HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    let mut got = String::new();
    let mut buf = [0u8; 4096];
    while got.matches("event: tick").count() < 2 {
        let n = s.read(&mut buf).unwrap();
        assert!(n > 0, "stream ended: {got}");
        got.push_str(&String::from_utf8_lossy(&buf[..n]));
    }
    assert!(got.contains("content-type: text/event-stream"), "{got}");
    let ids: Vec<u64> = got
        .lines()
        .filter_map(|l| l.strip_prefix("id: "))
        .map(|v| v.parse().unwrap())
        .collect();
    assert!(ids.len() >= 2 && ids[1] == ids[0] + 1, "{got}");
    assert!(got.contains(r#"data: {"tick":"#), "{got}");
}

#[test]
fn large_static_files_are_byte_exact_with_and_without_range() {
    let root = temp_dir("static-large");
    // Over the 2 MiB cache limit (so streamed), not a multiple of the chunk
    // size; every 4-byte word is its own offset, so a misplaced chunk shows.
    let len = 9 * 1024 * 1024 + 4 * 1234;
    let contents: Vec<u8> = (0..len as u32 / 4)
        .flat_map(|word| (word * 4).to_be_bytes())
        .collect();
    std::fs::write(root.path().join("large.bin"), &contents).unwrap();
    let d = demo_with(&["--static-root", root.path().to_str().unwrap()]);
    let mut s = connect(d.http);
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    // One keep-alive connection: each response must end exactly where
    // Content-Length says.
    for (range, start, end) in [
        (None, 0, len - 1),
        (Some("bytes=1000001-5000000"), 1_000_001, 5_000_000),
        (Some("bytes=131071-131073"), 131_071, 131_073),
        (Some("bytes=-131073"), len - 131_073, len - 1),
        (None, 0, len - 1),
    ] {
        let range_header = range.map(|r| format!("Range: {r}\r\n")).unwrap_or_default();
        let req = format!("GET /static/large.bin HTTP/1.1\r\nHost: x\r\n{range_header}\r\n");
        s.write_all(req.as_bytes()).unwrap();
        let (head, body) = read_http_response(&mut s);
        if range.is_some() {
            assert!(head.starts_with("HTTP/1.1 206"), "{head}");
            let content_range = format!("content-range: bytes {start}-{end}/{len}");
            assert!(head.contains(&content_range), "{head}");
        } else {
            assert!(head.starts_with("HTTP/1.1 200"), "{head}");
        }
        let expected = &contents[start..=end];
        assert_eq!(body.len(), expected.len(), "{range:?}");
        let first_difference = body.iter().zip(expected).position(|(a, b)| a != b);
        assert_eq!(first_difference, None, "{range:?}");
    }
    drop(d);
}

/// `len` bytes in which every 4-byte word is its own offset (xor `salt`), so a misplaced
/// chunk, or another version of the file, shows.
fn words(len: usize, salt: u32) -> Vec<u8> {
    let mut v: Vec<u8> = (0..len.div_ceil(4) as u32)
        .flat_map(|word| ((word * 4) ^ salt).to_be_bytes())
        .collect();
    v.truncate(len);
    v
}

#[test]
fn cached_static_files_over_the_sendfile_threshold_pipelined_ranged_and_head() {
    let root = temp_dir("static-sendfile");
    // Over the sendfile threshold (32 KiB), under the cache limit: several read chunks
    // (128 KiB) when read, one sendfile chunk (2 MiB) when sent.
    let len = 300_017;
    let contents = words(len, 0);
    std::fs::write(root.path().join("big.bin"), &contents).unwrap();
    std::fs::write(root.path().join("small.txt"), b"small").unwrap();
    let d = demo_with(&["--static-root", root.path().to_str().unwrap()]);
    let s = connect(d.http);
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut w = s.try_clone().unwrap();
    let mut r = std::io::BufReader::new(s);
    // Twice: the first round loads the cache, the second is served from the open file.
    for _ in 0..2 {
        // All in one write: a sendfile response between small ones, a range, a HEAD.
        let requests = [
            "GET /static/big.bin HTTP/1.1\r\nHost: x\r\n\r\n",
            "GET / HTTP/1.1\r\nHost: x\r\n\r\n",
            "GET /static/big.bin HTTP/1.1\r\nHost: x\r\nRange: bytes=131071-262145\r\n\r\n",
            "HEAD /static/big.bin HTTP/1.1\r\nHost: x\r\n\r\n",
            "GET /static/small.txt HTTP/1.1\r\nHost: x\r\n\r\n",
            "GET /static/big.bin HTTP/1.1\r\nHost: x\r\nRange: bytes=-5\r\n\r\n",
            "GET /static/big.bin HTTP/1.1\r\nHost: x\r\n\r\n",
        ];
        w.write_all(requests.concat().as_bytes()).unwrap();
        let full = read_response(&mut r);
        assert_eq!(full.status, 200, "{}", full.head);
        assert_eq!(full.header("content-length"), Some("300017"));
        assert!(
            full.body == contents,
            "{} bytes, not the file",
            full.body.len()
        );
        assert_eq!(read_response(&mut r).body, b"Hello World");
        let range = read_response(&mut r);
        assert_eq!(range.status, 206, "{}", range.head);
        let content_range = format!("bytes 131071-262145/{len}");
        assert_eq!(range.header("content-range"), Some(content_range.as_str()));
        assert!(range.body[..] == contents[131_071..=262_145]);
        let head = read_response_head(&mut r);
        assert_eq!(head.status, 200);
        assert_eq!(head.header("content-length"), Some("300017"));
        assert_eq!(head.header("etag"), full.header("etag"));
        assert_eq!(read_response(&mut r).body, b"small");
        assert_eq!(read_response(&mut r).body, contents[len - 5..]);
        assert!(read_response(&mut r).body == contents);
    }
    drop(d);
}

#[test]
fn a_cached_open_file_shrunk_in_place_closes_the_connection_or_is_served_new() {
    let root = temp_dir("static-shrunk");
    let path = root.path().join("big.bin");
    let len = 300_017;
    std::fs::write(&path, words(len, 0)).unwrap();
    let d = demo_with(&["--static-root", root.path().to_str().unwrap()]);
    let get = b"GET /static/big.bin HTTP/1.1\r\nHost: x\r\n\r\n";
    let mut s = connect(d.http);
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(get).unwrap();
    let old = read_response(&mut s);
    assert_eq!(old.body.len(), len);
    // Rewritten in place, shorter, while the open file is cached (revalidated after 1 s).
    let new = words(100_000, 0xdead_beef);
    std::fs::write(&path, &new).unwrap();
    s.write_all(get).unwrap();
    let resp = read_response_head(&mut s);
    let mut body = Vec::new();
    let declared: usize = resp.header("content-length").unwrap().parse().unwrap();
    if declared == new.len() {
        // Noticed already: the new file, with its own validators.
        body.resize(declared, 0);
        s.read_exact(&mut body).unwrap();
        assert_ne!(resp.header("etag"), old.header("etag"));
        assert!(body == new);
    } else {
        // The old length was promised: what the file has, then the connection closes.
        assert_eq!(declared, len);
        match s.read_to_end(&mut body) {
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => {}
            Err(e) => panic!("the connection stays open: {e}"),
        }
        assert!(body.len() < len);
        assert!(
            body[..] == new[..body.len()],
            "bytes that are not the file's"
        );
    }
    // After the revalidation interval, a new connection gets the new file whole.
    let resp = wait_for(Duration::from_secs(10), "the new file served", || {
        let mut s = connect(d.http);
        s.write_all(get).unwrap();
        let mut resp = read_response_head(&mut s);
        // Until then, the old length, and the connection closes inside the body.
        if resp.header("content-length") != Some("100000") {
            return None;
        }
        resp.body = vec![0; 100_000];
        s.read_exact(&mut resp.body).unwrap();
        Some(resp)
    });
    assert_eq!(resp.header("content-length"), Some("100000"));
    assert_ne!(resp.header("etag"), old.header("etag"));
    assert!(resp.body == new);
    drop(d);
}
