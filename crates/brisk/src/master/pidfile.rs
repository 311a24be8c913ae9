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

/// The pid in `path`, if the file exists and that process is alive and runs this program.
/// After a crash the file stays behind, and its pid may since belong to anything else: that
/// neither blocks a start nor gets a `stop`'s signal.
pub(crate) fn running_pid(path: &Path) -> Option<i32> {
    let pid: i32 = std::fs::read_to_string(path).ok()?.trim().parse().ok()?;
    (alive(pid) && runs_this_program(pid)).then_some(pid)
}

/// Whether process `pid` runs the same executable as this process (compared by path; a
/// binary replaced on disk since either started still counts as the same).
fn runs_this_program(pid: i32) -> bool {
    let exe = |p: &str| {
        std::fs::read_link(format!("/proc/{p}/exe")).map(|path| {
            let path = path.to_string_lossy().into_owned();
            path.strip_suffix(" (deleted)")
                .map(str::to_owned)
                .unwrap_or(path)
        })
    };
    match (exe("self"), exe(&pid.to_string())) {
        (Ok(ours), Ok(theirs)) => ours == theirs,
        // Not ours to inspect (another user's process): assume it may be the app.
        _ => true,
    }
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
