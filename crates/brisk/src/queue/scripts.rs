//! The queue's Lua scripts: each step that touches more than one key runs as one script, so a
//! consumer that dies between two commands cannot lose a job or leave it half moved.
//!
//! Keys: `PREFIX` is `brisk:queue:NAME:`; `PREFIXseq` (the last id), `PREFIXready` (a list of
//! ids), `PREFIXdelayed` (a sorted set of ids by due time in ms), `PREFIXactive` (a sorted set
//! of the ids being run, by the time their consumer must be done, in ms), `PREFIXdead` (a
//! list of ids) and `PREFIXjob:ID` (a hash: `payload`, `seal`, `attempts`, `state`,
//! `last_error`, `created_ms`). The scripts name the job hashes themselves, so the queue wants a single
//! Redis server, not a cluster.

/// KEYS: seq, ready, delayed. ARGV: payload, due ms (0: now), prefix, now ms, seal (empty in
/// an app without a secret). Returns the id.
/// A job that makes `ready` non-empty is announced on the channel `PREFIXwake`, where idle
/// consumers wait; while jobs are queued, consumers are busy and nothing is published.
pub(super) const PUSH: &str = r#"
local id = redis.call('INCR', KEYS[1])
local key = ARGV[3] .. 'job:' .. id
redis.call('HSET', key, 'payload', ARGV[1], 'seal', ARGV[5], 'attempts', 0, 'state', 'queued', 'created_ms', ARGV[4])
if tonumber(ARGV[2]) > 0 then
  redis.call('ZADD', KEYS[3], ARGV[2], id)
  redis.call('HSET', key, 'state', 'delayed')
elseif redis.call('RPUSH', KEYS[2], id) == 1 then
  redis.call('PUBLISH', ARGV[3] .. 'wake', id)
end
return id
"#;

/// KEYS: ready, delayed, active. ARGV: now ms, visibility ms, prefix. Moves due delayed jobs
/// and jobs whose consumer ran out of time to `ready`, then takes the first ready job: returns
/// `{id, payload, attempts, seal}` (the attempt count including this one); or, when nothing is
/// ready, the earliest time in ms a delayed job falls due or a running one's time runs out
/// (-1: none).
pub(super) const TAKE: &str = r#"
local function requeue(set, why)
  local ids = redis.call('ZRANGEBYSCORE', set, '-inf', ARGV[1], 'LIMIT', 0, 100)
  for _, id in ipairs(ids) do
    redis.call('ZREM', set, id)
    redis.call('RPUSH', KEYS[1], id)
    redis.call('HSET', ARGV[3] .. 'job:' .. id, 'state', 'queued')
    if why then
      redis.call('HSET', ARGV[3] .. 'job:' .. id, 'last_error', why)
    end
  end
end
requeue(KEYS[2], nil)
requeue(KEYS[3], 'its consumer did not finish it within the visibility timeout')
local id = redis.call('LPOP', KEYS[1])
if not id then
  local due = -1
  for _, set in ipairs({KEYS[2], KEYS[3]}) do
    local first = redis.call('ZRANGE', set, 0, 0, 'WITHSCORES')
    if first[2] and (due < 0 or tonumber(first[2]) < due) then
      due = tonumber(first[2])
    end
  end
  return due
end
local key = ARGV[3] .. 'job:' .. id
local attempts = redis.call('HINCRBY', key, 'attempts', 1)
redis.call('ZADD', KEYS[3], tonumber(ARGV[1]) + tonumber(ARGV[2]), id)
redis.call('HSET', key, 'state', 'running')
local fields = redis.call('HMGET', key, 'payload', 'seal')
return {id, fields[1] or '', attempts, fields[2] or ''}
"#;

/// KEYS: active. ARGV: id, prefix, seconds to keep the done job. Returns 1 if the job was
/// still this consumer's (0: its visibility timeout passed and it went back to the queue).
pub(super) const FINISH: &str = r#"
local mine = redis.call('ZREM', KEYS[1], ARGV[1])
local key = ARGV[2] .. 'job:' .. ARGV[1]
redis.call('HSET', key, 'state', 'done')
redis.call('EXPIRE', key, ARGV[3])
return mine
"#;

/// KEYS: active, delayed, dead. ARGV: id, prefix, error, retry at ms (0: dead-letter it).
/// Returns `retry` or `dead`.
pub(super) const FAIL: &str = r#"
redis.call('ZREM', KEYS[1], ARGV[1])
local key = ARGV[2] .. 'job:' .. ARGV[1]
redis.call('HSET', key, 'last_error', ARGV[3])
if tonumber(ARGV[4]) > 0 then
  redis.call('ZADD', KEYS[2], ARGV[4], ARGV[1])
  redis.call('HSET', key, 'state', 'retrying')
  return 'retry'
end
redis.call('RPUSH', KEYS[3], ARGV[1])
redis.call('HSET', key, 'state', 'dead')
return 'dead'
"#;
