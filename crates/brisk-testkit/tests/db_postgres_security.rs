//! `brisk::db::Postgres` logging in and encrypting: SCRAM, MD5 and cleartext passwords
//! authenticate and a wrong password says so, a Unix-socket host connects, TLS follows
//! `sslmode` and `sslrootcert` (`system` too), SCRAM binds to the TLS channel, a server that
//! misbehaves at start-up is refused, TCP keepalives follow the URL, and a refused URL is
//! quoted without its password.

use std::time::Duration;

use brisk::db::{DbError, Postgres as Pg, PostgresOptions};
use brisk_testkit::*;

mod pg_fake;
use pg_fake::*;

#[test]
fn a_wrong_password_is_unavailable_and_the_error_says_why() {
    let server = Postgres::start().unwrap();
    let url = format!("postgres://brisk:wrong@127.0.0.1:{}/brisk", server.port());
    let db = Pg::new(&url, options()).unwrap();
    let err = worker_runtime()
        .block_on(db.query("SELECT 1", vec![]))
        .unwrap_err();
    assert!(
        matches!(&err, DbError::Unavailable(m) if m.contains("28P01")),
        "{err:?}"
    );
}

#[test]
fn a_unix_socket_host_connects_with_the_local_trust_of_the_server() {
    let server = Postgres::start().unwrap();
    let url = format!(
        "host={} port={} user=brisk dbname=brisk",
        server.dir().display(),
        server.port()
    );
    let db = Pg::new(&url, options()).unwrap();
    let row = worker_runtime()
        .block_on(db.query_one("SELECT inet_server_addr() IS NULL", vec![]))
        .unwrap()
        .unwrap();
    assert!(row.get::<bool>(0).unwrap(), "connected over the socket");
}

#[test]
fn md5_and_cleartext_passwords_go_only_where_tls_was_not_declined() {
    let server = Postgres::start().unwrap();
    let port = server.port();
    let rt = worker_runtime();
    let admin = Pg::new(&server.superuser_url(), options()).unwrap();
    rt.block_on(in_transaction(
        &admin,
        "SET LOCAL password_encryption = 'md5'; \
         CREATE ROLE brisk_md5 LOGIN PASSWORD 'md5-secret'; \
         CREATE ROLE brisk_plain LOGIN PASSWORD 'plain-secret'",
    ))
    .unwrap();
    let stored = rt
        .block_on(admin.query_one(
            "SELECT rolpassword LIKE 'md5%' FROM pg_authid WHERE rolname = 'brisk_md5'",
            vec![],
        ))
        .unwrap()
        .unwrap();
    assert!(stored.get::<bool>(0).unwrap(), "an MD5 hash is stored");
    for (user, password) in [("brisk_md5", "md5-secret"), ("brisk_plain", "plain-secret")] {
        // This server takes no TLS: with the default sslmode=prefer that is what a man in the
        // middle would say too, so neither password is sent (issue 66).
        let url = format!("postgres://{user}:{password}@127.0.0.1:{port}/postgres");
        let db = Pg::new(&url, options()).unwrap();
        let err = rt.block_on(db.query("SELECT 1", vec![])).unwrap_err();
        assert!(
            matches!(&err, DbError::Unavailable(m) if m.contains("TLS was asked for") && m.contains("sslmode=disable")),
            "{user}: {err:?}"
        );
        // Plain on purpose: sent.
        let url = format!("{url}?sslmode=disable");
        let db = Pg::new(&url, options()).unwrap();
        let row = rt
            .block_on(db.query_one("SELECT current_user::text", vec![]))
            .unwrap()
            .unwrap();
        assert_eq!(row.get::<String>(0).unwrap(), user);
        let url = format!("postgres://{user}:wrong@127.0.0.1:{port}/postgres?sslmode=disable");
        let err = rt
            .block_on(Pg::new(&url, options()).unwrap().query("SELECT 1", vec![]))
            .unwrap_err();
        assert!(
            matches!(&err, DbError::Unavailable(m) if m.contains("28P01")),
            "{user}: {err:?}"
        );
    }
}

