//! Reading /proc: the process tree of a started target (descendants by
//! ppid, plus its process group), its CPU ticks and RSS, and a background
//! sampler that keeps the peak RSS during a run.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// One process as read from `/proc/PID/stat`.
#[derive(Clone, Copy, Debug)]
pub struct ProcStat {
    /// Process id.
    pub pid: i32,
    /// Parent process id.
    pub ppid: i32,
    /// Process group id.
    pub pgrp: i32,
    /// utime + stime, in clock ticks.
    pub ticks: u64,
    /// utime alone (user space), in clock ticks.
    pub user_ticks: u64,
    /// Resident set size, KiB.
    pub rss_kb: u64,
}

/// Parses the content of `/proc/PID/stat`.
pub fn parse_stat(text: &str, page_kb: u64) -> Option<ProcStat> {
    let pid = text.split_whitespace().next()?.parse().ok()?;
    // The command name may contain spaces and parentheses: split after the last ')'.
    let rest = &text[text.rfind(')')? + 1..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    // f[0] is field 3 (state); field N is f[N - 3].
    let num = |n: usize| f.get(n - 3).and_then(|v| v.parse::<i64>().ok());
    Some(ProcStat {
        pid,
        ppid: num(4)? as i32,
        pgrp: num(5)? as i32,
        ticks: (num(14)? + num(15)?) as u64,
        user_ticks: num(14)? as u64,
        rss_kb: num(24)?.max(0) as u64 * page_kb,
    })
}

/// Every readable process on the machine.
pub fn all_processes() -> Vec<ProcStat> {
    let page_kb = page_kb();
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter_map(|pid| std::fs::read_to_string(format!("/proc/{pid}/stat")).ok())
        .filter_map(|t| parse_stat(&t, page_kb))
        .collect()
}

/// The processes of the tree rooted at `root` (by ppid) and of process
/// group `pgid`.
pub fn tree(root: i32, pgid: i32, all: &[ProcStat]) -> Vec<ProcStat> {
    let mut children: BTreeMap<i32, Vec<usize>> = BTreeMap::new();
    for (i, p) in all.iter().enumerate() {
        children.entry(p.ppid).or_default().push(i);
    }
    let mut picked = vec![false; all.len()];
    let mut stack: Vec<i32> = vec![root];
    for (i, p) in all.iter().enumerate() {
        if p.pid == root || p.pgrp == pgid {
            picked[i] = true;
            stack.push(p.pid);
        }
    }
    while let Some(pid) = stack.pop() {
        for &i in children.get(&pid).into_iter().flatten() {
            if !picked[i] {
                picked[i] = true;
                stack.push(all[i].pid);
            }
        }
    }
    all.iter()
        .zip(picked)
        .filter_map(|(p, keep)| keep.then_some(*p))
        .collect()
}

/// Totals of a process tree at one instant.
#[derive(Clone, Debug)]
pub struct TreeSnapshot {
    /// When it was taken.
    pub at: Instant,
    /// Sum of utime + stime, clock ticks.
    pub ticks: u64,
    /// Sum of utime, clock ticks.
    pub user_ticks: u64,
    /// Sum of RSS, KiB.
    pub rss_kb: u64,
    /// RSS per process, KiB, by pid.
    pub per_process_kb: Vec<(i32, u64)>,
}

/// Takes a snapshot of the tree rooted at `root` / group `pgid`.
pub fn snapshot(root: i32, pgid: i32) -> TreeSnapshot {
    let procs = tree(root, pgid, &all_processes());
    TreeSnapshot {
        at: Instant::now(),
        ticks: procs.iter().map(|p| p.ticks).sum(),
        user_ticks: procs.iter().map(|p| p.user_ticks).sum(),
        rss_kb: procs.iter().map(|p| p.rss_kb).sum(),
        per_process_kb: procs.iter().map(|p| (p.pid, p.rss_kb)).collect(),
    }
}

/// CPU use between two snapshots: (percent of one CPU, CPU seconds).
pub fn cpu_between(a: &TreeSnapshot, b: &TreeSnapshot) -> (f64, f64) {
    let secs = b.ticks.saturating_sub(a.ticks) as f64 / clk_tck();
    let wall = b.at.duration_since(a.at).as_secs_f64().max(1e-9);
    (secs / wall * 100.0, secs)
}

/// User-space CPU seconds between two snapshots (the rest of [`cpu_between`]'s seconds
/// were spent in the kernel).
pub fn user_seconds_between(a: &TreeSnapshot, b: &TreeSnapshot) -> f64 {
    b.user_ticks.saturating_sub(a.user_ticks) as f64 / clk_tck()
}

/// Clock ticks per second (`getconf CLK_TCK`).
pub fn clk_tck() -> f64 {
    // SAFETY: sysconf has no preconditions.
    let v = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if v > 0 {
        v as f64
    } else {
        100.0
    }
}

fn page_kb() -> u64 {
    // SAFETY: sysconf has no preconditions.
    let v = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if v > 0 {
        v as u64 / 1024
    } else {
        4
    }
}

/// The peak of a tree's RSS seen by a [`Sampler`].
#[derive(Clone, Debug, Default)]
pub struct Peak {
    /// Highest total RSS, KiB.
    pub rss_kb: u64,
    /// RSS per process at that moment, KiB, largest first.
    pub per_process_kb: Vec<u64>,
    /// Samples taken.
    pub samples: usize,
}

/// A thread sampling a tree's RSS until stopped.
pub struct Sampler {
    stop: Arc<AtomicBool>,
    peak: Arc<Mutex<Peak>>,
    handle: Option<JoinHandle<()>>,
}

impl Sampler {
    /// Starts sampling every `interval`.
    pub fn start(root: i32, pgid: i32, interval: Duration) -> Sampler {
        let stop = Arc::new(AtomicBool::new(false));
        let peak = Arc::new(Mutex::new(Peak::default()));
        let (s, p) = (Arc::clone(&stop), Arc::clone(&peak));
        let handle = std::thread::Builder::new()
            .name("brisk-bench-sampler".into())
            .spawn(move || loop {
                let snap = snapshot(root, pgid);
                if let Ok(mut peak) = p.lock() {
                    peak.samples += 1;
                    if snap.rss_kb > peak.rss_kb {
                        peak.rss_kb = snap.rss_kb;
                        let mut per: Vec<u64> = snap.per_process_kb.iter().map(|x| x.1).collect();
                        per.sort_unstable_by(|a, b| b.cmp(a));
                        peak.per_process_kb = per;
                    }
                }
                let until = Instant::now() + interval;
                while Instant::now() < until {
                    if s.load(Ordering::Relaxed) {
                        return;
                    }
                    std::thread::sleep(Duration::from_millis(20).min(interval));
                }
            })
            .ok();
        Sampler { stop, peak, handle }
    }

    /// Stops the thread and returns the peak.
    pub fn finish(mut self) -> Peak {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
        self.peak.lock().map(|p| p.clone()).unwrap_or_default()
    }
}
