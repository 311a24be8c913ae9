//! Real servers for tests: the databases [`Postgres`], [`MariaDb`] and [`Redis`], and the
//! metrics server [`Prometheus`], each started on
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
fn alive(pid: i32) -> bool {
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

/// Whether something accepts TCP connections on 127.0.0.1:`port` right now.
fn accepts(port: u16) -> Option<TcpStream> {
    let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    let s = TcpStream::connect_timeout(&addr, Duration::from_secs(1)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
    s.set_write_timeout(Some(Duration::from_secs(2))).ok()?;
    Some(s)
}

/// The directory of the newest installed PostgreSQL's programs: Debian puts them in
/// /usr/lib/postgresql/VERSION/bin, off PATH.
fn postgres_bin_dir() -> Result<PathBuf> {
    let mut found: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let version = e.file_name().to_str()?.parse().ok()?;
            let bin = e.path().join("bin");
            (bin.join("postgres").exists() && bin.join("initdb").exists()).then_some((version, bin))
        })
        .collect();
    found.sort();
    found.pop().map(|(_, bin)| bin).with_context(|| {
        format!("no PostgreSQL server in /usr/lib/postgresql/*/bin: {INSTALL_HINT}")
    })
}

/// A PostgreSQL server (`postgres`) on 127.0.0.1 with a database `brisk` owned by a user
/// `brisk` (password `brisk`), with `fsync=off` and `full_page_writes=off`: quick, and a
/// transaction committed before a [`kill`](Self::kill) survives it (the OS has it; only a crash
/// of the machine would lose it). `synchronous_commit` stays on, as with it off a kill loses the
/// last commits.
///
/// Connections over TCP need a password (scram-sha-256; MD5 for a role named `brisk_md5`, a
/// cleartext password for `brisk_plain`); the superuser is `postgres`, password
/// `postgres` ([`superuser_url`](Self::superuser_url)).
pub struct Postgres {
    port: u16,
    bin: PathBuf,
    daemon: Daemon,
    dir: TempDir,
}

impl Postgres {
    /// Creates a database cluster in a new temporary directory (`initdb`), starts the server on
    /// a free port, waits until it accepts connections, and creates the `brisk` user and
    /// database.
    pub fn start() -> Result<Self> {
        Self::start_with(false, false, &[])
    }

    /// [`start`](Self::start) with TLS on, and only TLS on TCP: the server's certificate (for
    /// `localhost` only: a client that checks names must not connect to `127.0.0.1`) is signed by a CA of its own, whose certificate is
    /// [`ca_cert`](Self::ca_cert); a TCP connection without TLS is refused. The Unix socket
    /// stays plain, as PostgreSQL's always is.
    pub fn start_tls() -> Result<Self> {
        Self::start_with(true, true, &[])
    }

    /// A server whose TLS stops at version 1.1, which rustls does not speak (a handshake with
    /// it fails), and which takes plain TCP as well.
    pub fn start_tls_too_old() -> Result<Self> {
        let old = [
            ("ssl_min_protocol_version", "TLSv1"),
            ("ssl_max_protocol_version", "TLSv1.1"),
        ];
        Self::start_with(true, false, &old)
    }

    fn start_with(tls: bool, refuse_plain: bool, extra: &[(&str, &str)]) -> Result<Self> {
        let bin = postgres_bin_dir()?;
        let dir = temp_dir("postgres");
        let user = service_user("postgres")?;
        if let Some(user) = &user {
            // The server writes its socket and lock files here; the data directory is its own.
            std::os::unix::fs::chown(dir.path(), Some(user.uid.as_raw()), Some(user.gid.as_raw()))?;
        }
        let data = dir.path().join("data");
        let pwfile = dir.path().join("superuser-password");
        std::fs::write(&pwfile, "postgres\n")?;
        let mut initdb = Command::new(bin.join("initdb"));
        initdb
            .arg("-D")
            .arg(&data)
            .args([
                "-U",
                "postgres",
                "--auth-local=trust",
                "--auth-host=scram-sha-256",
            ])
            .arg(format!("--pwfile={}", pwfile.display()))
            .args(["-E", "UTF8", "--locale=C", "--no-sync"])
            .current_dir(dir.path());
        if let Some(user) = &user {
            initdb.uid(user.uid.as_raw()).gid(user.gid.as_raw());
        }
        let log = dir.path().join("initdb.log");
        run_logged("initdb", &mut initdb, &log)?;
        // Two roles (not created here) that authenticate the older ways, for clients to test:
        // `brisk_md5` with MD5, `brisk_plain` with a cleartext password. Earlier lines win.
        let hba = data.join("pg_hba.conf");
        let rules = std::fs::read_to_string(&hba)?;
        let plain_tcp = if refuse_plain {
            "hostnossl all all all reject\n"
        } else {
            ""
        };
        std::fs::write(
            &hba,
            format!(
                "{plain_tcp}host all brisk_md5 127.0.0.1/32 md5\nhost all brisk_plain 127.0.0.1/32 password\n{rules}"
            ),
        )?;
        let mut settings = vec![];
        if tls {
            let (cert, key) = write_tls_files(dir.path(), user.as_ref())?;
            settings.push(("ssl", "on".to_owned()));
            settings.push(("ssl_cert_file", cert.display().to_string()));
            settings.push(("ssl_key_file", key.display().to_string()));
        }
        settings.extend(extra.iter().map(|(k, v)| (*k, v.to_string())));

        let port = free_port();
        let socket_dir = dir.path().display().to_string();
        let mut args: Vec<OsString> = vec!["-D".into(), data.into_os_string()];
        for (key, value) in [
            ("port", port.to_string()),
            ("listen_addresses", "127.0.0.1".into()),
            ("unix_socket_directories", socket_dir),
            ("fsync", "off".into()),
            ("full_page_writes", "off".into()),
        ]
        .into_iter()
        .chain(settings)
        {
            args.push("-c".into());
            args.push(format!("{key}={value}").into());
        }
        let daemon = Daemon::new(bin.join("postgres"), args, user, dir.path());
        let mut pg = Postgres {
            port,
            bin,
            daemon,
            dir,
        };
        pg.start_again()?;
        // One statement per psql run: CREATE DATABASE cannot share a transaction.
        for statement in [
            format!("CREATE ROLE {DB_USER} LOGIN PASSWORD '{DB_PASSWORD}'"),
            format!("CREATE DATABASE {DB_NAME} OWNER {DB_USER}"),
        ] {
            pg.psql_as_superuser("postgres", &statement)
                .context("create the brisk user and database")?;
        }
        Ok(pg)
    }

