//! The TechEmpower test set of the demo, checked against the published rules over a real
//! database: SQLite by default (a file under the run directory), and the same checks against
//! a real PostgreSQL server started for the test.

use std::time::Duration;

use brisk::db::{Db, DbOptions};
use brisk_testkit::*;
use serde_json::Value as Json;

mod common;
use common::{get, Demo};

fn demo(database: Option<&str>, workers: usize) -> Demo {
    demo_with(database, workers, &[])
}

fn demo_with(database: Option<&str>, workers: usize, extra: &[&str]) -> Demo {
    let mut args = Vec::new();
    if let Some(url) = database {
        args.extend(["--database", url]);
    }
    args.extend(extra);
    common::demo_with(workers, &args)
}

fn get_json(port: u16, path: &str) -> Json {
    let r = get(port, path);
    assert_eq!(r.status, 200, "{path}: {}", r.text());
    assert_eq!(r.header("content-type"), Some("application/json"), "{path}");
    serde_json::from_slice(&r.body).unwrap_or_else(|e| panic!("{path}: {e}: {}", r.text()))
}

/// A World row as the tests return it: both fields, both in 1..=10000.
fn check_world(w: &Json) -> (i64, i64) {
    let id = w["id"].as_i64().unwrap_or_else(|| panic!("id in {w}"));
    let n = w["randomNumber"]
        .as_i64()
        .unwrap_or_else(|| panic!("randomNumber in {w}"));
    assert!((1..=10_000).contains(&id), "{w}");
    assert!((1..=10_000).contains(&n), "{w}");
    assert_eq!(w.as_object().unwrap().len(), 2, "{w}");
    (id, n)
}

/// Every test of the set, by the rules; `db_url` is the same database as the demo's, read
/// directly to check that updates persisted.
fn every_test_follows_the_rules(d: &Demo, db_url: &str) {
    let port = d.http;
    let plain = get(port, "/plaintext");
    assert_eq!(plain.status, 200);
    assert_eq!(plain.text(), "Hello, World!");
    assert_eq!(plain.header("content-type"), Some("text/plain"));
    for r in [&plain, &get(port, "/db")] {
        assert_eq!(r.header("server"), Some("brisk"));
        assert!(r.header("date").is_some(), "{:?}", r.headers);
    }
    assert_eq!(
        get_json(port, "/json"),
        serde_json::json!({"message": "Hello, World!"})
    );
    check_world(&get_json(port, "/db"));
    // queries / cached-queries: missing, empty, not a number or < 1 give 1 row; > 500, 500.
    for (query, rows) in [
        ("", 1),
        ("?queries=", 1),
        ("?queries=foo", 1),
        ("?queries=0", 1),
        ("?queries=-1", 1),
        ("?queries=20", 20),
        ("?queries=501", 500),
    ] {
        for path in ["/queries", "/updates"] {
            let body = get_json(port, &format!("{path}{query}"));
            let list = body
                .as_array()
                .unwrap_or_else(|| panic!("{path}{query}: {body}"));
            assert_eq!(list.len(), rows, "{path}{query}");
            list.iter().for_each(|w| {
                check_world(w);
            });
        }
        let cached = get_json(
            port,
            &format!("/cached-queries{}", query.replace("queries", "count")),
        );
        assert_eq!(cached.as_array().unwrap().len(), rows, "cached{query}");
    }
    // Updates persist the numbers they return.
    let updated = get_json(port, "/updates?queries=20");
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let db = Db::open(db_url, DbOptions::default()).unwrap();
    rt.block_on(async {
        for w in updated.as_array().unwrap() {
            let (id, n) = check_world(w);
            let row = db
                .query_one(
                    "SELECT randomnumber FROM world WHERE id = $1",
                    vec![id.into()],
                )
                .await
                .unwrap()
                .unwrap();
            assert_eq!(row.get::<i64>(0).unwrap(), n, "world {id} after the update");
        }
    });
    // Fortunes: the 12 rows plus the one added at request time, sorted by message, escaped.
    let f = get(port, "/fortunes");
    assert_eq!(f.status, 200);
    assert_eq!(f.header("content-type"), Some("text/html; charset=utf-8"));
    let html = f.text();
    assert!(
        html.contains("<tr><th>id</th><th>message</th></tr>"),
        "{html}"
    );
    let cells: Vec<&str> = html
        .split("<tr><td>")
        .skip(1)
        .map(|row| {
            row.split("</td><td>")
                .nth(1)
                .unwrap()
                .split("</td>")
                .next()
                .unwrap()
        })
        .collect();
    assert_eq!(cells.len(), 13, "{html}");
    let mut sorted = cells.clone();
    sorted.sort();
    assert_eq!(cells, sorted, "sorted by message");
    assert!(html.contains("<td>0</td><td>Additional fortune added at request time.</td>"));
    assert!(html.contains("フレームワークのベンチマーク"));
    assert!(
        !html.contains("<script>"),
        "the script fortune is escaped: {html}"
    );
    assert!(
        html.contains("&lt;script&gt;") || html.contains("&#60;script&#62;"),
        "{html}"
    );
}

