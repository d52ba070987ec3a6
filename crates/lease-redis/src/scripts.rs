//! The Lua script of each operation. Each runs atomically on the primary, judges time by the
//! server's clock (`TIME`; Redis 7 replicates a script's effects, not the script, so reading
//! the clock in a writing script is allowed) and answers in one reply: one round trip
//! (`EVALSHA`; redis-rs's [`Script`] loads the script again after `NOSCRIPT`).
//!
//! `ARGV[1]` of every script is the operation's name, so `MONITOR`, `SLOWLOG` and the tests'
//! proxy can tell them apart. Numbers travel as decimal strings; times are microseconds since
//! the Unix epoch (below 2^53 until the year 2255, so exact in Lua's doubles); fencing tokens
//! are compared as decimal strings (exact for every `u64`).

use redis::Script;

/// Shared by every script: the time (the server's, unless the test hook names one), number
/// formatting, comparing decimal strings, and reading a lease hash.
const PRELUDE: &str = r"
local function now_us(override)
  if override ~= '' then return tonumber(override) end
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000000 + tonumber(t[2])
end
local function fmt(n) return string.format('%.0f', n) end
local function dec_gt(a, b)
  if #a ~= #b then return #a > #b end
  return a > b
end
local function current(key)
  return redis.call('HMGET', key, 'holder', 'owner', 'value', 'fencing', 'acquired_at',
                    'renewed_at', 'expires_at', 'request_id')