    /// Starts the server again after [`kill`](Self::kill), on the same port and data directory
    /// (PostgreSQL recovers from its write-ahead log), and waits until it accepts connections.
    pub fn start_again(&mut self) -> Result<()> {
        let (port, isready) = (self.port, self.bin.join("pg_isready"));
        self.daemon.start("postgres", || {
            accepts(port).is_some()
                && Command::new(&isready)
                    .args(["-q", "-h", "127.0.0.1", "-U", "postgres", "-d", "postgres"])
                    .args(["-p", &port.to_string()])
                    .stdout(Stdio::null())
                    .stderr(Stdio::null())
                    .status()
                    .is_ok_and(|s| s.success())
        })
    }

    /// Kills the server (SIGKILL, like a crash) and starts it again: [`kill`](Self::kill) then
    /// [`start_again`](Self::start_again).
    pub fn restart(&mut self) -> Result<()> {
        self.kill();
        self.start_again()
    }

    /// Kills the server and all its processes (SIGKILL), keeping its data, port and log: see
    /// [`start_again`](Self::start_again). Nothing listens on the port until then.
    pub fn kill(&mut self) {
        self.daemon.kill();
    }

    /// Kills the server and removes its directory (what dropping it does).
    pub fn stop(self) {}

    /// `postgres://brisk:brisk@127.0.0.1:PORT/brisk`.
    pub fn url(&self) -> String {
        format!(
            "postgres://{DB_USER}:{DB_PASSWORD}@127.0.0.1:{}/{DB_NAME}",
            self.port
        )
    }

    /// `postgres://postgres:postgres@127.0.0.1:PORT/postgres`: the superuser.
    pub fn superuser_url(&self) -> String {
        format!(
            "postgres://postgres:postgres@127.0.0.1:{}/postgres",
            self.port
        )
    }

    /// The TCP port the server listens on (on 127.0.0.1).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The PEM file of the CA that signed the server's certificate, for a server started with
    /// [`start_tls`](Self::start_tls).
    pub fn ca_cert(&self) -> PathBuf {
        self.dir.path().join("ca.pem")
    }

    /// The pid of the server's main process (the postmaster), `None` while it is killed.
    pub fn pid(&self) -> Option<u32> {
        self.daemon.pid()
    }

    /// The temporary directory: data directory `data/`, Unix socket, `server.log`.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// A PostgreSQL program of the server's version (`psql`, `pg_isready`, `pg_dump`…).
    pub fn program(&self, name: &str) -> PathBuf {
        self.bin.join(name)
    }

    /// Runs `sql` with `psql` as the superuser on the `brisk` database (over the Unix socket)
    /// and returns what it printed (unaligned, tuples only: `select 1` gives `"1\n"`).
    pub fn sql(&self, sql: &str) -> Result<String> {
        self.psql_as_superuser(DB_NAME, sql)
    }

    fn psql_as_superuser(&self, db: &str, sql: &str) -> Result<String> {
        run_client(
            Command::new(self.program("psql"))
                .arg("-h")
                .arg(self.dir.path())
                .args(["-p", &self.port.to_string(), "-U", "postgres", "-d", db])
                .args(["-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1", "-c", sql]),
        )
    }

    /// What the server logged so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.daemon.log).unwrap_or_default()
    }
}

