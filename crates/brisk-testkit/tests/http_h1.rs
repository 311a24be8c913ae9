//! Brisk's own HTTP/1.1 path (requests without a body or with a small one) and its handover to
//! hyper (the first request it does not take), over real sockets against the fixture's
//! `--http` routes.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use brisk_testkit::*;

const FIXTURE: &str = env!("CARGO_BIN_EXE_brisk-fixture");

fn http_server(extra: &[&str]) -> (ServerProcess, u16) {
    let port = free_port();
    let addr = format!("http://127.0.0.1:{port}");
    let mut args = vec!["--http", addr.as_str()];
    args.extend_from_slice(extra);
    (ServerProcess::start(FIXTURE, &args, 1).unwrap(), port)
}

fn get(path: &str) -> String {
    format!("GET {path} HTTP/1.1\r\nHost: x\r\n\r\n")
}

/// Reads until the server closes the connection; returns what came.
fn read_to_close(s: &mut TcpStream) -> Vec<u8> {
    let mut rest = Vec::new();
    match s.read_to_end(&mut rest) {
        Ok(_) => rest,
        Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => rest,
        Err(e) => panic!("the connection stays open: {e} after {rest:?}"),
    }
}

#[test]
fn keep_alive_requests_hand_over_to_hyper_at_the_first_streamed_body_and_stay_in_order() {
    let (server, port) = http_server(&[]);
    // All in one write: requests for Brisk's path (one with a small body), then a chunked
    // one (hyper's), then one that hyper, now owning the connection, serves too.
    let mut s = connect(port);
    let batch = [
        get("/one"),
        "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello".to_string(),
        "POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n"
            .to_string(),
        get("/two"),
    ]
    .concat();
    s.write_all(batch.as_bytes()).unwrap();
    for want in ["ok /one", "hello", "abc", "ok /two"] {
        let r = read_response(&mut s);
        assert_eq!((r.status, r.text().as_str()), (200, want), "{}", r.head);
        assert!(r.header("date").is_some());
    }
    // One at a time on a new connection: a body too big to hold goes to hyper, streamed.
    let mut s = connect(port);
    s.write_all(get("/a").as_bytes()).unwrap();
    assert_eq!(read_response(&mut s).text(), "ok /a");
    let big = "b".repeat(100_000);
    let post = format!(
        "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: {}\r\n\r\n",
        big.len()
    );
    s.write_all(post.as_bytes()).unwrap();
    s.write_all(big.as_bytes()).unwrap();
    assert_eq!(read_response(&mut s).text(), big);
    s.write_all(get("/b").as_bytes()).unwrap();
    assert_eq!(read_response(&mut s).text(), "ok /b");
    assert_eq!(server.total("total_request").unwrap(), 7);
    assert_eq!(server.total("accepted").unwrap(), 2);
}

