//! Real servers for tests: the databases [`Postgres`], [`MariaDb`] and [`Redis`], the
//! metrics server [`Prometheus`] and the OpenTelemetry [`OtlpReceiver`], each started on
//! loopback on a free port, with its data in a temporary directory, and killed (with every
//! process it started) when the value is dropped, even if the test failed or panicked.
//!
//! The servers come from Debian's packages (`scripts/install-test-servers` installs them); if
//! one is missing, `start()` fails saying so: tests that need a server do not skip.
//!
//! Each server can be killed (SIGKILL, as a crash would) and started again on the same port and
//! data directory, for tests of what a client does while its database is down and after it
//! comes back: [`kill`](Postgres::kill), [`start_again`](Postgres::start_again) and
//! [`restart`](Postgres::restart) (the two at once).
//!
//! When run as root (as `scripts/test` is), PostgreSQL runs as the `postgres` user (it refuses
//! to run as root) and MariaDB as `mysql`; otherwise both run as the current user.

use std::collections::HashMap;
use std::ffi::OsString;
use std::fs::File;
use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use nix::sys::signal::{kill, killpg, Signal};
use nix::unistd::{Pid, User};

use crate::{free_port, poll, temp_dir, TempDir};

mod mariadb;
mod nginx;
mod otlp;
mod postgres;
mod prometheus;
mod redis;
mod smtp;

pub use mariadb::MariaDb;
pub use nginx::Nginx;
pub use otlp::OtlpReceiver;
pub use postgres::Postgres;
pub use prometheus::Prometheus;
pub use redis::{Redis, RedisCluster};
pub use smtp::{SmtpSecurity, SmtpSink};

/// How long a server may take to start accepting connections.
const START_DEADLINE: Duration = Duration::from_secs(30);
/// How many lines of a server's log an error message or a panicking test shows.
const LOG_TAIL_LINES: usize = 40;
/// What to do when a server or client program is missing.
const INSTALL_HINT: &str = "run scripts/install-test-servers (as root) to install the test servers";

/// User name, password and database name of the account the SQL servers are set up with.
pub const DB_USER: &str = "brisk";
/// See [`DB_USER`].
pub const DB_PASSWORD: &str = "brisk";
/// See [`DB_USER`].
pub const DB_NAME: &str = "brisk";

