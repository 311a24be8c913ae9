//! `brisk::http::client::HttpClient` against a real upstream on loopback (a small HTTP/1.1
//! server written here on raw sockets, so that it can also hang, lie and misbehave, and over
//! rustls for HTTPS): connections are reused, timeouts and limits hold, redirects are
//! followed only when asked, `multi` keeps order and each request's own error.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use brisk::http::client::{ClientError, ClientOptions, HttpClient};
use brisk::http::IntoResponse;
use brisk_testkit::*;
use http::StatusCode;

/// An upstream on a loopback port: one thread per connection, keep-alive, counting the
/// connections it accepted. Paths:
/// `/hello`; `/method` (answers with the method and body); `/agent` (the User-Agent);
/// `/big` (1 MiB with Content-Length); `/chunked-big` (1 MiB chunked, no length);
/// `/headers` (the names of the request's headers); `/elsewhere/HOST:PORT/PATH` (302 to
/// `http://HOST:PORT/PATH`); `/hang` (never answers); `/slow` (answers after 300 ms); `/redirect/N` (302 to
/// `/redirect/N-1`, `/redirect/0` is "arrived"); `/see-other` (303 to `/method`);
/// `/garbage` (not HTTP); `/close` (answers and closes).
struct Upstream {
    addr: SocketAddr,
    connections: Arc<AtomicUsize>,
}

impl Upstream {
    fn start() -> Upstream {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let connections = Arc::new(AtomicUsize::new(0));
        let count = connections.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(stream) = stream else { return };
                count.fetch_add(1, Ordering::SeqCst);
                std::thread::spawn(move || serve(stream));
            }
        });
        Upstream { addr, connections }
    }

    fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    fn connections(&self) -> usize {
        self.connections.load(Ordering::SeqCst)
    }
}

/// Answers requests on one connection until it closes.
fn serve(stream: TcpStream) {
    let mut out = stream.try_clone().unwrap();
    let mut reader = BufReader::new(stream);
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).unwrap_or(0) == 0 {
            return;
        }
        let mut parts = line.split_whitespace();
        let (method, path) = (
            parts.next().unwrap_or("").to_string(),
            parts.next().unwrap_or("").to_string(),
        );
        let (mut length, mut agent) = (0usize, String::new());
        let mut names = Vec::new();
        loop {
            let mut header = String::new();
            if reader.read_line(&mut header).unwrap_or(0) == 0 {
                return;
            }
            if header == "\r\n" {
                break;
            }
            let (name, value) = header.split_once(':').unwrap_or((&header, ""));
            names.push(name.to_ascii_lowercase());
            match name.to_ascii_lowercase().as_str() {
                "content-length" => length = value.trim().parse().unwrap(),
                "user-agent" => agent = value.trim().to_string(),
                _ => {}
            }
        }
        let mut body = vec![0; length];
        reader.read_exact(&mut body).unwrap();
        let reply = |status: &str, headers: &str, body: &[u8]| {
            let head = format!(
                "HTTP/1.1 {status}\r\ncontent-length: {}\r\n{headers}\r\n",
                body.len()
            );
            let mut out = &out;
            out.write_all(head.as_bytes())
                .and_then(|()| out.write_all(body))
        };
        let sent = match path.as_str() {
            "/hello" => reply("200 OK", "", b"hello"),
            "/method" => {
                let text = format!("{method} {}", String::from_utf8_lossy(&body));
                reply("200 OK", "", text.as_bytes())
            }
            "/agent" => reply("200 OK", "", agent.as_bytes()),
            "/headers" => reply("200 OK", "", names.join(",").as_bytes()),
            "/big" => reply("200 OK", "", &vec![b'x'; 1 << 20]),
            "/chunked-big" => {
                let mut result =
                    out.write_all(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n");
                for _ in 0..64 {
                    if result.is_ok() {
                        result = write!(out, "4000\r\n{}\r\n", "y".repeat(0x4000));
                    }
                }
                result.and_then(|()| out.write_all(b"0\r\n\r\n"))
            }
            "/hang" => {
                std::thread::sleep(Duration::from_secs(30));
                return;
            }
            "/slow" => {
                std::thread::sleep(Duration::from_millis(300));
                reply("200 OK", "", b"slow")
            }
            "/redirect/0" => reply("200 OK", "", b"arrived"),
            "/see-other" => reply("303 See Other", "location: /method\r\n", b""),
            "/garbage" => {
                let _ = out.write_all(b"THIS IS NOT HTTP\r\n\r\n");
                return;
            }
            "/close" => {
                let _ = reply("200 OK", "connection: close\r\n", b"bye");
                return;
            }
            p if p.starts_with("/elsewhere/") => {
                let (authority, rest) = p["/elsewhere/".len()..].split_once('/').unwrap();
                let location = format!("location: http://{authority}/{rest}\r\n");
                reply("302 Found", &location, b"")
            }
            p if p.starts_with("/redirect/") => {
                let n: u32 = p["/redirect/".len()..].parse().unwrap();
                let location = format!("location: /redirect/{}\r\n", n - 1);
                reply("302 Found", &location, b"")
            }
            _ => reply("404 Not Found", "", b"no such path"),
        };
        if sent.is_err() {
            return;
        }
    }
}

