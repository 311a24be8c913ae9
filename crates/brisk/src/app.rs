//! [`App`]: the servers of one program plus what every Brisk program shares: its name, run
//! directory, default limits, graceful-stop timeout, worker user, and the control CLI.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;

use crate::cli::{self, Cli, Command};
use crate::error::{Error, Result};
use crate::server::Limits;
use crate::service::Service;
use crate::{master, worker};

/// A Brisk program: servers, shared settings, and the `start | stop | restart | reload |
/// status | connections` CLI.
///
/// The same binary is the CLI, the master and every worker: the master starts workers by
/// running the program again with the same arguments, so `main` must build the same servers
/// every time it runs (from the same flags and files, as a config naturally does).
///
/// ```no_run
/// use brisk::{App, Server};
/// fn main() -> std::process::ExitCode {
///     let echo = Server::new("text://127.0.0.1:7000").unwrap()
///         .on_message(|conn, line| async move { conn.send(line) });
///     App::new("echo").run_dir("./run").server(echo).run()
/// }
/// ```
pub struct App {
    pub(crate) name: String,
    pub(crate) run_dir: PathBuf,
    pub(crate) services: Vec<Service>,
    pub(crate) limits: Limits,
    pub(crate) graceful_timeout: Duration,
    pub(crate) user: Option<String>,
    pub(crate) group: Option<String>,
}

impl App {
    /// An app called `name` (used for the pid file, control socket, log file and messages).
    pub fn new(name: impl Into<String>) -> Self {
        App {
            name: name.into(),
            run_dir: PathBuf::from("run"),
            services: Vec::new(),
            limits: Limits::default(),
            graceful_timeout: Duration::from_secs(30),
            user: None,
            group: None,
        }
    }

    /// Where the pid file, control socket and daemon log live (default `./run`). It is created
    /// if missing, but its parent must exist.
    pub fn run_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.run_dir = dir.into();
        self
    }

    /// Adds a server.
    pub fn server(mut self, server: impl Into<Service>) -> Self {
        self.services.push(server.into());
        self
    }

    /// Default limits for every server (each server may override them).
    pub fn limits(mut self, limits: Limits) -> Self {
        self.limits = limits;
        self
    }

    /// How long a graceful stop or reload lets in-flight work run before closing the rest
    /// (default 30 s).
    pub fn graceful_timeout(mut self, timeout: Duration) -> Self {
        self.graceful_timeout = timeout;
        self
    }

    /// Runs workers as this user when the master runs as root.
    pub fn user(mut self, user: impl Into<String>) -> Self {
        self.user = Some(user.into());
        self
    }

    /// Runs workers with this group when the master runs as root.
    pub fn group(mut self, group: impl Into<String>) -> Self {
        self.group = Some(group.into());
        self
    }

    /// The pid file: `RUN_DIR/NAME.pid`.
    pub fn pid_file(&self) -> PathBuf {
        self.run_dir.join(format!("{}.pid", self.name))
    }

    /// The control socket the CLI talks to: `RUN_DIR/NAME.sock`.
    pub fn control_socket(&self) -> PathBuf {
        self.run_dir.join(format!("{}.sock", self.name))
    }

    /// The daemon's log file: `RUN_DIR/NAME.log`.
    pub fn log_file(&self) -> PathBuf {
        self.run_dir.join(format!("{}.log", self.name))
    }

    /// Parses the command line (`start [-d]`, `stop [-g]`, …) and runs the command.
    pub fn run(self) -> ExitCode {
        let command = if is_worker() {
            Command::Start { daemon: false }
        } else {
            Cli::parse().command
        };
        self.run_command(command)
    }

    /// Runs a command parsed by the program's own argument parser (see [`Command`]).
    pub fn run_command(self, command: Command) -> ExitCode {
        if is_worker() {
            return self.run_as_worker();
        }
        crate::log::init();
        let name = self.name.clone();
        match self.dispatch(command) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("{name}: {e}");
                ExitCode::FAILURE
            }
        }
    }

    fn dispatch(self, command: Command) -> Result<()> {
        match command {
            Command::Start { daemon } => self.start(daemon),
            Command::Restart { daemon } => {
                match cli::stop(&self, false) {
                    Ok(()) | Err(Error::NotRunning { .. }) => {}
                    Err(e) => return Err(e),
                }
                self.start(daemon)
            }
            Command::Stop { graceful } => cli::stop(&self, graceful),
            Command::Reload { graceful } => cli::reload(&self, graceful),
            Command::Status { json } => cli::status(&self, json),
            Command::Connections { json } => cli::connections(&self, json),
        }
    }

    fn start(self, daemon: bool) -> Result<()> {
        if daemon && !master::daemon::is_daemon_child() {
            master::daemon::start(&self)
        } else {
            master::run(self)
        }
    }

    pub(crate) fn check_run_dir(&self) -> Result<()> {
        prepare_run_dir(&self.run_dir)
    }
}

fn is_worker() -> bool {
    std::env::var_os(worker::ENV_WORKER).is_some()
}

impl App {
    fn run_as_worker(self) -> ExitCode {
        let spec = std::env::var(worker::ENV_WORKER).unwrap_or_default();
        let parsed = spec
            .split_once(':')
            .and_then(|(s, i)| Some((s.parse().ok()?, i.parse().ok()?)));
        crate::log::init();
        match parsed {
            Some((service, index)) => worker::run(self, service, index),
            None => {
                eprintln!("{}: bad {} value {spec:?}", self.name, worker::ENV_WORKER);
                ExitCode::FAILURE
            }
        }
    }
}

/// Creates the run directory if needed; its parent must exist.
fn prepare_run_dir(dir: &Path) -> Result<()> {
    let fail = |reason: String| Error::RunDir {
        path: dir.display().to_string(),
        reason,
    };
    if dir.is_dir() {
        return Ok(());
    }
    if dir.exists() {
        return Err(fail("it exists and is not a directory".into()));
    }
    let parent = dir
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    if !parent.is_dir() {
        return Err(fail(format!(
            "its parent directory {} does not exist",
            parent.display()
        )));
    }
    std::fs::create_dir(dir).map_err(|e| fail(e.to_string()))
}

/// Runs a program made only of `servers`, named after the executable, with the default CLI.
///
/// ```no_run
/// use brisk::Server;
/// fn main() -> std::process::ExitCode {
///     let text = Server::new("text://127.0.0.1:7000").unwrap().on_message(|c, m| async move { c.send(m) });
///     let frame = Server::new("frame://127.0.0.1:7001").unwrap().on_message(|c, m| async move { c.send(m) });
///     brisk::run_all([text.into(), frame.into()])
/// }
/// ```
pub fn run_all(servers: impl IntoIterator<Item = Service>) -> ExitCode {
    let name = std::env::args_os()
        .next()
        .map(PathBuf::from)
        .and_then(|p| p.file_name().map(OsString::from))
        .and_then(|n| n.into_string().ok())
        .unwrap_or_else(|| "brisk".into());
    let mut app = App::new(name);
    for s in servers {
        app = app.server(s);
    }
    app.run()
}
