//! Recovery (feature `redis`): the last messages of a group, kept in a Redis Stream, so that a
//! client that reconnects with the position of the last message it got receives what it
//! missed, or learns that it cannot (and reloads its state).
//!
//! Each group has a stream (`brisk:history:{GROUP}:stream`) and a small hash
//! (`brisk:history:{GROUP}:meta`) with the group's **epoch** and its last **offset**. One Lua
//! script appends a message: it takes the next offset and adds the entry in the same step, so
//! offsets are dense (1, 2, 3…) and the stream holds them in order, whichever instance or
//! worker appended. A [`Position`] is the pair `epoch:offset`. Each entry also holds the
//! append's nonce, so that an append retried after a timeout finds itself if it was kept.
//!
//! The epoch changes when the history is lost (Redis restarted without persistence, or nothing
//! was appended for [`HistoryOptions::remember_for`]); a position of an older epoch cannot be
//! recovered, since its offsets no longer mean the same messages. A Redis that comes back with
//! part of the history (an older snapshot, AOF with `appendfsync everysec`, a replica promoted
//! before it caught up) keeps the epoch and reuses offsets: where recovery must be exact, give
//! it a Redis that persists every write (`appendfsync always`). The stream keeps the last
//! [`HistoryOptions::keep_last`] messages, and with [`HistoryOptions::keep_for`] only those of
//! that long ago.
//!
//! Messages can reach clients out of offset order when several workers broadcast at once.
//! Since offsets are dense, a client knows which ones it has: it recovers from the highest
//! offset up to which it has them all, and ignores offsets it already has.
//!
//! ```no_run
//! use brisk::redis::{Redis, RedisOptions};
//! use brisk::ws::{History, HistoryOptions, Recovery};
//! # async fn f() -> Result<(), brisk::redis::RedisError> {
//! let redis = Redis::new("redis://127.0.0.1:6379", RedisOptions::default())?;
//! let history = History::new(redis, HistoryOptions::default());
//! let at = history.append("lobby", b"hello").await?;
//! brisk::ws::broadcast("lobby", brisk::ws::Message::text(format!("{at} hello")));
//! // Later, a client that got everything up to `at`:
//! match history.since("lobby", &at).await? {
//!     Recovery::Recovered(missed) => { /* send `missed` to it */ }
//!     Recovery::Lost(why) => { /* tell it to reload: `why` */ }
//! }
//! # Ok(()) }
//! ```

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use bytes::Bytes;

use crate::redis::{cmd, Cmd, Redis, RedisError};

/// Appends a message: `KEYS` meta and stream; `ARGV` payload, keep_last, keep_for (ms, 0:
/// none), remember_for (ms), the append's nonce, and `1` when this is a retry (the first try
/// may have been kept: then its entry, found by the nonce, is the answer). Answers `{epoch,
/// offset}`.
const APPEND_SCRIPT: &str = r"
local epoch = redis.call('HGET', KEYS[1], 'e')
if epoch and ARGV[6] == '1' then
  for _, entry in ipairs(redis.call('XREVRANGE', KEYS[2], '+', '-', 'COUNT', ARGV[2])) do
    if entry[2][6] == ARGV[5] then return {epoch, tonumber(entry[2][2])} end
  end
end
if not epoch then
  local t = redis.call('TIME')
  epoch = t[1] .. string.format('%06d', tonumber(t[2]))
  redis.call('DEL', KEYS[2])
  redis.call('HSET', KEYS[1], 'e', epoch)
end
local offset = redis.call('HINCRBY', KEYS[1], 's', 1)
redis.call('XADD', KEYS[2], 'MAXLEN', ARGV[2], '*', 'o', offset, 'd', ARGV[1], 'n', ARGV[5])
local keep_for = tonumber(ARGV[3])
if keep_for > 0 then
  local t = redis.call('TIME')
  local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  redis.call('XTRIM', KEYS[2], 'MINID', now - keep_for)
  redis.call('PEXPIRE', KEYS[2], keep_for)
