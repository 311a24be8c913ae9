//! Presence across instances (feature `redis`, with `App::cluster`): how many members a group
//! has on every instance of the app.
//!
//! Each worker keeps its own count of each group's members in Redis: the hash
//! `brisk:presence:count:GROUP` has a field per worker (a random id) holding its count, written
//! 100 ms after a change at most, and all of them again every 5 s, so that a count missed while
//! Redis was down heals. The worker also marks itself alive (`brisk:presence:alive`, a sorted
//! set of the time each worker last wrote) every 5 s. [`presence`] sums the fields of the
//! workers seen alive in the last 15 s, and removes those of workers that are gone (killed, or
//! on a machine that went away). The presence ids of a group's members
//! ([`presence_ids`]) are kept the same way, one field per worker with its ids one per line,
//! in `brisk:presence:ids:GROUP`.
//!
//! Each value is sealed with the app's secret (`App::cluster_secret`): its first line is the
//! time it was written and an HMAC over the hash's key, the worker's field, that time and the
//! value. A value whose seal does not match (made up by anyone else who can write to Redis,
//! or copied from another group or worker), or written more than 15 s ago (replayed), is not
//! counted, and is counted in `redis_refused` instead.

use std::cell::RefCell;
use std::collections::HashSet;
use std::rc::{Rc, Weak};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use super::group;
use super::group_key::{GroupKey, Space};
use crate::redis::{cmd, pipe, Redis, RedisError, RedisOptions};
use crate::redis_seal::Sealed;
use crate::runtime::context::{running, WorkerCtx};

/// How often every count is written again, and the worker marked alive.
const REFRESH: Duration = Duration::from_secs(5);
/// A worker not marked alive for this long counts no more.
const STALE: Duration = Duration::from_secs(15);
/// How soon a change is written.
const FLUSH_DELAY: Duration = Duration::from_millis(100);
const ALIVE_KEY: &str = "brisk:presence:alive";

/// The live workers' fields and values (`{field, value, field, value…}`), removing the
/// fields of dead ones.
const LIVE_SCRIPT: &str = r"
local alive = redis.call('ZRANGEBYSCORE', KEYS[2], ARGV[1], '+inf')
local live = {}
for _, w in ipairs(alive) do live[w] = true end
local fields = redis.call('HGETALL', KEYS[1])
local values = {}
for i = 1, #fields, 2 do
  if live[fields[i]] then
    table.insert(values, fields[i])
    table.insert(values, fields[i + 1])
  else
    redis.call('HDEL', KEYS[1], fields[i])
  end
end
return values
";

struct Presence {
    redis: Redis,
    /// This worker's field in every group's hash.
    id: String,
    /// Groups whose count changed since the last write.
    dirty: HashSet<GroupKey>,
    /// Groups this worker wrote a count for (to write 0, then forget them).
    written: HashSet<GroupKey>,
    flushing: bool,
}

/// A worker's presence, one of its context's parts: made on first use when the app spans
/// machines.
#[derive(Default)]
pub(crate) struct PresencePart(RefCell<Option<Presence>>);

/// The cluster's Redis server, when the app spans machines through one.
fn cluster_redis() -> Option<Redis> {
    match crate::cluster_setting::get()? {
        crate::cluster_setting::ClusterSetting::Single { url, tls_ca } => {
            let options = RedisOptions {
                tls_ca: tls_ca.clone(),
                ..RedisOptions::default()
            };
            Redis::new(url, options).ok()
        }
        crate::cluster_setting::ClusterSetting::Sharded => None,
    }
}

/// Worker `w`'s Redis for presence, made (with the task that keeps the counts fresh) on
/// first use; `None` when the app does not span machines.
fn redis(w: &Rc<WorkerCtx>) -> Option<Redis> {
    let part = w.part::<PresencePart>();
    let mut p = part.0.borrow_mut();
    if p.is_none() {
        let redis = cluster_redis()?;
        *p = Some(Presence {
            redis,
            id: random_id(),
            dirty: HashSet::new(),
            written: HashSet::new(),
            flushing: false,
        });
        tokio::task::spawn_local(refresh_loop(Rc::downgrade(w)));
    }
    p.as_ref().map(|p| p.redis.clone())
}

