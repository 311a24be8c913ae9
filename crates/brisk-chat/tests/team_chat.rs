//! The team chat end to end, as its users and its operator meet it: the app started as a
//! real master with workers and its mention process, against real PostgreSQL and Redis (and
//! SQLite alone), driven over HTTP and WebSocket as the page drives it.

mod common;

use std::time::Duration;

use brisk_testkit::exposition::{samples, scrape};
use brisk_testkit::*;
use common::*;
use serde_json::json;

#[test]
fn a_team_chats_on_postgres_and_redis() {
    let pg = Postgres::start().unwrap();
    let redis = Redis::start().unwrap();
    let (port, metrics_port) = (free_port(), free_port());
    let listen = format!("http://127.0.0.1:{port}");
    let metrics = format!("http://127.0.0.1:{metrics_port}");
    let (db_url, redis_url) = (pg.url(), redis.url());
    let chat = start_chat(
        &[
            ("CHAT_LISTEN", &listen),
            ("CHAT_DATABASE_URL", &db_url),
            ("CHAT_REDIS_URL", &redis_url),
            ("CHAT_SESSION_SECRET", SECRET),
            ("CHAT_CLUSTER_SECRET", "sixteen bytes at least"),
            ("CHAT_METRICS_LISTEN", &metrics),
            ("CHAT_WORKERS", "2"),
        ],
        2,
        1,
    );

    // The page, and an API that wants a session.
    let mut ann = Client::new(port);
    let page = ann.get("/");
    assert_eq!(page.status, 200);
    assert!(page.raw.text().contains("<title>team-chat</title>"));
    let a = ann.get("/api/me");
    assert_eq!(a.status, 401, "{a:?}");
    assert_eq!(a.json["error"], "sign in first");

    // Accounts: names and passwords checked, a name taken once.
    assert_eq!(ann.sign("/api/signup", "ann", "correct horse").status, 201);
    let me = ann.get("/api/me");
    assert_eq!(me.json["user"], "ann", "{me:?}");
    let mut bob = Client::new(port);
    assert_eq!(bob.sign("/api/signup", "ann", "another one").status, 409);
    assert_eq!(
        bob.sign("/api/signup", "bad name!", "long enough").status,
        400
    );
    assert_eq!(bob.sign("/api/signup", "bob", "short").status, 400);
    assert_eq!(bob.sign("/api/signup", "bob", "battery staple").status, 201);
    let mut bob = Client::new(port);
    let wrong = bob.sign("/api/login", "bob", "wrong password");
    assert_eq!(wrong.status, 401, "{wrong:?}");
    assert_eq!(bob.sign("/api/login", "bob", "battery staple").status, 200);

    // A room; a change without the CSRF token is refused.
    let mut forged = Client::new(port);
    forged.cookie = ann.cookie.clone();
    let a = forged.post("/api/rooms", json!({ "name": "ops" }));
    assert_eq!(a.status, 403, "{a:?}");
    assert_eq!(ann.post("/api/rooms", json!({ "name": "ops" })).status, 201);
    assert_eq!(ann.post("/api/rooms", json!({ "name": "ops" })).status, 409);
    assert_eq!(ann.post("/api/rooms", json!({ "name": "o p" })).status, 400);

    // Not a member yet: no history, no live socket.
    assert_eq!(bob.get("/api/rooms/ops/messages").status, 403);
    assert_eq!(bob.live("ops").err(), Some(403));
    assert_eq!(Client::new(port).live("ops").err(), Some(401));
    assert_eq!(bob.post("/api/rooms/nowhere/join", json!({})).status, 404);
    assert_eq!(bob.post("/api/rooms/ops/join", json!({})).status, 200);
    let rooms = bob.get("/api/rooms");
    assert_eq!(rooms.json[0]["name"], "ops", "{rooms:?}");
    assert_eq!(rooms.json[0]["member"], 1);

    // Both listen; a post reaches both sockets (whichever workers hold them), and its
    // mention reaches bob through the queue and the mention process.
    let mut ann_live = ann.live("ops").expect("ann's socket");
    let mut bob_live = bob.live("ops").expect("bob's socket");
    // Bob also follows the room as server-sent events (whichever worker serves them).
    assert_eq!(Client::new(port).events("ops").err(), Some(401));
    let mut bob_events = bob.events("ops").expect("bob's event stream");
    assert_eq!(ann_live.expect("joined")["user"], "ann");
    assert_eq!(bob_live.expect("joined")["user"], "bob");
    let posted = ann.post("/api/rooms/ops/messages", json!({ "body": "hello @bob" }));
    assert_eq!(posted.status, 201, "{posted:?}");
    let id = posted.json["message"]["id"].as_i64().unwrap();
    for live in [&mut ann_live, &mut bob_live] {
        let event = live.expect("message");
        assert_eq!(event["message"]["id"], id);
        assert_eq!(event["message"]["body"], "hello @bob");
        assert_eq!(event["message"]["author"], "ann");
    }
    let mention = bob_live.expect("mention");
    assert_eq!(mention["mention"]["message_id"], id, "{mention}");
    assert_eq!(mention["mention"]["room"], "ops");
    assert_eq!(bob_events.expect("message")["message"]["id"], id);
    assert_eq!(bob_events.expect("mention")["mention"]["message_id"], id);
    let mentions = bob.get("/api/mentions");
    assert_eq!(mentions.json[0]["message_id"], id, "{mentions:?}");
    assert_eq!(ann.get("/api/mentions").json, json!([]));

    // A socket listens only; what it sends is answered with an error event.
    bob_live
        .ws
        .send(tungstenite::Message::text("can I post here?"))
        .unwrap();
    let e = bob_live.expect("error");
    assert!(e["error"].as_str().unwrap().contains("POST"), "{e}");

    // Text that looks like SQL is kept as text; bad posts are refused with why.
    let sql = "'); DROP TABLE messages; --";
    assert_eq!(
        bob.post("/api/rooms/ops/messages", json!({ "body": sql }))
            .status,
        201
    );
    assert_eq!(ann_live.expect("message")["message"]["body"], sql);
    let history = ann.get("/api/rooms/ops/messages");
    let bodies: Vec<&str> = history
        .json
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["body"].as_str().unwrap())
        .collect();
    assert_eq!(bodies, ["hello @bob", sql], "oldest first");
    let before = ann.get(&format!("/api/rooms/ops/messages?before={}", id + 1));
    assert_eq!(before.json.as_array().unwrap().len(), 1, "{before:?}");
    assert_eq!(
        bob.post("/api/rooms/ops/messages", json!({ "body": "  " }))
            .status,
        400
    );
    let long = "x".repeat(4001);
    assert_eq!(
        bob.post("/api/rooms/ops/messages", json!({ "body": long }))
            .status,
        413
    );
    let a = bob.send(
        "POST",
        "/api/rooms/ops/messages",
        Some(json!({ "text": "hi" })),
    );
    assert_eq!(a.status, 422, "a body without `body`: {a:?}");

    // What was answered 201 is in the database: two messages, counted in the room.
    let count = pg
        .sql("SELECT message_count FROM rooms WHERE name = 'ops'")
        .unwrap();
    assert_eq!(count.trim(), "2");
    let rows = pg.sql("SELECT count(*) FROM messages").unwrap();
    assert_eq!(rows.trim(), "2");

    // Only the owner removes; bob's socket closes with 4003 and his access ends.
    assert_eq!(
        bob.send("DELETE", "/api/rooms/ops/members/ann", None)
            .status,
        403
    );
    assert_eq!(
        ann.send("DELETE", "/api/rooms/ops/members/cy", None).status,
        404
    );
    assert_eq!(
        ann.send("DELETE", "/api/rooms/ops/members/bob", None)
            .status,
        200
    );
    let (code, reason) = bob_live.expect_close();
    assert_eq!((code, reason.as_str()), (4003, "removed from the room"));
    // His event stream ends too, after the message he was sent before, with why.
    assert_eq!(bob_events.expect("message")["message"]["body"], sql);
    assert_eq!(
        bob_events.next(),
        Some(json!({ "code": 4003, "reason": "removed from the room" }))
    );
    assert!(
        bob_events.next().is_none(),
        "the stream goes on after the removal"
    );
    assert_eq!(bob.get("/api/rooms/ops/messages").status, 403);
    // What he was told of the room goes with it.
    assert_eq!(bob.get("/api/mentions").json, json!([]));
    // He cannot undo the removal by joining again (issue 66); the owner can add him back.
    let again = bob.post("/api/rooms/ops/join", json!({}));
    assert_eq!(again.status, 403, "{again:?}");
    assert!(
        again.json["error"].as_str().unwrap().contains("owner"),
        "{again:?}"
    );
    assert_eq!(bob.get("/api/rooms/ops/messages").status, 403);
    assert_eq!(
        bob.send("PUT", "/api/rooms/ops/members/bob", None).status,
        403
    );
    assert_eq!(
        ann.send("PUT", "/api/rooms/ops/members/bob", None).status,
        200
    );
    assert_eq!(bob.get("/api/rooms/ops/messages").status, 200);
    ann_live.close();

    // The operator's view: the app's metrics beside Brisk's, the database among them.
    let figures = wait_for(Duration::from_secs(10), "the app's metrics", || {
        let s = samples(&scrape(metrics_port));
        (s.get("chat_mentions_delivered_total") == Some(&1.0)).then_some(s)
    });
    assert_eq!(figures["chat_messages_posted_total"], 2.0);
    assert_eq!(figures["chat_logins_failed_total"], 1.0);
    assert_eq!(figures["chat_post_seconds_count"], 2.0);
    assert!(
        figures
            .keys()
            .any(|k| k.starts_with("brisk_db_connections")),
        "no database figures"
    );

    // A control command needs none of the settings (here: no secret in its environment).
    let status = chat.cli_ok(&["status"]);
    assert!(String::from_utf8_lossy(&status.stdout).contains("mentions"));
}