fn client(options: ClientOptions) -> HttpClient {
    HttpClient::new(options)
}

#[test]
fn keep_alive_reuses_one_connection_and_zero_idle_opens_one_per_request() {
    let upstream = Upstream::start();
    let rt = worker_runtime();
    let reused = client(ClientOptions::default());
    rt.block_on(async {
        for _ in 0..20 {
            let resp = reused.get(&upstream.url("/hello")).send().await.unwrap();
            assert_eq!(resp.status(), StatusCode::OK);
            assert_eq!(resp.text(), "hello");
        }
    });
    assert_eq!(
        upstream.connections(),
        1,
        "20 requests in turn share a connection"
    );

    let fresh = client(ClientOptions {
        max_idle_per_host: 0,
        ..ClientOptions::default()
    });
    rt.block_on(async {
        for _ in 0..5 {
            let resp = fresh.get(&upstream.url("/hello")).send().await.unwrap();
            assert_eq!(resp.text(), "hello");
        }
    });
    assert_eq!(upstream.connections(), 6, "one new connection per request");
}

#[test]
fn methods_bodies_and_the_user_agent_reach_the_upstream() {
    let upstream = Upstream::start();
    let c = client(ClientOptions::default());
    worker_runtime().block_on(async {
        let resp = c
            .post(&upstream.url("/method"))
            .json(&serde_json::json!({"a": 1}))
            .send()
            .await
            .unwrap();
        assert_eq!(resp.text(), r#"POST {"a":1}"#);
        let resp = c.delete(&upstream.url("/method")).send().await.unwrap();
        assert_eq!(resp.text(), "DELETE ");
        let resp = c.get(&upstream.url("/agent")).send().await.unwrap();
        assert!(resp.text().starts_with("brisk/"), "{}", resp.text());
        let resp = (c.get(&upstream.url("/agent")))
            .header("user-agent", "mine")
            .send()
            .await
            .unwrap();
        assert_eq!(resp.text(), "mine");
        let resp = c.get(&upstream.url("/nothing")).send().await.unwrap();
        assert_eq!(
            resp.status(),
            StatusCode::NOT_FOUND,
            "a 404 is an answer, not an error"
        );
    });
}

#[test]
fn an_upstream_that_is_down_fails_at_once_with_502() {
    let port = free_port();
    let c = client(ClientOptions::default());
    let rt = worker_runtime();
    each_fails_within(
        &rt,
        5,
        Duration::from_millis(500),
        || c.get(&format!("http://127.0.0.1:{port}/hello")).send(),
        |err| {
            assert!(matches!(err, ClientError::Connect { .. }), "{err:?}");
            assert_eq!(err.status(), StatusCode::BAD_GATEWAY);
            assert!(
                err.to_string().contains(&format!("127.0.0.1:{port}")),
                "{err}"
            );
        },
    );
}

#[test]
fn a_hanging_upstream_times_out_with_504_and_the_next_request_still_works() {
    let upstream = Upstream::start();
    let c = client(ClientOptions {
        timeout: Duration::from_millis(400),
        ..ClientOptions::default()
    });
    worker_runtime().block_on(async {
        let started = Instant::now();
        let err = c.get(&upstream.url("/hang")).send().await.unwrap_err();
        let took = started.elapsed();
        assert!(matches!(err, ClientError::Timeout { .. }), "{err:?}");
        assert!(err.is_timeout());
        assert!(
            took >= Duration::from_millis(400) && took < Duration::from_secs(3),
            "{took:?}"
        );
        let resp = err.into_response();
        assert_eq!(resp.status(), StatusCode::GATEWAY_TIMEOUT);

        // A per-request timeout beats the client's.
        let err = (c.get(&upstream.url("/slow")))
            .timeout(Duration::from_millis(50))
            .send()
            .await
            .unwrap_err();
        assert!(err.is_timeout(), "{err:?}");
        let resp = c.get(&upstream.url("/slow")).send().await.unwrap();
        assert_eq!(resp.text(), "slow");
    });
}

#[test]
fn a_connect_that_takes_too_long_is_a_connect_timeout() {
    // A listener whose backlog is full: further SYNs go unanswered, so connecting hangs.
    let socket = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    socket
        .bind(&"127.0.0.1:0".parse::<SocketAddr>().unwrap().into())
        .unwrap();
    socket.listen(0).unwrap();
    let addr = socket.local_addr().unwrap().as_socket().unwrap();
    let mut fillers = Vec::new();
    let c = client(ClientOptions {
        connect_timeout: Duration::from_millis(300),
        ..ClientOptions::default()
    });
    let rt = worker_runtime();
    // Fill the backlog until a plain connect no longer completes at once.
    let full = poll(Duration::from_secs(5), || match TcpStream::connect_timeout(
        &addr,
        Duration::from_millis(100),
    ) {
        Ok(s) => {
            fillers.push(s);
            None
        }
        Err(_) => Some(()),
    });
    assert!(full.is_some(), "the backlog never filled");
    let started = Instant::now();
    let err = rt
        .block_on(c.get(&format!("http://{addr}/")).send())
        .unwrap_err();
    assert!(matches!(err, ClientError::ConnectTimeout { .. }), "{err:?}");
    assert_eq!(err.status(), StatusCode::GATEWAY_TIMEOUT);
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );
}

