//! `brisk::redis::Redis` against a real Redis server: commands round-trip on one multiplexed
//! connection, a server that is down fails fast and the connection comes back when it
//! returns (the first command after a restart succeeds), and a command the server does not
//! answer in time times out.

use std::time::{Duration, Instant};

use brisk::redis::{cmd, Redis as Client, RedisError, RedisOptions};
use brisk_testkit::*;

#[test]
fn commands_round_trip_and_many_keys_take_one_mget() {
    let server = Redis::start().unwrap();
    let redis = Client::new(&server.url(), RedisOptions::default()).unwrap();
    worker_runtime().block_on(async {
        redis.set_ex("a", b"1".to_vec(), 60).await.unwrap();
        redis.set_ex("b", b"2".to_vec(), 60).await.unwrap();
        let a: Option<String> = redis.get("a").await.unwrap();
        assert_eq!(a.as_deref(), Some("1"));
        let many: Vec<Option<i64>> = redis
            .mget(&["a".into(), "missing".into(), "b".into()])
            .await
            .unwrap();
        assert_eq!(many, vec![Some(1), None, Some(2)]);
        let ttl: i64 = redis.run(cmd("TTL").arg("a")).await.unwrap();
        assert!((1..=60).contains(&ttl), "{ttl}");
        redis.del("a").await.unwrap();
        assert_eq!(redis.get::<Option<String>>("a").await.unwrap(), None);
        // A wrong-type command is the command's error, not an outage.
        let err = redis
            .run::<i64>(cmd("INCR").arg("b").arg("x"))
            .await
            .unwrap_err();
        assert!(matches!(err, RedisError::Command(_)), "{err:?}");
    });
}

#[test]
fn a_server_that_is_down_fails_fast_and_the_connection_comes_back() {
    let mut server = Redis::start().unwrap();
    let redis = Client::new(&server.url(), RedisOptions::default()).unwrap();
    let rt = worker_runtime();
    rt.block_on(async { redis.set_ex("k", b"v".to_vec(), 60).await.unwrap() });
    server.kill();
    each_fails_within(
        &rt,
        10,
        Duration::from_millis(500),
        || redis.get::<Option<String>>("k"),
        |err| assert_eq!(err.http_status(), 503, "{err:?}"),
    );
    server.start_again().unwrap();
    rt.block_on(async {
        let back = Instant::now();
        loop {
            match redis.set_ex("k", b"again".to_vec(), 60).await {
                Ok(()) => break,
                Err(e) => assert!(back.elapsed() < Duration::from_secs(3), "not back: {e}"),
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let v: Option<String> = redis.get("k").await.unwrap();
        assert_eq!(v.as_deref(), Some("again"));
    });
}

/// The first command after a restart succeeds, however long the server has been back, whether
/// the connection was used while it was down or not. (It failed: the first `Queue::push` of
/// each worker after a Redis restart was lost, issue 68.)
#[test]
fn the_first_command_after_a_server_restart_succeeds() {
    let mut server = Redis::start().unwrap();
    let idle = Duration::from_millis(200);
    let options = RedisOptions {
        probe_after_idle: idle,
        ..RedisOptions::default()
    };
    let redis = Client::new(&server.url(), options).unwrap();
    let rt = worker_runtime();
    for used_while_down in [false, true] {
        let answered = rt.block_on(async {
            redis.set_ex("k", b"v".to_vec(), 60).await.unwrap();
            Instant::now()
        });
        server.kill();
        if used_while_down {
            rt.block_on(async {
                let down = redis.get::<Option<String>>("k").await.unwrap_err();
                assert_eq!(down.http_status(), 503, "{down:?}");
            });
        }
        server.start_again().unwrap();
        rt.block_on(async {
            // Back once a client of its own is answered.
            let probe = Client::new(&server.url(), RedisOptions::default()).unwrap();
            let deadline = Instant::now() + Duration::from_secs(10);
            while let Err(e) = probe.run::<String>(&cmd("PING")).await {
                assert!(
                    Instant::now() < deadline,
                    "the server did not come back: {e}"
                );
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            // The old connection idle past `probe_after_idle`, as a worker's is between uses.
            tokio::time::sleep(idle.saturating_sub(answered.elapsed())).await;
            redis
                .set_ex("k", b"after".to_vec(), 60)
                .await
                .unwrap_or_else(|e| panic!("used while down: {used_while_down}: {e}"));
            let v: Option<String> = redis.get("k").await.unwrap();
            assert_eq!(v.as_deref(), Some("after"));
        });
    }
}

#[test]
fn a_command_the_server_does_not_answer_in_time_times_out() {
    let server = Redis::start().unwrap();
    let options = RedisOptions {
        command_timeout: Duration::from_millis(200),
        ..Default::default()
    };
    let redis = Client::new(&server.url(), options).unwrap();
    let rt = worker_runtime();
    rt.block_on(async { redis.set_ex("k", b"v".to_vec(), 60).await.unwrap() });
    // Every client but the pausing one waits 6 s for its answers: a client without the
    // 200 ms timeout would wait as long.
    server.cli(&["CLIENT", "PAUSE", "6000", "ALL"]).unwrap();
    rt.block_on(async {
        let t = Instant::now();
        let err = redis.get::<Option<String>>("k").await.unwrap_err();
        assert!(matches!(err, RedisError::Timeout(_)), "{err:?}");
        assert_eq!(err.http_status(), 504);
        assert!(t.elapsed() < Duration::from_secs(3), "{:?}", t.elapsed());
    });
}

/// A URL the client refuses is quoted in the error without its password.
#[test]
fn a_refused_url_is_quoted_without_its_password() {
    let url = "redis://:s3cret-pw@127.0.0.1:notaport/0";
    let err = Client::new(url, RedisOptions::default()).err();
    let Some(RedisError::Config(message)) = err else {
        panic!("{err:?}")
    };
    assert!(message.contains(":***@127.0.0.1"), "{message}");
    assert!(!message.contains("s3cret"), "{message}");
}
