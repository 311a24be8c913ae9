//! Transactions on every backend, against real servers (PostgreSQL, MariaDB) and a real
//! SQLite file: commit, rollback, rollback on drop and on error, a failed statement that
//! leaves only a rollback (or a savepoint to return to), read-only, isolation, serialization
//! failures run again, error kinds with their constraint, and what the shared connection and
//! a transaction refuse. Then the hammer: hundreds of concurrent writers, transactions and
//! misuses on PostgreSQL's shared pipelined connection, every `Ok` checked against the table.

use std::cell::Cell;
use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use brisk::db::{
    Db, DbError, DbKind, DbOptions, ErrorKind, Isolation, Transaction, TxOptions, Value,
};
use brisk_testkit::*;

fn schema(kind: DbKind) -> &'static str {
    match kind {
        DbKind::Mysql => {
            "CREATE TABLE acct (id INT PRIMARY KEY, balance INT NOT NULL, \
                 CONSTRAINT balance_not_negative CHECK (balance >= 0)) ENGINE=InnoDB;
             CREATE TABLE entry (id INT PRIMARY KEY, acct INT NOT NULL, note TEXT NOT NULL, \
                 CONSTRAINT entry_acct FOREIGN KEY (acct) REFERENCES acct (id)) ENGINE=InnoDB"
        }
        _ => {
            "CREATE TABLE acct (id INT PRIMARY KEY, balance INT NOT NULL, \
                 CONSTRAINT balance_not_negative CHECK (balance >= 0));
             CREATE TABLE entry (id INT PRIMARY KEY, acct INT NOT NULL, note TEXT NOT NULL, \
                 CONSTRAINT entry_acct FOREIGN KEY (acct) REFERENCES acct (id))"
        }
    }
}

async fn count(db: &Db) -> i64 {
    let row = db.query_one("SELECT COUNT(*) FROM acct", vec![]).await;
    row.unwrap().unwrap().get(0).unwrap()
}

async fn ids(db: &Db) -> Vec<i64> {
    let rows = db.query("SELECT id FROM acct ORDER BY id", vec![]).await;
    rows.unwrap().iter().map(|r| r.get(0).unwrap()).collect()
}

const INSERT: &str = "INSERT INTO acct (id, balance) VALUES ($1, $2)";