/// In worker `w` of an app that spans machines (`App::cluster`), keeps its counts in Redis
/// from now on.
pub(crate) fn start(w: &Rc<WorkerCtx>) {
    use crate::cluster_setting::{get, ClusterSetting};
    if matches!(get(), Some(ClusterSetting::Single { .. })) {
        // Weak: the worker's groups hold this, and the worker holds its groups.
        let worker = Rc::downgrade(w);
        group::on_change(w, Rc::new(move |g| changed(&worker, g)));
    }
}

/// The count of `group` in worker `w` changed (a member joined or left).
fn changed(w: &Weak<WorkerCtx>, group: &GroupKey) {
    let Some(w) = w.upgrade() else {
        return;
    };
    if redis(&w).is_none() {
        return;
    }
    let start = {
        let part = w.part::<PresencePart>();
        let mut p = part.0.borrow_mut();
        let Some(p) = p.as_mut() else {
            return;
        };
        p.dirty.insert(group.clone());
        !std::mem::replace(&mut p.flushing, true)
    };
    if start {
        let worker = Rc::downgrade(&w);
        tokio::task::spawn_local(async move {
            tokio::time::sleep(FLUSH_DELAY).await;
            flush(&worker).await;
        });
    }
}

/// Writes the counts of the dirty groups (0 removes the field) and marks the worker alive.
async fn flush(w: &Weak<WorkerCtx>) {
    let Some(w) = w.upgrade() else {
        return;
    };
    let part = w.part::<PresencePart>();
    let Some((redis, batch, groups)) = (|| {
        let mut p = part.0.borrow_mut();
        let p = p.as_mut()?;
        p.flushing = false;
        let mut batch = pipe();
        let groups = std::mem::take(&mut p.dirty);
        for group in groups.iter().cloned() {
            let n = group::members_here(&w, &group);
            let ids = group::local_ids(&w, &group).join("\n");
            for (key, value) in [(count_key(&group), n.to_string()), (ids_key(&group), ids)] {
                if n == 0 || value.is_empty() {
                    batch.cmd("HDEL").arg(&key).arg(&p.id).ignore();
                } else {
                    let value = sealed(&key, &p.id, &value, now_ms());
                    batch.cmd("HSET").arg(&key).arg(&p.id).arg(value).ignore();
                }
            }
            if n == 0 {
                p.written.remove(&group);
            } else {
                p.written.insert(group);
            }
        }
        let now = now_ms();
        batch
            .cmd("ZADD")
            .arg(ALIVE_KEY)
            .arg(now)
            .arg(&p.id)
            .ignore();
        let stale = now.saturating_sub(STALE.as_millis() as u64);
        batch
            .cmd("ZREMRANGEBYSCORE")
            .arg(ALIVE_KEY)
            .arg("-inf")
            .arg(stale)
            .ignore();
        Some((p.redis.clone(), batch, groups))
    })() else {
        return;
    };
    drop(w);
    if let Err(e) = redis.run_pipeline::<()>(&batch).await {
        tracing::debug!("presence: cannot write counts: {e}");
        // Written again with the next refresh, a count of 0 (a field to remove) included.
        if let Some(p) = part.0.borrow_mut().as_mut() {
            p.dirty.extend(groups);
        }
    }
}

/// Every [`REFRESH`], while worker `w` runs: every count again, and the worker marked alive.
async fn refresh_loop(w: Weak<WorkerCtx>) {
    loop {
        tokio::time::sleep(REFRESH).await;
        let Some(part) = w.upgrade().map(|w| w.part::<PresencePart>()) else {
            return;
        };
        if let Some(p) = part.0.borrow_mut().as_mut() {
            let written: Vec<GroupKey> = p.written.iter().cloned().collect();
            p.dirty.extend(written);
        }
        flush(&w).await;
    }
}

/// The members of `group` on every instance of the app (with `App::cluster`; feature
/// `redis`). Counts change within about 100 ms of a join or leave; a worker that died stops
/// counting within 15 s. Without a cluster, the members of this worker.
///
/// ```no_run
/// # async fn f() -> Result<(), brisk::redis::RedisError> {
/// let online = brisk::ws::presence("lobby").await?;
/// # Ok(()) }
/// ```
pub async fn presence(group: &str) -> Result<u64, RedisError> {
    members_of(&running("brisk::ws::presence"), &GroupKey::app(group)).await
}

