//! The team chat's page in a real browser: headless Chromium (Debian's package, installed by
//! scripts/install-test-servers) driven over the DevTools protocol. Ann signs up, creates a
//! room and posts from the page; Bob, a second client over HTTP and WebSocket, joins, posts
//! and mentions her; the page shows what arrives live.

mod common;

use std::io::Write;
use std::net::TcpStream;
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use brisk_testkit::*;
use common::*;
use serde_json::{json, Value};
use tempfile::TempDir;
use tungstenite::{Message, WebSocket};

/// Headless Chromium in its own process group, killed with it when dropped.
struct Chromium {
    child: Child,
    _profile: TempDir,
    port: u16,
}

impl Chromium {
    fn start() -> Chromium {
        let profile = temp_dir("chromium");
        let child = Command::new("chromium")
            .args([
                "--headless=new",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-dev-shm-usage",
                "--no-first-run",
                "--no-default-browser-check",
                "--remote-debugging-address=127.0.0.1",
                "--remote-debugging-port=0",
            ])
            .arg(format!("--user-data-dir={}", profile.path().display()))
            .arg("about:blank")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .process_group(0)
            .spawn()
            .expect("run chromium (scripts/install-test-servers installs it)");
        let active = profile.path().join("DevToolsActivePort");
        let port = wait_for(Duration::from_secs(30), "Chromium's DevTools port", || {
            let text = std::fs::read_to_string(&active).ok()?;
            text.lines().next()?.trim().parse::<u16>().ok()
        });
        Chromium {
            child,
            _profile: profile,
            port,
        }
    }

    /// The DevTools socket of the browser's one page.
    fn page(&self) -> Page {
        let list = wait_for(Duration::from_secs(10), "a page target", || {
            let mut s = TcpStream::connect(("127.0.0.1", self.port)).ok()?;
            let req = format!(
                "GET /json/list HTTP/1.1\r\nHost: 127.0.0.1:{}\r\nConnection: close\r\n\r\n",
                self.port
            );
            s.write_all(req.as_bytes()).ok()?;
            let targets: Value = serde_json::from_slice(&read_response(&mut s).body).ok()?;
            let page = targets.as_array()?.iter().find(|t| t["type"] == "page")?;
            page["webSocketDebuggerUrl"].as_str().map(str::to_string)
        });
        let (ws, _) = tungstenite::connect(list.as_str()).expect("DevTools socket");
        if let tungstenite::stream::MaybeTlsStream::Plain(s) = ws.get_ref() {
            s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        }
        Page { ws, next_id: 0 }
    }
}

impl Drop for Chromium {
    fn drop(&mut self) {
        // SAFETY: kill(2) on the process group Chromium leads; no memory is involved.
        unsafe { libc::kill(-(self.child.id() as i32), libc::SIGKILL) };
        let _ = self.child.wait();
    }
}

/// One page, over the DevTools protocol.
struct Page {
    ws: WebSocket<tungstenite::stream::MaybeTlsStream<TcpStream>>,
    next_id: u64,
}

impl Page {
    /// Calls `method` and returns its result (events in between are skipped).
    fn call(&mut self, method: &str, params: Value) -> Value {
        self.next_id += 1;
        let id = self.next_id;
        let msg = json!({ "id": id, "method": method, "params": params });
        self.ws.send(Message::text(msg.to_string())).unwrap();
        loop {
            let Message::Text(t) = self.ws.read().expect("DevTools answer") else {
                continue;
            };
            let answer: Value = serde_json::from_str(t.as_str()).unwrap();
            if answer["id"] == id {
                assert!(answer.get("error").is_none(), "{method}: {answer}");
                return answer["result"].clone();
            }
        }
    }

    /// The value of the JavaScript `expression` in the page (a promise awaited), or the
    /// exception it threw.
    fn try_eval(&mut self, expression: &str) -> Result<Value, Value> {
        let r = self.call(
            "Runtime.evaluate",
            json!({ "expression": expression, "returnByValue": true, "awaitPromise": true }),
        );
        match r.get("exceptionDetails") {
            Some(e) => Err(e.clone()),
            None => Ok(r["result"]["value"].clone()),
        }
    }

    /// The value of the JavaScript `expression` in the page; it must not throw.
    fn eval(&mut self, expression: &str) -> Value {
        self.try_eval(expression)
            .unwrap_or_else(|e| panic!("{expression}: {e}"))
    }

