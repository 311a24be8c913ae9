//! Beyond one machine (issue 17): two demo instances on one Redis (`--redis`) share `/chat`
//! rooms. Every message reaches every member on both instances exactly once; with Redis
//! killed, each instance's broadcasts still reach its own members and the failed publishes are
//! counted; once Redis is back, both subscribe again and messages cross again. `/presence`
//! counts the room's members on both instances and lists their names.

use std::net::TcpStream;
use std::time::Duration;

use brisk_testkit::*;
use serde_json::Value as Json;
use tungstenite::{Message, WebSocket};

mod common;
use common::{demo_with, Demo};

fn chat(d: &Demo) -> WebSocket<TcpStream> {
    let (ws, _) =
        tungstenite::client(format!("ws://127.0.0.1:{}/chat", d.http), connect(d.http)).unwrap();
    ws
}

/// A member of the default room named `name` in its presence.
fn named(d: &Demo, name: &str) -> WebSocket<TcpStream> {
    let url = format!("ws://127.0.0.1:{}/chat?name={name}", d.http);
    tungstenite::client(url, connect(d.http)).unwrap().0
}

/// What `/presence` answers on `/chat` (the answer goes to the asking member only): the
/// count and the names.
fn presence(ws: &mut WebSocket<TcpStream>) -> (u64, Vec<String>) {
    ws.send(Message::text("/presence")).unwrap();
    let answer = next_text(ws, Duration::from_secs(5)).expect("an answer");
    let v: Json = serde_json::from_str(&answer).unwrap_or_else(|e| panic!("{e}: {answer}"));
    let n = v["presence"].as_u64().unwrap_or_else(|| panic!("{answer}"));
    let names = v["names"].as_array().unwrap_or_else(|| panic!("{answer}"));
    (
        n,
        names
            .iter()
            .map(|n| n.as_str().unwrap().to_owned())
            .collect(),
    )
}

fn cluster_status(d: &Demo) -> Json {
    d.server.status().unwrap()["cluster"].clone()
}

#[test]
fn chat_rooms_span_instances_exactly_once_and_survive_a_redis_restart() {
    let mut redis = Redis::start().unwrap();
    let url = redis.url();
    let a = demo_with(2, &["--redis", &url]);
    let b = demo_with(1, &["--redis", &url]);
    // Three members on A (spread over its two workers by the kernel), four on B.
    // Named in the room's presence, but for one.
    let mut on_a: Vec<_> = (0..3).map(|i| named(&a, &format!("a{i}"))).collect();
    let mut on_b: Vec<_> = (0..3).map(|i| named(&b, &format!("b{i}"))).collect();
    on_b.push(chat(&b));
    for d in [&a, &b] {
        wait_until(Duration::from_secs(10), "subscribed to the room", || {
            let c = cluster_status(d);
            c["connected"] == true && c["groups"] == 1
        });
    }

    // 10 messages from a member on A and 10 from one on B, interleaved.
    for i in 0..10 {
        on_a[0].send(Message::text(format!("a{i}"))).unwrap();
        on_b[0].send(Message::text(format!("b{i}"))).unwrap();
    }
    for (name, ws) in on_a.iter_mut().chain(on_b.iter_mut()).enumerate() {
        let got: Vec<String> = (0..20)
            .map(|_| next_text(ws, Duration::from_secs(5)).expect("20 messages"))
            .collect();
        for sender in ["a", "b"] {
            let from: Vec<&String> = got.iter().filter(|m| m.starts_with(sender)).collect();
            let want: Vec<String> = (0..10).map(|i| format!("{sender}{i}")).collect();
            assert_eq!(
                from,
                want.iter().collect::<Vec<_>>(),
                "member {name}: {got:?}"
            );
        }
        // Nothing more: no message came twice.
        assert_eq!(
            next_text(ws, Duration::from_millis(300)),
            None,
            "member {name}"
        );
    }
    let (ca, cb) = (cluster_status(&a), cluster_status(&b));
    assert_eq!(ca["published"], 10, "{ca}");
    assert_eq!(cb["received"], 10, "{cb}");
    assert_eq!(cb["lost"], 0, "{cb}");

    // Presence: the room's members on both instances, asked from either, and the names of
    // the six that gave one.
    let names = |list: &[&str]| list.iter().map(|n| n.to_string()).collect::<Vec<_>>();
    let seven = (7, names(&["a0", "a1", "a2", "b0", "b1", "b2"]));
    wait_until(Duration::from_secs(5), "presence 7", || {
        presence(&mut on_a[1]) == seven
    });
    assert_eq!(presence(&mut on_b[1]), seven);
    // Two members on B leave (one unnamed, then b2): 5, once its worker has written (100 ms).
    drop(on_b.pop().unwrap());
    drop(on_b.pop().unwrap());
    let five = (5, names(&["a0", "a1", "a2", "b0", "b1"]));
    wait_until(Duration::from_secs(5), "presence 5 after two leave", || {
        presence(&mut on_a[1]) == five
    });

    // Redis down: A's broadcast reaches A's members only, and the failed publish is counted.
    redis.kill();
    on_a[1].send(Message::text("local")).unwrap();
    for ws in on_a.iter_mut() {
        assert_eq!(
            next_text(ws, Duration::from_secs(5)).as_deref(),
            Some("local")
        );
    }
    wait_until(
        Duration::from_secs(10),
        "the failed publish counted",
        || cluster_status(&a)["publish_failed"].as_u64() >= Some(1),
    );
    for ws in on_b.iter_mut() {
        assert_eq!(next_text(ws, Duration::from_millis(300)), None);
    }

    // Redis back: both subscribe again, and messages cross again.
    redis.start_again().unwrap();
    for d in [&a, &b] {
        wait_until(Duration::from_secs(15), "subscribed again", || {
            let c = cluster_status(d);
            c["connected"] == true && c["reconnects"].as_u64() >= Some(1)
        });
    }
    // The first message after the restart crosses (A renewed its publishing connection when
    // its subscription came back).
    on_a[2].send(Message::text("again")).unwrap();
    let crossed = next_text(&mut on_b[0], Duration::from_secs(5));
    let crossed = crossed.expect("the first message after Redis came back crossed");
    assert_eq!(crossed, "again");
    for ws in on_b.iter_mut().skip(1) {
        let mut got = None;
        while let Some(m) = next_text(ws, Duration::from_secs(2)) {
            if m == crossed {
                assert!(got.is_none(), "{crossed} twice");
                got = Some(m);
            }
        }
        assert_eq!(got.as_deref(), Some(crossed.as_str()));
    }
    eprintln!("A: {}\nB: {}", cluster_status(&a), cluster_status(&b));
}

