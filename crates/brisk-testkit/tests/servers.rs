//! The database servers of `brisk_testkit::servers`, checked with each server's own CLI client
//! over TCP with the credentials of its URL: they start, answer, die on `kill()` (the port then
//! refuses connections), come back on `start_again()` with their data, and are gone once
//! dropped.

use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use brisk_testkit::*;

/// Runs a client and returns its standard output; panics with its standard error on failure.
fn run(cmd: &mut Command) -> String {
    let out = cmd.output().unwrap_or_else(|e| panic!("run {cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?} failed ({}): {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn refuses(port: u16) -> bool {
    TcpStream::connect(("127.0.0.1", port))
        .is_err_and(|e| e.kind() == std::io::ErrorKind::ConnectionRefused)
}

/// Whether a process with this pid still runs (not even a zombie counts).
fn running(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
        stat.rsplit(')')
            .next()
            .is_some_and(|s| !s.trim_start().starts_with('Z'))
    })
}

/// Children of `pid` right now (PostgreSQL's backends and helpers).
fn children(pid: u32) -> Vec<u32> {
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|p| {
            std::fs::read_to_string(format!("/proc/{p}/stat")).is_ok_and(|stat| {
                stat.rsplit(')')
                    .next()
                    .and_then(|s| s.split_whitespace().nth(1))
                    == Some(&pid.to_string())
            })
        })
        .collect()
}

/// `scheme://user:password@host:port/db` into its parts.
fn url_parts(url: &str) -> (String, String, String, u16, String) {
    let rest = url.split_once("://").unwrap().1;
    let (auth, rest) = rest.split_once('@').unwrap();
    let (user, password) = auth.split_once(':').unwrap();
    let (host_port, db) = rest.split_once('/').unwrap();
    let (host, port) = host_port.split_once(':').unwrap();
    (
        user.into(),
        password.into(),
        host.into(),
        port.parse().unwrap(),
        db.into(),
    )
}

/// Asserts that the server is gone once dropped: its pid (and its children's), its port, its
/// directory.
fn assert_gone(pids: &[u32], port: u16, dir: &Path) {
    for &pid in pids {
        assert!(!running(pid), "process {pid} still runs after drop");
    }
    assert!(refuses(port), "port {port} still accepts after drop");
    assert!(!dir.exists(), "{} still exists after drop", dir.display());
}

fn timed<T>(what: &str, f: impl FnOnce() -> T) -> T {
    let start = Instant::now();
    let v = f();
    eprintln!("{what}: {:?}", start.elapsed());
    v
}

#[test]
fn postgres_answers_survives_a_kill_and_dies_on_drop() {
    let mut pg = timed("Postgres::start", Postgres::start).unwrap();
    let url = pg.url();
    let (user, password, host, port, db) = url_parts(&url);
    assert_eq!(
        (&*user, &*password, &*host, port, &*db),
        ("brisk", "brisk", "127.0.0.1", pg.port(), "brisk")
    );
    let psql_path = pg.program("psql");
    let psql = |conninfo: &str, sql: &str| -> Command {
        let mut cmd = Command::new(&psql_path);
        cmd.args([
            "-X",
            "-q",
            "-A",
            "-t",
            "-v",
            "ON_ERROR_STOP=1",
            "-d",
            conninfo,
            "-c",
            sql,
        ]);
        cmd
    };
    assert_eq!(run(&mut psql(&url, "select 1")), "1\n");
    assert_eq!(run(&mut psql(&url, "select current_user")), "brisk\n");
    // TCP connections need the password.
    let wrong = url.replace("brisk:brisk@", "brisk:wrong@");
    assert!(!psql(&wrong, "select 1").output().unwrap().status.success());
    run(&mut psql(
        &url,
        "create table t (v text); insert into t values ('kept')",
    ));

    let pid = pg.pid().unwrap();
    pg.kill();
    assert!(refuses(pg.port()), "killed postgres still accepts");
    assert!(!running(pid));
    assert!(pg.pid().is_none());
    assert!(psql(&url, "select 1").output().unwrap().status.code() != Some(0));

    timed("Postgres::start_again", || pg.start_again()).unwrap();
    // A committed row survives a kill.
    assert_eq!(run(&mut psql(&url, "select v from t")), "kept\n");
    timed("Postgres::restart", || pg.restart()).unwrap();
    assert_eq!(pg.sql("select count(*) from t").unwrap(), "1\n");

    // A client keeps a backend (a child process of its own process group) while it is dropped.
    let pid = pg.pid().unwrap();
    let mut pids = children(pid);
    assert!(!pids.is_empty(), "postgres has no child processes");
    pids.push(pid);
    let (port, dir) = (pg.port(), pg.dir().to_path_buf());
    let shmid = shared_memory_id(&dir);
    assert!(shm_ids().contains(&shmid));
    drop(pg);
    assert_gone(&pids, port, &dir);
    assert!(
        !shm_ids().contains(&shmid),
        "the shared memory segment {shmid} outlived the server"
    );
}

/// The id of a running PostgreSQL's System V shared memory segment (`postmaster.pid`, line 7).
fn shared_memory_id(dir: &Path) -> String {
    let pid_file = std::fs::read_to_string(dir.join("data/postmaster.pid")).unwrap();
    let line = pid_file.lines().nth(6).unwrap();
    line.split_whitespace().nth(1).unwrap().to_owned()
}