/// Whether this worker's connection to `db` is encrypted, as the server sees it.
async fn encrypted(db: &Pg) -> Result<bool, DbError> {
    let sql = "SELECT ssl::int FROM pg_stat_ssl WHERE pid = pg_backend_pid()";
    let row = db
        .query_one(sql, vec![])
        .await?
        .expect("a row of pg_stat_ssl");
    Ok(row.get::<i64>(0)? == 1)
}

#[test]
fn tls_is_asked_for_by_default_required_on_request_and_checked_against_root_certificates() {
    // A server that refuses plain TCP: every connection that works below used TLS.
    let server = Postgres::start_tls().unwrap();
    let url = server.url();
    let ca = server.ca_cert();
    let other_ca = temp_dir("other-ca");
    let other_ca_file = other_ca.path().join("ca.pem");
    let other = rcgen::generate_simple_self_signed(vec!["127.0.0.1".to_owned()]).unwrap();
    std::fs::write(&other_ca_file, other.cert.pem()).unwrap();
    // The certificate names `localhost` only.
    let by_name = url.replace("127.0.0.1", "localhost");
    let rt = worker_runtime();
    for url in [
        url.clone(),
        format!("{url}?sslmode=prefer"),
        format!("{url}?sslmode=require"),
        format!("{by_name}?sslrootcert={}", ca.display()),
        format!(
            "{by_name}?sslmode=require&sslrootcert={}&connect_timeout=5",
            ca.display()
        ),
        format!("{by_name}?sslmode=verify-full&sslrootcert={}", ca.display()),
        // verify-ca checks the chain only: 127.0.0.1 is not a name the certificate holds.
        format!("{url}?sslmode=verify-ca&sslrootcert={}", ca.display()),
    ] {
        let db = Pg::new(&url, options()).unwrap();
        assert!(rt.block_on(encrypted(&db)).unwrap(), "{url}");
    }
    // The root certificates as an option rather than in the URL.
    let verified = PostgresOptions {
        tls_root_certs: Some(ca.clone()),
        ..options()
    };
    let db = Pg::new(&by_name, verified.clone()).unwrap();
    assert!(rt.block_on(encrypted(&db)).unwrap());
    // Checked, the certificate must also name the host: not so for 127.0.0.1.
    for (url, options) in [
        (url.clone(), verified),
        (
            format!("{url}?sslmode=verify-full&sslrootcert={}", ca.display()),
            options(),
        ),
    ] {
        let db = Pg::new(&url, options).unwrap();
        let err = rt.block_on(encrypted(&db)).unwrap_err();
        assert!(
            matches!(&err, DbError::Unavailable(m) if m.contains("TLS handshake") && m.contains("name")),
            "{url}: {err:?}"
        );
    }

    // Plain TCP is refused by the server, and the error says so.
    let db = Pg::new(&format!("{url}?sslmode=disable"), options()).unwrap();
    let err = rt.block_on(encrypted(&db)).unwrap_err();
    assert!(
        matches!(&err, DbError::Unavailable(m) if m.contains("no encryption")),
        "{err:?}"
    );
    // A certificate that does not chain to the root certificates given is refused, also
    // when the host name is not checked.
    let other = other_ca_file.display();
    for url_other in [
        format!("{by_name}?sslrootcert={other}"),
        format!("{url}?sslmode=verify-ca&sslrootcert={other}"),
    ] {
        let db = Pg::new(&url_other, options()).unwrap();
        let err = rt.block_on(encrypted(&db)).unwrap_err();
        assert!(
            matches!(&err, DbError::Unavailable(m) if m.contains("TLS handshake") && m.contains("certificate")),
            "{url_other}: {err:?}"
        );
    }
    // The verify modes without root certificates are refused at once.
    for mode in ["verify-ca", "verify-full"] {
        let err = Pg::new(&format!("{url}?sslmode={mode}"), options()).err();
        assert!(
            matches!(&err, Some(DbError::Config(m)) if m.contains(&format!("sslmode={mode} needs root certificates"))),
            "{err:?}"
        );
    }
    // Root certificates that cannot be read, and root certificates with sslmode=disable, are
    // configuration errors at once.
    let missing = format!("{url}?sslrootcert=/nonexistent/ca.pem");
    let err = Pg::new(&missing, options())
        .err()
        .expect("a missing file is refused");
    assert!(
        matches!(&err, DbError::Config(m) if m.contains("/nonexistent/ca.pem")),
        "{err:?}"
    );
    let contradiction = format!("{url}?sslmode=disable&sslrootcert={}", ca.display());
    let err = Pg::new(&contradiction, options()).err().expect("refused");
    assert!(
        matches!(&err, DbError::Config(m) if m.contains("sslmode=disable")),
        "{err:?}"
    );
}

