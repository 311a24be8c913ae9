//! Test harness for Brisk: starts a real Brisk program on loopback in its own process group,
//! talks to it with its own CLI, and kills the whole group when dropped, even if the test
//! failed.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream, UdpSocket};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
pub use tempfile::TempDir;

pub mod chromium;
pub mod exposition;
pub mod jwks;
pub mod notify_socket;
pub mod servers;
pub mod tcp_proxy;
pub mod websocket;
pub use chromium::{Chromium, Page};
pub use exposition::{promtool_check, samples, scrape};
pub use notify_socket::{next_state, systemd_at};
pub use servers::{
    http_get, MariaDb, Nginx, OtlpReceiver, Postgres, Prometheus, Redis, RedisCluster,
    SmtpSecurity, SmtpSink,
};
pub use tcp_proxy::TcpProxy;
pub use websocket::{next_text, timed_out};

/// A fresh, empty directory under the system temp dir (`brisk-test-TAG-…`), removed when the
/// returned guard is dropped.
pub fn temp_dir(tag: &str) -> TempDir {
    let dir = tempfile::Builder::new()
        .prefix(&format!("brisk-test-{tag}-"))
        .tempdir()
        .expect("create temp dir");
    // Readable by all, as a directory made with the usual umask: workers that drop to
    // another user (`App::user`) still reach a run directory made by root.
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755))
        .expect("chmod temp dir");
    dir
}

/// A single-threaded tokio runtime with I/O and time, as a worker runs, for tests that drive
/// a client (`brisk::db`, `brisk::redis`) outside a server.
pub fn worker_runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a current-thread runtime")
}

/// Runs `attempt` `times` times, one after another, on `rt`: each must fail within `within`
/// (a client whose server is down fails fast, it does not wait), and `check` is called on
/// each error.
pub fn each_fails_within<T: std::fmt::Debug, E, F>(
    rt: &tokio::runtime::Runtime,
    times: usize,
    within: Duration,
    mut attempt: impl FnMut() -> F,
    check: impl Fn(&E),
) where
    F: std::future::Future<Output = std::result::Result<T, E>>,
{
    rt.block_on(async {
        for _ in 0..times {
            let t = std::time::Instant::now();
            match attempt().await {
                Ok(v) => panic!("succeeded while it should fail: {v:?}"),
                Err(e) => check(&e),
            }
            assert!(t.elapsed() < within, "failed after {:?}", t.elapsed());
        }
    });
}

/// Calls `probe` until it returns `Some`, pausing a little longer each time (up to 50 ms);
/// `None` once `deadline` has passed without a `Some`. The one polling loop of the tests:
/// see [`wait_until`] and [`wait_for`].
pub fn poll<T>(deadline: Duration, mut probe: impl FnMut() -> Option<T>) -> Option<T> {
    let start = Instant::now();
    let mut pause = Duration::from_millis(1);
    loop {
        if let Some(v) = probe() {
            return Some(v);
        }
        if start.elapsed() > deadline {
            return None;
        }
        std::thread::sleep(pause);
        pause = (pause * 2).min(Duration::from_millis(50));
    }
}

/// Waits until `cond` holds; panics naming `what` was awaited if it still does not after
/// `deadline`. For "wait until X" in place of a fixed sleep.
pub fn wait_until(deadline: Duration, what: &str, mut cond: impl FnMut() -> bool) {
    if poll(deadline, || cond().then_some(())).is_none() {
        panic!("timed out after {deadline:?} waiting until {what}");
    }
}

/// Waits until `probe` returns `Some` and returns its value; panics naming `what` was awaited
/// if it does not within `deadline`.
pub fn wait_for<T>(deadline: Duration, what: &str, probe: impl FnMut() -> Option<T>) -> T {
    poll(deadline, probe)
        .unwrap_or_else(|| panic!("timed out after {deadline:?} waiting for {what}"))
}

/// Reports a test (or part of one) that cannot run here. Written straight to the process's
/// stderr, which the test harness does not capture, so the skip shows even when the test
/// passes.
pub fn skipped(test: &str, reason: &str) {
    let _ = writeln!(std::io::stderr(), "SKIPPED: {test}: {reason}");
}