/// Redis restarted while no one spoke: the first message afterwards reaches the members of
/// both instances (issue 31: it reached the sender's instance only, its publishing
/// connection found broken by that very publish).
#[test]
fn the_first_broadcast_after_a_redis_restart_reaches_every_instance() {
    let mut redis = Redis::start().unwrap();
    let url = redis.url();
    let a = demo_with(1, &["--redis", &url]);
    let b = demo_with(1, &["--redis", &url]);
    let mut on_a: Vec<_> = (0..3).map(|_| chat(&a)).collect();
    let mut on_b: Vec<_> = (0..3).map(|_| chat(&b)).collect();
    for d in [&a, &b] {
        wait_until(Duration::from_secs(10), "subscribed to the room", || {
            let c = cluster_status(d);
            c["connected"] == true && c["groups"] == 1
        });
    }
    // One message crosses before, so that A's publishing connection is open.
    on_a[0].send(Message::text("before")).unwrap();
    for ws in on_a.iter_mut().chain(on_b.iter_mut()) {
        assert_eq!(
            next_text(ws, Duration::from_secs(5)).as_deref(),
            Some("before")
        );
    }
    redis.restart().unwrap();
    for d in [&a, &b] {
        wait_until(Duration::from_secs(15), "subscribed again", || {
            let c = cluster_status(d);
            c["connected"] == true && c["reconnects"].as_u64() >= Some(1)
        });
    }
    on_a[1].send(Message::text("after")).unwrap();
    for (i, ws) in on_a.iter_mut().chain(on_b.iter_mut()).enumerate() {
        assert_eq!(
            next_text(ws, Duration::from_secs(5)).as_deref(),
            Some("after"),
            "member {i} (0-2 on A, 3-5 on B)"
        );
    }
    let ca = cluster_status(&a);
    assert_eq!(ca["publish_failed"], 0, "{ca}");
    assert_eq!(cluster_status(&b)["lost"], 0);
}

/// Sends a Redis command on a new connection (raw RESP: any bytes as arguments) and
/// returns the first line of the answer.
fn redis_command(port: u16, args: &[&[u8]]) -> String {
    use std::io::{BufRead, Write};
    let mut s = connect(port);
    let mut out = format!("*{}\r\n", args.len()).into_bytes();
    for a in args {
        out.extend(format!("${}\r\n", a.len()).as_bytes());
        out.extend(*a);
        out.extend(b"\r\n");
    }
    s.write_all(&out).unwrap();
    let mut line = String::new();
    std::io::BufReader::new(s).read_line(&mut line).unwrap();
    line.trim_end().to_owned()
}

/// A raw subscription to `channel`: the payload of each message, as they come.
struct RawSubscriber(std::io::BufReader<TcpStream>);

impl RawSubscriber {
    fn new(port: u16, channel: &str) -> Self {
        use std::io::Write;
        let mut s = connect(port);
        let command = format!(
            "*2\r\n$9\r\nSUBSCRIBE\r\n${}\r\n{channel}\r\n",
            channel.len()
        );
        s.write_all(command.as_bytes()).unwrap();
        let mut sub = RawSubscriber(std::io::BufReader::new(s));
        let confirmation = sub.array();
        assert_eq!(confirmation[0], b"subscribe");
        sub
    }