#[test]
fn the_test_set_follows_the_rules_on_the_default_sqlite_database() {
    let d = demo(None, 2);
    let file = d.server.run_dir.join("brisk-demo.sqlite");
    wait_until(
        std::time::Duration::from_secs(10),
        "the SQLite file exists",
        || file.exists(),
    );
    every_test_follows_the_rules(&d, &format!("sqlite:{}", file.display()));
    // /cached-queries came from each worker's query cache: a miss per worker that loaded the
    // table, hits for the rest; `status` shows both.
    let status = d.server.status().unwrap();
    let sum = |field: &str| -> u64 {
        status["workers"]
            .as_array()
            .unwrap()
            .iter()
            .map(|w| w[field].as_u64().unwrap())
            .sum()
    };
    let (hits, misses) = (sum("cache_hits"), sum("cache_misses"));
    assert!((1..=2).contains(&misses), "{misses} misses");
    assert!(hits >= 5, "{hits} hits");
    let table = String::from_utf8(d.server.cli(&["status"]).stdout).unwrap();
    assert!(
        table.contains(&format!("query cache: {hits} hits, {misses} misses")),
        "{table}"
    );
    // The ORM legs are PostgreSQL only, and say so.
    for path in ["/orm/db", "/qb/db"] {
        let orm = get(d.http, path);
        assert_eq!(orm.status, 501, "{}", orm.text());
        assert!(orm.text().contains("postgres://"), "{}", orm.text());
    }
}