    /// Waits until `expression` is true in the page (while a page loads, its elements may
    /// not be there yet: an exception is "not yet").
    fn wait(&mut self, what: &str, expression: &str) {
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        while std::time::Instant::now() < deadline {
            if self.try_eval(expression) == Ok(json!(true)) {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let body = self.eval("document.body.innerText");
        panic!("{what}: not so after 20 s; the page says:\n{body}");
    }

    /// Types `text` into the input `id`.
    fn fill(&mut self, id: &str, text: &str) {
        let js = format!(
            "document.getElementById({}).value = {}",
            json!(id),
            json!(text)
        );
        self.eval(&js);
    }

    /// Clicks the element `id`.
    fn click(&mut self, id: &str) {
        self.eval(&format!("document.getElementById({}).click()", json!(id)));
    }
}

#[test]
fn sign_up_join_post_and_see_messages_arrive_in_chromium() {
    let redis = Redis::start().unwrap();
    let dir = temp_dir("team-chat-browser");
    let port = free_port();
    let listen = format!("http://127.0.0.1:{port}");
    let db_url = format!("sqlite:{}", dir.path().join("chat.sqlite").display());
    let redis_url = redis.url();
    let _chat = start_chat(
        &[
            ("CHAT_LISTEN", &listen),
            ("CHAT_DATABASE_URL", &db_url),
            ("CHAT_REDIS_URL", &redis_url),
            ("CHAT_SESSION_SECRET", SECRET),
            ("CHAT_CLUSTER_SECRET", "sixteen bytes at least"),
        ],
        2,
        1,
    );
    let browser = Chromium::start();
    let mut page = browser.page();
    page.call("Page.navigate", json!({ "url": listen }));
    page.wait(
        "the sign-in form",
        "document.readyState === 'complete' && !!document.getElementById('signin')",
    );

    // Ann signs up and creates a room from the page; its live socket opens.
    page.fill("name", "ann");
    page.fill("password", "correct horse");
    page.click("signup");
    page.wait(
        "signed in",
        "document.getElementById('who').textContent === 'Signed in as ann'",
    );
    page.fill("new-room", "lobby");
    page.click("create-room");
    page.wait(
        "in the room, listening",
        "document.body.dataset.live === 'lobby'",
    );

    // Bob joins from his own client and listens too.
    let mut bob = Client::new(port);
    assert_eq!(bob.sign("/api/signup", "bob", "battery staple").status, 201);
    assert_eq!(bob.post("/api/rooms/lobby/join", json!({})).status, 200);
    let mut bob_live = bob.live("lobby").expect("bob's socket");
    bob_live.expect("joined");

    // Bob's message appears on Ann's page without a reload; his mention of her too.
    let a = bob.post("/api/rooms/lobby/messages", json!({ "body": "hi @ann" }));
    assert_eq!(a.status, 201, "{a:?}");
    page.wait(
        "bob's message on the page",
        "[...document.querySelectorAll('#messages li')].some(li => li.textContent === 'bobhi @ann')",
    );
    page.wait(
        "the mention on the page",
        "document.getElementById('mentions').textContent.includes('bob in lobby: hi @ann')",
    );

    // Ann posts from the page: Bob's socket gets it, and her page shows it once.
    page.fill("body", "hello <b>bob</b>");
    page.click("send");
    assert_eq!(
        bob_live.expect("message")["message"]["body"],
        "hi @ann",
        "his own first"
    );
    let event = bob_live.expect("message");
    assert_eq!(event["message"]["author"], "ann");
    assert_eq!(event["message"]["body"], "hello <b>bob</b>");
    page.wait(
        "ann's message on the page, as text",
        "[...document.querySelectorAll('#messages li')].filter(li => li.textContent === 'annhello <b>bob</b>').length === 1 \
         && document.querySelectorAll('#messages li b').length === 2",
    );

    // A reload keeps the session and shows the history.
    page.call("Page.reload", json!({}));
    page.wait(
        "signed in after a reload",
        "document.getElementById('who').textContent === 'Signed in as ann'",
    );
    page.click_room("lobby");
    page.wait(
        "the history after a reload",
        "document.querySelectorAll('#messages li').length === 2",
    );
}

impl Page {
    /// Clicks the button of room `name` in the room list, once it is listed.
    fn click_room(&mut self, name: &str) {
        let selector = format!("#rooms button[data-room={}]", json!(name));
        self.wait(
            "the room listed",
            &format!("!!document.querySelector({})", json!(selector)),
        );
        self.eval(&format!(
            "document.querySelector({}).click()",
            json!(selector)
        ));
    }
}
