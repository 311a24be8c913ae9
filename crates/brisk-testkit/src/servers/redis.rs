//! [`Redis`] and [`RedisCluster`]: Redis servers for a test.

use super::*;

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
