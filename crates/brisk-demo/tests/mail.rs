//! The demo's `POST /mail` through a real SMTP server on loopback (the testkit's aiosmtpd
//! sink): a message sent over STARTTLS arrives; a refused recipient, a bad address, a bad body
//! and a server that is down each get their status and a message that says what was wrong;
//! without `--smtp` the route answers 503 naming the flag.

use brisk_testkit::*;
use serde_json::Value as Json;

mod common;
use common::{demo_with, get, request};

fn json(r: &HttpResponse) -> Json {
    serde_json::from_slice(&r.body).unwrap_or_else(|e| panic!("{e}: {}", r.text()))
}

fn mail(http: u16, to: &str) -> HttpResponse {
    let body = serde_json::json!({ "to": to, "subject": "Hello", "text": "From the demo" });
    request(http, "POST", "/mail", &[], &body.to_string())
}

#[test]
fn post_mail_sends_through_the_smtp_server_and_says_what_went_wrong() {
    let mut sink = SmtpSink::start(SmtpSecurity::StartTls).unwrap();
    let ca = sink.certificate_path();
    let d = demo_with(
        1,
        &["--smtp", &sink.url(), "--smtp-ca", ca.to_str().unwrap()],
    );

    let r = mail(d.http, "ops@brisk.test");
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(json(&r)["code"], 250, "{}", r.text());
    let got = sink.wait_for(1, std::time::Duration::from_secs(5)).unwrap();
    assert!(got[0].contains("X-Sink-Tls: yes"), "{}", got[0]);
    assert!(got[0].contains("Subject: Hello"), "{}", got[0]);
    assert!(got[0].contains("From the demo"), "{}", got[0]);

    let refused = mail(d.http, "refuse@brisk.test");
    assert_eq!(refused.status, 502, "{}", refused.text());
    assert!(
        json(&refused)["error"].as_str().unwrap().contains("550"),
        "{}",
        refused.text()
    );

    let bad_address = mail(d.http, "not an address");
    assert_eq!(bad_address.status, 400, "{}", bad_address.text());
    assert!(
        bad_address.text().contains("not an address"),
        "{}",
        bad_address.text()
    );
    let bad_body = request(d.http, "POST", "/mail", &[], r#"{"to": 1}"#);
    assert_eq!(bad_body.status, 400);
    assert!(bad_body.text().contains("send JSON"), "{}", bad_body.text());

    sink.kill();
    let down = mail(d.http, "ops@brisk.test");
    assert_eq!(down.status, 503, "{}", down.text());
    assert!(down.text().contains("unavailable"), "{}", down.text());
    // The worker is unaffected.
    assert_eq!(get(d.http, "/").status, 200);
    assert_eq!(sink.messages().len(), 1);
}

#[test]
fn without_smtp_mail_answers_503_naming_the_flag() {
    let d = demo_with(1, &[]);
    let r = mail(d.http, "ops@brisk.test");
    assert_eq!(r.status, 503);
    assert!(r.text().contains("--smtp"), "{}", r.text());
}
