//! [`MariaDb`]: a MariaDB server for a test.

use super::*;

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
