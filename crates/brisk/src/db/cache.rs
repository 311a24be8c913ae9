//! [`QueryCache`]: answers for queries the application marks as cacheable, kept per worker
//! for a time-to-live and bounded in entries (least recently used go first). Hits and misses
//! are counted in the worker's `status` (`cache_hits`, `cache_misses`).
//!
//! A cache per worker needs no coordination and no network hop; the price is that each
//! worker loads an entry once, and an update is seen when the entry expires. How requests
//! asking for one key together share its load and reload: [`QueryCache`].

use std::any::{Any, TypeId};
use std::collections::HashMap;
use std::fmt::Write as _;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::num::NonZeroUsize;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::watch;
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
/// Concurrent lookups of one key load it once: while the first caller's query runs, the
/// others wait for its answer (or its error) instead of sending the same query again. Once
/// an answer expires, the first caller after that reloads it while the others are still
/// given the expired answer, so a busy key never sends a crowd of reloads at once nor makes
/// every request wait for one.
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
    inner: Arc<Mutex<Entries>>,
    ttl: Duration,
}

/// A cached answer's value: a `Vec<Row>`, or the `Vec<T>` of `query_as`.
type Cached = Arc<dyn Any + Send + Sync>;

/// The answer of a load in flight, once it has come.
type Landed = Option<Result<Cached, DbError>>;

/// The answers, and the loads on their way.
struct Entries {
    /// Answers by the hash of their key; a lookup compares the whole key, so two keys with
    /// one hash only take turns in one place.
    answers: LruCache<u64, Entry>,
    /// Loads of keys not cached yet, by the hash of their key: the callers behind the first
    /// wait for its answer here.
    loading: HashMap<u64, Flight>,
}

/// One cached answer.
struct Entry {
    key: Key,
    value: Cached,
    loaded: Instant,
    /// A caller is reloading it (it has expired); the others are given it meanwhile.
    refreshing: bool,
}

/// A load on its way: its key and where its answer lands.
struct Flight {
    key: Key,
    landed: watch::Receiver<Landed>,
}

/// What an answer is cached under, kept to be compared.
#[derive(Clone, PartialEq)]
struct Key {
    sql: Box<str>,
    /// The parameters as `Debug` writes them.
    params: Box<str>,
    /// The type of the cached value (its type is part of the key).
    of: TypeId,
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

    fn matches(&self, k: &Key) -> bool {
        if *k.sql != *self.sql || k.of != self.of {
            return false;
        }
        let mut rest = &*k.params;
        write!(Compare(&mut rest), "{:?}", self.params).is_ok() && rest.is_empty()
    }

    fn to_key(&self) -> Key {
        Key {
            sql: self.sql.into(),
            params: format!("{:?}", self.params).into_boxed_str(),
            of: self.of,
        }
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
            inner: Arc::new(Mutex::new(Entries {
                answers: LruCache::new(capacity),
                loading: HashMap::new(),
            })),
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

    /// The cached `Vec<T>` for the key, or the rows from `db` made into one by `make`: the
    /// caller loads it, reloads it (expired), or waits for another caller's load of it.
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
        let landed = loop {
            let step = self.step(&key, hash);
            count(matches!(step, Step::Hit(_)));
            let mut landed = match step {
                Step::Hit(value) => return downcast(value),
                Step::Load(flight) => break flight,
                Step::Wait(landed) => landed,
            };
            // Another caller's load: its answer, or, if that caller went away before it
            // came (its request was dropped), a look at the cache again.
            let answer = match landed.wait_for(Option::is_some).await {
                Ok(answer) => answer.clone(),
                Err(_) => None,
            };
            if let Some(answer) = answer {
                return answer.and_then(downcast);
            }
        };
        let answer = db.query(sql, params).await.and_then(make).map(Arc::new);
        landed.finish(answer.clone().map(|v| v as Cached));
        answer
    }

    /// What a lookup of `key` does now: a fresh (or being reloaded) answer is a hit; an
    /// expired one is this caller's to reload; a key being loaded is waited for; else this
    /// caller loads it.
    fn step(&self, key: &Lookup<'_>, hash: u64) -> Step {
        let mut entries = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        let Entries { answers, loading } = &mut *entries;
        if let Some(e) = answers.get_mut(&hash).filter(|e| key.matches(&e.key)) {
            if e.refreshing || e.loaded.elapsed() < self.ttl {
                return Step::Hit(e.value.clone());
            }
            e.refreshing = true;
            return Step::Load(self.landing(hash, e.key.clone(), None));
        }
        if let Some(f) = loading.get(&hash) {
            if key.matches(&f.key) {
                return Step::Wait(f.landed.clone());
            }
            // Another key with the same hash is on its way: this one loads apart, unshared.
            return Step::Load(self.landing(hash, key.to_key(), None));
        }
        let (tx, rx) = watch::channel(None);
        let flight = Flight {
            key: key.to_key(),
            landed: rx,
        };
        let landing = self.landing(hash, flight.key.clone(), Some(tx));
        loading.insert(hash, flight);
        Step::Load(landing)
    }

