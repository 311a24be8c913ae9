//! The machine's monotonic clock, one for every process on it: a time one process writes
//! (a connection that left its worker) another can compare with its own (the new worker).

/// `CLOCK_MONOTONIC` in nanoseconds (0 if it cannot be read).
pub(crate) fn monotonic_ns() -> u64 {
    let mut t = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes the current time into `t`, which lives across the call.
    if unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut t) } != 0 {
        return 0;
    }
    t.tv_sec as u64 * 1_000_000_000 + t.tv_nsec as u64
}
