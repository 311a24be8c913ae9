//! Channels for products (issue 35): the channel protocol at `/connection/websocket` and the
//! server API under `/api/channels/`, on two demo instances sharing one Redis (and one token
//! key): tokens refused with the documented close codes, channels a token does not allow
//! refused, a server-API publish reaching subscribers on both instances exactly once,
//! recovery of what a client missed while away, `disconnect` closing a user's sockets on both
//! instances, presence, history, join/leave pushes, refresh and expiry, keys from a JWKS URL.
//! Event streams and HTTP streams are in `channels_streams.rs`, MessagePack clients in
//! `channels_msgpack.rs`.

use std::time::Duration;

use brisk_testkit::*;
use serde_json::{json, Value as Json};
use tungstenite::Message;

mod common;
use common::{demo_with, get, redis_refused, request, Demo};

mod channels_common;
use channels_common::*;

#[test]
fn tokens_are_checked_at_connect_and_per_channel() {
    let (_redis, a, _b, _dir) = cluster();
    let refused = |token: Option<String>| {
        let mut c = Client::open(&a);
        c.send("connect", json!({ "token": token }));
        c.closed_with()
    };
    let expired = token_with(SECRET, "alice", json!({ "exp": now() - 120 }));
    assert_eq!(refused(Some(expired)).0, 4002);
    let forged = token_with(
        b"another-secret-of-enough-length-0123456",
        "alice",
        json!({}),
    );
    let (code, reason) = refused(Some(forged));
    assert_eq!(code, 4001, "{reason}");
    assert!(reason.contains("signature"), "{reason}");
    let elsewhere = token_with(SECRET, "alice", json!({ "aud": "another-app" }));
    let (code, reason) = refused(Some(elsewhere));
    assert_eq!(code, 4001);
    assert!(reason.contains("audience"), "{reason}");
    assert_eq!(refused(None).0, 4001);
    assert_eq!(refused(Some("not.a.jwt".into())).0, 4001);
    // Not JSON at all: a protocol violation.
    let mut c = Client::open(&a);
    c.ws.send(Message::text("hello")).unwrap();
    assert_eq!(c.closed_with().0, 4004);

    let mut alice = Client::connected(&a, "alice");
    // Commands before connect, bad commands: error replies, the connection stays.
    let mut fresh = Client::open(&a);
    let r = fresh.call("subscribe", json!({ "channel": "chat:x" }));
    assert_eq!(r["error"]["code"], 101, "{r}");
    let r = alice.call("shout", json!({}));
    assert_eq!(r["error"]["code"], 104, "{r}");
    let r = alice.call("subscribe", json!({ "channel": "nowhere:x" }));
    assert_eq!(r["error"]["code"], 102, "{r}");
    let r = alice.call("subscribe", json!({ "channel": "bad channel" }));
    assert_eq!(r["error"]["code"], 102, "{r}");
    // private:alice is in alice's token; private:bob is not.
    let r = alice.call("subscribe", json!({ "channel": "private:alice" }));
    assert!(r["result"].is_object(), "{r}");
    let r = alice.call("subscribe", json!({ "channel": "private:bob" }));
    assert_eq!(r["error"]["code"], 103, "{r}");
    let r = alice.call("subscribe", json!({ "channel": "private:alice" }));
    assert_eq!(r["error"]["code"], 105, "{r}");
    // Only the server publishes to news and private channels.
    alice.call("subscribe", json!({ "channel": "news:today" }));
    let r = alice.call("publish", json!({ "channel": "news:today", "data": 1 }));
    assert_eq!(r["error"]["code"], 103, "{r}");
    // Publishing to chat needs a subscription to it.
    let r = alice.call("publish", json!({ "channel": "chat:lobby", "data": 1 }));
    assert_eq!(r["error"]["code"], 107, "{r}");
    let r = alice.call("ping", json!({}));
    assert_eq!(r["result"], json!({}));
    let r = alice.call(
        "connect",
        json!({ "token": token_with(SECRET, "alice", json!({})) }),
    );
    assert_eq!(r["error"]["code"], 110, "{r}");
}