/// Ids of every System V shared memory segment.
fn shm_ids() -> Vec<String> {
    let table = std::fs::read_to_string("/proc/sysvipc/shm").unwrap();
    table
        .lines()
        .skip(1)
        .filter_map(|l| l.split_whitespace().nth(1).map(str::to_owned))
        .collect()
}

#[test]
fn mariadb_answers_survives_a_kill_and_dies_on_drop() {
    let mut db = timed("MariaDb::start", MariaDb::start).unwrap();
    let url = db.url();
    let (user, password, host, port, name) = url_parts(&url);
    assert!(url.starts_with("mysql://"));
    assert_eq!(port, db.port());
    let mariadb = |password: &str, sql: &str| -> Command {
        let mut cmd = Command::new("mariadb");
        cmd.args([
            "--no-defaults",
            "--protocol=tcp",
            "-h",
            &host,
            "-P",
            &port.to_string(),
        ])
        .args([
            "-u",
            &user,
            &format!("-p{password}"),
            &name,
            "-N",
            "-B",
            "-e",
            sql,
        ]);
        cmd
    };
    assert_eq!(run(&mut mariadb(&password, "select 1")), "1\n");
    assert_eq!(
        run(&mut mariadb(&password, "select current_user()")),
        "brisk@%\n"
    );
    assert!(!mariadb("wrong", "select 1")
        .output()
        .unwrap()
        .status
        .success());
    run(&mut mariadb(
        &password,
        "create table t (v text) engine=InnoDB; insert into t values ('kept')",
    ));

    let pid = db.pid().unwrap();
    db.kill();
    assert!(refuses(port), "killed mariadbd still accepts");
    assert!(!running(pid));

    timed("MariaDb::start_again", || db.start_again()).unwrap();
    assert_eq!(run(&mut mariadb(&password, "select v from t")), "kept\n");
    timed("MariaDb::restart", || db.restart()).unwrap();
    assert_eq!(db.sql("select count(*) from brisk.t").unwrap(), "1\n");

    let pid = db.pid().unwrap();
    let dir = db.dir().to_path_buf();
    drop(db);
    assert_gone(&[pid], port, &dir);
}

fn redis_cli(url: &str, args: &[&str]) -> String {
    run(Command::new("redis-cli").args(["-u", url]).args(args))
        .trim_end()
        .to_owned()
}

#[test]
fn redis_without_persistence_answers_forgets_on_a_kill_and_dies_on_drop() {
    let mut redis = timed("Redis::start", Redis::start).unwrap();
    let url = redis.url();
    assert_eq!(url, format!("redis://127.0.0.1:{}", redis.port()));
    assert_eq!(redis_cli(&url, &["ping"]), "PONG");
    assert_eq!(redis_cli(&url, &["set", "k", "v"]), "OK");

    let pid = redis.pid().unwrap();
    redis.kill();
    assert!(refuses(redis.port()), "killed redis still accepts");
    assert!(!running(pid));

    timed("Redis::start_again", || redis.start_again()).unwrap();
    assert_eq!(redis_cli(&url, &["ping"]), "PONG");
    assert_eq!(
        redis_cli(&url, &["get", "k"]),
        "",
        "nothing persisted, yet k is back"
    );

    let pid = redis.pid().unwrap();
    let (port, dir) = (redis.port(), redis.dir().to_path_buf());
    drop(redis);
    assert_gone(&[pid], port, &dir);
}

#[test]
fn redis_with_appendonly_keeps_a_key_across_a_kill() {
    let mut redis = Redis::start_with(&["--appendonly", "yes"]).unwrap();
    let url = redis.url();
    assert_eq!(redis_cli(&url, &["set", "k", "v"]), "OK");
    redis.kill();
    assert!(refuses(redis.port()));
    // Left down a while, as a test of a client's retries would.
    std::thread::sleep(Duration::from_millis(200));
    assert!(refuses(redis.port()));
    redis.start_again().unwrap();
    assert_eq!(redis_cli(&url, &["get", "k"]), "v");
    redis.restart().unwrap();
    assert_eq!(redis.cli(&["get", "k"]).unwrap(), "v\n");
    let dir: PathBuf = redis.dir().to_path_buf();
    redis.stop();
    assert!(!dir.exists());
}

#[test]
fn a_server_dies_with_a_test_that_panics() {
    let (tx, rx) = std::sync::mpsc::channel();
    let test = std::thread::spawn(move || {
        let redis = Redis::start().unwrap();
        tx.send((redis.pid().unwrap(), redis.port())).unwrap();
        panic!("the test failed");
    });
    assert!(test.join().is_err());
    let (pid, port) = rx.recv().unwrap();
    assert!(!running(pid), "redis {pid} outlived its panicking test");
    assert!(refuses(port));
}

#[test]
fn a_server_that_fails_to_start_says_why() {
    let err = Redis::start_with(&["--no-such-option", "x"])
        .err()
        .expect("redis-server started with an unknown option");
    let msg = format!("{err:#}");
    assert!(msg.contains("exited during startup"), "{msg}");
    // The tail of the server's log, where it says what is wrong.
    assert!(msg.contains("no-such-option"), "{msg}");
}
