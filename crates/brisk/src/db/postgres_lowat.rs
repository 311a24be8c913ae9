//! How many bytes the PostgreSQL driver waits for before the kernel wakes it: the socket's
//! `SO_RCVLOWAT`, set from the fewest bytes the oldest request's answer must still hold.
//!
//! With a `Sync` per run (TechEmpower's rule for many queries), the server flushes each
//! run's answer on its own; a request of ten runs could wake the worker ten times to read a
//! part of its answer each time, and in a VM each wake of a halted core is an interrupt the
//! server's core pays for. Nothing can be answered before the oldest request (answers come in
//! order), so waking for fewer bytes than its answer must still hold only reads part of it.
//!
//! The bound has to be one the answer can never fall short of, or the worker would sleep
//! with the answer whole in its socket. A request of several runs runs one statement once
//! per parameter list (`Bind`, `Execute`, `Sync` each), so every run is answered with
//! `BindComplete` (5 bytes), its rows, a completion and `ReadyForQuery` (6), or with an
//! `ErrorResponse` (after a `BindComplete` or not) and `ReadyForQuery`:
//!
//! - before any run of the request has ended, a run takes at least [`RUN_FLOOR`] bytes (the
//!   shortest completion, `EmptyQueryResponse`, is 5);
//! - once one has ended with a completion, every later run does too, or fails: the runs share
//!   the statement and so the completion's tag (`SELECT 1`, `UPDATE 3`), of which only the
//!   count can change, down to one digit ([`RunBound::learn`]); a failing run takes at least
//!   [`ERROR_RUN_FLOOR`] bytes.
//!
//! **Many requests in flight** ([`Coalescing`]): when at least [`COALESCE_DEPTH`] requests the
//! server has (written whole) wait for their answers, the mark also counts the fewest bytes
//! of the answers of the next few (up to [`COALESCE_MAX`] requests in all), so that one
//! wake-up reads several answers. It makes the oldest answer wait for the next ones, which
//! the server is busy with anyway (a request that deep in the pipeline waits behind the
//! others); a timer of [`COALESCE_WAIT`] bounds that wait if one of them is slow: when it
//! fires, the mark falls back to the oldest request's own bytes until that answer is whole.
//! For answers of one run (`/db`'s: many and short) the mark is then the same from one
//! answer to the next, so it costs a system call only when the pipeline's depth crosses
//! [`COALESCE_DEPTH`]; below it, such an answer is read as soon as a byte of it comes.
//!
//! **A system call only when it pays.** A read often ends inside a message (`/fortunes`'
//! answers of ~900 bytes are cut where the kernel's buffer ended); once its header is in, the
//! mark counts a byte of it and what must follow it, not how much of it came, so it does not
//! move with the cut. And a mark a little under the bound only wakes the driver a little
//! early: it is lowered whenever the bound falls under it, raised only by [`RAISE_STEP`] or
//! more.

use std::os::fd::RawFd;
use std::pin::Pin;
use std::time::Duration;

use tokio::time::{Instant, Sleep};

/// The fewest bytes any run of a request of several is answered with: `BindComplete`, an
/// `EmptyQueryResponse` (the shortest completion) and `ReadyForQuery`, 5 bytes each but the
/// last (6). (A run whose `Bind` fails is answered with an `ErrorResponse`, longer.)
pub(super) const RUN_FLOOR: usize = 16;

/// The fewest bytes a failing run is answered with: an `ErrorResponse` holding only the
/// fields the protocol says are always there (a severity of one letter, the five-character
/// SQLSTATE, an empty message: 5 + 3 + 7 + 2 + 1 bytes) and `ReadyForQuery` (6).
pub(super) const ERROR_RUN_FLOOR: usize = 24;

/// `ReadyForQuery`'s size: what a run of which some messages came may still hold.
const READY_FOR_QUERY: usize = 6;

/// The fewest bytes any request's answer takes: the shortest completion
/// (`EmptyQueryResponse`, 5 bytes) and `ReadyForQuery` (6). Errors are longer.
const ANSWER_FLOOR: usize = 11;

/// Requests in flight (written, not answered) from which one wake-up waits for several
/// answers.
pub(super) const COALESCE_DEPTH: usize = 8;

/// The most requests whose answers one wake-up waits for.
const COALESCE_MAX: usize = 8;

/// The least a mark is raised by: the shortest answer. (Lowering is never skipped: a mark
/// over what can still come would sleep with the answer whole in the socket.)
const RAISE_STEP: usize = ANSWER_FLOOR;

