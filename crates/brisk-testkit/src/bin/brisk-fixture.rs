//! A Brisk app for the integration tests: echo servers whose Text server also understands
//! commands that exercise slow handlers, panics, errors, floods, timers and flow control.
//!
//! Text commands (one per line; anything else is echoed):
//! `slow MS` (reply `slow done` after MS ms), `panic`, `error`, `flood` (send 64 KiB chunks every
//! millisecond until the connection closes), `timer MS` (reply `fired ELAPSED_MS`), `repeat MS N`
//! (reply `tick K ELAPSED_MS` N times), `timers N` (add N idle one-minute timers), `deltimers`,
//! `close` (reply `bye` and close), `pause MS` (stop reading for MS ms). The Text server logs
//! `buffer full`, `buffer drained`, `on_error ran`, `on_worker_start ran` and `on_worker_stop ran`
//! from its callbacks.
//!
//! `--http ADDR` adds an HTTP server whose routes exercise response framing; see
//! [`http_route`]. `--recycle-requests N` (exact: no jitter) and `--recycle-memory-mib MIB`
//! set its workers' recycling; `/pid` answers the worker's pid and `/leak?mib=N` keeps N MiB
//! for good. `--metrics ADDR` adds a metrics listener with the app metrics `fixture_hits_total`
//! (`/metric/hit` adds one), `fixture_level` (`/metric/level?v=N` sets this worker's to N) and
//! `fixture_sizes` (`/metric/observe?v=N`); `--bad-metric` also registers one named
//! `2bad_total`. `--settings FILE` loads [`FixtureSettings`] (`brisk::config`: the file, then
//! `FIXTURE_*` variables), which `/settings` shows as the worker sees them. `--ready-file
//! PATH` adds a readiness check `marker` that passes once PATH exists; `--slow-check-dir
//! DIR` a check `slow` that writes `DIR/started`, then passes once `DIR/release` exists
//! (failing at its 1.5 s limit if it never does).
//!
//! `--process N --process-log FILE` adds a custom process `ticker` with N workers; see
//! [`ticker`]. `--schedule-log FILE` with `--schedule-every-ms MS` (and
//! `--schedule-sleep-ms MS`), `--schedule-panic-every-ms MS` or `--schedule-cron EXPR` adds
//! schedules; see [`schedules`]. `--queue-redis URL` adds the job queue `work` on that Redis:
//! the Text commands `push JSON` and `pushdelay MS JSON` push to it (replying `pushed ID` or
//! `error …`), `--queue-attempts N` sets its attempts (3), and `--queue-consumers N` adds a process `consumer` that runs its jobs N at a
//! time; see [`run_job`]. `--mail-url URL` (with `--mail-ca PEM_FILE` to trust a test
//! certificate) gives the fixture a mailer (3 s per message): the Text command
//! `mail TO` sends a message from the handler (replying `sent CODE` or `error …`), and jobs
//! `{"do": "mail", "to": TO}` send one from the consumer.

use std::cell::RefCell;
use std::path::PathBuf;
use std::process::ExitCode;
use std::rc::Rc;
use std::time::{Duration, Instant};

use brisk::http::{Body, HttpLimits, HttpServer, RequestBody};
use brisk::protocol::Builtin;
use brisk::timer::{self, TimerId};
use brisk::{App, Connection, Process, Server, UdpServer};
use bytes::Bytes;

fn flag(args: &[String], name: &str) -> Option<String> {
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1).cloned())
}

thread_local! {
    static IDLE_TIMERS: RefCell<Vec<TimerId>> = const { RefCell::new(Vec::new()) };
    static QUEUE: RefCell<Option<brisk::queue::Queue>> = const { RefCell::new(None) };
    static MAILER: RefCell<Option<brisk::mail::Mailer>> = const { RefCell::new(None) };
}

/// The fixture's queue `work` on `url`: `max_attempts` attempts, retries after 50 ms doubling
/// to 200 ms, 1 s visibility timeout.
fn work_queue(url: &str, max_attempts: u32) -> brisk::queue::Queue {
    let redis =
        brisk::redis::Redis::new(url, brisk::redis::RedisOptions::default()).expect("a Redis URL");
    let options = brisk::queue::QueueOptions {
        backoff: Duration::from_millis(50),
        max_backoff: Duration::from_millis(200),
        visibility_timeout: Duration::from_secs(1),
        max_attempts,
        ..Default::default()
    };
    brisk::queue::Queue::new(redis, "work", options)
}

