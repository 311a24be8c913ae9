//! The open-file limit (`RLIMIT_NOFILE`): many connections need many
//! descriptors.

/// The current open-file limits, or `None` when they cannot be read.
fn nofile_limit() -> Option<libc::rlimit> {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: plain getrlimit on a local struct.
    (unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } == 0).then_some(lim)
}

/// Lifts the open-file soft limit to the hard limit so that many
/// connections can be held.
pub fn raise_fd_limit() {
    if let Some(mut lim) = nofile_limit() {
        if lim.rlim_cur < lim.rlim_max {
            lim.rlim_cur = lim.rlim_max;
            // SAFETY: plain setrlimit with a struct getrlimit filled in.
            unsafe {
                libc::setrlimit(libc::RLIMIT_NOFILE, &lim);
            }
        }
    }
}

/// The open-file hard limit (1024 when it cannot be read).
pub fn fd_hard_limit() -> u64 {
    nofile_limit().map_or(1024, |lim| lim.rlim_max)
}
