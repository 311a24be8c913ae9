//! What the team-chat tests share: starting the app, and a client that speaks to it as a
//! browser does (a cookie jar of one session, the CSRF header, WebSockets with the cookie).

#![allow(dead_code, unreachable_pub)]

use std::io::Write;
use std::net::TcpStream;
use std::time::{Duration, Instant};

use brisk_testkit::*;
use serde_json::{json, Value};
use tungstenite::client::IntoClientRequest;
use tungstenite::protocol::frame::coding::CloseCode;
use tungstenite::{Message, WebSocket};

/// A session secret for tests (32 bytes or more).
pub const SECRET: &str = "a test secret that is long enough to sign";

/// The app started with `env` (`CHAT_*` settings) and waited for: `workers` HTTP workers and
/// `processes` more (the mention job's).
pub fn start_chat(env: &[(&str, &str)], workers: usize, processes: usize) -> ServerProcess {
    let bin = env!("CARGO_BIN_EXE_team-chat");
    ServerProcess::start_with_env(bin, &[], env, workers + processes).expect("team-chat starts")
}

/// A response: status, headers, body as JSON (or `Null`).
#[derive(Debug)]
pub struct Answer {
    pub status: u16,
    pub json: Value,
    pub raw: HttpResponse,
}

/// One browser's worth of state against the chat on `port`: its session cookie and CSRF
/// token once signed in.
pub struct Client {
    pub port: u16,
    pub cookie: Option<String>,
    pub csrf: Option<String>,
}

impl Client {
    pub fn new(port: u16) -> Self {
        Client {
            port,
            cookie: None,
            csrf: None,
        }
    }

    /// Sends `method path` with a JSON `body` (if any), the cookie and the CSRF token.
    pub fn send(&mut self, method: &str, path: &str, body: Option<Value>) -> Answer {
        let mut s = TcpStream::connect(("127.0.0.1", self.port)).expect("connect");
        s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        let body = body.map(|b| b.to_string()).unwrap_or_default();
        let mut head =
            format!("{method} {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n");
        if let Some(c) = &self.cookie {
            head.push_str(&format!("Cookie: {c}\r\n"));
        }
        if let Some(t) = &self.csrf {
            head.push_str(&format!("x-csrf-token: {t}\r\n"));
        }
        if method != "GET" {
            head.push_str(&format!(
                "Content-Type: application/json\r\nContent-Length: {}\r\n",
                body.len()
            ));
        }
        head.push_str("\r\n");
        s.write_all(head.as_bytes()).unwrap();
        s.write_all(body.as_bytes()).unwrap();
        let raw = read_response(&mut s);
        if let Some(set) = raw.header("set-cookie") {
            let pair = set.split(';').next().unwrap_or_default().to_string();
            // A cleared cookie (logout) has an empty value.
            self.cookie = (!pair.ends_with('=')).then_some(pair);
        }
        let json = serde_json::from_slice(&raw.body).unwrap_or(Value::Null);
        Answer {
            status: raw.status,
            json,
            raw,
        }
    }

    pub fn get(&mut self, path: &str) -> Answer {
        self.send("GET", path, None)
    }

    pub fn post(&mut self, path: &str, body: Value) -> Answer {
        self.send("POST", path, Some(body))
    }

    /// Signs up (or in, with `path` `/api/login`) and keeps the session; the answer.
    pub fn sign(&mut self, path: &str, name: &str, password: &str) -> Answer {
        let a = self.post(path, json!({ "name": name, "password": password }));
        if a.status < 300 {
            self.csrf = a.json["csrf"].as_str().map(str::to_string);
            assert!(self.cookie.is_some(), "no session cookie: {:?}", a.raw);
        }
        a
    }