impl Postgres {
    /// Removes the server's System V shared memory segment, which a killed server leaves behind
    /// (a server started again on the same data directory removes it itself): its id is on the
    /// 7th line of `postmaster.pid`, after the key.
    fn remove_shared_memory(&self) {
        let pid_file = self.dir.path().join("data/postmaster.pid");
        let Ok(text) = std::fs::read_to_string(pid_file) else {
            return;
        };
        let shmid = text.lines().nth(6).and_then(|line| {
            let id = line.split_whitespace().nth(1)?;
            id.parse::<libc::c_int>().ok()
        });
        if let Some(shmid) = shmid {
            // SAFETY: IPC_RMID takes no buffer; the segment is this test's server's, whose
            // processes are all gone.
            unsafe { libc::shmctl(shmid, libc::IPC_RMID, std::ptr::null_mut()) };
        }
    }
}

impl Drop for Postgres {
    fn drop(&mut self) {
        self.daemon.kill();
        self.remove_shared_memory();
        self.daemon.report_if_panicking("postgres");
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

/// Whether a MySQL-protocol server answers on `port` with its handshake (protocol version 10).
fn mysql_greets(port: u16) -> bool {
    let Some(mut s) = accepts(port) else {
        return false;
    };
    // Packet header (3 bytes length, 1 byte sequence), then the protocol version.
    let mut head = [0u8; 5];
    s.read_exact(&mut head).is_ok() && head[4] == 10
}

/// A MariaDB server (`mariadbd`) on 127.0.0.1 with a database `brisk` and a user `brisk`
/// (password `brisk`, from any host) that has every privilege on it. `root` has no password
/// and connects over the Unix socket only ([`sql`](Self::sql)).
pub struct MariaDb {
    port: u16,
    daemon: Daemon,
    dir: TempDir,
}

impl MariaDb {
    /// Creates the system tables in a new temporary directory (`mariadb-install-db`), starts
    /// the server on a free port, waits until it greets connections, and creates the `brisk`
    /// user and database.
    pub fn start() -> Result<Self> {
        Self::start_with(false)
    }

    /// [`start`](Self::start), with TLS required of every TCP client
    /// (`require_secure_transport`): the certificate names `localhost` only, signed by the CA
    /// in [`ca_cert`](Self::ca_cert).
    pub fn start_tls() -> Result<Self> {
        Self::start_with(true)
    }

    /// The PEM file of the CA that signed the server's certificate, for a server started with
    /// [`start_tls`](Self::start_tls).
    pub fn ca_cert(&self) -> PathBuf {
        self.dir.path().join("ca.pem")
    }

    fn start_with(tls: bool) -> Result<Self> {
        let server = PathBuf::from("/usr/sbin/mariadbd");
        if !server.exists() {
            bail!("no MariaDB server ({}): {INSTALL_HINT}", server.display());
        }
        let dir = temp_dir("mariadb");
        let user = service_user("mysql")?;
        if let Some(user) = &user {
            // The server (as mysql) writes its socket and pid file here.
            std::os::unix::fs::chown(dir.path(), Some(user.uid.as_raw()), Some(user.gid.as_raw()))?;
        }
        let data = dir.path().join("data");
        // Its own temporary directory: servers that tests install at the same moment in a
        // shared /tmp collided over a temporary table's file ("Could not remove temporary
        // table", then the installation failed).
        let tmp = dir.path().join("tmp");
        std::fs::create_dir(&tmp)?;
        if let Some(user) = &user {
            std::os::unix::fs::chown(&tmp, Some(user.uid.as_raw()), Some(user.gid.as_raw()))?;
        }
        // --no-defaults first: the distro's /etc/mysql config (its socket, pid file…) is not
        // for a test's own server.
        let common = [
            "--no-defaults".to_string(),
            format!("--datadir={}", data.display()),
            format!("--tmpdir={}", tmp.display()),
            "--innodb-log-file-size=16M".into(),
        ];
        let user_arg = user.as_ref().map(|_| "--user=mysql");
        let mut install = Command::new("mariadb-install-db");
        install
            .args(&common)
            .args(user_arg)
            .args(["--auth-root-authentication-method=normal", "--skip-test-db"])
            .current_dir(dir.path());
        run_logged(
            "mariadb-install-db",
            &mut install,
            &dir.path().join("install-db.log"),
        )?;

        let port = free_port();
        let mut args: Vec<OsString> = common.iter().map(Into::into).collect();
        args.extend(user_arg.map(Into::into));
        for arg in [
            format!("--port={port}"),
            "--bind-address=127.0.0.1".into(),
            format!("--socket={}", dir.path().join("mysqld.sock").display()),
            format!("--pid-file={}", dir.path().join("mysqld.pid").display()),
            "--skip-name-resolve".into(),
            "--skip-log-bin".into(),
            // Each commit written to the OS, flushed once a second: a transaction committed before
            // a kill survives it (0 would lose up to a second of them).
            "--innodb-flush-log-at-trx-commit=2".into(),
            // Debian's configuration sets these, and clients expect them.
            "--character-set-server=utf8mb4".into(),
            "--collation-server=utf8mb4_general_ci".into(),
        ] {
            args.push(arg.into());
        }
        if tls {
            let (cert, key) = write_tls_files(dir.path(), user.as_ref())?;
            for arg in [
                format!("--ssl-cert={}", cert.display()),
                format!("--ssl-key={}", key.display()),
                "--require-secure-transport=ON".into(),
            ] {
                args.push(arg.into());
            }
        }
        let daemon = Daemon::new(server, args, user, dir.path());
        let mut db = MariaDb { port, daemon, dir };
        db.start_again()?;
        db.sql(&format!(
            "CREATE DATABASE {DB_NAME}; \
             CREATE USER '{DB_USER}'@'%' IDENTIFIED BY '{DB_PASSWORD}'; \
             CREATE USER '{DB_USER}'@'localhost' IDENTIFIED BY '{DB_PASSWORD}'; \
             GRANT ALL PRIVILEGES ON {DB_NAME}.* TO '{DB_USER}'@'%'; \
             GRANT ALL PRIVILEGES ON {DB_NAME}.* TO '{DB_USER}'@'localhost';"
        ))
        .context("create the brisk user and database")?;
        Ok(db)
    }

    /// Starts the server again after [`kill`](Self::kill), on the same port and data directory
    /// (InnoDB recovers from its redo log), and waits until it greets connections.
    pub fn start_again(&mut self) -> Result<()> {
        let port = self.port;
        self.daemon.start("mariadbd", || mysql_greets(port))
    }

    /// Kills the server and starts it again: [`kill`](Self::kill) then
    /// [`start_again`](Self::start_again).
    pub fn restart(&mut self) -> Result<()> {
        self.kill();
        self.start_again()
    }

    /// Kills the server (SIGKILL, like a crash), keeping its data, port and log: see
    /// [`start_again`](Self::start_again). Nothing listens on the port until then.
    pub fn kill(&mut self) {
        self.daemon.kill();
    }

    /// Kills the server and removes its directory (what dropping it does).
    pub fn stop(self) {}

    /// `mysql://brisk:brisk@127.0.0.1:PORT/brisk`.
    pub fn url(&self) -> String {
        format!(
            "mysql://{DB_USER}:{DB_PASSWORD}@127.0.0.1:{}/{DB_NAME}",
            self.port
        )
    }

    /// The TCP port the server listens on (on 127.0.0.1).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The server's pid, `None` while it is killed.
    pub fn pid(&self) -> Option<u32> {
        self.daemon.pid()
    }

    /// The temporary directory: data directory `data/`, `mysqld.sock`, `server.log`.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The server's Unix socket.
    pub fn socket(&self) -> PathBuf {
        self.dir.path().join("mysqld.sock")
    }

    /// Runs `sql` with the `mariadb` client as root over the Unix socket and returns what it
    /// printed (tab-separated, no column names: `select 1` gives `"1\n"`).
    pub fn sql(&self, sql: &str) -> Result<String> {
        run_client(
            Command::new("mariadb")
                .args(["--no-defaults", "-u", "root"])
                .arg(format!("--socket={}", self.socket().display()))
                .args(["--batch", "--skip-column-names", "-e", sql]),
        )
    }

    /// What the server logged so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.daemon.log).unwrap_or_default()
    }
}

impl Drop for MariaDb {
    fn drop(&mut self) {
        self.daemon.kill();
        self.daemon.report_if_panicking("mariadbd");
    }
}

/// Sends one command to a Redis server and returns the first line of its reply.
fn redis_reply(port: u16, command: &str) -> Option<String> {
    let mut s = accepts(port)?;
    s.write_all(format!("{command}\r\n").as_bytes()).ok()?;
    let mut reply = Vec::new();
    let mut byte = [0u8; 1];
    while !reply.ends_with(b"\r\n") {
        s.read_exact(&mut byte).ok()?;
        reply.push(byte[0]);
    }
    Some(String::from_utf8_lossy(&reply).trim_end().to_owned())
}

/// A Redis server (`redis-server`) on 127.0.0.1, no password, its directory a temporary one;
/// by default it persists nothing (`--save '' --appendonly no`).
pub struct Redis {
    port: u16,
    /// The TLS port, for a server made with [`start_tls`](Redis::start_tls).
    tls_port: Option<u16>,
    /// The CA that signed its certificate, with TLS.
    tls_ca: Option<PathBuf>,
    daemon: Daemon,
    dir: TempDir,
}

impl Redis {
    /// Starts a server that persists nothing on a free port and waits until it answers `PING`.
    pub fn start() -> Result<Self> {
        Self::start_with(&[])
    }

