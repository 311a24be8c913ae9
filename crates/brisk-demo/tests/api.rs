//! The demo's `/api` team chat on each backend (SQLite by default, PostgreSQL, MariaDB), its
//! schema from the migrations the start applied: every route and every error it names, and
//! 200 posts to one room at once across two workers, after which the room's `message_count`
//! equals the messages stored.

mod common;

use brisk_testkit::*;
use common::*;
use serde_json::Value as Json;

fn post(port: u16, path: &str, body: &str) -> HttpResponse {
    request(
        port,
        "POST",
        path,
        &[("Content-Type", "application/json")],
        body,
    )
}

/// The JSON of `r`, which must have `status` and be JSON.
fn json_of(r: &HttpResponse, status: u16) -> Json {
    assert_eq!(r.status, status, "{}", r.text());
    assert_eq!(
        r.header("content-type"),
        Some("application/json"),
        "{}",
        r.text()
    );
    serde_json::from_slice(&r.body).unwrap_or_else(|e| panic!("{e}: {}", r.text()))
}

/// An error answer: `status` and `{"error": "…"}` whose words contain `words`.
fn error_of(r: &HttpResponse, status: u16, words: &str) {
    let body = json_of(r, status);
    let text = body["error"].as_str().unwrap_or_else(|| panic!("{body}"));
    assert!(
        text.contains(words),
        "{status} {text:?} does not say {words:?}"
    );
    assert_eq!(body.as_object().unwrap().len(), 1, "{body}");
}

/// An RFC 3339 timestamp in UTC with a `Z`.
fn is_utc_time(v: &Json) -> bool {
    v.as_str()
        .is_some_and(|t| t.ends_with('Z') && chrono::DateTime::parse_from_rfc3339(t).is_ok())
}