/// Every scenario, on `db` (whose tables do not exist yet).
async fn scenarios(db: &Db) {
    let kind = db.kind();
    db.execute_batch(schema(kind)).await.unwrap();

    // Committed: both rows stay.
    let mut tx = db.begin().await.unwrap();
    tx.execute(INSERT, vec![1.into(), 100.into()])
        .await
        .unwrap();
    tx.execute(INSERT, vec![2.into(), 0.into()]).await.unwrap();
    let inside = tx.query_one("SELECT COUNT(*) FROM acct", vec![]).await;
    assert_eq!(inside.unwrap().unwrap().get::<i64>(0).unwrap(), 2);
    tx.commit().await.unwrap();
    assert_eq!(ids(db).await, [1, 2], "{kind:?}: committed");

    // Rolled back, explicitly and by drop; the connection serves the next one clean.
    let mut tx = db.begin().await.unwrap();
    tx.execute(INSERT, vec![3.into(), 0.into()]).await.unwrap();
    tx.rollback().await.unwrap();
    {
        let mut tx = db.begin().await.unwrap();
        tx.execute(INSERT, vec![4.into(), 0.into()]).await.unwrap();
    }
    for _ in 0..3 {
        // As many as the transaction connections, so the one dropped above is among them.
        let mut tx = db.begin().await.unwrap();
        let seen = tx.query("SELECT id FROM acct WHERE id = 4", vec![]).await;
        assert!(
            seen.unwrap().is_empty(),
            "{kind:?}: the dropped row is gone"
        );
        tx.commit().await.unwrap();
    }
    assert_eq!(ids(db).await, [1, 2], "{kind:?}: rolled back");

    // In a closure: Err rolls back and is returned, Ok commits and returns the value.
    let err = db
        .transaction(async |tx: &mut Transaction| -> Result<(), DbError> {
            tx.execute(INSERT, vec![5.into(), 0.into()]).await?;
            Err(DbError::Refused("the app says no".into()))
        })
        .await
        .unwrap_err();
    assert!(matches!(&err, DbError::Refused(m) if m == "the app says no"));
    let n = db
        .transaction(async |tx: &mut Transaction| -> Result<u64, DbError> {
            tx.execute(INSERT, vec![6.into(), 0.into()]).await
        })
        .await
        .unwrap();
    assert_eq!(n, 1);
    assert_eq!(ids(db).await, [1, 2, 6], "{kind:?}: closures");

    // A failed statement leaves only a rollback, whatever the backend would allow.
    let mut tx = db.begin().await.unwrap();
    tx.execute(INSERT, vec![7.into(), 0.into()]).await.unwrap();
    let dup = tx
        .execute(INSERT, vec![1.into(), 0.into()])
        .await
        .unwrap_err();
    assert_eq!(dup.kind(), ErrorKind::UniqueViolation, "{kind:?}: {dup:?}");
    assert_eq!(dup.http_status(), 409);
    let after = tx
        .execute(INSERT, vec![8.into(), 0.into()])
        .await
        .unwrap_err();
    assert!(
        matches!(&after, DbError::Refused(m) if m.contains("can only roll back")),
        "{kind:?}: {after:?}"
    );
    let commit = tx.commit().await.unwrap_err();
    assert!(
        matches!(&commit, DbError::Refused(m) if m.contains("rolled back")),
        "{kind:?}: {commit:?}"
    );
    assert_eq!(
        ids(db).await,
        [1, 2, 6],
        "{kind:?}: nothing of the failed one"
    );

    // ...unless a savepoint mends it.
    let mut tx = db.begin().await.unwrap();
    tx.execute_batch("SAVEPOINT before_dup").await.unwrap();
    tx.execute(INSERT, vec![1.into(), 0.into()])
        .await
        .unwrap_err();
    tx.execute_batch("ROLLBACK TO SAVEPOINT before_dup")
        .await
        .unwrap();
    tx.execute(INSERT, vec![9.into(), 0.into()]).await.unwrap();
    tx.commit().await.unwrap();
    assert_eq!(ids(db).await, [1, 2, 6, 9], "{kind:?}: savepoint");

    // The other constraint kinds, with the names of their constraints.
    let check = db
        .execute("UPDATE acct SET balance = -1 WHERE id = 1", vec![])
        .await
        .unwrap_err();
    assert_eq!(
        check.kind(),
        ErrorKind::CheckViolation,
        "{kind:?}: {check:?}"
    );
    assert!(
        check
            .constraint()
            .is_some_and(|c| c.contains("balance_not_negative")),
        "{kind:?}: {check:?}"
    );
    let null = db
        .execute(INSERT, vec![10.into(), Value::Null])
        .await
        .unwrap_err();
    assert_eq!(
        null.kind(),
        ErrorKind::NotNullViolation,
        "{kind:?}: {null:?}"
    );
    let fk = db
        .execute(
            "INSERT INTO entry (id, acct, note) VALUES ($1, $2, $3)",
            vec![1.into(), 99.into(), "x".into()],
        )
        .await
        .unwrap_err();
    assert_eq!(
        fk.kind(),
        ErrorKind::ForeignKeyViolation,
        "{kind:?}: {fk:?}"
    );
    if kind != DbKind::Sqlite {
        assert_eq!(fk.constraint(), Some("entry_acct"), "{kind:?}: {fk:?}");
    }
    for e in [&dup, &check, &null, &fk] {
        assert!(
            !e.client_body().contains("acct"),
            "{kind:?}: {}",
            e.client_body()
        );
    }

    // Read-only: a write fails.
    let mut tx = db
        .begin_with(&TxOptions::default().read_only())
        .await
        .unwrap();
    assert_eq!(
        tx.query("SELECT id FROM acct", vec![]).await.unwrap().len(),
        4
    );
    tx.execute(INSERT, vec![11.into(), 0.into()])
        .await
        .unwrap_err();
    tx.rollback().await.unwrap();
    // ...and the connection writes again afterwards.
    let mut tx = db.begin().await.unwrap();
    tx.execute(INSERT, vec![12.into(), 0.into()]).await.unwrap();
    tx.rollback().await.unwrap();

    // Isolation: a repeatable read does not see a row committed meanwhile. (SQLite's
    // writers wait for each other, so there the reader is a read-only transaction, which
    // keeps its snapshot too.)
    let options = match kind {
        DbKind::Sqlite => TxOptions::default().read_only(),
        _ => TxOptions::default().isolation(Isolation::RepeatableRead),
    };
    let mut tx = db.begin_with(&options).await.unwrap();
    let before = tx.query("SELECT id FROM acct", vec![]).await.unwrap().len();
    db.execute(INSERT, vec![13.into(), 0.into()]).await.unwrap();
    let again = tx.query("SELECT id FROM acct", vec![]).await.unwrap().len();
    assert_eq!(before, again, "{kind:?}: a snapshot");
    tx.commit().await.unwrap();
    assert_eq!(count(db).await, before as i64 + 1);

    // What a transaction refuses: its own end, behind its back.
    let mut tx = db.begin().await.unwrap();
    let err = tx.execute("COMMIT", vec![]).await.unwrap_err();
    assert!(
        matches!(&err, DbError::Refused(m) if m.contains("tx.commit()")),
        "{kind:?}: {err:?}"
    );
    tx.rollback().await.unwrap();
    // And the shared connection: a transaction of its own.
    for sql in ["BEGIN", "COMMIT", "ROLLBACK"] {
        let err = db.execute(sql, vec![]).await.unwrap_err();
        assert!(
            matches!(&err, DbError::Refused(m) if m.contains("db.transaction()")),
            "{kind:?} {sql}: {err:?}"
        );
    }

    // Serialization failures are run again: 6 increments race, each reading then writing
    // the same row, and every one lands. Each waits, after its read, until two have read (on
    // a busy machine, connections opening one by one could otherwise let each transaction end
    // before the next begins, and nothing would conflict); SQLite runs one at a time.
    let attempts = Cell::new(0);
    let reads = Cell::new(0);
    let options = TxOptions::default()
        .isolation(Isolation::Serializable)
        .retries(30);
    let increments = (0..6).map(|_| {
        db.transaction_with(
            options.clone(),
            async |tx: &mut Transaction| -> Result<(), DbError> {
                attempts.set(attempts.get() + 1);
                let row = tx
                    .query_one("SELECT balance FROM acct WHERE id = 1", vec![])
                    .await?;
                let balance: i64 = row.expect("account 1").get(0)?;
                reads.set(reads.get() + 1);
                let waited = Instant::now();
                while kind != DbKind::Sqlite && reads.get() < 2 {
                    assert!(
                        waited.elapsed() < Duration::from_secs(20),
                        "{kind:?}: one read"
                    );
                    tokio::time::sleep(Duration::from_millis(1)).await;
                }
                tx.execute(
                    "UPDATE acct SET balance = $1 WHERE id = 1",
                    vec![(balance + 1).into()],
                )
                .await?;
                Ok(())
            },
        )
    });
    for result in futures_util::future::join_all(increments).await {
        result.unwrap_or_else(|e| panic!("{kind:?}: {e:?}"));
    }
    let row = db
        .query_one("SELECT balance FROM acct WHERE id = 1", vec![])
        .await
        .unwrap()
        .unwrap();
    assert_eq!(row.get::<i64>(0).unwrap(), 106, "{kind:?}: every increment");
    if kind != DbKind::Sqlite {
        assert!(attempts.get() > 6, "{kind:?}: no increment was run again");
    }
}