    /// Like [`start`](Self::start), with more options for `redis-server`, which override the
    /// defaults: `&["--appendonly", "yes"]` for a server whose data survives
    /// [`restart`](Self::restart).
    pub fn start_with(extra: &[&str]) -> Result<Self> {
        let extra: Vec<OsString> = extra.iter().map(Into::into).collect();
        Self::start_in(temp_dir("redis"), extra, None, None)
    }

    /// Like [`start`](Self::start), also serving TLS on a port of its own
    /// ([`tls_url`](Self::tls_url)) with a certificate for `localhost` from a CA made for
    /// it ([`tls_ca`](Self::tls_ca)); clients need no certificate.
    pub fn start_tls() -> Result<Self> {
        let dir = temp_dir("redis");
        write_tls_files(dir.path(), None)?;
        let tls = dir.path().to_path_buf();
        Self::start_tls_in(dir, &tls, &[])
    }

    /// A server in `dir` serving TLS with the CA and certificate [`write_tls_files`] made in
    /// `tls`, and `extra` options.
    fn start_tls_in(dir: TempDir, tls: &Path, extra: &[&str]) -> Result<Self> {
        let tls_port = free_port();
        let file = |name: &str| tls.join(name).into_os_string();
        let mut args: Vec<OsString> = vec!["--tls-port".into(), tls_port.to_string().into()];
        args.extend(["--tls-cert-file".into(), file("server.crt")]);
        args.extend(["--tls-key-file".into(), file("server.key")]);
        args.extend(["--tls-ca-cert-file".into(), file("ca.pem")]);
        args.extend(["--tls-auth-clients".into(), "no".into()]);
        args.extend(extra.iter().map(Into::into));
        Self::start_in(dir, args, Some(tls_port), Some(tls.join("ca.pem")))
    }

