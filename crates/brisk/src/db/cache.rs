//! [`QueryCache`]: answers for queries the application marks as cacheable, kept per worker
//! for a time-to-live and bounded in entries (least recently used go first). Hits and misses
//! are counted in the worker's `status` (`cache_hits`, `cache_misses`).
//!
//! A cache per worker needs no coordination and no network hop; the price is that each
//! worker loads an entry once, and an update is seen when the entry expires.

use std::any::{Any, TypeId};
use std::fmt::Write as _;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::num::NonZeroUsize;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;

use lru::LruCache;

use super::database::Db;
use super::error::DbError;
use super::row::{decode_all, Row};
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
    /// Entries by the hash of their key; a lookup compares the whole key, so two keys with
    /// one hash only take turns in one place.
    inner: Arc<Mutex<LruCache<u64, Entry>>>,
    ttl: Duration,
}

/// One cached answer: the rows as they came, or decoded into a `Vec<T>` ([`QueryCache::query_as`]).
struct Entry {
    sql: Box<str>,
    /// The parameters as `Debug` writes them.
    params: Box<str>,
    /// A `Vec<Row>`, or the `Vec<T>` of `query_as` (its type is part of the key).
    value: Arc<dyn Any + Send + Sync>,
    loaded: Instant,
}

/// A lookup's key, hashed and compared without allocating.
struct Lookup<'a> {
    sql: &'a str,
    params: &'a [Value],
    of: TypeId,
}

impl Lookup<'_> {
    fn hash(&self) -> u64 {
        let mut h = DefaultHasher::new();
        self.sql.hash(&mut h);
        self.of.hash(&mut h);
        // `Value` is not `Hash` (floats): its `Debug` text is the key, streamed into the hash.
        let _ = write!(HashWriter(&mut h), "{:?}", self.params);
        h.finish()
    }

    fn matches(&self, e: &Entry) -> bool {
        if *e.sql != *self.sql || (*e.value).type_id() != self.of {
            return false;
        }
        let mut rest = &*e.params;
        write!(Compare(&mut rest), "{:?}", self.params).is_ok() && rest.is_empty()
    }
}

/// Feeds what is written to a hasher.
struct HashWriter<'a>(&'a mut DefaultHasher);

impl std::fmt::Write for HashWriter<'_> {
    fn write_str(&mut self, s: &str) -> std::fmt::Result {
        self.0.write(s.as_bytes());
        Ok(())
    }
}

/// Fails as soon as what is written differs from the text it holds (which it consumes).
struct Compare<'a, 'b>(&'a mut &'b str);