#[test]
fn a_server_api_publish_reaches_each_subscriber_on_both_instances_once() {
    let (_redis, a, b, _dir) = cluster();
    // Three subscribers on A (spread over its workers), two on B.
    let mut clients: Vec<Client> = (0..3)
        .map(|i| Client::connected(&a, &format!("a{i}")))
        .chain((0..2).map(|i| Client::connected(&b, &format!("b{i}"))))
        .collect();
    for c in &mut clients {
        let r = c.call("subscribe", json!({ "channel": "news:today" }));
        assert!(r["result"]["position"].is_string(), "{r}");
    }
    wait_for_clients(&a, "news:today", 5);
    let mut offsets = Vec::new();
    for n in 0..3 {
        let (status, r) = api(
            &a,
            "publish",
            json!({ "channel": "news:today", "data": { "n": n } }),
        );
        assert_eq!(status, 200, "{r}");
        offsets.push(
            r["result"]["offset"]
                .as_str()
                .expect("an offset")
                .to_owned(),
        );
    }
    // A broadcast to two channels, through B.
    let (status, r) = api(
        &b,
        "broadcast",
        json!({ "channels": ["news:today", "news:other"], "data": "both" }),
    );
    assert_eq!(status, 200, "{r}");
    assert!(r["result"]["results"][1]["offset"].is_string(), "{r}");
    let mut want: Vec<(String, Json)> = (offsets.iter().cloned())
        .zip((0..3).map(|n| json!({ "n": n })))
        .collect();
    want.push((
        r["result"]["results"][0]["offset"].as_str().unwrap().into(),
        json!("both"),
    ));
    for c in &mut clients {
        // Publications sent through different workers can arrive out of offset order (the
        // protocol says so; clients order them by offset): each exactly once.
        let mut got: Vec<(String, Json)> = (0..4)
            .map(|_| c.publication("news:today"))
            .map(|p| (p["offset"].as_str().unwrap().to_owned(), p["data"].clone()))
            .collect();
        got.sort_by_key(|(offset, _)| offset.rsplit(':').next().unwrap().parse::<u64>().unwrap());
        assert_eq!(got, want);
        assert_eq!(c.push(Duration::from_millis(300)), None);
    }
    // History and the active channels through the API.
    let (_, r) = api(
        &b,
        "history",
        json!({ "channel": "news:today", "limit": 2 }),
    );
    let publications = r["result"]["publications"].as_array().unwrap();
    assert_eq!(publications.len(), 2, "{r}");
    assert_eq!(publications[0]["offset"], offsets[2].as_str());
    assert_eq!(publications[1]["data"], "both");
    let (_, r) = api(&a, "channels", json!({}));
    assert_eq!(r["result"]["channels"]["news:today"]["clients"], 5, "{r}");
}

