//! [`Nginx`]: nginx with a test's configuration.

use super::*;

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

    /// nginx serving the files of `dir` (made readable to its workers) on a free port: a
    /// static HTTP origin, e.g. an identity provider's JWKS document.
    pub fn files(dir: &Path) -> Result<Self> {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755))?;
        let port = free_port();
        let config = format!(
            "worker_processes 1;\nevents {{ worker_connections 64; }}\n\
             http {{ access_log off; server {{ listen 127.0.0.1:{port}; root {}; }} }}\n",
            dir.display()
        );
        Self::start(&config, port)
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