/// The members of `group`, of any space, as [`presence`] counts them.
pub(crate) async fn members_of(w: &Rc<WorkerCtx>, group: &GroupKey) -> Result<u64, RedisError> {
    let Some(counts) = live_values(w, &count_key(group)).await? else {
        return Ok(group::members_here(w, group) as u64);
    };
    Ok(counts.iter().filter_map(|c| c.parse::<u64>().ok()).sum())
}

/// The presence ids ([`WsConnection::set_presence_id`](super::WsConnection::set_presence_id))
/// of `group`'s members on every instance, each once and sorted; members without one are
/// not listed. As fresh as [`presence`]. Each worker writes all its ids of a group when one
/// changes, so this suits groups of up to some thousands of named members.
///
/// ```no_run
/// # async fn f() -> Result<(), brisk::redis::RedisError> {
/// let who = brisk::ws::presence_ids("lobby").await?;
/// # Ok(()) }
/// ```
pub async fn presence_ids(group: &str) -> Result<Vec<String>, RedisError> {
    ids_of(&running("brisk::ws::presence_ids"), &GroupKey::app(group)).await
}

/// The presence ids of `group`'s members, of any space, as [`presence_ids`] lists them.
pub(crate) async fn ids_of(w: &Rc<WorkerCtx>, group: &GroupKey) -> Result<Vec<String>, RedisError> {
    let Some(lists) = live_values(w, &ids_key(group)).await? else {
        return Ok(group::local_ids(w, group));
    };
    let mut ids: Vec<String> = (lists.iter())
        .flat_map(|l| l.split('\n'))
        .filter(|id| !id.is_empty())
        .map(str::to_owned)
        .collect();
    ids.sort_unstable();
    ids.dedup();
    Ok(ids)
}

/// The groups whose names start with `prefix` that have members, and how many each has: on
/// every instance (with `App::cluster`), else in this worker. Walks Redis's keys with `SCAN`,
/// so it suits an operator's question, not a per-message one.
///
/// ```no_run
/// # async fn f() -> Result<(), brisk::redis::RedisError> {
/// for (room, members) in brisk::ws::groups_with_prefix("room:").await? {
///     println!("{room}: {members}");
/// }
/// # Ok(()) }
/// ```
pub async fn groups_with_prefix(prefix: &str) -> Result<Vec<(String, u64)>, RedisError> {
    groups_in(
        &running("brisk::ws::groups_with_prefix"),
        Space::App,
        prefix,
    )
    .await
}

/// The groups of `space` whose names start with `prefix` that have members, by name, as
/// [`groups_with_prefix`] lists the app's.
pub(crate) async fn groups_in(
    w: &Rc<WorkerCtx>,
    space: Space,
    prefix: &str,
) -> Result<Vec<(String, u64)>, RedisError> {
    let Some(redis) = presence_redis(w)? else {
        return Ok(group::local_groups(w, space, prefix));
    };
    let wire_prefix = GroupKey::wire_prefix(space, prefix);
    let pattern = format!("{COUNT_PREFIX}{}*", glob_escape(&wire_prefix));
    let mut cursor = 0u64;
    let mut keys = Vec::new();
    loop {
        let (next, found): (u64, Vec<String>) = redis
            .run(
                cmd("SCAN")
                    .arg(cursor)
                    .arg("MATCH")
                    .arg(&pattern)
                    .arg("COUNT")
                    .arg(1000),
            )
            .await?;
        keys.extend(found);
        cursor = next;
        if cursor == 0 {
            break;
        }
    }
    keys.sort_unstable();
    keys.dedup();
    let mut groups = Vec::with_capacity(keys.len());
    for key in keys {
        let group = GroupKey::from_wire(&key[COUNT_PREFIX.len()..]);
        // The pattern also finds other spaces' groups whose wire form starts alike.
        match group.parts() {
            (s, name) if s == space && name.starts_with(prefix) => {
                let members = members_of(w, &group).await?;
                if members > 0 {
                    groups.push((name.to_owned(), members));
                }
            }
            _ => {}
        }
    }
    Ok(groups)
}