else
  redis.call('PEXPIRE', KEYS[2], ARGV[4])
end
redis.call('PEXPIRE', KEYS[1], ARGV[4])
return {epoch, offset}
";

/// The messages after a position: `KEYS` meta and stream; `ARGV` epoch, offset, keep_last.
/// Answers `{'ok', offset, payload, offset, payload…}` or `{reason}`.
const SINCE_SCRIPT: &str = r"
local meta = redis.call('HMGET', KEYS[1], 'e', 's')
if not meta[1] or meta[1] ~= ARGV[1] then return {'epoch'} end
local top = tonumber(meta[2] or '0')
local since = tonumber(ARGV[2])
if since > top then return {'unknown'} end
local n = top - since
if n == 0 then return {'ok'} end
if n > tonumber(ARGV[3]) then return {'trimmed'} end
local entries = redis.call('XREVRANGE', KEYS[2], '+', '-', 'COUNT', n)
if #entries < n or tonumber(entries[#entries][2][2]) ~= since + 1 then return {'trimmed'} end
local out = {'ok'}
for i = #entries, 1, -1 do
  local fields = entries[i][2]
  table.insert(out, fields[2])
  table.insert(out, fields[4])
end
return out
";

/// The position of the newest message (starting an epoch when there is none) and the last
/// messages: `KEYS` meta and stream; `ARGV` remember_for (ms), how many. Answers `{epoch,
/// offset, offset, payload, offset, payload…}`, oldest first.
const LATEST_SCRIPT: &str = r"
local meta = redis.call('HMGET', KEYS[1], 'e', 's')
if not meta[1] then
  local t = redis.call('TIME')
  meta[1] = t[1] .. string.format('%06d', tonumber(t[2]))
  redis.call('DEL', KEYS[2])
  redis.call('HSET', KEYS[1], 'e', meta[1], 's', 0)
  redis.call('PEXPIRE', KEYS[1], ARGV[1])
end
local out = {meta[1], meta[2] or '0'}
if tonumber(ARGV[2]) > 0 then
  local entries = redis.call('XREVRANGE', KEYS[2], '+', '-', 'COUNT', ARGV[2])
  for i = #entries, 1, -1 do
    table.insert(out, entries[i][2][2])
    table.insert(out, entries[i][2][4])
  end
end
return out
";

/// How much of each group's history is kept.
#[derive(Debug, Clone)]
pub struct HistoryOptions {
    /// The most messages kept per group (default 100).
    pub keep_last: usize,
    /// Keep only messages of the last this long (default: as long as they are among the last
    /// `keep_last`).
    pub keep_for: Option<Duration>,
    /// A group nothing was appended to for this long loses its epoch, and so its history
    /// (default 24 hours).
    pub remember_for: Duration,
}

impl Default for HistoryOptions {
    fn default() -> Self {
        HistoryOptions {
            keep_last: 100,
            keep_for: None,
            remember_for: Duration::from_secs(24 * 3600),
        }
    }
}

/// Where a message is in its group's history: the epoch and the offset (printed, and parsed,
/// as `epoch:offset`).
///
/// ```
/// let at: brisk::ws::Position = "1732412345000123:42".parse().unwrap();
/// assert_eq!(at.offset, 42);
/// assert_eq!(at.to_string(), "1732412345000123:42");
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Position {
    /// Which life of the history this is.
    pub epoch: String,
    /// The message's number in that epoch, from 1 (0: before the first message).
    pub offset: u64,
}

impl fmt::Display for Position {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.epoch, self.offset)
    }
}

/// A position that is not `epoch:offset`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("a position is EPOCH:OFFSET (e.g. 1732412345000123:42), not {0:?}")]
pub struct BadPosition(pub String);

impl FromStr for Position {
    type Err = BadPosition;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = || BadPosition(s.chars().take(64).collect());
        let (epoch, offset) = s.rsplit_once(':').ok_or_else(bad)?;
        if epoch.is_empty() || epoch.len() > 64 || !epoch.bytes().all(|b| b.is_ascii_digit()) {
            return Err(bad());
        }
        Ok(Position {
            epoch: epoch.to_owned(),
            offset: offset.parse().map_err(|_| bad())?,
        })
    }
}