#[test]
fn runs_on_sqlite_alone() {
    let dir = temp_dir("team-chat-sqlite");
    let port = free_port();
    let listen = format!("http://127.0.0.1:{port}");
    let db_url = format!("sqlite:{}", dir.path().join("chat.sqlite").display());
    let _chat = start_chat(
        &[
            ("CHAT_LISTEN", &listen),
            ("CHAT_DATABASE_URL", &db_url),
            ("CHAT_SESSION_SECRET", SECRET),
            ("CHAT_WORKERS", "2"),
        ],
        2,
        0,
    );
    let mut cy = Client::new(port);
    assert_eq!(cy.sign("/api/signup", "cy", "a good password").status, 201);
    assert_eq!(cy.post("/api/rooms", json!({ "name": "solo" })).status, 201);
    let mut live = cy.live("solo").expect("cy's socket");
    live.expect("joined");
    let posted = cy.post(
        "/api/rooms/solo/messages",
        json!({ "body": "@nobody hears" }),
    );
    assert_eq!(posted.status, 201, "{posted:?}");
    assert_eq!(live.expect("message")["message"]["body"], "@nobody hears");
    // Signing out is a change: another site's form, without the CSRF token, cannot.
    let token = cy.csrf.take();
    assert_eq!(cy.post("/api/logout", json!({})).status, 403);
    assert_eq!(cy.get("/api/rooms").status, 200);
    cy.csrf = token;
    // Signed out: the cookie is gone, and so is the access.
    assert_eq!(cy.post("/api/logout", json!({})).status, 200);
    assert!(cy.cookie.is_none());
    assert_eq!(cy.get("/api/rooms").status, 401);
}

