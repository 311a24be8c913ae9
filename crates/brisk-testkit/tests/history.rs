//! `brisk::ws::History` against a real Redis server: dense offsets across appenders, what a
//! position missed, and the three ways recovery fails (trimmed, new epoch, unknown position).

use std::time::Duration;

use brisk::redis::{cmd, Redis as Client, RedisOptions};
use brisk::ws::{History, HistoryOptions, Lost, Position, Recovery};
use brisk_testkit::*;

fn history(server: &Redis, options: HistoryOptions) -> History {
    History::new(
        Client::new(&server.url(), RedisOptions::default()).unwrap(),
        options,
    )
}

fn payloads(recovery: Recovery) -> Vec<String> {
    match recovery {
        Recovery::Recovered(kept) => kept
            .into_iter()
            .map(|k| {
                format!(
                    "{}={}",
                    k.position.offset,
                    String::from_utf8_lossy(&k.payload)
                )
            })
            .collect(),
        Recovery::Lost(why) => panic!("not recovered: {why}"),
    }
}

#[test]
fn a_position_recovers_exactly_what_came_after_it() {
    let server = Redis::start().unwrap();
    // Two appenders, as two workers or instances: one sequence of offsets.
    let a = history(&server, HistoryOptions::default());
    let b = history(&server, HistoryOptions::default());
    worker_runtime().block_on(async {
        let start = a.position("room").await.unwrap();
        assert_eq!(start.offset, 0);
        let mut positions = vec![];
        for i in 1..=6 {
            let h = if i % 2 == 0 { &a } else { &b };
            positions.push(h.append("room", format!("m{i}").as_bytes()).await.unwrap());
        }
        let offsets: Vec<u64> = positions.iter().map(|p| p.offset).collect();
        assert_eq!(offsets, [1, 2, 3, 4, 5, 6]);
        assert!(positions.iter().all(|p| p.epoch == start.epoch));
        assert_eq!(a.position("room").await.unwrap(), positions[5]);

        assert_eq!(
            payloads(b.since("room", &positions[2]).await.unwrap()),
            ["4=m4", "5=m5", "6=m6"]
        );
        assert_eq!(
            payloads(a.since("room", &start).await.unwrap()).len(),
            6,
            "from the start"
        );
        assert!(payloads(a.since("room", &positions[5]).await.unwrap()).is_empty());
        // Another group has its own offsets.
        assert_eq!(a.append("other", b"x").await.unwrap().offset, 1);

        // A position past the newest message, or of another epoch, is not recovered.
        let ahead = Position {
            offset: 7,
            ..start.clone()
        };
        let stale = Position {
            epoch: "1".into(),
            offset: 3,
        };
        assert_eq!(
            a.since("room", &ahead).await.unwrap(),
            Recovery::Lost(Lost::Unknown)
        );
        assert_eq!(
            a.since("room", &stale).await.unwrap(),
            Recovery::Lost(Lost::NewEpoch)
        );
    });
}

/// An append that times out while Redis is paused, and that Redis runs when the pause ends,
/// is tried again: the retry answers the first try's position, and the message is kept once.
#[test]
fn an_append_that_timed_out_but_was_kept_is_kept_once() {
    let server = Redis::start().unwrap();
    let timeout = Duration::from_millis(500);
    let options = RedisOptions {
        command_timeout: timeout,
        ..RedisOptions::default()
    };
    let h = History::new(
        Client::new(&server.url(), options).unwrap(),
        HistoryOptions::default(),
    );
    let admin = Client::new(&server.url(), RedisOptions::default()).unwrap();
    worker_runtime().block_on(async {
        let first = h.append("room", b"before").await.unwrap();
        // Writes wait 750 ms: the first try times out at 500, the retry queues behind it.
        let pause = cmd("CLIENT").arg("PAUSE").arg(750).arg("WRITE").to_owned();
        admin.run::<()>(&pause).await.unwrap();
        let t0 = std::time::Instant::now();
        let at = h.append("room", b"paused").await.unwrap();
        assert!(t0.elapsed() >= timeout, "the first try did not time out");
        assert_eq!(at.offset, first.offset + 1);
        assert_eq!(
            payloads(h.since("room", &first).await.unwrap()),
            ["2=paused"]
        );
        assert_eq!(h.append("room", b"after").await.unwrap().offset, 3);
    });
}

