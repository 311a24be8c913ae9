//! Mail (`brisk::mail`) through a real SMTP server on loopback (the testkit's aiosmtpd sink):
//! plain, STARTTLS and TLS deliver; a server that is down, refuses, offers no STARTTLS, has an
//! untrusted certificate or never answers gives a clear error in bounded time; in a worker, a
//! send that hangs does not hold the other connections, and a job whose send fails is retried
//! by the queue and then dead-lettered with the server's answer.

use std::io::Write;
use std::net::{TcpListener, TcpStream};
use std::time::{Duration, Instant};

use brisk::mail::{self, Delivered, MailError, MailOptions, Mailer};
use brisk_testkit::*;

const FIXTURE: &str = env!("CARGO_BIN_EXE_brisk-fixture");

/// A mailer for `sink` that trusts its certificate, 3 s per message.
fn mailer_for(sink: &SmtpSink, url: &str) -> Mailer {
    let options = MailOptions {
        connect_timeout: Duration::from_secs(1),
        send_timeout: Duration::from_secs(3),
        root_certificate: Some(sink.certificate_pem().to_vec()),
    };
    Mailer::new(url, options).unwrap()
}

/// Sends a message to `to` on a worker-like runtime.
fn send(mailer: &Mailer, to: &str, subject: &str) -> Result<Delivered, MailError> {
    let message = mail::text(
        "Brisk <noreply@brisk.test>",
        to,
        subject,
        "Hello from Brisk",
    )
    .unwrap();
    worker_runtime().block_on(mailer.send(message))
}

#[test]
fn plain_starttls_and_tls_each_deliver_the_message() {
    for (security, encrypted) in [
        (SmtpSecurity::Plain, "no"),
        (SmtpSecurity::StartTls, "yes"),
        (SmtpSecurity::Tls, "yes"),
    ] {
        let sink = SmtpSink::start(security).unwrap();
        let mailer = mailer_for(&sink, &sink.url());
        let delivered = send(&mailer, "ops@brisk.test", &format!("{security:?}")).unwrap();
        assert_eq!(delivered.code, 250, "{security:?}: {delivered:?}");
        assert!(delivered.message.contains("stored as 1"), "{delivered:?}");
        let got = sink.wait_for(1, Duration::from_secs(5)).unwrap();
        let m = &got[0];
        assert!(
            m.contains(&format!("X-Sink-Tls: {encrypted}")),
            "{security:?}: {m}"
        );
        assert!(m.contains("X-Sink-Rcpt: ops@brisk.test"), "{m}");
        assert!(m.contains(&format!("Subject: {security:?}")), "{m}");
        assert!(m.contains("From: Brisk <noreply@brisk.test>"), "{m}");
        assert!(m.contains("Hello from Brisk"), "{m}");
    }
}

#[test]
fn tls_that_cannot_be_had_is_an_error_and_nothing_is_sent_in_the_clear() {
    // STARTTLS required, from a server that does not offer it.
    let plain = SmtpSink::start(SmtpSecurity::Plain).unwrap();
    let url = format!("{}?tls=required", plain.url());
    let e = send(&mailer_for(&plain, &url), "ops@brisk.test", "s").unwrap_err();
    assert!(matches!(e, MailError::Tls(_)), "{e}");
    assert_eq!(e.http_status(), 502);
    assert!(plain.messages().is_empty());

    // A certificate the client does not trust.
    let tls = SmtpSink::start(SmtpSecurity::Tls).unwrap();
    let untrusting = Mailer::new(&tls.url(), MailOptions::default()).unwrap();
    let e = send(&untrusting, "ops@brisk.test", "s").unwrap_err();
    assert!(
        matches!(&e, MailError::Tls(m) if m.contains("certificate")),
        "{e}"
    );

    // A server that requires STARTTLS, from a client that does not use it.
    let starttls = SmtpSink::start(SmtpSecurity::StartTls).unwrap();
    let plain_url = starttls.url().replace("?tls=required", "");
    let e = send(&mailer_for(&starttls, &plain_url), "ops@brisk.test", "s").unwrap_err();
    assert!(matches!(e, MailError::Refused { code: 530, .. }), "{e}");
    assert!(starttls.messages().is_empty());
}