/// The last `n` lines of the file at `path` (empty if it cannot be read).
fn tail(path: &Path, n: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

/// The system user a server drops to when the tests run as root (uid, gid), `None` otherwise.
fn service_user(name: &str) -> Result<Option<User>> {
    if !nix::unistd::geteuid().is_root() {
        return Ok(None);
    }
    let user = User::from_name(name)
        .with_context(|| format!("look up user {name}"))?
        .with_context(|| format!("no user {name}: {INSTALL_HINT}"))?;
    Ok(Some(user))
}

/// Runs a setup program to completion, its output appended to `log`; fails with the log's tail.
fn run_logged(what: &str, cmd: &mut Command, log: &Path) -> Result<()> {
    let out = File::options().create(true).append(true).open(log)?;
    let status = cmd
        .stdin(Stdio::null())
        .stdout(out.try_clone()?)
        .stderr(out)
        .status()
        .with_context(|| format!("run {what} ({:?}): {INSTALL_HINT}", cmd.get_program()))?;
    if !status.success() {
        bail!(
            "{what} failed ({status}); last lines of {}:\n{}",
            log.display(),
            tail(log, LOG_TAIL_LINES)
        );
    }
    Ok(())
}

/// Runs a client program and returns its standard output; fails with its standard error.
fn run_client(cmd: &mut Command) -> Result<String> {
    let out = cmd
        .stdin(Stdio::null())
        .output()
        .with_context(|| format!("run {:?}: {INSTALL_HINT}", cmd.get_program()))?;
    if !out.status.success() {
        bail!(
            "{:?} failed ({}): {}",
            cmd.get_program(),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Parent pid of every process, from /proc.
fn parents() -> HashMap<i32, i32> {
    let mut map = HashMap::new();
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|s| s.parse().ok()) else {
            continue;
        };
        if let Some(ppid) = stat_field(pid, 1).and_then(|s| s.parse().ok()) {
            map.insert(pid, ppid);
        }
    }
    map
}

/// Field `i` of /proc/PID/stat counted from the one after the command name (0: state,
/// 1: parent pid).
fn stat_field(pid: i32, i: usize) -> Option<String> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name, in parentheses, may itself hold spaces and parentheses.
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.split_whitespace().nth(i).map(str::to_owned)
}

/// Every descendant of `root` (children, their children…).
fn descendants(root: i32) -> Vec<i32> {
    let parents = parents();
    let mut found = vec![root];
    let mut i = 0;
    while i < found.len() {
        let parent = found[i];
        found.extend(
            parents
                .iter()
                .filter(|&(_, &pp)| pp == parent)
                .map(|(&p, _)| p),
        );
        i += 1;
    }
    found.remove(0);
    found
}

/// Whether process `pid` still runs (exists and is not a zombie).
pub fn alive(pid: i32) -> bool {
    stat_field(pid, 0).is_some_and(|state| state != "Z")
}

/// A server's main process, led in its own process group, and how to start it again.
struct Daemon {
    program: PathBuf,
    args: Vec<OsString>,
    user: Option<User>,
    dir: PathBuf,
    log: PathBuf,
    child: Option<Child>,
}

impl Daemon {
    fn new(program: PathBuf, args: Vec<OsString>, user: Option<User>, dir: &Path) -> Self {
        Daemon {
            program,
            args,
            user,
            dir: dir.to_path_buf(),
            log: dir.join("server.log"),
            child: None,
        }
    }

    /// Spawns the server (output appended to its log) without waiting for it.
    fn spawn(&mut self) -> Result<()> {
        if self.child.is_some() {
            bail!(
                "{} is already running: kill() it first",
                self.program.display()
            );
        }
        let out = File::options().create(true).append(true).open(&self.log)?;
        let mut cmd = Command::new(&self.program);
        cmd.args(&self.args)
            .current_dir(&self.dir)
            .stdin(Stdio::null())
            .stdout(out.try_clone()?)
            .stderr(out)
            .process_group(0);
        if let Some(user) = &self.user {
            cmd.uid(user.uid.as_raw()).gid(user.gid.as_raw());
        }
        let child = cmd
            .spawn()
            .with_context(|| format!("spawn {}: {INSTALL_HINT}", self.program.display()))?;
        self.child = Some(child);
        Ok(())
    }

    /// Spawns the server and waits until `ready` says it accepts connections (or it exits, or
    /// the deadline passes: an error with the log's tail).
    fn start(&mut self, what: &str, mut ready: impl FnMut() -> bool) -> Result<()> {
        self.spawn()?;
        let child = self.child.as_mut().expect("spawned");
        let outcome = poll(START_DEADLINE, || match child.try_wait() {
            Ok(Some(status)) => Some(Err(anyhow!("{what} exited during startup ({status})"))),
            Err(e) => Some(Err(anyhow!("{what}: wait: {e}"))),
            Ok(None) => ready().then_some(Ok(())),
        })
        .unwrap_or_else(|| {
            Err(anyhow!(
                "{what} not accepting connections after {START_DEADLINE:?}"
            ))
        });
        if let Err(e) = outcome {
            self.kill();
            bail!(
                "{e}; last lines of {}:\n{}",
                self.log.display(),
                tail(&self.log, LOG_TAIL_LINES)
            );
        }
        Ok(())
    }

    fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// SIGKILLs the server's process group and every process it started (PostgreSQL's backends
    /// lead process groups of their own), then waits until all are gone, so that the server can
    /// start again on the same port and data directory.
    fn kill(&mut self) {
        let Some(mut child) = self.child.take() else {
            return;
        };
        let leader = Pid::from_raw(child.id() as i32);
        // Frozen, the server starts no new process while its descendants are listed.
        let _ = killpg(leader, Signal::SIGSTOP);
        let others = descendants(leader.as_raw());
        let _ = killpg(leader, Signal::SIGKILL);
        for &pid in &others {
            let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
        }
        let _ = child.wait();
        // The others were children of the server and are now init's to reap; once they are
        // zombies they hold no port, lock or shared memory any more.
        let deadline = Instant::now() + Duration::from_secs(10);
        while others.iter().any(|&pid| alive(pid)) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// When the test is panicking, prints the log's tail (the server's side of the story).
    fn report_if_panicking(&self, what: &str) {
        if std::thread::panicking() {
            eprintln!(
                "--- {what} log ({}), last lines ---\n{}",
                self.log.display(),
                tail(&self.log, LOG_TAIL_LINES)
            );
        }
    }
}

/// Writes `ca.pem` (a new CA's certificate), and `server.crt` and `server.key` (a server
/// certificate for `localhost` only, not `127.0.0.1`, that the CA signed, and its key, readable by
/// its owner only, as PostgreSQL asks) into `dir`, the last two owned by `owner` (the user
/// the server runs as) if given; returns their paths.
fn write_tls_files(dir: &Path, owner: Option<&User>) -> Result<(PathBuf, PathBuf)> {
    use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, KeyPair};
    let ca_key = KeyPair::generate()?;
    let mut ca_params = CertificateParams::new(Vec::<String>::new())?;
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(DnType::CommonName, "Brisk test CA");
    let ca = ca_params.self_signed(&ca_key)?;
    let key = KeyPair::generate()?;
    let names = vec!["localhost".to_owned()];
    let server = CertificateParams::new(names)?.signed_by(&key, &ca, &ca_key)?;
    let (cert_file, key_file) = (dir.join("server.crt"), dir.join("server.key"));
    std::fs::write(dir.join("ca.pem"), ca.pem())?;
    std::fs::write(&cert_file, server.pem())?;
    std::fs::write(&key_file, key.serialize_pem())?;
    std::fs::set_permissions(
        &key_file,
        std::os::unix::fs::PermissionsExt::from_mode(0o600),
    )?;
    if let Some(user) = owner {
        for file in [&cert_file, &key_file] {
            let (uid, gid) = (user.uid.as_raw(), user.gid.as_raw());
            std::os::unix::fs::chown(file, Some(uid), Some(gid))?;
        }
    }
    Ok((cert_file, key_file))
}

/// Whether something accepts TCP connections on 127.0.0.1:`port` right now.
fn accepts(port: u16) -> Option<TcpStream> {
    let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    let s = TcpStream::connect_timeout(&addr, Duration::from_secs(1)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
    s.set_write_timeout(Some(Duration::from_secs(2))).ok()?;
    Some(s)
}

/// `GET path` on 127.0.0.1:`port` (HTTP/1.0, so the body ends with the connection): the status
/// and the body, or `None` if the server cannot be reached or answers nonsense.
pub fn http_get(port: u16, path: &str) -> Option<(u16, Vec<u8>)> {
    let mut s = accepts(port)?;
    s.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
    write!(s, "GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n").ok()?;
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).ok()?;
    let split = raw.windows(4).position(|w| w == b"\r\n\r\n")?;
    let head = std::str::from_utf8(&raw[..split]).ok()?;
    let status = head.split_whitespace().nth(1)?.parse().ok()?;
    Some((status, raw[split + 4..].to_vec()))
}

/// `text` with everything but unreserved characters percent-encoded, for a query string.
fn percent_encode(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}
