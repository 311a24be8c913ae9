//! Secrets from the environment that stay out of the environment of the processes a master
//! starts: [`secret_env`].
//!
//! The same program runs as master and as each worker, custom process and start-up process,
//! and builds the same [`App`](crate::App) in each; what it reads from the environment is
//! inherited by all of them, where `/proc/PID/environ`, crash reports and the programs they
//! run can see it. A variable read with [`secret_env`] in the master is removed from the
//! environment of every process it starts, which gets its value instead from a private
//! descriptor (a memfd, read once and closed) when it calls [`secret_env`] with the same name.
//!
//! The process that reads it from its environment keeps it there (an `upgrade`'s new master
//! and a daemon inherit it), but no longer in the block the kernel shows as
//! `/proc/PID/environ`, which other processes of the same user can read: the variable is set
//! again (the C library copies it to memory of its own) and its bytes in that block are
//! overwritten.

use std::collections::BTreeMap;
use std::io::{Read, Seek, Write};
use std::os::fd::{FromRawFd, OwnedFd};
use std::sync::{Mutex, OnceLock};

/// Names the descriptor a started process reads its secrets from.
const ENV_SECRETS_FD: &str = "BRISK_SECRETS_FD";

/// The descriptor number a started process finds its secrets at.
pub(crate) const SECRETS_FD: i32 = 5;

/// The secrets this process read from its own environment, by name.
static READ_HERE: Mutex<BTreeMap<String, String>> = Mutex::new(BTreeMap::new());

/// The secrets a master passed to this process, if it started it.
static PASSED: OnceLock<Option<BTreeMap<String, String>>> = OnceLock::new();

/// The environment variable `name`, kept from the processes the master starts: read with
/// this function in the master, it is not in their environment; they get the same value by
/// calling this function with the same name (the same code runs in each, so they do).
/// `None` when it is not set (or not UTF-8), as with [`std::env::var`].
///
/// For a database URL with its password, a token, a signing key: anything that other
/// processes of the same user, crash reports or programs a worker runs should not find.
///
/// ```no_run
/// let database = brisk::secret_env("DATABASE_URL").unwrap_or("sqlite:app.db".into());
/// ```
pub fn secret_env(name: &str) -> Option<String> {
    if let Some(passed) = passed() {
        // A variable the master did not read as a secret is still in the environment.
        return passed
            .get(name)
            .cloned()
            .or_else(|| std::env::var(name).ok());
    }
    let mut read = READ_HERE.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(value) = read.get(name) {
        return Some(value.clone());
    }
    let value = std::env::var(name).ok()?;
    hide_from_proc_environ(name, &value);
    read.insert(name.to_owned(), value.clone());
    Some(value)
}

/// Moves variable `name` (whose value is `value`) out of the block of memory the kernel
/// shows as `/proc/self/environ`: sets it again, so that the C library keeps a copy of its
/// own, then overwrites the value's bytes in the block with zeros. Nothing when the
/// variable's value is not in that block (set again since start already).
fn hide_from_proc_environ(name: &str, value: &str) {
    let Some((start, end)) = environ_block() else {
        return;
    };
    let Ok(c_name) = std::ffi::CString::new(name) else {
        return;
    };
    // SAFETY: getenv's answer is read before the variable changes; the block it may point
    // into lives as long as the process. Secrets are read while the app is built, before
    // the master or a CLI command starts threads that could read the environment at once.
    unsafe {
        let original = libc::getenv(c_name.as_ptr());
        let at = original as usize;
        if original.is_null() || at < start || at + value.len() > end {
            return;
        }
        std::env::set_var(name, value);
        std::ptr::write_bytes(original, 0, value.len());
    }
}

/// Where the environment block given at exec is (`/proc/self/stat`'s `env_start` and
/// `env_end`, fields 50 and 51).
fn environ_block() -> Option<(usize, usize)> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // The command name (field 2) may hold spaces: count from after its closing parenthesis.
    let rest = &stat[stat.rfind(')')? + 2..];
    let fields: Vec<&str> = rest.split(' ').collect();
    // `rest` starts at field 3.
    let field = |n: usize| fields.get(n - 3)?.trim().parse::<usize>().ok();
    Some((field(50)?, field(51)?))
}

/// Keeps `value` under `name` (not an environment variable: Brisk's own, such as the app's
/// settings) for the processes this master starts, which find it with [`passed_value`].
#[cfg_attr(not(feature = "config"), allow(dead_code))]
pub(crate) fn keep(name: &str, value: String) {
    let mut read = READ_HERE.lock().unwrap_or_else(|p| p.into_inner());
    read.insert(name.to_owned(), value);
}