#[test]
fn refused_recipients_give_the_servers_code_and_text() {
    let sink = SmtpSink::start(SmtpSecurity::Plain).unwrap();
    let mailer = mailer_for(&sink, &sink.url());
    let e = send(&mailer, "refuse@brisk.test", "s").unwrap_err();
    match &e {
        MailError::Refused { code, message } => {
            assert_eq!(*code, 550);
            assert!(message.contains("mailbox refused by the test sink"), "{e}");
        }
        other => panic!("{other}"),
    }
    let e = send(&mailer, "busy@brisk.test", "s").unwrap_err();
    assert!(matches!(e, MailError::Refused { code: 451, .. }), "{e}");
    // The same mailer still delivers.
    send(&mailer, "ops@brisk.test", "after").unwrap();
    assert_eq!(sink.wait_for(1, Duration::from_secs(5)).unwrap().len(), 1);
}

#[test]
fn a_server_that_is_down_fails_at_once_and_sending_resumes_when_it_is_back() {
    let mut sink = SmtpSink::start(SmtpSecurity::StartTls).unwrap();
    let mailer = mailer_for(&sink, &sink.url());
    let rt = worker_runtime();
    let message = || mail::text("noreply@brisk.test", "ops@brisk.test", "s", "b").unwrap();
    rt.block_on(mailer.send(message())).unwrap();
    sink.kill();
    let start = Instant::now();
    let e = rt.block_on(mailer.send(message())).unwrap_err();
    assert!(matches!(e, MailError::Unavailable(_)), "{e}");
    // Well within the 10 s connect timeout a silent server would cost.
    assert!(
        start.elapsed() < Duration::from_secs(3),
        "{:?}",
        start.elapsed()
    );
    sink.start_again().unwrap();
    // The pooled connection died with the server; the next send opens a new one.
    rt.block_on(mailer.send(message())).unwrap();
    assert_eq!(sink.wait_for(2, Duration::from_secs(5)).unwrap().len(), 2);
}

/// A TCP server on loopback that accepts connections and never says a word.
fn silent_server() -> (TcpListener, u16) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    (listener, port)
}

#[test]
fn a_server_that_never_answers_times_out() {
    let (_listener, port) = silent_server();
    let options = MailOptions {
        send_timeout: Duration::from_millis(300),
        ..Default::default()
    };
    let mailer = Mailer::new(&format!("smtp://127.0.0.1:{port}"), options).unwrap();
    let start = Instant::now();
    let e = send(&mailer, "ops@brisk.test", "s").unwrap_err();
    assert!(matches!(e, MailError::Timeout(_)), "{e}");
    assert_eq!(
        e.to_string(),
        "the SMTP server did not answer within 300 ms"
    );
    assert_eq!(e.http_status(), 504);
    assert!(
        start.elapsed() < Duration::from_secs(2),
        "{:?}",
        start.elapsed()
    );
}

#[test]
fn in_a_worker_a_hanging_send_does_not_hold_the_other_connections() {
    let (_listener, smtp) = silent_server();
    let port = free_port();
    let text = format!("text://127.0.0.1:{port}");
    let url = format!("smtp://127.0.0.1:{smtp}");
    let _server = ServerProcess::start(FIXTURE, &["--text", &text, "--mail-url", &url], 1).unwrap();
    let mut sender = connect(port);
    sender.write_all(b"mail ops@brisk.test\n").unwrap();
    // While the one worker waits on the silent server (3 s, the fixture's send timeout),
    // another client is served at once.
    let mut other = connect(port);
    for i in 0..20 {
        let start = Instant::now();
        assert_eq!(
            text_round_trip(&mut other, &format!("echo {i}")),
            format!("echo {i}")
        );
        assert!(
            start.elapsed() < Duration::from_secs(2),
            "{:?}",
            start.elapsed()
        );
    }
    let reply = read_line(&mut sender);
    assert!(
        reply.starts_with("error the SMTP server did not answer within"),
        "{reply}"
    );
}

