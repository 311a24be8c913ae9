//! The open-files limit: each worker raises it as far as allowed so it can hold many
//! connections; the master does the same once at start and says so when it stays low (one
//! line for the app, not one per worker: they inherit the same limits).

/// Raises this process's open-files limit as far as allowed (to the kernel's `fs.nr_open`
/// when running as root, else to the hard limit). Returns why connections are limited when
/// the limit stays under 100,000.
pub(crate) fn raise() -> Option<String> {
    use rlimit::Resource;
    let wanted: u64 = std::fs::read_to_string("/proc/sys/fs/nr_open")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(1 << 20);
    let (_, hard) = Resource::NOFILE.get().ok()?;
    let mut why = None;
    if hard < wanted {
        match Resource::NOFILE.set(wanted, wanted) {
            Ok(()) => return None,
            Err(e) => why = Some(e),
        }
    }
    let _ = Resource::NOFILE.set(hard, hard);
    (hard < wanted.min(100_000)).then(|| {
        format!(
            "open-files limit is {hard}: each worker can hold at most about that many \
             connections (raising it failed: {})",
            why.map(|e| e.to_string()).unwrap_or_default()
        )
    })
}