    fn array(&mut self) -> Vec<Vec<u8>> {
        use std::io::{BufRead, Read};
        let mut line = String::new();
        self.0.read_line(&mut line).unwrap();
        let n: usize = line.trim_end()[1..].parse().unwrap();
        (0..n)
            .map(|_| {
                let mut head = String::new();
                self.0.read_line(&mut head).unwrap();
                if let Some(int) = head.strip_prefix(':') {
                    return int.trim_end().as_bytes().to_vec();
                }
                let len: usize = head.trim_end()[1..].parse().unwrap();
                let mut item = vec![0; len + 2];
                self.0.read_exact(&mut item).unwrap();
                item.truncate(len);
                item
            })
            .collect()
    }

    /// The next message's payload.
    fn next(&mut self) -> Vec<u8> {
        let mut m = self.array();
        assert_eq!(m[0], b"message");
        m.pop().unwrap()
    }
}

/// Anyone who can publish on the app's Redis: a frame in the old unauthenticated format, a
/// Close frame, one with RSV1 set, garbage, a message under another secret, and a real
/// message published again (a replay) reach no member and are counted as rejected; the
/// real messages still cross.
#[test]
fn forged_and_replayed_publishes_reach_no_member_and_are_counted() {
    let redis = Redis::start().unwrap();
    let url = redis.url();
    let a = demo_with(1, &["--redis", &url]);
    let b = demo_with(1, &["--redis", &url]);
    let mut on_a = chat(&a);
    let mut on_b = chat(&b);
    for d in [&a, &b] {
        wait_until(Duration::from_secs(10), "subscribed to the room", || {
            let c = cluster_status(d);
            c["connected"] == true && c["groups"] == 1
        });
    }
    let channel = "brisk:cluster:chat";
    let mut tap = RawSubscriber::new(redis.port(), channel);
    on_a.send(Message::text("real")).unwrap();
    assert_eq!(
        next_text(&mut on_b, Duration::from_secs(5)).as_deref(),
        Some("real")
    );
    assert_eq!(
        next_text(&mut on_a, Duration::from_secs(5)).as_deref(),
        Some("real")
    );
    let captured = tap.next();
    assert!(captured.starts_with(b"BKC2"));

    // What the old format delivered as it was: a header, then any frame.
    let old = |frame: &[u8]| [&b"BKC1"[..], &[9u8; 16], &1u64.to_be_bytes(), frame].concat();
    let mut forged_other_secret = captured.clone();
    let last = forged_other_secret.len() - 1;
    forged_other_secret[last] ^= 0xff;
    let forgeries: Vec<Vec<u8>> = vec![
        old(b"\x81\x06forged"),
        old(b"\x88\x02\x03\xe8"),
        old(b"\xc1\x06forged"),
        b"just some bytes".to_vec(),
        forged_other_secret,
        captured.clone(),
    ];
    let n = forgeries.len() as u64;
    for f in &forgeries {
        let receivers = redis_command(redis.port(), &[b"PUBLISH", channel.as_bytes(), f]);
        assert_eq!(receivers, ":3", "A, B and the tap heard it");
    }
    // (A takes the replay of its own message for its own, and skips it.)
    wait_until(Duration::from_secs(5), "the forgeries counted", || {
        cluster_status(&a)["rejected"].as_u64() == Some(n - 1)
            && cluster_status(&b)["rejected"].as_u64() == Some(n)
    });
    // Nothing reached a member, and the connections are still open and served.
    for ws in [&mut on_a, &mut on_b] {
        assert_eq!(next_text(ws, Duration::from_millis(300)), None);
    }
    on_b.send(Message::text("still")).unwrap();
    for ws in [&mut on_a, &mut on_b] {
        assert_eq!(
            next_text(ws, Duration::from_secs(5)).as_deref(),
            Some("still")
        );
    }
    assert_eq!(cluster_status(&a)["received"], 1);
    let log = a.server.log();
    assert!(log.contains("a message was refused"), "{log}");

    // An instance that starts later has never seen A's numbers: the captured message,
    // replayed to it, was sent before it subscribed (by more than the 10 s the clocks may
    // differ), and is refused too (issue 66).
    let sent_ms = u64::from_be_bytes(captured[28..36].try_into().unwrap());
    let unix_ms = || {
        let since = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH);
        since.unwrap().as_millis() as u64
    };
    wait_until(Duration::from_secs(15), "the capture 10 s old", || {
        unix_ms() > sent_ms + 10_500
    });
    let c = demo_with(1, &["--redis", &url]);
    let mut on_c = chat(&c);
    wait_until(Duration::from_secs(10), "C subscribed to the room", || {
        let s = cluster_status(&c);
        s["connected"] == true && s["groups"] == 1
    });
    redis_command(redis.port(), &[b"PUBLISH", channel.as_bytes(), &captured]);
    wait_until(Duration::from_secs(5), "C to refuse the replay", || {
        cluster_status(&c)["rejected"].as_u64() == Some(1)
    });
    assert_eq!(next_text(&mut on_c, Duration::from_millis(300)), None);
    // And it still takes A's new messages.
    on_a.send(Message::text("to c")).unwrap();
    assert_eq!(
        next_text(&mut on_c, Duration::from_secs(5)).as_deref(),
        Some("to c")
    );
}

