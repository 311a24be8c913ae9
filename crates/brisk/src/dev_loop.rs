//! `dev`: the development loop. Starts the app (its log on this terminal), watches files, and
//! on each change runs the build command; a build that succeeds is swapped in with `upgrade`
//! (the listeners stay open: a browser or client never sees the port closed), one that fails
//! leaves the last good build serving. Ctrl-C (or SIGTERM) stops the app and the loop.
//!
//! Watching polls the files' sizes and modification times four times a second (no inotify:
//! the same on every file system, containers and network mounts included); a change is acted
//! on once nothing has changed for a quarter of a second, so an editor's burst of writes is
//! one build. An edit made while a build runs starts another once it ends.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant, SystemTime};

use crate::error::{Error, Result};
use crate::master::daemon::Started;
use crate::run_paths::RunPaths;

/// Set in the environment of the master `dev` starts: there, `dev` runs as `start`.
const ENV_DEV_MASTER: &str = "BRISK_DEV_MASTER";
/// How often the watched files are looked at, and how long they must stay unchanged before
/// a build starts.
const SETTLE: Duration = Duration::from_millis(250);
/// How long the app may take to start.
const START_TIMEOUT: Duration = Duration::from_secs(60);

/// Whether this process is the master a `dev` loop started (which then runs as `start`).
pub(crate) fn is_dev_master() -> bool {
    std::env::var_os(ENV_DEV_MASTER).is_some()
}

/// What `dev` watches and how it rebuilds.
pub(crate) struct DevLoop {
    /// Files and directories (walked) whose changes start a build.
    pub watch: Vec<PathBuf>,
    /// The build command, run by `sh -c` in the working directory.
    pub build: String,
    /// The new master's start-up limit for each `upgrade`.
    pub upgrade_timeout_s: u64,
}

impl DevLoop {
    /// Runs the loop until Ctrl-C or SIGTERM, then stops the app.
    pub(crate) fn run(&self, paths: &RunPaths, graceful_timeout: Duration) -> Result<()> {
        for w in &self.watch {
            if !w.exists() {
                return Err(Error::Config(format!(
                    "dev: nothing to watch at {} (give --watch a file or directory)",
                    w.display()
                )));
            }
        }
        if crate::master::pidfile::running_pid(&paths.pid_file()).is_some() {
            return Err(Error::Config(format!(
                "dev: {} is running already: stop it first",
                paths.name
            )));
        }
        stop_on_signals()?;
        let master = start_master(paths)?;
        println!(
            "dev: {} serves (master pid {master}); watching {}; `{}` on each change",
            paths.name,
            (self.watch.iter())
                .map(|w| w.display().to_string())
                .collect::<Vec<_>>()
                .join(", "),
            self.build
        );
        let mut seen = fingerprint(&self.watch);
        let mut changed_at: Option<Instant> = None;
        while !STOP.load(Ordering::Relaxed) {
            std::thread::sleep(SETTLE);
            if crate::master::pidfile::running_pid(&paths.pid_file()).is_none() {
                return Err(Error::Config(format!("dev: {} stopped", paths.name)));
            }
            let now = fingerprint(&self.watch);
            if now != seen {
                seen = now;
                changed_at = Some(Instant::now());
                continue;
            }
            if changed_at.is_some_and(|t| t.elapsed() >= SETTLE) {
                changed_at = None;
                // `seen` is what this build builds: a later edit is a change again.
                self.rebuild(paths);
            }
        }
        println!("dev: stopping {}", paths.name);
        match crate::cli::stop(paths, graceful_timeout, false) {
            // Ctrl-C reached the first master too (it shares this terminal's group).
            Err(e) if crate::cli::is_not_running(&e) => Ok(()),
            done => done,
        }
    }