#[test]
fn a_client_that_was_away_recovers_what_it_missed_in_order() {
    let (_redis, a, b, _dir) = cluster();
    let mut writer = Client::connected(&a, "writer");
    writer.call("subscribe", json!({ "channel": "chat:room" }));
    let mut reader = Client::connected(&b, "reader");
    let r = reader.call("subscribe", json!({ "channel": "chat:room" }));
    let mut last = r["result"]["position"].as_str().unwrap().to_owned();
    wait_for_clients(&a, "chat:room", 2);
    let r = writer.call(
        "publish",
        json!({ "channel": "chat:room", "data": { "text": "one" } }),
    );
    let first = r["result"]["offset"]
        .as_str()
        .expect("an offset")
        .to_owned();
    let p = reader.publication("chat:room");
    assert_eq!(p["offset"], first.as_str());
    last = p["offset"].as_str().unwrap_or(&last).to_owned();
    // The reader's connection is gone (its socket shut, no closing handshake).
    reader
        .ws
        .get_ref()
        .shutdown(std::net::Shutdown::Both)
        .unwrap();
    drop(reader);
    let sent: Vec<String> = (0..5)
        .map(|i| {
            let r = writer.call(
                "publish",
                json!({ "channel": "chat:room", "data": { "text": i } }),
            );
            r["result"]["offset"].as_str().unwrap().to_owned()
        })
        .collect();
    let mut back = Client::connected(&b, "reader");
    let r = back.call(
        "subscribe",
        json!({ "channel": "chat:room", "since": last }),
    );
    assert_eq!(r["result"]["recovered"], true, "{r}");
    let got: Vec<(String, Json)> = (r["result"]["publications"].as_array().unwrap().iter())
        .map(|p| {
            (
                p["offset"].as_str().unwrap().to_owned(),
                p["data"]["text"].clone(),
            )
        })
        .collect();
    let want: Vec<(String, Json)> = sent.iter().cloned().zip((0..5).map(|i| json!(i))).collect();
    assert_eq!(got, want);
    assert_eq!(r["result"]["position"], sent[4].as_str());
    // A gap filled from the history, without subscribing again.
    let r = back.call(
        "history",
        json!({ "channel": "chat:room", "since": sent[2] }),
    );
    assert_eq!(r["result"]["recovered"], true, "{r}");
    let tail: Vec<&Json> = (r["result"]["publications"].as_array().unwrap().iter())
        .map(|p| &p["offset"])
        .collect();
    assert_eq!(tail, [&json!(sent[3]), &json!(sent[4])]);
    // A position the history no longer means: not recovered, and why.
    let mut other = Client::connected(&a, "late");
    let r = other.call(
        "subscribe",
        json!({ "channel": "chat:room", "since": "1:1" }),
    );
    assert_eq!(r["result"]["recovered"], false, "{r}");
    assert!(
        r["result"]["reason"].as_str().unwrap().contains("epoch"),
        "{r}"
    );
    let r = other.call(
        "subscribe",
        json!({ "channel": "chat:other", "since": "nonsense" }),
    );
    assert_eq!(r["error"]["code"], 104, "{r}");
}

/// 20 publications of 20 KB missed: more than a page of the history (256 KiB). `subscribe`
/// answers the first page with `"more":true`, each page within the bound, and `history` from
/// the last one gives the rest, in order, the last page without `more`.
#[test]
fn a_recovery_larger_than_a_page_comes_in_pages() {
    const PAGE: usize = 256 << 10;
    let (_redis, a, _b, _dir) = cluster();
    let mut reader = Client::connected(&a, "reader");
    let r = reader.call("subscribe", json!({ "channel": "news:pages" }));
    let start = r["result"]["position"].as_str().unwrap().to_owned();
    reader.call("unsubscribe", json!({ "channel": "news:pages" }));
    let sent: Vec<String> = (0..20)
        .map(|i| {
            let data = format!("{i}:{}", "x".repeat(20_000));
            let (status, r) = api(
                &a,
                "publish",
                json!({ "channel": "news:pages", "data": data }),
            );
            assert_eq!(status, 200, "{r}");
            r["result"]["offset"].as_str().unwrap().to_owned()
        })
        .collect();
    let offsets_of = |r: &Json| -> Vec<String> {
        let publications = r["result"]["publications"]
            .as_array()
            .expect("publications");
        let size: usize = publications
            .iter()
            .map(|p| p["data"].as_str().unwrap().len())
            .sum();
        assert!(size <= PAGE, "a page of {size} bytes");
        publications
            .iter()
            .map(|p| p["offset"].as_str().unwrap().to_owned())
            .collect()
    };
    let r = reader.call(
        "subscribe",
        json!({ "channel": "news:pages", "since": start }),
    );
    assert_eq!(r["result"]["recovered"], true, "{}", r["result"]["reason"]);
    assert_eq!(r["result"]["more"], true);
    let mut got = offsets_of(&r);
    assert!(got.len() < 20 && !got.is_empty(), "{}", got.len());
    loop {
        let since = got.last().unwrap().clone();
        let r = reader.call(
            "history",
            json!({ "channel": "news:pages", "since": since }),
        );
        assert_eq!(r["result"]["recovered"], true);
        got.extend(offsets_of(&r));
        if r["result"]["more"] != true {
            assert!(r["result"].get("more").is_none());
            break;
        }
    }
    assert_eq!(got, sent);
}

