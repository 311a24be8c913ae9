//! `brisk::db::Mysql` against a real MariaDB server: typed values round-trip through `$N`
//! placeholders (rewritten to `?`, in any order), pooled connections keep their session and
//! prepared statements between queries, a server that is down fails fast, and the pool is back
//! within 2 s of the server returning.

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
                back.elapsed() < Duration::from_secs(2),
                "not back within 2 s"
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