/// A Redis URL with a password is shown without it: in `status` and in the log of the
/// subscription that cannot start (nothing listens there).
#[test]
fn the_cluster_url_is_shown_without_its_password() {
    let url = format!("redis://:s3cret-pw@127.0.0.1:{}/0", free_port());
    let d = demo_with(1, &["--redis", &url]);
    let shown = wait_for(Duration::from_secs(10), "the cluster's status", || {
        cluster_status(&d)["url"].as_str().map(str::to_owned)
    });
    assert!(shown.starts_with("redis://:***@127.0.0.1:"), "{shown}");
    assert!(!d.server.log().contains("s3cret"), "{}", d.server.log());
    // Nor do the workers get it in their environment (each takes it from its own app).
    let workers = d.server.worker_pids().unwrap();
    assert!(!workers.is_empty());
    for pid in workers {
        let environ = std::fs::read(format!("/proc/{pid}/environ")).unwrap();
        let environ = String::from_utf8_lossy(&environ);
        assert!(!environ.contains("s3cret"), "worker {pid}: {environ}");
    }
}

/// The instances' HTTP workers' open connections, summed.
fn connections(d: &Demo) -> u64 {
    let status = d.server.status().unwrap();
    (status["workers"].as_array().unwrap().iter())
        .filter(|w| w["server"].as_str().unwrap().starts_with("http://"))
        .map(|w| w["connections"].as_u64().unwrap())
        .sum()
}

/// Behind a real proxy (issue 17, item 3): `deploy/nginx.conf` in front of two instances,
/// WebSocket clients join `/chat` through nginx and land on both, and every message reaches
/// every client exactly once; plain requests go through nginx's kept upstream connections.
#[test]
fn behind_nginx_every_message_reaches_every_client_once() {
    let redis = Redis::start().unwrap();
    let url = redis.url();
    let a = demo_with(1, &["--redis", &url]);
    let b = demo_with(1, &["--redis", &url]);
    let port = free_port();
    let deploy = concat!(env!("CARGO_MANIFEST_DIR"), "/../../deploy/nginx.conf");
    let mut conf = std::fs::read_to_string(deploy).unwrap();
    for (from, to) in [
        ("worker_processes auto;", "worker_processes 1;".to_string()),
        ("listen 80;", format!("listen 127.0.0.1:{port};")),
        (
            "server 127.0.0.1:8080;",
            format!("server 127.0.0.1:{};", a.http),
        ),
        (
            "server 127.0.0.1:8081;",
            format!("server 127.0.0.1:{};", b.http),
        ),
    ] {
        assert!(conf.contains(from), "deploy/nginx.conf has no {from:?}");
        conf = conf.replace(from, &to);
    }
    let nginx = Nginx::start(&conf, port).unwrap();

    // Plain requests through nginx.
    for _ in 0..4 {
        let r = common::get(nginx.port(), "/");
        assert_eq!(r.status, 200);
        assert_eq!(r.body, b"Hello World");
    }
    // Six members through nginx: round robin puts them on both instances.
    let mut members: Vec<_> = (0..6)
        .map(|_| {
            let url = format!("ws://127.0.0.1:{port}/chat");
            tungstenite::client(url, connect(port)).unwrap().0
        })
        .collect();
    wait_until(Duration::from_secs(10), "members on both instances", || {
        connections(&a) >= 3 && connections(&b) >= 3
    });
    for d in [&a, &b] {
        wait_until(Duration::from_secs(10), "subscribed to the room", || {
            let c = cluster_status(d);
            c["connected"] == true && c["groups"] == 1
        });
    }
    for (i, ws) in members.iter_mut().enumerate() {
        ws.send(Message::text(format!("m{i}"))).unwrap();
    }
    for (i, ws) in members.iter_mut().enumerate() {
        let mut got: Vec<String> = (0..6)
            .map(|_| next_text(ws, Duration::from_secs(5)).expect("6 messages"))
            .collect();
        got.sort();
        let want: Vec<String> = (0..6).map(|k| format!("m{k}")).collect();
        assert_eq!(got, want, "member {i}");
        assert_eq!(
            next_text(ws, Duration::from_millis(300)),
            None,
            "member {i}"
        );
    }
}

fn json(text: &str) -> Json {
    serde_json::from_str(text).unwrap_or_else(|e| panic!("{e}: {text}"))
}

