//! The Redis job queue (`brisk::queue`) on a real Redis, through the fixture: jobs pushed from
//! a Text handler run once each in a consumer process, failing jobs are retried then
//! dead-lettered, malformed ones are dead-lettered at once, delayed ones wait, a job whose
//! consumer is killed runs again, Redis going down fails pushes at once and loses nothing it
//! kept, and an idle consumer waits for pushes on the queue's wake-up channel instead of
//! polling, however many loops it runs.

use std::net::TcpStream;
use std::time::{Duration, Instant};

use brisk_testkit::*;

const FIXTURE: &str = env!("CARGO_BIN_EXE_brisk-fixture");

/// The fixture with a Text server and a consumer process running `consumers` jobs at a time.
fn with_queue(redis: &Redis, consumers: usize) -> (ServerProcess, u16) {
    let port = free_port();
    let text = format!("text://127.0.0.1:{port}");
    let url = redis.url();
    let n = consumers.to_string();
    let args = [
        "--text",
        &text,
        "--queue-redis",
        &url,
        "--queue-consumers",
        &n,
    ];
    (ServerProcess::start(FIXTURE, &args, 2).unwrap(), port)
}

/// Pushes `payload` through the Text server; the job's id.
fn push(s: &mut TcpStream, payload: &str) -> u64 {
    let reply = text_round_trip(s, &format!("push {payload}"));
    reply
        .strip_prefix("pushed ")
        .unwrap_or_else(|| panic!("{reply}"))
        .parse()
        .unwrap()
}

/// The pid of the consumer process's worker.
fn consumer_pid(server: &ServerProcess) -> i32 {
    server.pids_of("consumer").unwrap()[0]
}

fn cli(redis: &Redis, args: &[&str]) -> String {
    redis.cli(args).unwrap().trim().to_string()
}

fn results(redis: &Redis) -> u64 {
    cli(redis, &["HLEN", "brisk:test:results"]).parse().unwrap()
}

fn job_field(redis: &Redis, id: u64, field: &str) -> String {
    cli(
        redis,
        &["HGET", &format!("brisk:queue:work:job:{id}"), field],
    )
}