/// SCRAM bound to the TLS channel (`SCRAM-SHA-256-PLUS`, tls-server-end-point): the server
/// checks the certificate hash the client sends, so a connection that works with
/// `channel_binding=require` sent the right one. Required, every way without binding fails
/// with a reason.
#[test]
fn channel_binding_binds_scram_to_the_tls_channel_and_require_refuses_every_way_without() {
    let server = Postgres::start_tls().unwrap();
    let url = server.url();
    let rt = worker_runtime();
    for url in [
        format!("{url}?channel_binding=require"),
        format!("{url}?channel_binding=require&sslmode=require"),
        format!("{url}?channel_binding=prefer"),
        format!("{url}?channel_binding=disable"),
    ] {
        let db = Pg::new(&url, options()).unwrap();
        assert!(rt.block_on(encrypted(&db)).unwrap(), "{url}");
    }
    // A role that logs in with MD5 binds nothing.
    let admin = Pg::new(&server.superuser_url(), options()).unwrap();
    rt.block_on(in_transaction(
        &admin,
        "SET LOCAL password_encryption = 'md5'; CREATE ROLE brisk_md5 LOGIN PASSWORD 'md5-secret'",
    ))
    .unwrap();
    let port = server.port();
    let md5 = format!("postgres://brisk_md5:md5-secret@127.0.0.1:{port}/postgres");
    let db = Pg::new(&md5, options()).unwrap();
    assert!(
        rt.block_on(encrypted(&db)).unwrap(),
        "MD5 without binding required"
    );
    let db = Pg::new(&format!("{md5}?channel_binding=require"), options()).unwrap();
    let err = rt.block_on(encrypted(&db)).unwrap_err();
    assert!(
        matches!(&err, DbError::Unavailable(m) if m.contains("channel_binding=require, but the server asks for an MD5 password")),
        "{err:?}"
    );
    // Without TLS there is nothing to bind to: refused at once with sslmode=disable, and at
    // connection time when a server declines TLS.
    let err = Pg::new(
        &format!("{url}?channel_binding=require&sslmode=disable"),
        options(),
    )
    .err();
    assert!(
        matches!(&err, Some(DbError::Config(m)) if m.contains("sslmode=disable")),
        "{err:?}"
    );
    let plain = Postgres::start().unwrap();
    let db = Pg::new(
        &format!("{}?channel_binding=require", plain.url()),
        options(),
    )
    .unwrap();
    let err = rt.block_on(encrypted(&db)).unwrap_err();
    assert!(
        matches!(&err, DbError::Unavailable(m) if m.contains("channel_binding=require, but this connection is not TLS")),
        "{err:?}"
    );
}

/// A server (or a man in the middle) that says it is ready without authenticating the client
/// is refused, whatever `channel_binding` says: it has not shown it knows the password.
#[test]
fn a_server_ready_before_authenticating_us_is_refused() {
    let fake = FakePostgres::start(None, backend(b'Z', b"I"));
    let rt = worker_runtime();
    for params in ["", "?channel_binding=require&sslmode=prefer"] {
        let url = format!("postgres://u:p@127.0.0.1:{}/db{params}", fake.port);
        let db = Pg::new(&url, options()).unwrap();
        let err = rt.block_on(db.query("SELECT 1", vec![])).unwrap_err();
        assert!(
            matches!(&err, DbError::Unavailable(m) if m.contains("without authenticating us")),
            "{url}: {err:?}"
        );
    }
}

