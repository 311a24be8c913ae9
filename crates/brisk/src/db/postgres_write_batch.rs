//! When the PostgreSQL driver writes its requests: at once while the server has little to
//! do, in batches while it is busy.
//!
//! Each write is a system call, and on loopback the writer's core also pays for the
//! server's side of the delivery (the kernel's receive path runs in the sender's call).
//! Written as they come, the requests of a busy worker go one or two per write. Yet a server
//! with many requests of a connection to answer gets to a new one only after all of those
//! (it answers a connection's requests in order), so a new request that waits a little
//! before it is written is not answered any later: while at least [`HOLD_DEPTH`] written
//! requests wait for their answers, new ones wait in the driver's backlog, and go in one
//! write once the server's queue falls under that depth or [`HOLD_BATCH`] of them wait. The
//! server then still has that many requests ahead of them to answer, which takes longer
//! than the write (a tenth of a millisecond or more, against a few microseconds).
//!
//! Only requests of one run (one `Sync`: a query, a batch) wait: a request of several runs
//! (a pipeline of queries, each ending in its own `Sync`) brings that many queries to its
//! write already. A request held keeps its deadline, which runs from when it was made: one
//! that passes while it waits fails with a timeout and is never sent. Fewer requests in
//! flight (a worker with little load, a transaction's connection) are never held.

/// Written requests awaiting their answers from which new ones wait to be written.
pub(super) const HOLD_DEPTH: usize = 32;

/// Requests waiting to be written that go at once, however busy the server is.
pub(super) const HOLD_BATCH: usize = 32;

/// Whether requests not written yet wait, with `written` requests awaiting their answers
/// and `backlog` requests not written yet, the first of which holds `first_runs` runs (none
/// when the backlog is empty).
pub(super) fn holds(written: usize, backlog: usize, first_runs: u32) -> bool {
    written >= HOLD_DEPTH && backlog < HOLD_BATCH && first_runs == 1
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_of_one_run_wait_only_behind_a_deep_queue_and_until_a_batch_is_there() {
        assert!(!holds(0, 1, 1));
        assert!(!holds(HOLD_DEPTH - 1, 1, 1));
        assert!(holds(HOLD_DEPTH, 1, 1));
        assert!(holds(HOLD_DEPTH * 4, HOLD_BATCH - 1, 1));
        assert!(!holds(HOLD_DEPTH * 4, HOLD_BATCH, 1));
        // A pipeline of runs goes at once, however deep the queue.
        assert!(!holds(HOLD_DEPTH * 4, 1, 20));
    }
}
