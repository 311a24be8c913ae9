//! What the channel tests share: the token key, a channel-protocol client, two demo
//! instances on one Redis, and the server API.
#![allow(dead_code)]

use std::collections::VecDeque;
use std::net::TcpStream;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use brisk_testkit::*;
use serde_json::{json, Value as Json};
use tungstenite::{Message, WebSocket};

use super::common::{demo_with, get, request, Demo};

pub(crate) const SECRET: &[u8] = b"tests-channels-secret-0123456789abcdef";

pub(crate) const API_KEY: &str = "tests-api-key-0123456789";

pub(crate) const AUDIENCE: &str = "brisk-demo";

pub(crate) fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

/// A token for `user`, with `extra` claims over the usual ones (`exp` in 10 min, the demo's
/// audience), signed with `secret`.
pub(crate) fn token_with(secret: &[u8], user: &str, extra: Json) -> String {
    let mut claims = json!({ "sub": user, "exp": now() + 600, "aud": AUDIENCE });
    for (k, v) in extra.as_object().unwrap() {
        claims[k] = v.clone();
    }
    brisk::jwt::hs256_token(secret, &claims).unwrap()
}

/// A channel-protocol client: commands numbered, pushes kept until asked for.
pub(crate) struct Client {
    pub(crate) ws: WebSocket<TcpStream>,
    pub(crate) next_id: u64,
    pub(crate) pushes: VecDeque<Json>,
}

pub(crate) enum Read {
    Json(Json),
    Closed(Option<(u16, String)>),
    Nothing,
}

impl Client {
    pub(crate) fn open(d: &Demo) -> Client {
        let url = format!("ws://127.0.0.1:{}/connection/websocket", d.http);
        let (ws, resp) = tungstenite::client(url, connect(d.http)).expect("handshake");
        assert_eq!(resp.status(), 101);
        Client {
            ws,
            next_id: 1,
            pushes: VecDeque::new(),
        }
    }

    /// Opened and connected as `user`, with a token of the demo's try-out endpoint.
    pub(crate) fn connected(d: &Demo, user: &str) -> Client {
        let r = get(d.http, &format!("/connection/token?user={user}"));
        assert_eq!(r.status, 200);
        let t: Json = serde_json::from_slice(&r.body).unwrap();
        let mut c = Client::open(d);
        let r = c.call("connect", json!({ "token": t["token"] }));
        assert_eq!(r["result"]["user"], user, "{r}");
        c
    }

    pub(crate) fn send(&mut self, name: &str, body: Json) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        let mut cmd = json!({ "id": id });
        cmd[name] = body;
        self.ws.send(Message::text(cmd.to_string())).unwrap();
        id
    }

    pub(crate) fn read(&mut self, limit: Duration) -> Read {
        self.ws.get_ref().set_read_timeout(Some(limit)).unwrap();
        loop {
            match self.ws.read() {
                Ok(Message::Text(t)) => {
                    return Read::Json(
                        serde_json::from_str(&t).unwrap_or_else(|e| panic!("{e}: {t}")),
                    )
                }
                Ok(Message::Close(f)) => {
                    return Read::Closed(f.map(|f| (u16::from(f.code), f.reason.to_string())))
                }
                Ok(_) => {}
                Err(e) if timed_out(&e) => return Read::Nothing,
                Err(tungstenite::Error::ConnectionClosed | tungstenite::Error::AlreadyClosed) => {
                    return Read::Closed(None)
                }
                Err(e) => panic!("{e}"),
            }
        }
    }

    /// Sends a command and waits for its reply (keeping the pushes that come first).
    pub(crate) fn call(&mut self, name: &str, body: Json) -> Json {
        let id = self.send(name, body);
        loop {
            match self.read(Duration::from_secs(10)) {
                Read::Json(m) if m.get("id").is_some() => {
                    assert_eq!(m["id"], id, "{m}");
                    return m;
                }
                Read::Json(push) => self.pushes.push_back(push),
                Read::Closed(f) => panic!("closed {f:?} while waiting for {name}'s reply"),
                Read::Nothing => panic!("no reply to {name}"),
            }
        }
    }

    /// The next push, or `None` within `limit`.
    pub(crate) fn push(&mut self, limit: Duration) -> Option<Json> {
        if let Some(p) = self.pushes.pop_front() {
            return Some(p);
        }
        match self.read(limit) {
            Read::Json(m) => {
                assert!(m.get("id").is_none(), "a reply nobody asked for: {m}");
                Some(m)
            }
            Read::Closed(f) => panic!("closed {f:?} while waiting for a push"),
            Read::Nothing => None,
        }
    }

    /// The next publication pushed on `channel` (skipping join/leave pushes).
    pub(crate) fn publication(&mut self, channel: &str) -> Json {
        loop {
            let p = self.push(Duration::from_secs(10)).expect("a publication");
            if p["channel"] == channel && p.get("pub").is_some() {
                return p["pub"].clone();
            }
        }
    }

    /// The close code and reason the server ends the connection with.
    pub(crate) fn closed_with(&mut self) -> (u16, String) {
        loop {
            match self.read(Duration::from_secs(10)) {
                Read::Closed(Some(f)) => return f,
                Read::Closed(None) => panic!("closed without a close frame"),
                Read::Json(_) => {}
                Read::Nothing => panic!("still open"),
            }
        }
    }
}