/// The fixture's mailer (from `--mail-url`), or an error naming the flag.
fn mailer() -> Result<brisk::mail::Mailer, brisk::BoxError> {
    MAILER
        .with(|m| m.borrow().clone())
        .ok_or_else(|| "no mailer: start with --mail-url".into())
}

/// Sends the fixture's message to `to`, with `subject`.
async fn send_mail(to: &str, subject: &str) -> Result<brisk::mail::Delivered, brisk::BoxError> {
    let message = brisk::mail::text("fixture@brisk.test", to, subject, "sent by the fixture")?;
    Ok(mailer()?.send(message).await?)
}

/// Runs one job of `work`, whose payload is JSON `{"do": "ok" | "fail" | "sleep" | "mail",
/// "ms": N, "to": TO}`: `ok` (and `sleep`, after N ms, and `mail`, once the SMTP server
/// accepted the message `job ID` to TO) records `HSET brisk:test:results ID PID`; `fail` fails;
/// a payload that is not such JSON is malformed.
async fn run_job(
    job: brisk::queue::Job,
    redis: brisk::redis::Redis,
) -> Result<(), brisk::BoxError> {
    let v: serde_json::Value = job.json()?;
    match v["do"].as_str() {
        Some("fail") => return Err("this job always fails".into()),
        Some("sleep") => {
            let ms = v["ms"].as_u64().unwrap_or(0);
            tokio::time::sleep(Duration::from_millis(ms)).await;
        }
        Some("mail") => {
            let to = v["to"].as_str().unwrap_or_default();
            send_mail(to, &format!("job {}", job.id)).await?;
        }
        Some("ok") => {}
        _ => return Err(brisk::queue::Malformed(format!("no \"do\" in {v}")).into()),
    }
    let _: i64 = redis
        .run(
            brisk::redis::cmd("HSET")
                .arg("brisk:test:results")
                .arg(job.id)
                .arg(std::process::id()),
        )
        .await?;
    Ok(())
}

