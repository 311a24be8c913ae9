//! `brisk::db::Postgres` against a real PostgreSQL server: queries pipeline on one
//! connection, statements are prepared once per connection, a slow query times out and is
//! cancelled on the server, a full pipeline waits then fails with a pool timeout, a database
//! that is down fails fast and comes back, a multi-host URL lands on the read-write host, a batch
//! is one transaction answered in order, columns decode, SCRAM, MD5 and cleartext passwords
//! authenticate, a wrong password says so, a Unix-socket host connects, TLS follows `sslmode`
//! and `sslrootcert` (`system` too), and TCP keepalives follow the URL.

use std::time::{Duration, Instant};

use brisk::db::{DbError, Postgres as Pg, PostgresOptions, Value};
use brisk_testkit::*;

/// Runs `sql` (statements separated by `;`) in one transaction on `db`.
async fn in_transaction(db: &Pg, sql: &str) -> Result<(), DbError> {
    let mut tx = brisk::db::Db::Postgres(db.clone()).begin().await?;
    tx.execute_batch(sql).await?;
    tx.commit().await
}

fn options() -> PostgresOptions {
    PostgresOptions {
        query_timeout: Duration::from_secs(5),
        ..Default::default()
    }
}

#[test]
fn concurrent_queries_pipeline_on_one_connection_with_statements_prepared_once() {
    let server = Postgres::start().unwrap();
    let db = Pg::new(&server.url(), options()).unwrap();
    worker_runtime().block_on(async {
        let sql = "SELECT $1::int + 1, pg_backend_pid()";
        let queries = (0..200).map(|i| db.query_one(sql, vec![i.into()]));
        let rows = futures_util::future::try_join_all(queries).await.unwrap();
        let mut backends: Vec<i64> = Vec::new();
        for (i, row) in rows.iter().enumerate() {
            let row = row.as_ref().unwrap();
            assert_eq!(row.get::<i64>(0).unwrap(), i as i64 + 1);
            backends.push(row.get(1).unwrap());
        }
        backends.dedup();
        assert_eq!(
            backends.len(),
            1,
            "one connection served all 200: {backends:?}"
        );
        // The statement was prepared once on that connection.
        let prepared = db
            .query_one(
                "SELECT count(*) FROM pg_prepared_statements WHERE statement = $1",
                vec![sql.into()],
            )
            .await
            .unwrap()
            .unwrap();
        assert_eq!(prepared.get::<i64>(0).unwrap(), 1);
    });
}

/// A PostgreSQL server and a pool on it with `timeout` as the query timeout.
fn with_query_timeout(timeout: Duration) -> (Postgres, Pg) {
    let server = Postgres::start().unwrap();
    let options = PostgresOptions {
        query_timeout: timeout,
        ..options()
    };
    let db = Pg::new(&server.url(), options).unwrap();
    (server, db)
}

#[test]
fn a_slow_query_times_out_and_is_cancelled_on_the_server() {
    let (_server, db) = with_query_timeout(Duration::from_millis(300));
    worker_runtime().block_on(async {
        let t = Instant::now();
        let err = db.query("SELECT pg_sleep(30)", vec![]).await.unwrap_err();
        assert!(matches!(err, DbError::Timeout(_)), "{err:?}");
        assert_eq!(err.http_status(), 504);
        assert!(t.elapsed() < Duration::from_secs(2), "{:?}", t.elapsed());
        // Cancelled on the server: the connection answers the next query at once.
        let t = Instant::now();
        assert!(db.query_one("SELECT 1", vec![]).await.unwrap().is_some());
        assert!(t.elapsed() < Duration::from_secs(2), "{:?}", t.elapsed());
    });
}

/// Sends `signal` (`STOP`, `CONT`) to process `pid`.
fn signal(pid: i32, signal: &str) {
    let status = std::process::Command::new("kill")
        .args([&format!("-{signal}"), &pid.to_string()])
        .status()
        .unwrap();
    assert!(status.success(), "kill -{signal} {pid}");
}

/// A PostgreSQL backend stopped with SIGSTOP, continued when dropped (a failing test too).
struct Stopped(i32);

impl Drop for Stopped {
    fn drop(&mut self) {
        signal(self.0, "CONT");
    }
}

#[test]
fn a_server_that_stops_answering_fails_the_query_after_the_timeout_and_a_grace() {
    let (_server, db) = with_query_timeout(Duration::from_millis(300));
    worker_runtime().block_on(async {
        let backend: i32 = db
            .query_one("SELECT pg_backend_pid()", vec![])
            .await
            .unwrap()
            .unwrap()
            .get(0)
            .unwrap();
        // Prepared now: the flood below is about queries, not about preparing statements.
        let flooding = "SELECT length($1)";
        db.query(flooding, vec!["x".into()]).await.unwrap();
        // The statement timeout cannot end anything: the backend runs nothing at all.
        let stopped = Stopped(backend);
        signal(backend, "STOP");
        let t = Instant::now();
        let err = db.query("SELECT 1", vec![]).await.unwrap_err();
        let waited = t.elapsed();
        assert!(matches!(err, DbError::Timeout(_)), "{err:?}");
        assert!(
            waited >= Duration::from_millis(550) && waited < Duration::from_secs(5),
            "the timeout (300 ms) and its grace (300 ms): {waited:?}"
        );
        // More than the socket buffers and the driver's 1 MiB of output hold: the requests
        // that cannot be written yet time out too, none waits for the server to come back.
        let big = "x".repeat(256 * 1024);
        let flood = (0..40).map(|_| db.query(flooding, vec![big.as_str().into()]));
        let all = tokio::time::timeout(
            Duration::from_secs(20),
            futures_util::future::join_all(flood),
        )
        .await
        .expect("every query of the flood ends while the server is stopped");
        for outcome in all {
            let err = outcome.unwrap_err();
            assert!(matches!(err, DbError::Timeout(_)), "{err:?}");
        }
        // Once it answers again, the late answer goes nowhere and the next query gets its own.
        drop(stopped);
        let row = db
            .query_one("SELECT $1::int * 2", vec![21.into()])
            .await
            .unwrap()
            .unwrap();
        assert_eq!(row.get::<i32>(0).unwrap(), 42);
    });
}

#[test]
fn a_full_pipeline_waits_for_a_place_then_fails_with_a_pool_timeout() {
    let server = Postgres::start().unwrap();
    let options = PostgresOptions {
        max_pipeline: 1,
        acquire_timeout: Duration::from_millis(200),
        ..options()
    };
    let db = Pg::new(&server.url(), options).unwrap();
    worker_runtime().block_on(async {
        db.connect().await.unwrap();
        // join! polls its futures in order on the worker's one thread: the slow query takes
        // the only place at its first poll, before the second asks for one.
        let slow = db.query("SELECT pg_sleep(1)", vec![]);
        let waiting = db.query("SELECT 1", vec![]);
        let (slow, waiting) = tokio::join!(slow, waiting);
        assert!(slow.is_ok(), "{slow:?}");
        let err = waiting.unwrap_err();
        assert!(matches!(err, DbError::PoolTimeout(_)), "{err:?}");
        assert_eq!(err.http_status(), 503);
        // A place that frees in time is taken.
        let db2 = db.clone();
        let (a, b) = tokio::join!(
            db.query("SELECT pg_sleep(0.05)", vec![]),
            db2.query("SELECT 2", vec![])
        );
        assert!(a.is_ok() && b.is_ok(), "{a:?} {b:?}");
    });
}

