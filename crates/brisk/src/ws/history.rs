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
//! **Sealed.** In an app with a secret (`App::cluster_secret`), each entry carries an HMAC of
//! it over its group, nonce and payload, and an entry whose seal does not match (forged by
//! anyone who can write to Redis, or moved from another group) is never answered: a recovery
//! that meets one is [`Lost::Refused`] (the client reloads), [`History::latest`] leaves it
//! out, and both count it (`redis_refused` in `status --json`). A replayed genuine entry of
//! the same group is not caught: it repeats a message the group had.
//!
//! The epoch changes when the history is lost (Redis restarted without persistence, or nothing
//! was appended for [`HistoryOptions::remember_for`]); a position of an older epoch cannot be
//! recovered, since its offsets no longer mean the same messages. A Redis that comes back with
//! part of the history (an older snapshot, AOF with `appendfsync everysec`, a replica promoted
//! before it caught up) keeps the epoch and reuses offsets: where recovery must be exact, give
//! it a Redis that persists every write (`appendfsync always`). The stream keeps the last
//! [`HistoryOptions::keep_last`] messages, at most [`HistoryOptions::max_bytes`] of them (the
//! oldest go first), and with [`HistoryOptions::keep_for`] only those of that long ago.
//!
//! **Bounded in bytes.** A message larger than [`HistoryOptions::page_bytes`] is refused
//! ([`HistoryError::TooLarge`]), and a read answers at most one page of that many bytes
//! ([`Recovery::Recovered`] says whether more follow: read again from the last one's
//! position), so neither a Redis reply nor what a worker sends a client holds more than a page.
//! Every history key expires ([`HistoryOptions::remember_for`]); a Redis with `maxmemory` and
//! the `volatile-lru` policy (as `deploy/` ships it) bounds all groups' histories together by
//! evicting the least used, and a client that recovers from an evicted history is told it
//! was lost ([`Lost::NewEpoch`] or [`Lost::Trimmed`]), never given a gap. (A counter of all
//! groups' bytes would put every group's keys in one Redis Cluster slot.)
//!
//! Messages can reach clients out of offset order when several workers broadcast at once.
//! Since offsets are dense, a client knows which ones it has: it recovers from the highest
//! offset up to which it has them all, and ignores offsets it already has.
//!
//! ```no_run
//! use brisk::redis::{Redis, RedisOptions};
//! use brisk::ws::{History, HistoryOptions, Recovery};
//! # async fn f() -> Result<(), brisk::ws::HistoryError> {
//! let redis = Redis::new("redis://127.0.0.1:6379", RedisOptions::default())?;
//! let history = History::new(redis, HistoryOptions::default());
//! let at = history.append("lobby", b"hello").await?;
//! brisk::ws::broadcast("lobby", brisk::ws::Message::text(format!("{at} hello")));
//! // Later, a client that got everything up to `at`:
//! match history.since("lobby", &at).await? {
//!     Recovery::Recovered { missed, more } => {
//!         /* send `missed` to it; when `more`, read again from the last one's position */
//!     }
//!     Recovery::Lost(why) => { /* tell it to reload: `why` */ }
//! }
//! # Ok(()) }
//! ```

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use bytes::Bytes;

use crate::redis::{cmd, Cmd, Redis, RedisError};
use crate::redis_seal::Sealed;

/// Appends a message: `KEYS` meta and stream; `ARGV` payload, keep_last, keep_for (ms, 0:
/// none), remember_for (ms), the append's nonce, `1` when this is a retry (the first try
/// may have been kept: then its entry, found by the nonce, is the answer), and max_bytes.
/// Answers `{epoch, offset}`. The meta hash counts the stream's payload bytes (`b`, set
/// afresh when the stream holds only the new entry, as after it expired); past max_bytes, or
/// a tenth past keep_last, or (with keep_for) always, the oldest entries go until keep_last
/// and nine tenths of max_bytes are left, and none older than keep_for; the newest always
/// stays.
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
redis.call('XADD', KEYS[2], '*', 'o', offset, 'd', ARGV[1], 'n', ARGV[5])
local count = redis.call('XLEN', KEYS[2])
local bytes = string.len(ARGV[1])
if count == 1 then
  redis.call('HSET', KEYS[1], 'b', bytes)
