//! Traces over OTLP to the OpenTelemetry Collector's own OTLP receiver (its Go module, built
//! by scripts/install-test-servers): a request's span under the caller's `traceparent`, its
//! database calls under it, the HTTP client's call and the upstream's answer in the same
//! trace, WebSocket messages, sampling that keeps only what it should, and a collector that
//! is down or a bad setting said out loud.

use std::net::TcpStream;
use std::time::Duration;

use brisk_testkit::*;
use serde_json::Value as Json;

mod common;
use common::{demo_args, demo_with, get, request, DEMO};

/// How long spans may take to arrive: a worker sends them once a second.
const ARRIVAL: Duration = Duration::from_secs(15);

fn traceparent(trace: &str, parent: &str, sampled: bool) -> String {
    format!("00-{trace}-{parent}-{}", if sampled { "01" } else { "00" })
}

fn of_trace<'a>(spans: &'a [Json], trace: &str) -> Vec<&'a Json> {
    spans.iter().filter(|s| s["trace_id"] == trace).collect()
}

fn attr<'a>(span: &'a Json, key: &str) -> &'a Json {
    &span["attributes"][key]
}

#[test]
fn a_request_its_database_calls_and_its_client_calls_make_one_trace() {
    let collector = OtlpReceiver::start().unwrap();
    let d = demo_with(1, &["--otlp", &collector.endpoint()]);

    // A caller's trace: the request's span is its child, the query the request's.
    let trace = "4bf92f3577b34da6a3ce929d0e0e4736";
    let caller = "00f067aa0ba902b7";
    let r = request(
        d.http,
        "GET",
        "/db",
        &[("traceparent", &traceparent(trace, caller, true))],
        "",
    );
    assert_eq!(r.status, 200, "{}", r.text());
    let spans = collector
        .wait_for_spans(|s| of_trace(s, trace).len() >= 2, ARRIVAL)
        .unwrap_or_else(|e| panic!("{e}\n{}", d.server.log()));
    let spans = of_trace(&spans, trace);
    let server = spans
        .iter()
        .find(|s| s["kind"] == "Server")
        .expect("the request's span");
    assert_eq!(server["parent_span_id"], caller, "{server}");
    assert_eq!(server["name"], "GET", "{server}");
    assert_eq!(server["service"], "brisk-demo", "{server}");
    assert_eq!(attr(server, "url.path"), "/db", "{server}");
    assert_eq!(attr(server, "http.request.method"), "GET", "{server}");
    assert_eq!(attr(server, "http.response.status_code"), 200, "{server}");
    let query = spans
        .iter()
        .find(|s| s["kind"] == "Client")
        .expect("the query's span");
    assert_eq!(query["parent_span_id"], server["span_id"], "{query}");
    assert_eq!(attr(query, "db.system.name"), "sqlite", "{query}");
    assert_eq!(query["name"], "SELECT", "{query}");
    assert!(
        attr(query, "db.query.text")
            .as_str()
            .unwrap()
            .contains("FROM world"),
        "{query}"
    );

    // The HTTP client sends the trace on: the demo's upstream route (the demo itself)
    // answers in the same trace, under the client's span.
    let trace = "0af7651916cd43dd8448eb211c80319c";
    let r = request(
        d.http,
        "GET",
        "/httpc/plain?n=1&ms=1",
        &[("traceparent", &traceparent(trace, caller, true))],
        "",
    );
    assert_eq!(r.status, 200, "{}", r.text());
    let spans = collector
        .wait_for_spans(|s| of_trace(s, trace).len() >= 3, ARRIVAL)
        .unwrap_or_else(|e| panic!("{e}\n{}", d.server.log()));
    let spans = of_trace(&spans, trace);
    let outer = spans
        .iter()
        .find(|s| s["kind"] == "Server" && s["parent_span_id"] == caller)
        .expect("the route's span");
    let call = spans
        .iter()
        .find(|s| s["kind"] == "Client" && s["parent_span_id"] == outer["span_id"])
        .expect("the client's span");
    let upstream = spans
        .iter()
        .find(|s| s["kind"] == "Server" && s["parent_span_id"] == call["span_id"])
        .unwrap_or_else(|| panic!("the upstream's span under the client's: {spans:?}"));
    assert_eq!(attr(call, "http.response.status_code"), 200, "{call}");
    assert_ne!(attr(upstream, "url.path"), "/httpc/plain", "{upstream}");

    // A caller that does not sample its trace: nothing of it is sent. The request after it
    // is, and spans leave a worker in order, so by then the first would have arrived.
    let unsampled = "11111111111111111111111111111111";
    let r = request(
        d.http,
        "GET",
        "/db",
        &[("traceparent", &traceparent(unsampled, caller, false))],
        "",
    );
    assert_eq!(r.status, 200);
    let marker = "22222222222222222222222222222222";
    let r = request(
        d.http,
        "GET",
        "/",
        &[("traceparent", &traceparent(marker, caller, true))],
        "",
    );
    assert_eq!(r.status, 200);
    let spans = collector
        .wait_for_spans(|s| !of_trace(s, marker).is_empty(), ARRIVAL)
        .unwrap();
    assert!(of_trace(&spans, unsampled).is_empty(), "{spans:?}");
    // A request without a trace starts one (everything is sampled by default).
    let before = collector.spans().len();
    assert_eq!(get(d.http, "/json").status, 200);
    let spans = collector
        .wait_for_spans(
            |s| s[before..].iter().any(|s| attr(s, "url.path") == "/json"),
            ARRIVAL,
        )
        .unwrap();
    let fresh = spans
        .iter()
        .find(|s| attr(s, "url.path") == "/json")
        .unwrap();
    assert_eq!(fresh["parent_span_id"], "", "{fresh}");
    assert_eq!(fresh["trace_id"].as_str().unwrap().len(), 32, "{fresh}");
}

