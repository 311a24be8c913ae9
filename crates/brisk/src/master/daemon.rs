//! `start -d`: runs the master in the background.
//!
//! Instead of `fork()`, the CLI starts the same program again in a new session with its output
//! going to the log file, then waits until that master answers on its control socket (or
//! died, in which case it prints the end of the log).

use std::fs::OpenOptions;
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use super::pidfile;
use crate::env::ENV_DAEMON;
use crate::error::{Error, Result};
use crate::run_paths::RunPaths;

/// Whether this process is the background master started by [`start`].
pub(crate) fn is_daemon_child() -> bool {
    std::env::var_os(ENV_DAEMON).is_some()
}

/// Starts the master in the background and waits until it is serving.
pub(crate) fn start(paths: &RunPaths) -> Result<()> {
    paths.prepare()?;
    if let Some(pid) = pidfile::running_pid(&paths.pid_file()) {
        return Err(Error::AlreadyRunning {
            name: paths.name.clone(),
            pid,
        });
    }
    let log_path = paths.log_file();
    let log = OpenOptions::new()
        .create(true)
        .append(true)
        .open(&log_path)
        .map_err(|e| Error::io(format!("cannot open log file {}", log_path.display()), e))?;
    let log_len = log.metadata().map(|m| m.len()).unwrap_or(0);
    let exe = super::program_path()?;
    let mut cmd = Command::new(exe);
    cmd.args(std::env::args_os().skip(1))
        .env(ENV_DAEMON, "1")
        .stdin(Stdio::null())
        .stdout(log.try_clone().map_err(|e| Error::io("log file", e))?)
        .stderr(log);
    // SAFETY: setsid is async-signal-safe; it detaches the master from our terminal.
    unsafe {
        cmd.pre_exec(|| {
            libc::setsid();
            Ok(())
        });
    }
    let mut child = cmd
        .spawn()
        .map_err(|e| Error::io("cannot start the background master", e))?;
    match wait_serving(&mut child, paths, Duration::from_secs(30)) {
        Started::Serving => {
            println!(
                "{} started in the background: master pid {}, log {}",
                paths.name,
                child.id(),
                log_path.display()
            );
            Ok(())
        }
        Started::Exited(status) => {
            let log = std::fs::read_to_string(&log_path).unwrap_or_default();
            let tail: String = log.get(log_len as usize..).unwrap_or("").to_string();
            Err(Error::Config(format!(
                "the background master exited ({status}) before it was ready; its log {} says:\n{}",
                log_path.display(),
                tail.trim_end()
            )))
        }
        Started::NotYet => Err(Error::Config(format!(
            "the background master (pid {}) is not ready after 30 s; see {}",
            child.id(),
            log_path.display()
        ))),
    }
}

/// How a master this process started came up.
pub(crate) enum Started {
    /// Its pid is in the pid file and its control socket answers.
    Serving,
    /// It exited first.
    Exited(std::process::ExitStatus),
    /// Neither within the time given (it still runs).
    NotYet,
}

/// Waits (up to `limit`) until `child`, a master of the app at `paths`, serves.
pub(crate) fn wait_serving(
    child: &mut std::process::Child,
    paths: &RunPaths,
    limit: Duration,
) -> Started {
    let started = Instant::now();
    loop {
        if let Ok(Some(status)) = child.try_wait() {
            return Started::Exited(status);
        }
        if pidfile::running_pid(&paths.pid_file()) == Some(child.id() as i32)
            && std::os::unix::net::UnixStream::connect(paths.control_socket()).is_ok()
        {
            return Started::Serving;
        }
        if started.elapsed() > limit {
            return Started::NotYet;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}