    fn start_in(
        dir: TempDir,
        extra: Vec<OsString>,
        tls_port: Option<u16>,
        tls_ca: Option<PathBuf>,
    ) -> Result<Self> {
        let port = free_port();
        let mut args: Vec<OsString> = [
            "--port",
            &port.to_string(),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
            "--daemonize",
            "no",
            "--dir",
        ]
        .iter()
        .map(Into::into)
        .collect();
        args.push(dir.path().into());
        args.extend(extra);
        // A server run as root is no worse here than one run as another user.
        let daemon = Daemon::new("redis-server".into(), args, None, dir.path());
        let mut redis = Redis {
            port,
            tls_port,
            tls_ca,
            daemon,
            dir,
        };
        redis.start_again()?;
        Ok(redis)
    }

    /// Starts the server again after [`kill`](Self::kill), on the same port and directory (with
    /// `--appendonly yes`, it reloads its data), and waits until it answers `PING` (not
    /// `-LOADING`).
    pub fn start_again(&mut self) -> Result<()> {
        let port = self.port;
        self.daemon.start("redis-server", || {
            redis_reply(port, "PING").is_some_and(|r| r == "+PONG")
        })
    }

    /// Kills the server and starts it again: [`kill`](Self::kill) then
    /// [`start_again`](Self::start_again).
    pub fn restart(&mut self) -> Result<()> {
        self.kill();
        self.start_again()
    }

    /// Kills the server (SIGKILL, like a crash), keeping its directory, port and log: see
    /// [`start_again`](Self::start_again). Nothing listens on the port until then.
    pub fn kill(&mut self) {
        self.daemon.kill();
    }

    /// Kills the server and removes its directory (what dropping it does).
    pub fn stop(self) {}

    /// `redis://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// `rediss://localhost:TLS_PORT` of a server made with [`start_tls`](Self::start_tls)
    /// (its certificate names `localhost`).
    ///
    /// # Panics
    /// For a server made without TLS.
    pub fn tls_url(&self) -> String {
        let port = self.tls_port.expect("a Redis made with Redis::start_tls");
        format!("rediss://localhost:{port}")
    }

    /// The PEM file of the CA that signed the certificate of a server made with
    /// [`start_tls`](Self::start_tls).
    ///
    /// # Panics
    /// For a server made without TLS.
    pub fn tls_ca(&self) -> PathBuf {
        self.tls_ca
            .clone()
            .expect("a Redis made with Redis::start_tls")
    }

    /// The TLS port of a server made with [`start_tls`](Self::start_tls).
    ///
    /// # Panics
    /// For a server made without TLS.
    pub fn tls_port(&self) -> u16 {
        self.tls_port.expect("a Redis made with Redis::start_tls")
    }

    /// The TCP port the server listens on (on 127.0.0.1).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The server's pid, `None` while it is killed.
    pub fn pid(&self) -> Option<u32> {
        self.daemon.pid()
    }

    /// The server's directory (append-only files, `server.log`).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// Runs `redis-cli -p PORT ARGS…` and returns what it printed (raw replies: `PING` gives
    /// `"PONG\n"`).
    pub fn cli(&self, args: &[&str]) -> Result<String> {
        run_client(
            Command::new("redis-cli")
                .args(["-h", "127.0.0.1", "-p", &self.port.to_string()])
                .args(args),
        )
    }

