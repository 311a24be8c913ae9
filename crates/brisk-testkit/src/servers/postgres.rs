//! [`Postgres`]: a PostgreSQL server for a test (see the module above for what every server shares).

use super::*;

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
