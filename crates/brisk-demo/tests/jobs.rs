//! The demo's background work over a real Redis: a job pushed by `POST /jobs` runs in the
//! demo's `jobs` process and `GET /jobs/ID` shows its result; bad input gets 400 or 404;
//! without `--redis` the routes answer 503 naming the flag. The heartbeat schedule writes its
//! rows from the `schedules` process.

use std::time::Duration;

use brisk_testkit::*;
use serde_json::Value as Json;

mod common;
use common::{demo_with, get, redis_refused, request};

fn json(r: &HttpResponse) -> Json {
    serde_json::from_slice(&r.body).unwrap_or_else(|e| panic!("{e}: {}", r.text()))
}

#[test]
fn a_posted_job_runs_in_the_jobs_process_and_its_result_is_shown() {
    let redis = Redis::start().unwrap();
    let d = demo_with(1, &["--redis", &redis.url()]);
    let status = d.server.status().unwrap();
    assert!(
        status["workers"]
            .as_array()
            .unwrap()
            .iter()
            .any(|w| w["server"] == "jobs"),
        "{status}"
    );
    let r = request(d.http, "POST", "/jobs", &[], r#"{"n": 1000}"#);
    assert_eq!(r.status, 202, "{}", r.text());
    let id = json(&r)["id"].as_u64().unwrap();
    let done = wait_for(Duration::from_secs(10), "the job done", || {
        let v = json(&get(d.http, &format!("/jobs/{id}")));
        (v["state"] == "done").then_some(v)
    });
    // 1² + 2² + … + 1000².
    assert_eq!(done["result"], "333833500", "{done}");
    assert_eq!(done["attempts"], 1, "{done}");

    let bad = request(d.http, "POST", "/jobs", &[], r#"{"n": "many"}"#);
    assert_eq!(bad.status, 400);
    assert!(bad.text().contains("send JSON"), "{}", bad.text());
    assert_eq!(get(d.http, "/jobs/abc").status, 400);
    assert_eq!(get(d.http, "/jobs/999999").status, 404);
}

/// Issue 66, M2: jobs that anyone who can write to Redis puts in the queue — one without a
/// seal, one with the seal of another payload — never run: each goes to the dead-letter list
/// saying why, and the jobs process counts both in `redis_refused`. A genuine job still runs.
#[test]
fn a_job_not_sealed_with_the_apps_secret_is_dead_lettered_unrun() {
    let redis = Redis::start().unwrap();
    let d = demo_with(1, &["--redis", &redis.url()]);
    let r = request(d.http, "POST", "/jobs", &[], r#"{"n": 10}"#);
    assert_eq!(r.status, 202, "{}", r.text());
    let genuine = json(&r)["id"].as_u64().unwrap();
    let prefix = "brisk:queue:demo-jobs:";
    let cli = |args: &[&str]| redis.cli(args).unwrap().trim().to_owned();
    let seal = cli(&["HGET", &format!("{prefix}job:{genuine}"), "seal"]);
    assert_eq!(seal.len(), 64, "a genuine job's seal: {seal:?}");
    wait_for(Duration::from_secs(10), "the genuine job done", || {
        (json(&get(d.http, &format!("/jobs/{genuine}")))["state"] == "done").then_some(())
    });
    for seal in ["", seal.as_str()] {
        let id = cli(&["INCR", &format!("{prefix}seq")]);
        let key = format!("{prefix}job:{id}");
        cli(&[
            "HSET",
            &key,
            "payload",
            r#"{"n":7}"#,
            "seal",
            seal,
            "attempts",
            "0",
        ]);
        cli(&["HSET", &key, "state", "queued"]);
        cli(&["RPUSH", &format!("{prefix}ready"), &id]);
        cli(&["PUBLISH", &format!("{prefix}wake"), &id]);
        let dead = wait_for(Duration::from_secs(10), "the forged job refused", || {
            let v = json(&get(d.http, &format!("/jobs/{id}")));
            (v["state"] != "queued" && v["state"] != "running").then_some(v)
        });
        assert_eq!(dead["state"], "dead", "{dead}");
        let why = dead["last_error"].as_str().unwrap_or_default();
        assert!(why.contains("not sealed with the app's secret"), "{dead}");
        assert!(dead["result"].is_null(), "a forged job ran: {dead}");
        assert_eq!(
            cli(&["EXISTS", &format!("brisk-demo:job-result:{id}")]),
            "0"
        );
    }
    let dead = cli(&["LRANGE", &format!("{prefix}dead"), "0", "-1"]);
    assert_eq!(dead.lines().count(), 2, "{dead}");
    wait_for(Duration::from_secs(5), "both refusals counted", || {
        (redis_refused(&d) == 2).then_some(())
    });
}

#[test]
fn without_redis_jobs_answer_503_naming_the_flag() {
    let d = demo_with(1, &[]);
    let r = request(d.http, "POST", "/jobs", &[], r#"{"n": 1}"#);
    assert_eq!(r.status, 503);
    assert!(r.text().contains("--redis"), "{}", r.text());
    assert_eq!(get(d.http, "/jobs/1").status, 503);
}

#[test]
fn the_heartbeat_schedule_writes_rows_from_the_schedules_process() {
    let redis = Redis::start().unwrap();
    let d = demo_with(2, &["--redis", &redis.url(), "--heartbeat-ms", "200"]);
    let beats = wait_for(Duration::from_secs(15), "3 heartbeat rows", || {
        let v = json(&get(d.http, "/heartbeat"));
        (v["beats"].as_i64().unwrap() >= 3).then_some(v)
    });
    let status = d.server.status().unwrap();
    let runner = d.server.pids_of("schedules").unwrap();
    assert_eq!(runner.len(), 1, "{status}");
    assert_eq!(beats["last_pid"], runner[0], "{beats}");
    let heartbeat = status["schedules"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["name"] == "heartbeat")
        .unwrap()
        .clone();
    assert_eq!(heartbeat["failures"], 0, "{heartbeat}");
    assert!(heartbeat["runs"].as_u64().unwrap() >= 2, "{heartbeat}");
}