/// `s` with Redis's glob characters escaped.
fn glob_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        if matches!(c, '*' | '?' | '[' | ']' | '\\') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// The values of the live workers' fields of the hash `key` (those whose seal matches);
/// `None` without a cluster.
async fn live_values(w: &Rc<WorkerCtx>, key: &str) -> Result<Option<Vec<String>>, RedisError> {
    let Some(redis) = presence_redis(w)? else {
        return Ok(None);
    };
    let since = now_ms().saturating_sub(STALE.as_millis() as u64);
    let fields: Vec<String> = redis
        .run(
            cmd("EVAL")
                .arg(LIVE_SCRIPT)
                .arg(2)
                .arg(key)
                .arg(ALIVE_KEY)
                .arg(since),
        )
        .await?;
    let now = now_ms();
    let mut values = Vec::with_capacity(fields.len() / 2);
    for pair in fields.chunks_exact(2) {
        match opened(key, &pair[0], &pair[1], now) {
            Some(value) => values.push(value.to_owned()),
            None => crate::redis_seal::refuse(&format!("presence field {:?} of {key:?}", pair[0])),
        }
    }
    Ok(Some(values))
}

/// What worker `field` writes as its value `value` of the hash `key` at `now_ms`: in an app
/// with a secret, a first line with the time and the seal, then the value.
fn sealed(key: &str, field: &str, value: &str, now_ms: u64) -> String {
    let Some(seal_key) = crate::redis_seal::key(Sealed::Presence) else {
        return value.to_owned();
    };
    let at = now_ms.to_string();
    let parts: [&[u8]; 4] = [
        key.as_bytes(),
        field.as_bytes(),
        at.as_bytes(),
        value.as_bytes(),
    ];
    format!("{at} {}\n{value}", seal_key.seal(Sealed::Presence, &parts))
}

/// The value in `stored`, worker `field`'s value of the hash `key`, read at `now_ms`: any, in
/// an app without a secret; else only one whose seal matches, written in the last [`STALE`].
fn opened<'a>(key: &str, field: &str, stored: &'a str, now_ms: u64) -> Option<&'a str> {
    let Some(seal_key) = crate::redis_seal::key(Sealed::Presence) else {
        return Some(stored);
    };
    let (head, value) = stored.split_once('\n')?;
    let (at, seal) = head.split_once(' ')?;
    let written: u64 = at.parse().ok()?;
    if written.saturating_add(STALE.as_millis() as u64) < now_ms {
        return None;
    }
    let parts: [&[u8]; 4] = [
        key.as_bytes(),
        field.as_bytes(),
        at.as_bytes(),
        value.as_bytes(),
    ];
    seal_key
        .verify(Sealed::Presence, &parts, seal.as_bytes())
        .then_some(value)
}

/// The Redis presence lives in; `None` without a cluster, an error with a sharded one.
fn presence_redis(w: &Rc<WorkerCtx>) -> Result<Option<Redis>, RedisError> {
    if crate::cluster_setting::get() == Some(&crate::cluster_setting::ClusterSetting::Sharded) {
        return Err(RedisError::Config(
            "presence needs App::cluster (one Redis server), not App::cluster_sharded".into(),
        ));
    }
    Ok(redis(w))
}

/// The prefix of the hashes of each worker's counts, before a group's wire form.
const COUNT_PREFIX: &str = "brisk:presence:count:";

/// The hash of each worker's count of `group`'s members.
fn count_key(group: &GroupKey) -> String {
    format!("{COUNT_PREFIX}{}", group.wire())
}

/// The hash of each worker's presence ids of `group` (one per line).
fn ids_key(group: &GroupKey) -> String {
    format!("brisk:presence:ids:{}", group.wire())
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// A random worker id (16 hex digits).
fn random_id() -> String {
    use std::io::Read;
    let mut bytes = [0u8; 8];
    if std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut bytes))
        .is_err()
    {
        bytes = (u64::from(std::process::id()) << 32 | now_ms() & 0xffff_ffff).to_be_bytes();
    }
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