    fn landing(&self, hash: u64, key: Key, waiting: Option<watch::Sender<Landed>>) -> Landing {
        Landing {
            cache: self.clone(),
            hash,
            key,
            waiting,
            finished: false,
        }
    }

    /// How many answers are cached now (expired ones included until looked up or evicted).
    pub fn len(&self) -> usize {
        self.inner
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .answers
            .len()
    }

    /// Whether nothing is cached.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Forgets every answer (after a write the application knows about).
    pub fn clear(&self) {
        self.inner
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .answers
            .clear();
    }
}

/// What a lookup does ([`QueryCache::step`]).
enum Step {
    Hit(Cached),
    Load(Landing),
    Wait(watch::Receiver<Landed>),
}

/// A caller's load of one key, from the lookup that made it the loader to its answer. Dropped
/// unfinished (the caller's request went away), it undoes what the lookup set: the key is no
/// longer loading, an expired answer no longer being reloaded, and the callers waiting look
/// at the cache again.
struct Landing {
    cache: QueryCache,
    hash: u64,
    key: Key,
    /// For a key others wait for: where they get the answer.
    waiting: Option<watch::Sender<Landed>>,
    finished: bool,
}

impl Landing {
    /// The answer goes where it is due: cached if it is one (an error is not: an expired
    /// answer whose reload failed goes, and the next caller loads the key again), and given
    /// to the callers waiting for it.
    fn finish(mut self, answer: Result<Cached, DbError>) {
        self.finished = true;
        let mut entries = self.cache.inner.lock().unwrap_or_else(|p| p.into_inner());
        self.unmark(&mut entries);
        let hash = self.hash;
        match &answer {
            Ok(value) => {
                let entry = Entry {
                    key: self.key.clone(),
                    value: value.clone(),
                    loaded: Instant::now(),
                    refreshing: false,
                };
                entries.answers.put(hash, entry);
            }
            Err(_) => {
                if (entries.answers.peek(&hash)).is_some_and(|e| e.key == self.key) {
                    entries.answers.pop(&hash);
                }
            }
        }
        drop(entries);
        if let Some(tx) = self.waiting.take() {
            tx.send_replace(Some(answer));
        }
    }

    /// Undoes the lookup's marks: the key is no longer loading, nor being reloaded.
    fn unmark(&self, entries: &mut Entries) {
        if self.waiting.is_some()
            && (entries.loading.get(&self.hash)).is_some_and(|f| f.key == self.key)
        {
            entries.loading.remove(&self.hash);
        }
        if let Some(e) = entries.answers.peek_mut(&self.hash) {
            if e.key == self.key {
                e.refreshing = false;
            }
        }
    }
}

impl Drop for Landing {
    fn drop(&mut self) {
        if !self.finished {
            let mut entries = self.cache.inner.lock().unwrap_or_else(|p| p.into_inner());
            self.unmark(&mut entries);
        }
        // The sender goes with `self`: callers still waiting wake and look again.
    }
}

