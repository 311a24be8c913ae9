//! `brisk::db::Migrations` on every backend: files applied in order and once, even by two
//! runs at the same time; a failing file names its statement and the server's reason and
//! leaves nothing behind (where the backend has transactional DDL); an edited file and a
//! migration this build does not have are refused; `status` tells applied, pending and edited.

use std::path::Path;

use brisk::db::{Db, DbKind, DbOptions, MigrateError, MigrationState, Migrations};
use brisk_testkit::*;

fn write(dir: &Path, name: &str, sql: &str) {
    std::fs::write(dir.join(name), sql).unwrap();
}

/// Column type of an id per backend.
fn int(kind: DbKind) -> &'static str {
    match kind {
        DbKind::Mysql => "INT",
        _ => "integer",
    }
}

async fn tables(db: &Db) -> Vec<String> {
    let sql = match db.kind() {
        DbKind::Sqlite => "SELECT name FROM sqlite_master WHERE type = 'table' AND name LIKE 'm\\_%' ESCAPE '\\' ORDER BY name",
        DbKind::Postgres => "SELECT table_name::text FROM information_schema.tables WHERE table_schema = 'public' AND table_name LIKE 'm\\_%' ORDER BY 1",
        DbKind::Mysql => "SELECT table_name FROM information_schema.tables WHERE table_schema = DATABASE() AND table_name LIKE 'm\\_%' ORDER BY 1",
    };
    let rows = db.query(sql, vec![]).await.unwrap();
    rows.iter().map(|r| r.get(0).unwrap()).collect()
}

async fn scenarios(first: Db, second: Db) {
    let kind = first.kind();
    let dir = tempfile::tempdir().unwrap();
    let int = int(kind);
    // No IF NOT EXISTS: a file applied twice would fail.
    write(dir.path(), "0001_first.sql", &format!("CREATE TABLE m_one (id {int} PRIMARY KEY);\n-- a comment\nINSERT INTO m_one VALUES (1);"));
    write(dir.path(), "0002_second.sql", &format!("CREATE TABLE m_two (id {int} PRIMARY KEY, note TEXT); INSERT INTO m_two VALUES (1, 'a;b');"));
    let migrations = Migrations::from_dir(dir.path()).unwrap();

    // Two runs at once, as two instances starting together: each file once in all.
    let (a, b) = tokio::join!(migrations.run(&first), migrations.run(&second));
    let (a, b) = (a.unwrap(), b.unwrap());
    let mut applied = [a, b].concat();
    applied.sort();
    assert_eq!(applied, ["0001_first.sql", "0002_second.sql"], "{kind:?}");
    assert_eq!(tables(&first).await, ["m_one", "m_two"]);
    assert!(
        migrations.run(&first).await.unwrap().is_empty(),
        "{kind:?}: nothing left"
    );

    // A failing file names its statement and the server's reason; nothing of it stays (but
    // on MySQL, whose DDL commits as it runs), and it is not recorded.
    write(
        dir.path(),
        "0003_broken.sql",
        &format!(
            "CREATE TABLE m_three (id {int});\nSELEC nothing;\nCREATE TABLE m_four (id {int});"
        ),
    );
    let migrations = Migrations::from_dir(dir.path()).unwrap();
    let err = migrations.run(&first).await.unwrap_err();
    let MigrateError::Failed {
        file,
        index,
        statement,
        error,
    } = &err
    else {
        panic!("{kind:?}: {err:?}");
    };
    assert_eq!(
        (file.as_str(), *index, statement.as_str()),
        ("0003_broken.sql", 2, "SELEC nothing")
    );
    assert!(
        error.code().is_some(),
        "{kind:?}: the server's reason: {error:?}"
    );
    let text = err.to_string();
    assert!(
        text.contains("0003_broken.sql") && text.contains("SELEC nothing"),
        "{text}"
    );
    let left = tables(&first).await;
    match kind {
        DbKind::Mysql => assert_eq!(left, ["m_one", "m_three", "m_two"]),
        _ => assert_eq!(left, ["m_one", "m_two"], "{kind:?}: rolled back"),
    }
    let states: Vec<MigrationState> = migrations
        .status(&first)
        .await
        .unwrap()
        .into_iter()
        .map(|(_, s)| s)
        .collect();
    assert_eq!(
        states,
        [
            MigrationState::Applied,
            MigrationState::Applied,
            MigrationState::Pending
        ]
    );
    std::fs::remove_file(dir.path().join("0003_broken.sql")).unwrap();

    // A file edited after it ran is refused, and status says so.
    write(
        dir.path(),
        "0001_first.sql",
        &format!("CREATE TABLE m_one (id {int} PRIMARY KEY);"),
    );
    let edited = Migrations::from_dir(dir.path()).unwrap();
    let err = edited.run(&first).await.unwrap_err();
    assert!(
        matches!(&err, MigrateError::Edited { file, .. } if file == "0001_first.sql"),
        "{err:?}"
    );
    let (_, state) = &edited.status(&first).await.unwrap()[0];
    assert_eq!(*state, MigrationState::Edited);

    // A migration the database has and this build does not: refused, unless ignored.
    std::fs::remove_file(dir.path().join("0001_first.sql")).unwrap();
    let older = Migrations::from_dir(dir.path()).unwrap();
    let err = older.run(&first).await.unwrap_err();
    assert!(
        matches!(&err, MigrateError::Unknown { version: 1, .. }),
        "{err:?}"
    );
    assert!(older
        .ignore_unknown(true)
        .run(&first)
        .await
        .unwrap()
        .is_empty());
}

#[test]
fn migrations_on_postgresql() {
    let server = Postgres::start().unwrap();
    let open = || Db::open(&server.url(), DbOptions::default()).unwrap();
    worker_runtime().block_on(scenarios(open(), open()));
}

#[test]
fn migrations_on_mariadb() {
    let server = MariaDb::start().unwrap();
    let open = || Db::open(&server.url(), DbOptions::default()).unwrap();
    worker_runtime().block_on(scenarios(open(), open()));
}

#[test]
fn migrations_on_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite:{}", dir.path().join("m.sqlite").display());
    let open = || Db::open(&url, DbOptions::default()).unwrap();
    worker_runtime().block_on(scenarios(open(), open()));
}

#[test]
fn bad_file_names_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "create_rooms.sql", "SELECT 1");
    let err = Migrations::from_dir(dir.path()).unwrap_err();
    assert!(
        matches!(&err, MigrateError::BadFile { file, .. } if file == "create_rooms.sql"),
        "{err:?}"
    );
    std::fs::remove_file(dir.path().join("create_rooms.sql")).unwrap();
    write(dir.path(), "1_a.sql", "");
    write(dir.path(), "0001_b.sql", "");
    let err = Migrations::from_dir(dir.path()).unwrap_err();
    assert!(err.to_string().contains("version 1"), "{err}");
}