/// The next message as JSON (within 5 s).
fn next_json(ws: &mut WebSocket<TcpStream>) -> Json {
    json(&next_text(ws, Duration::from_secs(5)).expect("a message"))
}

fn room(d: &Demo, name: &str) -> WebSocket<TcpStream> {
    let url = format!("ws://127.0.0.1:{}/chat?room={name}", d.http);
    tungstenite::client(url, connect(d.http)).unwrap().0
}

/// Recovery (item 1): with `--history 5` a member that drops and comes back, on the other
/// instance, gets exactly what it missed with `/recover`; past 5 missed messages, or after
/// Redis forgot the history, it is told it cannot recover, with the position to go on from.
#[test]
fn a_member_that_reconnects_recovers_what_it_missed_or_is_told_it_cannot() {
    let mut redis = Redis::start().unwrap();
    let url = redis.url();
    let args = ["--redis", url.as_str(), "--history", "5"];
    let (a, b) = (demo_with(1, &args), demo_with(1, &args));
    let mut x = room(&a, "r1");
    let mut y = room(&b, "r1");
    let start = next_json(&mut x)["position"].as_str().unwrap().to_owned();
    assert_eq!(next_json(&mut y)["position"], start.as_str());
    let (epoch, offset) = start.rsplit_once(':').unwrap();
    assert_eq!(offset, "0");
    let at = |n: u64| format!("{epoch}:{n}");
    // A member of the default room on A hears nothing of r1.
    let mut other = chat(&a);
    assert!(next_json(&mut other)["position"].is_string());
    for d in [&a, &b] {
        wait_until(Duration::from_secs(10), "subscribed to the rooms", || {
            let c = cluster_status(d);
            c["connected"] == true && c["groups"].as_u64() >= Some(1)
        });
    }
    for m in ["m1", "m2"] {
        y.send(Message::text(m)).unwrap();
    }
    for (n, m) in [(1, "m1"), (2, "m2")] {
        for ws in [&mut x, &mut y] {
            let got = next_json(ws);
            assert_eq!(got["id"], at(n).as_str(), "{got}");
            assert_eq!(got["text"], m, "{got}");
        }
    }

    // X drops; three messages go by; X comes back on B and asks for what followed m2.
    drop(x);
    for m in ["m3", "m4", "m5"] {
        y.send(Message::text(m)).unwrap();
    }
    for n in 3..=5 {
        assert_eq!(next_json(&mut y)["id"], at(n).as_str());
    }
    let mut x = room(&b, "r1");
    assert_eq!(next_json(&mut x)["position"], at(5).as_str());
    x.send(Message::text(format!("/recover {}", at(2))))
        .unwrap();
    for (n, m) in [(3, "m3"), (4, "m4"), (5, "m5")] {
        let got = next_json(&mut x);
        assert_eq!(
            (got["id"].as_str(), got["text"].as_str()),
            (Some(at(n).as_str()), Some(m))
        );
    }
    let done = next_json(&mut x);
    assert_eq!(done, serde_json::json!({"recovered": true, "missed": 3}));

    // Six more while X is away: one more than is kept.
    drop(x);
    for n in 6..=11 {
        y.send(Message::text(format!("m{n}"))).unwrap();
        assert_eq!(next_json(&mut y)["id"], at(n).as_str());
    }
    // (On B, where Y's messages are already delivered: on A they may still be on their way,
    // and would arrive live after the join.)
    let mut x = room(&b, "r1");
    assert_eq!(next_json(&mut x)["position"], at(11).as_str());
    x.send(Message::text(format!("/recover {}", at(5))))
        .unwrap();
    let lost = next_json(&mut x);
    assert_eq!(lost["recovered"], false, "{lost}");
    assert_eq!(lost["position"], at(11).as_str(), "{lost}");
    assert!(
        lost["reason"].as_str().unwrap().contains("more messages"),
        "{lost}"
    );
    // From 6 on, the 5 kept are enough.
    x.send(Message::text(format!("/recover {}", at(6))))
        .unwrap();
    for n in 7..=11 {
        assert_eq!(next_json(&mut x)["id"], at(n).as_str());
    }
    assert_eq!(next_json(&mut x)["missed"], 5);

    // Bad requests are answered, and say what was wrong.
    x.send(Message::text("/recover yesterday")).unwrap();
    let bad = next_json(&mut x);
    assert!(
        bad["error"].as_str().unwrap().contains("EPOCH:OFFSET"),
        "{bad}"
    );
    match tungstenite::client(
        format!("ws://127.0.0.1:{}/chat?room=no%20spaces", a.http),
        connect(a.http),
    ) {
        Err(tungstenite::HandshakeError::Failure(tungstenite::Error::Http(r))) => {
            assert_eq!(r.status(), 400)
        }
        other => panic!("a bad room name was not refused: {:?}", other.map(|_| ())),
    }
    assert_eq!(next_text(&mut other, Duration::from_millis(300)), None);

    // Redis restarts without its data: the old positions are of a lost epoch.
    redis.restart().unwrap();
    let answer = (0..50)
        .find_map(|_| {
            x.send(Message::text(format!("/recover {}", at(11))))
                .unwrap();
            let got = next_json(&mut x);
            if got.get("error").is_some() {
                std::thread::sleep(Duration::from_millis(100));
                return None;
            }
            Some(got)
        })
        .expect("an answer once Redis is back");
    assert_eq!(answer["recovered"], false, "{answer}");
    assert!(
        answer["reason"].as_str().unwrap().contains("new epoch"),
        "{answer}"
    );
    assert_ne!(answer["position"], at(11).as_str(), "{answer}");
}