#[test]
fn transactions_on_postgresql() {
    let server = Postgres::start().unwrap();
    let db = Db::open(&server.url(), DbOptions::default()).unwrap();
    worker_runtime().block_on(scenarios(&db));
}

#[test]
fn transactions_on_mariadb() {
    let server = MariaDb::start().unwrap();
    let db = Db::open(&server.url(), DbOptions::default()).unwrap();
    worker_runtime().block_on(scenarios(&db));
}

#[test]
fn transactions_on_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite:{}", dir.path().join("t.sqlite").display());
    let db = Db::open(&url, DbOptions::default()).unwrap();
    worker_runtime().block_on(scenarios(&db));
}

/// Pipelined runs stand alone on every backend: a key already taken fails its own run, and
/// every run told `Ok` is stored (on PostgreSQL, where `query_each` is one transaction, the
/// same lists as one batch store nothing).
async fn pipelined_writes(db: &Db) {
    db.execute_batch("CREATE TABLE p (id INT PRIMARY KEY); INSERT INTO p (id) VALUES (2)")
        .await
        .unwrap();
    let insert = "INSERT INTO p (id) VALUES ($1)";
    let lists = || [1, 2, 3, 4].map(|i| vec![Value::from(i)]).to_vec();
    let runs = db.query_pipelined(insert, lists()).await.unwrap();
    assert_eq!(runs.len(), 4);
    for i in [0, 2, 3] {
        assert!(
            runs[i].as_ref().is_ok_and(|rows| rows.is_empty()),
            "{runs:?}"
        );
    }
    let taken = runs[1].as_ref().unwrap_err();
    assert_eq!(taken.kind(), ErrorKind::UniqueViolation, "{taken:?}");
    let stored = db
        .query("SELECT id FROM p ORDER BY id", vec![])
        .await
        .unwrap();
    let stored: Vec<i64> = stored.iter().map(|r| r.get(0).unwrap()).collect();
    assert_eq!(stored, [1, 2, 3, 4]);
    if db.kind() == DbKind::Postgres {
        db.execute_batch("DELETE FROM p WHERE id <> 2")
            .await
            .unwrap();
        let err = db.query_each(insert, lists()).await.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::UniqueViolation, "{err:?}");
        let left = db.query("SELECT id FROM p", vec![]).await.unwrap();
        assert_eq!(
            left.len(),
            1,
            "a failed batch stored {} rows",
            left.len() - 1
        );
    }
    assert!(db.query_pipelined(insert, vec![]).await.unwrap().is_empty());
}

