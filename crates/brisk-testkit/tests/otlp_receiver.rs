//! The OpenTelemetry Collector's OTLP receiver that the tracing tests start
//! ([`OtlpReceiver`]): an OTLP/HTTP JSON export comes out as the span that was sent.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use brisk_testkit::servers::OtlpReceiver;

const TRACE_ID: &str = "5b8efff798038103d269b633813fc60c";
const SPAN_ID: &str = "eee19b7ec3c1b174";

/// `POST path` with a JSON body over HTTP/1.1 to `endpoint` (`http://127.0.0.1:PORT`): the
/// status and the body.
fn post_json(endpoint: &str, path: &str, body: &str) -> (u16, String) {
    let addr = endpoint
        .strip_prefix("http://")
        .expect("an http:// endpoint");
    let mut s = TcpStream::connect(addr).expect("connect to the receiver");
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(
        s,
        "POST {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut raw = String::new();
    s.read_to_string(&mut raw).expect("read the answer");
    let (head, body) = raw.split_once("\r\n\r\n").expect("an HTTP answer");
    let status = head.split_whitespace().nth(1).expect("a status line");
    (status.parse().expect("a status code"), body.to_owned())
}

#[test]
fn an_otlp_http_json_export_comes_out_as_a_span() {
    let receiver = OtlpReceiver::start().expect("start the OTLP receiver");
    let request = serde_json::json!({
        "resourceSpans": [{
            "resource": {"attributes": [
                {"key": "service.name", "value": {"stringValue": "brisk-test"}}
            ]},
            "scopeSpans": [{
                "scope": {"name": "brisk"},
                "spans": [{
                    "traceId": TRACE_ID,
                    "spanId": SPAN_ID,
                    "name": "GET /items/{id}",
                    "kind": 2,
                    "startTimeUnixNano": "1700000000000000000",
                    "endTimeUnixNano": "1700000000250000000",
                    "attributes": [
                        {"key": "http.route", "value": {"stringValue": "/items/{id}"}}
                    ]
                }]
            }]
        }]
    });
    let (status, body) = post_json(&receiver.endpoint(), "/v1/traces", &request.to_string());
    assert_eq!(status, 200, "answer: {body}");

    let spans = receiver
        .wait_for_spans(|spans| !spans.is_empty(), Duration::from_secs(10))
        .unwrap();
    assert_eq!(spans.len(), 1, "{spans:?}");
    let span = &spans[0];
    assert_eq!(span["trace_id"], TRACE_ID);
    assert_eq!(span["span_id"], SPAN_ID);
    assert_eq!(span["parent_span_id"], "");
    assert_eq!(span["name"], "GET /items/{id}");
    assert_eq!(span["kind"], "Server");
    assert_eq!(span["service"], "brisk-test");
    assert_eq!(span["status"], "Unset");
    assert_eq!(
        span["attributes"],
        serde_json::json!({"http.route": "/items/{id}"})
    );
    assert_eq!(span["start_unix_nano"], 1_700_000_000_000_000_000u64);
    assert_eq!(span["end_unix_nano"], 1_700_000_000_250_000_000u64);
    assert_eq!(receiver.spans(), spans);
}
