//! `brisk::db::Postgres` against a real PostgreSQL server: queries pipeline on one
//! connection, statements are prepared once per connection (and a full cache closes the least
//! recently used), a slow query times out and is cancelled on the server, a full pipeline
//! waits then fails with a pool timeout, a database that is down fails fast and comes back, a
//! multi-host URL lands on the read-write host, a batch is one transaction answered in order,
//! columns decode, and what would change the shared connection is refused. Logins and TLS are
//! in `db_postgres_security.rs`, the driver's wire-level behaviour against a fake server in
//! `db_postgres_wire.rs`.

use std::time::{Duration, Instant};

use brisk::db::{DbError, Postgres as Pg, PostgresOptions, Value};
use brisk_testkit::*;

mod pg_fake;
use pg_fake::*;

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