else
  bytes = redis.call('HINCRBY', KEYS[1], 'b', bytes)
end
local keep_last, max_bytes = tonumber(ARGV[2]), tonumber(ARGV[7])
local keep_for = tonumber(ARGV[3])
local min_ms = nil
if keep_for > 0 then
  local t = redis.call('TIME')
  min_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) - keep_for
end
-- Trimmed a tenth at a time (a trim reads the oldest entries to count their bytes), so that
-- most appends only add: the stream holds at most max_bytes, and up to a tenth more entries
-- than keep_last (reads never answer more than keep_last).
local spare = math.max(1, math.floor(keep_last / 10))
if count >= keep_last + spare or bytes > max_bytes or min_ms then
  local dropped, freed, cut, from = 0, 0, nil, '-'
  local target = max_bytes - math.floor(max_bytes / 10)
  local batch = math.max(count - keep_last, 0) + 1
  while not cut do
    local entries = redis.call('XRANGE', KEYS[2], from, '+', 'COUNT', batch)
    for _, e in ipairs(entries) do
      local left = count - dropped
      local old = min_ms and tonumber(string.match(e[1], '^%d+')) < min_ms
      if left <= 1 or (left <= keep_last and bytes - freed <= target and not old) then
        cut = e[1]
        break
      end
      dropped, freed = dropped + 1, freed + string.len(e[2][4])
    end
    if #entries == 0 then break end
    from, batch = '(' .. entries[#entries][1], 16
  end
  if dropped > 0 and cut then
    redis.call('XTRIM', KEYS[2], 'MINID', cut)
    redis.call('HINCRBY', KEYS[1], 'b', -freed)
  end
end
if keep_for > 0 then
  redis.call('PEXPIRE', KEYS[2], keep_for)
else
  redis.call('PEXPIRE', KEYS[2], ARGV[4])
end
redis.call('PEXPIRE', KEYS[1], ARGV[4])
return {epoch, offset}
";

/// The messages after a position, one page: `KEYS` meta and stream; `ARGV` epoch, offset,
/// keep_last, page_bytes. Answers `{'ok', more, offset, n, payload, offset, n, payload…}`
/// (at least one message, then as many as fit in page_bytes; `more` is `1` when some were
/// left) or `{reason}`.
const SINCE_SCRIPT: &str = r"
local meta = redis.call('HMGET', KEYS[1], 'e', 's')
if not meta[1] or meta[1] ~= ARGV[1] then return {'epoch'} end
local top = tonumber(meta[2] or '0')
local since = tonumber(ARGV[2])
if since > top then return {'unknown'} end
local n = top - since
if n == 0 then return {'ok', '0'} end
if n > tonumber(ARGV[3]) then return {'trimmed'} end
local entries = redis.call('XREVRANGE', KEYS[2], '+', '-', 'COUNT', n)
if #entries < n or tonumber(entries[#entries][2][2]) ~= since + 1 then return {'trimmed'} end
local out = {'ok', '0'}
local page, size = tonumber(ARGV[4]), 0
for i = #entries, 1, -1 do
  local fields = entries[i][2]
  size = size + string.len(fields[4])
  if #out > 2 and size > page then
    out[2] = '1'
    break
  end
  table.insert(out, fields[2])
  table.insert(out, fields[6] or '')
  table.insert(out, fields[4])
end
return out
";

/// The position of the newest message (starting an epoch when there is none) and the last
/// messages: `KEYS` meta and stream; `ARGV` remember_for (ms), how many, page_bytes (the
/// newest that fit, at least one). Answers `{epoch, offset, offset, n, payload, offset, n,
/// payload…}`, oldest first (`n`: the append's nonce and seal).
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
  local page, size, first = tonumber(ARGV[3]), 0, #entries
  for i = 1, #entries do
    size = size + string.len(entries[i][2][4])
    if i > 1 and size > page then
      first = i - 1
      break
    end
  end
  for i = first, 1, -1 do
    table.insert(out, entries[i][2][2])
    table.insert(out, entries[i][2][6] or '')
    table.insert(out, entries[i][2][4])
  end
end
return out
";

/// How much of each group's history is kept.
#[derive(Debug, Clone)]
pub struct HistoryOptions {
    /// The most messages kept per group (default 100): reads never answer more; between
    /// trims the stream may hold up to a tenth more.
    pub keep_last: usize,
    /// Keep only messages of the last this long (default: as long as they are among the last
    /// `keep_last`).
    pub keep_for: Option<Duration>,
    /// A group nothing was appended to for this long loses its epoch, and so its history
    /// (default 24 hours).
    pub remember_for: Duration,
    /// The most payload bytes kept per group (default 1 MiB): past it, the oldest messages go
    /// until nine tenths of it are left.
    pub max_bytes: usize,
    /// The most payload bytes one read answers (default 256 KiB), and so the largest message
    /// kept (with `max_bytes`, whichever is smaller): a read answers at least one message,
    /// then as many as fit. Keep it well under the clients' send buffer (`max_send_buffer`).
    pub page_bytes: usize,
}

impl Default for HistoryOptions {
    fn default() -> Self {
        HistoryOptions {
            keep_last: 100,
            keep_for: None,
            remember_for: Duration::from_secs(24 * 3600),
            max_bytes: 1 << 20,
            page_bytes: 256 << 10,
        }
    }
}

impl HistoryOptions {
    /// The largest message kept: `page_bytes` or `max_bytes`, whichever is smaller.
    pub fn max_message(&self) -> usize {
        self.page_bytes.min(self.max_bytes).max(1)
    }
}

/// Why an append failed.
#[derive(Debug, thiserror::Error)]
pub enum HistoryError {
    /// The message is larger than the history keeps.
    #[error("a message of {len} bytes is larger than the history keeps ({limit} bytes: HistoryOptions::page_bytes and max_bytes)")]
    TooLarge {
        /// The message's bytes.
        len: usize,
        /// [`HistoryOptions::max_message`].
        limit: usize,
    },
    /// Redis did not keep it (or may have: see [`History::append`]).
    #[error(transparent)]
    Redis(#[from] RedisError),
}

impl HistoryError {
    /// What a client may be told (the details go to the log).
    pub fn client_message(&self) -> String {
        match self {
            HistoryError::TooLarge { .. } => self.to_string(),
            HistoryError::Redis(e) => e.client_message().to_owned(),
        }
    }

    /// The HTTP status that answers a request that failed with this error: 413 for a message
    /// too large, else the Redis error's.
    pub fn http_status(&self) -> u16 {
        match self {
            HistoryError::TooLarge { .. } => 413,
            HistoryError::Redis(e) => e.http_status(),
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
    /// A missed message is not sealed with the app's secret (forged by someone who can
    /// write to Redis, or damaged): it is not sent, so the rest cannot be recovered whole.
    #[error("a missed message in the history is not sealed with the app's secret")]
    Refused,
}

/// What [`History::since`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Recovery {
    /// The messages after the position, oldest first (none when nothing was missed), one
    /// page of at most [`HistoryOptions::page_bytes`].
    Recovered {
        /// The page.
        missed: Vec<Kept>,
        /// More follow: read again from the position of the page's last message.
        more: bool,
    },
    /// They cannot be recovered.
    Lost(Lost),
}

impl Recovery {
    /// Where the next page starts: the position of this page's last message, when more
    /// follow (`None` when this page was the last, or nothing was recovered).
    pub fn continues_from(&self) -> Option<&Position> {
        match self {
            Recovery::Recovered { missed, more: true } => missed.last().map(|k| &k.position),
            _ => None,
        }
    }
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
    /// answer, an append therefore takes twice the command timeout. A message larger than
    /// [`HistoryOptions::max_message`] is refused before Redis is asked.
    pub async fn append(&self, group: &str, payload: &[u8]) -> Result<Position, HistoryError> {
        let limit = self.options.max_message();
        if payload.len() > limit {
            return Err(HistoryError::TooLarge {
                len: payload.len(),
                limit,
            });
        }
        let nonce = sealed_nonce(group, &nonce(), payload);
        Ok(match self.try_append(group, payload, &nonce, false).await {
            Err(RedisError::Timeout(_) | RedisError::Unavailable(_)) => {
                self.try_append(group, payload, &nonce, true).await?
            }
            answer => answer?,
        })
    }

    /// The options it keeps by.
    pub fn options(&self) -> &HistoryOptions {
        &self.options
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
                    .arg(u8::from(retry))
                    .arg(o.max_bytes.max(1)),
            )
            .await?;
        Ok(Position { epoch, offset })
    }

    /// The messages of `group` after `last` (the position of the last message a client got),
    /// one page of them, or why they cannot be recovered.
    pub async fn since(&self, group: &str, last: &Position) -> Result<Recovery, RedisError> {
        let answer: Vec<Bytes> = self
            .redis
            .run(
                script(SINCE_SCRIPT, group)
                    .arg(&last.epoch)
                    .arg(last.offset)
                    .arg(self.options.keep_last.max(1))
                    .arg(self.options.page_bytes.max(1)),
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
        let more = answer.next().is_some_and(|m| &m[..] == b"1");
        let (missed, refused) = entries(answer, group, &last.epoch)?;
        if refused > 0 {
            return Ok(Recovery::Lost(Lost::Refused));
        }
        Ok(Recovery::Recovered { missed, more })
    }

    /// The position of `group`'s newest message and its last `limit` messages (at most
    /// what is kept, and the newest that fit in [`HistoryOptions::page_bytes`]), oldest first.
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
                    .arg(limit)
                    .arg(self.options.page_bytes.max(1)),
            )
            .await?;
        let mut answer = answer.into_iter();
        let (Some(epoch), Some(offset)) = (answer.next(), answer.next()) else {
            return Err(RedisError::Command("history: no position".into()));
        };
        let epoch = String::from_utf8_lossy(&epoch).into_owned();
        let offset = parse_offset(&offset)?;
        let (kept, _refused) = entries(answer, group, &epoch)?;
        Ok((Position { epoch, offset }, kept))
    }

    /// The position of `group`'s newest message (offset 0 when it has none yet). A client
    /// that joins takes it as its starting point, so that it can recover even when the first
    /// message it would have got is the one it missed.
    pub async fn position(&self, group: &str) -> Result<Position, RedisError> {
        Ok(self.latest(group, 0).await?.0)
    }
}

/// The (offset, n, payload) triples of a script's answer, as messages of `group` in `epoch`,
/// and how many were refused (left out) for a seal that does not match.
fn entries(
    answer: impl ExactSizeIterator<Item = Bytes>,
    group: &str,
    epoch: &str,
) -> Result<(Vec<Kept>, usize), RedisError> {
    let mut answer = answer.into_iter();
    let mut kept = Vec::with_capacity(answer.len() / 3);
    let mut refused = 0;
    while let (Some(offset), Some(n), Some(payload)) = (answer.next(), answer.next(), answer.next())
    {
        if !genuine(group, &n, &payload) {
            refused += 1;
            crate::redis_seal::refuse(&format!(
                "a history entry of {:?}",
                group.chars().take(64).collect::<String>()
            ));
            continue;
        }
        kept.push(Kept {
            position: Position {
                epoch: epoch.to_owned(),
                offset: parse_offset(&offset)?,
            },
            payload,
        });
    }
    Ok((kept, refused))
}

/// What an append writes as its entry's `n`: its `nonce`, then, in an app with a secret, `.`
/// and the seal of `payload` in `group`.
fn sealed_nonce(group: &str, nonce: &str, payload: &[u8]) -> String {
    match crate::redis_seal::key(Sealed::HistoryEntry) {
        Some(key) => {
            let parts: [&[u8]; 3] = [group.as_bytes(), nonce.as_bytes(), payload];
            format!("{nonce}.{}", key.seal(Sealed::HistoryEntry, &parts))
        }
        None => nonce.to_owned(),
    }
}

/// Whether an entry of `group` with this `n` and `payload` may be answered: any, in an app
/// without a secret; else one whose seal (after the last `.` of `n`) matches.
fn genuine(group: &str, n: &[u8], payload: &[u8]) -> bool {
    let Some(key) = crate::redis_seal::key(Sealed::HistoryEntry) else {
        return true;
    };
    let Some(dot) = n.iter().rposition(|&b| b == b'.') else {
        return false;
    };
    let parts: [&[u8]; 3] = [group.as_bytes(), &n[..dot], payload];
    key.verify(Sealed::HistoryEntry, &parts, &n[dot + 1..])
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