/// Attempts of the fixture's queue in these tests: 50 ms to 200 ms apart, about 3.5 s in all,
/// long enough to restart the SMTP sink while a job is still being retried.
const ATTEMPTS: &str = "20";

/// The fixture with a Text server, a consumer process and a mailer for `sink`.
fn with_mail_queue(redis: &Redis, sink: &SmtpSink) -> (ServerProcess, TcpStream) {
    let port = free_port();
    let text = format!("text://127.0.0.1:{port}");
    let (url, ca) = (sink.url(), sink.certificate_path());
    let args = [
        "--text",
        &text,
        "--queue-redis",
        &redis.url(),
        "--queue-consumers",
        "2",
        "--queue-attempts",
        ATTEMPTS,
        "--mail-url",
        &url,
        "--mail-ca",
        ca.to_str().unwrap(),
    ];
    let server = ServerProcess::start(FIXTURE, &args, 2).unwrap();
    (server, connect(port))
}

fn push(s: &mut TcpStream, payload: &str) -> String {
    let reply = text_round_trip(s, &format!("push {payload}"));
    reply
        .strip_prefix("pushed ")
        .unwrap_or_else(|| panic!("{reply}"))
        .to_owned()
}

fn job_field(redis: &Redis, id: &str, field: &str) -> String {
    let key = format!("brisk:queue:work:job:{id}");
    redis.cli(&["HGET", &key, field]).unwrap().trim().to_owned()
}

#[test]
fn a_job_whose_send_fails_is_retried_then_dead_lettered_with_the_servers_answer() {
    let redis = Redis::start().unwrap();
    let mut sink = SmtpSink::start(SmtpSecurity::StartTls).unwrap();
    let (_server, mut s) = with_mail_queue(&redis, &sink);

    let delivered = push(&mut s, r#"{"do":"mail","to":"ops@brisk.test"}"#);
    let refused = push(&mut s, r#"{"do":"mail","to":"refuse@brisk.test"}"#);
    wait_until(Duration::from_secs(20), "both jobs settled", || {
        job_field(&redis, &delivered, "state") == "done"
            && job_field(&redis, &refused, "state") == "dead"
    });
    let got = sink.wait_for(1, Duration::from_secs(5)).unwrap();
    assert!(
        got[0].contains(&format!("Subject: job {delivered}")),
        "{}",
        got[0]
    );
    assert!(got[0].contains("X-Sink-Tls: yes"), "{}", got[0]);
    assert_eq!(job_field(&redis, &delivered, "attempts"), "1");
    assert_eq!(job_field(&redis, &refused, "attempts"), ATTEMPTS);
    let error = job_field(&redis, &refused, "last_error");
    assert!(
        error.contains("550") && error.contains("mailbox refused"),
        "{error}"
    );

    // With the server down, the job fails and is retried; it is sent once the server is back.
    sink.kill();
    let later = push(&mut s, r#"{"do":"mail","to":"ops@brisk.test"}"#);
    wait_until(Duration::from_secs(10), "a failed attempt", || {
        job_field(&redis, &later, "last_error").contains("unavailable")
    });
    sink.start_again().unwrap();
    wait_until(Duration::from_secs(20), "the job done", || {
        job_field(&redis, &later, "state") == "done"
    });
    let got = sink.wait_for(2, Duration::from_secs(5)).unwrap();
    assert!(
        got[1].contains(&format!("Subject: job {later}")),
        "{}",
        got[1]
    );
    // From a handler too, with the same server.
    assert_eq!(text_round_trip(&mut s, "mail ops@brisk.test"), "sent 250");
}

/// A URL the transport refuses is quoted in the error without its password.
#[test]
fn a_refused_url_is_quoted_without_its_password() {
    let url = "smtp://mailer:s3cret-pw@127.0.0.1:1?tls=no-such-mode";
    let err = Mailer::new(url, MailOptions::default()).err();
    let Some(MailError::Config(message)) = err else {
        panic!("{err:?}")
    };
    assert!(message.contains("mailer:***@127.0.0.1:1"), "{message}");
    assert!(!message.contains("s3cret"), "{message}");
}
