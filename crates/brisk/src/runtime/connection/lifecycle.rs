//! Where a connection stands, as types: its [`Lifecycle`] (open, closing, destroyed, handed
//! over), whether its send queue reached the max send buffer ([`SendQueue`]), and the
//! independent facts its task acts on ([`Mark`]). Every transition is a method of this file;
//! the send path, the message loop, the handover and the worker's sweeps call the one they
//! make, and none writes the state itself.

use super::*;

/// Where a connection is in its life. It only moves forward: `Open` → `Closing` →
/// `Destroyed`, or from any of them to `HandedOver`; a later state is never left.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum Lifecycle {
    /// Reading and handling messages, sending.
    Open,
    /// Sends what is queued, then closes (after a linger for the peer's end): nothing more is
    /// read, handled or queued. `close`, the peer's end of stream, a graceful stop.
    Closing,
    /// Closes at once: nothing more is sent. `destroy`, an I/O error, a panic, a stop's end.
    Destroyed,
    /// Another worker serves it: nothing more happens to it here, and its handles see it
    /// closed.
    HandedOver,
}

/// Whether the send queue reached the max send buffer (`on_buffer_full` fired or is due).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum SendQueue {
    /// Below the max send buffer.
    Below,
    /// At it: until it empties, `on_buffer_full` does not fire again.
    Full,
}

/// Independent facts of a connection, each a bit of [`State::marks`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub(super) enum Mark {
    /// `pause_recv`: nothing is read until `resume_recv`.
    Paused = 1,
    /// A graceful stop: close between two messages (after a grace for a first one).
    Draining = 1 << 1,
    /// `on_buffer_full` is due.
    FullDue = 1 << 2,
    /// `on_buffer_drain` is due.
    DrainDue = 1 << 3,
    /// The peer ended its stream: no linger for it.
    PeerClosed = 1 << 4,
    /// At least one message was handled.
    Handled = 1 << 5,
    /// Something changed that the connection task must look at.
    Notified = 1 << 6,
    /// Hand the connection over at its next chance, between two messages (a reload).
    HandOver = 1 << 7,
}

/// A connection's state: three bytes, in the connection's one allocation.
#[derive(Debug)]
pub(super) struct State {
    lifecycle: Cell<Lifecycle>,
    queue: Cell<SendQueue>,
    marks: Cell<u8>,
}

impl State {
    /// A connection that just opened (or was handed over with `marks`).
    pub(super) fn opened(marks: &[Mark]) -> Self {
        State {
            lifecycle: Cell::new(Lifecycle::Open),
            queue: Cell::new(SendQueue::Below),
            marks: Cell::new(marks.iter().fold(0, |m, &k| m | k as u8)),
        }
    }

    /// Where it is in its life.
    #[inline]
    pub(super) fn lifecycle(&self) -> Lifecycle {
        self.lifecycle.get()
    }

    /// Reading, handling and sending (not closing, nor gone).
    #[inline]
    pub(super) fn is_open(&self) -> bool {
        self.lifecycle.get() == Lifecycle::Open
    }

    /// Moves to `to` if it is later than where the connection is.
    fn advance(&self, to: Lifecycle) {
        if to > self.lifecycle.get() {
            self.lifecycle.set(to);
        }
    }

    /// Closes after what is queued.
    pub(super) fn begin_closing(&self) {
        self.advance(Lifecycle::Closing);
    }

    /// Closes at once.
    pub(super) fn destroy(&self) {
        self.advance(Lifecycle::Destroyed);
    }

    /// The peer ended its stream: what came is answered, then the connection closes.
    pub(super) fn peer_closed(&self) {
        self.mark(Mark::PeerClosed);
        self.begin_closing();
    }

    /// Another worker serves it now.
    pub(super) fn handed_over(&self) {
        self.advance(Lifecycle::HandedOver);
    }

    /// Whether `mark` is set.
    #[inline]
    pub(super) fn has(&self, mark: Mark) -> bool {
        self.marks.get() & mark as u8 != 0
    }

    /// Sets `mark`.
    #[inline]
    pub(super) fn mark(&self, mark: Mark) {
        self.marks.set(self.marks.get() | mark as u8);
    }

    /// Clears `mark`; whether it was set.
    #[inline]
    pub(super) fn take(&self, mark: Mark) -> bool {
        let was = self.has(mark);
        self.marks.set(self.marks.get() & !(mark as u8));
        was
    }

    /// The send queue reached the max send buffer: `on_buffer_full` is due, once until it
    /// empties. True if it was below.
    pub(super) fn queue_filled(&self) -> bool {
        if self.queue.get() == SendQueue::Full {
            return false;
        }
        self.queue.set(SendQueue::Full);
        self.mark(Mark::FullDue);
        true
    }

    /// The send queue emptied: after it was full, `on_buffer_drain` is due.
    pub(super) fn queue_emptied(&self) {
        if self.queue.replace(SendQueue::Below) == SendQueue::Full {
            self.mark(Mark::DrainDue);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lifecycle_only_moves_forward() {
        let s = State::opened(&[]);
        assert!(s.is_open());
        s.begin_closing();
        assert_eq!(s.lifecycle(), Lifecycle::Closing);
        s.destroy();
        s.begin_closing();
        assert_eq!(
            s.lifecycle(),
            Lifecycle::Destroyed,
            "a closing never undoes a destroy"
        );
        s.handed_over();
        s.destroy();
        assert_eq!(s.lifecycle(), Lifecycle::HandedOver);
        assert!(!s.is_open());
    }

    #[test]
    fn the_peers_end_closes_and_says_no_linger_is_needed() {
        let s = State::opened(&[Mark::Handled]);
        s.peer_closed();
        assert_eq!(s.lifecycle(), Lifecycle::Closing);
        assert!(s.has(Mark::PeerClosed) && s.has(Mark::Handled));
    }

    #[test]
    fn a_full_queue_fires_once_until_it_empties_then_drain_fires() {
        let s = State::opened(&[]);
        assert!(s.queue_filled());
        assert!(!s.queue_filled(), "still full: no second on_buffer_full");
        assert!(s.take(Mark::FullDue));
        assert!(!s.take(Mark::FullDue));
        s.queue_emptied();
        assert!(s.take(Mark::DrainDue));
        s.queue_emptied();
        assert!(
            !s.has(Mark::DrainDue),
            "emptied while below: nothing to say"
        );
        // Full again before the task ran the drain: both are due, full first.
        assert!(s.queue_filled());
        s.queue_emptied();
        assert!(s.queue_filled());
        assert!(s.has(Mark::FullDue) && s.has(Mark::DrainDue));
    }
}