#[test]
fn a_small_body_sent_in_pieces_arrives_whole() {
    let (_server, port) = http_server(&[]);
    let mut s = connect(port);
    s.write_all(b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 2000\r\n\r\n")
        .unwrap();
    let body: Vec<u8> = (0..2000).map(|i| b'a' + (i % 26) as u8).collect();
    for piece in body.chunks(300) {
        // Pacing, not a wait: each piece arrives in a read of its own.
        std::thread::sleep(Duration::from_millis(20));
        s.write_all(piece).unwrap();
    }
    assert_eq!(read_response(&mut s).body, body);
    s.write_all(get("/next").as_bytes()).unwrap();
    assert_eq!(read_response(&mut s).text(), "ok /next");
}

#[test]
fn request_headers_reach_the_handler_and_a_requested_close_is_honoured() {
    let (_server, port) = http_server(&[]);
    let mut s = connect(port);
    s.write_all(b"GET /h HTTP/1.1\r\nHost: x\r\nX-A: 1\r\nX-A: 2\r\nAccept: */*\r\nConnection: close\r\n\r\nGET /never HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    let r = read_response(&mut s);
    assert_eq!(r.header("x-headers"), Some("5"), "{}", r.head);
    assert_eq!(r.header("connection"), Some("close"), "{}", r.head);
    let rest = read_to_close(&mut s);
    assert!(rest.is_empty(), "nothing after a close: {rest:?}");
}

#[test]
fn bodies_of_unknown_length_are_chunked_and_the_head_is_sent_before_the_body() {
    let (_server, port) = http_server(&[]);
    let mut s = connect(port);
    // The first chunk comes a second after the request: the head must not wait for it.
    s.write_all(get("/chunks?n=3&ms=1000").as_bytes()).unwrap();
    s.set_read_timeout(Some(Duration::from_millis(800)))
        .unwrap();
    let r = read_response_head(&mut s);
    assert_eq!(r.header("transfer-encoding"), Some("chunked"), "{}", r.head);
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let body = read_chunked(&mut s);
    assert_eq!(body, b"chunk 1\nchunk 2\nchunk 3\n");
    // The connection is still good.
    s.write_all(get("/after").as_bytes()).unwrap();
    assert_eq!(read_response(&mut s).text(), "ok /after");
}

#[test]
fn a_streamed_chunk_is_whole_before_the_next_is_produced() {
    // A client that reads whole chunks (size, data, CRLF: an event-stream reader) must not
    // be a chunk behind: each chunk's CRLF goes out while the body waits for the next, for
    // small chunks (staged with their data) and big ones (sent on their own) alike.
    let (_server, port) = http_server(&[]);
    for size in [0usize, 40_000] {
        let mut s = connect(port);
        s.write_all(get(&format!("/chunks?n=2&hold=1&size={size}")).as_bytes())
            .unwrap();
        s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        read_response_head(&mut s);
        // The second chunk is held until asked for: the first must come whole without it.
        let len = usize::from_str_radix(&read_crlf_line(&mut s), 16).unwrap();
        let mut chunk = vec![0u8; len + 2];
        s.read_exact(&mut chunk)
            .unwrap_or_else(|e| panic!("size {size}: the first chunk's end waits: {e}"));
        assert!(chunk.ends_with(b"chunk 1\n\r\n"), "size {size}");
        let mut other = connect(port);
        other.write_all(get("/release-chunk").as_bytes()).unwrap();
        assert_eq!(read_response(&mut other).text(), "released");
        let len = usize::from_str_radix(&read_crlf_line(&mut s), 16).unwrap();
        let mut chunk = vec![0u8; len + 2];
        s.read_exact(&mut chunk).unwrap();
        assert!(chunk.ends_with(b"chunk 2\n\r\n"), "size {size}");
        assert_eq!(read_crlf_line(&mut s), "0");
        assert_eq!(read_crlf_line(&mut s), "");
    }
}

#[test]
fn large_bodies_head_and_bodyless_statuses_keep_the_framing_right() {
    let (_server, port) = http_server(&[]);
    let mut s = connect(port);
    let batch = [
        get("/big"),
        get("/big-chunked"),
        "HEAD /big HTTP/1.1\r\nHost: x\r\n\r\n".to_string(),
        get("/no-content"),
        get("/last"),
    ]
    .concat();
    s.write_all(batch.as_bytes()).unwrap();
    let big = read_response(&mut s);
    assert_eq!(big.body, b"0123456789".repeat(10 * 1024));
    // Framed as the handler said, though the body is in memory.
    let chunked = read_response_head(&mut s);
    assert_eq!(
        chunked.header("transfer-encoding"),
        Some("chunked"),
        "{}",
        chunked.head
    );
    assert_eq!(read_chunked(&mut s), b"0123456789".repeat(10 * 1024));
    let head = read_response_head(&mut s);
    assert_eq!(
        head.header("content-length"),
        Some("102400"),
        "{}",
        head.head
    );
    let none = read_response_head(&mut s);
    assert_eq!(none.status, 204);
    assert_eq!(none.header("content-length"), None, "{}", none.head);
    assert_eq!(read_response(&mut s).text(), "ok /last");
}

#[test]
fn broken_responses_close_only_their_connection() {
    let (server, port) = http_server(&[]);
    // A body shorter than its content-length: the client gets what there is, then a close.
    let mut s = connect(port);
    s.write_all(get("/length-mismatch").as_bytes()).unwrap();
    let r = read_response_head(&mut s);
    assert_eq!(r.header("content-length"), Some("10"), "{}", r.head);
    assert_eq!(read_to_close(&mut s), b"abc");
    // A panic: 500 and a close.
    let mut s = connect(port);
    s.write_all(get("/panic").as_bytes()).unwrap();
    let r = read_response(&mut s);
    assert_eq!(r.status, 500);
    assert_eq!(r.header("connection"), Some("close"));
    assert!(read_to_close(&mut s).is_empty());
    // A panic in the call of the handler, before its future exists: the same.
    let mut s = connect(port);
    s.write_all(get("/panic-at-call").as_bytes()).unwrap();
    let r = read_response(&mut s);
    assert_eq!(r.status, 500);
    assert_eq!(r.header("connection"), Some("close"));
    assert!(read_to_close(&mut s).is_empty());
    // A 1xx from a handler becomes a 500; the connection stays usable.
    let mut s = connect(port);
    s.write_all([get("/early-hints"), get("/fine")].concat().as_bytes())
        .unwrap();
    assert_eq!(read_response(&mut s).status, 500);
    assert_eq!(read_response(&mut s).text(), "ok /fine");
    assert_eq!(server.total("throw_exception").unwrap(), 3);
}

#[test]
fn max_requests_per_connection_closes_after_the_last() {
    let (_server, port) = http_server(&["--max-requests", "2"]);
    let mut s = connect(port);
    s.write_all([get("/1"), get("/2"), get("/3")].concat().as_bytes())
        .unwrap();
    let first = read_response(&mut s);
    assert_eq!(first.header("connection"), None, "{}", first.head);
    let second = read_response(&mut s);
    assert_eq!(second.text(), "ok /2");
    assert_eq!(second.header("connection"), Some("close"));
    assert!(read_to_close(&mut s).is_empty());
}

#[test]
fn http_1_0_keeps_the_connection_only_when_asked_and_never_chunks() {
    let (server, port) = http_server(&[]);
    // `ab -k`: HTTP/1.0 asking for keep-alive, two requests in one write.
    let mut s = connect(port);
    s.write_all(
        b"GET /a HTTP/1.0\r\nConnection: Keep-Alive\r\n\r\nGET /b HTTP/1.0\r\nConnection: keep-alive\r\n\r\n",
    )
    .unwrap();
    for want in ["ok /a", "ok /b"] {
        let r = read_response(&mut s);
        assert!(r.head.starts_with("HTTP/1.0 200 OK\r\n"), "{}", r.head);
        assert_eq!(r.header("connection"), Some("keep-alive"), "{}", r.head);
        assert_eq!(r.text(), want);
    }
    // Plain `ab`: the answer, then the server closes.
    s.write_all(b"GET /c HTTP/1.0\r\n\r\n").unwrap();
    let r = read_response(&mut s);
    assert!(r.head.starts_with("HTTP/1.0 200 OK\r\n"), "{}", r.head);
    assert_eq!(r.text(), "ok /c");
    assert_eq!(read_to_close(&mut s), b"");
    // A streamed body of unknown size is not chunked (HTTP/1.0 has no chunks): it runs until
    // the close, even though the client asked to keep the connection.
    let mut s = connect(port);
    s.write_all(b"GET /chunks?n=3 HTTP/1.0\r\nConnection: keep-alive\r\n\r\n")
        .unwrap();
    let r = read_response_head(&mut s);
    assert!(r.head.starts_with("HTTP/1.0 200 OK\r\n"), "{}", r.head);
    assert!(r.header("transfer-encoding").is_none(), "{}", r.head);
    assert_eq!(read_to_close(&mut s), b"chunk 1\nchunk 2\nchunk 3\n");
    assert_eq!(server.total("total_request").unwrap(), 4);
}
