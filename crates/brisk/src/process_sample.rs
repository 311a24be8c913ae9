//! What Linux's `/proc` says about one process: CPU time, memory, open files and start time,
//! the figures of Prometheus's standard `process_*` metrics. The master reads them for itself
//! and for each of its workers.

/// One look at a process.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct ProcessSample {
    /// User and system CPU time in seconds.
    pub cpu_seconds: f64,
    /// Resident memory in bytes.
    pub resident_bytes: u64,
    /// Virtual memory in bytes.
    pub virtual_bytes: u64,
    /// Open file descriptors.
    pub open_fds: u64,
    /// The soft limit on open file descriptors.
    pub max_fds: u64,
    /// When the process started, in seconds since the Unix epoch.
    pub start_time_seconds: f64,
}

impl ProcessSample {
    /// Reads process `pid`; `None` if it has gone (or `/proc` cannot be read).
    pub(crate) fn of(pid: i32) -> Option<Self> {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        // The command name (field 2) is in parentheses and may hold spaces: count fields from
        // the last ')'.
        let rest = &stat[stat.rfind(')')? + 1..];
        let fields: Vec<&str> = rest.split_whitespace().collect();
        // After ')': state is field 3 of proc(5), so field n is at index n - 3.
        let field = |n: usize| -> Option<u64> { fields.get(n - 3)?.parse().ok() };
        let ticks = clock_ticks_per_second();
        let page = page_size();
        let open_fds = std::fs::read_dir(format!("/proc/{pid}/fd"))
            .map(|d| d.count() as u64)
            .unwrap_or(0);
        Some(ProcessSample {
            cpu_seconds: (field(14)? + field(15)?) as f64 / ticks,
            resident_bytes: field(24)? * page,
            virtual_bytes: field(23)?,
            open_fds,
            max_fds: max_open_files(pid).unwrap_or(0),
            start_time_seconds: boot_time()? + field(22)? as f64 / ticks,
        })
    }
}

/// Private memory of process `pid` in bytes: its anonymous resident memory (`RssAnon`: heap
/// and stacks, not the program's or files' pages it may share); `None` if it has gone.
pub(crate) fn private_bytes(pid: i32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("RssAnon:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

fn clock_ticks_per_second() -> f64 {
    nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK)
        .ok()
        .flatten()
        .filter(|&t| t > 0)
        .unwrap_or(100) as f64
}

fn page_size() -> u64 {
    nix::unistd::sysconf(nix::unistd::SysconfVar::PAGE_SIZE)
        .ok()
        .flatten()
        .filter(|&p| p > 0)
        .unwrap_or(4096) as u64
}

/// The machine's boot time in seconds since the Unix epoch (`btime` in `/proc/stat`).
fn boot_time() -> Option<f64> {
    std::fs::read_to_string("/proc/stat")
        .ok()?
        .lines()
        .find_map(|l| l.strip_prefix("btime "))?
        .trim()
        .parse()
        .ok()
}

/// The soft "Max open files" of `/proc/PID/limits`.
fn max_open_files(pid: i32) -> Option<u64> {
    std::fs::read_to_string(format!("/proc/{pid}/limits"))
        .ok()?
        .lines()
        .find_map(|l| l.strip_prefix("Max open files"))?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_reads_as_itself() {
        let me = ProcessSample::of(std::process::id() as i32).unwrap();
        assert!(me.resident_bytes > 1 << 20, "{me:?}");
        assert!(me.virtual_bytes >= me.resident_bytes, "{me:?}");
        assert!(me.open_fds >= 3 && me.max_fds >= me.open_fds, "{me:?}");
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs_f64();
        // Started before now, and not before this test binary could have been built.
        assert!(
            me.start_time_seconds <= now + 1.0 && me.start_time_seconds > now - 86_400.0,
            "{me:?}"
        );
        assert_eq!(ProcessSample::of(i32::MAX), None);
    }

    #[test]
    fn private_memory_grows_with_what_the_process_touches() {
        let me = std::process::id() as i32;
        let before = private_bytes(me).unwrap();
        let kept = vec![1u8; 64 << 20];
        let after = private_bytes(me).unwrap();
        assert!(after >= before + (60 << 20), "{before} -> {after}");
        assert!(after <= ProcessSample::of(me).unwrap().resident_bytes);
        drop(kept);
        assert_eq!(private_bytes(i32::MAX), None);
    }
}