#[test]
fn queries_waiting_for_a_place_get_it_in_the_order_they_came() {
    let server = Postgres::start().unwrap();
    let options = PostgresOptions {
        max_pipeline: 1,
        ..options()
    };
    let db = Pg::new(&server.url(), options).unwrap();
    worker_runtime().block_on(async {
        db.connect().await.unwrap();
        let order = std::cell::RefCell::new(Vec::new());
        // The first holds the only place; the others queue behind it in the order 1..=5 (join
        // and join_all poll them first in that order, on the worker's one thread), and each
        // records when it gets its answer (one place: one at a time).
        let holder = db.query("SELECT pg_sleep(0.2)", vec![]);
        let waiters = (1..=5).map(|i| {
            let (db, order) = (db.clone(), &order);
            async move {
                db.query("SELECT $1::int", vec![(i as i64).into()])
                    .await
                    .unwrap();
                order.borrow_mut().push(i);
            }
        });
        let (held, _) = tokio::join!(holder, futures_util::future::join_all(waiters));
        assert!(held.is_ok(), "{held:?}");
        assert_eq!(*order.borrow(), [1, 2, 3, 4, 5]);
    });
}

#[test]
fn a_database_that_is_down_fails_fast_and_the_pool_reconnects_when_it_returns() {
    let mut server = Postgres::start().unwrap();
    let db = Pg::new(&server.url(), options()).unwrap();
    let rt = worker_runtime();
    rt.block_on(async { db.connect().await.unwrap() });
    server.kill();
    each_fails_within(
        &rt,
        20,
        Duration::from_millis(300),
        || db.query("SELECT 1", vec![]),
        |err| assert!(matches!(err, DbError::Unavailable(_)), "{err:?}"),
    );
    server.start_again().unwrap();
    let back = Instant::now();
    rt.block_on(async {
        loop {
            if db.query("SELECT 1", vec![]).await.is_ok() {
                break;
            }
            assert!(
                back.elapsed() < Duration::from_secs(5),
                "not back within 5 s (the backoff is at most 1 s)"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    });
}

#[test]
fn a_multi_host_url_lands_on_the_read_write_host_and_moves_when_it_goes() {
    let standby = Postgres::start().unwrap();
    standby
        .sql("ALTER SYSTEM SET default_transaction_read_only = on")
        .unwrap();
    standby.sql("SELECT pg_reload_conf()").unwrap();
    let mut primary = Postgres::start().unwrap();
    let url = format!(
        "postgres://brisk:brisk@127.0.0.1:{},127.0.0.1:{}/brisk?target_session_attrs=read-write",
        standby.port(),
        primary.port()
    );
    let db = Pg::new(&url, options()).unwrap();
    // One runtime for the pool's life, as in a worker; polls run inside it, so the pool's
    // reconnecting task runs between them.
    let rt = worker_runtime();
    let wait_for_port = |db: &Pg, port: u16, what: &str| {
        let db = db.clone();
        let what = what.to_string();
        rt.block_on(async move {
            let deadline = Instant::now() + Duration::from_secs(5);
            loop {
                let now = db.query_one("SELECT current_setting('port')", vec![]).await;
                if let Ok(Some(row)) = &now {
                    if row.get::<String>(0).unwrap() == port.to_string() {
                        return;
                    }
                }
                assert!(Instant::now() < deadline, "{what}: last answer {now:?}");
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
    };
    // The read-only host is skipped.
    wait_for_port(
        &db,
        primary.port(),
        "the pool connects to the read-write host",
    );
    // The primary goes; the old standby is promoted (made writable): the pool moves to it.
    primary.kill();
    standby
        .sql("ALTER SYSTEM SET default_transaction_read_only = off")
        .unwrap();
    standby.sql("SELECT pg_reload_conf()").unwrap();
    wait_for_port(&db, standby.port(), "the pool moves to the new primary");
}

#[test]
fn a_batch_is_one_transaction_answered_in_order_and_a_failing_query_fails_only_its_batch() {
    let server = Postgres::start().unwrap();
    let db = Pg::new(&server.url(), options()).unwrap();
    worker_runtime().block_on(async {
        let sql = "SELECT $1::int * 2, txid_current()";
        let lists: Vec<Vec<Value>> = (0..20).map(|i| vec![i.into()]).collect();
        let runs = db.query_each(sql, lists.clone()).await.unwrap();
        assert_eq!(runs.len(), 20);
        let mut transactions: Vec<i64> = Vec::new();
        for (i, rows) in runs.iter().enumerate() {
            assert_eq!(rows.len(), 1);
            assert_eq!(rows[0].get::<i64>(0).unwrap(), 2 * i as i64);
            transactions.push(rows[0].get(1).unwrap());
        }
        transactions.dedup();
        assert_eq!(transactions.len(), 1, "one transaction: {transactions:?}");
        // A second batch is a transaction of its own.
        let again = db.query_each(sql, lists).await.unwrap();
        assert_ne!(again[0][0].get::<i64>(1).unwrap(), transactions[0]);

        // 10 / 0 in the middle fails the batch with the server's error...
        let lists: Vec<Vec<Value>> = [5, 2, 0, 1].map(|d| vec![d.into()]).to_vec();
        let err = db
            .query_each("SELECT 10 / $1::int", lists)
            .await
            .unwrap_err();
        assert!(err.code() == Some("22012"), "{err:?}");
        // ...and the connection goes on answering in step.
        let lists: Vec<Vec<Value>> = [5, 2].map(|d| vec![d.into()]).to_vec();
        let runs = db.query_each("SELECT 10 / $1::int", lists).await.unwrap();
        let quotients: Vec<i64> = runs.iter().map(|r| r[0].get(0).unwrap()).collect();
        assert_eq!(quotients, [2, 5]);
        assert!(db.query_each(sql, vec![]).await.unwrap().is_empty());
        let err = db.query_each(sql, vec![vec![]]).await.unwrap_err();
        assert!(
            matches!(&err, DbError::Refused(m) if m.contains("takes 1 parameters, 0 given")),
            "{err:?}"
        );
    });
}

/// `query_pipelined`: every run ends in a `Sync` of its own (TechEmpower's rule for every
/// query), so each is a transaction of its own and fails alone, the runs behind a failing
/// one still run, and all are answered in order; a statement reshaped under them is
/// prepared again and the runs it failed run once more.
#[test]
fn pipelined_runs_are_each_a_transaction_of_their_own_and_fail_alone() {
    let server = Postgres::start().unwrap();
    let db = Pg::new(&server.url(), options()).unwrap();
    worker_runtime().block_on(async {
        let sql = "SELECT $1::int * 2, txid_current()";
        let lists: Vec<Vec<Value>> = (0..20).map(|i| vec![i.into()]).collect();
        let runs = db.query_pipelined(sql, lists).await.unwrap();
        assert_eq!(runs.len(), 20);
        let mut transactions: Vec<i64> = Vec::new();
        for (i, run) in runs.iter().enumerate() {
            let rows = run.as_ref().unwrap();
            assert_eq!(rows.len(), 1);
            assert_eq!(rows[0].get::<i64>(0).unwrap(), 2 * i as i64);
            transactions.push(rows[0].get(1).unwrap());
        }
        transactions.sort_unstable();
        transactions.dedup();
        assert_eq!(
            transactions.len(),
            20,
            "a transaction each: {transactions:?}"
        );

        // 10 / 0 fails its run alone; the runs behind it run.
        let lists: Vec<Vec<Value>> = [5, 2, 0, 1, 0].map(|d| vec![d.into()]).to_vec();
        let runs = db
            .query_pipelined("SELECT 10 / $1::int", lists)
            .await
            .unwrap();
        let quotients: Vec<Option<i64>> = runs
            .iter()
            .map(|r| r.as_ref().ok().map(|rows| rows[0].get(0).unwrap()))
            .collect();
        assert_eq!(quotients, [Some(2), Some(5), None, Some(10), None]);
        for failed in [&runs[2], &runs[4]] {
            let err = failed.as_ref().unwrap_err();
            assert_eq!(err.code(), Some("22012"), "{err:?}");
        }

        // A statement whose result changes shape under it is prepared again.
        db.execute_batch("CREATE TABLE shape (a int); INSERT INTO shape VALUES (1), (2)")
            .await
            .unwrap();
        let sql = "SELECT * FROM shape WHERE a >= $1 ORDER BY a";
        let lists = || [1, 2].map(|a| vec![a.into()]).to_vec();
        let runs = db.query_pipelined(sql, lists()).await.unwrap();
        assert_eq!(runs[0].as_ref().unwrap()[0].values().len(), 1);
        db.execute_batch("ALTER TABLE shape ADD COLUMN b text DEFAULT 'x'")
            .await
            .unwrap();
        let runs = db.query_pipelined(sql, lists()).await.unwrap();
        for (run, rows) in runs.iter().zip([2, 1]) {
            let run = run.as_ref().unwrap();
            assert_eq!(run.len(), rows);
            assert_eq!(run[0].get::<String>(1).unwrap(), "x");
        }

        // Read in place, the same: a reshape under the statement prepares it again.
        db.execute_batch("ALTER TABLE shape ADD COLUMN c int DEFAULT 7")
            .await
            .unwrap();
        let read = |row: &brisk::db::RowView<'_>| Ok((row.get::<i32>(0)?, row.get::<i32>(2)?));
        let runs = db.query_pipelined_map(sql, lists(), read).await.unwrap();
        let runs: Vec<Vec<(i32, i32)>> = runs.into_iter().map(Result::unwrap).collect();
        assert_eq!(runs, [vec![(1, 7), (2, 7)], vec![(2, 7)]]);
        // Only the server says a statement was reshaped: a closure's error that reads like it
        // fails its run, which is not run again (the server did run it).
        let mut reads = 0;
        let as_if_reshaped = |_: &brisk::db::RowView<'_>| -> Result<(), DbError> {
            reads += 1;
            Err(DbError::Query(brisk::db::ServerError {
                code: "0A000".into(),
                message: "the app's own error".into(),
                constraint: None,
                kind: brisk::db::ErrorKind::Other,
            }))
        };
        let runs = db.query_pipelined_map(sql, lists(), as_if_reshaped).await;
        let runs = runs.unwrap();
        assert!(runs
            .iter()
            .all(|r| r.as_ref().unwrap_err().code() == Some("0A000")));
        assert_eq!(reads, 2, "one read per run, none run again");

        // What cannot run at all fails the call, and the connection goes on in step.
        let err = db.query_pipelined(sql, vec![vec![]]).await.unwrap_err();
        assert!(
            matches!(&err, DbError::Refused(m) if m.contains("takes 1 parameters, 0 given")),
            "{err:?}"
        );
        assert!(db.query_pipelined(sql, vec![]).await.unwrap().is_empty());
        let row = db
            .query_one("SELECT 41 + 1", vec![])
            .await
            .unwrap()
            .unwrap();
        assert_eq!(row.get::<i64>(0).unwrap(), 42);
    });
}

#[test]
fn columns_decode_to_values_and_parameters_are_read_as_the_columns_type() {
    let server = Postgres::start().unwrap();
    let db = Pg::new(&server.url(), options()).unwrap();
    worker_runtime().block_on(async {
        let row = db
            .query_one(
                "SELECT 7::int2, 8::int4, 9::int8, true, 1.5::float4, 2.25::float8, 'né'::text, \
                 'x'::varchar, '\\x0102'::bytea, NULL::int4, $1::int8, $2::text",
                vec![Value::Int(-3), Value::Text("é".into())],
            )
            .await
            .unwrap()
            .unwrap();
        let ints: Vec<i64> = [0, 1, 2, 10].map(|i| row.get(i).unwrap()).to_vec();
        assert_eq!(ints, [7, 8, 9, -3]);
        assert_eq!(row.get::<Value>(3).unwrap(), Value::Bool(true));
        assert_eq!(row.get::<f64>(4).unwrap(), 1.5);
        assert_eq!(row.get::<f64>(5).unwrap(), 2.25);
        assert_eq!(row.get::<String>(6).unwrap(), "né");
        assert_eq!(row.get::<String>(7).unwrap(), "x");
        assert_eq!(row.get::<Vec<u8>>(8).unwrap(), [1, 2]);
        assert_eq!(row.get::<Option<i64>>(9).unwrap(), None);
        assert_eq!(row.get::<String>(11).unwrap(), "é");
        // NUMERIC comes back exact, a date as a date; text parameters are read as the
        // column's type.
        let row = db
            .query_one(
                "SELECT 1.50::numeric, $1::numeric * 2, $2::date + 1, $3::int4 + 1, $4::float8",
                vec![
                    Value::Int(21),
                    "2026-11-24".into(),
                    "1234".into(),
                    Value::Int(3),
                ],
            )
            .await
            .unwrap()
            .unwrap();
        assert_eq!(row.get::<String>(0).unwrap(), "1.50");
        assert_eq!(row.get::<String>(1).unwrap(), "42");
        assert_eq!(row.get::<String>(2).unwrap(), "2026-11-25");
        assert_eq!(row.get::<i64>(3).unwrap(), 1235);
        assert_eq!(row.get::<f64>(4).unwrap(), 3.0);
        let err = db
            .query_one("SELECT $1::int8", vec![Value::Float(1.5)])
            .await
            .unwrap_err();
        assert!(err.code() == Some("22P02"), "{err:?}");
    });
}

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
fn md5_and_cleartext_passwords_authenticate_and_a_wrong_one_is_refused() {
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
        let url = format!("postgres://{user}:{password}@127.0.0.1:{port}/postgres");
        let db = Pg::new(&url, options()).unwrap();
        let row = rt
            .block_on(db.query_one("SELECT current_user::text", vec![]))
            .unwrap()
            .unwrap();
        assert_eq!(row.get::<String>(0).unwrap(), user);
        let url = format!("postgres://{user}:wrong@127.0.0.1:{port}/postgres");
        let err = rt
            .block_on(Pg::new(&url, options()).unwrap().query("SELECT 1", vec![]))
            .unwrap_err();
        assert!(
            matches!(&err, DbError::Unavailable(m) if m.contains("28P01")),
            "{user}: {err:?}"
        );
    }
}

#[test]
fn what_would_change_the_shared_connection_is_refused_and_copy_from_stdin_too() {
    let server = Postgres::start().unwrap();
    let db = Pg::new(&server.url(), options()).unwrap();
    worker_runtime().block_on(async {
        db.execute_batch("CREATE TABLE t (n int)").await.unwrap();
        // BEGIN alone would leave the shared connection inside a transaction.
        for sql in ["BEGIN", "SET search_path TO nowhere", "LISTEN x"] {
            let err = db.execute(sql, vec![]).await.unwrap_err();
            assert!(
                matches!(&err, DbError::Refused(m) if m.contains("db.transaction()")),
                "{sql}: {err:?}"
            );
        }
        let err = db
            .execute_batch("BEGIN; INSERT INTO t VALUES (2); COMMIT")
            .await
            .unwrap_err();
        assert!(matches!(&err, DbError::Refused(_)), "{err:?}");
        let count = db.query_one("SELECT count(*) FROM t", vec![]).await;
        assert_eq!(count.unwrap().unwrap().get::<i64>(0).unwrap(), 0);
        // COPY FROM STDIN would leave the server waiting: refused before it is sent.
        let err = db.execute("COPY t FROM STDIN", vec![]).await.unwrap_err();
        assert!(
            matches!(&err, DbError::Refused(m) if m.contains("COPY")),
            "{err:?}"
        );
        db.execute("INSERT INTO t VALUES (1)", vec![])
            .await
            .unwrap();
        let count = db.query_one("SELECT count(*) FROM t", vec![]).await;
        assert_eq!(count.unwrap().unwrap().get::<i64>(0).unwrap(), 1);
    });
}

/// What the statement check cannot see (dynamic SQL in a `DO` block) but the server reports
/// (a `ParameterStatus` for `DateStyle`) ends the shared connection once what was sent is
/// answered: the next call runs on a new connection with the session's settings as they were.
#[test]
fn a_session_change_the_check_cannot_see_ends_the_shared_connection() {
    let server = Postgres::start().unwrap();
    let db = Pg::new(&server.url(), options()).unwrap();
    worker_runtime().block_on(async {
        let session = "SELECT current_setting('DateStyle'), pg_backend_pid()::int8";
        let row = db.query_one(session, vec![]).await.unwrap().unwrap();
        let (style, pid): (String, i64) = (row.get(0).unwrap(), row.get(1).unwrap());
        assert_eq!(style, "ISO, MDY");
        let change = "DO $$ BEGIN EXECUTE 'SET DateStyle = ''SQL, DMY'''; END $$";
        db.execute(change, vec![]).await.unwrap();
        let deadline = Instant::now() + Duration::from_secs(5);
        let row = loop {
            match db.query_one(session, vec![]).await {
                Ok(row) => break row.unwrap(),
                Err(e) => assert!(Instant::now() < deadline, "{e}"),
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        assert_eq!(row.get::<String>(0).unwrap(), "ISO, MDY");
        assert_ne!(row.get::<i64>(1).unwrap(), pid, "a new connection");
    });
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

/// A fake PostgreSQL server on a loopback port, for what a real one never does: it answers
/// the `SSLRequest` (TLS with `cert` and `key` if given, else `N`), reads the start-up
/// message, sends `script` (raw backend messages), then reads until the client closes.
/// It serves connections until dropped.
struct FakePostgres {
    port: u16,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl FakePostgres {
    fn start(tls: Option<(rcgen::Certificate, rcgen::KeyPair)>, script: Vec<u8>) -> Self {
        use std::io::{Read, Write};
        use std::sync::atomic::Ordering;
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let port = listener.local_addr().unwrap().port();
        let tls = tls.map(|(cert, key)| {
            let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
            let key = rustls_pki_types::PrivateKeyDer::try_from(key.serialize_der()).unwrap();
            let config = rustls::ServerConfig::builder_with_provider(provider)
                .with_safe_default_protocol_versions()
                .unwrap()
                .with_no_client_auth()
                .with_single_cert(vec![cert.der().clone()], key)
                .unwrap();
            std::sync::Arc::new(config)
        });
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let stopped = stop.clone();
        let serve = move |mut tcp: std::net::TcpStream| -> std::io::Result<()> {
            tcp.set_nonblocking(false)?;
            tcp.set_read_timeout(Some(Duration::from_secs(5)))?;
            let mut ssl_request = [0u8; 8];
            tcp.read_exact(&mut ssl_request)?;
            let mut stream: Box<dyn ReadWrite> = match &tls {
                Some(config) => {
                    tcp.write_all(b"S")?;
                    let conn = rustls::ServerConnection::new(config.clone()).unwrap();
                    Box::new(rustls::StreamOwned::new(conn, tcp))
                }
                None => {
                    tcp.write_all(b"N")?;
                    Box::new(tcp)
                }
            };
            let mut len = [0u8; 4];
            stream.read_exact(&mut len)?;
            let mut startup = vec![0u8; u32::from_be_bytes(len) as usize - 4];
            stream.read_exact(&mut startup)?;
            stream.write_all(&script)?;
            stream.flush()?;
            let mut rest = Vec::new();
            let _ = stream.read_to_end(&mut rest);
            Ok(())
        };
        let thread = std::thread::spawn(move || {
            while !stopped.load(Ordering::Relaxed) {
                match listener.accept() {
                    Ok((tcp, _)) => {
                        let _ = serve(tcp);
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(10)),
                }
            }
        });
        FakePostgres {
            port,
            stop,
            thread: Some(thread),
        }
    }
}

impl Drop for FakePostgres {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

trait ReadWrite: std::io::Read + std::io::Write {}
impl<T: std::io::Read + std::io::Write> ReadWrite for T {}

/// A backend message: its type byte, its length, its body.
fn backend(kind: u8, body: &[u8]) -> Vec<u8> {
    let len = (body.len() + 4) as u32;
    [&[kind][..], &len.to_be_bytes(), body].concat()
}

/// The barrier behind the statement check: a request that leaves the shared connection
/// inside a transaction (here a fake server says so of three pipelined requests) is answered
/// with an error, the requests sent behind it (which ran inside that transaction) fail too,
/// and a ROLLBACK goes before anything sent later, which is answered as usual.
#[test]
fn a_transaction_left_open_on_the_shared_connection_fails_what_ran_inside_it() {
    use std::io::{Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let server = std::thread::spawn(move || -> Vec<String> {
        let mut tcp = accept_unauthenticated(&listener);
        // Each simple query's text, in the order they came.
        let mut queries = Vec::new();
        let next_query = |tcp: &mut std::net::TcpStream| loop {
            let mut head = [0u8; 5];
            tcp.read_exact(&mut head).unwrap();
            let mut body =
                vec![0u8; u32::from_be_bytes(head[1..].try_into().unwrap()) as usize - 4];
            tcp.read_exact(&mut body).unwrap();
            if head[0] == b'Q' {
                return String::from_utf8_lossy(&body[..body.len() - 1]).into_owned();
            }
        };
        for _ in 0..3 {
            queries.push(next_query(&mut tcp));
        }
        for _ in 0..3 {
            let answer = [backend(b'C', b"INSERT 0 1\0"), backend(b'Z', b"T")].concat();
            tcp.write_all(&answer).unwrap();
        }
        queries.push(next_query(&mut tcp));
        tcp.write_all(&[backend(b'C', b"ROLLBACK\0"), backend(b'Z', b"I")].concat())
            .unwrap();
        queries.push(next_query(&mut tcp));
        tcp.write_all(&[backend(b'C', b"INSERT 0 1\0"), backend(b'Z', b"I")].concat())
            .unwrap();
        queries
    });
    let url = format!("postgres://u:p@127.0.0.1:{port}/db?sslmode=prefer");
    let db = Pg::new(&url, options()).unwrap();
    worker_runtime().block_on(async {
        db.connect().await.unwrap();
        let (first, second, third) = tokio::join!(
            db.execute_batch("INSERT INTO w VALUES (1)"),
            db.execute_batch("INSERT INTO w VALUES (2)"),
            db.execute_batch("INSERT INTO w VALUES (3)"),
        );
        assert!(
            matches!(&first, Err(DbError::Refused(m)) if m.contains("left the shared connection inside a transaction")),
            "{first:?}"
        );
        for behind in [second, third] {
            assert!(
                matches!(&behind, Err(DbError::Unavailable(m)) if m.contains("rolled back")),
                "{behind:?}"
            );
        }
        db.execute_batch("INSERT INTO w VALUES (4)").await.unwrap();
    });
    let queries = server.join().unwrap();
    assert_eq!(queries[3], "ROLLBACK", "{queries:?}");
    assert_eq!(queries[4], "INSERT INTO w VALUES (4)", "{queries:?}");
}

/// The same barrier inside one pipelined request: when its first run leaves the shared
/// connection inside a transaction (a fake server says so), the runs behind it ran inside
/// that transaction too: the call fails, a ROLLBACK goes next, and what comes after is
/// answered as usual.
#[test]
fn a_pipelined_run_that_leaves_a_transaction_open_fails_the_call_and_is_rolled_back() {
    use std::io::{Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let server = std::thread::spawn(move || -> Vec<u8> {
        let mut tcp = accept_unauthenticated(&listener);
        // The tags of the messages that came, up to the `syncs`-th Sync or a simple query.
        let mut tags = Vec::new();
        let mut read_until = |tcp: &mut std::net::TcpStream, syncs: usize| {
            let mut seen = 0;
            loop {
                let mut head = [0u8; 5];
                tcp.read_exact(&mut head).unwrap();
                let size = u32::from_be_bytes(head[1..].try_into().unwrap()) as usize - 4;
                tcp.read_exact(&mut vec![0u8; size]).unwrap();
                tags.push(head[0]);
                seen += usize::from(head[0] == b'S');
                if seen == syncs || head[0] == b'Q' {
                    return;
                }
            }
        };
        // The preparation: one int parameter, no rows.
        read_until(&mut tcp, 1);
        let params = [&1i16.to_be_bytes()[..], &23u32.to_be_bytes()].concat();
        let prepared = [
            backend(b'1', b""),
            backend(b't', &params),
            backend(b'n', b""),
            backend(b'Z', b"I"),
        ];
        tcp.write_all(&prepared.concat()).unwrap();
        // Three runs, each left inside a transaction.
        read_until(&mut tcp, 3);
        for _ in 0..3 {
            let run = [
                backend(b'2', b""),
                backend(b'C', b"INSERT 0 1\0"),
                backend(b'Z', b"T"),
            ];
            tcp.write_all(&run.concat()).unwrap();
        }
        read_until(&mut tcp, 0);
        tcp.write_all(&[backend(b'C', b"ROLLBACK\0"), backend(b'Z', b"I")].concat())
            .unwrap();
        read_until(&mut tcp, 0);
        tcp.write_all(&[backend(b'C', b"INSERT 0 1\0"), backend(b'Z', b"I")].concat())
            .unwrap();
        tags
    });
    let url = format!("postgres://u:p@127.0.0.1:{port}/db?sslmode=prefer");
    let db = Pg::new(&url, options()).unwrap();
    worker_runtime().block_on(async {
        let lists = [1, 2, 3].map(|i| vec![i.into()]).to_vec();
        let err = db
            .query_pipelined("INSERT INTO w VALUES ($1)", lists)
            .await
            .unwrap_err();
        assert!(
            matches!(&err, DbError::Refused(m) if m.contains("left the shared connection inside a transaction")),
            "{err:?}"
        );
        db.execute_batch("INSERT INTO w VALUES (4)").await.unwrap();
    });
    let tags = server.join().unwrap();
    // Parse, Describe, Sync; three Bind, Execute, Sync; the ROLLBACK; the last query.
    assert_eq!(
        tags,
        b"PDSBESBESBESQQ",
        "{:?}",
        String::from_utf8_lossy(&tags)
    );
}

/// The driver asks the kernel to wake it only once the bytes a pipelined answer must still
/// hold have come (`SO_RCVLOWAT`): an answer that comes a byte at a time, each run's in its
/// own pieces, is still read whole and in order, and the next query after it too.
#[test]
fn a_pipelined_answer_that_comes_a_byte_at_a_time_is_read_whole() {
    use std::io::Write;
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let server = std::thread::spawn(move || {
        let mut tcp = accept_unauthenticated(&listener);
        // The preparation: one int parameter, one int column.
        read_syncs(&mut tcp, 1);
        tcp.write_all(&prepared_int_statement(1)).unwrap();
        // Four runs, each its row (the number times ten, in binary), a byte per write.
        for round in 0..2 {
            read_syncs(&mut tcp, 4);
            let mut answer = Vec::new();
            for i in 0..4i32 {
                let value = (10 * (i + 4 * round)).to_be_bytes();
                let row = [&1i16.to_be_bytes()[..], &4i32.to_be_bytes(), &value].concat();
                answer.extend(backend(b'2', b""));
                answer.extend(backend(b'D', &row));
                answer.extend(backend(b'C', b"SELECT 1\0"));
                answer.extend(backend(b'Z', b"I"));
            }
            for byte in answer {
                tcp.write_all(&[byte]).unwrap();
                std::thread::sleep(Duration::from_micros(200));
            }
        }
    });
    let url = format!("postgres://u:p@127.0.0.1:{port}/db?sslmode=prefer");
    let db = Pg::new(&url, options()).unwrap();
    worker_runtime().block_on(async {
        for round in 0..2i64 {
            let lists = (0..4).map(|i| vec![Value::from(i)]).collect();
            let runs = db
                .query_pipelined("SELECT $1::int * 10 AS n", lists)
                .await
                .unwrap();
            let got: Vec<i64> = runs
                .iter()
                .map(|r| r.as_ref().unwrap()[0].get(0).unwrap())
                .collect();
            let want: Vec<i64> = (0..4).map(|i| 10 * (i + 4 * round)).collect();
            assert_eq!(got, want);
        }
    });
    server.join().unwrap();
}

/// The server's side of a new connection on `listener`: refuses TLS, takes the start-up
/// message and says the client is in (no password asked) and ready.
fn accept_unauthenticated(listener: &std::net::TcpListener) -> std::net::TcpStream {
    use std::io::{Read, Write};
    let (mut tcp, _) = listener.accept().unwrap();
    tcp.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    tcp.set_nodelay(true).unwrap();
    let mut ssl_request = [0u8; 8];
    tcp.read_exact(&mut ssl_request).unwrap();
    tcp.write_all(b"N").unwrap();
    let mut len = [0u8; 4];
    tcp.read_exact(&mut len).unwrap();
    let mut startup = vec![0u8; u32::from_be_bytes(len) as usize - 4];
    tcp.read_exact(&mut startup).unwrap();
    let ok = [backend(b'R', &0u32.to_be_bytes()), backend(b'Z', b"I")].concat();
    tcp.write_all(&ok).unwrap();
    tcp
}

/// Reads the client's messages up to its `syncs`-th `Sync`.
fn read_syncs(tcp: &mut std::net::TcpStream, syncs: usize) {
    use std::io::Read;
    let mut seen = 0;
    while seen < syncs {
        let mut head = [0u8; 5];
        tcp.read_exact(&mut head).unwrap();
        let size = u32::from_be_bytes(head[1..].try_into().unwrap()) as usize - 4;
        tcp.read_exact(&mut vec![0u8; size]).unwrap();
        seen += usize::from(head[0] == b'S');
    }
}

/// Reads the client's next message, which must be a simple query.
fn read_simple_query(tcp: &mut std::net::TcpStream) {
    use std::io::Read;
    let mut head = [0u8; 5];
    tcp.read_exact(&mut head).unwrap();
    assert_eq!(head[0], b'Q', "a simple query");
    let size = u32::from_be_bytes(head[1..].try_into().unwrap()) as usize - 4;
    tcp.read_exact(&mut vec![0u8; size]).unwrap();
}

/// The answer to preparing a statement of one int parameter and `columns` int columns
/// (none: it returns no rows).
fn prepared_int_statement(columns: i16) -> Vec<u8> {
    let params = [&1i16.to_be_bytes()[..], &23u32.to_be_bytes()].concat();
    let description = if columns == 0 {
        backend(b'n', b"")
    } else {
        let field = [
            &b"n\0"[..],
            &[0; 6],
            &23u32.to_be_bytes(),
            &4i16.to_be_bytes(),
            &[0; 6],
        ]
        .concat();
        let fields = (0..columns).flat_map(|_| field.iter().copied());
        let body: Vec<u8> = columns.to_be_bytes().into_iter().chain(fields).collect();
        backend(b'T', &body)
    };
    [
        backend(b'1', b""),
        backend(b't', &params),
        description,
        backend(b'Z', b"I"),
    ]
    .concat()
}

/// What a pipelined request's answer holds is never taken for more than it can be: after a
/// long run (a row) come the shortest runs the protocol allows for the same statement (no
/// row; an error with only its required fields; a completion whose count has fewer digits),
/// each in a write of its own, and the driver still wakes for the last of them at once.
#[test]
fn the_shortest_runs_after_long_ones_are_read_without_waiting() {
    use std::io::Write;
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let server = std::thread::spawn(move || {
        let mut tcp = accept_unauthenticated(&listener);
        let row = [
            &1i16.to_be_bytes()[..],
            &4i32.to_be_bytes(),
            &10i32.to_be_bytes(),
        ]
        .concat();
        let one_row = [
            backend(b'2', b""),
            backend(b'D', &row),
            backend(b'C', b"SELECT 1\0"),
        ]
        .concat();
        let no_row = [backend(b'2', b""), backend(b'C', b"SELECT 0\0")].concat();
        let error = backend(b'E', b"SE\0C22012\0M\0\0");
        let moved = |count: &[u8]| [backend(b'2', b""), backend(b'C', count)].concat();
        // A notice makes the first run long enough to be read on its own, so that what it
        // shows bounds the runs still due.
        let notice = backend(
            b'N',
            &[&b"SNOTICE\0C00000\0M"[..], &[b'.'; 100], b"\0\0"].concat(),
        );
        let rounds = [
            (1, vec![one_row, no_row.clone(), error, no_row]),
            (
                0,
                vec![
                    [notice, moved(b"MOVE 10\0")].concat(),
                    moved(b"MOVE 0\0"),
                    moved(b"MOVE 0\0"),
                ],
            ),
        ];
        for (columns, runs) in rounds {
            read_syncs(&mut tcp, 1);
            tcp.write_all(&prepared_int_statement(columns)).unwrap();
            read_syncs(&mut tcp, runs.len());
            for run in runs {
                // Each run on its own, after the driver has read the one before.
                std::thread::sleep(Duration::from_millis(30));
                tcp.write_all(&[run, backend(b'Z', b"I")].concat()).unwrap();
            }
        }
        // Open until the client has had every answer (a close would wake it anyway).
        read_simple_query(&mut tcp);
        let done = [backend(b'C', b"SELECT 1\0"), backend(b'Z', b"I")].concat();
        tcp.write_all(&done).unwrap();
    });
    let url = format!("postgres://u:p@127.0.0.1:{port}/db?sslmode=prefer");
    let db = Pg::new(&url, options()).unwrap();
    worker_runtime().block_on(async {
        let within = |sql: &'static str, n: i64| {
            let lists = (0..n).map(|i| vec![Value::from(i)]).collect();
            let runs = db.query_pipelined(sql, lists);
            async move {
                tokio::time::timeout(Duration::from_secs(3), runs)
                    .await
                    .expect("the whole answer came but the driver did not wake for it")
                    .unwrap()
            }
        };
        let runs = within("SELECT $1::int * 10 AS n", 4).await;
        assert_eq!(runs[0].as_ref().unwrap()[0].get::<i64>(0).unwrap(), 10);
        assert!(runs[1].as_ref().unwrap().is_empty(), "{:?}", runs[1]);
        assert_eq!(runs[2].as_ref().unwrap_err().code(), Some("22012"));
        assert!(runs[3].as_ref().unwrap().is_empty(), "{:?}", runs[3]);
        let moves = within("MOVE FORWARD $1 IN c", 3).await;
        assert!(
            moves.iter().all(|run| run.as_ref().unwrap().is_empty()),
            "{moves:?}"
        );
        db.execute_batch("SELECT 1").await.unwrap();
    });
    server.join().unwrap();
}

/// With many pipelined requests in flight the driver waits for several answers per wake-up,
/// but never long: here a fake server answers only the oldest of nine (of one run each, as
/// `/db`'s, then of two) until the client, having had that answer, sends one more query; the
/// oldest is handed over within a couple of milliseconds, not when the others come.
#[test]
fn the_oldest_answer_does_not_wait_for_the_ones_behind_it() {
    for runs in [1, 2] {
        the_oldest_of_nine_is_answered_alone(runs);
    }
}

fn the_oldest_of_nine_is_answered_alone(runs: usize) {
    use futures_util::StreamExt;
    use std::io::Write;
    const REQUESTS: usize = 9;
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let server = std::thread::spawn(move || {
        let mut tcp = accept_unauthenticated(&listener);
        read_syncs(&mut tcp, 1);
        tcp.write_all(&prepared_int_statement(0)).unwrap();
        read_syncs(&mut tcp, runs * REQUESTS);
        let run = [
            backend(b'2', b""),
            backend(b'C', b"INSERT 0 1\0"),
            backend(b'Z', b"I"),
        ];
        let answer = run.concat().repeat(runs);
        tcp.write_all(&answer).unwrap();
        // The rest once the client, answered, sends its next query.
        read_simple_query(&mut tcp);
        let mut rest = answer.repeat(REQUESTS - 1);
        rest.extend([backend(b'C', b"SELECT 1\0"), backend(b'Z', b"I")].concat());
        tcp.write_all(&rest).unwrap();
    });
    let url = format!("postgres://u:p@127.0.0.1:{port}/db?sslmode=prefer");
    let db = Pg::new(&url, options()).unwrap();
    worker_runtime().block_on(async {
        let sql = "INSERT INTO w VALUES ($1)";
        let lists = |i: i64| (0..runs as i64).map(|r| vec![Value::from(i + r)]).collect();
        let mut inserts: futures_util::stream::FuturesUnordered<_> = (0..REQUESTS as i64)
            .map(|i| db.query_pipelined(sql, lists(i)))
            .collect();
        let first = tokio::time::timeout(Duration::from_secs(3), inserts.next())
            .await
            .unwrap_or_else(|_| panic!("{runs} run(s): the oldest answer was held"));
        let answered = first.unwrap().unwrap();
        assert_eq!(answered.len(), runs);
        assert!(
            answered.iter().all(|r| r.as_ref().unwrap().is_empty()),
            "{answered:?}"
        );
        let (next, rest) = tokio::join!(db.execute_batch("SELECT 1"), inserts.collect::<Vec<_>>());
        next.unwrap();
        assert_eq!(rest.len(), REQUESTS - 1);
        for answered in rest {
            assert_eq!(answered.unwrap().len(), runs);
        }
    });
    server.join().unwrap();
}

/// Waits until the fake server says it has read `what`.
async fn server_read(said: &mut tokio::sync::mpsc::UnboundedReceiver<()>, what: &str) {
    let read = tokio::time::timeout(Duration::from_secs(10), said.recv()).await;
    assert!(matches!(read, Ok(Some(()))), "{what} never came");
}

/// A busy connection takes new requests in batches: with 32 written requests awaiting their
/// answers, one more waits in the driver (the fake server gets nothing) until an answer
/// comes, then goes; 32 more at once go without waiting for any answer. Every request is
/// answered.
#[test]
fn requests_behind_a_deep_pipeline_wait_for_an_answer_or_a_batch() {
    use std::io::{ErrorKind, Read, Write};
    // `HOLD_DEPTH` and `HOLD_BATCH` (brisk's `db/postgres_write_batch.rs`).
    const DEPTH: usize = 32;
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    // The server says when it has read what it waited for.
    let (read_tx, mut read_rx) = tokio::sync::mpsc::unbounded_channel::<()>();
    let server = std::thread::spawn(move || {
        let mut tcp = accept_unauthenticated(&listener);
        read_syncs(&mut tcp, 1);
        tcp.write_all(&prepared_int_statement(0)).unwrap();
        read_syncs(&mut tcp, DEPTH);
        read_tx.send(()).unwrap();
        tcp.set_read_timeout(Some(Duration::from_millis(300)))
            .unwrap();
        match tcp.read(&mut [0u8; 1]) {
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
            other => panic!("a request came behind {DEPTH} unanswered ones: {other:?}"),
        }
        tcp.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let answer = [
            backend(b'2', b""),
            backend(b'C', b"INSERT 0 1\0"),
            backend(b'Z', b"I"),
        ]
        .concat();
        // The oldest answered: the one held comes.
        tcp.write_all(&answer).unwrap();
        read_syncs(&mut tcp, 1);
        read_tx.send(()).unwrap();
        // A batch comes though none of the 32 before it is answered.
        read_syncs(&mut tcp, DEPTH);
        tcp.write_all(&answer.repeat(2 * DEPTH)).unwrap();
        // Open until the client has had every answer.
        read_simple_query(&mut tcp);
        let done = [backend(b'C', b"SELECT 1\0"), backend(b'Z', b"I")].concat();
        tcp.write_all(&done).unwrap();
    });
    let url = format!("postgres://u:p@127.0.0.1:{port}/db?sslmode=prefer");
    let db = Pg::new(&url, options()).unwrap();
    let local = tokio::task::LocalSet::new();
    local.block_on(&worker_runtime(), async {
        let insert = |i: usize| {
            let db = db.clone();
            tokio::task::spawn_local(async move {
                db.execute("INSERT INTO w VALUES ($1)", vec![Value::from(i as i64)])
                    .await
            })
        };
        let mut inserts: Vec<_> = (0..DEPTH).map(insert).collect();
        server_read(&mut read_rx, "the first requests").await;
        inserts.push(insert(DEPTH));
        server_read(&mut read_rx, "the request held").await;
        inserts.extend((DEPTH + 1..=2 * DEPTH).map(insert));
        for (i, inserted) in inserts.into_iter().enumerate() {
            let inserted = tokio::time::timeout(Duration::from_secs(10), inserted).await;
            let changed = inserted.unwrap_or_else(|_| panic!("request {i} unanswered"));
            assert_eq!(changed.unwrap().unwrap(), 1, "request {i}");
        }
        db.execute_batch("SELECT 1").await.unwrap();
    });
    server.join().unwrap();
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

#[test]
fn a_full_statement_cache_closes_its_least_recently_used_statement_and_a_reshaped_one_is_prepared_again(
) {
    let server = Postgres::start().unwrap();
    let small = PostgresOptions {
        statement_cache: 3,
        ..options()
    };
    let db = Pg::new(&server.url(), small).unwrap();
    let listing = "SELECT statement FROM pg_prepared_statements";
    let statement = |k: i32| format!("SELECT $1::int + {k}");
    worker_runtime().block_on(async {
        let prepared_now = || async {
            let rows = db.query(listing, vec![]).await.unwrap();
            let mut texts: Vec<String> = rows.iter().map(|r| r.get(0).unwrap()).collect();
            texts.sort();
            texts
        };
        let sorted = |mut v: Vec<String>| {
            v.sort();
            v
        };
        for k in 0..10 {
            let row = db.query_one(&statement(k), vec![1.into()]).await.unwrap();
            assert_eq!(row.unwrap().get::<i64>(0).unwrap(), 1 + k as i64);
        }
        // The listing itself is the third: the two most recent stay, the rest were closed.
        let expected = sorted(vec![statement(8), statement(9), listing.into()]);
        assert_eq!(prepared_now().await, expected);
        // A use makes a statement recent: s9 is now the least recent and gives way to s0,
        // which is prepared again and answers.
        db.query_one(&statement(8), vec![1.into()]).await.unwrap();
        let row = db.query_one(&statement(0), vec![5.into()]).await.unwrap();
        assert_eq!(row.unwrap().get::<i64>(0).unwrap(), 5);
        let expected = sorted(vec![statement(8), statement(0), listing.into()]);
        assert_eq!(prepared_now().await, expected);
        // A statement whose result changed shape on the server (ALTER TABLE under `*`) is
        // prepared again, and the call that found it so still answers.
        db.execute_batch("CREATE TABLE shaped (a int); INSERT INTO shaped VALUES (1)")
            .await
            .unwrap();
        let star = "SELECT * FROM shaped";
        assert_eq!(
            db.query_one(star, vec![])
                .await
                .unwrap()
                .unwrap()
                .values()
                .len(),
            1
        );
        db.execute_batch("ALTER TABLE shaped ADD COLUMN b int DEFAULT 2")
            .await
            .unwrap();
        let row = db.query_one(star, vec![]).await.unwrap().unwrap();
        assert_eq!(row.get::<i64>(1).unwrap(), 2);
    });
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

/// Issue 31 item 11: an answer larger than `max_result_bytes` is read to its end without
/// being kept and refused, the connection going on; a single row larger than that ends the
/// connection before any of it is buffered, and the pool opens a new one.
#[test]
fn an_answer_over_max_result_bytes_is_refused_and_the_pool_goes_on() {
    let server = Postgres::start().unwrap();
    let options = PostgresOptions {
        max_result_bytes: 256 * 1024,
        ..options()
    };
    let db = Pg::new(&server.url(), options).unwrap();
    worker_runtime().block_on(async {
        let pid = "SELECT pg_backend_pid()";
        let backend = || async {
            let row = db.query_one(pid, vec![]).await.unwrap().unwrap();
            row.get::<i64>(0).unwrap()
        };
        let before = backend().await;
        // About 1.2 MB in 10,000 rows.
        let many = "SELECT g, repeat('x', 100) FROM generate_series(1, 10000) g";
        let err = db.query(many, vec![]).await.unwrap_err();
        assert!(
            matches!(&err, DbError::Refused(m) if m.contains("larger than 262144 bytes")
                && m.contains("max_result_bytes")),
            "{err:?}"
        );
        assert_eq!(backend().await, before, "the connection went on");
        // Below the limit, the same query is answered whole.
        let rows = db.query("SELECT g FROM generate_series(1, 1000) g", vec![]);
        assert_eq!(rows.await.unwrap().len(), 1000);

        // One row of 300,000 bytes: its message alone is over the limit.
        let err = db
            .query_one("SELECT repeat('y', 300000)", vec![])
            .await
            .unwrap_err();
        assert!(
            matches!(&err, DbError::Unavailable(m) if m.contains("over the limit of 262144")),
            "{err:?}"
        );
        let mut after = None;
        for _ in 0..50 {
            match db.query_one(pid, vec![]).await {
                Ok(row) => {
                    after = Some(row.unwrap().get::<i64>(0).unwrap());
                    break;
                }
                Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
            }
        }
        let after = after.expect("the pool opened a new connection");
        assert_ne!(after, before, "a new connection");
    });
}

/// The connection error a query on a server at `port` fails with.
fn connect_error(port: u16) -> String {
    let url = format!("postgres://brisk:pw@127.0.0.1:{port}/brisk");
    let options = PostgresOptions {
        connect_timeout: Duration::from_secs(2),
        ..options()
    };
    let db = Pg::new(&url, options).unwrap();
    match worker_runtime().block_on(db.query("SELECT 1", vec![])) {
        Err(DbError::Unavailable(why)) => why,
        other => panic!("{other:?}"),
    }
}

/// Issue 31 item 11: what a hostile or broken server sends during start-up is bounded: a
/// message announcing 2 GiB fails the start from its header, and SCRAM asking for two
/// billion PBKDF2 rounds is refused before any are computed; both say why.
#[test]
fn a_hostile_server_at_start_up_is_refused_from_what_it_announces() {
    let huge = {
        let mut m = vec![b'R'];
        m.extend_from_slice(&0x7fff_fff0u32.to_be_bytes());
        m.extend_from_slice(&[0, 0, 0, 0]);
        m
    };
    let fake = FakePostgres::start(None, huge);
    let why = connect_error(fake.port);
    assert!(why.contains("over the limit of 65536"), "{why}");

    let sasl = backend(b'R', b"\0\0\0\x0aSCRAM-SHA-256\0\0");
    let rounds = backend(b'R', b"\0\0\0\x0br=abc,s=c2FsdA==,i=2000000000");
    let fake = FakePostgres::start(None, [sasl, rounds].concat());
    let why = connect_error(fake.port);
    assert!(
        why.contains("2000000000 SCRAM iterations, over Brisk's limit of 1000000"),
        "{why}"
    );
}
