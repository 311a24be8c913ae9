//! Headless Chromium driven over the DevTools protocol, for tests of pages in a real
//! browser: [`Chromium::start`], then [`Chromium::page`] to navigate and evaluate.
//!
//! ```no_run
//! let chromium = brisk_testkit::Chromium::start();
//! let mut page = chromium.page();
//! page.call("Page.navigate", serde_json::json!({ "url": "http://127.0.0.1:8080/" }));
//! page.wait("the page to load", "document.readyState === 'complete'");
//! ```

use std::io::Write;
use std::net::TcpStream;
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::{json, Value};
use tempfile::TempDir;
use tungstenite::{Message, WebSocket};

use crate::{read_response, temp_dir, wait_for};

/// Headless Chromium in its own process group, killed with it when dropped.
pub struct Chromium {
    child: Child,
    _profile: TempDir,
    port: u16,
}

impl Chromium {
    /// Starts Chromium (Debian's package) headless, on a fresh profile.
    pub fn start() -> Chromium {
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
    pub fn page(&self) -> Page {
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
pub struct Page {
    ws: WebSocket<tungstenite::stream::MaybeTlsStream<TcpStream>>,
    next_id: u64,
}

impl Page {
    /// Calls `method` and returns its result (events in between are skipped).
    pub fn call(&mut self, method: &str, params: Value) -> Value {
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
    pub fn try_eval(&mut self, expression: &str) -> Result<Value, Value> {
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
    pub fn eval(&mut self, expression: &str) -> Value {
        self.try_eval(expression)
            .unwrap_or_else(|e| panic!("{expression}: {e}"))
    }

    /// Waits until `expression` is true in the page (while a page loads, its elements may
    /// not be there yet: an exception is "not yet").
    pub fn wait(&mut self, what: &str, expression: &str) {
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
    pub fn fill(&mut self, id: &str, text: &str) {
        let js = format!(
            "document.getElementById({}).value = {}",
            json!(id),
            json!(text)
        );
        self.eval(&js);
    }

    /// Clicks the element `id`.
    pub fn click(&mut self, id: &str) {
        self.eval(&format!("document.getElementById({}).click()", json!(id)));
    }
}
