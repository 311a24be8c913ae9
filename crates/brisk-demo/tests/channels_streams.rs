//! Channels as event streams (`/connection/sse`) and as newline-delimited JSON
//! (`/connection/stream`): the channels a token allows, publications on both instances,
//! and recovery of what a stream missed.

use std::net::TcpStream;
use std::time::Duration;

use brisk_testkit::*;
use serde_json::{json, Value as Json};

mod common;
use common::get;

mod channels_common;
use channels_common::*;

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

/// Issue 66, low finding: each event stream's token-expiry timer outlived the stream, so a
/// client reconnecting with a token of an hour left a timer per connection for that hour.
/// Now a stream that ends takes its timer with it.
#[test]
fn an_event_stream_that_ends_takes_its_expiry_timer_with_it() {
    let (_redis, a, b, _dir) = cluster();
    let timers = || -> u64 {
        let status = b.server.status().unwrap();
        (status["workers"].as_array().unwrap().iter())
            .filter(|w| w["server"] == format!("http://127.0.0.1:{}", b.http))
            .map(|w| w["timers"].as_u64().unwrap())
            .sum()
    };
    let before = timers();
    let alice = token_with(SECRET, "alice", json!({ "exp": now() + 3600 }));
    let streams: Vec<_> = (0..20)
        .map(|_| {
            let (r, mut s) = sse(&b, &format!("token={alice}&channel=news:timers"));
            assert_eq!(r.status, 200);
            assert_eq!(next_event(&mut s)["connected"]["user"], "alice");
            s
        })
        .collect();
    wait_until(Duration::from_secs(5), "20 expiry timers", || {
        timers() == before + 20
    });
    // A stream finds its client gone when it next writes (a publication, or its keep-alive
    // comment every 15 s).
    drop(streams);
    wait_until(
        Duration::from_secs(20),
        "the timers gone with their streams",
        || {
            api(
                &a,
                "publish",
                json!({ "channel": "news:timers", "data": 1 }),
            );
            timers() == before
        },
    );
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