#[test]
fn jobs_run_once_each_failing_ones_retry_then_die_and_malformed_ones_die_at_once() {
    let redis = Redis::start().unwrap();
    let (server, port) = with_queue(&redis, 4);
    let mut s = connect(port);
    let ids: Vec<u64> = (0..30).map(|_| push(&mut s, r#"{"do":"ok"}"#)).collect();
    let failing = push(&mut s, r#"{"do":"fail"}"#);
    let malformed = push(&mut s, "not json at all");
    wait_until(
        Duration::from_secs(20),
        "30 results and 2 dead jobs",
        || results(&redis) == 30 && cli(&redis, &["LLEN", "brisk:queue:work:dead"]) == "2",
    );
    for id in &ids {
        assert_eq!(job_field(&redis, *id, "state"), "done");
        assert_eq!(job_field(&redis, *id, "attempts"), "1");
    }
    // Three attempts (the default), then the dead-letter list with the payload and the error.
    assert_eq!(job_field(&redis, failing, "attempts"), "3");
    assert_eq!(job_field(&redis, failing, "state"), "dead");
    assert_eq!(
        job_field(&redis, failing, "last_error"),
        "this job always fails"
    );
    assert_eq!(job_field(&redis, failing, "payload"), r#"{"do":"fail"}"#);
    // A payload that cannot be read is not retried.
    assert_eq!(job_field(&redis, malformed, "attempts"), "1");
    let error = job_field(&redis, malformed, "last_error");
    assert!(error.starts_with("malformed payload: "), "{error}");
    // The counters in status: pushed by the Text worker, run by the consumer.
    let status = server.status().unwrap();
    let sum = |f: &str| -> u64 {
        status["workers"]
            .as_array()
            .unwrap()
            .iter()
            .map(|w| w["jobs"][f].as_u64().unwrap())
            .sum()
    };
    assert_eq!(
        (
            sum("pushed"),
            sum("done"),
            sum("retried"),
            sum("dead"),
            sum("running")
        ),
        (32, 30, 2, 2, 0),
        "{status}"
    );
    let consumer = consumer_pid(&server).to_string();
    // Every result came from the consumer process.
    let recorded = cli(&redis, &["HVALS", "brisk:test:results"]);
    assert!(recorded.lines().all(|p| p == consumer), "{recorded}");
}

#[test]
fn a_delayed_job_waits_its_time() {
    let redis = Redis::start().unwrap();
    let (_server, port) = with_queue(&redis, 1);
    let mut s = connect(port);
    let pushed = Instant::now();
    let reply = text_round_trip(&mut s, r#"pushdelay 1000 {"do":"ok"}"#);
    let id: u64 = reply.strip_prefix("pushed ").unwrap().parse().unwrap();
    assert_eq!(job_field(&redis, id, "state"), "delayed");
    wait_until(Duration::from_secs(10), "the delayed job's result", || {
        results(&redis) == 1
    });
    assert!(
        pushed.elapsed() >= Duration::from_millis(1000),
        "{:?}",
        pushed.elapsed()
    );
}

#[test]
fn a_job_whose_consumer_is_killed_runs_again_and_is_recorded_once() {
    let redis = Redis::start().unwrap();
    let (server, port) = with_queue(&redis, 1);
    let mut s = connect(port);
    let id = push(&mut s, r#"{"do":"sleep","ms":1500}"#);
    wait_until(Duration::from_secs(10), "the job running", || {
        job_field(&redis, id, "state") == "running"
    });
    let consumer = consumer_pid(&server);
    // SAFETY: kill(2) on a pid status just listed.
    assert_eq!(unsafe { libc::kill(consumer, libc::SIGKILL) }, 0);
    // After the 1 s visibility timeout the new consumer takes it again.
    wait_until(Duration::from_secs(15), "the job done", || {
        job_field(&redis, id, "state") == "done"
    });
    assert_eq!(results(&redis), 1);
    assert_eq!(job_field(&redis, id, "attempts"), "2");
    let by = cli(&redis, &["HGET", "brisk:test:results", &id.to_string()]);
    assert_ne!(by, consumer.to_string());
}

#[test]
fn with_redis_down_a_push_fails_at_once_and_kept_jobs_run_after_it_returns() {
    let mut redis = Redis::start_with(&["--appendonly", "yes"]).unwrap();
    let (_server, port) = with_queue(&redis, 2);
    let mut s = connect(port);
    // Five jobs that wait, so that they are still queued when Redis goes down.
    let due = r#"pushdelay 1500 {"do":"ok"}"#;
    for _ in 0..5 {
        assert!(text_round_trip(&mut s, due).starts_with("pushed "));
    }
    redis.kill();
    let t = Instant::now();
    let reply = text_round_trip(&mut s, r#"push {"do":"ok"}"#);
    assert!(reply.starts_with("error Redis is unavailable"), "{reply}");
    assert!(t.elapsed() < Duration::from_secs(3), "{:?}", t.elapsed());
    redis.start_again().unwrap();
    // The consumers resume, and the jobs Redis kept (appendonly) all run.
    wait_until(Duration::from_secs(20), "the kept jobs' results", || {
        results(&redis) == 5
    });
    wait_until(Duration::from_secs(10), "a push after the restart", || {
        text_round_trip(&mut s, r#"push {"do":"ok"}"#).starts_with("pushed ")
    });
    wait_until(Duration::from_secs(10), "its result", || {
        results(&redis) == 6
    });
}

/// Redis's count of `EVAL` calls so far (every take is one).
fn evals(redis: &Redis) -> u64 {
    let info = cli(redis, &["INFO", "commandstats"]);
    info.lines()
        .find_map(|l| l.strip_prefix("cmdstat_eval:calls="))
        .map(|rest| rest.split(',').next().unwrap().parse().unwrap())
        .unwrap_or(0)
}

#[test]
fn an_idle_consumer_waits_for_pushes_instead_of_polling_and_a_burst_reaches_every_loop() {
    let redis = Redis::start().unwrap();
    let (server, port) = with_queue(&redis, 8);
    // The consumer is up once it has looked, and subscribed to the queue's wake-ups.
    wait_until(Duration::from_secs(10), "the consumer subscribed", || {
        evals(&redis) > 0
            && cli(&redis, &["PUBSUB", "NUMSUB", "brisk:queue:work:wake"]).ends_with("\n1")
    });
    // Idle, eight loops cost one look a second between them (each loop polling every 20 ms
    // by itself made 400).
    let (before, since) = (evals(&redis), Instant::now());
    std::thread::sleep(Duration::from_secs(3));
    let per_second = (evals(&redis) - before) as f64 / since.elapsed().as_secs_f64();
    assert!(
        per_second <= 3.0,
        "{per_second:.1} looks a second while idle"
    );
    // A job pushed into the empty queue is taken when it is pushed, not at the next look:
    // ten in a row, each in under half the one second between looks (jobs taken at the looks
    // would all pass that only once in a thousand runs).
    let mut s = connect(port);
    for n in 1..=10 {
        let pushed = Instant::now();
        push(&mut s, r#"{"do":"ok"}"#);
        wait_until(Duration::from_secs(5), "the job's result", || {
            results(&redis) == n
        });
        assert!(
            pushed.elapsed() < Duration::from_millis(500),
            "job {n} took {:?} to run",
            pushed.elapsed()
        );
    }
    // Eight jobs pushed at once run side by side: the loops waiting behind the one that was
    // woken look at once instead of one wait after another.
    for _ in 0..8 {
        push(&mut s, r#"{"do":"sleep","ms":3000}"#);
    }
    let running = || -> u64 {
        server.status().unwrap()["workers"]
            .as_array()
            .unwrap()
            .iter()
            .map(|w| w["jobs"]["running"].as_u64().unwrap())
            .sum()
    };
    wait_until(Duration::from_secs(2), "eight jobs running at once", || {
        running() == 8
    });
    wait_until(Duration::from_secs(10), "their results", || {
        results(&redis) == 18
    });
}