    /// Builds, and upgrades to the build if it succeeded.
    fn rebuild(&self, paths: &RunPaths) {
        println!("dev: a change; running `{}`", self.build);
        let t0 = Instant::now();
        let status = Command::new("sh")
            .arg("-c")
            .arg(&self.build)
            .stdin(Stdio::null())
            .status();
        match status {
            Ok(s) if s.success() => {}
            Ok(s) => {
                println!("dev: the build failed ({s}); the last good build goes on serving");
                return;
            }
            Err(e) => {
                println!("dev: cannot run the build: {e}; the last good build goes on serving");
                return;
            }
        }
        let built = t0.elapsed();
        match crate::cli::upgrade(paths, self.upgrade_timeout_s) {
            Ok(()) => println!("dev: built in {:.1} s and swapped in", built.as_secs_f64()),
            Err(e) => println!("dev: the new build did not take over: {e}"),
        }
    }
}

/// Set by SIGINT and SIGTERM.
static STOP: AtomicBool = AtomicBool::new(false);

extern "C" fn on_stop_signal(_: libc::c_int) {
    STOP.store(true, Ordering::Relaxed);
}

/// Ctrl-C and SIGTERM end the loop (which then stops the app) instead of this process.
fn stop_on_signals() -> Result<()> {
    use nix::sys::signal::{sigaction, SaFlags, SigAction, SigHandler, SigSet, Signal};
    let action = SigAction::new(
        SigHandler::Handler(on_stop_signal),
        SaFlags::SA_RESTART,
        SigSet::empty(),
    );
    for signal in [Signal::SIGINT, Signal::SIGTERM] {
        // SAFETY: the handler only stores to an atomic, which is async-signal-safe.
        unsafe { sigaction(signal, &action) }
            .map_err(|e| Error::io("dev: cannot handle signals", e.into()))?;
    }
    Ok(())
}

/// Starts this program again as the app's master (its output on this terminal) and waits
/// until it answers; its pid.
fn start_master(paths: &RunPaths) -> Result<i32> {
    paths.prepare()?;
    let exe = crate::master::program_path()?;
    let mut child = Command::new(exe)
        .args(std::env::args_os().skip(1))
        .env(ENV_DEV_MASTER, "1")
        .env(crate::env::ENV_DEV_LOOP_PID, std::process::id().to_string())
        .stdin(Stdio::null())
        .spawn()
        .map_err(|e| Error::io("dev: cannot start the app", e))?;
    match crate::master::daemon::wait_serving(&mut child, paths, START_TIMEOUT) {
        Started::Serving => {
            let pid = child.id() as i32;
            // Reaped when it exits (after an upgrade, as an old master) by a thread of
            // this process, its parent.
            std::thread::spawn(move || child.wait());
            Ok(pid)
        }
        Started::Exited(status) => Err(Error::Config(format!(
            "dev: the app exited ({status}) before it was ready; its log is above"
        ))),
        Started::NotYet => {
            let _ = child.kill();
            Err(Error::Config(format!(
                "dev: the app was not ready within {} s",
                START_TIMEOUT.as_secs()
            )))
        }
    }
}

/// Each watched file's path, length and modification time, in order: any edit, new file or
/// removal changes it.
fn fingerprint(watch: &[PathBuf]) -> Vec<(PathBuf, u64, Option<SystemTime>)> {
    let mut files = Vec::new();
    for w in watch {
        walk(w, &mut files);
    }
    files.sort();
    files
}

fn walk(path: &Path, out: &mut Vec<(PathBuf, u64, Option<SystemTime>)>) {
    let Ok(meta) = std::fs::metadata(path) else {
        return;
    };
    if meta.is_dir() {
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
        // Build output and version control are not sources.
        if name == "target" || name.starts_with('.') && name.len() > 1 {
            return;
        }
        if let Ok(entries) = std::fs::read_dir(path) {
            for e in entries.flatten() {
                walk(&e.path(), out);
            }
        }
    } else {
        out.push((path.to_path_buf(), meta.len(), meta.modified().ok()));
    }
}
