//! Channels in MessagePack (`?format=msgpack`): such clients share channels with JSON
//! clients, each getting every publication once, encoded once per format.

use std::collections::VecDeque;
use std::net::TcpStream;
use std::time::Duration;

use brisk_testkit::*;
use serde_json::{json, Value as Json};
use tungstenite::{Message, WebSocket};

mod common;
use common::{demo_with, get, Demo};

mod channels_common;
use channels_common::*;

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