/// Issue 66, M2: history entries put in Redis by anyone but the app — a genuine entry with
/// its data changed, and a genuine entry of another channel copied in — are never sent: a
/// recovery that meets one is told it cannot recover (the client reloads), `history` leaves
/// them out, and the instance counts each in `redis_refused`.
#[test]
fn history_entries_not_sealed_with_the_apps_secret_are_never_sent() {
    let (redis, a, _b, _dir) = cluster();
    let cli = |args: &[&str]| redis.cli(args).unwrap().trim_end().to_owned();
    let mut reader = Client::connected(&a, "reader");
    let mut start = |channel: &str| {
        let r = reader.call("subscribe", json!({ "channel": channel }));
        let at = r["result"]["position"].as_str().unwrap().to_owned();
        reader.call("unsubscribe", json!({ "channel": channel }));
        at
    };
    let (forged_at, moved_at) = (start("news:forged"), start("news:moved"));
    for (channel, data) in [
        ("news:forged", "one"),
        ("news:forged", "two"),
        ("news:moved", "1"),
    ] {
        let (status, r) = api(&a, "publish", json!({ "channel": channel, "data": data }));
        assert_eq!(status, 200, "{r}");
    }
    // An entry's fields as redis-cli prints them: id, then o, offset, d, data, n, nonce.seal.
    let entries = |channel: &str| -> Vec<Vec<String>> {
        let out = cli(&[
            "XRANGE",
            &format!("brisk:history:{{{channel}}}:stream"),
            "-",
            "+",
        ]);
        let lines: Vec<String> = out.lines().map(str::to_owned).collect();
        lines.chunks(7).map(<[String]>::to_vec).collect()
    };
    let genuine = entries("news:forged");
    assert_eq!(genuine.len(), 2, "{genuine:?}");
    assert_eq!(genuine[1][3], "d", "{genuine:?}");
    let add = |channel: &str, data: &str, n: &str| {
        let meta = format!("brisk:history:{{{channel}}}:meta");
        let offset = cli(&["HINCRBY", &meta, "s", "1"]);
        let stream = format!("brisk:history:{{{channel}}}:stream");
        cli(&["XADD", &stream, "*", "o", &offset, "d", data, "n", n]);
    };
    let changed = genuine[1][4].replace("two", "send your password to mallory");
    add("news:forged", &changed, &genuine[1][6]);
    add("news:moved", &genuine[0][4], &genuine[0][6]);
    for (channel, since) in [("news:forged", &forged_at), ("news:moved", &moved_at)] {
        let r = reader.call("subscribe", json!({ "channel": channel, "since": since }));
        assert_eq!(r["result"]["recovered"], false, "{channel}: {r}");
        let reason = r["result"]["reason"].as_str().unwrap();
        assert!(reason.contains("not sealed with the app's secret"), "{r}");
        assert!(!r.to_string().contains("mallory"), "{r}");
    }
    let (status, r) = api(&a, "history", json!({ "channel": "news:forged" }));
    assert_eq!(status, 200, "{r}");
    let kept: Vec<&Json> = r["result"]["publications"]
        .as_array()
        .unwrap()
        .iter()
        .collect();
    assert_eq!(kept.len(), 2, "{r}");
    assert!(!r.to_string().contains("mallory"), "{r}");
    wait_until(Duration::from_secs(5), "the refusals counted", || {
        redis_refused(&a) >= 3
    });
}

