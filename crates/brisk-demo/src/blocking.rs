//! `--blocking-db`: the database calls of the TechEmpower routes made the way a synchronous
//! worker makes them (report R5's synchronous PHP workers), for the lab to compare with
//! Brisk's asynchronous mode on the same queries.
//!
//! Each worker gets one connection, driven on a thread of its own; a query sends the SQL there
//! and the worker's thread waits for the answer, so the worker's event loop serves nothing
//! else meanwhile — exactly one request's query at a time per worker.

use std::sync::mpsc;

use brisk::db::{Db, DbError, DbOptions, Row, Value};

type Reply = mpsc::Sender<Result<Vec<Row>, DbError>>;

/// A synchronous client: `query` returns only when the database has answered.
pub(crate) struct BlockingDb {
    jobs: mpsc::Sender<(String, Vec<Value>, Reply)>,
}

impl BlockingDb {
    /// A client of the database at `url`, with its connection thread.
    pub(crate) fn new(url: &str) -> Result<Self, DbError> {
        let db = Db::open(url, DbOptions::default())?;
        let (jobs, queue) = mpsc::channel::<(String, Vec<Value>, Reply)>();
        std::thread::Builder::new()
            .name("blocking-db".into())
            .spawn(move || {
                let rt = match tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                {
                    Ok(rt) => rt,
                    Err(e) => return tracing::error!("blocking-db runtime: {e}"),
                };
                for (sql, params, reply) in queue {
                    let _ = reply.send(rt.block_on(db.query(&sql, params)));
                }
            })
            .map_err(|e| {
                DbError::Unavailable(format!("cannot start the blocking-db thread: {e}"))
            })?;
        Ok(BlockingDb { jobs })
    }

    /// Runs `sql` and blocks this thread until the answer is back.
    pub(crate) fn query(&self, sql: &str, params: Vec<Value>) -> Result<Vec<Row>, DbError> {
        let (reply, answer) = mpsc::channel();
        self.jobs
            .send((sql.to_string(), params, reply))
            .map_err(|_| DbError::Unavailable("the blocking-db thread is gone".into()))?;
        answer
            .recv()
            .map_err(|_| DbError::Unavailable("the blocking-db thread is gone".into()))?
    }
}
