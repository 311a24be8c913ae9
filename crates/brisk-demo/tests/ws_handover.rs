//! WebSocket connections that survive reloads (`WsEndpoint::survive_reload`, the demo's
//! `/ws/durable` and `/chat`): through three reloads every client stays connected, with
//! nothing lost or repeated: a client that keeps talking, a partial frame and a fragmented
//! message sent across a reload, echoes the server had queued and not yet sent, and every
//! broadcast of a chat room, in order, while its publisher moves too. The plain `/ws` still
//! closes with 1001.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use brisk_testkit::*;
use tungstenite::protocol::frame::coding::CloseCode;
use tungstenite::{Message, WebSocket};

mod common;
use common::{demo_with, Demo};

fn client(port: u16, path: &str) -> WebSocket<TcpStream> {
    let s = connect(port);
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let (ws, resp) =
        tungstenite::client(format!("ws://127.0.0.1:{port}{path}"), s).expect("handshake");
    assert_eq!(resp.status(), 101);
    ws
}

/// A raw connection to `/ws/durable`, handshaken, for hand-made frames.
fn raw(port: u16) -> TcpStream {
    let mut s = connect(port);
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    s.write_all(b"GET /ws/durable HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n").unwrap();
    let mut head = Vec::new();
    let mut b = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        s.read_exact(&mut b).unwrap();
        head.push(b[0]);
    }
    assert!(head.starts_with(b"HTTP/1.1 101"));
    s
}

/// A masked client frame: FIN + opcode, the payload masked with a fixed key.
fn frame(fin: bool, opcode: u8, payload: &[u8]) -> Vec<u8> {
    assert!(payload.len() < 126);
    let key = [0x11, 0x22, 0x33, 0x44];
    let mut f = vec![
        (if fin { 0x80 } else { 0 }) | opcode,
        0x80 | payload.len() as u8,
    ];
    f.extend_from_slice(&key);
    f.extend(payload.iter().enumerate().map(|(i, b)| b ^ key[i % 4]));
    f
}

/// Reads one unmasked server frame: (opcode, payload).
fn read_frame(s: &mut TcpStream) -> (u8, Vec<u8>) {
    let mut h = [0u8; 2];
    s.read_exact(&mut h).unwrap();
    assert_eq!(h[1] & 0x80, 0, "server frames are not masked");
    let len = match h[1] & 0x7f {
        126 => {
            let mut l = [0u8; 2];
            s.read_exact(&mut l).unwrap();
            u16::from_be_bytes(l) as usize
        }
        n => n as usize,
    };
    let mut p = vec![0u8; len];
    s.read_exact(&mut p).unwrap();
    (h[0] & 0x0f, p)
}

/// The pids of the HTTP workers of the demo on `port`.
fn http_pids(server: &ServerProcess, port: u16) -> Vec<i32> {
    let pids = server.pids_of(&format!("http://127.0.0.1:{port}")).unwrap();
    assert_eq!(pids.len(), 2, "{pids:?}");
    pids
}

