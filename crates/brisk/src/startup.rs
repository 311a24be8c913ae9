//! The start-up process: runs the app's start-up hooks (`App::before_start`, `App::migrate`)
//! once per start, in a process of its own that the master starts before any worker, so that
//! nothing of theirs (connections, threads, memory) stays in the master, and no worker
//! accepts a connection before they are done. The master waits for it; a hook that fails ends
//! the start with what it said.

use std::future::Future;
use std::process::{Command, ExitCode, Stdio};

use futures_util::future::LocalBoxFuture;

use crate::env::{ENV_DAEMON, ENV_STARTUP, ENV_WORKER};
use crate::error::{Error, Result};
use crate::runtime::handler::BoxError;

/// A start-up hook: an async function run once per start.
pub(crate) type Hook = Box<dyn Fn() -> LocalBoxFuture<'static, Result<(), BoxError>>>;

/// Wraps `f` as a [`Hook`].
pub(crate) fn hook<F, Fut>(f: F) -> Hook
where
    F: Fn() -> Fut + 'static,
    Fut: Future<Output = Result<(), BoxError>> + 'static,
{
    Box::new(move || Box::pin(f()))
}

/// Whether this process was started to run the start-up hooks.
pub(crate) fn is_startup_process() -> bool {
    std::env::var_os(ENV_STARTUP).is_some()
}

/// In the master: runs this program again as the start-up process, as the user and group the
/// workers run as, and waits for it. Its log lines go where the master's go; what it says on
/// failure becomes the error.
pub(crate) fn run_process(uid: Option<u32>, gid: Option<u32>) -> Result<()> {
    use std::os::unix::process::CommandExt;
    let exe = std::env::current_exe().map_err(|e| Error::io("cannot find this program", e))?;
    let mut command = Command::new(exe);
    // As the workers will run: what the hooks create (an SQLite file) is theirs.
    if let Some(gid) = gid {
        command.gid(gid);
    }
    if let Some(uid) = uid {
        command.uid(uid);
    }
    let secrets = crate::secret_env::pass_to(&mut command)
        .map_err(|e| Error::io("cannot pass the secrets to the start-up process", e))?;
    if let Some(fd) = secrets.as_ref().map(std::os::fd::AsRawFd::as_raw_fd) {
        // SAFETY: only dup2, async-signal-safe, runs between fork and exec.
        unsafe {
            command.pre_exec(move || {
                if libc::dup2(fd, crate::secret_env::SECRETS_FD) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
    }
    let output = command
        .args(std::env::args_os().skip(1))
        .env(ENV_STARTUP, "1")
        .env_remove(ENV_DAEMON)
        .env_remove(ENV_WORKER)
        .stdin(Stdio::null())
        .stdout(Stdio::inherit())
        .stderr(Stdio::piped())
        .output()
        .map_err(|e| Error::io("cannot start the start-up process", e))?;
    let said = String::from_utf8_lossy(&output.stderr).trim().to_string();
    if output.status.success() {
        if !said.is_empty() {
            eprintln!("{said}");
        }
        return Ok(());
    }
    let said = if said.is_empty() {
        format!("the start-up process ended with {}", output.status)
    } else {
        said
    };
    Err(Error::Startup(said))
}

/// In the start-up process: runs `hooks` one after another on a single-threaded runtime, as
/// a worker would, and says on standard error which failed and why.
pub(crate) fn run_hooks(name: &str, hooks: &[Hook]) -> ExitCode {
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("{name}: cannot start a runtime for the start-up hooks: {e}");
            return ExitCode::FAILURE;
        }
    };
    let local = tokio::task::LocalSet::new();
    let result = local.block_on(&runtime, async {
        for (i, hook) in hooks.iter().enumerate() {
            if let Err(e) = hook().await {
                return Err(format!("start-up hook {} of {}: {e}", i + 1, hooks.len()));
            }
        }
        Ok(())
    });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(why) => {
            eprintln!("{why}");
            ExitCode::FAILURE
        }
    }
}