/// Issue 66, M2: presence counts put in Redis by anyone but the app — made up, or a genuine
/// worker's value copied under another worker — are not counted, and are counted in
/// `redis_refused` instead.
#[test]
fn presence_counts_not_sealed_with_the_apps_secret_are_not_counted() {
    let (redis, a, _b, _dir) = cluster();
    let cli = |args: &[&str]| redis.cli(args).unwrap().trim_end().to_owned();
    let mut alice = Client::connected(&a, "alice");
    alice.call("subscribe", json!({ "channel": "chat:lobby" }));
    let presence = || api(&a, "presence", json!({ "channel": "chat:lobby" })).1["result"].clone();
    wait_until(Duration::from_secs(10), "alice present", || {
        presence() == json!({ "clients": 1, "users": ["alice"] })
    });
    let keys = cli(&["KEYS", "brisk:presence:*chat:lobby"]);
    let (count_key, ids_key) = {
        let mut keys = keys.lines();
        let (k1, k2) = (keys.next().unwrap(), keys.next().unwrap());
        if k1.contains(":count:") {
            (k1.to_owned(), k2.to_owned())
        } else {
            (k2.to_owned(), k1.to_owned())
        }
    };
    // The one genuine worker, and its sealed value (a line with the time and seal, then it).
    let worker = cli(&["HKEYS", &count_key]);
    let sealed = cli(&["HGET", &count_key, &worker]);
    assert!(sealed.ends_with("\n1"), "{sealed:?}");
    let now = cli(&["TIME"]).lines().next().unwrap().to_owned() + "000";
    for (worker, count, ids) in [
        ("made-up", "1000".to_owned(), "mallory".to_owned()),
        ("copied", sealed.clone(), cli(&["HGET", &ids_key, &worker])),
    ] {
        cli(&["ZADD", "brisk:presence:alive", &now, worker]);
        cli(&["HSET", &count_key, worker, &count]);
        cli(&["HSET", &ids_key, worker, &ids]);
    }
    for _ in 0..3 {
        assert_eq!(presence(), json!({ "clients": 1, "users": ["alice"] }));
    }
    wait_until(Duration::from_secs(5), "the refusals counted", || {
        redis_refused(&a) >= 12
    });
}

#[test]
fn disconnect_closes_a_users_sockets_on_every_instance() {
    let (_redis, a, b, _dir) = cluster();
    let mut on_a = Client::connected(&a, "mallory");
    let mut on_b = Client::connected(&b, "mallory");
    let mut bystander = Client::connected(&b, "carol");
    on_a.call("subscribe", json!({ "channel": "chat:lobby" }));
    on_b.call("subscribe", json!({ "channel": "chat:lobby" }));
    bystander.call("subscribe", json!({ "channel": "chat:lobby" }));
    wait_until(
        Duration::from_secs(10),
        "presence to list both users",
        || {
            let (_, r) = api(&a, "presence", json!({ "channel": "chat:lobby" }));
            r["result"] == json!({ "clients": 3, "users": ["carol", "mallory"] })
        },
    );
    let (status, r) = api(
        &a,
        "disconnect",
        json!({ "user": "mallory", "code": 4009, "reason": "banned" }),
    );
    assert_eq!(status, 200, "{r}");
    assert_eq!(on_a.closed_with(), (4009, "banned".into()));
    assert_eq!(on_b.closed_with(), (4009, "banned".into()));
    // Carol stays, and sees mallory leave (twice: one per socket).
    let mut leaves = 0;
    while leaves < 2 {
        let p = bystander
            .push(Duration::from_secs(10))
            .expect("leave pushes");
        if p.get("leave").is_some() {
            assert_eq!(p["leave"]["user"], "mallory", "{p}");
            leaves += 1;
        }
    }
    let r = bystander.call("presence", json!({ "channel": "chat:lobby" }));
    assert!(r["result"]["clients"].is_u64(), "{r}");
    let (status, r) = api(&a, "disconnect", json!({ "user": "x", "code": 1000 }));
    assert_eq!(
        (status, r["error"]["code"].as_u64()),
        (400, Some(104)),
        "{r}"
    );
}

