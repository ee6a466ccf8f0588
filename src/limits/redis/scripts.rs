//! The Lua the shared limiter runs in Redis, each script one atomic step on Redis's clock.

/// Checks every limit, then counts the request, or refuses without counting anything.
///
/// KEYS: requests, tokens, in-flight slots, and this admission's marker. ARGV: requests and
/// tokens per minute, max concurrent (0 for none), window, request id, lease (ms), marker TTL
/// (ms). An admission leaves a marker, so running the script again for the same request id
/// (a retry after a lost reply) returns the earlier verdict instead of counting twice.
pub const ADMIT: &str = r#"
local rpm, tpm, maxc = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local sliding, id, lease = ARGV[4] == 'sliding', ARGV[5], tonumber(ARGV[6])
local marker_ttl = tonumber(ARGV[7])
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local minute = 60000
local rkey, tkey, used, tused, reset, treset
if sliding then
  rkey, tkey = KEYS[1], KEYS[2]
  redis.call('ZREMRANGEBYSCORE', rkey, '-inf', now - minute)
  redis.call('ZREMRANGEBYSCORE', tkey, '-inf', now - minute)
  used = redis.call('ZCARD', rkey)
  reset, treset = minute, minute
  local oldest = redis.call('ZRANGE', rkey, 0, 0, 'WITHSCORES')
  if oldest[2] then reset = tonumber(oldest[2]) + minute - now end
  tused = 0
  local charges = redis.call('ZRANGE', tkey, 0, -1, 'WITHSCORES')
  for i = 1, #charges, 2 do
    tused = tused + tonumber(string.match(charges[i], ':(%d+)$'))
    if i == 1 then treset = tonumber(charges[2]) + minute - now end
  end
else
  local window = math.floor(now / minute)
  rkey, tkey = KEYS[1] .. ':' .. window, KEYS[2] .. ':' .. window
  used = tonumber(redis.call('GET', rkey) or '0')
  tused = tonumber(redis.call('GET', tkey) or '0')
  reset = (window + 1) * minute - now
  treset = reset
end
local earlier = redis.call('GET', KEYS[4])
if earlier then return {1, 'ok', 0, tonumber(earlier), tused, reset, treset} end
if maxc > 0 then
  redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', now)
  if redis.call('ZCARD', KEYS[3]) >= maxc then
    return {0, 'concurrency', 1000, used, tused, reset, treset}
  end
end
if rpm > 0 and used >= rpm then return {0, 'requests', reset, used, tused, reset, treset} end
if tpm > 0 and tused >= tpm then return {0, 'tokens', treset, used, tused, reset, treset} end
if sliding then
  redis.call('ZADD', rkey, now, id)
  redis.call('PEXPIRE', rkey, minute)
else
  redis.call('INCR', rkey)
  redis.call('PEXPIRE', rkey, 2 * minute)
end
if maxc > 0 then
  redis.call('ZADD', KEYS[3], now + lease, id)
  -- Never shorten the key's life: another instance may hold a longer lease in it.
  if redis.call('PTTL', KEYS[3]) < lease then redis.call('PEXPIRE', KEYS[3], lease) end
end
redis.call('SET', KEYS[4], used + 1, 'PX', marker_ttl)
return {1, 'ok', 0, used + 1, tused, reset, treset}
"#;

/// Extends a held concurrency slot's lease; a slot already released or expired stays gone,
/// since its place may have been given to another request.
///
/// KEYS: in-flight slots. ARGV: request id, lease (ms). Returns 1 if the slot was held.
pub const RENEW: &str = r#"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local lease = tonumber(ARGV[2])
if not redis.call('ZSCORE', KEYS[1], ARGV[1]) then return 0 end
redis.call('ZADD', KEYS[1], now + lease, ARGV[1])
if redis.call('PTTL', KEYS[1]) < lease then redis.call('PEXPIRE', KEYS[1], lease) end
return 1
"#;

/// Adds an answer's tokens to the current window.
pub const CHARGE: &str = r#"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
if ARGV[2] == 'sliding' then
  redis.call('ZADD', KEYS[1], now, ARGV[3] .. ':' .. ARGV[1])
  redis.call('PEXPIRE', KEYS[1], 60000)
else
  local key = KEYS[1] .. ':' .. math.floor(now / 60000)
  redis.call('INCRBY', key, ARGV[1])
  redis.call('PEXPIRE', key, 120000)
end
return 1
"#;