async fn text_command(conn: Connection<Builtin, u64>, line: Bytes) -> Result<(), brisk::BoxError> {
    let text = String::from_utf8_lossy(&line).into_owned();
    let mut words = text.split_whitespace();
    let arg = |w: Option<&str>| w.and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
    match words.next().unwrap_or("") {
        "slow" => {
            tokio::time::sleep(Duration::from_millis(arg(words.next()))).await;
            conn.send("slow done")?;
        }
        "panic" => panic!("requested panic"),
        "error" => return Err("requested error".into()),
        // Per-connection data: `data-set N`, `data-bump` (+1 in `with_data`), `data-swap N`
        // (`set_data(N)` from inside `with_data`), each answering the value after it.
        "data-set" => {
            conn.set_data(arg(words.next()));
            conn.send(format!("{:?}", conn.data()))?;
        }
        "data-bump" => {
            conn.with_data(|n| *n += 1);
            conn.send(format!("{:?}", conn.data()))?;
        }
        "data-swap" => {
            let n = arg(words.next());
            conn.with_data(|_| conn.set_data(n));
            conn.send(format!("{:?}", conn.data()))?;
        }
        "flood" => {
            let chunk = Bytes::from(vec![b'x'; 64 * 1024]);
            let id = Rc::new(RefCell::new(None));
            let me = id.clone();
            let c = conn.clone();
            let t = timer::add(Duration::from_millis(1), true, move || {
                if let Err(brisk::SendError::Closed) = c.send(chunk.clone()) {
                    if let Some(id) = me.borrow_mut().take() {
                        timer::del(id);
                    }
                }
            });
            *id.borrow_mut() = Some(t);
        }
        "timer" => {
            let start = Instant::now();
            let c = conn.clone();
            timer::add(Duration::from_millis(arg(words.next())), false, move || {
                let _ = c.send(format!("fired {}", start.elapsed().as_millis()));
            });
        }
        "repeat" => {
            let ms = arg(words.next());
            let n = arg(words.next());
            let start = Instant::now();
            let c = conn.clone();
            let count = Rc::new(RefCell::new((0u64, None::<TimerId>)));
            let state = count.clone();
            let id = timer::add(Duration::from_millis(ms), true, move || {
                let mut s = state.borrow_mut();
                s.0 += 1;
                let _ = c.send(format!("tick {} {}", s.0, start.elapsed().as_millis()));
                if s.0 == n {
                    if let Some(id) = s.1 {
                        timer::del(id);
                    }
                }
            });
            count.borrow_mut().1 = Some(id);
        }
        "timers" => {
            let n = arg(words.next());
            IDLE_TIMERS.with(|t| {
                let mut t = t.borrow_mut();
                for _ in 0..n {
                    t.push(timer::add(Duration::from_secs(60), false, || {}));
                }
            });
            conn.send(format!("ok {}", timer::count()))?;
        }
        "deltimers" => {
            let deleted = IDLE_TIMERS.with(|t| {
                t.borrow_mut()
                    .drain(..)
                    .filter(|id| timer::del(*id))
                    .count()
            });
            conn.send(format!("deleted {deleted} left {}", timer::count()))?;
        }
        "push" | "pushdelay" => {
            let Some(queue) = QUEUE.with(|q| q.borrow().clone()) else {
                return Err("no queue: start with --queue-redis".into());
            };
            let rest: Vec<&str> = words.collect();
            let pushed = if text.starts_with("pushdelay") {
                let ms = rest.first().and_then(|v| v.parse().ok()).unwrap_or(0);
                let payload = rest.get(1..).map(|w| w.join(" ")).unwrap_or_default();
                queue
                    .push_delayed(payload.into_bytes(), Duration::from_millis(ms))
                    .await
            } else {
                queue.push(rest.join(" ").into_bytes()).await
            };
            match pushed {
                Ok(id) => conn.send(format!("pushed {id}"))?,
                Err(e) => conn.send(format!("error {e}"))?,
            }
        }
        "mail" => match send_mail(words.next().unwrap_or_default(), "from a handler").await {
            Ok(d) => conn.send(format!("sent {}", d.code))?,
            Err(e) => conn.send(format!("error {e}"))?,
        },
        "close" => {
            conn.send("bye")?;
            conn.close();
        }
        "pause" => {
            conn.pause_recv();
            let c = conn.clone();
            timer::add(Duration::from_millis(arg(words.next())), false, move || {
                c.resume_recv()
            });
        }
        _ => conn.send(line)?,
    }
    Ok(())
}

thread_local! {
    /// Lets a held `/chunks` stream go on (`/release-chunk`).
    static RELEASE_CHUNK: Rc<tokio::sync::Notify> = Rc::new(tokio::sync::Notify::new());
}