/// Sharded pub/sub (item 1): two instances on a three-node Redis Cluster
/// (`--cluster-sharded`) carry six rooms, each room's channel a sharded subscription on the
/// node that owns its slot; every message reaches the members of its room once, and no
/// other room's.
#[test]
fn on_a_redis_cluster_rooms_cross_instances_through_sharded_channels() {
    let cluster = RedisCluster::start(3).unwrap();
    let seed = cluster.nodes()[0].url();
    let a = demo_with(1, &["--cluster-sharded", &seed]);
    let b = demo_with(1, &["--cluster-sharded", &seed]);
    let rooms: Vec<String> = (0..6).map(|i| format!("r{i}")).collect();
    let mut on_a: Vec<_> = rooms.iter().map(|r| room(&a, r)).collect();
    let mut on_b: Vec<_> = rooms.iter().map(|r| room(&b, r)).collect();
    for d in [&a, &b] {
        wait_until(
            Duration::from_secs(15),
            "subscribed to the six rooms",
            || {
                let c = cluster_status(d);
                c["connected"] == true && c["groups"] == 6
            },
        );
    }
    // Each room's channel is a sharded channel of exactly one node, and the six spread over
    // more than one node.
    let mut holders = std::collections::HashMap::new();
    wait_until(Duration::from_secs(10), "six sharded channels", || {
        holders.clear();
        for node in cluster.nodes() {
            let listed = RedisCluster::cli(node.port(), &["pubsub", "shardchannels"]).unwrap();
            for channel in listed.lines().filter(|l| !l.is_empty()) {
                holders.insert(channel.to_owned(), node.port());
            }
        }
        holders.len() == 6
    });
    let used: std::collections::HashSet<_> = holders.values().collect();
    assert!(used.len() > 1, "all six channels on one node: {holders:?}");
    for node in cluster.nodes() {
        let plain = RedisCluster::cli(node.port(), &["pubsub", "channels"]).unwrap();
        assert_eq!(plain.trim(), "", "plain channels on {}", node.port());
    }

    // Room i's members on both instances (the sender too) get its message, and nothing else.
    each_room_hears_its_message(&mut on_a, &mut on_b);
    for ws in on_a.iter_mut().chain(on_b.iter_mut()) {
        assert_eq!(next_text(ws, Duration::from_millis(300)), None);
    }
    let (ca, cb) = (cluster_status(&a), cluster_status(&b));
    assert_eq!(cb["published"], 6, "{cb}");
    assert_eq!(ca["received"], 6, "{ca}");
    assert_eq!(ca["lost"], 0, "{ca}");

    // Presence needs one Redis server: with a sharded bus it says so.
    on_a[0].send(Message::text("/presence")).unwrap();
    let answer = next_json(&mut on_a[0]);
    assert!(
        answer["error"]
            .as_str()
            .is_some_and(|e| e.contains("cluster_sharded")),
        "{answer}"
    );
}