#[test]
fn start_refuses_wrong_settings_with_the_key() {
    let bin = env!("CARGO_BIN_EXE_team-chat");
    let log = ServerProcess::start_fails(bin, &[], &[]);
    assert!(log.contains("session_secret"), "{log}");
    let log = ServerProcess::start_fails(
        bin,
        &[],
        &[("CHAT_SESSION_SECRET", SECRET), ("CHAT_WORKERS", "many")],
    );
    assert!(log.to_lowercase().contains("workers"), "{log}");
    let log = ServerProcess::start_fails(
        bin,
        &[],
        &[
            ("CHAT_SESSION_SECRET", SECRET),
            ("CHAT_REDIS_URL", "redis://127.0.0.1:1/"),
        ],
    );
    assert!(log.contains("cluster_secret"), "{log}");
    let log = ServerProcess::start_fails(
        bin,
        &[],
        &[
            ("CHAT_SESSION_SECRET", SECRET),
            ("CHAT_DATABASE_URL", "oracle://x"),
        ],
    );
    assert!(
        log.contains("settings: database_url: neither sqlite:PATH nor postgres://"),
        "{log}"
    );
    // A control command still works with those settings: it only talks to the master.
    let run_dir = temp_dir("team-chat-status");
    let out = std::process::Command::new(bin)
        .args(["--run-dir", &run_dir.path().display().to_string(), "status"])
        .env("CHAT_DATABASE_URL", "oracle://x")
        .output()
        .unwrap();
    let said =
        String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    assert!(said.contains("not running"), "{said}");
    assert!(!said.contains("database_url"), "{said}");
}