impl std::fmt::Write for Compare<'_, '_> {
    fn write_str(&mut self, s: &str) -> std::fmt::Result {
        match self.0.strip_prefix(s) {
            Some(rest) => {
                *self.0 = rest;
                Ok(())
            }
            None => Err(std::fmt::Error),
        }
    }
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
        self.load(db, sql, params, Ok).await
    }

    /// The rows of `sql` with `params`, each as a `T` filled by column name
    /// ([`Row::decode`]), decoded once when they are loaded: a hit costs no decoding. Cached
    /// apart from [`query`](Self::query)'s rows and from other types' answers to the same
    /// query.
    ///
    /// ```no_run
    /// # async fn f(db: brisk::db::Db, cache: brisk::db::QueryCache) -> Result<(), brisk::db::DbError> {
    /// #[derive(serde::Deserialize)]
    /// struct World { id: i32, randomnumber: i32 }
    /// let table = cache.query_as::<World>(&db, "SELECT id, randomnumber FROM world", vec![]).await?;
    /// let first = table.first().map(|w| w.randomnumber);
    /// # Ok(()) }
    /// ```
    pub async fn query_as<T>(
        &self,
        db: &Db,
        sql: &str,
        params: Vec<Value>,
    ) -> Result<Arc<Vec<T>>, DbError>
    where
        T: serde::de::DeserializeOwned + Send + Sync + 'static,
    {
        self.load(db, sql, params, decode_all).await
    }

    /// The cached `Vec<T>` for the key, or the rows from `db` made into one by `make`.
    async fn load<T: Send + Sync + 'static>(
        &self,
        db: &Db,
        sql: &str,
        params: Vec<Value>,
        make: fn(Vec<Row>) -> Result<Vec<T>, DbError>,
    ) -> Result<Arc<Vec<T>>, DbError> {
        let key = Lookup {
            sql,
            params: &params,
            of: TypeId::of::<Vec<T>>(),
        };
        let hash = key.hash();
        let hit = {
            let mut entries = self.inner.lock().unwrap_or_else(|p| p.into_inner());
            // The key is compared once; an expired answer is dropped.
            let found = (entries.get(&hash))
                .filter(|e| key.matches(e))
                .map(|e| (e.loaded.elapsed() < self.ttl).then(|| e.value.clone()));
            match found {
                Some(Some(value)) => value.downcast::<Vec<T>>().ok(),
                Some(None) => {
                    entries.pop(&hash);
                    None
                }
                None => None,
            }
        };
        count(hit.is_some());
        if let Some(value) = hit {
            return Ok(value);
        }
        let params_text = format!("{params:?}").into_boxed_str();
        let value = Arc::new(make(db.query(sql, params).await?)?);
        let entry = Entry {
            sql: sql.into(),
            params: params_text,
            value: value.clone(),
            loaded: Instant::now(),
        };
        self.inner
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .put(hash, entry);
        Ok(value)
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

    /// A database with table `t`: (1, 10) and (2, 20).
    async fn table() -> (tempfile::TempDir, Db) {
        let dir = tempfile::tempdir().unwrap();
        let url = format!("sqlite:{}", dir.path().join("c.sqlite").display());
        let db = Db::open(&url, DbOptions::default()).unwrap();
        db.execute_batch("CREATE TABLE t (id INTEGER PRIMARY KEY, v INTEGER); INSERT INTO t VALUES (1, 10), (2, 20)")
            .await
            .unwrap();
        (dir, db)
    }

    #[tokio::test]
    async fn answers_come_from_the_cache_until_they_expire_and_the_oldest_go_first() {
        let (_dir, db) = table().await;
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
        // Expired: the cache's clock (tokio's) moved past the TTL, and the entry is loaded
        // again. Paused only to move it: the query's own timeout runs on real time again.
        tokio::time::pause();
        tokio::time::advance(ttl + Duration::from_millis(1)).await;
        tokio::time::resume();
        assert_eq!(v(&cache.query(&db, sql, vec![1.into()]).await.unwrap()), 11);
        // A third key evicts the least recently used.
        cache.query(&db, sql, vec![2.into()]).await.unwrap();
        cache.query(&db, "SELECT 3", vec![]).await.unwrap();
        assert_eq!(cache.len(), 2);
        cache.clear();
        assert!(cache.is_empty());
    }

    #[derive(serde::Deserialize, Debug, PartialEq)]
    struct T {
        id: i64,
        v: i64,
    }

    #[tokio::test]
    async fn typed_answers_are_decoded_once_and_kept_apart_from_rows() {
        let (_dir, db) = table().await;
        let cache = QueryCache::new(8, Duration::from_secs(60));
        let sql = "SELECT id, v FROM t WHERE id >= $1 ORDER BY id";
        let typed = cache.query_as::<T>(&db, sql, vec![1.into()]).await.unwrap();
        assert_eq!(*typed, vec![T { id: 1, v: 10 }, T { id: 2, v: 20 }]);
        // The same query as rows is its own entry.
        let rows = cache.query(&db, sql, vec![1.into()]).await.unwrap();
        assert_eq!(rows.len(), 2);
        assert_eq!(cache.len(), 2);
        db.execute("UPDATE t SET v = 11 WHERE id = 1", vec![])
            .await
            .unwrap();
        // A hit is the very same decoded vector.
        let again = cache.query_as::<T>(&db, sql, vec![1.into()]).await.unwrap();
        assert!(Arc::ptr_eq(&typed, &again));
        // Parameters that only share a prefix of their text are other keys.
        let other = cache.query_as::<T>(&db, sql, vec![2.into()]).await.unwrap();
        assert_eq!(*other, vec![T { id: 2, v: 20 }]);
        let longer = cache
            .query_as::<T>(&db, sql, vec![1.into(), 0.into()])
            .await;
        assert!(
            longer.is_err(),
            "one placeholder, two parameters: the database refuses"
        );
        assert_eq!(cache.len(), 3);
        // A type that does not fit the columns is an error, not cached.
        #[derive(serde::Deserialize, Debug)]
        #[allow(dead_code)]
        struct Wrong {
            missing: String,
        }
        let wrong = cache.query_as::<Wrong>(&db, sql, vec![1.into()]).await;
        assert!(matches!(wrong, Err(DbError::Decode(_))), "{wrong:?}");
        assert_eq!(cache.len(), 3);
    }
}
