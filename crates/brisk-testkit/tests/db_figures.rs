//! The database figures a worker reports (`brisk::stats::DbFigures`, `brisk_db_*` on
//! `/metrics`) against a real PostgreSQL server: connections open and busy, a wait for a place
//! in a full pool, an acquire timeout and a query timeout, each counted once. One test in its
//! own binary: the figures are the process's, and no other test's pool may add to them.
//! SQLite's shared connection is counted too, and MariaDB's pool (the gauges mysql_async
//! keeps).

use std::time::Duration;

use brisk::db::{
    Db, DbError, Mysql, MysqlOptions, Postgres as Pg, PostgresOptions, Sqlite, SqliteOptions,
};
use brisk::stats::DbFigures;
use brisk_testkit::*;

#[test]
fn connections_waits_and_timeouts_are_counted() {
    let server = Postgres::start().unwrap();
    let options = PostgresOptions {
        pool_size: 1,
        max_pipeline: 1,
        acquire_timeout: Duration::from_millis(200),
        query_timeout: Duration::from_millis(400),
        ..Default::default()
    };
    let db = Pg::new(&server.url(), options).unwrap();
    assert_eq!(DbFigures::current(), DbFigures::default());
    worker_runtime().block_on(async {
        db.connect().await.unwrap();
        let idle = DbFigures {
            connections_open: 1,
            ..DbFigures::default()
        };
        assert_eq!(DbFigures::current(), idle);

        // One query holds the only place until the server ends it at the query timeout;
        // another waits for the place past the acquire timeout.
        let slow = db.query("SELECT pg_sleep(5)", vec![]);
        let second = async {
            tokio::time::sleep(Duration::from_millis(50)).await;
            let during = DbFigures::current();
            (during, db.query("SELECT 1", vec![]).await)
        };
        let (slow, (during, second)) = tokio::join!(slow, second);
        assert_eq!((during.connections_open, during.connections_busy), (1, 1));
        assert!(matches!(slow, Err(DbError::Timeout(_))), "{slow:?}");
        assert!(matches!(second, Err(DbError::PoolTimeout(_))), "{second:?}");
        let after = DbFigures::current();
        assert_eq!(after.waits, 1, "{after:?}");
        assert_eq!(after.acquire_timeouts, 1, "{after:?}");
        assert_eq!(after.query_timeouts, 1, "{after:?}");
        assert_eq!(after.connections_busy, 0, "{after:?}");

        // A transaction's connection is busy while it runs, then idle in the pool.
        let mut tx = Db::Postgres(db.clone()).begin().await.unwrap();
        tx.execute_batch("SELECT 1").await.unwrap();
        let in_tx = DbFigures::current();
        assert_eq!((in_tx.connections_open, in_tx.connections_busy), (2, 1));
        tx.commit().await.unwrap();
        let done = DbFigures::current();
        assert_eq!((done.connections_open, done.connections_busy), (2, 0));
        assert_eq!(done.waits, 1, "a place free at once is no wait: {done:?}");

        // SQLite: its one shared connection is open once used, busy while a call runs; a
        // call past the query timeout is counted too. The timeout leaves room for the file's
        // first write, which a loaded CI disk once took over 300 ms to sync.
        let dir = temp_dir("db-figures");
        let options = SqliteOptions {
            query_timeout: Duration::from_millis(2000),
            ..Default::default()
        };
        let lite = Sqlite::new(dir.path().join("f.sqlite"), options);
        lite.execute("CREATE TABLE t (x INTEGER)", vec![])
            .await
            .unwrap();
        let used = DbFigures::current();
        assert_eq!((used.connections_open, used.connections_busy), (3, 0));
        let long = lite.call(|_| {
            std::thread::sleep(Duration::from_millis(200));
            Ok(())
        });
        let during = async {
            tokio::time::sleep(Duration::from_millis(50)).await;
            DbFigures::current()
        };
        let (long, during) = tokio::join!(long, during);
        long.unwrap();
        assert_eq!((during.connections_open, during.connections_busy), (3, 1));
        // A query the interrupt ends (a recursive CTE that would run for ever).
        let forever = "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) \
                       SELECT count(*) FROM c";
        let err = lite.query(forever, vec![]).await.unwrap_err();
        assert!(matches!(err, DbError::Timeout(_)), "{err:?}");
        let last = DbFigures::current();
        assert_eq!(last.query_timeouts, 2, "{last:?}");
        // The interrupted statement ends on its thread a moment after its caller gave up.
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while DbFigures::current().connections_busy > 0 && std::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let idle = DbFigures::current();
        assert_eq!((idle.connections_open, idle.connections_busy), (3, 0));

        // MariaDB: a pool of one; a query finds it busy and waits for it.
        let maria = MariaDb::start().unwrap();
        let options = MysqlOptions {
            pool_size: 1,
            ..Default::default()
        };
        let my = Mysql::new(&maria.url(), options).unwrap();
        my.query("SELECT 1", vec![]).await.unwrap();
        let opened = DbFigures::current();
        assert_eq!(opened.connections_open, 4, "{opened:?}");
        let long = my.query("SELECT SLEEP(0.5)", vec![]);
        let second = async {
            // Once the first holds the connection.
            let deadline = std::time::Instant::now() + Duration::from_secs(5);
            while DbFigures::current().connections_busy == 0 && std::time::Instant::now() < deadline
            {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            let during = DbFigures::current();
            (during, my.query("SELECT 2", vec![]).await)
        };
        let (long, (during, second)) = tokio::join!(long, second);
        long.unwrap();
        second.unwrap();
        assert_eq!((during.connections_open, during.connections_busy), (4, 1));
        let after = DbFigures::current();
        assert_eq!(after.waits, 2, "the pool of one was busy: {after:?}");
        // The connection goes back to the pool a moment after its query.
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while DbFigures::current().connections_busy > 0 && std::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let back = DbFigures::current();
        assert_eq!((back.connections_open, back.connections_busy), (4, 0));
    });
}