#[test]
fn a_database_that_cannot_be_opened_fails_the_start_naming_the_file() {
    let (mut args, _) = common::demo_args(1);
    args.extend([
        "--database".to_string(),
        "sqlite:/nonexistent-dir/brisk.sqlite".into(),
    ]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let run_dir = temp_dir("run");
    let mut server =
        ServerProcess::spawn(common::DEMO, &args, run_dir.path().to_path_buf()).unwrap();
    assert!(!server
        .wait_exit(std::time::Duration::from_secs(30))
        .unwrap());
    let log = server.log();
    assert!(
        log.contains("the app did not start") && log.contains("/nonexistent-dir/brisk.sqlite"),
        "{log}"
    );
}

/// TechEmpower's general rule 7: queries pipelined to PostgreSQL must each end in a `Sync`
/// of their own, so each runs in a transaction of its own. PostgreSQL's log, with the virtual
/// transaction id of each statement, shows it: the 20 SELECTs of `/queries?queries=20` and
/// of `/updates?queries=20` run in 20 transactions (one `Sync` for all would show one).
fn each_query_runs_in_a_transaction_of_its_own(d: &Demo, pg: &Postgres) {
    for sql in [
        "ALTER SYSTEM SET log_statement = 'all'",
        "ALTER SYSTEM SET log_line_prefix = 'vxid=%v '",
        "SELECT pg_reload_conf()",
    ] {
        pg.sql(sql).unwrap();
    }
    let select = "execute b";
    let world = "FROM world WHERE id = $1";
    wait_until(Duration::from_secs(10), "statements are logged", || {
        get_json(d.http, "/db");
        pg.log()
            .lines()
            .any(|l| l.starts_with("vxid=") && l.contains(select) && l.contains(world))
    });
    for path in ["/queries?queries=20", "/updates?queries=20"] {
        let from = pg.log().len();
        assert_eq!(get_json(d.http, path).as_array().unwrap().len(), 20);
        let log = pg.log();
        let transactions: Vec<&str> = log[from..]
            .lines()
            .filter(|l| l.contains(select) && l.contains(world))
            .filter_map(|l| l.strip_prefix("vxid=")?.split(' ').next())
            .collect();
        assert_eq!(transactions.len(), 20, "{path}: {}", &log[from..]);
        let mut apart = transactions.clone();
        apart.sort_unstable();
        apart.dedup();
        assert_eq!(
            apart.len(),
            20,
            "{path}: one transaction each: {transactions:?}"
        );
    }
}

#[test]
fn the_test_set_follows_the_rules_on_postgresql() {
    let pg = Postgres::start().unwrap();
    let d = demo(Some(&pg.url()), 2);
    every_test_follows_the_rules(&d, &pg.url());
    each_query_runs_in_a_transaction_of_its_own(&d, &pg);
    // R3's ORM and query-builder legs answer rows as they are in the table, through sqlx.
    for path in ["/orm/db", "/qb/db"] {
        for _ in 0..5 {
            let world = get_json(d.http, path);
            check_world(&world);
            let in_table = pg
                .sql(&format!(
                    "SELECT randomnumber FROM world WHERE id = {}",
                    world["id"]
                ))
                .unwrap();
            assert_eq!(in_table.trim(), world["randomNumber"].to_string(), "{path}");
        }
    }
}

#[test]
fn the_test_set_follows_the_rules_on_mariadb() {
    let db = MariaDb::start().unwrap();
    let d = demo(Some(&db.url()), 2);
    every_test_follows_the_rules(&d, &db.url());
}

/// PostgreSQL killed while clients keep asking: every request is answered with 503 well within
/// the 3 s connect timeout it would hang for otherwise (none hangs, no worker dies), and
/// service resumes within 5 s of the database returning (the pool's backoff is at most 1 s).
#[test]
fn a_database_killed_under_load_fails_fast_and_service_resumes_when_it_returns() {
    use std::time::{Duration, Instant};
    let mut pg = Postgres::start().unwrap();
    let d = demo(Some(&pg.url()), 2);
    let pids = d.server.worker_pids().unwrap();
    assert_eq!(get(d.http, "/db").status, 200);
    pg.kill();
    for _ in 0..50 {
        let t = Instant::now();
        let r = get(d.http, "/db");
        assert_eq!(r.status, 503, "{}", r.text());
        assert!(
            t.elapsed() < Duration::from_millis(1500),
            "took {:?}",
            t.elapsed()
        );
    }
    pg.start_again().unwrap();
    let back = Instant::now();
    // Back on every worker: ten requests in a row (the kernel spreads them over both
    // workers) all answered.
    wait_until(
        Duration::from_secs(5),
        "every worker answers /db again",
        || (0..10).all(|_| get(d.http, "/db").status == 200),
    );
    eprintln!("service resumed {:?} after the database", back.elapsed());
    // Both workers serve the database again, and neither was replaced.
    for _ in 0..20 {
        assert_eq!(get(d.http, "/queries?queries=5").status, 200);
    }
    assert_eq!(d.server.worker_pids().unwrap(), pids);
}

/// With `--redis`, `/cached-queries` reads the World rows from Redis (filled from the
/// database by the first request); Redis down answers 503 with a JSON error while the
/// database routes keep working, and an emptied Redis is filled again.
#[test]
fn cached_queries_come_from_redis_when_given() {
    use std::time::Duration;
    let mut redis = Redis::start().unwrap();
    let d = demo_with(None, 2, &["--redis", &redis.url()]);
    let rows = get_json(d.http, "/cached-queries?count=20");
    let rows = rows.as_array().unwrap();
    assert_eq!(rows.len(), 20);
    assert_eq!(redis.cli(&["EXISTS", "world:loaded"]).unwrap().trim(), "1");
    // Each row is the database's row, as Redis holds it.
    for w in rows {
        let (id, n) = check_world(w);
        let held = redis.cli(&["GET", &format!("world:{id}")]).unwrap();
        assert_eq!(held.trim(), n.to_string(), "world:{id}");
    }
    redis.kill();
    let r = get(d.http, "/cached-queries?count=3");
    assert_eq!(r.status, 503, "{}", r.text());
    let body: Json = serde_json::from_slice(&r.body).unwrap();
    assert_eq!(body["error"], "the cache is unavailable", "{body}");
    assert_eq!(get(d.http, "/db").status, 200);
    // Back, and empty (no persistence): filled again.
    redis.start_again().unwrap();
    wait_until(
        Duration::from_secs(5),
        "/cached-queries answers from Redis again",
        || (0..10).all(|_| get(d.http, "/cached-queries?count=5").status == 200),
    );
}

/// A session of its own that locks the World table (reads of it wait) until `unlock`. It is
/// sqlx's single connection: Brisk's pool shares its connections, so it rolls back a
/// transaction that a call leaves open.
struct WorldLock {
    rt: tokio::runtime::Runtime,
    session: std::cell::RefCell<sqlx::PgConnection>,
}

impl WorldLock {
    fn new(pg: &Postgres) -> Self {
        use sqlx::Connection;
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let session = rt.block_on(sqlx::PgConnection::connect(&pg.url())).unwrap();
        WorldLock {
            rt,
            session: session.into(),
        }
    }

    fn run(&self, sql: &'static str) {
        use sqlx::Executor;
        let mut session = self.session.borrow_mut();
        self.rt.block_on(session.execute(sql)).unwrap();
    }

    fn lock(&self) {
        self.run("BEGIN");
        self.run("LOCK TABLE world IN ACCESS EXCLUSIVE MODE");
    }

    fn unlock(&self) {
        self.run("COMMIT");
    }

    /// Waits (up to 10 s) until `n` other sessions wait for the lock this one holds.
    fn wait_for_waiters(&self, n: i64) {
        use sqlx::Row;
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        loop {
            let waiting: i64 = {
                let mut session = self.session.borrow_mut();
                let q = sqlx::query("SELECT count(*) FROM pg_locks WHERE NOT granted");
                let row = self.rt.block_on(q.fetch_one(&mut *session)).unwrap();
                row.get(0)
            };
            if waiting >= n {
                return;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "{waiting} sessions wait for the lock, not {n}"
            );
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
    }
}

/// Report R5's request: two rows by id and the first five rows.
fn check_r5(port: u16) {
    let body = get_json(port, "/r5");
    check_world(&body["first"]);
    check_world(&body["second"]);
    let top: Vec<i64> = body["top"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| check_world(w).0)
        .collect();
    assert_eq!(top, vec![1, 2, 3, 4, 5]);
}

/// While the World table is locked, a worker of the asynchronous demo keeps answering other
/// requests; with `--blocking-db` its loop waits with the query, as a synchronous worker does.
#[test]
fn the_blocking_mode_stalls_the_worker_while_a_query_waits_and_the_async_mode_does_not() {
    use std::time::{Duration, Instant};
    let pg = Postgres::start().unwrap();
    let locker = WorldLock::new(&pg);
    for blocking in [false, true] {
        let extra: &[&str] = if blocking { &["--blocking-db"] } else { &[] };
        let d = demo_with(Some(&pg.url()), 1, extra);
        check_r5(d.http);
        check_world(&get_json(d.http, "/db"));
        // Lock the table from another session: reads of it wait until the lock goes.
        locker.lock();
        let port = d.http;
        let waiting = std::thread::spawn(move || get(port, "/db").status);
        locker.wait_for_waiters(1); // the /db request reaches the lock
        let plain = std::thread::spawn(move || {
            let t = Instant::now();
            let status = get(port, "/plaintext").status;
            (status, t.elapsed())
        });
        std::thread::sleep(Duration::from_millis(800));
        locker.unlock();
        let (status, plain_took) = plain.join().unwrap();
        assert_eq!(status, 200);
        assert_eq!(waiting.join().unwrap(), 200);
        if blocking {
            assert!(
                plain_took >= Duration::from_millis(700),
                "blocking mode answered in {plain_took:?}"
            );
        } else {
            assert!(
                plain_took < Duration::from_millis(500),
                "async mode took {plain_took:?}"
            );
        }
    }
}

/// PostgreSQL down when the demo starts: it starts anyway, its database routes answer 503,
/// and it serves them by itself once the database is up (making the tables if needed).
#[test]
fn a_database_down_at_start_fails_the_start_and_one_lost_later_is_503_until_it_returns() {
    use std::time::Duration;
    // Down at start: the migrations cannot run, and the start says so.
    let mut pg = Postgres::start().unwrap();
    pg.kill();
    let (mut args, _) = common::demo_args(2);
    args.extend(["--database".to_string(), pg.url()]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let run_dir = temp_dir("run");
    let mut server =
        ServerProcess::spawn(common::DEMO, &args, run_dir.path().to_path_buf()).unwrap();
    assert!(
        !server.wait_exit(Duration::from_secs(30)).unwrap(),
        "the start failed"
    );
    let log = server.log();
    assert!(
        log.contains("the app did not start") && log.contains("cannot run the migrations"),
        "{log}"
    );
    // Lost after the start: 503 at once, and served again when it returns.
    pg.start_again().unwrap();
    let d = demo(Some(&pg.url()), 2);
    check_world(&get_json(d.http, "/db"));
    pg.kill();
    for path in [
        "/db",
        "/queries?queries=3",
        "/updates",
        "/fortunes",
        "/cached-queries",
    ] {
        let r = get(d.http, path);
        assert_eq!(r.status, 503, "{path}: {}", r.text());
        assert_eq!(r.header("content-type"), Some("application/json"), "{path}");
        // General words: no host, port or server message for an anonymous client.
        assert_eq!(
            r.text(),
            r#"{"error":"the database is unavailable; try again later"}"#,
            "{path}"
        );
    }
    assert_eq!(
        get(d.http, "/plaintext").status,
        200,
        "routes without a database"
    );
    pg.start_again().unwrap();
    wait_until(Duration::from_secs(3), "every worker answers /db", || {
        (0..10).all(|_| get(d.http, "/db").status == 200)
    });
    check_r5(d.http);
}

/// A query past `--db-query-timeout-ms` answers 504; with every connection's place taken past
/// `--db-acquire-timeout-ms`, 503; both with a JSON error, and the worker serves on.
#[test]
fn a_slow_query_is_504_and_an_exhausted_pool_is_503() {
    use std::time::{Duration, Instant};
    let pg = Postgres::start().unwrap();
    let locker = WorldLock::new(&pg);
    let d = demo_with(
        Some(&pg.url()),
        1,
        &[
            "--db-query-timeout-ms",
            "600",
            "--db-acquire-timeout-ms",
            "200",
            "--db-max-pipeline",
            "1",
        ],
    );
    check_world(&get_json(d.http, "/db"));
    // Reads of the World table wait while another session holds this lock.
    locker.lock();
    let port = d.http;
    let slow = std::thread::spawn(move || {
        let t = Instant::now();
        let r = get(port, "/db");
        (r.status, r.text(), t.elapsed())
    });
    locker.wait_for_waiters(1); // the first query holds the only place
    let t = Instant::now();
    let busy = get(d.http, "/db");
    let busy_took = t.elapsed();
    assert_eq!(busy.status, 503, "{}", busy.text());
    assert!(
        busy.text().contains("unavailable; try again later"),
        "{}",
        busy.text()
    );
    assert!(busy_took < Duration::from_millis(500), "{busy_took:?}");
    let (status, text, took) = slow.join().unwrap();
    assert_eq!(status, 504, "{text}");
    assert!(text.contains("took too long"), "{text}");
    assert!(took < Duration::from_millis(1500), "{took:?}");
    // The client hears general words; the log has the detail.
    let log = d.server.log();
    assert!(
        log.contains("no database connection was free within 200 ms"),
        "{log}"
    );
    assert!(log.contains("took longer than 600 ms"), "{log}");
    locker.unlock();
    // The query was cancelled on the server; the worker serves on.
    wait_until(Duration::from_secs(2), "/db answers again", || {
        get(d.http, "/db").status == 200
    });
}
