//! What a worker's database pools report (`brisk_db_*` on `/metrics`, `db` in `status
//! --json`): connections open and busy now, and since start the queries and transactions
//! that waited for a place in a full pool, and the timeouts.
//!
//! The database layer registers each pool here (a pool answers for its connections when
//! asked) and counts waits and timeouts as they happen: a relaxed atomic add on a path that
//! already waits or fails. The worker's status reads it all once a second.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Mutex, Weak};

use serde::{Deserialize, Serialize};

/// A worker's database figures.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct DbFigures {
    /// Connections open now (a pool's shared connections that are up, and transactions'
    /// connections, idle or in use).
    pub connections_open: u64,
    /// Of those, the ones in use now: a shared connection with a query in flight, a
    /// transaction's connection in a transaction.
    pub connections_busy: u64,
    /// Queries and transactions that found every place of their pool taken and waited.
    pub waits: u64,
    /// Of those, the ones that waited past the acquire timeout (`PoolTimeout`).
    pub acquire_timeouts: u64,
    /// Queries that ran past the query timeout (`Timeout`).
    pub query_timeouts: u64,
}

impl DbFigures {
    /// This process's figures now: what its worker reports to `status` and `/metrics`.
    ///
    /// ```
    /// let now = brisk::stats::DbFigures::current();
    /// assert!(now.connections_busy <= now.connections_open);
    /// ```
    pub fn current() -> DbFigures {
        let (mut open, mut busy) = (0, 0);
        for pool in POOLS.lock().unwrap_or_else(|p| p.into_inner()).iter() {
            if let Some(pool) = pool.upgrade() {
                let (o, b) = pool.connections();
                open += o;
                busy += b;
            }
        }
        DbFigures {
            connections_open: open,
            connections_busy: busy,
            waits: WAITS.load(Relaxed),
            acquire_timeouts: ACQUIRE_TIMEOUTS.load(Relaxed),
            query_timeouts: QUERY_TIMEOUTS.load(Relaxed),
        }
    }

    /// Adds the counters of `other` (a worker that exited); the connections are a worker's own.
    pub(crate) fn add_counters(&mut self, other: &DbFigures) {
        self.waits += other.waits;
        self.acquire_timeouts += other.acquire_timeouts;
        self.query_timeouts += other.query_timeouts;
    }
}

/// A pool that can say how many of its connections are open and busy.
#[cfg_attr(
    not(any(feature = "postgres", feature = "mysql", feature = "sqlite")),
    allow(dead_code)
)]
pub(crate) trait PoolConnections: Send + Sync {
    /// (open, busy) now.
    fn connections(&self) -> (u64, u64);
}

static POOLS: Mutex<Vec<Weak<dyn PoolConnections>>> = Mutex::new(Vec::new());
static WAITS: AtomicU64 = AtomicU64::new(0);
static ACQUIRE_TIMEOUTS: AtomicU64 = AtomicU64::new(0);
static QUERY_TIMEOUTS: AtomicU64 = AtomicU64::new(0);

/// Counts `pool`'s connections in this process's figures for as long as it lives.
#[cfg_attr(
    not(any(feature = "postgres", feature = "mysql", feature = "sqlite")),
    allow(dead_code)
)]
pub(crate) fn register(pool: Weak<dyn PoolConnections>) {
    let mut pools = POOLS.lock().unwrap_or_else(|p| p.into_inner());
    pools.retain(|p| p.strong_count() > 0);
    pools.push(pool);
}

/// A query or transaction waited for a place in its pool.
#[cfg_attr(
    not(any(feature = "postgres", feature = "mysql", feature = "sqlite")),
    allow(dead_code)
)]
pub(crate) fn waited() {
    WAITS.fetch_add(1, Relaxed);
}

/// A wait for a place passed the acquire timeout.
#[cfg_attr(
    not(any(feature = "postgres", feature = "mysql", feature = "sqlite")),
    allow(dead_code)
)]
pub(crate) fn acquire_timed_out() {
    ACQUIRE_TIMEOUTS.fetch_add(1, Relaxed);
}

/// A query passed the query timeout.
#[cfg_attr(
    not(any(feature = "postgres", feature = "mysql", feature = "sqlite")),
    allow(dead_code)
)]
pub(crate) fn query_timed_out() {
    QUERY_TIMEOUTS.fetch_add(1, Relaxed);
}