#[test]
fn the_server_api_refuses_what_it_cannot_take() {
    let (_redis, a, _b, _dir) = cluster();
    let publish = r#"{"channel":"news:x","data":1}"#;
    let r = request(a.http, "POST", "/api/channels/publish", &[], publish);
    assert_eq!(r.status, 401);
    let wrong = [("Authorization", "apikey wrong-key-0123456789")];
    let r = request(a.http, "POST", "/api/channels/publish", &wrong, publish);
    assert_eq!(r.status, 401);
    let key = [("X-API-Key", API_KEY)];
    let r = request(a.http, "POST", "/api/channels/publish", &key, publish);
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    let r = request(a.http, "GET", "/api/channels/publish", &key, "");
    assert_eq!(r.status, 405);
    let (status, r) = api(&a, "shout", json!({}));
    assert_eq!(status, 404, "{r}");
    let (status, r) = api(&a, "publish", json!({ "channel": "news:x" }));
    assert_eq!(status, 400, "{r}");
    assert!(
        r["error"]["message"].as_str().unwrap().contains("data"),
        "{r}"
    );
    let (status, r) = api(&a, "publish", json!({ "channel": "nowhere:x", "data": 1 }));
    assert_eq!(
        (status, r["error"]["code"].as_u64()),
        (400, Some(102)),
        "{r}"
    );
    let (status, r) = api(&a, "presence", json!({ "channel": "news:x" }));
    assert_eq!(
        (status, r["error"]["code"].as_u64()),
        (400, Some(108)),
        "{r}"
    );
    let big = json!({ "channel": "news:x", "data": "x".repeat(2 << 20) });
    let (status, _) = api(&a, "publish", big);
    assert_eq!(status, 413);
    // Data comes back from the history as it was published (keys in its order).
    let auth = format!("apikey {API_KEY}");
    let headers = [("Authorization", auth.as_str())];
    let body = r#"{"channel":"news:order","data":{"z":1,"a":[2.50,"é"]}}"#;
    let r = request(a.http, "POST", "/api/channels/publish", &headers, body);
    assert_eq!(r.status, 200);
    let body = r#"{"channel":"news:order"}"#;
    let r = request(a.http, "POST", "/api/channels/history", &headers, body);
    let text = String::from_utf8(r.body).unwrap();
    assert!(text.contains(r#""data":{"z":1,"a":[2.50,"é"]}"#), "{text}");
}

#[test]
fn tokens_expire_unless_refreshed() {
    let (_redis, a, _b, _dir) = cluster();
    let short = |user: &str, secs: u64| token_with(SECRET, user, json!({ "exp": now() + secs }));
    let mut lapses = Client::open(&a);
    let r = lapses.call("connect", json!({ "token": short("lapses", 2) }));
    assert!(r["result"]["expires"].is_u64(), "{r}");
    let mut refreshes = Client::open(&a);
    let first_expiry = now() + 4;
    let first = token_with(SECRET, "refreshes", json!({ "exp": first_expiry }));
    refreshes.call("connect", json!({ "token": first }));
    let r = refreshes.call("refresh", json!({ "token": short("refreshes", 600) }));
    assert!(
        r["result"]["expires"].as_u64().unwrap() > now() + 500,
        "{r}"
    );
    let r = refreshes.call("refresh", json!({ "token": short("someone-else", 600) }));
    assert_eq!(r["error"]["code"], 103, "{r}");
    let lapsed = token_with(SECRET, "refreshes", json!({ "exp": now() - 5 }));
    let r = refreshes.call("refresh", json!({ "token": lapsed }));
    assert_eq!(r["error"]["code"], 109, "{r}");
    // An event stream's token expires too: it ends with a close event saying so.
    let (r, mut stream) = sse(&a, &format!("token={}&channel=news:x", short("streams", 2)));
    assert_eq!(r.status, 200);
    let ended = loop {
        match read_sse_event_named(&mut stream).expect("a close event before the end") {
            (Some(name), data) if name == "close" => break data,
            _ => {}
        }
    };
    assert_eq!(ended, r#"{"code":4002,"reason":"token expired"}"#);
    assert_eq!(read_sse_event(&mut stream), None);
    assert_eq!(lapses.closed_with().0, 4002);
    // Past the first token's expiry, the refreshed connection still answers.
    wait_until(Duration::from_secs(10), "the first token's expiry", || {
        now() > first_expiry
    });
    let r = refreshes.call("ping", json!({}));
    assert_eq!(r["result"], json!({}));
}

#[test]
fn a_subscription_token_ends_its_subscription_unless_refreshed() {
    let (_redis, a, _b, _dir) = cluster();
    let mut alice = Client::connected(&a, "alice");
    let allow = |channel: &str, exp: u64| {
        token_with(SECRET, "alice", json!({ "channel": channel, "exp": exp }))
    };
    let subscribe = |c: &mut Client, channel: &str, token: String| {
        c.call("subscribe", json!({ "channel": channel, "token": token }))
    };
    // A token for another channel, or one past its exp (within the JWT leeway): refused.
    let later = now() + 600;
    let r = subscribe(&mut alice, "private:team", allow("private:other", later));
    assert_eq!(r["error"]["code"], 103, "{r}");
    let r = subscribe(&mut alice, "private:team", allow("private:team", now() - 1));
    assert_eq!(r["error"]["code"], 109, "{r}");

    // Two subscriptions whose tokens last 4 s (whole seconds: at least 3); one gets a new
    // token in time.
    let soon = now() + 4;
    let r = subscribe(&mut alice, "private:team", allow("private:team", soon));
    assert_eq!(r["result"]["expires"], soon, "{r}");
    let r = subscribe(&mut alice, "private:ops", allow("private:ops", soon));
    assert_eq!(r["result"]["expires"], soon, "{r}");
    let r = alice.call(
        "refresh",
        json!({ "channel": "private:ops", "token": allow("private:ops", later) }),
    );
    assert_eq!(r["result"]["expires"], later, "{r}");
    let r = alice.call(
        "refresh",
        json!({ "channel": "private:x", "token": allow("private:x", later) }),
    );
    assert_eq!(r["error"]["code"], 107, "{r}");
    let r = alice.call(
        "refresh",
        json!({ "channel": "private:ops", "token": allow("private:team", later) }),
    );
    assert_eq!(r["error"]["code"], 103, "{r}");

    // At its exp the other one ends with a push saying why; the connection stays.
    let push = alice
        .push(Duration::from_secs(10))
        .expect("an unsubscribe push");
    assert_eq!(
        push,
        json!({ "channel": "private:team",
                "unsubscribe": { "code": 109, "reason": "the subscription token expired" } })
    );
    let r = alice.call("presence", json!({ "channel": "private:team" }));
    assert_eq!(r["error"]["code"], 107, "{r}");
    // Publications reach the refreshed subscription only.
    for (channel, data) in [("private:team", "gone"), ("private:ops", "still")] {
        let (status, r) = api(&a, "publish", json!({ "channel": channel, "data": data }));
        assert_eq!(status, 200, "{r}");
    }
    let mut got = vec![alice.push(Duration::from_secs(10)).expect("a publication")];
    while got.last().unwrap()["pub"]["data"] != "still" {
        got.push(
            alice
                .push(Duration::from_secs(10))
                .expect("the second publication"),
        );
    }
    // Published first, "gone" would have come by now; nothing else is on its way either.
    got.extend(alice.push(Duration::from_millis(500)));
    let channels: Vec<_> = got.iter().map(|p| p["channel"].clone()).collect();
    assert_eq!(channels, vec![json!("private:ops")], "{got:?}");
    assert_eq!(alice.call("ping", json!({}))["result"], json!({}));
}

#[test]
fn tokens_can_come_from_an_identity_providers_jwks_url() {
    use brisk_testkit::jwks::{jwks, SigningKey};
    let dir = temp_dir("channels-jwks");
    let provider = SigningKey::new("idp-1");
    std::fs::write(dir.path().join("jwks.json"), jwks(&[&provider])).unwrap();
    let nginx = Nginx::files(dir.path()).unwrap();
    let url = format!("http://127.0.0.1:{}/jwks.json", nginx.port());
    let d = demo_with(1, &["--channels-jwks-url", &url]);
    let claims = |aud: &str| json!({ "sub": "ada", "exp": now() + 600, "aud": aud });
    let mut c = Client::open(&d);
    let r = c.call(
        "connect",
        json!({ "token": provider.sign(&claims(AUDIENCE)) }),
    );
    assert_eq!(r["result"]["user"], "ada", "{r}");
    let refused = |d: &Demo, token: String| {
        let mut c = Client::open(d);
        c.send("connect", json!({ "token": token }));
        c.closed_with()
    };
    // A key the provider does not publish; the provider's key for another audience.
    let stranger = SigningKey::new("idp-2");
    let (code, reason) = refused(&d, stranger.sign(&claims(AUDIENCE)));
    assert_eq!(code, 4001, "{reason}");
    assert!(reason.contains("idp-2"), "{reason}");
    let (code, reason) = refused(&d, provider.sign(&claims("another-app")));
    assert_eq!(
        (code, reason.contains("audience")),
        (4001, true),
        "{reason}"
    );
    // The try-out endpoint signs nothing: tokens are the provider's.
    assert_eq!(get(d.http, "/connection/token?user=ada").status, 404);

    // A provider that cannot be reached: the server says it cannot check tokens.
    let gone = format!("http://127.0.0.1:{}/jwks.json", free_port());
    let lost = demo_with(1, &["--channels-jwks-url", &gone]);
    let (code, reason) = refused(&lost, provider.sign(&claims(AUDIENCE)));
    assert_eq!(code, 1011, "{reason}");
    assert!(reason.contains("cannot check tokens"), "{reason}");
}

/// Issue 66, H1: a client's publications are bounded in size and rate per namespace (16 KiB,
/// 20 a second with bursts of 50, by default), each refusal a 106 that says which; a message
/// over the channel endpoint's 64 KiB closes the connection with 1009.
#[test]
fn publications_are_bounded_in_size_and_rate_per_namespace() {
    let (_redis, a, _b, _dir) = cluster();
    let mut alice = Client::connected(&a, "alice");
    let r = alice.call("subscribe", json!({ "channel": "room:limits" }));
    assert!(r["result"].is_object(), "{r}");
    let big = "x".repeat(17 << 10);
    let r = alice.call("publish", json!({ "channel": "room:limits", "data": big }));
    assert_eq!(r["error"]["code"], 106, "{r}");
    let why = r["error"]["message"].as_str().unwrap();
    assert!(why.contains("16384"), "{why}");
    // A burst: the first 50 pass (and a token or two more as time goes), then 106s.
    let (mut ok, mut refused) = (0, 0);
    for i in 0..70 {
        let r = alice.call("publish", json!({ "channel": "room:limits", "data": i }));
        if r["result"].is_object() {
            ok += 1;
        } else {
            assert_eq!(r["error"]["code"], 106, "{r}");
            let why = r["error"]["message"].as_str().unwrap();
            assert!(why.contains("faster than 20 a second"), "{why}");
            refused += 1;
        }
    }
    assert!((50..60).contains(&ok), "{ok} passed, {refused} refused");
    assert!(refused >= 10, "{ok} passed, {refused} refused");
    // Another namespace has its own allowance.
    alice.call("subscribe", json!({ "channel": "chat:limits" }));
    let r = alice.call("publish", json!({ "channel": "chat:limits", "data": "hi" }));
    assert!(r["result"].is_object(), "{r}");
    // Later, the allowance is back.
    wait_until(Duration::from_secs(5), "a publication passes again", || {
        let r = alice.call(
            "publish",
            json!({ "channel": "room:limits", "data": "again" }),
        );
        r["result"].is_object()
    });
    // A message over the endpoint's limit ends the connection.
    let huge = "y".repeat(65 << 10);
    alice.send("publish", json!({ "channel": "room:limits", "data": huge }));
    assert_eq!(alice.closed_with().0, 1009);
}
