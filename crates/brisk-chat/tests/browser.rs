//! The team chat's page in a real browser: headless Chromium (Debian's package, installed by
//! scripts/install-test-servers) driven over the DevTools protocol. Ann signs up, creates a
//! room and posts from the page; Bob, a second client over HTTP and WebSocket, joins, posts
//! and mentions her; the page shows what arrives live.

mod common;

use brisk_testkit::*;
use common::*;
use serde_json::json;

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
    click_room(&mut page, "lobby");
    page.wait(
        "the history after a reload",
        "document.querySelectorAll('#messages li').length === 2",
    );
}

/// Clicks the button of room `name` in the page's room list, once it is listed.
fn click_room(page: &mut Page, name: &str) {
    let selector = format!("#rooms button[data-room={}]", json!(name));
    page.wait(
        "the room listed",
        &format!("!!document.querySelector({})", json!(selector)),
    );
    page.eval(&format!(
        "document.querySelector({}).click()",
        json!(selector)
    ));
}