/// The fixture's HTTP routes:
/// - `/chunks?n=N&ms=MS`: N chunks `chunk K\n` of a body of unknown length, each MS ms
///   after the previous one (the first too); `&size=S` pads each to S bytes, `&hold=1` holds
///   each after the first until a `/release-chunk`;
/// - `/release-chunk`: lets a held `/chunks` send its next chunk;
/// - `/big`: 100 KiB of `0123456789` repeated;
/// - `/length-mismatch`: `content-length: 10` with a 3-byte body;
/// - `/no-content`: 204 with a body (which must not be sent);
/// - `/early-hints`: 103 (a handler cannot answer with 1xx);
/// - `/panic`: the handler's future panics; `/panic-at-call`: the handler panics when called,
///   before it returns its future;
/// - `/big-chunked`: the 100 KiB of `/big` in memory, with `transfer-encoding: chunked` set
///   by the handler;
/// - `POST /echo`: the request body;
/// - `/status?code=N`: status N with an `etag` and the body `status N` (which must not be sent
///   for 204 and 304);
/// - `/empty`: 200 with an empty body;
/// - `/headers`: several response headers, one of them twice;
/// - anything else: `ok PATH` with the number of request headers in `x-headers`.
async fn http_route(req: http::Request<RequestBody>) -> http::Response<Body> {
    let query = req.uri().query().unwrap_or("");
    let param = |name: &str| {
        query
            .split('&')
            .filter_map(|kv| kv.split_once('='))
            .find(|(k, _)| *k == name)
            .and_then(|(_, v)| v.parse::<u64>().ok())
            .unwrap_or(0)
    };
    match req.uri().path() {
        "/chunks" => {
            // `size`: each chunk padded with dots to that many bytes; `hold=1`: each chunk
            // after the first waits for a `GET /release-chunk`.
            let (n, ms, size) = (param("n"), param("ms"), param("size") as usize);
            let hold = param("hold") == 1;
            let chunks = futures_util::stream::unfold(1, move |k| async move {
                if k > n {
                    return None;
                }
                if hold && k > 1 {
                    RELEASE_CHUNK.with(Rc::clone).notified().await;
                }
                tokio::time::sleep(Duration::from_millis(ms)).await;
                let mut text = format!("chunk {k}\n");
                if text.len() < size {
                    text.insert_str(0, &".".repeat(size - text.len()));
                }
                let frame = http_body::Frame::data(Bytes::from(text));
                Some((Ok::<_, std::io::Error>(frame), k + 1))
            });
            http::Response::new(Body::new(http_body_util::StreamBody::new(chunks)))
        }
        "/release-chunk" => {
            RELEASE_CHUNK.with(|r| r.notify_one());
            http::Response::new(Body::from("released"))
        }
        "/big" => http::Response::new(Body::from(b"0123456789".repeat(10 * 1024))),
        "/big-chunked" => http::Response::builder()
            .header("transfer-encoding", "chunked")
            .body(Body::from(b"0123456789".repeat(10 * 1024)))
            .unwrap(),
        "/length-mismatch" => http::Response::builder()
            .header("content-length", "10")
            .body(Body::from("abc"))
            .unwrap(),
        "/no-content" => http::Response::builder()
            .status(204)
            .body(Body::from("must not be sent"))
            .unwrap(),
        "/early-hints" => http::Response::builder()
            .status(103)
            .body(Body::empty())
            .unwrap(),
        "/panic" => panic!("requested panic"),
        "/pid" => http::Response::new(Body::from(std::process::id().to_string())),
        "/settings" => {
            let settings = SETTINGS.with(|s| s.borrow().clone()).unwrap_or_default();
            let environ = std::fs::read("/proc/self/environ").unwrap_or_default();
            let body = serde_json::json!({
                "settings": settings,
                "token_in_environment": environ.windows(13).any(|w| w == b"FIXTURE_TOKEN"),
                "pid": std::process::id(),
            });
            http::Response::new(Body::from(body.to_string()))
        }
        "/metric/hit" => {
            HITS.inc();
            http::Response::new(Body::from(std::process::id().to_string()))
        }
        "/metric/level" => {
            LEVEL.set(param("v") as f64);
            http::Response::new(Body::from(std::process::id().to_string()))
        }
        "/metric/observe" => {
            SIZES.observe(param("v") as f64);
            http::Response::new(Body::from(std::process::id().to_string()))
        }
        "/leak" => {
            // Touched, so that it is resident; leaked, so that only a new worker frees it.
            let kept = vec![1u8; (param("mib") << 20) as usize];
            std::mem::forget(kept);
            http::Response::new(Body::from("leaked"))
        }
        "/status" => {
            let code = param("code");
            http::Response::builder()
                .status(code as u16)
                .header("etag", "\"v1\"")
                .body(Body::from(format!("status {code}")))
                .unwrap()
        }
        "/empty" => http::Response::new(Body::empty()),
        "/headers" => http::Response::builder()
            .header("content-type", "text/plain; charset=utf-8")
            .header("set-cookie", "a=1")
            .header("set-cookie", "b=2")
            .header("cache-control", "no-cache")
            .header("x-empty", "")
            .body(Body::from("headers"))
            .unwrap(),
        "/echo" => match http_body_util::BodyExt::collect(req.into_body()).await {
            Ok(body) => http::Response::new(Body::from(body.to_bytes())),
            Err(e) => http::Response::builder()
                .status(400)
                .body(Body::from(e.to_string()))
                .unwrap(),
        },
        path => http::Response::builder()
            .header("x-headers", req.headers().len())
            .body(Body::from(format!("ok {path}")))
            .unwrap(),
    }
}

