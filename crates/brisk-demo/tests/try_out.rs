//! The demo's try-out endpoints (issue 66): `GET /connection/token` mints a token for any
//! user, `POST /chat/say` and `/chat/kick` act on any room, `POST /jobs` queues work and
//! `POST /mail` relays mail. Served to clients on this machine only; a request that came
//! through a proxy (as from the load balancer of a deployed demo) gets 403 naming the flag
//! that opens them, unless the demo was started with `--open-try-out`.

use brisk_testkit::*;

mod common;
use common::{demo_with, request};

/// The try-out requests, each as a proxy would forward it from `client`.
fn forwarded(port: u16, client: &str) -> Vec<HttpResponse> {
    let xff = [("X-Forwarded-For", client)];
    let fwd = format!("for={client}");
    let forwarded = [("Forwarded", fwd.as_str())];
    vec![
        request(port, "GET", "/connection/token?user=mallory", &xff, ""),
        request(port, "POST", "/chat/say?room=lobby", &forwarded, "hello"),
        request(port, "POST", "/chat/kick?room=lobby&user=ann", &xff, ""),
        request(port, "POST", "/jobs", &xff, r#"{"n": 1}"#),
        request(port, "POST", "/mail", &forwarded, "{}"),
    ]
}

#[test]
fn try_out_endpoints_answer_this_machine_only_unless_opened() {
    let d = demo_with(1, &[]);
    for r in forwarded(d.http, "203.0.113.9") {
        assert_eq!(r.status, 403, "{}", r.text());
        assert!(r.text().contains("--open-try-out"), "{}", r.text());
    }
    // From this machine itself: served (the token; the others answer as they would).
    let r = request(d.http, "GET", "/connection/token?user=ann", &[], "");
    assert_eq!(r.status, 200, "{}", r.text());
    // Other routes through a proxy are served as before.
    let r = request(
        d.http,
        "GET",
        "/json",
        &[("X-Forwarded-For", "203.0.113.9")],
        "",
    );
    assert_eq!(r.status, 200);

    let open = demo_with(1, &["--open-try-out"]);
    let answers = forwarded(open.http, "203.0.113.9");
    assert_eq!(answers[0].status, 200, "{}", answers[0].text());
    for r in &answers {
        assert_ne!(r.status, 403, "{}", r.text());
    }
}