#[test]
fn pipelined_runs_fail_alone_and_each_ok_is_stored_on_every_backend() {
    let server = Postgres::start().unwrap();
    let db = Db::open(&server.url(), DbOptions::default()).unwrap();
    worker_runtime().block_on(pipelined_writes(&db));
    let server = MariaDb::start().unwrap();
    let db = Db::open(&server.url(), DbOptions::default()).unwrap();
    worker_runtime().block_on(pipelined_writes(&db));
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite:{}", dir.path().join("p.sqlite").display());
    let db = Db::open(&url, DbOptions::default()).unwrap();
    worker_runtime().block_on(pipelined_writes(&db));
}

/// Hundreds of concurrent callers on one worker's PostgreSQL pool: single INSERTs on the
/// shared pipelined connection, transactions that commit, roll back or are dropped, and
/// misuses (BEGIN, SET, a batch with its own transaction) that must be refused. Every id a
/// caller was told is written must be in the table, and nothing else.
#[test]
fn no_write_reported_done_is_lost_on_the_shared_connection() {
    let server = Postgres::start().unwrap();
    let db = Db::open(&server.url(), DbOptions::default()).unwrap();
    worker_runtime().block_on(async {
        db.execute_batch("CREATE TABLE w (id int PRIMARY KEY)")
            .await
            .unwrap();
        let committed = std::cell::RefCell::new(BTreeSet::new());
        let refused = Cell::new(0);
        let insert = "INSERT INTO w (id) VALUES ($1)";
        let work = (0..600i64).map(|i| {
            let (db, committed, refused) = (&db, &committed, &refused);
            async move {
                match i % 6 {
                    // A single statement on the shared connection.
                    0 | 1 => {
                        db.execute(insert, vec![i.into()]).await.unwrap();
                        committed.borrow_mut().insert(i);
                    }
                    // A transaction of two rows that commits.
                    2 => {
                        let mut tx = db.begin().await.unwrap();
                        tx.execute(insert, vec![i.into()]).await.unwrap();
                        tx.execute(insert, vec![(i + 10_000).into()]).await.unwrap();
                        tx.commit().await.unwrap();
                        committed.borrow_mut().extend([i, i + 10_000]);
                    }
                    // One that rolls back, and one that is dropped.
                    3 => {
                        let mut tx = db.begin().await.unwrap();
                        tx.execute(insert, vec![i.into()]).await.unwrap();
                        if i % 12 == 3 {
                            tx.rollback().await.unwrap();
                        }
                    }
                    // Misuse: a transaction opened on the shared connection.
                    4 => {
                        let sql = match i % 18 {
                            4 => "BEGIN",
                            10 => "SET search_path TO pg_catalog",
                            _ => "START TRANSACTION",
                        };
                        match db.execute(sql, vec![]).await {
                            Err(DbError::Refused(_)) => refused.set(refused.get() + 1),
                            other => panic!("{sql}: {other:?}"),
                        }
                        if db.execute(insert, vec![i.into()]).await.is_ok() {
                            committed.borrow_mut().insert(i);
                        }
                    }
                    // Misuse: a batch that holds its own transaction.
                    _ => {
                        let batch = format!("BEGIN; INSERT INTO w (id) VALUES ({i}); COMMIT");
                        match db.execute_batch(&batch).await {
                            Err(DbError::Refused(_)) => refused.set(refused.get() + 1),
                            Ok(()) => {
                                committed.borrow_mut().insert(i);
                            }
                            Err(e) => panic!("{batch}: {e:?}"),
                        }
                    }
                }
            }
        });
        futures_util::future::join_all(work).await;
        let rows = db.query("SELECT id FROM w", vec![]).await.unwrap();
        let stored: BTreeSet<i64> = rows.iter().map(|r| r.get(0).unwrap()).collect();
        let committed = committed.into_inner();
        let lost: Vec<_> = committed.difference(&stored).collect();
        let phantom: Vec<_> = stored.difference(&committed).collect();
        assert!(lost.is_empty(), "told Ok, not stored: {lost:?}");
        assert!(phantom.is_empty(), "stored, not told Ok: {phantom:?}");
        assert_eq!(refused.get(), 200, "every misuse refused");
        assert_eq!(committed.len(), 200 + 200 + 100);
    });
}