/// A cached value as the `Vec<T>` it was made as (the type is part of the key).
fn downcast<T: Send + Sync + 'static>(value: Cached) -> Result<Arc<Vec<T>>, DbError> {
    value
        .downcast::<Vec<T>>()
        .map_err(|_| DbError::Decode("a cached answer of another type".into()))
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
    use futures_util::FutureExt;
    use std::future::Future;
    use std::pin::Pin;

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

    /// `db`'s one SQLite thread, kept busy until [`release`](Held::release): a load asked for
    /// meanwhile waits in its queue. Without it a test cannot tell a load on its way: a free
    /// thread may answer before the future that asked is first polled to its end (on a loaded
    /// machine, CI saw a reload land before the next caller looked).
    struct Held {
        release: std::sync::mpsc::Sender<()>,
        job: Pin<Box<dyn Future<Output = Result<(), DbError>> + Send>>,
    }

    fn hold(db: &Db) -> Held {
        #[allow(unreachable_patterns)]
        let sqlite = match db {
            Db::Sqlite(sqlite) => sqlite.clone(),
            _ => panic!("the tests' database is SQLite"),
        };
        let (release, released) = std::sync::mpsc::channel::<()>();
        let mut job: Pin<Box<dyn Future<Output = _> + Send>> = Box::pin(async move {
            sqlite
                .call(move |_| {
                    let _ = released.recv();
                    Ok(())
                })
                .await
        });
        assert!(job.as_mut().now_or_never().is_none(), "the thread is held");
        Held { release, job }
    }

    impl Held {
        async fn release(self) {
            drop(self.release);
            self.job.await.unwrap();
        }
    }

    /// `n` lookups of one key, all polled once while `db`'s thread is held (so the first
    /// one's load is on its way while the others look), then to their ends.
    async fn together(
        cache: &QueryCache,
        db: &Db,
        sql: &str,
        n: usize,
    ) -> Vec<Result<Arc<Vec<Row>>, DbError>> {
        let held = hold(db);
        let lookups = (0..n).map(|_| cache.query(db, sql, vec![1.into()]));
        let mut lookups = Box::pin(futures_util::future::join_all(lookups));
        assert!(lookups.as_mut().now_or_never().is_none(), "a load is due");
        held.release().await;
        lookups.await
    }

    #[tokio::test]
    async fn lookups_of_a_key_not_cached_yet_share_one_load() {
        let (_dir, db) = table().await;
        let cache = QueryCache::new(8, Duration::from_secs(60));
        let sql = "SELECT v FROM t WHERE id = $1";
        let answers = together(&cache, &db, sql, 50).await;
        let first = answers[0].as_ref().unwrap().clone();
        assert_eq!(first[0].get::<i64>(0).unwrap(), 10);
        // One load: every caller holds the very rows it read.
        for a in &answers {
            assert!(Arc::ptr_eq(a.as_ref().unwrap(), &first));
        }
        assert_eq!(cache.len(), 1);
    }

    #[tokio::test]
    async fn an_expired_answer_is_reloaded_by_one_caller_while_the_others_get_it() {
        let (_dir, db) = table().await;
        let ttl = Duration::from_millis(300);
        let cache = QueryCache::new(8, ttl);
        let sql = "SELECT v FROM t WHERE id = $1";
        let old = cache.query(&db, sql, vec![1.into()]).await.unwrap();
        db.execute("UPDATE t SET v = 11 WHERE id = 1", vec![])
            .await
            .unwrap();
        tokio::time::pause();
        tokio::time::advance(ttl + Duration::from_millis(1)).await;
        tokio::time::resume();
        let answers = together(&cache, &db, sql, 20).await;
        let v = |rows: &Arc<Vec<Row>>| rows[0].get::<i64>(0).unwrap();
        let reloaded: Vec<_> = answers.iter().map(|a| v(a.as_ref().unwrap())).collect();
        // The first caller reloaded; the 19 polled while it did were given the old answer.
        assert_eq!(
            reloaded.iter().filter(|&&n| n == 11).count(),
            1,
            "{reloaded:?}"
        );
        for a in &answers[1..] {
            assert!(Arc::ptr_eq(a.as_ref().unwrap(), &old));
        }
        // The reloaded answer is the cached one now.
        assert_eq!(v(&cache.query(&db, sql, vec![1.into()]).await.unwrap()), 11);
    }

    #[tokio::test]
    async fn callers_waiting_for_a_load_get_its_error_and_nothing_is_cached() {
        let (_dir, db) = table().await;
        let cache = QueryCache::new(8, Duration::from_secs(60));
        let answers = together(&cache, &db, "SELECT nope FROM t WHERE id = $1", 10).await;
        for a in &answers {
            assert!(matches!(a, Err(DbError::Query(_))), "{a:?}");
        }
        assert!(cache.is_empty());
        assert!(cache.inner.lock().unwrap().loading.is_empty());
    }

    #[tokio::test]
    async fn a_load_dropped_half_way_leaves_its_waiters_to_load_for_themselves() {
        let (_dir, db) = table().await;
        let cache = QueryCache::new(8, Duration::from_secs(60));
        let sql = "SELECT v FROM t WHERE id = $1";
        let held = hold(&db);
        let mut first = Box::pin(cache.query(&db, sql, vec![1.into()]));
        assert!(
            first.as_mut().now_or_never().is_none(),
            "the load is on its way"
        );
        let mut second = Box::pin(cache.query(&db, sql, vec![1.into()]));
        assert!(
            second.as_mut().now_or_never().is_none(),
            "waiting for the first"
        );
        drop(first);
        held.release().await;
        let rows = tokio::time::timeout(Duration::from_secs(10), second)
            .await
            .expect("a waiter is not stranded by a dropped load")
            .unwrap();
        assert_eq!(rows[0].get::<i64>(0).unwrap(), 10);
        assert_eq!(cache.len(), 1);
        assert!(cache.inner.lock().unwrap().loading.is_empty());
    }
}