/// Two instances on one Redis, sharing the token key and the API key: A with two workers.
pub(crate) fn cluster() -> (Redis, Demo, Demo, TempDir) {
    let redis = Redis::start().unwrap();
    let url = redis.url();
    let dir = temp_dir("channels");
    let secret = dir.path().join("channels.key");
    std::fs::write(&secret, SECRET).unwrap();
    let api_key = dir.path().join("api.key");
    std::fs::write(&api_key, format!("{API_KEY}\n")).unwrap();
    let (secret, api_key) = (secret.to_str().unwrap(), api_key.to_str().unwrap());
    let flags = [
        "--redis",
        &url,
        "--history",
        "50",
        "--channels-secret-file",
        secret,
        "--api-key-file",
        api_key,
    ];
    let a = demo_with(2, &flags);
    let b = demo_with(1, &flags);
    (redis, a, b, dir)
}

/// `POST /api/channels/METHOD` with the API key: status and JSON body.
pub(crate) fn api(d: &Demo, method: &str, body: Json) -> (u16, Json) {
    let auth = format!("apikey {API_KEY}");
    let r = request(
        d.http,
        "POST",
        &format!("/api/channels/{method}"),
        &[
            ("Authorization", &auth),
            ("Content-Type", "application/json"),
        ],
        &body.to_string(),
    );
    let json = serde_json::from_slice(&r.body)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&r.body)));
    (r.status, json)
}

/// Waits until `channel` has `n` subscribers on every instance, as the API's `channels`
/// sees them.
pub(crate) fn wait_for_clients(d: &Demo, channel: &str, n: u64) {
    wait_until(
        Duration::from_secs(10),
        "the API to count the subscribers",
        || api(d, "channels", json!({})).1["result"]["channels"][channel]["clients"] == n,
    );
}

/// `GET /connection/sse?QUERY` on a new connection: the response head, and the connection
/// to read events from.
pub(crate) fn sse(d: &Demo, query: &str) -> (HttpResponse, TcpStream) {
    use std::io::Write;
    let mut s = connect(d.http);
    let req = format!("GET /connection/sse?{query} HTTP/1.1\r\nHost: t\r\n\r\n");
    s.write_all(req.as_bytes()).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    (read_response_head(&mut s), s)
}

pub(crate) fn next_event(s: &mut TcpStream) -> Json {
    let data = read_sse_event(s).expect("an event");
    serde_json::from_str(&data).unwrap_or_else(|e| panic!("{e}: {data}"))
}