/// A MySQL procedure that commits ends the transaction it was called in: the statement says
/// so, and the transaction can only roll back (what followed would run outside it).
#[test]
fn a_statement_that_ends_a_mysql_transaction_is_noticed() {
    let server = MariaDb::start().unwrap();
    let db = Db::open(&server.url(), DbOptions::default()).unwrap();
    worker_runtime().block_on(async {
        db.execute_batch(schema(DbKind::Mysql)).await.unwrap();
        db.execute_batch("CREATE PROCEDURE sneaky() BEGIN COMMIT; END")
            .await
            .unwrap();
        let mut tx = db.begin().await.unwrap();
        tx.execute(INSERT, vec![1.into(), 0.into()]).await.unwrap();
        let err = tx.execute("CALL sneaky()", vec![]).await.unwrap_err();
        assert!(
            matches!(&err, DbError::Refused(m) if m.contains("ended the transaction")),
            "{err:?}"
        );
        let after = tx.execute(INSERT, vec![2.into(), 0.into()]).await;
        assert!(after.is_err(), "nothing runs outside the transaction");
        assert!(tx.commit().await.is_err());
        assert_eq!(
            ids(&db).await,
            [1],
            "the procedure committed row 1; row 2 never ran"
        );
    });
}

/// A statement of an SQLite transaction whose caller gives up (its own timeout drops the
/// call) is interrupted, and SQLite rolls the whole transaction back: what the transaction
/// runs next is refused instead of running outside it, and nothing of it is kept.
#[test]
fn an_interrupted_sqlite_transaction_refuses_what_would_run_outside_it() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite:{}", dir.path().join("t.sqlite").display());
    let db = Db::open(&url, DbOptions::default()).unwrap();
    worker_runtime().block_on(async {
        db.execute_batch(schema(DbKind::Sqlite)).await.unwrap();
        let mut tx = db.begin().await.unwrap();
        tx.execute(INSERT, vec![1.into(), 0.into()]).await.unwrap();
        // A write that would run for long (an interrupted read does not end the transaction).
        let slow = "INSERT INTO acct (id, balance) WITH RECURSIVE c(x) AS \
                    (SELECT 10 UNION ALL SELECT x + 1 FROM c WHERE x < 100000000) \
                    SELECT x, 0 FROM c";
        let gave_up =
            tokio::time::timeout(Duration::from_millis(200), tx.execute(slow, vec![])).await;
        assert!(gave_up.is_err(), "the caller's timeout fired");
        let err = tx
            .execute(INSERT, vec![2.into(), 0.into()])
            .await
            .unwrap_err();
        assert!(
            matches!(&err, DbError::Refused(m) if m.contains("transaction ended")),
            "{err:?}"
        );
        assert!(tx.commit().await.is_err());
        assert!(
            ids(&db).await.is_empty(),
            "nothing of the transaction is kept"
        );
    });
}