/// In a process a master started: what it passed under `name` (`Some(None)` if nothing).
/// `None` in a process no master started (the master itself, a CLI command).
#[cfg_attr(not(feature = "config"), allow(dead_code))]
pub(crate) fn passed_value(name: &str) -> Option<Option<String>> {
    passed().map(|p| p.get(name).cloned())
}

/// In a started process whose app is built: reads what the master passed, if nothing has
/// yet, so that its descriptor (inherited by whatever the process runs) is closed.
pub(crate) fn close_passed() {
    let _ = passed();
}

/// What the master passed, read (and its descriptor closed) on first use.
fn passed() -> Option<&'static BTreeMap<String, String>> {
    PASSED
        .get_or_init(|| {
            let fd = crate::env::fd(ENV_SECRETS_FD)?;
            // SAFETY: the master put a memfd at this number for this process, and nothing
            // else in it uses that descriptor; the file takes it and closes it.
            let mut file = unsafe { std::fs::File::from_raw_fd(fd) };
            let mut text = String::new();
            if let Err(e) = file.read_to_string(&mut text) {
                eprintln!("brisk: cannot read the secrets the master passed: {e}");
                return None;
            }
            serde_json::from_str(&text)
                .map_err(|e| eprintln!("brisk: unreadable secrets from the master: {e}"))
                .ok()
        })
        .as_ref()
}

/// Prepares `command` (a process this master starts): the secrets read here leave its
/// environment, and [`ENV_SECRETS_FD`] tells it to read them at [`SECRETS_FD`]. Returns the
/// descriptor that holds them (numbered 10 or above, close-on-exec) for the caller to
/// `dup2` to [`SECRETS_FD`] between fork and exec and to drop after the start; `None` when
/// this process read no secret.
pub(crate) fn pass_to(command: &mut std::process::Command) -> std::io::Result<Option<OwnedFd>> {
    command.env_remove(ENV_SECRETS_FD);
    let Some((names, fd)) = for_child()? else {
        return Ok(None);
    };
    for name in names {
        command.env_remove(name);
    }
    command.env(ENV_SECRETS_FD, SECRETS_FD.to_string());
    // Above the numbers a started process gets (3, 4, 5), so no dup2 clobbers another.
    // SAFETY: F_DUPFD_CLOEXEC on a descriptor we own returns a new one we then own.
    let high = unsafe {
        libc::fcntl(
            std::os::fd::AsRawFd::as_raw_fd(&fd),
            libc::F_DUPFD_CLOEXEC,
            10,
        )
    };
    if high < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: `high` is a fresh descriptor owned by nobody else.
    Ok(Some(unsafe { OwnedFd::from_raw_fd(high) }))
}

/// The names of the secrets read here, and a descriptor (close-on-exec) holding their
/// values; `None` when this process read no secret.
fn for_child() -> std::io::Result<Option<(Vec<String>, OwnedFd)>> {
    let secrets = READ_HERE.lock().unwrap_or_else(|p| p.into_inner()).clone();
    if secrets.is_empty() {
        return Ok(None);
    }
    // SAFETY: memfd_create with a valid C string; the result is checked below.
    let fd = unsafe { libc::memfd_create(c"brisk-secrets".as_ptr(), libc::MFD_CLOEXEC) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: `fd` is a fresh descriptor owned by nobody else.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    let mut file = std::fs::File::from(fd);
    file.write_all(serde_json::to_string(&secrets)?.as_bytes())?;
    file.rewind()?;
    Ok(Some((secrets.into_keys().collect(), file.into())))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_secret_read_here_goes_to_children_by_a_descriptor() {
        std::env::set_var("BRISK_TEST_SECRET_ENV", "pw-123");
        assert_eq!(
            secret_env("BRISK_TEST_SECRET_ENV").as_deref(),
            Some("pw-123")
        );
        assert_eq!(secret_env("BRISK_TEST_SECRET_ENV_UNSET"), None);
        let (names, fd) = for_child().unwrap().expect("a secret was read");
        assert!(names.contains(&"BRISK_TEST_SECRET_ENV".to_owned()));
        let mut text = String::new();
        std::fs::File::from(fd).read_to_string(&mut text).unwrap();
        let passed: BTreeMap<String, String> = serde_json::from_str(&text).unwrap();
        assert_eq!(passed["BRISK_TEST_SECRET_ENV"], "pw-123");
    }
}
