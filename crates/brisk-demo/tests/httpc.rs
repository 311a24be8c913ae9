//! The demo's HTTP client routes over HTTP: R4's three modes against the demo's own
//! upstream, an upstream that is down (502) and one that is too slow (504), the worker
//! unaffected.

use std::time::{Duration, Instant};

use brisk_testkit::*;
use serde_json::Value as Json;

mod common;
use common::{demo_with, get};

fn call(port: u16, path: &str) -> Json {
    let r = get(port, path);
    assert_eq!(r.status, 200, "{path}: {}", r.text());
    assert_eq!(r.header("content-type"), Some("application/json"));
    serde_json::from_slice(&r.body).unwrap()
}

#[test]
fn the_three_modes_make_their_calls_and_multi_makes_them_at_once() {
    let d = demo_with(1, &[]);
    for mode in ["plain", "reuse", "multi"] {
        let v = call(d.http, &format!("/httpc/{mode}?n=4&ms=5"));
        assert_eq!(v["mode"], mode);
        assert_eq!(v["calls"], 4);
        let bodies = v["bodies"].as_array().unwrap();
        assert_eq!(bodies.len(), 4, "{v}");
        assert!(bodies.iter().all(|b| b["waited_ms"] == 5), "{v}");
    }
    // Five calls of 400 ms each: one after another they need 2 s, at once well under.
    let started = Instant::now();
    call(d.http, "/httpc/multi?n=5&ms=400");
    let took = started.elapsed();
    assert!(took < Duration::from_millis(1500), "{took:?}");
}

#[test]
fn an_upstream_that_is_down_is_502_and_a_slow_one_504() {
    // Its URL carries a password and a token: neither, nor the upstream's address, reaches
    // the client; the log names the upstream, without the password.
    let port = free_port();
    let down = format!("http://user:s3cret@127.0.0.1:{port}");
    let d = demo_with(1, &["--upstream", &down]);
    for mode in ["plain", "reuse", "multi"] {
        let r = get(d.http, &format!("/httpc/{mode}"));
        assert_eq!(r.status, 502, "{mode}: {}", r.text());
        let whole = format!("{}\n{}", r.head, r.text());
        assert_eq!(r.text(), "an upstream service is unavailable\n");
        for secret in ["s3cret", "127.0.0.1", &port.to_string()] {
            assert!(!whole.contains(secret), "{mode}: {whole}");
        }
    }
    let log = d.server.log();
    assert!(
        log.contains(&format!("cannot connect to 127.0.0.1:{port}")),
        "{log}"
    );
    assert!(!log.contains("s3cret"), "{log}");
    let slow = demo_with(1, &["--upstream-timeout-ms", "300"]);
    let started = Instant::now();
    let r = get(slow.http, "/httpc/reuse?n=1&ms=5000");
    assert_eq!(r.status, 504, "{}", r.text());
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );
    // The worker is fine and answers the next calls.
    call(slow.http, "/httpc/reuse?n=2&ms=1");
    assert_eq!(get(d.http, "/").status, 200);
}
