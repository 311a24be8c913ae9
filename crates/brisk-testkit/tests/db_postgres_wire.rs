//! `brisk::db::Postgres` against a fake PostgreSQL server, for what a real one never does or
//! does too seldom to test: a transaction left open on the shared connection, answers that
//! come a byte at a time, short runs behind long ones, a deep pipeline, an answer over the
//! result limit, a hostile server at start-up.

use std::time::Duration;

use brisk::db::{DbError, Postgres as Pg, PostgresOptions, Value};
use brisk_testkit::*;

mod pg_fake;
use pg_fake::*;

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