/// Appends `line` and a newline to `path` in one write, so that lines several processes
/// append at once never interleave (`writeln!` on a `File` writes the line and its newline
/// separately).
fn append(path: &std::path::Path, line: &str) {
    use std::io::Write;
    if let Ok(mut f) = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
    {
        let _ = f.write_all(format!("{line}\n").as_bytes());
    }
}

/// The custom process `ticker`: each worker appends `tick PID` to `log` every 20 ms until it
/// is told to stop, then takes 200 ms to finish (`finished PID`); `on_worker_stop` waits for
/// that and appends `stopped PID`.
fn ticker(workers: usize, log: PathBuf) -> Process {
    let task: Rc<RefCell<Option<tokio::task::JoinHandle<()>>>> = Rc::default();
    let (start, stop) = (task.clone(), task);
    let (log_start, log_stop) = (log.clone(), log);
    Process::new("ticker")
        .count(workers)
        .on_worker_start(move |w| {
            let log = log_start.clone();
            *start.borrow_mut() = Some(tokio::task::spawn_local(async move {
                let mut tick = tokio::time::interval(Duration::from_millis(20));
                loop {
                    tokio::select! {
                        _ = tick.tick() => append(&log, &format!("tick {}", w.pid)),
                        _ = brisk::process::stopping() => break,
                    }
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
                append(&log, &format!("finished {}", w.pid));
            }));
            async {}
        })
        .on_worker_stop(move |w| {
            let task = stop.borrow_mut().take();
            let log = log_stop.clone();
            async move {
                if let Some(task) = task {
                    let _ = task.await;
                }
                append(&log, &format!("stopped {}", w.pid));
            }
        })
}

/// Panics; returns `()` as far as the type checker knows, so a job can end with it.
fn boom() {
    panic!("requested panic")
}

/// Milliseconds since the Unix epoch.
fn now_ms() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis()
}

/// The fixture's schedules, each logging to `log`: `beat` (every `--schedule-every-ms`,
/// appending `start PID MS`, sleeping `--schedule-sleep-ms`, then `end PID MS`), `boom` (every
/// `--schedule-panic-every-ms`, appending `boom PID` and panicking) and `cron` (on
/// `--schedule-cron`, appending `cron PID`).
fn schedules(args: &[String], log: PathBuf) -> Vec<brisk::schedule::Schedule> {
    use brisk::schedule::Schedule;
    let ms = |name: &str| flag(args, name).and_then(|v| v.parse::<u64>().ok());
    let mut out = Vec::new();
    if let Some(every) = ms("--schedule-every-ms") {
        let sleep = Duration::from_millis(ms("--schedule-sleep-ms").unwrap_or(0));
        let log = log.clone();
        out.push(Schedule::every(
            "beat",
            Duration::from_millis(every),
            move |w| {
                let log = log.clone();
                async move {
                    append(&log, &format!("start {} {}", w.pid, now_ms()));
                    tokio::time::sleep(sleep).await;
                    append(&log, &format!("end {} {}", w.pid, now_ms()));
                }
            },
        ));
    }
    if let Some(every) = ms("--schedule-panic-every-ms") {
        let log = log.clone();
        out.push(Schedule::every(
            "boom",
            Duration::from_millis(every),
            move |w| {
                let log = log.clone();
                async move {
                    append(&log, &format!("boom {}", w.pid));
                    boom();
                }
            },
        ));
    }
    if let Some(expr) = flag(args, "--schedule-cron") {
        out.push(Schedule::cron("cron", &expr, move |w| {
            let log = log.clone();
            async move { append(&log, &format!("cron {}", w.pid)) }
        }));
    }
    out
}

/// The fixture's settings (`--settings FILE`).
#[derive(Debug, Default, serde::Serialize, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
struct FixtureSettings {
    greeting: String,
    token: String,
    workers: usize,
}

thread_local! {
    /// The settings this process loaded, for `/settings`.
    static SETTINGS: std::cell::RefCell<Option<serde_json::Value>> = const { std::cell::RefCell::new(None) };
}

/// The fixture's app metrics (see `--metrics`).
static HITS: brisk::metrics::Counter =
    brisk::metrics::Counter::new("fixture_hits_total", "Hits.").labels(&[("route", "hit")]);
