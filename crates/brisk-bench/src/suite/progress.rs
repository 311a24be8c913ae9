//! A one-line progress display on stderr: what runs now and how much
//! remains.

use std::io::Write;
use std::time::Instant;

/// Progress over a known number of steps.
pub struct Progress {
    total: usize,
    done: usize,
    started: Instant,
    enabled: bool,
}

impl Progress {
    /// A display for `total` steps; `enabled = false` prints nothing.
    pub fn new(total: usize, enabled: bool) -> Progress {
        Progress {
            total,
            done: 0,
            started: Instant::now(),
            enabled,
        }
    }

    /// Shows the step about to run.
    pub fn show(&self, what: &str) {
        if !self.enabled {
            return;
        }
        let width = 24;
        let filled = (self.done * width).checked_div(self.total).unwrap_or(width);
        let bar: String = "#".repeat(filled) + &"-".repeat(width - filled);
        let mut err = std::io::stderr().lock();
        let _ = writeln!(
            err,
            "[{bar}] {}/{} {:>5.0}s  {what}",
            self.done,
            self.total,
            self.started.elapsed().as_secs_f64()
        );
    }

    /// Marks one step done.
    pub fn step(&mut self) {
        self.done += 1;
    }
}