/// How long the oldest request's answer may wait for the answers behind it. (Tokio's timers
/// count whole milliseconds: it fires 1 to 2 ms after it is set.)
pub(super) const COALESCE_WAIT: Duration = Duration::from_millis(1);

/// The fewest bytes the answer of a request not being read yet takes: `syncs` runs of one
/// statement, or one answer of any kind.
fn answer_floor(syncs: u32) -> usize {
    match syncs {
        0 | 1 => ANSWER_FLOOR,
        runs => RUN_FLOOR * runs as usize,
    }
}

/// What the driver knows of the size of the runs of the request whose answer it reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct RunBound {
    /// The fewest bytes each run still due takes, learnt from a completion: none yet.
    learnt: Option<usize>,
}

impl RunBound {
    /// A request none of whose runs has ended yet.
    fn new() -> RunBound {
        RunBound { learnt: None }
    }

    /// The fewest bytes each run still due takes.
    fn per_run(&self) -> usize {
        self.learnt.unwrap_or(RUN_FLOOR)
    }

    /// A run of the request ended with a completion whose `tag` the server sent in a
    /// `CommandComplete`: later runs of the same statement end with the same tag but for its
    /// count, or fail. After `MOVE 10`, a later run takes at least 23 bytes (`MOVE 0`:
    /// `BindComplete` 5, `CommandComplete` 12, `ReadyForQuery` 6). Were two tags to differ
    /// beyond their counts, the smaller bound holds.
    fn learn(&mut self, tag: &str) {
        let digits = tag.bytes().rev().take_while(u8::is_ascii_digit).count();
        // The message: its type, length, the tag with its count of one digit, a NUL.
        let completion = 5 + tag.len() - digits.saturating_sub(1) + 1;
        let success = 5 + completion + READY_FOR_QUERY;
        let floor = success.min(ERROR_RUN_FLOOR);
        self.learnt = Some(self.learnt.map_or(floor, |learnt| learnt.min(floor)));
    }

    /// The fewest bytes still to come of the answer being read, of which `runs_due` runs are
    /// still due (counting the current one): `started` says whether some messages of the
    /// current run have come (then it holds at least its `ReadyForQuery` more).
    fn still_due(&self, runs_due: usize, started: bool) -> usize {
        let current = match (started, runs_due > 1) {
            (true, _) => READY_FOR_QUERY,
            (false, true) => self.per_run(),
            (false, false) => ANSWER_FLOOR,
        };
        current + self.per_run() * runs_due.saturating_sub(1)
    }
}

/// Whether the mark counts the answers behind the oldest request's, and the timer that
/// bounds how long the oldest waits for them.
struct Coalescing {
    timer: Pin<Box<Sleep>>,
    /// The timer runs.
    armed: bool,
    /// The timer fired for the oldest request: its mark is its own answer's until it is whole.
    expired: bool,
    /// The oldest request is new: the mark has not counted the answers behind it yet.
    fresh: bool,
}

impl Coalescing {
    /// No oldest request yet.
    fn new() -> Coalescing {
        Coalescing {
            timer: Box::pin(tokio::time::sleep(Duration::from_secs(3600))),
            armed: false,
            expired: false,
            fresh: true,
        }
    }

    /// Whether the mark may count the answers behind the oldest, of `runs` runs, with
    /// `written` requests the server has (written whole) and not answered. Arms the timer if
    /// it is not running, and afresh for each oldest request of several runs (those take
    /// long enough to answer that each gets the whole wait). Answers of one run share a
    /// running timer: the oldest waits less than [`COALESCE_WAIT`] since the mark first
    /// counted answers behind an earlier one, and a stream of short answers costs a clock
    /// reading per timer, not per answer.
    fn applies(&mut self, written: usize, runs: u32) -> bool {
        if self.expired || written < COALESCE_DEPTH {
            return false;
        }
        if !self.armed || (self.fresh && runs > 1) {
            self.timer.as_mut().reset(Instant::now() + COALESCE_WAIT);
            self.armed = true;
        }
        self.fresh = false;
        true
    }

    /// The oldest request's answer is whole: the next one may count the answers behind it.
    fn next_oldest(&mut self) {
        self.expired = false;
        self.fresh = true;
    }

    /// Whether the timer runs (then [`timer`](Self::timer) is worth waiting for).
    fn armed(&self) -> bool {
        self.armed
    }

    /// The timer, to wait for while [`armed`](Self::armed).
    fn timer(&mut self) -> Pin<&mut Sleep> {
        self.timer.as_mut()
    }

    /// The timer fired: the oldest request waits for its own answer only.
    fn expire(&mut self) {
        self.armed = false;
        self.expired = true;
    }
}

