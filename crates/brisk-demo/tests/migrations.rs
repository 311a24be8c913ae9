//! The demo's migrations at start (`App::migrate`): two instances of two workers each
//! starting together on one database apply each file once (the chat's `CREATE TABLE rooms`
//! has no `IF NOT EXISTS`, so a second application would fail a start), and a migration that
//! fails fails the start, in the foreground and with `start -d`, naming its file, its
//! statement and the server's reason, with no worker started.

mod common;

use std::process::Command;
use std::time::Duration;

use brisk_testkit::*;
use common::*;

/// A demo instance and its run directory, removed after the instance is killed (a tuple
/// drops its fields in order).
type Instance = (ServerProcess, TempDir);

/// Starts two demo instances against `url` at the same moment and waits for both.
fn two_at_once(url: &str) -> (Instance, Instance) {
    let spawn = || {
        let (mut args, _) = demo_args(2);
        args.extend(["--database".to_string(), url.to_string()]);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let run_dir = temp_dir("run");
        let server = ServerProcess::spawn(DEMO, &args, run_dir.path().to_path_buf()).unwrap();
        (server, run_dir)
    };
    let (mut a, mut b) = (spawn(), spawn());
    a.0.wait_workers(8, Duration::from_secs(30)).unwrap();
    b.0.wait_workers(8, Duration::from_secs(30)).unwrap();
    (a, b)
}

#[test]
fn two_instances_starting_together_on_postgresql_apply_each_migration_once() {
    let pg = Postgres::start().unwrap();
    let (a, b) = two_at_once(&pg.url());
    let logs = a.0.log() + &b.0.log();
    assert_eq!(
        logs.matches("migration 0002_chat.sql applied").count(),
        1,
        "{logs}"
    );
    let versions = pg
        .sql("SELECT string_agg(version::text, ',' ORDER BY version) FROM brisk_migrations")
        .unwrap();
    assert_eq!(versions.trim(), "1,2");
}

#[test]
fn two_instances_starting_together_on_mariadb_apply_each_migration_once() {
    let db = MariaDb::start().unwrap();
    let (a, b) = two_at_once(&db.url());
    let logs = a.0.log() + &b.0.log();
    assert_eq!(
        logs.matches("migration 0002_chat.sql applied").count(),
        1,
        "{logs}"
    );
    let versions = db
        .sql("SELECT GROUP_CONCAT(version ORDER BY version) FROM brisk.brisk_migrations")
        .unwrap();
    assert_eq!(versions.trim(), "1,2");
}

#[test]
fn a_failing_migration_fails_the_start_with_its_file_statement_and_reason() {
    let pg = Postgres::start().unwrap();
    // A table of that name already: the chat's migration creates its rooms, then cannot
    // create its messages.
    pg.sql("CREATE TABLE messages (x int); GRANT ALL ON messages TO brisk")
        .unwrap();
    let (mut args, http) = demo_args(2);
    args.extend(["--database".to_string(), pg.url()]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();

    // In the foreground.
    let run_dir = temp_dir("run");
    let mut server = ServerProcess::spawn(DEMO, &args, run_dir.path().to_path_buf()).unwrap();
    assert!(
        !server.wait_exit(Duration::from_secs(30)).unwrap(),
        "the start failed"
    );
    let log = server.log();
    for words in [
        "the app did not start",
        "0002_chat.sql",
        "statement 2",
        "CREATE TABLE messages",
        "42P07",
        "already exists",
    ] {
        assert!(log.contains(words), "{words:?} in:\n{log}");
    }
    // A worker's lines carry its span (`worker{id=0 server=…}`; the master's warning about
    // the open-files limit talks of workers without being one), and the master's start line
    // comes once they are ready.
    assert!(!log.contains("worker{"), "no worker started:\n{log}");
    assert!(
        !log.contains("started: master pid"),
        "no worker started:\n{log}"
    );
    assert!(
        std::net::TcpStream::connect(("127.0.0.1", http)).is_err(),
        "nothing listens"
    );
    // What ran before the failure stays applied; the failed file left nothing.
    let versions = pg
        .sql("SELECT string_agg(version::text, ',') FROM brisk_migrations")
        .unwrap();
    assert_eq!(versions.trim(), "1");
    let rooms = pg.sql("SELECT to_regclass('rooms') IS NULL").unwrap();
    assert_eq!(
        rooms.trim(),
        "t",
        "the file's first statement was rolled back"
    );

    // In the background: `start -d` says the same and exits non-zero.
    let run_dir = temp_dir("run");
    let out = Command::new(DEMO)
        .args(&args)
        .args([
            "--run-dir",
            &run_dir.path().display().to_string(),
            "start",
            "-d",
        ])
        .env_remove("DATABASE_URL")
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{said}");
    assert!(
        said.contains("0002_chat.sql") && said.contains("already exists"),
        "{said}"
    );
    let _guard = RunDirGuard(run_dir.path().to_path_buf());
}
