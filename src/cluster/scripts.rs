//! The Lua scripts behind shared breakers. Each runs atomically on the Redis server and
//! reads time from its clock, so instances never compare their own clocks.
//!
//! Keys: the hash of open breakers (field → `version until_ms cooldown_ms`), the version
//! counter, and one probe lease per breaker.

/// Records that a breaker opened or closed, and tells every instance.
/// KEYS: hash, version counter, the breaker's lease.
/// ARGV: field, `open`|`closed`, remaining_ms, cooldown_ms, channel, origin.
/// Returns the new version. Any probe lease ends with it: the probe's result is in, or
/// the breaker moved on without it.
pub const MOVE: &str = r#"
local v = redis.call('INCR', KEYS[2])
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local remaining = tonumber(ARGV[3])
if ARGV[2] == 'open' then
  redis.call('HSET', KEYS[1], ARGV[1], v .. ' ' .. (now + remaining) .. ' ' .. ARGV[4])
else
  redis.call('HDEL', KEYS[1], ARGV[1])
end
redis.call('DEL', KEYS[3])
redis.call('PUBLISH', ARGV[5], cjson.encode({
  v = v, kind = ARGV[2], origin = ARGV[6], field = ARGV[1],
  remaining_ms = remaining, cooldown_ms = tonumber(ARGV[4])
}))
return v
"#;

/// An operator's reset: forgets the named breakers' shared state and tells every instance.
/// KEYS: hash, version counter, then the leases of the fields to forget.
/// ARGV: channel, origin, provider (empty for all), model (empty for all), then the fields.
pub const RESET: &str = r#"
local v = redis.call('INCR', KEYS[2])
for i = 5, #ARGV do
  redis.call('HDEL', KEYS[1], ARGV[i])
end
for i = 3, #KEYS do
  redis.call('DEL', KEYS[i])
end
redis.call('PUBLISH', ARGV[1], cjson.encode({
  v = v, kind = 'reset', origin = ARGV[2], provider = ARGV[3], model = ARGV[4]
}))
return v
"#;

/// Everything open, with the version counter and the server's time, in one read.
/// KEYS: hash, version counter. Returns `{version, now_ms, {field, value, ...}}`.
pub const SNAPSHOT: &str = r#"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local v = redis.call('GET', KEYS[2]) or '0'
return {tostring(v), tostring(now), redis.call('HGETALL', KEYS[1])}
"#;

/// Takes the probe lease, only for the open the asker knows and only once its cooldown
/// is over. KEYS: hash, the breaker's lease. ARGV: field, known version, ttl_ms, origin.
/// Returns 1 taken, 0 held by another, -1 the shared state is not the open the asker
/// knows (it should read it again), -2 the cooldown is not over on the server's clock.
pub const TAKE_LEASE: &str = r#"
local entry = redis.call('HGET', KEYS[1], ARGV[1])
if not entry then return -1 end
local v, untl = string.match(entry, '^(%d+) (%d+)')
if v ~= ARGV[2] then return -1 end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
if now < tonumber(untl) then return -2 end
if redis.call('SET', KEYS[2], ARGV[4], 'NX', 'PX', ARGV[3]) then return 1 end
return 0
"#;

/// Extends the lease while its probe is out; only the holder's. KEYS: the lease.
/// ARGV: origin, ttl_ms. Returns 1 if extended.
pub const RENEW_LEASE: &str = r#"
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
"#;

/// Gives the lease back unused; only the holder's. KEYS: the lease. ARGV: origin.
pub const RELEASE_LEASE: &str = r#"
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
"#;