#[test]
fn bodies_over_the_limit_are_refused_with_or_without_a_length() {
    let upstream = Upstream::start();
    let c = client(ClientOptions {
        max_body_size: 64 << 10,
        ..ClientOptions::default()
    });
    worker_runtime().block_on(async {
        for path in ["/big", "/chunked-big"] {
            let err = c.get(&upstream.url(path)).send().await.unwrap_err();
            assert!(
                matches!(err, ClientError::BodyTooLarge { limit: 65536, .. }),
                "{path}: {err:?}"
            );
            assert_eq!(err.status(), StatusCode::BAD_GATEWAY);
        }
        let ok = c.get(&upstream.url("/hello")).send().await.unwrap();
        assert_eq!(ok.text(), "hello");
    });
    let roomy = client(ClientOptions::default());
    let resp = worker_runtime()
        .block_on(roomy.get(&upstream.url("/chunked-big")).send())
        .unwrap();
    assert_eq!(resp.body().len(), 1 << 20);
}

#[test]
fn garbage_from_the_upstream_is_a_502_error() {
    let upstream = Upstream::start();
    let c = client(ClientOptions::default());
    worker_runtime().block_on(async {
        let err = c.get(&upstream.url("/garbage")).send().await.unwrap_err();
        assert!(matches!(err, ClientError::Upstream { .. }), "{err:?}");
        assert_eq!(err.into_response().status(), StatusCode::BAD_GATEWAY);
        // A connection the upstream closes after answering is not reused, and the next
        // request gets a new one.
        assert_eq!(
            c.get(&upstream.url("/close")).send().await.unwrap().text(),
            "bye"
        );
        assert_eq!(
            c.get(&upstream.url("/hello")).send().await.unwrap().text(),
            "hello"
        );
    });
}

#[test]
fn redirects_are_returned_unless_the_client_follows_them() {
    let upstream = Upstream::start();
    let plain = client(ClientOptions::default());
    let following = client(ClientOptions {
        max_redirects: 3,
        ..ClientOptions::default()
    });
    worker_runtime().block_on(async {
        let resp = plain
            .get(&upstream.url("/redirect/2"))
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), StatusCode::FOUND);
        assert_eq!(resp.headers()["location"], "/redirect/1");

        let resp = following
            .get(&upstream.url("/redirect/3"))
            .send()
            .await
            .unwrap();
        assert_eq!(resp.text(), "arrived");
        assert_eq!(resp.uri().path(), "/redirect/0");

        let err = following
            .get(&upstream.url("/redirect/4"))
            .send()
            .await
            .unwrap_err();
        assert!(
            matches!(err, ClientError::TooManyRedirects { limit: 3, .. }),
            "{err:?}"
        );

        // 303 after a POST: the next request is a GET without the body.
        let resp = (following.post(&upstream.url("/see-other")))
            .body("secret")
            .send()
            .await
            .unwrap();
        assert_eq!(resp.text(), "GET ");
    });
}

