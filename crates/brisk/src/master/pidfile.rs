//! The pid file: who the running master is, and whether it is still alive.

use std::io;
use std::path::Path;

/// Whether `pid` is a live process (a zombie counts as dead).
pub(crate) fn alive(pid: i32) -> bool {
    // Signal 0 only checks that the process exists (EPERM: it does, and is not ours).
    let exists = matches!(
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), None),
        Ok(()) | Err(nix::errno::Errno::EPERM)
    );
    if !exists {
        return false;
    }
    // "pid (comm) S ..." — the state follows the last ')'.
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => stat
            .rsplit_once(')')
            .map(|(_, rest)| !rest.trim_start().starts_with(['Z', 'X']))
            .unwrap_or(true),
        Err(_) => false,
    }
}

/// The pid in `path`, if the file exists and that process is alive.
pub(crate) fn running_pid(path: &Path) -> Option<i32> {
    let pid: i32 = std::fs::read_to_string(path).ok()?.trim().parse().ok()?;
    alive(pid).then_some(pid)
}

/// Writes our pid.
pub(crate) fn write(path: &Path) -> io::Result<()> {
    std::fs::write(path, format!("{}\n", std::process::id()))
}

/// Removes the pid file if it still names us.
pub(crate) fn remove_if_ours(path: &Path) {
    let ours = std::fs::read_to_string(path)
        .ok()
        .and_then(|s| s.trim().parse::<u32>().ok())
        == Some(std::process::id());
    if ours {
        let _ = std::fs::remove_file(path);
    }
}
