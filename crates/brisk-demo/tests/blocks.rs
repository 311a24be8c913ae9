//! Report R2.3 over HTTP: `/blocks?n=5|45` merges that many cached blocks into one JSON
//! document, from each worker's memory or, with `--redis`, from a real Redis server (filled by
//! the first request, 503 while it is down, filled again after it comes back empty).

use std::time::Duration;

use brisk_testkit::*;
use serde_json::Value as Json;

mod common;
use common::{demo_with, get};

/// The blocks of a `/blocks` answer, checked to be blocks 1…n in order.
fn blocks(port: u16, n: usize) -> Vec<Json> {
    let r = get(port, &format!("/blocks?n={n}"));
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.header("content-type"), Some("application/json"));
    let page: Json = serde_json::from_slice(&r.body).expect("one JSON document");
    assert_eq!(page["n"], n);
    let blocks = page["blocks"].as_array().unwrap().clone();
    assert_eq!(blocks.len(), n);
    for (i, b) in blocks.iter().enumerate() {
        assert_eq!(b["id"], i + 1);
        assert_eq!(b["items"].as_array().unwrap().len(), 5, "{b}");
    }
    blocks
}

#[test]
fn five_and_forty_five_blocks_from_the_workers_memory() {
    let d = demo_with(1, &[]);
    blocks(d.http, 5);
    let all = blocks(d.http, 45);
    assert_eq!(all[44]["title"], "Block 45");
    // Without n: five.
    let r = get(d.http, "/blocks");
    let page: Json = serde_json::from_slice(&r.body).unwrap();
    assert_eq!(page["blocks"].as_array().unwrap().len(), 5);
    for bad in ["0", "46", "abc", "", "-1"] {
        let r = get(d.http, &format!("/blocks?n={bad}"));
        assert_eq!(r.status, 400, "n={bad}: {}", r.text());
        let body: Json = serde_json::from_slice(&r.body).unwrap();
        assert!(
            body["error"].as_str().unwrap().contains("from 1 to 45"),
            "{body}"
        );
    }
}

#[test]
fn blocks_come_from_redis_when_given() {
    let mut redis = Redis::start().unwrap();
    let d = demo_with(2, &["--redis", &redis.url()]);
    let from_memory = {
        let plain = demo_with(1, &[]);
        blocks(plain.http, 45)
    };
    assert_eq!(blocks(d.http, 45), from_memory);
    // Redis holds them now, as the page was built from them.
    let held = redis.cli(&["GET", "brisk:block:45"]).unwrap();
    let held: Json = serde_json::from_str(held.trim()).unwrap();
    assert_eq!(held, from_memory[44]);
    // What Redis says is what the page says.
    redis
        .cli(&[
            "SET",
            "brisk:block:1",
            r#"{"id":1,"items":[1,2,3,4,5],"edited":true}"#,
        ])
        .unwrap();
    wait_until(Duration::from_secs(5), "both workers read the edit", || {
        (0..8).all(|_| blocks(d.http, 5)[0]["edited"] == true)
    });

    redis.kill();
    let r = get(d.http, "/blocks?n=5");
    assert_eq!(r.status, 503, "{}", r.text());
    let body: Json = serde_json::from_slice(&r.body).unwrap();
    assert_eq!(body["error"], "the cache is unavailable", "{body}");
    // Back and empty: the next requests fill it again.
    redis.start_again().unwrap();
    wait_until(
        Duration::from_secs(5),
        "/blocks answers from Redis again",
        || (0..8).all(|_| get(d.http, "/blocks?n=45").status == 200),
    );
    assert_eq!(blocks(d.http, 45), from_memory);
}
