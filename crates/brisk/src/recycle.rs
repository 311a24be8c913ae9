//! Worker recycling: when a server's workers are replaced by fresh ones, as Swoole's
//! `max_request` and webman's memory monitor do against slow leaks.
//!
//! A worker that has served `max_requests` (plus its share of the jitter, drawn once when it
//! starts, so that workers started together do not recycle together) asks the master for a
//! replacement; the master also replaces a worker whose private memory has grown past
//! `max_memory` (it looks once a second). Either way the master starts the new worker, waits
//! until it is ready and retires the old one as a graceful `reload` does: nothing in flight
//! is lost. `status` and `/metrics` count recycles by cause.

use serde::{Deserialize, Serialize};

/// A server's recycling limits (none by default).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Recycle {
    /// Requests (HTTP requests, stream and datagram messages, WebSocket messages) a worker
    /// serves before it is replaced.
    pub max_requests: Option<u64>,
    /// The most requests a worker may draw to serve on top of `max_requests`; `None`: a tenth
    /// of `max_requests`.
    pub jitter: Option<u64>,
    /// Private memory (anonymous resident memory: heap and stacks) in bytes past which the
    /// master replaces a worker.
    pub max_memory: Option<u64>,
}

impl Recycle {
    /// How many requests this worker serves before it asks to be replaced: `max_requests`
    /// plus a random share of the jitter, drawn now. `None` without `max_requests`.
    pub(crate) fn draw_limit(&self) -> Option<u64> {
        let base = self.max_requests?;
        let jitter = self.jitter.unwrap_or(base / 10);
        Some(base.saturating_add(random_below(jitter.saturating_add(1))))
    }
}

/// A number in `0..n` (0 when `n` is 0), from the process's random hasher keys.
fn random_below(n: u64) -> u64 {
    use std::hash::{BuildHasher, Hasher};
    if n == 0 {
        return 0;
    }
    std::collections::hash_map::RandomState::new()
        .build_hasher()
        .finish()
        % n
}

/// Why a worker was replaced.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) enum RecycleCause {
    /// It served its `max_requests`.
    Requests,
    /// Its private memory passed `max_memory`.
    Memory,
}

impl RecycleCause {
    /// The cause's label in logs and metrics.
    pub(crate) fn label(self) -> &'static str {
        match self {
            RecycleCause::Requests => "requests",
            RecycleCause::Memory => "memory",
        }
    }
}

/// Workers replaced by recycling since the master started, by cause (a row of `status`).
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct RecycleCounts {
    /// Workers replaced after serving their `max_requests`.
    pub requests: u64,
    /// Workers replaced for passing `max_memory`.
    pub memory: u64,
}

impl RecycleCounts {
    /// Counts one recycle for `cause`.
    pub(crate) fn add(&mut self, cause: RecycleCause) {
        match cause {
            RecycleCause::Requests => self.requests += 1,
            RecycleCause::Memory => self.memory += 1,
        }
    }

    /// Both causes together.
    pub fn total(&self) -> u64 {
        self.requests + self.memory
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_limit_is_max_requests_plus_at_most_the_jitter() {
        let none = Recycle::default();
        assert_eq!(none.draw_limit(), None);
        let tenth = Recycle {
            max_requests: Some(1000),
            ..Recycle::default()
        };
        let draws: Vec<u64> = (0..200).map(|_| tenth.draw_limit().unwrap()).collect();
        assert!(
            draws.iter().all(|&d| (1000..=1100).contains(&d)),
            "{draws:?}"
        );
        // 200 draws out of 101 values are not all the same.
        assert!(draws.iter().any(|&d| d != draws[0]), "{draws:?}");
        let exact = Recycle {
            max_requests: Some(500),
            jitter: Some(0),
            max_memory: None,
        };
        assert_eq!(exact.draw_limit(), Some(500));
    }
}
