//! [`QueryCache`]: answers for queries the application marks as cacheable, kept per worker
//! for a time-to-live and bounded in entries (least recently used go first). Hits and misses
//! are counted in the worker's `status` (`cache_hits`, `cache_misses`).
//!
//! A cache per worker needs no coordination and no network hop; the price is that each
//! worker loads an entry once, and an update is seen when the entry expires.

use std::num::NonZeroUsize;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;

use lru::LruCache;

use super::database::Db;
use super::error::DbError;
use super::row::Row;
use super::value::Value;
use crate::runtime::context;
use crate::stats::Stats;

/// A per-worker cache of query results; cheap to clone (clones share the entries).
///
/// ```no_run
/// # async fn f(db: brisk::db::Db) -> Result<(), brisk::db::DbError> {
/// use std::time::Duration;
/// use brisk::db::QueryCache;
/// let cache = QueryCache::new(10_000, Duration::from_secs(60));
/// let rows = cache.query(&db, "SELECT id, randomnumber FROM world WHERE id = $1", vec![7.into()]).await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct QueryCache {
    inner: Arc<Mutex<LruCache<Key, Entry>>>,
    ttl: Duration,
}

#[derive(Hash, PartialEq, Eq)]
struct Key {
    sql: Box<str>,
    params: Box<str>,
}

struct Entry {
    rows: Arc<Vec<Row>>,
    loaded: Instant,
}

impl QueryCache {
    /// A cache of at most `capacity` answers (at least 1), each kept for `ttl`.
    pub fn new(capacity: usize, ttl: Duration) -> Self {
        let capacity = NonZeroUsize::new(capacity).unwrap_or(NonZeroUsize::MIN);
        QueryCache {
            inner: Arc::new(Mutex::new(LruCache::new(capacity))),
            ttl,
        }
    }

    /// The rows of `sql` with `params`: from the cache while the answer is younger than the
    /// TTL, else from `db` (and then cached). Errors are not cached.
    pub async fn query(
        &self,
        db: &Db,
        sql: &str,
        params: Vec<Value>,
    ) -> Result<Arc<Vec<Row>>, DbError> {
        let key = Key {
            sql: sql.into(),
            params: format!("{params:?}").into(),
        };
        let hit = {
            let mut entries = self.inner.lock().unwrap_or_else(|p| p.into_inner());
            match entries.get(&key) {
                Some(e) if e.loaded.elapsed() < self.ttl => Some(e.rows.clone()),
                Some(_) => {
                    entries.pop(&key);
                    None
                }
                None => None,
            }
        };
        count(hit.is_some());
        if let Some(rows) = hit {
            return Ok(rows);
        }
        let rows = Arc::new(db.query(sql, params).await?);
        let entry = Entry {
            rows: rows.clone(),
            loaded: Instant::now(),
        };
        self.inner
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .put(key, entry);
        Ok(rows)
    }

    /// How many answers are cached now (expired ones included until looked up or evicted).
    pub fn len(&self) -> usize {
        self.inner.lock().unwrap_or_else(|p| p.into_inner()).len()
    }

    /// Whether nothing is cached.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Forgets every answer (after a write the application knows about).
    pub fn clear(&self) {
        self.inner.lock().unwrap_or_else(|p| p.into_inner()).clear();
    }
}

/// Counts a lookup in the worker's stats (outside a worker, nowhere).
fn count(hit: bool) {
    if let Some(w) = context::current() {
        let counter = if hit {
            &w.stats.cache_hits
        } else {
            &w.stats.cache_misses
        };
        Stats::add(counter, 1);
    }
}

#[cfg(all(test, feature = "sqlite"))]
mod tests {
    use super::*;
    use crate::db::DbOptions;

    #[tokio::test]
    async fn answers_come_from_the_cache_until_they_expire_and_the_oldest_go_first() {
        let dir = tempfile::tempdir().unwrap();
        let url = format!("sqlite:{}", dir.path().join("c.sqlite").display());
        let db = Db::open(&url, DbOptions::default()).unwrap();
        db.execute_batch("CREATE TABLE t (id INTEGER PRIMARY KEY, v INTEGER); INSERT INTO t VALUES (1, 10), (2, 20)")
            .await
            .unwrap();
        let ttl = Duration::from_millis(300);
        let cache = QueryCache::new(2, ttl);
        let sql = "SELECT v FROM t WHERE id = $1";
        let v = |rows: &Arc<Vec<Row>>| rows[0].get::<i64>(0).unwrap();
        assert_eq!(v(&cache.query(&db, sql, vec![1.into()]).await.unwrap()), 10);
        db.execute("UPDATE t SET v = 11 WHERE id = 1", vec![])
            .await
            .unwrap();
        // Cached: the update is not seen yet.
        assert_eq!(v(&cache.query(&db, sql, vec![1.into()]).await.unwrap()), 10);
        // Another parameter is another entry.
        assert_eq!(v(&cache.query(&db, sql, vec![2.into()]).await.unwrap()), 20);
        assert_eq!(cache.len(), 2);
        // Expired (the wait is the TTL itself): loaded again.
        tokio::time::sleep(ttl + Duration::from_millis(50)).await;
        assert_eq!(v(&cache.query(&db, sql, vec![1.into()]).await.unwrap()), 11);
        // A third key evicts the least recently used.
        cache.query(&db, sql, vec![2.into()]).await.unwrap();
        cache.query(&db, "SELECT 3", vec![]).await.unwrap();
        assert_eq!(cache.len(), 2);
        cache.clear();
        assert!(cache.is_empty());
    }
}