/// A TCP port (free for UDP too) that was free a moment ago: below the kernel's ephemeral
/// range where there is room, so that no outgoing connection takes it before the server
/// binds it. Never the same port twice in one test program, whose tests run at once.
pub fn free_port() -> u16 {
    static GIVEN: std::sync::Mutex<Vec<u16>> = std::sync::Mutex::new(Vec::new());
    static TRIED: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    // Below the kernel's ephemeral range when there is room: a port from `bind(0)` is one
    // an outgoing connection (thousands of them in the load tests) may take between this
    // check and the server's own bind, which then fails with "address in use".
    let (low, high) = match ephemeral_low() {
        Some(first) if first > 12_000 => (10_000u32, first as u32 - 1),
        _ => (0, 0),
    };
    loop {
        let port = if high > low {
            let n = TRIED.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let start = std::process::id().wrapping_mul(7_919);
            (low + start.wrapping_add(n.wrapping_mul(4_099)) % (high - low)) as u16
        } else {
            let l = TcpListener::bind("127.0.0.1:0").expect("bind port 0");
            l.local_addr().unwrap().port()
        };
        // Free for TCP, and for UDP too, for tests that use both.
        let tcp = TcpListener::bind(("127.0.0.1", port));
        let udp = UdpSocket::bind(("127.0.0.1", port));
        if tcp.is_err() || udp.is_err() {
            continue;
        }
        let mut given = GIVEN.lock().unwrap_or_else(|e| e.into_inner());
        if !given.contains(&port) {
            given.push(port);
            return port;
        }
    }
}

/// The first port of the kernel's ephemeral range (`ip_local_port_range`).
fn ephemeral_low() -> Option<u16> {
    let range = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range").ok()?;
    range.split_whitespace().next()?.parse().ok()
}

/// A running Brisk program: master and workers in their own process group.
pub struct ServerProcess {
    bin: PathBuf,
    args: Vec<String>,
    child: Option<Child>,
    /// The run directory (pid file, control socket, log).
    pub run_dir: PathBuf,
    log: PathBuf,
    /// Removes the run directory after the processes are killed, when [`start`](Self::start)
    /// made it.
    _run_dir_guard: Option<TempDir>,
}

impl ServerProcess {
    /// Starts `bin ARGS... --run-dir DIR start` in the foreground (own process group) and waits
    /// until `status` lists `workers` workers.
    pub fn start(bin: impl AsRef<Path>, args: &[&str], workers: usize) -> Result<Self> {
        Self::start_with_env(bin, args, &[], workers)
    }

    /// Like [`start`](Self::start), with `env` added to the program's environment.
    pub fn start_with_env(
        bin: impl AsRef<Path>,
        args: &[&str],
        env: &[(&str, &str)],
        workers: usize,
    ) -> Result<Self> {
        let run_dir = temp_dir("run");
        let mut p = Self::spawn_with_env(bin, args, env, run_dir.path().to_path_buf())?;
        p._run_dir_guard = Some(run_dir);
        p.wait_workers(workers, Duration::from_secs(30))?;
        Ok(p)
    }

    /// Starts `bin ARGS... start` (with `env`) in a new run directory, asserts that it exits
    /// and fails within 20 s, and returns what it wrote: for a start that must be refused.
    pub fn start_fails(bin: impl AsRef<Path>, args: &[&str], env: &[(&str, &str)]) -> String {
        let run_dir = temp_dir("run");
        let mut p = Self::spawn_with_env(bin, args, env, run_dir.path().to_path_buf())
            .expect("spawn the program");
        // wait_exit says whether it exited successfully: it must exit, and fail.
        let ok = p
            .wait_exit(Duration::from_secs(20))
            .expect("wait for the exit");
        assert!(!ok, "the start succeeded:\n{}", p.log());
        p.log()
    }

    /// Starts the program without waiting; see [`ServerProcess::start`].
    pub fn spawn(bin: impl AsRef<Path>, args: &[&str], run_dir: PathBuf) -> Result<Self> {
        Self::spawn_with_env(bin, args, &[], run_dir)
    }