/// Over TLS (`rediss://`, trusting the deployment's own CA with `--redis-ca`), rooms cross
/// instances and the Redis cache answers; with a CA that did not sign Redis's certificate
/// nothing connects, and the cluster status and the log say why; a CA given for a plain
/// `redis://` URL stops the start.
#[test]
fn over_tls_rooms_cross_with_the_right_ca_and_a_wrong_one_is_refused_loudly() {
    let redis = Redis::start_tls().unwrap();
    let (url, ca) = (redis.tls_url(), redis.tls_ca());
    let ca = ca.to_str().unwrap();
    let a = demo_with(1, &["--redis", &url, "--redis-ca", ca]);
    let b = demo_with(1, &["--redis", &url, "--redis-ca", ca]);
    let (mut on_a, mut on_b) = (chat(&a), chat(&b));
    for d in [&a, &b] {
        wait_until(Duration::from_secs(10), "subscribed over TLS", || {
            let c = cluster_status(d);
            c["connected"] == true && c["groups"] == 1
        });
    }
    on_a.send(Message::text("over tls")).unwrap();
    for ws in [&mut on_a, &mut on_b] {
        assert_eq!(
            next_text(ws, Duration::from_secs(5)).as_deref(),
            Some("over tls")
        );
    }
    let r = common::get(a.http, "/cached-queries?count=3");
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(json(&r.text()).as_array().map(Vec::len), Some(3));
    assert_eq!(redis.cli(&["EXISTS", "world:loaded"]).unwrap().trim(), "1");

    // Another deployment's CA: Redis's certificate is not trusted.
    let other = Redis::start_tls().unwrap();
    let wrong_ca = other.tls_ca();
    let c = demo_with(
        1,
        &["--redis", &url, "--redis-ca", wrong_ca.to_str().unwrap()],
    );
    let _member = chat(&c);
    let why = wait_for(Duration::from_secs(10), "the reason in the status", || {
        cluster_status(&c)["last_error"].as_str().map(str::to_owned)
    });
    assert!(why.contains("certificate"), "{why}");
    assert_eq!(cluster_status(&c)["connected"], false);
    assert!(
        c.server.log().contains("cluster: cannot subscribe"),
        "{}",
        c.server.log()
    );
    assert_eq!(common::get(c.http, "/cached-queries").status, 503);

    // A CA for a URL without TLS is a mistake, said at start.
    let (mut args, _) = common::demo_args(1);
    let plain = format!("redis://127.0.0.1:{}", redis.port());
    args.extend(["--redis", &plain, "--redis-ca", ca].map(String::from));
    args.extend(["--cluster-secret", common::CLUSTER_SECRET].map(String::from));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let run_dir = temp_dir("run");
    let mut server = ServerProcess::spawn(common::DEMO, &args, run_dir.path().into()).unwrap();
    assert!(
        !server.wait_exit(Duration::from_secs(30)).unwrap(),
        "the start failed"
    );
    assert!(
        server.log().contains("not a rediss:// URL"),
        "{}",
        server.log()
    );
}

/// Issue 31 item 6: secrets given in the environment (the database URL with its password,
/// the Redis URL, the cluster and session secrets) are not inherited by the workers and
/// custom processes: each gets them from its master through a private descriptor, and uses
/// them. (So does the start-up process: the tables `/db` reads are the ones its migrations
/// made in PostgreSQL, not in the SQLite file it would use without `DATABASE_URL`.)
#[test]
fn secrets_in_the_environment_reach_no_started_process_environment_and_still_work() {
    let pg = Postgres::start().unwrap();
    let redis = Redis::start().unwrap();
    let (args, http) = common::demo_args(1);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let (database, redis_url) = (pg.url(), redis.url());
    let session = "a-session-secret-that-is-long-enough-0123456789";
    let secrets = [
        ("DATABASE_URL", database.as_str()),
        ("REDIS_URL", redis_url.as_str()),
        ("BRISK_CLUSTER_SECRET", common::CLUSTER_SECRET),
        ("BRISK_SESSION_SECRET", session),
    ];
    // Four servers of one worker each, and the jobs and schedules processes.
    let server = ServerProcess::start_with_env(common::DEMO, &args, &secrets, 6).unwrap();
    let d = Demo { server, http };
    // Used: the workers reach PostgreSQL and Redis, and the bus is up.
    let r = common::get(http, "/db");
    assert_eq!(r.status, 200, "{}", r.text());
    let r = common::get(http, "/cached-queries?count=2");
    assert_eq!(r.status, 200, "{}", r.text());
    let _member = chat(&d);
    wait_until(Duration::from_secs(10), "the bus connected", || {
        cluster_status(&d)["connected"] == true
    });
    // Not inherited: no started process has them in its environment; the master does.
    let environ = |pid: i32| {
        let bytes = std::fs::read(format!("/proc/{pid}/environ")).unwrap();
        String::from_utf8_lossy(&bytes).into_owned()
    };
    let started = d.server.worker_pids().unwrap();
    assert_eq!(started.len(), 6, "{started:?}");
    for pid in started {
        let env = environ(pid);
        for (name, value) in secrets {
            assert!(!env.contains(name), "{name} in process {pid}'s environment");
            assert!(
                !env.contains(value),
                "{name}'s value in process {pid}'s environment"
            );
        }
        assert!(env.contains("BRISK_SECRETS_FD=5"), "{env}");
    }
    // The master keeps them for an upgrade's new master, but not where other processes of
    // the user read it (issue 66): the names stay, the values are zeroed.
    let master = environ(d.server.pid());
    assert!(master.contains("DATABASE_URL="));
    for (name, value) in secrets {
        assert!(
            !master.contains(value),
            "{name}'s value in the master's /proc/PID/environ"
        );
    }
    // An upgrade's new master still gets them (by inheritance), and uses them.
    let first = d.server.pid();
    d.server.cli_ok(&["upgrade"]);
    let now = d.server.pid_file_pid().expect("a pid file");
    assert_ne!(now, first);
    let r = common::get(http, "/db");
    assert_eq!(r.status, 200, "{}", r.text());
    wait_until(
        Duration::from_secs(10),
        "the new master's bus connected",
        || cluster_status(&d)["connected"] == true,
    );
    let master = environ(now);
    for (name, value) in secrets {
        assert!(
            !master.contains(value),
            "{name}'s value in the new master's environ"
        );
    }
}

