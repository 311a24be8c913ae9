//! A PostgreSQL transaction: one connection of the worker's, held from `BEGIN` to `COMMIT`
//! or `ROLLBACK`, on which nothing else runs meanwhile.
//!
//! `BEGIN` is queued without waiting, so it goes out with the first statement in one write;
//! every answer's transaction status is checked, so a statement that ran outside the
//! transaction (had `BEGIN` failed) is never taken for part of it. A transaction dropped
//! before it ends queues a `ROLLBACK` ahead of anything the connection's next user sends.

use bytes::BytesMut;
use postgres_protocol::message::frontend;
use tokio::sync::OwnedSemaphorePermit;

use super::error::DbError;
use super::pool_wait;
use super::postgres::{Live, Postgres};
use super::postgres_answer::{convert_row, outcomes, Outcome, Prepared};
use super::postgres_wire::{self, Pending};
use super::row::Row;
use super::tx_options::TxOptions;
use super::value::Value;

/// A transaction on PostgreSQL; see [`Transaction`](super::Transaction).
pub(crate) struct PgTransaction {
    db: Postgres,
    /// `None` once it has ended.
    live: Option<Live>,
    /// `BEGIN`'s answer, until it is looked at.
    begin: Option<Pending>,
    _permit: OwnedSemaphorePermit,
}

impl Postgres {
    /// Starts a transaction on a connection of its own (waiting up to the acquire timeout
    /// for one of the `max_transactions`).
    pub(crate) async fn begin(&self, options: &TxOptions) -> Result<PgTransaction, DbError> {
        let wait = self.inner.options.acquire_timeout;
        let permit = pool_wait::take(&self.inner.transactions, wait).await?;
        let live = self.exclusive().await?;
        let mut sql = String::from("BEGIN");
        if let Some(level) = options.isolation {
            sql.push_str(" ISOLATION LEVEL ");
            sql.push_str(level.sql());
        }
        if options.read_only {
            sql.push_str(" READ ONLY");
        }
        let mut out = BytesMut::new();
        frontend::query(&sql, &mut out).map_err(|e| DbError::Refused(e.to_string()))?;
        let begin = live.connection.send(out)?;
        Ok(PgTransaction {
            db: self.clone(),
            live: Some(live),
            begin: Some(begin),
            _permit: permit,
        })
    }
}

impl PgTransaction {
    fn live(&self) -> Result<&Live, DbError> {
        self.live
            .as_ref()
            .ok_or_else(|| DbError::Refused("the transaction has ended".into()))
    }

    /// Checks `BEGIN`'s answer, once: it came before the answer of anything sent after it.
    /// (Once a transaction is open, only COMMIT or ROLLBACK close it, and both are refused
    /// inside it.)
    async fn settle(&mut self) -> Result<(), DbError> {
        if let Some(begin) = self.begin.take() {
            let answer = self.db.timed(postgres_wire::answer(begin)).await?;
            if answer.status == b'I' {
                return Err(DbError::Unavailable(
                    "BEGIN did not open a transaction".into(),
                ));
            }
            outcomes(answer, self.db.timeout())?;
        }
        Ok(())
    }

    /// Runs `sql` with `params` inside the transaction.
    async fn run(
        &mut self,
        sql: &str,
        params: Vec<Value>,
    ) -> Result<(Vec<Outcome>, Prepared), DbError> {
        let live = self.live()?;
        let ran = self.db.run_on(live, sql, &[params]).await;
        if let Err(super::postgres::RunError::Reshaped(_, prepared)) = &ran {
            // The failed statement ended the transaction's chances, but not the cache's: it
            // is prepared again by the next transaction that runs it.
            live.forget(sql, &prepared.name);
        }
        self.settle().await?;
        let (outcomes, prepared, status) = ran?;
        still_open(status)?;
        Ok((outcomes, prepared))
    }

    /// Every row `sql` returns.
    pub(crate) async fn query(
        &mut self,
        sql: &str,
        params: Vec<Value>,
    ) -> Result<Vec<Row>, DbError> {
        let (outcomes, prepared) = self.run(sql, params).await?;
        let rows = outcomes.first().map(|o| &o.rows[..]).unwrap_or_default();
        rows.iter().map(|r| convert_row(r, &prepared)).collect()
    }

    /// Runs a statement; how many rows it changed.
    pub(crate) async fn execute(&mut self, sql: &str, params: Vec<Value>) -> Result<u64, DbError> {
        let (outcomes, _) = self.run(sql, params).await?;
        Ok(outcomes.first().map_or(0, |o| o.changed))
    }

    /// Runs several statements separated by `;`, without parameters.
    pub(crate) async fn execute_batch(&mut self, sql: &str) -> Result<(), DbError> {
        use super::statement::{check, Dialect, Place};
        check(sql, Dialect::Postgres, Place::Transaction)?;
        let live = self.live()?;
        let ran = self.db.simple(live, sql).await;
        self.settle().await?;
        let (_, status) = ran?;
        still_open(status)
    }

    /// Ends the transaction with `sql` (`COMMIT` or `ROLLBACK`); the connection goes back to
    /// the pool if it is idle again.
    async fn end(&mut self, sql: &str) -> Result<Vec<Outcome>, DbError> {
        let live = self.live()?;
        let mut out = BytesMut::new();
        frontend::query(sql, &mut out).map_err(|e| DbError::Refused(e.to_string()))?;
        let answer = self.db.timed(live.connection.request(out)).await;
        self.settle().await?;
        let answer = answer?;
        let idle = answer.status == b'I';
        let outcomes = outcomes(answer, self.db.timeout());
        if let Some(live) = self.live.take() {
            if idle {
                self.db.give_back(live);
            }
        }
        outcomes
    }

    /// Commits. A transaction that failed earlier is rolled back instead, and says so.
    pub(crate) async fn commit(mut self) -> Result<(), DbError> {
        let outcomes = self.end("COMMIT").await?;
        // PostgreSQL answers COMMIT in a failed transaction with the tag ROLLBACK.
        if outcomes.iter().any(|o| o.rolled_back) {
            return Err(DbError::Refused(
                "the transaction had failed and was rolled back, not committed".into(),
            ));
        }
        Ok(())
    }

    /// Rolls back.
    pub(crate) async fn rollback(mut self) -> Result<(), DbError> {
        self.end("ROLLBACK").await.map(drop)
    }
}

/// An error if `status`, after a statement of the transaction, says no transaction is open:
/// the statement ended it (a COMMIT or ROLLBACK the check could not see), and what followed
/// would run outside it.
fn still_open(status: u8) -> Result<(), DbError> {
    if status == b'I' {
        return Err(DbError::Refused(
            "a statement ended the transaction (a COMMIT or ROLLBACK inside it); it can only \
             roll back now"
                .into(),
        ));
    }
    Ok(())
}

impl Drop for PgTransaction {
    fn drop(&mut self) {
        let Some(live) = self.live.take() else {
            return;
        };
        // Ended neither way: the ROLLBACK goes ahead of whatever the connection's next
        // transaction sends, so that one starts clean.
        let mut out = BytesMut::new();
        if frontend::query("ROLLBACK", &mut out).is_ok() && live.connection.send(out).is_ok() {
            self.db.give_back(live);
        }
    }
}