/// Over TLS with a certificate Brisk cannot hash for channel binding (Ed25519), a server that
/// offers SCRAM-SHA-256-PLUS is refused rather than answered unbound: whoever ended TLS chose
/// that certificate.
#[test]
fn a_certificate_that_cannot_be_bound_to_fails_when_binding_is_offered() {
    let key = rcgen::KeyPair::generate_for(&rcgen::PKCS_ED25519).unwrap();
    let params = rcgen::CertificateParams::new(vec!["localhost".to_owned()]).unwrap();
    let cert = params.self_signed(&key).unwrap();
    let mut offer = 10u32.to_be_bytes().to_vec();
    offer.extend_from_slice(b"SCRAM-SHA-256-PLUS\0SCRAM-SHA-256\0\0");
    let fake = FakePostgres::start(Some((cert, key)), backend(b'R', &offer));
    let url = format!("postgres://u:p@127.0.0.1:{}/db?sslmode=require", fake.port);
    let db = Pg::new(&url, options()).unwrap();
    let err = worker_runtime()
        .block_on(db.query("SELECT 1", vec![]))
        .unwrap_err();
    assert!(
        matches!(&err, DbError::Unavailable(m) if m.contains("names no hash Brisk can bind to")),
        "{err:?}"
    );
}

/// `sslrootcert=system` takes the root certificates the system has, found as OpenSSL finds
/// them. The check runs in a child process of this test binary whose `SSL_CERT_FILE` names
/// the test CA, then another CA (the environment is shared by every test in this one).
#[test]
fn sslrootcert_system_takes_the_systems_root_certificates() {
    let server = Postgres::start_tls().unwrap();
    let by_name = server.url().replace("127.0.0.1", "localhost");
    let other_ca = temp_dir("other-ca");
    let other_ca_file = other_ca.path().join("ca.pem");
    let other = rcgen::generate_simple_self_signed(vec!["localhost".to_owned()]).unwrap();
    std::fs::write(&other_ca_file, other.cert.pem()).unwrap();
    for (roots, expect) in [
        (server.ca_cert(), "encrypted"),
        (other_ca_file.clone(), "refused"),
    ] {
        let out = std::process::Command::new(std::env::current_exe().unwrap())
            .args(["--exact", "system_roots_in_a_child", "--ignored"])
            .env("SSL_CERT_FILE", &roots)
            .env_remove("SSL_CERT_DIR")
            .env("BRISK_TEST_PG_URL", format!("{by_name}?sslrootcert=system"))
            .env("BRISK_TEST_EXPECT", expect)
            .output()
            .unwrap();
        let said = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(out.status.success(), "{expect}: {said}");
        assert!(
            said.contains("1 passed"),
            "{expect}: the child ran no test: {said}"
        );
    }
    // verify-ca with the system's roots is refused at once, as libpq does.
    let url = format!("{by_name}?sslmode=verify-ca&sslrootcert=system");
    let err = Pg::new(&url, options()).err();
    assert!(
        matches!(&err, Some(DbError::Config(m)) if m.contains("use verify-full")),
        "{err:?}"
    );
}

/// The child of `sslrootcert_system_takes_the_systems_root_certificates`.
#[test]
#[ignore = "run by sslrootcert_system_takes_the_systems_root_certificates, SSL_CERT_FILE set"]
fn system_roots_in_a_child() {
    let var = |name| std::env::var(name).unwrap_or_else(|_| panic!("{name} is not set"));
    let (url, expect) = (var("BRISK_TEST_PG_URL"), var("BRISK_TEST_EXPECT"));
    let db = Pg::new(&url, options()).unwrap();
    let answer = worker_runtime().block_on(encrypted(&db));
    match expect.as_str() {
        "encrypted" => assert!(answer.unwrap(), "{url}"),
        "refused" => assert!(
            matches!(&answer, Err(DbError::Unavailable(m)) if m.contains("TLS handshake") && m.contains("certificate")),
            "{url}: {answer:?}"
        ),
        other => panic!("BRISK_TEST_EXPECT={other}: encrypted or refused"),
    }
}

#[test]
fn without_tls_on_the_server_prefer_falls_back_to_plain_and_require_says_why_it_fails() {
    let server = Postgres::start().unwrap();
    let url = server.url();
    let rt = worker_runtime();
    for url in [url.clone(), format!("{url}?sslmode=disable")] {
        let db = Pg::new(&url, options()).unwrap();
        assert!(!rt.block_on(encrypted(&db)).unwrap(), "{url}");
    }
    let ca = temp_dir("ca");
    let ca_file = ca.path().join("ca.pem");
    let cert = rcgen::generate_simple_self_signed(vec!["127.0.0.1".to_owned()]).unwrap();
    std::fs::write(&ca_file, cert.cert.pem()).unwrap();
    for url in [
        format!("{url}?sslmode=require"),
        format!("{url}?sslrootcert={}", ca_file.display()),
        format!("{url}?sslmode=verify-ca&sslrootcert={}", ca_file.display()),
    ] {
        let db = Pg::new(&url, options()).unwrap();
        let err = rt.block_on(encrypted(&db)).unwrap_err();
        assert!(
            matches!(&err, DbError::Unavailable(m) if m.contains("does not accept TLS")),
            "{url}: {err:?}"
        );
    }
}