static LEVEL: brisk::metrics::Gauge = brisk::metrics::Gauge::new("fixture_level", "A level.");
static SIZES: brisk::metrics::Histogram<2> =
    brisk::metrics::Histogram::new("fixture_sizes", "Sizes.", [1.0, 10.0]);
static BAD: brisk::metrics::Counter = brisk::metrics::Counter::new("2bad_total", "Misnamed.");

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().collect();
    let command = match args.last().map(String::as_str) {
        Some("start") => brisk::Command::Start { daemon: false },
        Some("stop") => brisk::Command::Stop { graceful: false },
        Some("reload") => brisk::Command::Reload { graceful: false },
        Some("upgrade") => brisk::Command::Upgrade { timeout: 60 },
        Some("restart") => brisk::Command::Restart { daemon: false },
        Some("status") => brisk::Command::Status { json: false },
        Some("--json") => brisk::Command::Status { json: true },
        Some("-g") if args.iter().any(|a| a == "stop") => brisk::Command::Stop { graceful: true },
        Some("-g") => brisk::Command::Reload { graceful: true },
        Some("connections") => brisk::Command::Connections { json: true },
        _ => {
            eprintln!("usage: brisk-fixture [--text A] [--http A [--max-requests N]] [--frame A] [--udp A] [--unix PATH] [--workers N] [--run-dir D] start|stop [-g]|reload [-g]|upgrade|status [--json]|connections");
            return ExitCode::from(2);
        }
    };
    let mut workers: usize = flag(&args, "--workers")
        .and_then(|v| v.parse().ok())
        .unwrap_or(1);
    if let Some(file) = flag(&args, "--settings") {
        let settings: FixtureSettings = brisk::config::Config::new()
            .file(file)
            .env_prefix("FIXTURE_")
            .load();
        if settings.workers > 0 {
            workers = settings.workers;
        }
        SETTINGS.with(|s| *s.borrow_mut() = serde_json::to_value(&settings).ok());
    }
    let shared = args.iter().any(|a| a == "--shared");
    let mut app = App::new("brisk-fixture")
        .run_dir(
            flag(&args, "--run-dir")
                .map(PathBuf::from)
                .unwrap_or("run".into()),
        )
        .graceful_timeout(Duration::from_secs(
            flag(&args, "--graceful-timeout")
                .and_then(|v| v.parse().ok())
                .unwrap_or(10),
        ));
    if let Some(user) = flag(&args, "--user") {
        app = app.user(user);
    }
    if let Some(address) = flag(&args, "--metrics") {
        app = app
            .metrics(address)
            .metric(&HITS)
            .metric(&LEVEL)
            .metric(&SIZES);
    }
    if args.iter().any(|a| a == "--bad-metric") {
        app = app.metric(&BAD);
    }
    if let Some(path) = flag(&args, "--ready-file") {
        app = app.readiness("marker", move || {
            let path = path.clone();
            async move {
                match std::path::Path::new(&path).exists() {
                    true => Ok(()),
                    false => Err(format!("{path} is missing")),
                }
            }
        });
    }
    if let Some(dir) = flag(&args, "--slow-check-dir") {
        app = app.readiness("slow", move || {
            let dir = PathBuf::from(&dir);
            async move {
                std::fs::write(dir.join("started"), b"").map_err(|e| e.to_string())?;
                while !dir.join("release").exists() {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
                Ok::<(), String>(())
            }
        });
    }
    let limits = |mut s: Server| {
        if let Some(n) = flag(&args, "--max-package").and_then(|v| v.parse().ok()) {
            s = s.max_package_size(n);
        }
        if let Some(n) = flag(&args, "--max-send-buffer").and_then(|v| v.parse().ok()) {
            s = s.max_send_buffer(n);
        }
        if let Some(ms) = flag(&args, "--idle-timeout-ms").and_then(|v| v.parse().ok()) {
            s = s.idle_timeout(Some(Duration::from_millis(ms)));
        }
        if let Some(n) = flag(&args, "--max-connections").and_then(|v| v.parse().ok()) {
            s = s.max_connections(n);
        }
        s.workers(workers).reuse_port(!shared)
    };
    if let Some(addr) = flag(&args, "--text") {
        let s = limits(Server::new(&addr).expect("text address"))
            .data::<u64>()
            .on_message(text_command)
            .on_buffer_full(|c| async move { tracing::info!(conn = c.id(), "buffer full") })
            .on_buffer_drain(|c| async move { tracing::info!(conn = c.id(), "buffer drained") })
            .on_error(
                |c, e| async move { tracing::info!(conn = c.id(), error = %e, "on_error ran") },
            )
            .on_worker_start(|w| async move {
                tracing::info!(worker = w.id, pid = w.pid, "on_worker_start ran")
            })
            .on_worker_stop(|w| async move {
                tracing::info!(worker = w.id, pid = w.pid, "on_worker_stop ran")
            });
        app = app.server(s);
    }
    if let Some(addr) = flag(&args, "--frame") {
        let s = Server::new(&addr)
            .expect("frame address")
            .on_message(|c, m| async move { c.send(m) });
        app = app.server(limits(s));
    }
    if let Some(path) = flag(&args, "--unix") {
        let s = Server::with_protocol(&format!("unix://{path}"), Builtin::Text(Default::default()))
            .expect("unix address");
        app = app.server(limits(s).data::<u64>().on_message(text_command));
    }
    if let Some(addr) = flag(&args, "--http") {
        let max_requests = flag(&args, "--max-requests").and_then(|v| v.parse().ok());
        let mut s = HttpServer::new(&addr)
            .expect("http address")
            .workers(workers)
            .reuse_port(!shared);
        if let Some(n) = flag(&args, "--recycle-requests").and_then(|v| v.parse().ok()) {
            s = s.max_requests(n).max_requests_jitter(0);
        }
        if let Some(mib) = flag(&args, "--recycle-memory-mib").and_then(|v| v.parse().ok()) {
            s = s.max_memory_mib(mib);
        }
        let s = s
            .http_limits(HttpLimits {
                max_requests_per_connection: max_requests,
                ..HttpLimits::default()
            })
            .handler(|req: http::Request<RequestBody>| {
                if req.uri().path() == "/panic-at-call" {
                    panic!("requested panic, before the handler's future");
                }
                http_route(req)
            });
        app = app.server(s);
    }
    if let Some(n) = flag(&args, "--process").and_then(|v| v.parse().ok()) {
        let log = flag(&args, "--process-log").expect("--process-log FILE");
        app = app.process(ticker(n, PathBuf::from(log)));
    }
    if let Some(url) = flag(&args, "--mail-url") {
        let options = brisk::mail::MailOptions {
            connect_timeout: Duration::from_secs(1),
            send_timeout: Duration::from_secs(3),
            root_certificate: flag(&args, "--mail-ca")
                .map(|f| std::fs::read(f).expect("--mail-ca PEM_FILE")),
        };
        let mailer = brisk::mail::Mailer::new(&url, options).expect("--mail-url");
        MAILER.with(|m| *m.borrow_mut() = Some(mailer));
    }
    if let Some(url) = flag(&args, "--queue-redis") {
        let attempts = flag(&args, "--queue-attempts").map_or(3, |v| v.parse().expect("a count"));
        QUEUE.with(|q| *q.borrow_mut() = Some(work_queue(&url, attempts)));
        if let Some(n) = flag(&args, "--queue-consumers").and_then(|v| v.parse().ok()) {
            let consumer = Process::new("consumer").run(move |_| {
                let queue = work_queue(&url, attempts);
                let redis = brisk::redis::Redis::new(&url, Default::default()).unwrap();
                async move {
                    queue
                        .consume(n, move |job| run_job(job, redis.clone()))
                        .await
                }
            });
            app = app.process(consumer);
        }
    }
    if let Some(log) = flag(&args, "--schedule-log") {
        for s in schedules(&args, PathBuf::from(log)) {
            app = app.schedule(s);
        }
    }
    if let Some(addr) = flag(&args, "--udp") {
        let s = UdpServer::new(&addr)
            .expect("udp address")
            .workers(workers)
            .on_message(|peer, d| async move { peer.send(&d).await });
        app = app.server(s);
    }
    app.run_command(command)
}
