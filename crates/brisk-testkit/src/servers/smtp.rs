//! [`SmtpSink`]: an SMTP server that keeps what it accepts, for the mail tests.

use super::*;

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
