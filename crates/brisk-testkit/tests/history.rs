//! `brisk::ws::History` against a real Redis server: dense offsets across appenders, what a
//! position missed, and the three ways recovery fails (trimmed, new epoch, unknown position).

use std::time::Duration;

use brisk::redis::{cmd, Redis as Client, RedisOptions};
use brisk::ws::{History, HistoryError, HistoryOptions, Lost, Position, Recovery};
use brisk_testkit::*;

fn history(server: &Redis, options: HistoryOptions) -> History {
    History::new(
        Client::new(&server.url(), RedisOptions::default()).unwrap(),
        options,
    )
}

fn payloads(recovery: Recovery) -> Vec<String> {
    match recovery {
        Recovery::Recovered { missed, more } => {
            assert!(!more, "one page held them all");
            missed.iter().map(entry).collect()
        }
        Recovery::Lost(why) => panic!("not recovered: {why}"),
    }
}

/// `offset=payload`.
fn entry(k: &brisk::ws::Kept) -> String {
    format!(
        "{}={}",
        k.position.offset,
        String::from_utf8_lossy(&k.payload)
    )
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

/// An entry of `XRANGE`: its id and its fields.
type StreamEntry = (String, Vec<(String, Vec<u8>)>);

/// A group keeps at most `max_bytes` of messages (the oldest go first; Redis's count of them
/// stays exact), a message larger than a page is refused before Redis is asked, and a read
/// answers one page at a time: at least one message, then as many as fit in `page_bytes`.
#[test]
fn the_history_is_bounded_in_bytes_and_read_in_pages() {
    let server = Redis::start().unwrap();
    let h = history(
        &server,
        HistoryOptions {
            max_bytes: 10_000,
            page_bytes: 3_000,
            ..Default::default()
        },
    );
    let raw = Client::new(&server.url(), RedisOptions::default()).unwrap();
    worker_runtime().block_on(async {
        let message = |i: u64| format!("{i:04}").repeat(250); // 1000 bytes
        let mut positions = vec![];
        for i in 1..=20 {
            positions.push(h.append("room", message(i).as_bytes()).await.unwrap());
        }
        // At most ten of 1000 bytes fit in 10,000 (a trim leaves nine tenths: nine or ten).
        let kept: Vec<StreamEntry> = raw
            .run(
                cmd("XRANGE")
                    .arg("brisk:history:{room}:stream")
                    .arg("-")
                    .arg("+"),
            )
            .await
            .unwrap();
        assert!((9..=10).contains(&kept.len()), "{}", kept.len());
        let bytes: usize = kept.iter().map(|(_, f)| f[1].1.len()).sum();
        assert_eq!(bytes, kept.len() * 1000);
        let counted: usize = raw
            .run(cmd("HGET").arg("brisk:history:{room}:meta").arg("b"))
            .await
            .unwrap();
        assert_eq!(counted, bytes, "the meta hash's byte count");
        assert_eq!(
            h.since("room", &positions[4]).await.unwrap(),
            Recovery::Lost(Lost::Trimmed),
            "5 dropped for bytes"
        );
        // From 12: 13..20 in pages of three (3000 bytes each at most).
        let mut pages = vec![];
        let mut from = positions[11].clone();
        loop {
            let Recovery::Recovered { missed, more } = h.since("room", &from).await.unwrap() else {
                panic!("lost")
            };
            let size: usize = missed.iter().map(|k| k.payload.len()).sum();
            assert!(size <= 3_000 && !missed.is_empty(), "{size}");
            pages.push(missed.iter().map(|k| k.position.offset).collect::<Vec<_>>());
            if !more {
                break;
            }
            from = missed.last().unwrap().position.clone();
        }
        assert_eq!(pages, [vec![13, 14, 15], vec![16, 17, 18], vec![19, 20]]);
        // A listing: the newest that fit in a page.
        let (at, last) = h.latest("room", 100).await.unwrap();
        assert_eq!(at, positions[19]);
        let offsets: Vec<u64> = last.iter().map(|k| k.position.offset).collect();
        assert_eq!(offsets, [18, 19, 20]);
        // Larger than a page: refused, and nothing kept.
        let e = h.append("room", &[b'x'; 3_001]).await.unwrap_err();
        assert!(
            matches!(
                e,
                HistoryError::TooLarge {
                    len: 3_001,
                    limit: 3_000
                }
            ),
            "{e}"
        );
        assert_eq!(e.http_status(), 413);
        assert!(
            e.to_string().contains("larger than the history keeps"),
            "{e}"
        );
        assert_eq!(h.position("room").await.unwrap(), positions[19]);
        // A message of a whole page still reads, alone.
        let big = h.append("room", &[b'y'; 3_000]).await.unwrap();
        let Recovery::Recovered { missed, more } = h.since("room", &positions[18]).await.unwrap()
        else {
            panic!("lost")
        };
        assert_eq!((missed.len(), more), (1, true));
        assert_eq!(
            payloads(h.since("room", &positions[19]).await.unwrap()).len(),
            1
        );
        assert_eq!(big.offset, 21);
    });
}

/// All groups' histories together are bounded by Redis's `maxmemory` with `volatile-lru`
/// (every history key expires): past it Redis evicts, appends go on, and a client whose
/// history was evicted is told it is lost, never given a gap.
#[test]
fn under_maxmemory_evicted_histories_are_lost_not_gapped() {
    let server = Redis::start().unwrap();
    server.cli(&["CONFIG", "SET", "maxmemory", "8mb"]).unwrap();
    server
        .cli(&["CONFIG", "SET", "maxmemory-policy", "volatile-lru"])
        .unwrap();
    let h = history(&server, HistoryOptions::default());
    worker_runtime().block_on(async {
        let payload = vec![b'p'; 4_000];
        let mut firsts = vec![];
        // 2,000 groups of 5 messages of 4 KB: 40 MB asked of an 8 MB Redis.
        for g in 0..2_000 {
            let group = format!("room{g}");
            let first = h.append(&group, &payload).await.unwrap();
            for _ in 0..4 {
                h.append(&group, &payload).await.unwrap();
            }
            firsts.push((group, first));
        }
        let mut recovered = 0;
        let mut lost = 0;
        for (group, first) in &firsts {
            match h.since(group, first).await.unwrap() {
                Recovery::Recovered { missed, .. } => {
                    let offsets: Vec<u64> = missed.iter().map(|k| k.position.offset).collect();
                    assert_eq!(offsets, [2, 3, 4, 5], "{group}: a gap");
                    recovered += 1;
                }
                Recovery::Lost(Lost::NewEpoch | Lost::Trimmed) => lost += 1,
                Recovery::Lost(other) => panic!("{group}: {other}"),
            }
        }
        assert!(lost > 0, "nothing was evicted: raise the load");
        assert!(recovered > 0, "everything was evicted");
    });
    let info = server.cli(&["INFO", "memory"]).unwrap();
    let used: u64 = info
        .lines()
        .find_map(|l| l.strip_prefix("used_memory:"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(used <= 9 << 20, "used_memory {used}");
}