    /// What the server logged so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.daemon.log).unwrap_or_default()
    }
}

impl Drop for Redis {
    fn drop(&mut self) {
        self.daemon.kill();
        self.daemon.report_if_panicking("redis-server");
    }
}

/// A Redis Cluster of `redis-server` nodes on 127.0.0.1 (masters only, no replicas), made
/// with `redis-cli --cluster create`; each node persists nothing.
pub struct RedisCluster {
    nodes: Vec<Redis>,
    /// The CA and certificate the nodes share, with TLS.
    _tls: Option<TempDir>,
}

impl RedisCluster {
    /// Starts `n` (at least 3) nodes, joins them into a cluster whose slots they share, and
    /// waits until every node reports `cluster_state:ok`.
    pub fn start(n: usize) -> Result<Self> {
        Self::start_nodes(n, None)
    }

    /// Like [`start`](Self::start), the nodes speaking TLS to clients and to each other
    /// (`tls-cluster`), with one CA ([`Redis::tls_ca`] of any node) and a certificate for
    /// `localhost`; the cluster announces the nodes' TLS ports, and `localhost` as their
    /// host.
    pub fn start_tls(n: usize) -> Result<Self> {
        let tls = temp_dir("redis-cluster-tls");
        write_tls_files(tls.path(), None)?;
        Self::start_nodes(n, Some(tls))
    }

    fn start_nodes(n: usize, tls: Option<TempDir>) -> Result<Self> {
        let mut nodes = Vec::with_capacity(n);
        for _ in 0..n {
            // The cluster bus gets a port of its own (PORT + 10000 may not exist).
            let bus = free_port().to_string();
            let args = [
                "--cluster-enabled",
                "yes",
                "--cluster-config-file",
                "nodes.conf",
                "--cluster-node-timeout",
                "2000",
                "--cluster-port",
                bus.as_str(),
            ];
            nodes.push(match &tls {
                Some(dir) => {
                    let tls_args = [
                        "--tls-cluster",
                        "yes",
                        "--cluster-announce-hostname",
                        "localhost",
                        "--cluster-preferred-endpoint-type",
                        "hostname",
                    ];
                    let args = [&args[..], &tls_args[..]].concat();
                    Redis::start_tls_in(temp_dir("redis"), dir.path(), &args)?
                }
                None => Redis::start_with(&args)?,
            });
        }
        let mut create = Command::new("redis-cli");
        if let Some(dir) = &tls {
            create
                .arg("--tls")
                .arg("--cacert")
                .arg(dir.path().join("ca.pem"))
                .args(["--sni", "localhost"]);
        }
        create.arg("--cluster").arg("create");
        for node in &nodes {
            let port = match tls {
                Some(_) => node.tls_port(),
                None => node.port(),
            };
            create.arg(format!("127.0.0.1:{port}"));
        }
        let out = create
            .args(["--cluster-replicas", "0", "--cluster-yes"])
            .stdin(Stdio::null())
            .output()
            .context("redis-cli --cluster create")?;
        if !out.status.success() {
            bail!(
                "redis-cli --cluster create failed: {}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        for node in &nodes {
            let port = node.port().to_string();
            let ok = poll(Duration::from_secs(20), || {
                let info = Command::new("redis-cli")
                    .args(["-p", &port, "cluster", "info"])
                    .output()
                    .ok()?;
                String::from_utf8_lossy(&info.stdout)
                    .contains("cluster_state:ok")
                    .then_some(())
            });
            if ok.is_none() {
                bail!("the Redis Cluster node on port {port} is not ready after 20 s");
            }
        }
        Ok(RedisCluster { nodes, _tls: tls })
    }

    /// The nodes.
    pub fn nodes(&self) -> &[Redis] {
        &self.nodes
    }

    /// Runs `redis-cli -p PORT ARGS…` on the node at `port`, answering its output.
    pub fn cli(port: u16, args: &[&str]) -> Result<String> {
        let out = Command::new("redis-cli")
            .arg("-p")
            .arg(port.to_string())
            .args(args)
            .output()
            .context("redis-cli")?;
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }
}

/// A Prometheus server (Debian's `prometheus`) that scrapes the given targets every second,
/// with its time series in a temporary directory.
pub struct Prometheus {
    port: u16,
    daemon: Daemon,
    _dir: TempDir,
}

impl Prometheus {
    /// Starts a server that scrapes `targets` (`host:port`, path `/metrics`) every second, and
    /// waits until it says it is ready.
    pub fn start(targets: &[String]) -> Result<Self> {
        let dir = temp_dir("prometheus");
        let port = free_port();
        let list = targets
            .iter()
            .map(|t| format!("'{t}'"))
            .collect::<Vec<_>>()
            .join(", ");
        std::fs::write(
            dir.path().join("prometheus.yml"),
            format!(
                "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n\
                 scrape_configs:\n  - job_name: brisk\n    static_configs:\n      - targets: [{list}]\n"
            ),
        )?;
        let args: Vec<OsString> = vec![
            format!(
                "--config.file={}",
                dir.path().join("prometheus.yml").display()
            )
            .into(),
            format!("--storage.tsdb.path={}", dir.path().join("data").display()).into(),
            format!("--web.listen-address=127.0.0.1:{port}").into(),
            "--log.level=warn".into(),
        ];
        let daemon = Daemon::new("prometheus".into(), args, None, dir.path());
        let mut p = Prometheus {
            port,
            daemon,
            _dir: dir,
        };
        p.daemon.start("prometheus", || {
            http_get(port, "/-/ready").is_some_and(|(status, _)| status == 200)
        })?;
        Ok(p)
    }

