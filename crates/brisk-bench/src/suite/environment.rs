//! The machine and tools a run happened on: CPU model, kernel, versions of
//! the peers' tools when present, and the UTC timestamp.

use std::path::Path;
use std::time::{SystemTime, UNIX_EPOCH};

use crate::suite::process::command_line_output;

/// The CPU model name from /proc/cpuinfo.
pub fn cpu_model() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|t| {
            t.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split_once(':'))
                .map(|(_, v)| v.trim().to_string())
        })
        .unwrap_or_else(|| "unknown".into())
}

/// Online CPUs.
pub fn cpu_count() -> usize {
    // Not available_parallelism: that counts only the CPUs this thread may use.
    // SAFETY: sysconf has no preconditions.
    let n = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) };
    usize::try_from(n).unwrap_or(1).max(1)
}

/// `uname -r`.
pub fn kernel() -> String {
    std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "unknown".into())
}

/// Versions of the usual peer tools that are installed.
pub fn tool_versions(cwd: &Path) -> Vec<(String, String)> {
    let tools: [(&str, &[&str]); 6] = [
        ("wrk", &["wrk", "-v"]),
        ("nginx", &["nginx", "-v"]),
        ("node", &["node", "--version"]),
        ("go", &["go", "version"]),
        ("php", &["php", "-v"]),
        ("php-fpm", &["php-fpm8.2", "-v"]),
    ];
    tools
        .iter()
        .filter_map(|(name, argv)| {
            let argv: Vec<String> = argv.iter().map(|s| s.to_string()).collect();
            command_line_output(&argv, cwd).map(|v| (name.to_string(), v))
        })
        .collect()
}

/// Seconds since the epoch as `(YYYY, MM, DD, hh, mm, ss)` in UTC.
pub fn civil(secs: u64) -> (i64, u32, u32, u32, u32, u32) {
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    // Howard Hinnant's days-to-civil.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (
        y,
        m,
        d,
        (rem / 3600) as u32,
        (rem / 60 % 60) as u32,
        (rem % 60) as u32,
    )
}

/// Now, UTC: (`2026-11-22T03:49:05Z`, `20261122-034905`).
pub fn timestamps() -> (String, String) {
    let secs = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let (y, mo, d, h, mi, s) = civil(secs);
    (
        format!("{y:04}-{mo:02}-{d:02}T{h:02}:{mi:02}:{s:02}Z"),
        format!("{y:04}{mo:02}{d:02}-{h:02}{mi:02}{s:02}"),
    )
}