#[test]
fn with_prefer_a_tls_handshake_that_fails_falls_back_to_plain_and_with_require_it_fails() {
    let server = Postgres::start_tls_too_old().unwrap();
    let url = server.url();
    let rt = worker_runtime();
    let db = Pg::new(&url, options()).unwrap();
    assert!(
        !rt.block_on(encrypted(&db)).unwrap(),
        "plain after the failed handshake"
    );
    let db = Pg::new(&format!("{url}?sslmode=require"), options()).unwrap();
    let err = rt.block_on(encrypted(&db)).unwrap_err();
    assert!(
        matches!(&err, DbError::Unavailable(m) if m.contains("TLS handshake")),
        "{err:?}"
    );
}

/// The keepalive timer of the local TCP socket bound to 127.0.0.1:`port`, from
/// `/proc/net/tcp`: `Some(ticks left)` when the timer running is the keepalive one.
fn keepalive_timer(port: u16) -> Option<u64> {
    let table = std::fs::read_to_string("/proc/net/tcp").unwrap();
    let local = format!("0100007F:{port:04X}");
    table.lines().skip(1).find_map(|line| {
        let fields: Vec<&str> = line.split_whitespace().collect();
        if fields.get(1) != Some(&local.as_str()) {
            return None;
        }
        let (kind, when) = fields.get(5)?.split_once(':')?;
        (kind == "02").then(|| u64::from_str_radix(when, 16).ok())?
    })
}

#[test]
fn tcp_keepalives_are_on_as_the_url_says() {
    let server = Postgres::start().unwrap();
    let rt = worker_runtime();
    let client_port = |db: &Pg| -> u16 {
        let sql = "SELECT client_port FROM pg_stat_activity WHERE pid = pg_backend_pid()";
        let row = rt.block_on(db.query_one(sql, vec![])).unwrap().unwrap();
        row.get::<i64>(0).unwrap() as u16
    };
    // keepalives_idle=7: the idle connection's keepalive timer runs, due within 7 s (the
    // table counts in hundredths of a second).
    let url = format!("{}?keepalives_idle=7", server.url());
    let db = Pg::new(&url, options()).unwrap();
    let port = client_port(&db);
    let left = wait_for(Duration::from_secs(5), "a keepalive timer", || {
        keepalive_timer(port)
    });
    assert!(left <= 700, "{left} hundredths of a second left");
    // keepalives=0: no keepalive timer (one is armed as soon as the option is set, so the
    // connection above had its timer when the query came back).
    let url = format!("{}?keepalives=0", server.url());
    let db = Pg::new(&url, options()).unwrap();
    let port = client_port(&db);
    assert_eq!(keepalive_timer(port), None);
}

/// A URL the client refuses is quoted in the error without its password.
#[test]
fn a_refused_url_is_quoted_without_its_password() {
    let url =
        "postgres://brisk:s3cret-pw@127.0.0.1:1/app?password=s3cret-too&channel_binding=require&sslmode=disable";
    let err = Pg::new(url, PostgresOptions::default()).err();
    let Some(DbError::Config(message)) = err else {
        panic!("{err:?}")
    };
    assert!(message.contains("channel_binding"), "{message}");
    assert!(message.contains("brisk:***@127.0.0.1:1"), "{message}");
    assert!(!message.contains("s3cret"), "{message}");
    // The same as libpq's key=value words.
    let words = "host=127.0.0.1 port=1 user=brisk password='s3cret pw' channel_binding=require \
                 sslmode=disable";
    let err = Pg::new(words, PostgresOptions::default()).err();
    let Some(DbError::Config(message)) = err else {
        panic!("{err:?}")
    };
    assert!(
        message.contains("password=*** channel_binding"),
        "{message}"
    );
    assert!(!message.contains("s3cret"), "{message}");
}
