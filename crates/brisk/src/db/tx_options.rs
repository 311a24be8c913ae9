//! [`TxOptions`]: how a transaction runs (isolation level, read-only) and how often
//! [`Db::transaction_with`](super::Db::transaction_with) runs it again after a serialization
//! failure.

/// A transaction's isolation level, as SQL names them. PostgreSQL and MySQL take each; SQLite
/// has one writer at a time, which is serializable whatever is asked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Isolation {
    /// Each statement sees what was committed before it began.
    ReadCommitted,
    /// Every statement sees what was committed before the transaction's first.
    RepeatableRead,
    /// As if the transactions ran one after another; a transaction that cannot be placed so
    /// fails with [`ErrorKind::Serialization`](super::ErrorKind::Serialization), to be run
    /// again.
    Serializable,
}

impl Isolation {
    /// The level as SQL writes it (`REPEATABLE READ`).
    pub fn sql(self) -> &'static str {
        match self {
            Isolation::ReadCommitted => "READ COMMITTED",
            Isolation::RepeatableRead => "REPEATABLE READ",
            Isolation::Serializable => "SERIALIZABLE",
        }
    }
}

/// How a transaction runs.
///
/// ```
/// use brisk::db::{Isolation, TxOptions};
/// let options = TxOptions::default().isolation(Isolation::Serializable).retries(3);
/// assert_eq!(options.retries, 3);
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TxOptions {
    /// The isolation level; `None`: the database's default (PostgreSQL's READ COMMITTED,
    /// MySQL's REPEATABLE READ).
    pub isolation: Option<Isolation>,
    /// The transaction only reads: a write in it fails (PostgreSQL and MySQL's `READ ONLY`,
    /// SQLite's `query_only`).
    pub read_only: bool,
    /// How many more times [`Db::transaction_with`](super::Db::transaction_with) runs the
    /// transaction after a serialization failure or deadlock (0: once only).
    pub retries: u32,
}

impl TxOptions {
    /// These options with isolation level `level`.
    pub fn isolation(mut self, level: Isolation) -> Self {
        self.isolation = Some(level);
        self
    }

    /// These options, read-only.
    pub fn read_only(mut self) -> Self {
        self.read_only = true;
        self
    }

    /// These options, run up to `n` more times after a serialization failure.
    pub fn retries(mut self, n: u32) -> Self {
        self.retries = n;
        self
    }
}