#[test]
fn websocket_messages_are_traced_as_roots() {
    let collector = OtlpReceiver::start().unwrap();
    let (mut args, _) = demo_args(1);
    let at = args.iter().position(|a| a == "--websocket").unwrap() + 1;
    let ws: u16 = args[at].rsplit(':').next().unwrap().parse().unwrap();
    args.extend(["--otlp".to_string(), collector.endpoint()]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let _demo = ServerProcess::start(DEMO, &args, 4).unwrap();
    let stream = TcpStream::connect(("127.0.0.1", ws)).unwrap();
    let (mut socket, _) = tungstenite::client(format!("ws://127.0.0.1:{ws}/"), stream).unwrap();
    socket
        .send(tungstenite::Message::text("hello, traces"))
        .unwrap();
    let echo = socket.read().unwrap();
    assert_eq!(echo.into_text().unwrap().as_str(), "hello, traces");
    let spans = collector
        .wait_for_spans(
            |s| s.iter().any(|s| s["name"] == "websocket message"),
            ARRIVAL,
        )
        .unwrap();
    let message = spans
        .iter()
        .find(|s| s["name"] == "websocket message")
        .unwrap();
    assert_eq!(
        attr(message, "messaging.message.body.size"),
        13,
        "{message}"
    );
    assert_eq!(attr(message, "brisk.websocket.text"), true, "{message}");
    assert_eq!(message["parent_span_id"], "", "{message}");
}

#[test]
fn a_zero_share_traces_only_the_requests_whose_callers_trace_them() {
    let collector = OtlpReceiver::start().unwrap();
    let d = demo_with(1, &["--otlp", &collector.endpoint(), "--trace-sample", "0"]);
    for _ in 0..20 {
        assert_eq!(get(d.http, "/db").status, 200);
    }
    let trace = "5c9e1b4a2f7d48e3a6b0c1d2e3f40516";
    let r = request(
        d.http,
        "GET",
        "/db",
        &[("traceparent", &traceparent(trace, "a1b2c3d4e5f60718", true))],
        "",
    );
    assert_eq!(r.status, 200);
    let spans = collector
        .wait_for_spans(|s| of_trace(s, trace).len() >= 2, ARRIVAL)
        .unwrap();
    // Only the traced request and its query: the 20 before it sent nothing.
    assert_eq!(spans.len(), 2, "{spans:?}");
}

#[test]
fn a_collector_that_is_down_is_logged_and_requests_go_on() {
    let nobody = format!("http://127.0.0.1:{}", free_port());
    let d = demo_with(1, &["--otlp", &nobody]);
    for _ in 0..5 {
        assert_eq!(get(d.http, "/db").status, 200);
    }
    wait_for(ARRIVAL, "the log to say the collector is down", || {
        d.server
            .log()
            .contains("traces cannot reach the OpenTelemetry collector at")
            .then_some(())
    });
    assert_eq!(get(d.http, "/db").status, 200);
}

#[test]
fn a_bad_collector_url_or_share_stops_the_start_with_why() {
    for (args, says) in [
        (
            vec!["--otlp", "ftp://127.0.0.1:4318"],
            "not an http:// or https:// URL",
        ),
        (
            vec!["--otlp", "http://127.0.0.1:4318", "--trace-sample", "2"],
            "--trace-sample 2",
        ),
        (vec!["--trace-sample", "0.5"], "--trace-sample needs --otlp"),
    ] {
        let out = std::process::Command::new(DEMO)
            .args(&args)
            .arg("start")
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?}: {stderr}");
        assert!(stderr.contains(says), "{args:?}: {stderr}");
    }
}

#[test]
fn redis_commands_and_queue_jobs_are_traced() {
    let redis = Redis::start().unwrap();
    let collector = OtlpReceiver::start().unwrap();
    let d = demo_with(
        1,
        &["--redis", &redis.url(), "--otlp", &collector.endpoint()],
    );
    let trace = "6e0c63257de34c92bf9efcd03927272e";
    let r = request(
        d.http,
        "POST",
        "/jobs",
        &[("traceparent", &traceparent(trace, "b7ad6b7169203331", true))],
        r#"{"n": 10}"#,
    );
    assert_eq!(r.status, 202, "{}", r.text());
    // The push's Redis calls under the request's span.
    let spans = collector
        .wait_for_spans(
            |s| {
                // The request's span ends after its Redis calls, maybe in a later batch.
                let trace = of_trace(s, trace);
                trace.iter().any(|s| attr(s, "db.system.name") == "redis")
                    && trace.iter().any(|s| s["kind"] == "Server")
            },
            ARRIVAL,
        )
        .unwrap_or_else(|e| panic!("{e}\n{}", d.server.log()));
    let spans = of_trace(&spans, trace);
    let server = spans.iter().find(|s| s["kind"] == "Server").unwrap();
    let call = spans
        .iter()
        .find(|s| attr(s, "db.system.name") == "redis")
        .unwrap();
    assert_eq!(call["parent_span_id"], server["span_id"], "{call}");
    // The job's run, in the demo's jobs process: a trace of its own.
    let spans = collector
        .wait_for_spans(|s| s.iter().any(|s| s["kind"] == "Consumer"), ARRIVAL)
        .unwrap_or_else(|e| panic!("{e}\n{}", d.server.log()));
    let job = spans.iter().find(|s| s["kind"] == "Consumer").unwrap();
    assert_eq!(
        attr(job, "messaging.destination.name"),
        "demo-jobs",
        "{job}"
    );
    assert_eq!(attr(job, "brisk.job.attempt"), 1, "{job}");
}