end
local function reply(head, cur)
  for i = 1, 8 do head[#head + 1] = cur[i] end
  return head
end
";

/// Acquire. KEYS: lease hash, incarnation record, partition index. ARGV: op, token,
/// has owner, owner, has value, value, duration (microseconds), test time or '', skew
/// allowance (microseconds), request id, recreation grace (microseconds, '0' off), incarnation
/// id, channel, payload, sort key.
/// Reply: status (`granted`, `held`, `grace`), now, grants_from or false, fencing granted or
/// false, expires_at granted or false, then the lease hash as it was (8 fields).
const ACQUIRE: &str = r"
local now = now_us(ARGV[8])
local cur = current(KEYS[1])
local grace = tonumber(ARGV[11])
if grace > 0 then
  local meta = redis.call('HMGET', KEYS[2], 'incarnation', 'grants_from')
  local grants_from
  if meta[1] ~= ARGV[12] then
    grants_from = now + grace
    redis.call('HSET', KEYS[2], 'incarnation', ARGV[12], 'grants_from', fmt(grants_from),
               'noticed_at', fmt(now))
  else
    grants_from = tonumber(meta[2]) or 0
  end
  if now < grants_from then
    return reply({'grace', fmt(now), fmt(grants_from), false, false}, cur)
  end
end
local expires = tonumber(cur[7])
local skew = tonumber(ARGV[9])
if cur[1] and not (expires and expires + skew <= now) then
  return reply({'held', fmt(now), false, false, false}, cur)
end
local fencing = math.max((tonumber(cur[4]) or 0) + 1, now)
local until_us = now + tonumber(ARGV[7])
redis.call('HDEL', KEYS[1], 'owner', 'value')
redis.call('HSET', KEYS[1], 'holder', ARGV[2], 'fencing', fmt(fencing), 'duration_us', ARGV[7],
           'acquired_at', fmt(now), 'renewed_at', fmt(now), 'expires_at', fmt(until_us),
           'request_id', ARGV[10])
if ARGV[3] == '1' then redis.call('HSET', KEYS[1], 'owner', ARGV[4]) end
if ARGV[5] == '1' then redis.call('HSET', KEYS[1], 'value', ARGV[6]) end
redis.call('SADD', KEYS[3], ARGV[15])
redis.call('PUBLISH', ARGV[13], ARGV[14])
return reply({'granted', fmt(now), false, fmt(fencing), fmt(until_us)}, cur)
";

/// Renew. KEYS: lease hash. ARGV: op, token, fencing, duration (microseconds), test time or
/// '', request id. Reply: status (`renewed`, `refused`), now, new expires_at or false, then the
/// lease hash as it was.
const RENEW: &str = r"
local now = now_us(ARGV[5])
local cur = current(KEYS[1])
local expires = tonumber(cur[7])
if cur[1] == ARGV[2] and cur[4] == ARGV[3] and expires and expires > now then
  local until_us = now + tonumber(ARGV[4])
  redis.call('HSET', KEYS[1], 'renewed_at', fmt(now), 'expires_at', fmt(until_us),
             'duration_us', ARGV[4], 'request_id', ARGV[6])
  return reply({'renewed', fmt(now), fmt(until_us)}, cur)
end
return reply({'refused', fmt(now), false}, cur)
";

/// Release. KEYS: lease hash. ARGV: op, token, fencing, request id, channel, payload.
/// Reply: status (`released`, `refused`), then the lease hash as it was.
const RELEASE: &str = r"
local cur = current(KEYS[1])
if cur[1] == ARGV[2] and cur[4] == ARGV[3] then
  redis.call('HDEL', KEYS[1], 'holder', 'owner', 'value', 'acquired_at', 'renewed_at',
             'expires_at', 'duration_us')
  redis.call('HSET', KEYS[1], 'request_id', ARGV[4])
  redis.call('PUBLISH', ARGV[5], ARGV[6])
  return reply({'released'}, cur)
end
return reply({'refused'}, cur)
";

/// Delete. KEYS: lease hash, partition index. ARGV: op, has holder, holder, has fencing,
/// fencing, channel, payload, sort key. Reply: status (`deleted`, `refused`), then the lease
/// hash as it was.
const DELETE: &str = r"
local cur = current(KEYS[1])
local holder_ok = (ARGV[2] == '1' and cur[1] == ARGV[3]) or (ARGV[2] == '0' and not cur[1])
local fencing_ok = (ARGV[4] == '1' and cur[4] == ARGV[5]) or (ARGV[4] == '0' and not cur[4])
if cur[4] and holder_ok and fencing_ok then
  redis.call('DEL', KEYS[1])
  redis.call('SREM', KEYS[2], ARGV[8])
  redis.call('PUBLISH', ARGV[6], ARGV[7])
  return reply({'deleted'}, cur)
end
return reply({'refused'}, cur)
";

/// List a partition. KEYS: partition index. ARGV: op, the partition's lease-hash prefix.
/// Reply: for each sort key, the sort key then its lease hash (9 entries each). The hashes are
/// in the index's hash slot (same hash tag), so Redis Cluster runs it on one node.
const LIST: &str = r"
local out = {}
for _, sort in ipairs(redis.call('SMEMBERS', KEYS[1])) do
  out[#out + 1] = sort
  local cur = current(ARGV[2] .. sort)
  for i = 1, 8 do out[#out + 1] = cur[i] end
end
return out
";

/// Fence and read. KEYS: value hash. ARGV: op, fencing. Reply: status (`ok`, `fenced`), data
/// or false.
const FENCE_AND_READ: &str = r"
local fence = redis.call('HGET', KEYS[1], 'fence')
if fence and dec_gt(fence, ARGV[2]) then return {'fenced', false} end
redis.call('HSET', KEYS[1], 'fence', ARGV[2])
return {'ok', redis.call('HGET', KEYS[1], 'data')}
";

/// Put fenced. KEYS: value hash. ARGV: op, fencing, data. Reply: status (`ok`, `fenced`).
const PUT_FENCED: &str = r"
local fence = redis.call('HGET', KEYS[1], 'fence')
if fence and dec_gt(fence, ARGV[2]) then return {'fenced'} end
redis.call('HSET', KEYS[1], 'fence', ARGV[2], 'data', ARGV[3])
return {'ok'}
";

/// The scripts, with their SHA-1s computed once.
#[derive(Debug)]
pub(crate) struct Scripts {
    pub(crate) acquire: Script,
    pub(crate) renew: Script,
    pub(crate) release: Script,
    pub(crate) delete: Script,
    pub(crate) list: Script,
    pub(crate) fence_and_read: Script,
    pub(crate) put_fenced: Script,
}

impl Scripts {
    pub(crate) fn new() -> Self {
        let script = |body: &str| Script::new(&format!("{PRELUDE}{body}"));
        Self {
            acquire: script(ACQUIRE),
            renew: script(RENEW),
            release: script(RELEASE),
            delete: script(DELETE),
            list: script(LIST),
            fence_and_read: script(FENCE_AND_READ),
            put_fenced: script(PUT_FENCED),
        }
    }
}