#[test]
fn more_missed_than_kept_is_lost_and_so_is_a_history_redis_forgot() {
    let mut server = Redis::start().unwrap();
    let options = HistoryOptions {
        keep_last: 3,
        ..Default::default()
    };
    let h = history(&server, options);
    let rt = worker_runtime();
    let first = rt.block_on(async {
        let first = h.append("room", b"1").await.unwrap();
        for i in 2..=5 {
            h.append("room", i.to_string().as_bytes()).await.unwrap();
        }
        // 2..5 missed, 3 kept (3, 4, 5).
        assert_eq!(
            h.since("room", &first).await.unwrap(),
            Recovery::Lost(Lost::Trimmed)
        );
        let second = Position {
            offset: 2,
            ..first.clone()
        };
        assert_eq!(
            payloads(h.since("room", &second).await.unwrap()),
            ["3=3", "4=4", "5=5"]
        );
        let len: u64 = Client::new(&server.url(), RedisOptions::default())
            .unwrap()
            .run(cmd("XLEN").arg("brisk:history:{room}:stream"))
            .await
            .unwrap();
        assert_eq!(len, 3);
        first
    });
    // A Redis without persistence that restarts forgets the history: a new epoch.
    server.restart().unwrap();
    rt.block_on(async {
        let again = loop {
            match h.append("room", b"after").await {
                Ok(p) => break p,
                Err(e) => {
                    assert_eq!(e.http_status(), 503, "{e}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            }
        };
        assert_eq!(again.offset, 1);
        assert_ne!(again.epoch, first.epoch);
        assert_eq!(
            h.since("room", &first).await.unwrap(),
            Recovery::Lost(Lost::NewEpoch)
        );
    });
}

/// Redis's clock (`TIME`), in milliseconds.
fn redis_now_ms(server: &Redis) -> u64 {
    let time = server.cli(&["TIME"]).unwrap();
    let mut parts = time.split_whitespace().map(|p| p.parse::<u64>().unwrap());
    let (secs, micros) = (parts.next().unwrap(), parts.next().unwrap());
    secs * 1000 + micros / 1000
}

#[test]
fn keep_for_drops_older_messages() {
    let server = Redis::start().unwrap();
    let h = history(
        &server,
        HistoryOptions {
            keep_for: Some(Duration::from_millis(300)),
            ..Default::default()
        },
    );
    worker_runtime().block_on(async {
        let start = h.position("room").await.unwrap();
        let old = h.append("room", b"old").await.unwrap();
        // Wait until `old` is past keep_for by Redis's clock, which stamps the stream's ids.
        let appended = redis_now_ms(&server);
        while redis_now_ms(&server) <= appended + 300 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let new = h.append("room", b"new").await.unwrap();
        assert_eq!(new.offset, 2);
        assert_eq!(
            h.since("room", &start).await.unwrap(),
            Recovery::Lost(Lost::Trimmed)
        );
        assert_eq!(payloads(h.since("room", &old).await.unwrap()), ["2=new"]);
    });
}

#[test]
fn positions_print_and_parse() {
    let p: Position = "1732412345000123:42".parse().unwrap();
    assert_eq!(p.epoch, "1732412345000123");
    assert_eq!(p.offset, 42);
    assert_eq!(p.to_string(), "1732412345000123:42");
    for bad in ["", "42", ":42", "abc:1", "1:x", "1:-1"] {
        let err = bad.parse::<Position>().unwrap_err();
        assert!(err.to_string().contains("EPOCH:OFFSET"), "{bad}: {err}");
    }
}