/// A redirect to another host, port or scheme does not take the request's credentials;
/// one to the same origin does.
#[test]
fn credentials_stay_behind_when_a_redirect_leaves_the_origin() {
    let (a, b) = (Upstream::start(), Upstream::start());
    let following = client(ClientOptions {
        max_redirects: 2,
        ..ClientOptions::default()
    });
    worker_runtime().block_on(async {
        let with_credentials = |url: String| {
            following
                .get(&url)
                .header("authorization", "Bearer t0k3n")
                .header("cookie", "session=s3cret")
                .header("proxy-authorization", "Basic cHJveHk=")
                .header("x-trace", "1")
        };
        let elsewhere = a.url(&format!("/elsewhere/{}/headers", b.addr));
        let seen = with_credentials(elsewhere).send().await.unwrap().text();
        assert!(seen.contains("x-trace"), "{seen}");
        for name in ["authorization", "cookie", "proxy-authorization"] {
            assert!(
                !seen.split(',').any(|n| n == name),
                "{name} went along: {seen}"
            );
        }
        let same = a.url(&format!("/elsewhere/{}/headers", a.addr));
        let seen = with_credentials(same).send().await.unwrap().text();
        for name in ["authorization", "cookie", "proxy-authorization"] {
            assert!(
                seen.split(',').any(|n| n == name),
                "{name} was dropped: {seen}"
            );
        }
    });
}

/// With the options that refuse private addresses: a redirect to one (the first request may
/// go to loopback), or any request to one, by address or by a name that resolves to one.
#[test]
fn private_addresses_are_refused_when_asked() {
    let upstream = Upstream::start();
    let port = upstream.addr.port();
    let redirects = client(ClientOptions {
        max_redirects: 2,
        refuse_private_redirects: true,
        ..ClientOptions::default()
    });
    let none = client(ClientOptions {
        max_redirects: 2,
        refuse_private_addresses: true,
        ..ClientOptions::default()
    });
    worker_runtime().block_on(async {
        let resp = redirects.get(&upstream.url("/hello")).send().await.unwrap();
        assert_eq!(resp.text(), "hello");
        for target in [format!("127.0.0.2:{port}"), format!("localhost:{port}")] {
            let away = upstream.url(&format!("/elsewhere/{target}/hello"));
            let err = redirects.get(&away).send().await.unwrap_err();
            assert!(
                matches!(err, ClientError::RefusedAddress { redirect: true, .. }),
                "{target}: {err:?}"
            );
            assert_eq!(err.status(), StatusCode::BAD_GATEWAY);
        }
        for url in [
            format!("http://127.0.0.1:{port}/hello"),
            format!("http://localhost:{port}/hello"),
            format!("http://[::1]:{port}/hello"),
            format!("http://[::ffff:127.0.0.1]:{port}/hello"),
        ] {
            let err = none.get(&url).send().await.unwrap_err();
            assert!(
                matches!(
                    err,
                    ClientError::RefusedAddress {
                        redirect: false,
                        ..
                    }
                ),
                "{url}: {err:?}"
            );
            assert!(err.to_string().contains("private address"), "{err}");
        }
    });
}