/// A message from the history.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Kept {
    /// Where it is.
    pub position: Position,
    /// What was appended.
    pub payload: Bytes,
}

/// Why the messages after a position cannot be recovered: the client reloads its state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Lost {
    /// The history was lost since (Redis restarted, or the group was idle past
    /// `remember_for`), or the position is of another epoch.
    #[error("the history was lost since (a new epoch)")]
    NewEpoch,
    /// More messages were missed than are kept (`keep_last`, `keep_for`).
    #[error("more messages were missed than are kept")]
    Trimmed,
    /// The position is past the newest message: this history never gave it.
    #[error("no message has this position")]
    Unknown,
}

/// What [`History::since`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Recovery {
    /// Every message after the position, oldest first (none when nothing was missed).
    Recovered(Vec<Kept>),
    /// They cannot be recovered.
    Lost(Lost),
}

/// The kept history of groups, on a Redis server (make it in the worker, as its [`Redis`]).
#[derive(Clone)]
pub struct History {
    redis: Redis,
    options: HistoryOptions,
}

impl History {
    /// A history on `redis`, keeping what `options` say.
    pub fn new(redis: Redis, options: HistoryOptions) -> Self {
        History { redis, options }
    }

    /// Appends `payload` to `group`'s history and answers its position; then broadcast the
    /// message (with its position in it) as usual.
    ///
    /// An append that times out or loses its connection may still have been kept, so it is
    /// tried once more, and the retry answers the first try's position if Redis ran that
    /// first, so the message is kept once. (After a timeout the retry follows the first on
    /// the same connection, and Redis runs one client's commands in order; a lost connection
    /// either delivered the first try or never will.) If the retry fails too, the error says
    /// so, and the message may or may not be in the history. Against a Redis that does not
    /// answer, an append therefore takes twice the command timeout.
    pub async fn append(&self, group: &str, payload: &[u8]) -> Result<Position, RedisError> {
        let nonce = nonce();
        match self.try_append(group, payload, &nonce, false).await {
            Err(RedisError::Timeout(_) | RedisError::Unavailable(_)) => {
                self.try_append(group, payload, &nonce, true).await
            }
            answer => answer,
        }
    }

    /// One run of the append script; `retry` when a try with this `nonce` came before.
    async fn try_append(
        &self,
        group: &str,
        payload: &[u8],
        nonce: &str,
        retry: bool,
    ) -> Result<Position, RedisError> {
        let o = &self.options;
        let (epoch, offset): (String, u64) = self
            .redis
            .run(
                script(APPEND_SCRIPT, group)
                    .arg(payload)
                    .arg(o.keep_last.max(1))
                    .arg(o.keep_for.map_or(0, millis))
                    .arg(millis(o.remember_for))
                    .arg(nonce)
                    .arg(u8::from(retry)),
            )
            .await?;
        Ok(Position { epoch, offset })
    }

    /// The messages of `group` after `last` (the position of the last message a client got),
    /// or why they cannot be recovered.
    pub async fn since(&self, group: &str, last: &Position) -> Result<Recovery, RedisError> {
        let answer: Vec<Bytes> = self
            .redis
            .run(
                script(SINCE_SCRIPT, group)
                    .arg(&last.epoch)
                    .arg(last.offset)
                    .arg(self.options.keep_last.max(1)),
            )
            .await?;
        let mut answer = answer.into_iter();
        let status = answer.next().unwrap_or_default();
        let lost = match &status[..] {
            b"ok" => None,
            b"epoch" => Some(Lost::NewEpoch),
            b"trimmed" => Some(Lost::Trimmed),
            b"unknown" => Some(Lost::Unknown),
            other => {
                return Err(RedisError::Command(format!(
                    "history: unexpected answer {:?}",
                    String::from_utf8_lossy(other)
                )))
            }
        };
        if let Some(lost) = lost {
            return Ok(Recovery::Lost(lost));
        }
        Ok(Recovery::Recovered(entries(answer, &last.epoch)?))
    }

