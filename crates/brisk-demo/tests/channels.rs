//! Channels for products (issue 35): the channel protocol at `/connection/websocket` and the
//! server API under `/api/channels/`, on two demo instances sharing one Redis (and one token
//! key): tokens refused with the documented close codes, channels a token does not allow
//! refused, a server-API publish reaching subscribers on both instances exactly once,
//! recovery of what a client missed while away, `disconnect` closing a user's sockets on both
//! instances, presence, history, join/leave pushes, refresh and expiry.

use std::collections::VecDeque;
use std::net::TcpStream;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use brisk_testkit::*;
use serde_json::{json, Value as Json};
use tungstenite::{Message, WebSocket};

mod common;
use common::{demo_with, get, request, Demo};

const SECRET: &[u8] = b"tests-channels-secret-0123456789abcdef";
const API_KEY: &str = "tests-api-key-0123456789";
const AUDIENCE: &str = "brisk-demo";

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

/// A token for `user`, with `extra` claims over the usual ones (`exp` in 10 min, the demo's
/// audience), signed with `secret`.
fn token_with(secret: &[u8], user: &str, extra: Json) -> String {
    let mut claims = json!({ "sub": user, "exp": now() + 600, "aud": AUDIENCE });
    for (k, v) in extra.as_object().unwrap() {
        claims[k] = v.clone();
    }
    brisk::jwt::hs256_token(secret, &claims).unwrap()
}

/// A channel-protocol client: commands numbered, pushes kept until asked for.
struct Client {
    ws: WebSocket<TcpStream>,
    next_id: u64,
    pushes: VecDeque<Json>,
}

enum Read {
    Json(Json),
    Closed(Option<(u16, String)>),
    Nothing,
}

impl Client {
    fn open(d: &Demo) -> Client {
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
    fn connected(d: &Demo, user: &str) -> Client {
        let r = get(d.http, &format!("/connection/token?user={user}"));
        assert_eq!(r.status, 200);
        let t: Json = serde_json::from_slice(&r.body).unwrap();
        let mut c = Client::open(d);
        let r = c.call("connect", json!({ "token": t["token"] }));
        assert_eq!(r["result"]["user"], user, "{r}");
        c
    }

    fn send(&mut self, name: &str, body: Json) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        let mut cmd = json!({ "id": id });
        cmd[name] = body;
        self.ws.send(Message::text(cmd.to_string())).unwrap();
        id
    }