    /// The value of the instant query `expr` now (`None` while it has no result, or the
    /// query fails): one number, so `expr` should aggregate, e.g. `sum(metric)`.
    pub fn query(&self, expr: &str) -> Option<f64> {
        let path = format!("/api/v1/query?query={}", percent_encode(expr));
        let (status, body) = http_get(self.port, &path)?;
        if status != 200 {
            return None;
        }
        let json: serde_json::Value = serde_json::from_slice(&body).ok()?;
        json["data"]["result"][0]["value"][1].as_str()?.parse().ok()
    }

    /// The health of each scrape target, as Prometheus's `/api/v1/targets` reports it:
    /// `(url, health, last error)`.
    pub fn targets(&self) -> Vec<(String, String, String)> {
        let Some((_, body)) = http_get(self.port, "/api/v1/targets") else {
            return Vec::new();
        };
        let json: serde_json::Value = serde_json::from_slice(&body).unwrap_or_default();
        json["data"]["activeTargets"]
            .as_array()
            .map(|list| {
                list.iter()
                    .map(|t| {
                        let s = |k: &str| t[k].as_str().unwrap_or_default().to_string();
                        (s("scrapeUrl"), s("health"), s("lastError"))
                    })
                    .collect()
            })
            .unwrap_or_default()
    }

    /// What the server logged so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.daemon.log).unwrap_or_default()
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        self.daemon.kill();
        self.daemon.report_if_panicking("prometheus");
    }
}

/// nginx (Debian's package) on 127.0.0.1 with a configuration of the test's, run in the
/// foreground with its pid file and logs in a temporary directory.
pub struct Nginx {
    port: u16,
    daemon: Daemon,
    _dir: TempDir,
}

impl Nginx {
    /// Starts nginx with `config` (a whole `nginx.conf`, which must `listen` on
    /// 127.0.0.1:`port`) and waits until it accepts connections.
    pub fn start(config: &str, port: u16) -> Result<Self> {
        let dir = temp_dir("nginx");
        let conf = dir.path().join("nginx.conf");
        std::fs::write(&conf, config)?;
        let prefix = dir.path().display().to_string();
        let args: Vec<OsString> = vec![
            "-p".into(),
            format!("{prefix}/").into(),
            "-c".into(),
            conf.into(),
            "-g".into(),
            format!("daemon off; pid {prefix}/nginx.pid; error_log {prefix}/error.log warn;")
                .into(),
        ];
        let program = if Path::new("/usr/sbin/nginx").exists() {
            PathBuf::from("/usr/sbin/nginx")
        } else {
            PathBuf::from("nginx")
        };
        std::fs::create_dir_all(dir.path().join("logs"))?;
        let daemon = Daemon::new(program, args, None, dir.path());
        let mut nginx = Nginx {
            port,
            daemon,
            _dir: dir,
        };
        nginx.daemon.start("nginx", || accepts(port).is_some())?;
        Ok(nginx)
    }

    /// The port it listens on.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// What nginx logged so far (its output and its error log).
    pub fn log(&self) -> String {
        let errors = self._dir.path().join("error.log");
        std::fs::read_to_string(&self.daemon.log).unwrap_or_default()
            + &std::fs::read_to_string(errors).unwrap_or_default()
    }
}

impl Drop for Nginx {
    fn drop(&mut self) {
        self.daemon.kill();
        if std::thread::panicking() {
            eprintln!("--- nginx log ---\n{}", self.log());
        }
    }
}

/// How an [`SmtpSink`] secures its sessions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SmtpSecurity {
    /// No encryption: `smtp://`.
    Plain,
    /// STARTTLS offered and required before `MAIL`: `smtp://…?tls=required`.
    StartTls,
    /// TLS from the first byte: `smtps://`.
    Tls,
}

/// An SMTP server on 127.0.0.1 (`smtp_sink.py`, on PyPI's `aiosmtpd`) that keeps every message
/// it accepts as a file, refuses recipients starting with `refuse` (550) and `busy` (451), and
/// with TLS uses a self-signed certificate for `127.0.0.1` ([`certificate_pem`](Self::certificate_pem)).
///
/// aiosmtpd comes from the venv `target/smtp-venv` that `scripts/install-test-servers` makes,
/// or from a `python3` that already has it.
pub struct SmtpSink {
    port: u16,
    security: SmtpSecurity,
    certificate: Vec<u8>,
    daemon: Daemon,
    dir: TempDir,
}