/// Errors shown to clients say what failed in general words: no URL, password, query token,
/// header value or upstream address; the error's own text (for the log) hides the password
/// and the query.
#[test]
fn client_errors_carry_no_secrets() {
    let port = free_port();
    let c = client(ClientOptions::default());
    worker_runtime().block_on(async {
        let down = format!("http://user:s3cret@127.0.0.1:{port}/x?token=t0k3n");
        let bad_url = "http://user:s3cret@exa mple.com/x?token=t0k3n";
        let errors = [
            c.get(&down).send().await.unwrap_err(),
            c.get(bad_url).send().await.unwrap_err(),
            (c.get(&down).header("authorization", "Bearer t0k3n\n"))
                .send()
                .await
                .unwrap_err(),
        ];
        for err in errors {
            let logged = err.to_string();
            for secret in ["s3cret", "t0k3n"] {
                assert!(!logged.contains(secret), "{logged}");
            }
            let resp = err.into_response();
            let head = format!("{:?}", resp.headers());
            let body = http_body_util::BodyExt::collect(resp.into_body())
                .await
                .unwrap()
                .to_bytes();
            let shown = format!("{head}{}", String::from_utf8_lossy(&body));
            for secret in [
                "s3cret",
                "t0k3n",
                "127.0.0.1",
                "exa mple",
                &port.to_string(),
            ] {
                assert!(!shown.contains(secret), "{shown}");
            }
        }
    });
}

#[test]
fn multi_keeps_the_order_and_each_requests_own_error() {
    let upstream = Upstream::start();
    let c = client(ClientOptions {
        timeout: Duration::from_millis(1000),
        ..ClientOptions::default()
    });
    let down = free_port();
    worker_runtime().block_on(async {
        let started = Instant::now();
        let results = c
            .multi([
                c.get(&upstream.url("/slow")),
                c.get(&format!("http://127.0.0.1:{down}/")),
                c.get(&upstream.url("/hello")),
                c.get(&upstream.url("/hang")),
                c.get("ftp://example/"),
                c.get(&upstream.url("/slow")),
            ])
            .await;
        let took = started.elapsed();
        assert_eq!(results.len(), 6);
        assert_eq!(results[0].as_ref().unwrap().text(), "slow");
        assert!(
            matches!(results[1], Err(ClientError::Connect { .. })),
            "{:?}",
            results[1]
        );
        assert_eq!(results[2].as_ref().unwrap().text(), "hello");
        assert!(
            matches!(results[3], Err(ClientError::Timeout { .. })),
            "{:?}",
            results[3]
        );
        assert!(
            matches!(results[4], Err(ClientError::InvalidRequest(_))),
            "{:?}",
            results[4]
        );
        assert_eq!(results[5].as_ref().unwrap().text(), "slow");
        // At once, not one after another: both slow ones and the hanging one overlap.
        assert!(took < Duration::from_millis(1900), "{took:?}");
    });
    assert!(
        upstream.connections() >= 2,
        "the slow requests ran on their own connections"
    );
}

#[test]
fn https_goes_through_rustls_and_an_unknown_certificate_is_refused() {
    let cert = rcgen::generate_simple_self_signed(vec!["localhost".into()]).unwrap();
    let der = cert.cert.der().clone();
    let key = rustls_pki_types::PrivateKeyDer::Pkcs8(cert.key_pair.serialize_der().into());
    let config = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_no_client_auth()
    .with_single_cert(vec![der.clone()], key)
    .unwrap();
    let config = Arc::new(config);
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut tcp) = stream else { return };
            let config = config.clone();
            std::thread::spawn(move || {
                let mut tls = rustls::ServerConnection::new(config).unwrap();
                let mut stream = rustls::Stream::new(&mut tls, &mut tcp);
                let mut buf = [0u8; 4096];
                let mut seen = Vec::new();
                while !seen.windows(4).any(|w| w == b"\r\n\r\n") {
                    match stream.read(&mut buf) {
                        Ok(0) | Err(_) => return,
                        Ok(n) => seen.extend_from_slice(&buf[..n]),
                    }
                }
                let _ = stream.write_all(
                    b"HTTP/1.1 200 OK\r\ncontent-length: 6\r\nconnection: close\r\n\r\nsecure",
                );
                let _ = stream.flush();
            });
        }
    });
    let url = format!("https://localhost:{port}/");
    let rt = worker_runtime();
    let trusting = client(ClientOptions {
        extra_roots: vec![der],
        ..ClientOptions::default()
    });
    let resp = rt.block_on(trusting.get(&url).send()).unwrap();
    assert_eq!(resp.text(), "secure");
    let strict = client(ClientOptions::default());
    let err = rt.block_on(strict.get(&url).send()).unwrap_err();
    assert!(matches!(err, ClientError::Connect { .. }), "{err:?}");
    assert!(
        err.to_string().to_lowercase().contains("certificate"),
        "{err}"
    );
}
