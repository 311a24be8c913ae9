//! The JavaScript client of the channel protocol (`clients/js`, issue 35), built with the
//! npm registry's TypeScript and tested against real demo instances: with Node's test runner
//! (`clients/js/test/`), and in headless Chromium from the page the demo serves.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Once;
use std::time::Duration;

use brisk_testkit::*;

mod common;
use common::{demo_with, Demo};

const API_KEY: &str = "tests-api-key-0123456789";

/// `clients/js`.
fn client_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../clients/js")
}

/// Runs `program args` in `clients/js`, failing with its output if it fails.
fn run(program: &str, args: &[&str], env: &[(&str, &str)]) -> String {
    let out = Command::new(program)
        .args(args)
        .envs(env.iter().copied())
        .current_dir(client_dir())
        .output()
        .unwrap_or_else(|e| panic!("{program}: {e}"));
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{program} {args:?} failed:\n{text}");
    text
}

/// Installs TypeScript (from the lock file) and compiles the client, once per run.
fn build_client() {
    static BUILT: Once = Once::new();
    BUILT.call_once(|| {
        run("npm", &["ci", "--no-audit", "--no-fund"], &[]);
        run("npm", &["run", "build"], &[]);
    });
}

/// Two instances on one Redis, with the server API and one token key.
fn cluster() -> (Redis, Demo, Demo, TempDir) {
    let redis = Redis::start().unwrap();
    let url = redis.url();
    let dir = temp_dir("js-client");
    let secret = dir.path().join("channels.key");
    std::fs::write(&secret, b"tests-channels-secret-0123456789abcdef").unwrap();
    let api_key = dir.path().join("api.key");
    std::fs::write(&api_key, API_KEY).unwrap();
    let flags = [
        "--redis",
        &url,
        "--history",
        "100",
        "--channels-secret-file",
        secret.to_str().unwrap(),
        "--api-key-file",
        api_key.to_str().unwrap(),
    ];
    let a = demo_with(2, &flags);
    let b = demo_with(1, &flags);
    (redis, a, b, dir)
}

#[test]
fn the_client_passes_its_node_tests_against_two_instances() {
    build_client();
    let (_redis, a, b, _dir) = cluster();
    let urls = format!("http://127.0.0.1:{},http://127.0.0.1:{}", a.http, b.http);
    let out = run(
        "node",
        &[
            "--experimental-websocket",
            "--test",
            "--test-timeout=60000",
            "--test-force-exit",
            "test/",
        ],
        &[("BRISK_URLS", &urls), ("BRISK_API_KEY", API_KEY)],
    );
    // Every test ran and passed (node's summary), none skipped.
    assert!(out.contains("# fail 0"), "{out}");
    assert!(out.contains("# skipped 0"), "{out}");
    assert!(!out.contains("# pass 0"), "{out}");
}

/// `POST /api/channels/METHOD` with `body` on `d`: its JSON answer, which must be a 200.
fn api(d: &Demo, method: &str, body: serde_json::Value) -> serde_json::Value {
    let auth = format!("apikey {API_KEY}");
    let path = format!("/api/channels/{method}");
    let r = common::request(
        d.http,
        "POST",
        &path,
        &[("Authorization", &auth)],
        &body.to_string(),
    );
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    serde_json::from_slice(&r.body).unwrap()
}

/// Publishes `data` to `channel` through `d`'s server API.
fn publish(d: &Demo, channel: &str, data: serde_json::Value) {
    api(
        d,
        "publish",
        serde_json::json!({ "channel": channel, "data": data }),
    );
}

#[test]
fn the_demo_page_recovers_in_chromium_what_it_missed_while_cut_off() {
    build_client();
    let (_redis, a, b, _dir) = cluster();
    // The page and its socket both go through a proxy the test can cut.
    let proxy = TcpProxy::start(a.http);
    let chromium = Chromium::start();
    let mut page = chromium.page();
    let url = format!(
        "http://127.0.0.1:{}/connection?user=ann&room=browser",
        proxy.port
    );
    page.call("Page.navigate", serde_json::json!({ "url": url }));
    page.wait("the page to subscribe", "window.demo?.subscribed === 1");
    // Publications from B reach A's subscriber once its subscription is known across instances.
    wait_until(Duration::from_secs(10), "the subscriber counted", || {
        api(&b, "channels", serde_json::json!({}))["result"]["channels"]["chat:browser"]["clients"]
            == 1
    });
    publish(&b, "chat:browser", serde_json::json!("before"));
    page.wait(
        "the first publication",
        "JSON.stringify(window.demo.received) === '[\"before\"]'",
    );
    proxy.cut();
    page.wait(
        "the page to notice",
        "window.demo.client.state !== 'connected'",
    );
    for i in 0..10 {
        publish(&b, "chat:browser", serde_json::json!(i));
    }
    // The outage itself: 5 s without a server, the client retrying meanwhile.
    std::thread::sleep(Duration::from_secs(5));
    proxy.restore();
    page.wait(
        "the page to subscribe again",
        "window.demo.subscribed === 2",
    );
    page.wait(
        "every missed publication, in order",
        "JSON.stringify(window.demo.received) === '[\"before\",0,1,2,3,4,5,6,7,8,9]'",
    );
    assert_eq!(
        page.eval("document.getElementById('state').textContent"),
        "connected"
    );
    // The page posts through its form; the publication comes back to it.
    page.fill("text", "hello from chromium");
    page.click("send");
    page.wait(
        "its own message back",
        "window.demo.received.some((d) => d?.text === 'hello from chromium')",
    );
}