    /// Opens the room's live socket with the session cookie; the handshake's refusal status
    /// if refused.
    pub fn live(&self, room: &str) -> Result<Live, u16> {
        let url = format!("ws://127.0.0.1:{}/api/rooms/{room}/live", self.port);
        let mut req = url.into_client_request().unwrap();
        if let Some(c) = &self.cookie {
            req.headers_mut().insert("cookie", c.parse().unwrap());
        }
        let s = TcpStream::connect(("127.0.0.1", self.port)).expect("connect");
        s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        match tungstenite::client(req, s) {
            Ok((ws, _)) => Ok(Live { ws }),
            Err(tungstenite::HandshakeError::Failure(tungstenite::Error::Http(r))) => {
                Err(r.status().as_u16())
            }
            Err(e) => panic!("handshake: {e}"),
        }
    }
}

/// A room's server-sent event stream.
pub struct Events {
    s: TcpStream,
}

impl Client {
    /// Opens the room's event stream with the session cookie; the refusal status if refused.
    pub fn events(&self, room: &str) -> Result<Events, u16> {
        let mut s = TcpStream::connect(("127.0.0.1", self.port)).expect("connect");
        s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        let mut head = format!("GET /api/rooms/{room}/events HTTP/1.1\r\nHost: localhost\r\n");
        if let Some(c) = &self.cookie {
            head.push_str(&format!("Cookie: {c}\r\n"));
        }
        head.push_str("\r\n");
        s.write_all(head.as_bytes()).unwrap();
        let r = read_response_head(&mut s);
        if r.status != 200 {
            return Err(r.status);
        }
        assert_eq!(r.header("content-type"), Some("text/event-stream"), "{r:?}");
        Ok(Events { s })
    }
}

impl Events {
    /// The next event's data as JSON (comments skipped); `None` when the stream ended.
    pub fn next(&mut self) -> Option<Value> {
        let data = read_sse_event(&mut self.s)?;
        Some(serde_json::from_str(&data).expect("JSON data"))
    }

    /// Skips events until one of `kind` comes; panics if the stream ends first.
    pub fn expect(&mut self, kind: &str) -> Value {
        loop {
            match self.next() {
                Some(e) if e["type"] == kind => return e,
                Some(_) => continue,
                None => panic!("the event stream ended while waiting for {kind}"),
            }
        }
    }
}

/// A live socket of a room.
pub struct Live {
    pub ws: WebSocket<TcpStream>,
}

/// How a wait for an event ended.
#[derive(Debug)]
pub enum Next {
    Event(Value),
    Closed(Option<(u16, String)>),
}

impl Live {
    /// The next event, or how the socket closed.
    pub fn next(&mut self) -> Next {
        loop {
            match self.ws.read() {
                Ok(Message::Text(t)) => {
                    return Next::Event(serde_json::from_str(t.as_str()).expect("JSON event"))
                }
                Ok(Message::Close(frame)) => {
                    let _ = self.ws.flush();
                    return Next::Closed(frame.map(|f| (u16::from(f.code), f.reason.to_string())));
                }
                Ok(_) => continue,
                Err(tungstenite::Error::ConnectionClosed) => return Next::Closed(None),
                Err(e) => panic!("the live socket failed: {e}"),
            }
        }
    }

    /// Skips events until one of `kind` comes; panics on a close or after 20 s.
    pub fn expect(&mut self, kind: &str) -> Value {
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            match self.next() {
                Next::Event(e) if e["type"] == kind => return e,
                Next::Event(_) => continue,
                Next::Closed(why) => panic!("closed ({why:?}) while waiting for {kind}"),
            }
        }
        panic!("no {kind} event in 20 s");
    }

    /// Waits for the close; its code and reason.
    pub fn expect_close(&mut self) -> (u16, String) {
        loop {
            match self.next() {
                Next::Event(_) => continue,
                Next::Closed(Some(c)) => return c,
                Next::Closed(None) => panic!("closed without a close frame"),
            }
        }
    }

    /// Sends a close and waits for the server's.
    pub fn close(mut self) {
        let _ = self.ws.close(Some(tungstenite::protocol::CloseFrame {
            code: CloseCode::Normal,
            reason: "".into(),
        }));
        let _ = self.ws.flush();
    }
}
