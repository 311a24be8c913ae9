//! `brisk::db::Mysql` against a real MariaDB server: typed values round-trip through `$N`
//! placeholders (rewritten to `?`, in any order), pooled connections keep their session and
//! prepared statements between queries, a server that is down fails fast, the pool is back
//! within 5 s of the server returning, and TLS is used and checked as asked.

use std::time::{Duration, Instant};

use brisk::db::{DbError, Mysql, MysqlOptions};
use brisk_testkit::*;

#[test]
fn typed_values_round_trip_through_numbered_placeholders() {
    let server = MariaDb::start().unwrap();
    let db = Mysql::new(&server.url(), MysqlOptions::default()).unwrap();
    worker_runtime().block_on(async {
        db.execute_batch(
            "CREATE TABLE t (id INT PRIMARY KEY, name VARCHAR(20) CHARACTER SET utf8mb4, \
             score DOUBLE, raw VARBINARY(8), missing INT)",
        )
        .await
        .unwrap();
        // Parameters numbered out of order, one used twice.
        let n = db
            .execute(
                "INSERT INTO t (score, id, name, raw, missing) VALUES ($3, $1, $2, $4, NULL)",
                vec![
                    7.into(),
                    "séptimo".into(),
                    7.5.into(),
                    vec![0u8, 255].into(),
                ],
            )
            .await
            .unwrap();
        assert_eq!(n, 1);
        let row = db
            .query_one(
                "SELECT id, name, score, raw, missing FROM t WHERE id = $1 AND id < $1 + 1",
                vec![7.into()],
            )
            .await
            .unwrap()
            .expect("a row");
        assert_eq!(row.get::<i64>(0).unwrap(), 7);
        assert_eq!(row.by_name::<String>("name").unwrap(), "séptimo");
        assert_eq!(row.get::<f64>(2).unwrap(), 7.5);
        assert_eq!(row.get::<Vec<u8>>(3).unwrap(), vec![0, 255]);
        assert_eq!(row.get::<Option<i32>>(4).unwrap(), None);
        assert!(db
            .query_one("SELECT 1 FROM t WHERE id = $1", vec![8.into()])
            .await
            .unwrap()
            .is_none());
        let err = db.query("SELEC nonsense", vec![]).await.unwrap_err();
        assert!(matches!(err, DbError::Query(_)), "{err:?}");
    });
}