/// `ws_handover.FIELD` added up over the workers running and those retired.
fn handover_total(server: &ServerProcess, field: &str) -> u64 {
    let status = server.status().unwrap();
    let running: u64 = status["workers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| w["ws_handover"][field].as_u64().unwrap_or(0))
        .sum();
    running
        + status["retired"]["ws_handover"][field]
            .as_u64()
            .unwrap_or(0)
}

#[test]
fn durable_websocket_clients_stay_connected_through_reloads_and_lose_nothing() {
    durable_clients_through(&["reload", "reload", "reload"]);
}

/// The same through an `upgrade` (the old master's workers hand them to the new master's)
/// and a reload of the new master.
#[test]
fn durable_websocket_clients_stay_connected_through_an_upgrade_and_lose_nothing() {
    durable_clients_through(&["upgrade", "reload"]);
}

/// `/ws/durable` clients of every kind through `actions` (`reload` or `upgrade`).
fn durable_clients_through(actions: &[&str]) {
    let Demo {
        server: d,
        http: port,
    } = demo_with(2, &[]);
    // 40 quiet clients, each with one message handled.
    let mut quiet: Vec<_> = (0..40).map(|_| client(port, "/ws/durable")).collect();
    for (i, ws) in quiet.iter_mut().enumerate() {
        ws.send(Message::text(format!("hello {i}"))).unwrap();
        assert_eq!(ws.read().unwrap(), Message::text(format!("hello {i}")));
    }
    // One that talks all the time: each echo must be the next number, none missing.
    let stop = Arc::new(AtomicBool::new(false));
    let echoed = Arc::new(AtomicU64::new(0));
    let talker = {
        let (stop, echoed) = (stop.clone(), echoed.clone());
        let mut ws = client(port, "/ws/durable");
        thread::spawn(move || {
            let mut n = 0u64;
            while !stop.load(Ordering::Relaxed) {
                ws.send(Message::text(n.to_string())).unwrap();
                match ws.read() {
                    Ok(m) => assert_eq!(m, Message::text(n.to_string()), "echo {n}"),
                    Err(e) => panic!("echo {n}: {e}"),
                }
                n += 1;
                echoed.store(n, Ordering::Relaxed);
            }
            ws.close(None).unwrap();
            n
        })
    };
    // One that does not read: four echoes of 256 KiB wait in the server's send buffer.
    let mut slow = client(port, "/ws/durable");
    let big: Vec<u8> = (0..256 << 10).map(|i| (i % 251) as u8).collect();
    for _ in 0..4 {
        slow.send(Message::binary(big.clone())).unwrap();
    }
    // Half a frame, and the first fragment of a text message whose é is cut in two.
    let mut partial = raw(port);
    let whole = frame(true, 0x1, b"sent across a reload");
    partial.write_all(&whole[..9]).unwrap();
    let mut fragmented = raw(port);
    let text = "fragments: héllo".as_bytes();
    let cut = text.len() - 4;
    fragmented
        .write_all(&frame(false, 0x1, &text[..cut]))
        .unwrap();
    // A client of the plain echo, which does not survive reloads.
    let mut plain = client(port, "/ws");
    plain.send(Message::text("plain")).unwrap();
    assert_eq!(plain.read().unwrap(), Message::text("plain"));

    assert_eq!(handover_total(&d, "handed_over"), 0);
    for (reload, action) in actions.iter().enumerate() {
        let before = http_pids(&d, port);
        let talked = echoed.load(Ordering::Relaxed);
        let out = d.cli(&[action]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let after = http_pids(&d, port);
        assert!(
            after.iter().all(|p| !before.contains(p)),
            "{action} {reload}: every worker replaced ({before:?} -> {after:?})"
        );
        wait_until(
            Duration::from_secs(10),
            "the talking client goes on after the reload or upgrade",
            || echoed.load(Ordering::Relaxed) > talked + 10,
        );
        if reload == 0 {
            // The plain echo's client was closed with 1001.
            match plain.read().unwrap() {
                Message::Close(Some(c)) => assert_eq!(c.code, CloseCode::Away),
                other => panic!("the plain /ws client got {other:?}"),
            }
        }
    }

    // The partial frame and the fragmented message complete in the third worker.
    partial.write_all(&whole[9..]).unwrap();
    assert_eq!(
        read_frame(&mut partial),
        (0x1, b"sent across a reload".to_vec())
    );
    fragmented
        .write_all(&frame(true, 0x0, &text[cut..]))
        .unwrap();
    assert_eq!(read_frame(&mut fragmented), (0x1, text.to_vec()));
    // The slow client gets its four echoes whole, then still talks.
    for i in 0..4 {
        match slow.read().unwrap() {
            Message::Binary(echo) => assert!(echo[..] == big[..], "echo {i} differs"),
            other => panic!("slow client, echo {i}: {other:?}"),
        }
    }
    slow.send(Message::text("still here")).unwrap();
    assert_eq!(slow.read().unwrap(), Message::text("still here"));
    // Each moved once per action: `on_resume` counted, in its data, which moved with it.
    quiet[0].send(Message::text("/moves")).unwrap();
    let moves = format!("moves: {}", actions.len());
    assert_eq!(quiet[0].read().unwrap(), Message::text(moves));
    // Every quiet client is still connected and served.
    for (i, ws) in quiet.iter_mut().enumerate() {
        ws.send(Message::text(format!("again {i}"))).unwrap();
        assert_eq!(
            ws.read().unwrap(),
            Message::text(format!("again {i}")),
            "client {i}"
        );
    }
    stop.store(true, Ordering::Relaxed);
    let talked = talker.join().unwrap();
    assert!(talked > 30, "{talked} echoes");

    // 44 connections moved once per action; none was skipped. (An old master's counters
    // left with it: this one's count from the move that brought the connections here.)
    let (handed_here, resumed_here) = match actions.iter().rposition(|a| *a == "upgrade") {
        Some(u) => (actions.len() - u - 1, actions.len() - u),
        None => (actions.len(), actions.len()),
    };
    let handed = handover_total(&d, "handed_over");
    assert_eq!(handed, 44 * handed_here as u64, "handed over");
    assert_eq!(
        handover_total(&d, "resumed"),
        44 * resumed_here as u64,
        "resumed"
    );
    assert_eq!(handover_total(&d, "skipped"), 0, "skipped");
    // The new workers said how long the connections were paused.
    let log = d.log();
    assert!(
        log.contains("paused from leaving their worker") && log.contains("max_ms="),
        "no pause logged:\n{log}"
    );
}

/// `/chat` rooms whose members are spread over both workers, each with a member publishing
/// all along: through three reloads, which move every member and publisher, each member gets
/// every message of its room exactly once and in order, and keeps its room (its data).
#[test]
fn chat_members_get_every_broadcast_once_and_in_order_through_reloads() {
    chat_rooms_through(&["reload", "reload", "reload"], false);
}

/// The same in an app that spans machines (`--redis`: `App::cluster`), one room's publisher
/// on another instance: what the master delivers from the bus is numbered like the workers'
/// own broadcasts, so members moving between workers miss none of it and get none twice.
/// One worker: every room's members all move at once, and the rooms stay subscribed.
#[test]
fn chat_members_of_a_cluster_app_get_every_broadcast_once_and_in_order_through_reloads() {
    chat_rooms_through(&["reload", "reload", "reload"], true);
}

/// The same through `upgrade`s: the old master's workers hand the members to the new
/// master's, and the two masters relay each other's broadcasts until the old one exits (a
/// reload between them, while the first old master may still be handing over).
#[test]
fn chat_members_get_every_broadcast_once_and_in_order_through_upgrades() {
    chat_rooms_through(&["upgrade", "reload", "upgrade"], false);
}

/// In an app that spans machines an `upgrade` moves the connections that are in no group,
/// but closes the group members with 1001: the new master is another instance of the bus,
/// which numbers what it delivers on its own, so a member could not be told what it missed.
#[test]
fn an_upgrade_of_a_cluster_app_moves_connections_but_closes_group_members() {
    let redis = Redis::start().unwrap();
    let url = redis.url();
    let Demo {
        server: d,
        http: port,
    } = demo_with(2, &["--redis", &url]);
    let mut member = client(port, "/chat?room=lobby");
    let mut durable = client(port, "/ws/durable");
    durable.send(Message::text("before")).unwrap();
    assert_eq!(durable.read().unwrap(), Message::text("before"));
    d.cli_ok(&["upgrade"]);
    loop {
        match member.read().unwrap() {
            Message::Close(Some(c)) => {
                assert_eq!(c.code, CloseCode::Away);
                break;
            }
            Message::Text(_) => {}
            other => panic!("the member got {other:?}"),
        }
    }
    durable.send(Message::text("after")).unwrap();
    assert_eq!(durable.read().unwrap(), Message::text("after"));
    assert_eq!(handover_total(&d, "resumed"), 1);
}

/// Busy `/chat` rooms through `actions` (`reload` or `upgrade`, each run with the CLI); with
/// `cluster`, two instances on one Redis, room 0's publisher on the second.
fn chat_rooms_through(actions: &[&str], cluster: bool) {
    const ROOMS: usize = 3;
    const MEMBERS: usize = 8;
    let redis = cluster.then(|| Redis::start().unwrap());
    let redis_url = redis.as_ref().map(Redis::url);
    let args: Vec<&str> = match &redis_url {
        Some(url) => vec!["--redis", url],
        None => vec![],
    };
    let workers = if cluster { 1 } else { 2 };
    let Demo {
        server: d,
        http: port,
    } = demo_with(workers, &args);
    let other = cluster.then(|| demo_with(1, &args));
    let received = Arc::new(AtomicU64::new(0));
    let readers: Vec<_> = (0..ROOMS * MEMBERS)
        .map(|i| {
            let room = i % ROOMS;
            let path = format!("/chat?room=r{room}&name=m{i}&user=u{i}");
            let mut ws = client(port, &path);
            let received = received.clone();
            thread::spawn(move || {
                let mut got = Vec::new();
                loop {
                    let text = match ws.read() {
                        Ok(Message::Text(t)) => t.to_string(),
                        other => panic!(
                            "member {i} of r{room}: {other:?} after {} messages, the last {:?}",
                            got.len(),
                            got.last()
                        ),
                    };
                    let (tag, n) = text.split_once(':').expect("TAG:N");
                    let n: u64 = n.parse().unwrap();
                    match tag.strip_prefix("END") {
                        Some(r) => {
                            assert_eq!(r, room.to_string(), "member {i}: another room's end");
                            return (room, got, n);
                        }
                        None => {
                            assert_eq!(tag, format!("P{room}"), "member {i}: another room's");
                            got.push(n);
                            received.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                }
            })
        })
        .collect();
    let stop = Arc::new(AtomicBool::new(false));
    let publishing: Vec<_> = (0..ROOMS)
        .map(|room| match &other {
            Some(b) if room == 0 => client(b.http, "/chat?room=r0"),
            _ => client(port, &format!("/chat?room=r{room}")),
        })
        .collect();
    if let Some(b) = &other {
        // (Each member's `user` key is a group too.)
        for (d, groups) in [(&d, ROOMS + ROOMS * MEMBERS), (&b.server, 1)] {
            wait_until(Duration::from_secs(10), "subscribed to the rooms", || {
                let c = d.status().unwrap()["cluster"].clone();
                c["connected"] == true && c["groups"] == groups
            });
        }
    }
    let publishers: Vec<_> = (publishing.into_iter().enumerate())
        .map(|(room, mut ws)| {
            let stop = stop.clone();
            thread::spawn(move || {
                let mut n = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    ws.send(Message::text(format!("P{room}:{n}"))).unwrap();
                    n += 1;
                    thread::sleep(Duration::from_millis(2));
                }
                ws.send(Message::text(format!("END{room}:{n}"))).unwrap();
                // Kept open until the members have read: closed with its own messages
                // unread, the socket would be reset, and the server drop the END with it.
                (n, ws)
            })
        })
        .collect();
    // Members and publishers landed on every HTTP worker.
    let open = d
        .connections_of(&format!("http://127.0.0.1:{port}"))
        .unwrap();
    assert_eq!(open.len(), workers);
    assert!(open.iter().all(|&n| n > 0), "{open:?}");
    let first_master = d.pid_file_pid().expect("a pid file");
    for (i, action) in actions.iter().enumerate() {
        let before = received.load(Ordering::Relaxed);
        wait_until(
            Duration::from_secs(10),
            "the rooms are busy before the reload or upgrade",
            || received.load(Ordering::Relaxed) > before + 200,
        );
        let out = d.cli(&[action]);
        assert!(
            out.status.success(),
            "{action} {i}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let before = received.load(Ordering::Relaxed);
    wait_until(
        Duration::from_secs(10),
        "the rooms go on after the reloads and upgrades",
        || received.load(Ordering::Relaxed) > before + 200,
    );
    stop.store(true, Ordering::Relaxed);
    let (sent, _open): (Vec<u64>, Vec<_>) =
        publishers.into_iter().map(|p| p.join().unwrap()).unzip();
    for reader in readers {
        let (room, got, end) = reader.join().unwrap();
        assert_eq!(end, sent[room]);
        let want: Vec<u64> = (0..end).collect();
        if got != want {
            let missing: Vec<_> = want.iter().filter(|n| !got.contains(n)).take(10).collect();
            let buses = match &other {
                Some(b) => format!(
                    "; the bus here: {}, on the other instance: {}",
                    d.status().unwrap()["cluster"],
                    b.server.status().unwrap()["cluster"]
                ),
                None => String::new(),
            };
            panic!(
                "r{room}: {} of {end} messages, missing {missing:?}, order kept: {}{buses}",
                got.len(),
                got.windows(2).all(|w| w[0] < w[1])
            );
        }
    }
    let upgraded = actions.contains(&"upgrade");
    let master = d.pid_file_pid().expect("a pid file");
    assert_eq!(master != first_master, upgraded, "the master's pid");
    // (An old master's counters left with it.)
    let moved = handover_total(&d, "handed_over");
    let here = (ROOMS * MEMBERS + ROOMS - usize::from(cluster)) as u64;
    if !upgraded {
        assert!(moved >= actions.len() as u64 * here, "{moved} moved");
        assert_eq!(handover_total(&d, "resumed"), moved);
    } else {
        // The last reload or upgrade moved every one into this master's workers.
        let resumed = handover_total(&d, "resumed");
        assert!(resumed >= here, "{resumed} resumed");
    }
    assert_eq!(handover_total(&d, "skipped"), 0);
}

/// 2,000 `/chat` members in one room over 2 workers, and brisk-bench's sender publishing to
/// them, through three reloads and an upgrade that move every one of them: none is
/// disconnected, every broadcast reaches every member, none twice, and in the order sent.
#[test]
fn two_thousand_members_lose_no_broadcast_and_get_none_twice_through_reloads_and_an_upgrade() {
    use brisk_bench::target::{Scheme, Target};
    use brisk_bench::ws::{run_ws, WsConfig, WsMode};
    brisk_bench::fd_limit::raise_fd_limit();
    let Demo {
        server: d,
        http: port,
    } = demo_with(2, &[]);
    let dir = temp_dir("ws-handover-2000");
    let ready = dir.path().join("ready");
    let url = format!("ws://127.0.0.1:{port}/chat");
    let mut config = WsConfig::new(Target::parse(&url, Scheme::Ws).unwrap());
    config.connections = 2_000;
    config.threads = 2;
    config.mode = WsMode::Broadcast;
    config.rate = 20.0;
    config.hold = Duration::from_secs(8);
    // The run ends as soon as every delivery has arrived: a loaded machine (CI builds the
    // fuzz targets meanwhile) may take long, and late is not lost.
    config.drain = Duration::from_secs(30);
    config.ready_file = Some(ready.clone());
    let load = thread::spawn(move || run_ws(&config).unwrap());
    wait_until(Duration::from_secs(30), "2,000 members connected", || {
        ready.exists()
    });
    let moved_before = handover_total(&d, "handed_over");
    let first_master = d.pid_file_pid().expect("a pid file");
    for (i, action) in ["reload", "reload", "reload", "upgrade"].iter().enumerate() {
        if *action == "upgrade" {
            // Every member (and the sender) moved three times (the old master's counters
            // leave with it).
            let moved = handover_total(&d, "handed_over") - moved_before;
            assert!(moved >= 3 * 2_001, "{moved} moved");
        }
        let out = d.cli(&[action]);
        assert!(
            out.status.success(),
            "{action} {i}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    assert_ne!(d.pid_file_pid().expect("a pid file"), first_master);
    let report = load.join().unwrap();
    let messages = report
        .messages
        .expect("a broadcast run reports its messages");
    assert_eq!(report.connections.succeeded, 2_000);
    assert_eq!(
        report.connections.failed.total, 0,
        "{:?}",
        report.connections
    );
    assert_eq!(report.connections.open_at_end, 2_000);
    assert!(messages.sent > 50, "{messages:?}");
    assert_eq!(messages.duplicates, 0, "{messages:?}");
    assert_eq!(messages.reordered, 0, "{messages:?}");
    let dropped = d.status().unwrap()["dropped_broadcasts"]
        .as_u64()
        .unwrap_or(0);
    let not_sent = d.total("sends_dropped").unwrap();
    assert_eq!(
        messages.delivered, messages.expected,
        "{messages:?}; broadcasts the master dropped: {dropped}, sends dropped: {not_sent}"
    );
    // And once more, into the new master's workers.
    assert!(handover_total(&d, "resumed") >= 2_001);
    assert_eq!(handover_total(&d, "skipped"), 0);
}

/// A broadcast made by a request a worker answers while it drains (a reload) reaches the
/// members on the other workers, and those handed over from it: the request was answered
/// 200, so its message was not for the draining worker's members alone.
#[test]
fn a_broadcast_made_while_a_worker_drains_reaches_every_member() {
    broadcast_while_draining("reload");
}

/// The same when the draining worker is an upgraded master's: its broadcast crosses the
/// bridge to the members now on the new master's workers, before the old master closes it.
#[test]
fn a_broadcast_made_while_an_old_masters_worker_drains_reaches_every_member() {
    broadcast_while_draining("upgrade");
}

/// A `POST /chat/say` whose body comes once `action` has replaced the worker that has it.
fn broadcast_while_draining(action: &str) {
    let Demo {
        server: d,
        http: port,
    } = demo_with(2, &[]);
    // At least 8 members, on both workers (the kernel picks a worker for each).
    let mut members = Vec::new();
    let on_both = || {
        let open = d.connections_of(&format!("http://127.0.0.1:{port}"));
        open.unwrap().iter().all(|&n| n > 0)
    };
    while members.len() < 8 || !on_both() {
        assert!(members.len() < 64, "64 members, all on one worker");
        members.push(client(port, "/chat?room=drain"));
    }
    // A request whose body is still to come, and the worker that has it.
    let counts = || -> Vec<(i64, u64)> {
        let status = d.status().unwrap();
        (status["workers"].as_array().unwrap().iter())
            .filter(|w| w["server"] == format!("http://127.0.0.1:{port}"))
            .map(|w| {
                (
                    w["pid"].as_i64().unwrap(),
                    w["connections"].as_u64().unwrap(),
                )
            })
            .collect()
    };
    let before = counts();
    let mut request = connect(port);
    request
        .write_all(b"POST /chat/say?room=drain HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Length: 11\r\n\r\n")
        .unwrap();
    let ours = wait_for(Duration::from_secs(10), "the request's worker", || {
        let now = counts();
        now.iter()
            .find(|(pid, n)| before.iter().any(|(p, m)| p == pid && n > m))
            .map(|(pid, _)| *pid)
    });
    thread::scope(|s| {
        let reload = s.spawn(|| d.cli(&[action]));
        // Its worker was replaced, and drains: the request ends now.
        wait_until(Duration::from_secs(10), "its worker replaced", || {
            !d.pids_of(&format!("http://127.0.0.1:{port}"))
                .unwrap()
                .contains(&(ours as i32))
        });
        request.write_all(b"while drain").unwrap();
        let mut answer = [0u8; 12];
        request.read_exact(&mut answer).unwrap();
        assert_eq!(&answer, b"HTTP/1.1 200");
        let out = reload.join().unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    });
    for (i, ws) in members.iter_mut().enumerate() {
        let got = ws
            .read()
            .unwrap_or_else(|e| panic!("member {i} did not get the message: {e}"));
        assert_eq!(got, Message::text("while drain"), "member {i}");
    }
}

/// A connection whose handler is still busy when the reload's drain time ends is not moved:
/// it is closed (with its close frame) and counted as skipped, the others move all the same, and the old worker
/// stops within its drain time (it spent it twice, and was killed with its counters unsent).
#[test]
fn a_connection_still_busy_when_the_drain_ends_is_closed_and_the_others_move() {
    let Demo {
        server: d,
        http: port,
    } = demo_with(2, &[]);
    let mut others: Vec<_> = (0..6).map(|_| client(port, "/ws/durable")).collect();
    let mut busy = client(port, "/ws/durable");
    // Busy past the plain reload's drain (5 s), first to hand over, then to close.
    busy.send(Message::text("/busy 12000")).unwrap();
    let out = d.cli(&["reload"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // It is not moved: its connection ends when the drain does, with a close frame (1001)
    // though its handler never returned. A moved connection would answer `done`.
    match busy.read() {
        Ok(Message::Close(Some(c))) => assert_eq!(c.code, CloseCode::Away),
        other => panic!("the busy client got {other:?} instead of a close frame (1001)"),
    }
    for (i, ws) in others.iter_mut().enumerate() {
        ws.send(Message::text("/moves")).unwrap();
        assert_eq!(ws.read().unwrap(), Message::text("moves: 1"), "client {i}");
    }
    assert_eq!(handover_total(&d, "skipped"), 1);
    assert_eq!(handover_total(&d, "resumed"), 6);
}