/// Sends `to room I` from the member of room I on B (`on_b[i]`), for each room; each room's
/// members on A and B (`on_a[i]`, `on_b[i]`) get that message next.
fn each_room_hears_its_message(
    on_a: &mut [WebSocket<TcpStream>],
    on_b: &mut [WebSocket<TcpStream>],
) {
    for (i, ws) in on_b.iter_mut().enumerate() {
        ws.send(Message::text(format!("to room {i}"))).unwrap();
    }
    for (i, ws) in on_a
        .iter_mut()
        .enumerate()
        .chain(on_b.iter_mut().enumerate())
    {
        assert_eq!(
            next_text(ws, Duration::from_secs(5)).as_deref(),
            Some(format!("to room {i}").as_str())
        );
    }
}

/// A Redis Cluster over TLS (`rediss://`, `tls-cluster`, the nodes announcing `localhost`):
/// the sharded bus trusts the cluster's CA (`--redis-ca`) on every node it is sent to, and
/// rooms cross instances.
#[test]
fn on_a_redis_cluster_over_tls_rooms_cross_instances() {
    let cluster = RedisCluster::start_tls(3).unwrap();
    let seed = cluster.nodes()[0].tls_url();
    let ca = cluster.nodes()[0].tls_ca();
    let args = [
        "--cluster-sharded",
        &seed,
        "--redis-ca",
        ca.to_str().unwrap(),
    ];
    let (a, b) = (demo_with(1, &args), demo_with(1, &args));
    let rooms: Vec<String> = (0..3).map(|i| format!("t{i}")).collect();
    let mut on_a: Vec<_> = rooms.iter().map(|r| room(&a, r)).collect();
    let mut on_b: Vec<_> = rooms.iter().map(|r| room(&b, r)).collect();
    for d in [&a, &b] {
        wait_until(Duration::from_secs(15), "subscribed over TLS", || {
            let c = cluster_status(d);
            c["connected"] == true && c["groups"] == 3
        });
    }
    each_room_hears_its_message(&mut on_a, &mut on_b);
    assert_eq!(cluster_status(&a)["received"], 3);
}

/// `ws::close_where` across instances: a user's sockets on instance B close with 4003 when
/// instance A is asked to remove the user; another user's socket stays open.
#[test]
fn a_user_removed_on_one_instance_is_disconnected_on_the_other() {
    let redis = Redis::start().unwrap();
    let url = redis.url();
    let a = demo_with(1, &["--redis", &url]);
    let b = demo_with(2, &["--redis", &url]);
    let user = |d: &Demo, name: &str| {
        let url = format!("ws://127.0.0.1:{}/chat?user={name}", d.http);
        tungstenite::client(url, connect(d.http)).unwrap().0
    };
    let mut alice = user(&b, "alice");
    let mut carol = user(&b, "carol");
    // B holds the room and both users' keys; A holds nothing but must publish to them.
    wait_until(Duration::from_secs(10), "B subscribed to the keys", || {
        let c = cluster_status(&b);
        c["connected"] == true && c["groups"] == 3
    });
    wait_until(Duration::from_secs(10), "A connected", || {
        cluster_status(&a)["connected"] == true
    });
    // Presence by key: A counts alice's socket on B.
    let online = |d: &Demo| {
        let r = common::get(d.http, "/chat/online?user=alice");
        assert_eq!(r.status, 200, "{}", r.text());
        json(&r.text())["sockets"].as_u64().unwrap()
    };
    wait_until(
        Duration::from_secs(10),
        "alice online as seen from A",
        || online(&a) == 1,
    );
    let r = common::request(a.http, "POST", "/chat/kick?user=alice", &[], "");
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.text(), "closed 0 here, and sent to the others\n");
    alice
        .get_ref()
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    match alice.read() {
        Ok(Message::Close(Some(frame))) => {
            assert_eq!(u16::from(frame.code), 4003);
            assert_eq!(frame.reason.as_str(), "removed from the chat");
        }
        other => panic!("alice was not closed with 4003: {other:?}"),
    }
    wait_until(
        Duration::from_secs(10),
        "alice offline as seen from A",
        || online(&a) == 0,
    );
    // Carol is still in the room: her message comes back to her.
    carol.send(Message::text("still here")).unwrap();
    assert_eq!(
        next_text(&mut carol, Duration::from_secs(5)).as_deref(),
        Some("still here")
    );
    // A bad user name is refused, saying why.
    let bad = common::request(a.http, "POST", "/chat/kick?user=a%20b", &[], "");
    assert_eq!(bad.status, 400);
}