    fn read(&mut self, limit: Duration) -> Read {
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
    fn call(&mut self, name: &str, body: Json) -> Json {
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
    fn push(&mut self, limit: Duration) -> Option<Json> {
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
    fn publication(&mut self, channel: &str) -> Json {
        loop {
            let p = self.push(Duration::from_secs(10)).expect("a publication");
            if p["channel"] == channel && p.get("pub").is_some() {
                return p["pub"].clone();
            }
        }
    }

    /// The close code and reason the server ends the connection with.
    fn closed_with(&mut self) -> (u16, String) {
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
fn cluster() -> (Redis, Demo, Demo, TempDir) {
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
fn api(d: &Demo, method: &str, body: Json) -> (u16, Json) {
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
fn wait_for_clients(d: &Demo, channel: &str, n: u64) {
    wait_until(
        Duration::from_secs(10),
        "the API to count the subscribers",
        || api(d, "channels", json!({})).1["result"]["channels"][channel]["clients"] == n,
    );
}

#[test]
fn tokens_are_checked_at_connect_and_per_channel() {
    let (_redis, a, _b, _dir) = cluster();
    let refused = |token: Option<String>| {
        let mut c = Client::open(&a);
        c.send("connect", json!({ "token": token }));
        c.closed_with()
    };
    let expired = token_with(SECRET, "alice", json!({ "exp": now() - 120 }));
    assert_eq!(refused(Some(expired)).0, 4002);
    let forged = token_with(
        b"another-secret-of-enough-length-0123456",
        "alice",
        json!({}),
    );
    let (code, reason) = refused(Some(forged));
    assert_eq!(code, 4001, "{reason}");
    assert!(reason.contains("signature"), "{reason}");
    let elsewhere = token_with(SECRET, "alice", json!({ "aud": "another-app" }));
    let (code, reason) = refused(Some(elsewhere));
    assert_eq!(code, 4001);
    assert!(reason.contains("audience"), "{reason}");
    assert_eq!(refused(None).0, 4001);
    assert_eq!(refused(Some("not.a.jwt".into())).0, 4001);
    // Not JSON at all: a protocol violation.
    let mut c = Client::open(&a);
    c.ws.send(Message::text("hello")).unwrap();
    assert_eq!(c.closed_with().0, 4004);

    let mut alice = Client::connected(&a, "alice");
    // Commands before connect, bad commands: error replies, the connection stays.
    let mut fresh = Client::open(&a);
    let r = fresh.call("subscribe", json!({ "channel": "chat:x" }));
    assert_eq!(r["error"]["code"], 101, "{r}");
    let r = alice.call("shout", json!({}));
    assert_eq!(r["error"]["code"], 104, "{r}");
    let r = alice.call("subscribe", json!({ "channel": "nowhere:x" }));
    assert_eq!(r["error"]["code"], 102, "{r}");
    let r = alice.call("subscribe", json!({ "channel": "bad channel" }));
    assert_eq!(r["error"]["code"], 102, "{r}");
    // private:alice is in alice's token; private:bob is not.
    let r = alice.call("subscribe", json!({ "channel": "private:alice" }));
    assert!(r["result"].is_object(), "{r}");
    let r = alice.call("subscribe", json!({ "channel": "private:bob" }));
    assert_eq!(r["error"]["code"], 103, "{r}");
    let r = alice.call("subscribe", json!({ "channel": "private:alice" }));
    assert_eq!(r["error"]["code"], 105, "{r}");
    // Only the server publishes to news and private channels.
    alice.call("subscribe", json!({ "channel": "news:today" }));
    let r = alice.call("publish", json!({ "channel": "news:today", "data": 1 }));
    assert_eq!(r["error"]["code"], 103, "{r}");
    // Publishing to chat needs a subscription to it.
    let r = alice.call("publish", json!({ "channel": "chat:lobby", "data": 1 }));
    assert_eq!(r["error"]["code"], 107, "{r}");
    let r = alice.call("ping", json!({}));
    assert_eq!(r["result"], json!({}));
    let r = alice.call(
        "connect",
        json!({ "token": token_with(SECRET, "alice", json!({})) }),
    );
    assert_eq!(r["error"]["code"], 110, "{r}");
}

#[test]
fn a_server_api_publish_reaches_each_subscriber_on_both_instances_once() {
    let (_redis, a, b, _dir) = cluster();
    // Three subscribers on A (spread over its workers), two on B.
    let mut clients: Vec<Client> = (0..3)
        .map(|i| Client::connected(&a, &format!("a{i}")))
        .chain((0..2).map(|i| Client::connected(&b, &format!("b{i}"))))
        .collect();
    for c in &mut clients {
        let r = c.call("subscribe", json!({ "channel": "news:today" }));
        assert!(r["result"]["position"].is_string(), "{r}");
    }
    wait_for_clients(&a, "news:today", 5);
    let mut offsets = Vec::new();
    for n in 0..3 {
        let (status, r) = api(
            &a,
            "publish",
            json!({ "channel": "news:today", "data": { "n": n } }),
        );
        assert_eq!(status, 200, "{r}");
        offsets.push(
            r["result"]["offset"]
                .as_str()
                .expect("an offset")
                .to_owned(),
        );
    }
    // A broadcast to two channels, through B.
    let (status, r) = api(
        &b,
        "broadcast",
        json!({ "channels": ["news:today", "news:other"], "data": "both" }),
    );
    assert_eq!(status, 200, "{r}");
    assert!(r["result"]["results"][1]["offset"].is_string(), "{r}");
    let mut want: Vec<(String, Json)> = (offsets.iter().cloned())
        .zip((0..3).map(|n| json!({ "n": n })))
        .collect();
    want.push((
        r["result"]["results"][0]["offset"].as_str().unwrap().into(),
        json!("both"),
    ));
    for c in &mut clients {
        // Publications sent through different workers can arrive out of offset order (the
        // protocol says so; clients order them by offset): each exactly once.
        let mut got: Vec<(String, Json)> = (0..4)
            .map(|_| c.publication("news:today"))
            .map(|p| (p["offset"].as_str().unwrap().to_owned(), p["data"].clone()))
            .collect();
        got.sort_by_key(|(offset, _)| offset.rsplit(':').next().unwrap().parse::<u64>().unwrap());
        assert_eq!(got, want);
        assert_eq!(c.push(Duration::from_millis(300)), None);
    }
    // History and the active channels through the API.
    let (_, r) = api(
        &b,
        "history",
        json!({ "channel": "news:today", "limit": 2 }),
    );
    let publications = r["result"]["publications"].as_array().unwrap();
    assert_eq!(publications.len(), 2, "{r}");
    assert_eq!(publications[0]["offset"], offsets[2].as_str());
    assert_eq!(publications[1]["data"], "both");
    let (_, r) = api(&a, "channels", json!({}));
    assert_eq!(r["result"]["channels"]["news:today"]["clients"], 5, "{r}");
}

#[test]
fn a_client_that_was_away_recovers_what_it_missed_in_order() {
    let (_redis, a, b, _dir) = cluster();
    let mut writer = Client::connected(&a, "writer");
    writer.call("subscribe", json!({ "channel": "chat:room" }));
    let mut reader = Client::connected(&b, "reader");
    let r = reader.call("subscribe", json!({ "channel": "chat:room" }));
    let mut last = r["result"]["position"].as_str().unwrap().to_owned();
    wait_for_clients(&a, "chat:room", 2);
    let r = writer.call(
        "publish",
        json!({ "channel": "chat:room", "data": { "text": "one" } }),
    );
    let first = r["result"]["offset"]
        .as_str()
        .expect("an offset")
        .to_owned();
    let p = reader.publication("chat:room");
    assert_eq!(p["offset"], first.as_str());
    last = p["offset"].as_str().unwrap_or(&last).to_owned();
    // The reader's connection is gone (its socket shut, no closing handshake).
    reader
        .ws
        .get_ref()
        .shutdown(std::net::Shutdown::Both)
        .unwrap();
    drop(reader);
    let sent: Vec<String> = (0..5)
        .map(|i| {
            let r = writer.call(
                "publish",
                json!({ "channel": "chat:room", "data": { "text": i } }),
            );
            r["result"]["offset"].as_str().unwrap().to_owned()
        })
        .collect();
    let mut back = Client::connected(&b, "reader");
    let r = back.call(
        "subscribe",
        json!({ "channel": "chat:room", "since": last }),
    );
    assert_eq!(r["result"]["recovered"], true, "{r}");
    let got: Vec<(String, Json)> = (r["result"]["publications"].as_array().unwrap().iter())
        .map(|p| {
            (
                p["offset"].as_str().unwrap().to_owned(),
                p["data"]["text"].clone(),
            )
        })
        .collect();
    let want: Vec<(String, Json)> = sent.iter().cloned().zip((0..5).map(|i| json!(i))).collect();
    assert_eq!(got, want);
    assert_eq!(r["result"]["position"], sent[4].as_str());
    // A gap filled from the history, without subscribing again.
    let r = back.call(
        "history",
        json!({ "channel": "chat:room", "since": sent[2] }),
    );
    assert_eq!(r["result"]["recovered"], true, "{r}");
    let tail: Vec<&Json> = (r["result"]["publications"].as_array().unwrap().iter())
        .map(|p| &p["offset"])
        .collect();
    assert_eq!(tail, [&json!(sent[3]), &json!(sent[4])]);
    // A position the history no longer means: not recovered, and why.
    let mut other = Client::connected(&a, "late");
    let r = other.call(
        "subscribe",
        json!({ "channel": "chat:room", "since": "1:1" }),
    );
    assert_eq!(r["result"]["recovered"], false, "{r}");
    assert!(
        r["result"]["reason"].as_str().unwrap().contains("epoch"),
        "{r}"
    );
    let r = other.call(
        "subscribe",
        json!({ "channel": "chat:other", "since": "nonsense" }),
    );
    assert_eq!(r["error"]["code"], 104, "{r}");
}

#[test]
fn disconnect_closes_a_users_sockets_on_every_instance() {
    let (_redis, a, b, _dir) = cluster();
    let mut on_a = Client::connected(&a, "mallory");
    let mut on_b = Client::connected(&b, "mallory");
    let mut bystander = Client::connected(&b, "carol");
    on_a.call("subscribe", json!({ "channel": "chat:lobby" }));
    on_b.call("subscribe", json!({ "channel": "chat:lobby" }));
    bystander.call("subscribe", json!({ "channel": "chat:lobby" }));
    wait_until(
        Duration::from_secs(10),
        "presence to list both users",
        || {
            let (_, r) = api(&a, "presence", json!({ "channel": "chat:lobby" }));
            r["result"] == json!({ "clients": 3, "users": ["carol", "mallory"] })
        },
    );
    let (status, r) = api(
        &a,
        "disconnect",
        json!({ "user": "mallory", "code": 4009, "reason": "banned" }),
    );
    assert_eq!(status, 200, "{r}");
    assert_eq!(on_a.closed_with(), (4009, "banned".into()));
    assert_eq!(on_b.closed_with(), (4009, "banned".into()));
    // Carol stays, and sees mallory leave (twice: one per socket).
    let mut leaves = 0;
    while leaves < 2 {
        let p = bystander
            .push(Duration::from_secs(10))
            .expect("leave pushes");
        if p.get("leave").is_some() {
            assert_eq!(p["leave"]["user"], "mallory", "{p}");
            leaves += 1;
        }
    }
    let r = bystander.call("presence", json!({ "channel": "chat:lobby" }));
    assert!(r["result"]["clients"].is_u64(), "{r}");
    let (status, r) = api(&a, "disconnect", json!({ "user": "x", "code": 1000 }));
    assert_eq!(
        (status, r["error"]["code"].as_u64()),
        (400, Some(104)),
        "{r}"
    );
}

#[test]
fn the_server_api_refuses_what_it_cannot_take() {
    let (_redis, a, _b, _dir) = cluster();
    let publish = r#"{"channel":"news:x","data":1}"#;
    let r = request(a.http, "POST", "/api/channels/publish", &[], publish);
    assert_eq!(r.status, 401);
    let wrong = [("Authorization", "apikey wrong-key-0123456789")];
    let r = request(a.http, "POST", "/api/channels/publish", &wrong, publish);
    assert_eq!(r.status, 401);
    let key = [("X-API-Key", API_KEY)];
    let r = request(a.http, "POST", "/api/channels/publish", &key, publish);
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    let r = request(a.http, "GET", "/api/channels/publish", &key, "");
    assert_eq!(r.status, 405);
    let (status, r) = api(&a, "shout", json!({}));
    assert_eq!(status, 404, "{r}");
    let (status, r) = api(&a, "publish", json!({ "channel": "news:x" }));
    assert_eq!(status, 400, "{r}");
    assert!(
        r["error"]["message"].as_str().unwrap().contains("data"),
        "{r}"
    );
    let (status, r) = api(&a, "publish", json!({ "channel": "nowhere:x", "data": 1 }));
    assert_eq!(
        (status, r["error"]["code"].as_u64()),
        (400, Some(102)),
        "{r}"
    );
    let (status, r) = api(&a, "presence", json!({ "channel": "news:x" }));
    assert_eq!(
        (status, r["error"]["code"].as_u64()),
        (400, Some(108)),
        "{r}"
    );
    let big = json!({ "channel": "news:x", "data": "x".repeat(2 << 20) });
    let (status, _) = api(&a, "publish", big);
    assert_eq!(status, 413);
    // Data comes back from the history as it was published (keys in its order).
    let auth = format!("apikey {API_KEY}");
    let headers = [("Authorization", auth.as_str())];
    let body = r#"{"channel":"news:order","data":{"z":1,"a":[2.50,"é"]}}"#;
    let r = request(a.http, "POST", "/api/channels/publish", &headers, body);
    assert_eq!(r.status, 200);
    let body = r#"{"channel":"news:order"}"#;
    let r = request(a.http, "POST", "/api/channels/history", &headers, body);
    let text = String::from_utf8(r.body).unwrap();
    assert!(text.contains(r#""data":{"z":1,"a":[2.50,"é"]}"#), "{text}");
}

#[test]
fn tokens_expire_unless_refreshed() {
    let (_redis, a, _b, _dir) = cluster();
    let short = |user: &str, secs: u64| token_with(SECRET, user, json!({ "exp": now() + secs }));
    let mut lapses = Client::open(&a);
    let r = lapses.call("connect", json!({ "token": short("lapses", 2) }));
    assert!(r["result"]["expires"].is_u64(), "{r}");
    let mut refreshes = Client::open(&a);
    let first_expiry = now() + 4;
    let first = token_with(SECRET, "refreshes", json!({ "exp": first_expiry }));
    refreshes.call("connect", json!({ "token": first }));
    let r = refreshes.call("refresh", json!({ "token": short("refreshes", 600) }));
    assert!(
        r["result"]["expires"].as_u64().unwrap() > now() + 500,
        "{r}"
    );
    let r = refreshes.call("refresh", json!({ "token": short("someone-else", 600) }));
    assert_eq!(r["error"]["code"], 103, "{r}");
    let lapsed = token_with(SECRET, "refreshes", json!({ "exp": now() - 5 }));
    let r = refreshes.call("refresh", json!({ "token": lapsed }));
    assert_eq!(r["error"]["code"], 109, "{r}");
    // An event stream's token expires too: it ends with a close event saying so.
    let (r, mut stream) = sse(&a, &format!("token={}&channel=news:x", short("streams", 2)));
    assert_eq!(r.status, 200);
    let ended = loop {
        match read_sse_event_named(&mut stream).expect("a close event before the end") {
            (Some(name), data) if name == "close" => break data,
            _ => {}
        }
    };
    assert_eq!(ended, r#"{"code":4002,"reason":"token expired"}"#);
    assert_eq!(read_sse_event(&mut stream), None);
    assert_eq!(lapses.closed_with().0, 4002);
    // Past the first token's expiry, the refreshed connection still answers.
    wait_until(Duration::from_secs(10), "the first token's expiry", || {
        now() > first_expiry
    });
    let r = refreshes.call("ping", json!({}));
    assert_eq!(r["result"], json!({}));
}

#[test]
fn a_subscription_token_ends_its_subscription_unless_refreshed() {
    let (_redis, a, _b, _dir) = cluster();
    let mut alice = Client::connected(&a, "alice");
    let allow = |channel: &str, exp: u64| {
        token_with(SECRET, "alice", json!({ "channel": channel, "exp": exp }))
    };
    let subscribe = |c: &mut Client, channel: &str, token: String| {
        c.call("subscribe", json!({ "channel": channel, "token": token }))
    };
    // A token for another channel, or one past its exp (within the JWT leeway): refused.
    let later = now() + 600;
    let r = subscribe(&mut alice, "private:team", allow("private:other", later));
    assert_eq!(r["error"]["code"], 103, "{r}");
    let r = subscribe(&mut alice, "private:team", allow("private:team", now() - 1));
    assert_eq!(r["error"]["code"], 109, "{r}");

    // Two subscriptions whose tokens last 4 s (whole seconds: at least 3); one gets a new
    // token in time.
    let soon = now() + 4;
    let r = subscribe(&mut alice, "private:team", allow("private:team", soon));
    assert_eq!(r["result"]["expires"], soon, "{r}");
    let r = subscribe(&mut alice, "private:ops", allow("private:ops", soon));
    assert_eq!(r["result"]["expires"], soon, "{r}");
    let r = alice.call(
        "refresh",
        json!({ "channel": "private:ops", "token": allow("private:ops", later) }),
    );
    assert_eq!(r["result"]["expires"], later, "{r}");
    let r = alice.call(
        "refresh",
        json!({ "channel": "private:x", "token": allow("private:x", later) }),
    );
    assert_eq!(r["error"]["code"], 107, "{r}");
    let r = alice.call(
        "refresh",
        json!({ "channel": "private:ops", "token": allow("private:team", later) }),
    );
    assert_eq!(r["error"]["code"], 103, "{r}");

    // At its exp the other one ends with a push saying why; the connection stays.
    let push = alice
        .push(Duration::from_secs(10))
        .expect("an unsubscribe push");
    assert_eq!(
        push,
        json!({ "channel": "private:team",
                "unsubscribe": { "code": 109, "reason": "the subscription token expired" } })
    );
    let r = alice.call("presence", json!({ "channel": "private:team" }));
    assert_eq!(r["error"]["code"], 107, "{r}");
    // Publications reach the refreshed subscription only.
    for (channel, data) in [("private:team", "gone"), ("private:ops", "still")] {
        let (status, r) = api(&a, "publish", json!({ "channel": channel, "data": data }));
        assert_eq!(status, 200, "{r}");
    }
    let mut got = vec![alice.push(Duration::from_secs(10)).expect("a publication")];
    while got.last().unwrap()["pub"]["data"] != "still" {
        got.push(
            alice
                .push(Duration::from_secs(10))
                .expect("the second publication"),
        );
    }
    // Published first, "gone" would have come by now; nothing else is on its way either.
    got.extend(alice.push(Duration::from_millis(500)));
    let channels: Vec<_> = got.iter().map(|p| p["channel"].clone()).collect();
    assert_eq!(channels, vec![json!("private:ops")], "{got:?}");
    assert_eq!(alice.call("ping", json!({}))["result"], json!({}));
}

/// `GET /connection/sse?QUERY` on a new connection: the response head, and the connection
/// to read events from.
fn sse(d: &Demo, query: &str) -> (HttpResponse, TcpStream) {
    use std::io::Write;
    let mut s = connect(d.http);
    let req = format!("GET /connection/sse?{query} HTTP/1.1\r\nHost: t\r\n\r\n");
    s.write_all(req.as_bytes()).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    (read_response_head(&mut s), s)
}

fn next_event(s: &mut TcpStream) -> Json {
    let data = read_sse_event(s).expect("an event");
    serde_json::from_str(&data).unwrap_or_else(|e| panic!("{e}: {data}"))
}

/// The next line of a chunked `application/x-ndjson` body (Brisk sends one per chunk), as
/// JSON; `None` at its end.
fn next_line(s: &mut TcpStream) -> Option<Json> {
    use std::io::Read;
    let size = usize::from_str_radix(read_crlf_line(s).trim(), 16).expect("a chunk size");
    if size == 0 {
        return None;
    }
    let mut chunk = vec![0u8; size + 2];
    s.read_exact(&mut chunk).unwrap();
    let line = std::str::from_utf8(&chunk[..size]).unwrap();
    assert!(
        line.ends_with('\n') && line.matches('\n').count() == 1,
        "{line:?}"
    );
    Some(serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}")))
}

#[test]
fn http_streams_get_the_channels_as_lines() {
    use std::io::Write;
    let (_redis, a, b, _dir) = cluster();
    let alice = token_with(SECRET, "alice", json!({}));
    // Refusals as the event stream's.
    let r = get(
        a.http,
        &format!("/connection/stream?token={alice}&channel=private:bob"),
    );
    assert_eq!(r.status, 403);
    let mut s = connect(b.http);
    let req = format!(
        "GET /connection/stream?token={alice}&channel=news:lines HTTP/1.1\r\nHost: t\r\n\r\n"
    );
    s.write_all(req.as_bytes()).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let head = read_response_head(&mut s);
    assert_eq!(head.status, 200);
    assert_eq!(head.header("content-type"), Some("application/x-ndjson"));
    assert_eq!(next_line(&mut s).unwrap()["connected"]["user"], "alice");
    let subscribed = next_line(&mut s).unwrap();
    assert_eq!(subscribed["channel"], "news:lines", "{subscribed}");
    assert!(
        subscribed["subscribed"]["position"].is_string(),
        "{subscribed}"
    );
    wait_for_clients(&a, "news:lines", 1);
    let (_, r) = api(
        &a,
        "publish",
        json!({ "channel": "news:lines", "data": { "n": 1 } }),
    );
    let offset = r["result"]["offset"].clone();
    assert_eq!(
        next_line(&mut s).unwrap(),
        json!({ "channel": "news:lines", "pub": { "offset": offset, "data": { "n": 1 } } })
    );
    api(&a, "disconnect", json!({ "user": "alice" }));
    assert_eq!(
        next_line(&mut s).unwrap(),
        json!({ "close": { "code": 4003, "reason": "" } })
    );
    assert_eq!(next_line(&mut s), None);
}

#[test]
fn event_streams_get_the_channels_and_recover_too() {
    let (_redis, a, b, _dir) = cluster();
    let alice = token_with(SECRET, "alice", json!({ "channels": ["private:alice"] }));
    // Refusals, before any event; a channel's names it.
    let r = get(
        a.http,
        &format!("/connection/sse?token={alice}&channel=news:x&channel=private:bob"),
    );
    assert_eq!(r.status, 403);
    let refusal: Json = serde_json::from_slice(&r.body).unwrap();
    assert_eq!(refusal["error"]["channel"], "private:bob", "{refusal}");
    assert_eq!(refusal["error"]["code"], 103, "{refusal}");
    let (r, _) = sse(&a, "token=forged&channel=news:x");
    assert_eq!(r.status, 401);
    let (r, _) = sse(&a, &format!("token={alice}"));
    assert_eq!(r.status, 400);
    let (r, _) = sse(
        &a,
        &format!("token={alice}&channel=news:x&since=news:x,nonsense"),
    );
    assert_eq!(r.status, 400);

    // A stream on B of two channels; publications through A reach it.
    let (r, mut s) = sse(
        &b,
        &format!("token={alice}&channel=news:sse&channel=private:alice"),
    );
    assert_eq!(r.status, 200);
    let connected = next_event(&mut s);
    assert_eq!(connected["connected"]["user"], "alice", "{connected}");
    assert_eq!(connected["connected"]["version"], 1, "{connected}");
    assert!(connected["connected"]["expires"].is_u64(), "{connected}");
    let first = next_event(&mut s);
    assert_eq!(first["channel"], "news:sse", "{first}");
    // A channel nobody published to yet: offset 0 of a new epoch.
    let position = first["subscribed"]["position"].as_str().unwrap();
    assert!(position.ends_with(":0"), "{first}");
    assert_eq!(next_event(&mut s)["channel"], "private:alice");
    wait_for_clients(&a, "news:sse", 1);
    let (_, r) = api(
        &a,
        "publish",
        json!({ "channel": "news:sse", "data": { "n": 1 } }),
    );
    let one = r["result"]["offset"].as_str().unwrap().to_owned();
    let p = next_event(&mut s);
    assert_eq!(
        p["pub"],
        json!({ "offset": one, "data": { "n": 1 } }),
        "{p}"
    );
    api(
        &a,
        "publish",
        json!({ "channel": "private:alice", "data": "for alice" }),
    );
    assert_eq!(next_event(&mut s)["pub"]["data"], "for alice");

    // The stream's client went away; two publications later it comes back with `since`.
    drop(s);
    for n in 2..4 {
        api(
            &a,
            "publish",
            json!({ "channel": "news:sse", "data": { "n": n } }),
        );
    }
    let (_, mut s) = sse(
        &b,
        &format!("token={alice}&channel=news:sse&since=news:sse,{one}"),
    );
    // `connected` comes first (sent as the stream joins its groups); a publication still on
    // its way between instances may arrive live before the `subscribed` event (the protocol
    // says so: clients order by offset).
    assert!(next_event(&mut s).get("connected").is_some());
    let subscribed = loop {
        let e = next_event(&mut s);
        if e.get("subscribed").is_some() {
            break e;
        }
        assert!(e["pub"]["data"]["n"].as_u64() >= Some(2), "{e}");
    };
    assert_eq!(subscribed["subscribed"]["recovered"], true, "{subscribed}");
    let publications = subscribed["subscribed"]["publications"].as_array().unwrap();
    let missed: Vec<&Json> = publications.iter().map(|p| &p["data"]).collect();
    assert_eq!(missed, [&json!({ "n": 2 }), &json!({ "n": 3 })]);
    let recovered: Vec<&Json> = publications.iter().map(|p| &p["offset"]).collect();

    // `disconnect` ends it, with a last `close` event saying why. Before it, a live copy of
    // a recovered publication may still come from the other instance (clients drop what they
    // have, by offset); nothing else.
    api(&a, "disconnect", json!({ "user": "alice" }));
    let mut closed = None;
    while let Some((name, event)) = read_sse_event_named(&mut s) {
        let e: Json = serde_json::from_str(&event).unwrap();
        assert!(closed.is_none(), "an event after the close: {e}");
        if name.as_deref() == Some("close") {
            closed = Some(e);
        } else {
            assert!(recovered.contains(&&e["pub"]["offset"]), "{e}");
        }
    }
    let closed = closed.expect("a close event before the end");
    assert_eq!(closed["code"], 4003, "{closed}");
}

#[test]
fn tokens_can_come_from_an_identity_providers_jwks_url() {
    use brisk_testkit::jwks::{jwks, SigningKey};
    let dir = temp_dir("channels-jwks");
    let provider = SigningKey::new("idp-1");
    std::fs::write(dir.path().join("jwks.json"), jwks(&[&provider])).unwrap();
    let nginx = Nginx::files(dir.path()).unwrap();
    let url = format!("http://127.0.0.1:{}/jwks.json", nginx.port());
    let d = demo_with(1, &["--channels-jwks-url", &url]);
    let claims = |aud: &str| json!({ "sub": "ada", "exp": now() + 600, "aud": aud });
    let mut c = Client::open(&d);
    let r = c.call(
        "connect",
        json!({ "token": provider.sign(&claims(AUDIENCE)) }),
    );
    assert_eq!(r["result"]["user"], "ada", "{r}");
    let refused = |d: &Demo, token: String| {
        let mut c = Client::open(d);
        c.send("connect", json!({ "token": token }));
        c.closed_with()
    };
    // A key the provider does not publish; the provider's key for another audience.
    let stranger = SigningKey::new("idp-2");
    let (code, reason) = refused(&d, stranger.sign(&claims(AUDIENCE)));
    assert_eq!(code, 4001, "{reason}");
    assert!(reason.contains("idp-2"), "{reason}");
    let (code, reason) = refused(&d, provider.sign(&claims("another-app")));
    assert_eq!(
        (code, reason.contains("audience")),
        (4001, true),
        "{reason}"
    );
    // The try-out endpoint signs nothing: tokens are the provider's.
    assert_eq!(get(d.http, "/connection/token?user=ada").status, 404);

    // A provider that cannot be reached: the server says it cannot check tokens.
    let gone = format!("http://127.0.0.1:{}/jwks.json", free_port());
    let lost = demo_with(1, &["--channels-jwks-url", &gone]);
    let (code, reason) = refused(&lost, provider.sign(&claims(AUDIENCE)));
    assert_eq!(code, 1011, "{reason}");
    assert!(reason.contains("cannot check tokens"), "{reason}");
}

/// A channel-protocol client speaking MessagePack (`?format=msgpack`): one map per binary
/// message, publications' data as `bin`.
struct MsgClient {
    ws: WebSocket<TcpStream>,
    next_id: u64,
    pushes: VecDeque<Mp>,
}

type Mp = rmpv::Value;

/// A MessagePack map from string keys.
fn mp_map(pairs: Vec<(&str, Mp)>) -> Mp {
    Mp::Map(pairs.into_iter().map(|(k, v)| (Mp::from(k), v)).collect())
}

/// A JSON value as MessagePack (maps keep their keys, numbers their kind).
fn mp(json: Json) -> Mp {
    rmpv::ext::to_value(json).unwrap()
}

impl MsgClient {
    fn open(d: &Demo, query: &str) -> WebSocket<TcpStream> {
        let url = format!("ws://127.0.0.1:{}/connection/websocket?{query}", d.http);
        let (ws, resp) = tungstenite::client(url, connect(d.http)).expect("handshake");
        assert_eq!(resp.status(), 101);
        ws
    }

    fn connected(d: &Demo, user: &str) -> MsgClient {
        let r = get(d.http, &format!("/connection/token?user={user}"));
        let t: Json = serde_json::from_slice(&r.body).unwrap();
        let mut c = MsgClient {
            ws: MsgClient::open(d, "format=msgpack"),
            next_id: 1,
            pushes: VecDeque::new(),
        };
        let r = c.call("connect", mp(json!({ "token": t["token"] })));
        assert_eq!(r["result"]["user"].as_str(), Some(user), "{r}");
        assert_eq!(r["result"]["version"].as_u64(), Some(1), "{r}");
        c
    }

    fn send(&mut self, name: &str, body: Mp) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        let mut bytes = Vec::new();
        rmpv::encode::write_value(
            &mut bytes,
            &mp_map(vec![("id", Mp::from(id)), (name, body)]),
        )
        .unwrap();
        self.ws.send(Message::binary(bytes)).unwrap();
        id
    }

    /// The next message (a reply or a push), or the close frame.
    fn read(&mut self) -> Result<Mp, Option<(u16, String)>> {
        self.ws
            .get_ref()
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        loop {
            match self.ws.read() {
                Ok(Message::Binary(b)) => {
                    return Ok(rmpv::decode::read_value(&mut &b[..]).expect("MessagePack"))
                }
                Ok(Message::Text(t)) => panic!("a text message on a MessagePack connection: {t}"),
                Ok(Message::Close(f)) => {
                    return Err(f.map(|f| (u16::from(f.code), f.reason.to_string())))
                }
                Ok(_) => {}
                Err(tungstenite::Error::ConnectionClosed | tungstenite::Error::AlreadyClosed) => {
                    return Err(None)
                }
                Err(e) => panic!("{e}"),
            }
        }
    }

    fn call(&mut self, name: &str, body: Mp) -> Mp {
        let id = self.send(name, body);
        loop {
            let m = self
                .read()
                .unwrap_or_else(|f| panic!("closed {f:?} awaiting {name}"));
            if m["id"].is_nil() {
                self.pushes.push_back(m);
            } else {
                assert_eq!(m["id"].as_u64(), Some(id), "{m}");
                return m;
            }
        }
    }

    /// The data of the next publication pushed on `channel`.
    fn publication(&mut self, channel: &str) -> Vec<u8> {
        loop {
            let p = match self.pushes.pop_front() {
                Some(p) => p,
                None => self.read().unwrap_or_else(|f| panic!("closed {f:?}")),
            };
            if p["channel"].as_str() == Some(channel) && !p["pub"].is_nil() {
                return p["pub"]["data"].as_slice().expect("bin data").to_vec();
            }
        }
    }
}

#[test]
fn messagepack_clients_share_channels_with_json_clients() {
    let (_redis, a, b, _dir) = cluster();
    let mut json_client = Client::connected(&a, "jay");
    json_client.call("subscribe", json!({ "channel": "chat:mixed" }));
    let mut em = MsgClient::connected(&b, "em");
    let r = em.call("subscribe", mp(json!({ "channel": "chat:mixed" })));
    let start = r["result"]["position"]
        .as_str()
        .expect("a position")
        .to_owned();
    let mut mo = MsgClient::connected(&a, "mo");
    mo.call("subscribe", mp(json!({ "channel": "chat:mixed" })));
    // The API counts the subscribers of both formats as one channel's.
    wait_for_clients(&a, "chat:mixed", 3);

    // Bytes that are not JSON: as they are for MessagePack clients, base64 for JSON ones.
    let r = em.call(
        "publish",
        mp_map(vec![
            ("channel", Mp::from("chat:mixed")),
            ("data", Mp::Binary(vec![0, 255, 1])),
        ]),
    );
    assert!(r["result"]["offset"].is_str(), "{r}");
    assert_eq!(mo.publication("chat:mixed"), [0, 255, 1]);
    assert_eq!(em.publication("chat:mixed"), [0, 255, 1]);
    let p = json_client.publication("chat:mixed");
    assert_eq!(p["b64"], "AP8B", "{p}");
    assert!(p.get("data").is_none(), "{p}");
    // JSON published: its text for MessagePack clients.
    json_client.call(
        "publish",
        json!({ "channel": "chat:mixed", "data": { "n": 1 } }),
    );
    assert_eq!(em.publication("chat:mixed"), br#"{"n":1}"#);
    assert_eq!(mo.publication("chat:mixed"), br#"{"n":1}"#);
    assert_eq!(
        json_client.publication("chat:mixed")["data"],
        json!({ "n": 1 })
    );
    // Bytes through the server API.
    let (status, r) = api(
        &b,
        "publish",
        json!({ "channel": "chat:mixed", "b64": "AQI=" }),
    );
    assert_eq!(status, 200, "{r}");
    assert_eq!(em.publication("chat:mixed"), [1, 2]);
    assert_eq!(mo.publication("chat:mixed"), [1, 2]);
    assert_eq!(json_client.publication("chat:mixed")["b64"], "AQI=");
    let (status, r) = api(
        &b,
        "publish",
        json!({ "channel": "chat:mixed", "b64": "not base64!" }),
    );
    assert_eq!((status, &r["error"]["code"]), (400, &json!(104)), "{r}");

    // Presence and history in MessagePack.
    let r = em.call("presence", mp(json!({ "channel": "chat:mixed" })));
    assert_eq!(r["result"]["clients"].as_u64(), Some(3), "{r}");
    let users: Vec<&str> = (r["result"]["users"].as_array().unwrap().iter())
        .map(|u| u.as_str().unwrap())
        .collect();
    assert_eq!(users, ["em", "jay", "mo"]);
    let r = mo.call(
        "history",
        mp(json!({ "channel": "chat:mixed", "limit": 2 })),
    );
    let data: Vec<&[u8]> = (r["result"]["publications"].as_array().unwrap().iter())
        .map(|p| p["data"].as_slice().unwrap())
        .collect();
    assert_eq!(data, [&br#"{"n":1}"#[..], &[1, 2][..]], "{r}");
    // A MessagePack client that comes back recovers what it missed, data as bytes.
    let mut back = MsgClient::connected(&a, "em");
    let r = back.call(
        "subscribe",
        mp(json!({ "channel": "chat:mixed", "since": start })),
    );
    assert_eq!(r["result"]["recovered"].as_bool(), Some(true), "{r}");
    let data: Vec<&[u8]> = (r["result"]["publications"].as_array().unwrap().iter())
        .map(|p| p["data"].as_slice().unwrap())
        .collect();
    assert_eq!(data, [&[0, 255, 1][..], &br#"{"n":1}"#[..], &[1, 2][..]]);

    // Mistakes: data that is not bytes is answered with 104; a text message on a
    // MessagePack connection, or a format the server does not speak, closes with 4004.
    let r = em.call(
        "publish",
        mp(json!({ "channel": "chat:mixed", "data": { "n": 2 } })),
    );
    assert_eq!(r["error"]["code"].as_u64(), Some(104), "{r}");
    em.ws.send(Message::text(r#"{"id":9,"ping":{}}"#)).unwrap();
    let closed = loop {
        match em.read() {
            Ok(_) => {}
            Err(f) => break f,
        }
    };
    let (code, reason) = closed.expect("a close frame");
    assert_eq!(code, 4004);
    assert!(reason.contains("binary"), "{reason}");
    let mut xml = MsgClient {
        ws: MsgClient::open(&a, "format=xml"),
        next_id: 1,
        pushes: VecDeque::new(),
    };
    let (code, reason) = xml.read().unwrap_err().expect("a close frame");
    assert_eq!(code, 4004);
    assert!(reason.contains("xml"), "{reason}");
    // A server that speaks JSON only says so.
    let json_only = demo_with(1, &["--channels-json-only"]);
    let mut refused = MsgClient {
        ws: MsgClient::open(&json_only, "format=msgpack"),
        next_id: 1,
        pushes: VecDeque::new(),
    };
    let (code, reason) = refused.read().unwrap_err().expect("a close frame");
    assert_eq!(code, 4004);
    assert!(reason.contains("JSON only"), "{reason}");
}