#[test]
fn a_server_that_is_down_fails_fast_and_the_pool_is_back_when_it_returns() {
    let mut server = MariaDb::start().unwrap();
    let db = Mysql::new(&server.url(), MysqlOptions::default()).unwrap();
    let rt = worker_runtime();
    rt.block_on(async { assert!(db.query_one("SELECT 1", vec![]).await.unwrap().is_some()) });
    server.kill();
    each_fails_within(
        &rt,
        10,
        Duration::from_millis(500),
        || db.query("SELECT 1", vec![]),
        |err| assert_eq!(err.http_status(), 503, "{err:?}"),
    );
    server.start_again().unwrap();
    rt.block_on(async {
        let back = Instant::now();
        while db.query("SELECT 1", vec![]).await.is_err() {
            assert!(
                back.elapsed() < Duration::from_secs(5),
                "not back within 5 s (the backoff is at most 1 s)"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    });
}

/// A global status counter of the server (read over a connection of its own).
fn status(server: &MariaDb, name: &str) -> u64 {
    let out = server
        .sql(&format!("SHOW GLOBAL STATUS LIKE '{name}'"))
        .unwrap();
    out.split_whitespace().nth(1).unwrap().parse().unwrap()
}

#[test]
fn pooled_connections_stay_open_and_keep_their_prepared_statements() {
    let server = MariaDb::start().unwrap();
    let options = MysqlOptions {
        pool_size: 3,
        ..MysqlOptions::default()
    };
    let db = Mysql::new(&server.url(), options).unwrap();
    let rt = worker_runtime();
    // Bursts of 6 queries at once on 3 connections, with idle pauses between them.
    let bursts = |rounds: std::ops::Range<i64>| {
        rt.block_on(async {
            for round in rounds {
                let queries =
                    (0..6).map(|i| db.query_one("SELECT $1 + 1", vec![(round * 6 + i).into()]));
                let rows = futures_util::future::join_all(queries).await;
                for (i, row) in rows.into_iter().enumerate() {
                    let row = row.unwrap().unwrap();
                    assert_eq!(row.get::<i64>(0).unwrap(), round * 6 + i as i64 + 1);
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        })
    };
    bursts(0..1);
    let (connections, prepares) = (
        status(&server, "Connections"),
        status(&server, "Com_stmt_prepare"),
    );
    bursts(1..20);
    // 114 more queries: no new connection (the two status reads after the first open one
    // each) and no statement prepared again.
    let opened = status(&server, "Connections") - connections - 2;
    let prepared = status(&server, "Com_stmt_prepare") - prepares;
    assert_eq!(
        (opened, prepared),
        (0, 0),
        "connections opened, statements prepared"
    );
}

/// A URL the client refuses is quoted in the error without its password.
#[test]
fn a_refused_url_is_quoted_without_its_password() {
    let url = "mysql://brisk:s3cret-pw@127.0.0.1:1/app?no_such_parameter=1";
    let err = Mysql::new(url, MysqlOptions::default()).err();
    let Some(DbError::Config(message)) = err else {
        panic!("{err:?}")
    };
    assert!(message.contains("brisk:***@127.0.0.1:1"), "{message}");
    assert!(!message.contains("s3cret"), "{message}");
}

/// The cipher of this connection's session, as the server sees it (empty when plain).
async fn cipher(db: &Mysql) -> Result<String, DbError> {
    let row = db
        .query_one("SHOW SESSION STATUS LIKE 'Ssl_cipher'", vec![])
        .await?
        .expect("a row of Ssl_cipher");
    row.get::<String>(1)
}

#[test]
fn tls_is_used_when_asked_for_and_the_certificate_checked_against_root_certificates() {
    // A server that refuses plain TCP: every connection that works below used TLS.
    let server = MariaDb::start_tls().unwrap();
    // Over TCP only, so that the refusal of plain TCP below is not met on the Unix socket
    // (with TLS asked for, Brisk stays on TCP by itself).
    let url = format!("{}?prefer_socket=false", server.url());
    let by_name = url.replace("127.0.0.1", "localhost");
    let verified = MysqlOptions {
        tls_root_certs: Some(server.ca_cert()),
        ..MysqlOptions::default()
    };
    let rt = worker_runtime();
    for (url, options) in [
        // Encrypted, the certificate not checked.
        (
            format!("{url}&require_ssl=true&verify_ca=false"),
            MysqlOptions::default(),
        ),
        // Checked against the CA, by the name the certificate holds.
        (by_name.clone(), verified.clone()),
    ] {
        let db = Mysql::new(&url, options).unwrap();
        let cipher = rt.block_on(cipher(&db)).unwrap();
        assert!(!cipher.is_empty(), "{url}: no cipher");
    }
    // Plain TCP is refused by the server (MariaDB 10.11 answers it as a denied login).
    let db = Mysql::new(&url, MysqlOptions::default()).unwrap();
    let err = rt.block_on(cipher(&db)).unwrap_err();
    assert!(
        matches!(&err, DbError::Unavailable(m) if m.contains("secure_transport") || m.contains("Access denied")),
        "{err:?}"
    );
    // Checked, the certificate must name the host (not 127.0.0.1), and chain to the CA given
    // (not the Mozilla roots, nor another CA).
    let other_ca = temp_dir("other-ca");
    let other_ca_file = other_ca.path().join("ca.pem");
    let other = rcgen::generate_simple_self_signed(vec!["localhost".to_owned()]).unwrap();
    std::fs::write(&other_ca_file, other.cert.pem()).unwrap();
    let elsewhere = MysqlOptions {
        tls_root_certs: Some(other_ca_file),
        ..MysqlOptions::default()
    };
    for (url, options) in [
        (url.clone(), verified),
        (by_name.clone(), elsewhere),
        (
            format!("{by_name}&require_ssl=true"),
            MysqlOptions::default(),
        ),
    ] {
        let db = Mysql::new(&url, options).unwrap();
        let err = rt.block_on(cipher(&db)).unwrap_err();
        assert!(
            matches!(&err, DbError::Unavailable(m) if m.to_lowercase().contains("certificate")),
            "{url}: {err:?}"
        );
    }
    // Root certificates that cannot be read are a configuration error at once.
    let missing = MysqlOptions {
        tls_root_certs: Some("/nonexistent/ca.pem".into()),
        ..MysqlOptions::default()
    };
    let err = Mysql::new(&url, missing).err();
    assert!(
        matches!(&err, Some(DbError::Config(m)) if m.contains("/nonexistent/ca.pem")),
        "{err:?}"
    );
}

/// A refused login (wrong password, a database the user may not use) leaves the database unavailable: 503,
/// with the server's reason, as with PostgreSQL.
#[test]
fn a_refused_login_is_unavailable_and_says_why() {
    let server = MariaDb::start().unwrap();
    let rt = worker_runtime();
    for (url, why) in [
        (server.url().replace(":brisk@", ":wrong@"), "Access denied"),
        (
            format!("{}_missing", server.url()),
            "to database 'brisk_missing'",
        ),
    ] {
        let db = Mysql::new(&url, MysqlOptions::default()).unwrap();
        let err = rt.block_on(db.query("SELECT 1", vec![])).unwrap_err();
        assert!(
            matches!(&err, DbError::Unavailable(m) if m.contains(why)),
            "{url}: {err:?}"
        );
        assert_eq!(err.http_status(), 503);
    }
}