    /// The position of `group`'s newest message and its last `limit` messages (at most
    /// what is kept), oldest first.
    ///
    /// ```no_run
    /// # async fn f(history: brisk::ws::History) -> Result<(), brisk::redis::RedisError> {
    /// let (at, last) = history.latest("lobby", 20).await?;
    /// # Ok(()) }
    /// ```
    pub async fn latest(
        &self,
        group: &str,
        limit: usize,
    ) -> Result<(Position, Vec<Kept>), RedisError> {
        let limit = limit.min(self.options.keep_last.max(1));
        let answer: Vec<Bytes> = self
            .redis
            .run(
                script(LATEST_SCRIPT, group)
                    .arg(millis(self.options.remember_for))
                    .arg(limit),
            )
            .await?;
        let mut answer = answer.into_iter();
        let (Some(epoch), Some(offset)) = (answer.next(), answer.next()) else {
            return Err(RedisError::Command("history: no position".into()));
        };
        let epoch = String::from_utf8_lossy(&epoch).into_owned();
        let offset = parse_offset(&offset)?;
        let kept = entries(answer, &epoch)?;
        Ok((Position { epoch, offset }, kept))
    }

    /// The position of `group`'s newest message (offset 0 when it has none yet). A client
    /// that joins takes it as its starting point, so that it can recover even when the first
    /// message it would have got is the one it missed.
    pub async fn position(&self, group: &str) -> Result<Position, RedisError> {
        Ok(self.latest(group, 0).await?.0)
    }
}

/// The (offset, payload) pairs of a script's answer, as messages of `epoch`.
fn entries(
    answer: impl ExactSizeIterator<Item = Bytes>,
    epoch: &str,
) -> Result<Vec<Kept>, RedisError> {
    let mut answer = answer.into_iter();
    let mut kept = Vec::with_capacity(answer.len() / 2);
    while let (Some(offset), Some(payload)) = (answer.next(), answer.next()) {
        kept.push(Kept {
            position: Position {
                epoch: epoch.to_owned(),
                offset: parse_offset(&offset)?,
            },
            payload,
        });
    }
    Ok(kept)
}

fn parse_offset(offset: &[u8]) -> Result<u64, RedisError> {
    std::str::from_utf8(offset)
        .ok()
        .and_then(|o| o.parse().ok())
        .ok_or_else(|| RedisError::Command("history: an entry without offset".into()))
}

/// A string no other append uses, in any worker or instance: a random prefix drawn once per
/// process, and a count.
fn nonce() -> String {
    static PREFIX: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    static COUNT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let prefix = PREFIX.get_or_init(|| {
        let mut bytes = [0u8; 8];
        // As with session tokens: it fails only where there is no entropy source at all.
        getrandom::fill(&mut bytes).expect("the operating system's random source");
        u64::from_be_bytes(bytes)
    });
    let n = COUNT.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
    format!("{prefix:016x}{n:x}")
}

/// `EVAL source` on `group`'s two keys (meta, stream); the script's arguments follow.
fn script(source: &str, group: &str) -> Cmd {
    let mut eval = cmd("EVAL");
    eval.arg(source)
        .arg(2)
        .arg(meta_key(group))
        .arg(stream_key(group));
    eval
}

/// `d` in whole milliseconds, at least 1 (Redis refuses a zero expiry).
fn millis(d: Duration) -> u64 {
    d.as_millis().max(1) as u64
}

/// The hash with a group's epoch and last offset (the braces keep both keys of a group in
/// one slot, should the keys ever live on a Redis Cluster: the scripts need both).
fn meta_key(group: &str) -> String {
    format!("brisk:history:{{{group}}}:meta")
}

/// The stream of a group's messages.
fn stream_key(group: &str) -> String {
    format!("brisk:history:{{{group}}}:stream")
}