/// The driver's receive low-water mark and what it is set from: whether some messages of the
/// current run of the oldest answer have come, the floor its runs showed, and whether the
/// answers behind it are counted too.
pub(super) struct Wakeups {
    lowat: RcvLowat,
    started: bool,
    bound: RunBound,
    coalescing: Coalescing,
}

impl Wakeups {
    /// The mark of the TCP socket `fd` (none on a Unix socket or under TLS: nothing is set).
    pub(super) fn of(fd: Option<RawFd>) -> Wakeups {
        Wakeups {
            lowat: RcvLowat::of(fd),
            started: false,
            bound: RunBound::new(),
            coalescing: Coalescing::new(),
        }
    }

    /// A message of the oldest answer came.
    pub(super) fn message(&mut self) {
        self.started = true;
    }

    /// A run of the oldest answer ended (its `ReadyForQuery` came).
    pub(super) fn run_ended(&mut self) {
        self.started = false;
    }

    /// A run of the oldest answer, a request of several runs, ended with a completion whose
    /// tag the server sent: see [`RunBound::learn`].
    pub(super) fn completion(&mut self, tag: &str) {
        self.bound.learn(tag);
    }

    /// The oldest answer is whole: the next one starts afresh.
    pub(super) fn answer_ended(&mut self) {
        self.started = false;
        self.bound = RunBound::new();
        self.coalescing.next_oldest();
    }

    /// Sets the mark for the requests in flight, given by the `ReadyForQuery`s each still
    /// awaits, oldest first, with `partial` read but not parsed (the start of a message);
    /// the last `unwritten` of them may still wait in the output (the server does not have
    /// them yet).
    pub(super) fn set_mark(
        &mut self,
        mut in_flight: impl ExactSizeIterator<Item = u32>,
        partial: &[u8],
        unwritten: usize,
    ) {
        let written = in_flight.len().saturating_sub(unwritten);
        let mark = match in_flight.next() {
            None | Some(0) => 1,
            Some(runs) => {
                let own = self.own_still_due(runs as usize, partial);
                let behind = if self.lowat.works() && self.coalescing.applies(written, runs) {
                    let next = written.min(COALESCE_MAX) - 1;
                    in_flight.take(next).map(answer_floor).sum()
                } else {
                    0
                };
                match (runs, behind) {
                    // An answer of one run, alone: any byte may end it.
                    (1, 0) => 1,
                    _ => (own + behind).max(1),
                }
            }
        };
        self.lowat.set(mark);
    }

    /// The fewest bytes still to come of the oldest answer, of which `runs_due` runs are
    /// still due, with `partial` (the start of its next message) read already. Once some of
    /// the current run came, a partial message whose header shows it is not the run's
    /// `ReadyForQuery` is followed by that `ReadyForQuery` (and the runs after it), so at
    /// least a byte of it and all of those are still to come, however much of it is read:
    /// the mark does not move with where the kernel happened to cut the answer.
    fn own_still_due(&self, runs_due: usize, partial: &[u8]) -> usize {
        let due = self.bound.still_due(runs_due, self.started);
        match partial.first() {
            Some(&kind) if self.started && partial.len() >= 5 && kind != b'Z' => due + 1,
            _ => due.saturating_sub(partial.len()),
        }
    }

    /// Whether the timer for the answers behind the oldest runs.
    pub(super) fn timer_armed(&self) -> bool {
        self.coalescing.armed()
    }

    /// That timer, to wait for while [`timer_armed`](Self::timer_armed).
    pub(super) fn timer(&mut self) -> Pin<&mut Sleep> {
        self.coalescing.timer()
    }

    /// The timer fired: the oldest request waits for its own answer only.
    pub(super) fn timer_fired(&mut self) {
        self.coalescing.expire();
    }
}

/// A TCP socket's `SO_RCVLOWAT`: the kernel wakes the driver only once that many bytes wait
/// (or the connection ends). Set only when it changes; a socket that refuses it is left at 1.
struct RcvLowat {
    fd: Option<RawFd>,
    now: usize,
}

impl RcvLowat {
    /// The mark of the TCP socket `fd` (none on a Unix socket or under TLS: nothing is set).
    fn of(fd: Option<RawFd>) -> RcvLowat {
        RcvLowat { fd, now: 1 }
    }

    /// Whether the mark can be set (a TCP socket that took it so far).
    fn works(&self) -> bool {
        self.fd.is_some()
    }