    /// Like [`spawn`](Self::spawn), with `env` added to the program's environment.
    pub fn spawn_with_env(
        bin: impl AsRef<Path>,
        args: &[&str],
        env: &[(&str, &str)],
        run_dir: PathBuf,
    ) -> Result<Self> {
        let mut args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
        args.push("--run-dir".into());
        args.push(run_dir.display().to_string());
        let log = run_dir.join("test-output.log");
        let out = std::fs::File::create(&log)?;
        let child = Command::new(bin.as_ref())
            .args(&args)
            .arg("start")
            .env(
                "BRISK_LOG",
                std::env::var("BRISK_LOG").unwrap_or("info".into()),
            )
            // What a test does not say (the demo's database) comes from its arguments only.
            .env_remove("DATABASE_URL")
            .env_remove("REDIS_URL")
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(out.try_clone()?)
            .stderr(out)
            .process_group(0)
            .spawn()
            .with_context(|| format!("spawn {}", bin.as_ref().display()))?;
        Ok(ServerProcess {
            bin: bin.as_ref().to_path_buf(),
            args,
            child: Some(child),
            run_dir,
            log,
            _run_dir_guard: None,
        })
    }

    /// The pid the pid file names (the master serving now: after an `upgrade`, not the
    /// process [`pid`](Self::pid) names), if it names one.
    pub fn pid_file_pid(&self) -> Option<i32> {
        let files = std::fs::read_dir(&self.run_dir).ok()?;
        let file = (files.flatten()).find(|e| e.path().extension().is_some_and(|x| x == "pid"))?;
        std::fs::read_to_string(file.path())
            .ok()?
            .trim()
            .parse()
            .ok()
    }

    /// The master's pid (the process this started).
    pub fn pid(&self) -> i32 {
        self.child.as_ref().map(|c| c.id() as i32).unwrap_or(0)
    }

    /// Runs a control command (`status`, `stop -g`, …) with the same settings.
    pub fn cli(&self, command: &[&str]) -> Output {
        self.cli_with(&self.bin, command)
    }

    /// Runs a control command with the same settings through another program file (the
    /// same program: the file the server was started from may have been replaced).
    pub fn cli_with(&self, bin: impl AsRef<Path>, command: &[&str]) -> Output {
        Command::new(bin.as_ref())
            .args(&self.args)
            .args(command)
            .stdin(Stdio::null())
            .output()
            .expect("run the CLI")
    }

    /// Runs a control command and asserts that it succeeded (its stderr in the message if not).
    pub fn cli_ok(&self, command: &[&str]) -> Output {
        let out = self.cli(command);
        assert!(
            out.status.success(),
            "{command:?} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        out
    }

    /// `status --json`, parsed.
    pub fn status(&self) -> Result<serde_json::Value> {
        let out = self.cli(&["status", "--json"]);
        if !out.status.success() {
            bail!("status failed: {}", String::from_utf8_lossy(&out.stderr));
        }
        Ok(serde_json::from_slice(&out.stdout)?)
    }

    /// Pids of the workers `status` lists.
    pub fn worker_pids(&self) -> Result<Vec<i32>> {
        let s = self.status()?;
        let mut pids: Vec<i32> = s["workers"]
            .as_array()
            .context("workers")?
            .iter()
            .map(|w| w["pid"].as_i64().unwrap_or(0) as i32)
            .collect();
        pids.sort();
        Ok(pids)
    }

    /// Pids of the workers `status` lists under `server` (an address, or a custom process's
    /// name), sorted.
    pub fn pids_of(&self, server: &str) -> Result<Vec<i32>> {
        let s = self.status()?;
        let mut pids: Vec<i32> = s["workers"]
            .as_array()
            .context("workers")?
            .iter()
            .filter(|w| w["server"] == server)
            .map(|w| w["pid"].as_i64().unwrap_or(0) as i32)
            .collect();
        pids.sort();
        Ok(pids)
    }

    /// Open connections of each worker `status` lists under `server` (an address), in its
    /// order.
    pub fn connections_of(&self, server: &str) -> Result<Vec<u64>> {
        let s = self.status()?;
        Ok(s["workers"]
            .as_array()
            .context("workers")?
            .iter()
            .filter(|w| w["server"] == server)
            .map(|w| w["connections"].as_u64().unwrap_or(0))
            .collect())
    }

    /// Sum of one numeric field over all workers in `status`.
    pub fn total(&self, field: &str) -> Result<u64> {
        let s = self.status()?;
        Ok(s["workers"]
            .as_array()
            .context("workers")?
            .iter()
            .map(|w| w[field].as_u64().unwrap_or(0))
            .sum())
    }

    /// Waits until `status` lists `n` workers.
    pub fn wait_workers(&mut self, n: usize, timeout: Duration) -> Result<()> {
        let outcome = poll(timeout, || {
            if self.worker_pids().is_ok_and(|pids| pids.len() == n) {
                return Some(Ok(()));
            }
            match self.child.as_mut().map(Child::try_wait) {
                Some(Ok(Some(status))) => {
                    Some(Err(format!("the server exited ({status}) during start")))
                }
                Some(Err(e)) => Some(Err(format!("cannot wait for the server: {e}"))),
                _ => None,
            }
        });
        match outcome {
            Some(Ok(())) => Ok(()),
            Some(Err(why)) => bail!("{why}:\n{}", self.log()),
            None => bail!("{n} workers not up after {timeout:?}:\n{}", self.log()),
        }
    }

    /// Waits for the master to exit and returns whether it exited with success.
    pub fn wait_exit(&mut self, timeout: Duration) -> Result<bool> {
        let child = self.child.as_mut().context("no child")?;
        match poll(timeout, || child.try_wait().transpose()) {
            Some(status) => Ok(status?.success()),
            None => bail!("the master did not exit within {timeout:?}"),
        }
    }

    /// What the program printed so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        kill_by_pid_files(&self.run_dir);
        if let Some(mut c) = self.child.take() {
            // SAFETY: the child leads its own process group; kill master and workers.
            unsafe { libc::kill(-(c.id() as i32), libc::SIGKILL) };
            let _ = c.kill();
            let _ = c.wait();
        }
        if std::thread::panicking() {
            eprintln!("--- server output ---\n{}", self.log());
        }
    }
}