impl SmtpSink {
    /// Starts a sink on a free port and waits until it accepts connections.
    pub fn start(security: SmtpSecurity) -> Result<Self> {
        let dir = temp_dir("smtp");
        let port = free_port();
        let mail = dir.path().join("mail");
        std::fs::create_dir(&mail)?;
        let key = rcgen::generate_simple_self_signed(vec!["127.0.0.1".to_owned()])?;
        let certificate = key.cert.pem().into_bytes();
        std::fs::write(dir.path().join("cert.pem"), &certificate)?;
        std::fs::write(dir.path().join("key.pem"), key.key_pair.serialize_pem())?;
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("smtp_sink.py");
        let mut args: Vec<OsString> = vec![
            script.into(),
            "--port".into(),
            port.to_string().into(),
            "--dir".into(),
            mail.into(),
        ];
        match security {
            SmtpSecurity::Plain => {}
            SmtpSecurity::StartTls => args.push("--starttls".into()),
            SmtpSecurity::Tls => args.push("--smtps".into()),
        }
        if security != SmtpSecurity::Plain {
            args.push(dir.path().join("cert.pem").into());
            args.push(dir.path().join("key.pem").into());
        }
        let daemon = Daemon::new(aiosmtpd_python()?, args, None, dir.path());
        let mut sink = SmtpSink {
            port,
            security,
            certificate,
            daemon,
            dir,
        };
        sink.start_again()?;
        Ok(sink)
    }

    /// Starts the sink again after [`kill`](Self::kill), on the same port and directory.
    pub fn start_again(&mut self) -> Result<()> {
        let port = self.port;
        self.daemon
            .start("smtp_sink.py", || accepts(port).is_some())
    }

    /// Kills the sink (SIGKILL). Nothing listens on its port until
    /// [`start_again`](Self::start_again).
    pub fn kill(&mut self) {
        self.daemon.kill();
    }

    /// The URL a [`brisk::mail::Mailer`] sends to: `smtp://127.0.0.1:PORT`,
    /// `smtp://127.0.0.1:PORT?tls=required` or `smtps://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        let port = self.port;
        match self.security {
            SmtpSecurity::Plain => format!("smtp://127.0.0.1:{port}"),
            SmtpSecurity::StartTls => format!("smtp://127.0.0.1:{port}?tls=required"),
            SmtpSecurity::Tls => format!("smtps://127.0.0.1:{port}"),
        }
    }

    /// The TCP port the sink listens on (on 127.0.0.1).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The sink's self-signed certificate (PEM), to trust in a client.
    pub fn certificate_pem(&self) -> &[u8] {
        &self.certificate
    }

    /// The file holding [`certificate_pem`](Self::certificate_pem).
    pub fn certificate_path(&self) -> PathBuf {
        self.dir.path().join("cert.pem")
    }

    /// Every message accepted so far, in order: the sink's `X-Sink-Tls` and `X-Sink-Rcpt`
    /// lines, then the message as received.
    pub fn messages(&self) -> Vec<String> {
        let mut found: Vec<(u64, String)> = std::fs::read_dir(self.dir.path().join("mail"))
            .into_iter()
            .flatten()
            .flatten()
            .filter_map(|e| {
                let name = e.file_name().into_string().ok()?;
                let n = name.strip_suffix(".eml")?.parse().ok()?;
                Some((n, std::fs::read_to_string(e.path()).ok()?))
            })
            .collect();
        found.sort();
        found.into_iter().map(|(_, m)| m).collect()
    }

    /// Waits until the sink holds `n` messages (at most `timeout`) and returns them all, or
    /// fails with what it holds.
    pub fn wait_for(&self, n: usize, timeout: Duration) -> Result<Vec<String>> {
        poll(timeout, || {
            let m = self.messages();
            (m.len() >= n).then_some(m)
        })
        .with_context(|| {
            format!(
                "the SMTP sink holds {} messages after {timeout:?}, not {n}",
                self.messages().len()
            )
        })
    }

    /// What the sink logged so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.daemon.log).unwrap_or_default()
    }
}

impl Drop for SmtpSink {
    fn drop(&mut self) {
        self.daemon.kill();
        self.daemon.report_if_panicking("smtp_sink.py");
    }
}

/// A Python that can import `aiosmtpd`: the venv `target/smtp-venv` that
/// `scripts/install-test-servers` makes, else `python3` if it has it.
fn aiosmtpd_python() -> Result<PathBuf> {
    let venv = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/smtp-venv/bin/python");
    if venv.exists() {
        return Ok(venv);
    }
    let system = Command::new("python3")
        .args(["-c", "import aiosmtpd"])
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if system {
        return Ok("python3".into());
    }
    bail!(
        "no Python with aiosmtpd (no {}): {INSTALL_HINT}",
        venv.display()
    )
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
