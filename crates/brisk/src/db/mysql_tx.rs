//! A MySQL / MariaDB transaction: a connection of the worker's pool held from
//! `START TRANSACTION` to `COMMIT` or `ROLLBACK`.
//!
//! A transaction dropped before it ends gives its connection back marked for a reset
//! (`COM_RESET_CONNECTION`, which rolls back), so it never reaches another caller still
//! inside the transaction. Statements MySQL commits implicitly (DDL) are refused inside one.

use mysql_async::consts::StatusFlags;
use mysql_async::prelude::Queryable;

use super::error::DbError;
use super::mysql::Mysql;
use super::row::Row;
use super::statement::{check, Dialect, Place};
use super::tx_options::TxOptions;
use super::value::Value;

/// A transaction on MySQL or MariaDB; see [`Transaction`](super::Transaction).
pub(crate) struct MysqlTransaction {
    db: Mysql,
    /// `None` once it has ended.
    conn: Option<mysql_async::Conn>,
}

impl Mysql {
    /// Starts a transaction on a connection of the pool.
    pub(crate) async fn begin(&self, options: &TxOptions) -> Result<MysqlTransaction, DbError> {
        let conn = self.conn().await?;
        let mut tx = MysqlTransaction {
            db: self.clone(),
            conn: Some(conn),
        };
        let mut sql = String::new();
        if let Some(level) = options.isolation {
            // Without SESSION: for the next transaction only.
            sql.push_str("SET TRANSACTION ISOLATION LEVEL ");
            sql.push_str(level.sql());
            sql.push_str("; ");
        }
        sql.push_str(if options.read_only {
            "START TRANSACTION READ ONLY"
        } else {
            "START TRANSACTION READ WRITE"
        });
        // On failure the transaction drops here, which resets the connection.
        tx.batch(&sql).await?;
        Ok(tx)
    }
}

impl MysqlTransaction {
    fn conn(&mut self) -> Result<&mut mysql_async::Conn, DbError> {
        self.conn
            .as_mut()
            .ok_or_else(|| DbError::Refused("the transaction has ended".into()))
    }

    async fn batch(&mut self, sql: &str) -> Result<(), DbError> {
        let db = self.db.clone();
        let conn = self.conn()?;
        db.timed(conn.query_drop(sql)).await
    }

    /// Every row `sql` returns.
    pub(crate) async fn query(
        &mut self,
        sql: &str,
        params: Vec<Value>,
    ) -> Result<Vec<Row>, DbError> {
        check(sql, Dialect::Mysql, Place::Transaction)?;
        let db = self.db.clone();
        let rows = db.query_on(self.conn()?, sql, params).await?;
        self.still_open()?;
        Ok(rows)
    }

    /// An error if the last statement ended the transaction (a procedure that commits, a
    /// statement MySQL commits before): what followed would run outside it.
    fn still_open(&mut self) -> Result<(), DbError> {
        let in_transaction = self.conn()?.last_ok_packet().map(|ok| {
            ok.status_flags()
                .contains(StatusFlags::SERVER_STATUS_IN_TRANS)
        });
        if in_transaction == Some(false) {
            return Err(DbError::Refused(
                "a statement ended the transaction (MySQL committed it); it can only roll back \
                 now"
                .into(),
            ));
        }
        Ok(())
    }

    /// Runs a statement; how many rows it changed.
    pub(crate) async fn execute(&mut self, sql: &str, params: Vec<Value>) -> Result<u64, DbError> {
        check(sql, Dialect::Mysql, Place::Transaction)?;
        let db = self.db.clone();
        let conn = self.conn()?;
        let changed = db.execute_on(conn, sql, params).await?;
        self.still_open()?;
        Ok(changed)
    }

    /// Runs several statements separated by `;`, without parameters.
    pub(crate) async fn execute_batch(&mut self, sql: &str) -> Result<(), DbError> {
        check(sql, Dialect::Mysql, Place::Transaction)?;
        self.batch(sql).await?;
        self.still_open()
    }

    /// Ends the transaction with `sql`; the connection goes back to the pool (reset if the
    /// end failed).
    async fn end(&mut self, sql: &str) -> Result<(), DbError> {
        let ended = self.batch(sql).await;
        if let Some(mut conn) = self.conn.take() {
            if ended.is_err() {
                conn.reset_connection(true);
            }
        }
        ended
    }

    /// Commits.
    pub(crate) async fn commit(mut self) -> Result<(), DbError> {
        self.end("COMMIT").await
    }

    /// Rolls back.
    pub(crate) async fn rollback(mut self) -> Result<(), DbError> {
        self.end("ROLLBACK").await
    }
}

impl Drop for MysqlTransaction {
    fn drop(&mut self) {
        if let Some(mut conn) = self.conn.take() {
            // Back in the pool only after the server reset it, which rolls back.
            conn.reset_connection(true);
        }
    }
}