/// Kills (SIGKILL) every master named by a `*.pid` file in `run_dir`, with its process group.
pub fn kill_by_pid_files(run_dir: &Path) {
    let pid_files = std::fs::read_dir(run_dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| e.path().extension().is_some_and(|x| x == "pid"));
    for entry in pid_files {
        if let Ok(pid) = std::fs::read_to_string(entry.path()) {
            if let Ok(pid) = pid.trim().parse::<i32>() {
                // SAFETY: killing the test's own server processes (its group, then itself).
                unsafe { libc::kill(-pid, libc::SIGKILL) };
                // SAFETY: as above.
                unsafe { libc::kill(pid, libc::SIGKILL) };
            }
        }
    }
}

/// Kills whatever a run directory's pid files name when dropped: for daemonized servers,
/// which leave the test's process group.
pub struct RunDirGuard(pub PathBuf);

impl Drop for RunDirGuard {
    fn drop(&mut self) {
        kill_by_pid_files(&self.0);
    }
}

/// Resident memory of a process in KiB (from /proc).
pub fn rss_kib(pid: i32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

/// Connects to `127.0.0.1:port`, retrying for up to 5 s while the server comes up.
pub fn connect(port: u16) -> TcpStream {
    let mut last = None;
    let s = poll(Duration::from_secs(5), || {
        TcpStream::connect(("127.0.0.1", port))
            .map_err(|e| last = Some(e))
            .ok()
    })
    .unwrap_or_else(|| panic!("connect {port}: {}", last.unwrap()));
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.set_nodelay(true).unwrap();
    s
}

/// Sends `line` plus a newline and reads one line back (without the newline).
pub fn text_round_trip(s: &mut TcpStream, line: &str) -> String {
    s.write_all(format!("{line}\n").as_bytes()).unwrap();
    read_line(s)
}

/// Reads bytes up to a newline.
pub fn read_line(s: &mut TcpStream) -> String {
    let mut out = Vec::new();
    let mut b = [0u8; 1];
    loop {
        match s.read(&mut b) {
            Ok(0) => break,
            Ok(_) if b[0] == b'\n' => break,
            Ok(_) => out.push(b[0]),
            Err(e) => panic!("read: {e}"),
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// One HTTP/1.1 response as read from a socket.
#[derive(Debug)]
pub struct HttpResponse {
    /// The status line and headers, through the blank line.
    pub head: String,
    /// The status code.
    pub status: u16,
    /// The headers, in order, trimmed.
    pub headers: Vec<(String, String)>,
    /// The body, de-chunked.
    pub body: Vec<u8>,
}

impl HttpResponse {
    /// The first value of header `name` (case-insensitive).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// The body as text (lossy).
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

/// Reads one HTTP/1.1 response: its head, then a Content-Length or chunked body. Panics if
/// the connection ends first.
pub fn read_response(s: &mut impl Read) -> HttpResponse {
    let mut resp = read_response_head(s);
    if let Some(len) = resp.header("content-length") {
        let mut body = vec![0u8; len.parse().expect("numeric content-length")];
        s.read_exact(&mut body).expect("response body");
        resp.body = body;
    } else if resp
        .header("transfer-encoding")
        .is_some_and(|te| te.to_ascii_lowercase().ends_with("chunked"))
    {
        resp.body = read_chunked(s);
    }
    resp
}

/// Reads the head of one HTTP/1.1 response and nothing more (the answer to a HEAD request,
/// or a body read separately).
pub fn read_response_head(s: &mut impl Read) -> HttpResponse {
    let mut buf = Vec::new();
    let mut byte = [0u8; 1];
    while !buf.ends_with(b"\r\n\r\n") {
        match s.read(&mut byte) {
            Ok(0) => panic!("connection closed inside a response head: {buf:?}"),
            Ok(_) => buf.push(byte[0]),
            Err(e) => panic!("read response head: {e} (so far {buf:?})"),
        }
    }
    let head = String::from_utf8(buf).expect("response head is UTF-8");
    let mut lines = head.split("\r\n");
    let status_line = lines.next().unwrap_or_default();
    let status = status_line
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or_else(|| panic!("bad status line {status_line:?}"));
    let headers = lines
        .filter(|l| !l.is_empty())
        .map(|l| {
            let (n, v) = l.split_once(':').expect("header line");
            (n.trim().to_string(), v.trim().to_string())
        })
        .collect();
    HttpResponse {
        head,
        status,
        headers,
        body: Vec::new(),
    }
}

/// Reads a chunked body through its last chunk (trailers are not expected).
pub fn read_chunked(s: &mut impl Read) -> Vec<u8> {
    let mut body = Vec::new();
    loop {
        let size_line = read_crlf_line(s);
        let size = usize::from_str_radix(size_line.split(';').next().unwrap_or("").trim(), 16)
            .unwrap_or_else(|_| panic!("bad chunk size {size_line:?}"));
        let mut chunk = vec![0u8; size + 2];
        s.read_exact(&mut chunk).expect("read chunk");
        assert_eq!(&chunk[size..], b"\r\n", "chunk ends with CRLF");
        body.extend_from_slice(&chunk[..size]);
        if size == 0 {
            return body;
        }
    }
}

/// Reads the next server-sent event from a chunked `text/event-stream` body (Brisk sends each
/// event as one chunk): its `data:` lines joined by newlines, keep-alive comments skipped;
/// `None` once the stream has ended. The event's type is dropped: see
/// [`read_sse_event_named`].
pub fn read_sse_event(s: &mut impl Read) -> Option<String> {
    read_sse_event_named(s).map(|(_, data)| data)
}

/// As [`read_sse_event`], with the event's type (its `event:` field, if any).
pub fn read_sse_event_named(s: &mut impl Read) -> Option<(Option<String>, String)> {
    loop {
        let size_line = read_crlf_line(s);
        let size = usize::from_str_radix(size_line.trim(), 16)
            .unwrap_or_else(|_| panic!("bad chunk size {size_line:?}"));
        if size == 0 {
            return None;
        }
        let mut chunk = vec![0u8; size + 2];
        s.read_exact(&mut chunk).expect("a whole chunk");
        let text = std::str::from_utf8(&chunk[..size]).expect("UTF-8 events");
        assert!(
            text.ends_with("\n\n") && text.matches("\n\n").count() == 1,
            "one event per chunk: {text:?}"
        );
        let data: Vec<&str> = text
            .lines()
            .filter_map(|l| l.strip_prefix("data: "))
            .collect();
        let event = text
            .lines()
            .find_map(|l| l.strip_prefix("event: "))
            .map(str::to_owned);
        if !data.is_empty() {
            return Some((event, data.join("\n")));
        }
    }
}

/// Reads one line ending in CRLF; returns it without the CRLF.
pub fn read_crlf_line(s: &mut impl Read) -> String {
    let mut line = Vec::new();
    let mut byte = [0u8; 1];
    while !line.ends_with(b"\r\n") {
        s.read_exact(&mut byte).expect("read line");
        line.push(byte[0]);
    }
    String::from_utf8_lossy(&line[..line.len() - 2]).into_owned()
}

/// Reads one HTTP/1.1 response whose body has a Content-Length: its head (through the blank
/// line) and its body. Panics if the connection ends first.
pub fn read_http_response(s: &mut impl Read) -> (String, Vec<u8>) {
    let r = read_response(s);
    (r.head, r.body)
}

/// Encodes a Frame message (4-byte big-endian length including itself).
pub fn frame(payload: &[u8]) -> Vec<u8> {
    let mut v = ((payload.len() + 4) as u32).to_be_bytes().to_vec();
    v.extend_from_slice(payload);
    v
}

/// Reads one Frame message and returns its payload.
pub fn read_frame(s: &mut impl Read) -> std::io::Result<Vec<u8>> {
    let mut len = [0u8; 4];
    s.read_exact(&mut len)?;
    let len = u32::from_be_bytes(len) as usize;
    let mut payload = vec![0u8; len.saturating_sub(4)];
    s.read_exact(&mut payload)?;
    Ok(payload)
}

/// Reads lines from a buffered reader until `pred` matches one (or EOF).
pub fn read_until_line(r: &mut impl BufRead, pred: impl Fn(&str) -> bool) -> Option<String> {
    let mut line = String::new();
    loop {
        line.clear();
        if r.read_line(&mut line).ok()? == 0 {
            return None;
        }
        if pred(line.trim_end()) {
            return Some(line.trim_end().to_string());
        }
    }
}

/// Wraps a stream for line reading.
pub fn lines(s: &TcpStream) -> BufReader<TcpStream> {
    BufReader::new(s.try_clone().unwrap())
}

/// Reads one line (without its `\n`); `None` if the connection ends or fails first.
pub fn read_line_opt(s: &mut TcpStream) -> Option<String> {
    let mut out = Vec::new();
    let mut b = [0u8; 1];
    loop {
        match s.read(&mut b) {
            Ok(1) if b[0] == b'\n' => return String::from_utf8(out).ok(),
            Ok(1) => out.push(b[0]),
            _ => return None,
        }
    }
}

/// What a [`TextLoad`] saw: connections refused, requests that got no (or a wrong) answer,
/// and requests answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LoadOutcome {
    /// Connections the server refused.
    pub refused: u32,
    /// Requests sent on a connection that closed or answered wrongly.
    pub dropped: u32,
    /// Requests answered correctly.
    pub ok: u32,
}

/// A client on its own thread that opens a new connection to a `text://` echo for every
/// request, until stopped: what a reload under load is tested with.
pub struct TextLoad {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    served: std::sync::Arc<std::sync::atomic::AtomicU32>,
    thread: std::thread::JoinHandle<LoadOutcome>,
}

impl TextLoad {
    /// Starts sending to the Text echo on `port`.
    pub fn start(port: u16) -> Self {
        use std::sync::atomic::Ordering::Relaxed;
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let served = std::sync::Arc::new(std::sync::atomic::AtomicU32::new(0));
        let (stop2, served2) = (stop.clone(), served.clone());
        let thread = std::thread::spawn(move || {
            let mut out = LoadOutcome {
                refused: 0,
                dropped: 0,
                ok: 0,
            };
            while !stop2.load(Relaxed) {
                match TcpStream::connect(("127.0.0.1", port)) {
                    Err(_) => out.refused += 1,
                    Ok(mut s) => {
                        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
                        if s.write_all(b"x\n").is_ok()
                            && read_line_opt(&mut s).as_deref() == Some("x")
                        {
                            out.ok += 1;
                            served2.fetch_add(1, Relaxed);
                        } else {
                            out.dropped += 1;
                        }
                    }
                }
            }
            out
        });
        TextLoad {
            stop,
            served,
            thread,
        }
    }

    /// Requests answered so far.
    pub fn served(&self) -> u32 {
        self.served.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Waits (up to 10 s) until `more` requests beyond those answered now are answered.
    pub fn wait_more(&self, more: u32, what: &str) {
        let target = self.served() + more;
        wait_until(Duration::from_secs(10), what, || self.served() >= target);
    }

    /// Stops the client and says what it saw.
    pub fn stop(self) -> LoadOutcome {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        self.thread.join().expect("the load thread")
    }
}

/// `len` pseudo-random bytes (xorshift): a chunk sent or read at the wrong offset shows.
pub fn noise(len: usize) -> Vec<u8> {
    let mut x = 0x2545_f491_4f6c_dd1d_u64;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}