    /// Asks the kernel to wake the driver once `bytes` wait, or fewer: a mark under
    /// `bytes` only wakes the driver earlier, so it is kept unless `bytes` is at least
    /// [`RAISE_STEP`] more (a system call to wait for a few bytes more is not worth it).
    fn set(&mut self, bytes: usize) {
        let Some(fd) = self.fd else {
            return;
        };
        if bytes == self.now || (bytes > self.now && bytes < self.now + RAISE_STEP) {
            return;
        }
        let value = libc::c_int::try_from(bytes).unwrap_or(libc::c_int::MAX);
        // SAFETY: `fd` is the TCP socket the driver owns (open as long as it runs); the
        // option's value is a C int, passed with its size.
        let done = unsafe {
            libc::setsockopt(
                fd,
                libc::SOL_SOCKET,
                libc::SO_RCVLOWAT,
                (&raw const value).cast(),
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            )
        };
        match done {
            0 => self.now = bytes,
            _ => self.fd = None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_answer_not_seen_counts_its_floor_and_a_started_run_its_ready_for_query() {
        let bound = RunBound::new();
        assert_eq!(bound.still_due(1, false), 11);
        assert_eq!(bound.still_due(1, true), 6);
        assert_eq!(bound.still_due(10, false), 10 * RUN_FLOOR);
        assert_eq!(bound.still_due(10, true), 6 + 9 * RUN_FLOOR);
        assert_eq!(answer_floor(1), 11);
        assert_eq!(answer_floor(20), 20 * RUN_FLOOR);
    }

    #[test]
    fn a_completion_raises_the_floor_to_its_tag_with_a_count_of_one_digit() {
        let mut bound = RunBound::new();
        bound.learn("MOVE 10");
        // `MOVE 0`: BindComplete 5, CommandComplete 5 + 7, ReadyForQuery 6.
        assert_eq!(bound.still_due(2, false), 2 * 23);
        // No longer than the shortest failing run, whatever the tag.
        let mut insert = RunBound::new();
        insert.learn("INSERT 0 12345");
        assert_eq!(insert.still_due(2, false), 2 * ERROR_RUN_FLOOR);
        // Tags that differ beyond their counts (not one statement's): the smaller holds.
        bound.learn("DO");
        assert_eq!(bound.still_due(2, false), 2 * (5 + 8 + 6));
    }
    // (A runtime for the coalescing timer the wake-ups hold.)
    #[tokio::test(flavor = "current_thread")]
    async fn a_partial_message_after_the_runs_start_counts_what_must_follow_it() {
        let mut wakeups = Wakeups::of(None);
        // Nothing of the answer yet: its floor, less what is read of its first message.
        assert_eq!(wakeups.own_still_due(1, b""), ANSWER_FLOOR);
        assert_eq!(wakeups.own_still_due(1, b"D\0\0"), ANSWER_FLOOR - 3);
        wakeups.message();
        // A DataRow cut anywhere past its header: a byte of it and the ReadyForQuery.
        let row = b"D\0\0\0\x40\0\x02abcdefgh";
        for cut in 5..row.len() {
            assert_eq!(wakeups.own_still_due(1, &row[..cut]), READY_FOR_QUERY + 1);
            assert_eq!(
                wakeups.own_still_due(3, &row[..cut]),
                READY_FOR_QUERY + 1 + 2 * RUN_FLOOR
            );
        }
        // The ReadyForQuery itself, or a header not whole yet: only what is left of it.
        assert_eq!(wakeups.own_still_due(1, b"Z\0\0\0\x05"), 1);
        assert_eq!(wakeups.own_still_due(1, b"D\0"), READY_FOR_QUERY - 2);
    }

    #[test]
    fn the_mark_is_lowered_whenever_needed_and_raised_only_by_a_whole_step() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let socket = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let mut lowat = RcvLowat::of(Some(std::os::fd::AsRawFd::as_raw_fd(&socket)));
        let kernel = || {
            let mut value: libc::c_int = 0;
            let mut size = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
            // SAFETY: the socket is open; value and size are a C int and its size.
            let done = unsafe {
                libc::getsockopt(
                    std::os::fd::AsRawFd::as_raw_fd(&socket),
                    libc::SOL_SOCKET,
                    libc::SO_RCVLOWAT,
                    (&raw mut value).cast(),
                    &mut size,
                )
            };
            assert_eq!(done, 0);
            value
        };
        let steps = [
            (88, 88),
            (84, 84),
            (88, 84),
            (84 + RAISE_STEP, 95),
            (1, 1),
            (5, 1),
        ];
        for (asked, set) in steps {
            lowat.set(asked);
            assert_eq!(
                (lowat.now, kernel()),
                (set, set as libc::c_int),
                "asked {asked}"
            );
        }
    }
}