/// Every route and error, on a fresh database; the id of a room with 3 messages.
fn exercise(port: u16) -> String {
    let room = json_of(&post(port, "/api/rooms", r#"{"name": "ops"}"#), 201);
    let id = room["id"].as_str().unwrap().to_string();
    assert!(uuid::Uuid::parse_str(&id).is_ok(), "{room}");
    assert_eq!(room["name"], "ops");
    assert_eq!(room["message_count"], 0);
    assert!(is_utc_time(&room["created_at"]), "{room}");
    assert_eq!(room.as_object().unwrap().len(), 4, "{room}");

    error_of(
        &post(port, "/api/rooms", r#"{"name": "ops"}"#),
        409,
        "exists already",
    );
    error_of(&post(port, "/api/rooms", r#"{"name": ""}"#), 400, "name");
    error_of(&post(port, "/api/rooms", r#"{"name": "  "}"#), 400, "name");
    error_of(&post(port, "/api/rooms", r#"{}"#), 400, "name is required");
    error_of(&post(port, "/api/rooms", "not json"), 400, "not JSON");
    error_of(&post(port, "/api/rooms", r#"{"name": 7}"#), 400, "shape");

    let path = format!("/api/rooms/{id}/messages");
    let mut posted = Vec::new();
    for (author, text) in [("ann", "hello"), ("bob", "hi, ann"), ("ann", "ünïcödé ✓")] {
        let body = serde_json::json!({ "author": author, "text": text }).to_string();
        let m = json_of(&post(port, &path, &body), 201);
        assert_eq!(m["room_id"], id.as_str());
        assert_eq!(
            (m["author"].as_str(), m["text"].as_str()),
            (Some(author), Some(text))
        );
        assert!(is_utc_time(&m["created_at"]), "{m}");
        assert_eq!(m.as_object().unwrap().len(), 5, "{m}");
        posted.push(m);
    }
    let long = "x".repeat(4_001);
    let body = serde_json::json!({ "author": "ann", "text": long }).to_string();
    error_of(&post(port, &path, &body), 400, "4000");
    let fits = serde_json::json!({ "author": "ann", "text": "é".repeat(4_000) }).to_string();
    assert_eq!(post(port, &path, &fits).status, 201, "4,000 characters fit");
    error_of(
        &post(port, &path, r#"{"author": "ann"}"#),
        400,
        "text is required",
    );
    error_of(&post(port, &path, "{"), 400, "not JSON");

    let room = json_of(&get(port, &format!("/api/rooms/{id}")), 200);
    assert_eq!(room["message_count"], 4);
    assert!(is_utc_time(&room["last_message_at"]), "{room}");
    assert_eq!(room.as_object().unwrap().len(), 5, "{room}");

    // Newest first; the limit defaults to 50 and stops at 200.
    let page = json_of(&get(port, &format!("{path}?limit=2")), 200);
    let page = page.as_array().unwrap();
    assert_eq!(page.len(), 2);
    assert_eq!(page[0]["text"], "é".repeat(4_000));
    assert_eq!(page[1], posted[2]);
    let all = json_of(&get(port, &path), 200);
    assert_eq!(all.as_array().unwrap().len(), 4);
    assert_eq!(all[3], posted[0]);
    assert_eq!(
        json_of(&get(port, &format!("{path}?limit=5000")), 200)
            .as_array()
            .unwrap()
            .len(),
        4
    );
    error_of(&get(port, &format!("{path}?limit=0")), 400, "limit");
    error_of(&get(port, &format!("{path}?limit=x")), 400, "limit");

    // Ids that are not UUIDs, and rooms that do not exist.
    error_of(&get(port, "/api/rooms/123"), 400, "not a room id");
    error_of(
        &post(
            port,
            "/api/rooms/123/messages",
            r#"{"author":"a","text":"b"}"#,
        ),
        400,
        "not a room id",
    );
    let unknown = "/api/rooms/0190f0c6-0000-7000-8000-000000000000";
    error_of(&get(port, unknown), 404, "no such room");
    error_of(
        &get(port, &format!("{unknown}/messages")),
        404,
        "no such room",
    );
    error_of(
        &post(
            port,
            &format!("{unknown}/messages"),
            r#"{"author":"a","text":"b"}"#,
        ),
        404,
        "no such room",
    );
    error_of(
        &request(port, "DELETE", &format!("/api/rooms/{id}"), &[], ""),
        405,
        "GET",
    );
    error_of(&get(port, "/api/rooms/a/b/c"), 404, "no such route");
    id
}

/// 200 posts to one new room at once, over 8 clients with a connection each per post (so
/// both workers take some); every one answered 201, and the room counts what is stored.
fn post_at_once(port: u16) -> String {
    let room = json_of(&post(port, "/api/rooms", r#"{"name": "busy"}"#), 201);
    let id = room["id"].as_str().unwrap().to_string();
    let path = format!("/api/rooms/{id}/messages");
    std::thread::scope(|s| {
        for client in 0..8 {
            let path = &path;
            s.spawn(move || {
                for n in 0..25 {
                    let body = format!(r#"{{"author": "client {client}", "text": "{n}"}}"#);
                    let r = post(port, path, &body);
                    assert_eq!(r.status, 201, "{}", r.text());
                }
            });
        }
    });
    let room = json_of(&get(port, &format!("/api/rooms/{id}")), 200);
    assert_eq!(room["message_count"], 200, "{room}");
    let stored = json_of(&get(port, &format!("{path}?limit=200")), 200);
    assert_eq!(stored.as_array().unwrap().len(), 200);
    id
}

#[test]
fn the_api_on_the_default_sqlite() {
    let d = demo_with(2, &[]);
    exercise(d.http);
    post_at_once(d.http);
}

#[test]
fn the_api_on_postgresql() {
    let pg = Postgres::start().unwrap();
    let d = demo_with(2, &["--database", &pg.url()]);
    exercise(d.http);
    let id = post_at_once(d.http);
    let stored = pg
        .sql(&format!(
            "SELECT count(*) FROM messages WHERE room_id = '{id}'"
        ))
        .unwrap();
    assert_eq!(stored.trim(), "200");
    let counted = pg
        .sql(&format!(
            "SELECT message_count FROM rooms WHERE id = '{id}'"
        ))
        .unwrap();
    assert_eq!(counted.trim(), "200");
}

#[test]
fn the_api_on_mariadb() {
    let db = MariaDb::start().unwrap();
    let d = demo_with(2, &["--database", &db.url()]);
    exercise(d.http);
    let id = post_at_once(d.http);
    let stored = db
        .sql(&format!(
            "SELECT (SELECT count(*) FROM brisk.messages WHERE room_id = '{id}'), \
             (SELECT message_count FROM brisk.rooms WHERE id = '{id}')"
        ))
        .unwrap();
    assert_eq!(
        stored.split_whitespace().collect::<Vec<_>>(),
        ["200", "200"]
    );
}

/// The migrations ran at start, once, before a worker served: the `migrate` command finds
/// nothing to do, and lists both files as applied.
#[test]
fn the_start_applied_the_migrations_and_migrate_lists_them() {
    let pg = Postgres::start().unwrap();
    let d = demo_with(1, &["--database", &pg.url()]);
    assert!(
        d.server.log().contains("migration 0002_chat.sql applied"),
        "{}",
        d.server.log()
    );
    let out = d.server.cli(&["migrate", "--list"]);
    let listed = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{listed}");
    assert!(listed.contains("applied  0001_techempower.sql"), "{listed}");
    assert!(listed.contains("applied  0002_chat.sql"), "{listed}");
    let out = d.server.cli(&["migrate"]);
    assert!(String::from_utf8_lossy(&out.stdout).contains("nothing to apply"));
    let versions = pg
        .sql("SELECT string_agg(version::text, ',' ORDER BY version) FROM brisk_migrations")
        .unwrap();
    assert_eq!(versions.trim(), "1,2");
}
