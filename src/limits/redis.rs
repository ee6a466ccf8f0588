//! The shared limiter: one Lua script per admission, on the Redis server's clock.
//!
//! Every instance runs the same script against the same keys, and Redis runs scripts one at
//! a time, so the check and the count are one atomic step across the whole cluster.

use std::sync::Arc;
use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::{RedisError, Script};

use super::{Decision, Lease, LimitKind, Permit, Quota, RateHeaders, Refusal, WindowState};
use crate::config::Window;

/// Checks every limit, then counts the request, or refuses without counting anything.
const ADMIT: &str = r#"
local rpm, tpm, maxc = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local sliding, id, lease = ARGV[4] == 'sliding', ARGV[5], tonumber(ARGV[6])
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
  redis.call('PEXPIRE', KEYS[3], lease)
end
return {1, 'ok', 0, used + 1, tused, reset, treset}
"#;

/// Adds an answer's tokens to the current window.
const CHARGE: &str = r#"
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

/// How long a concurrency slot outlives a crashed instance: longer than any stream.
const LEASE: Duration = Duration::from_secs(600);
/// A Redis that takes longer than this is treated as down, so requests never hang on it.
const TIMEOUT: Duration = Duration::from_millis(500);

/// Counters in Redis, shared by every instance that names the same Redis and prefix.
#[derive(Clone)]
pub struct RedisLimiter {
    connection: ConnectionManager,
    prefix: Arc<str>,
    admit: Arc<Script>,
    charge: Arc<Script>,
}

/// Redis did not answer in time, or answered with an error.
#[derive(Debug, thiserror::Error)]
pub enum RedisFailure {
    #[error("redis: {0}")]
    Redis(#[from] RedisError),
    #[error("redis did not answer within {TIMEOUT:?}")]
    Timeout,
}

impl RedisLimiter {
    /// Connects lazily: the first request makes the connection, and lost ones are remade.
    pub fn new(url: &str, prefix: &str) -> Result<RedisLimiter, RedisError> {
        let client = redis::Client::open(url)?;
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(Duration::from_millis(250)))
            .set_response_timeout(Some(TIMEOUT))
            .set_number_of_retries(1)
            .set_max_delay(Duration::from_millis(500));
        Ok(RedisLimiter {
            connection: ConnectionManager::new_lazy_with_config(client, config)?,
            prefix: Arc::from(prefix),
            admit: Arc::new(Script::new(ADMIT)),
            charge: Arc::new(Script::new(CHARGE)),
        })
    }

    /// The user's keys; the hash tag keeps them in one slot of a Redis cluster.
    fn key(&self, user: &str, what: &str) -> String {
        format!("{}:{{{user}}}:{what}", self.prefix)
    }

    /// Admits or refuses, in one script run.
    pub async fn admit(
        &self,
        user: &Arc<str>,
        quota: Quota,
        id: &str,
    ) -> Result<Decision, RedisFailure> {
        let mut connection = self.connection.clone();
        let mut invocation = self.admit.prepare_invoke();
        invocation
            .key(self.key(user, "requests"))
            .key(self.key(user, "tokens"))
            .key(self.key(user, "inflight"))
            .arg(quota.requests_per_minute.unwrap_or(0))
            .arg(quota.tokens_per_minute.unwrap_or(0))
            .arg(quota.max_concurrent.unwrap_or(0))
            .arg(window_name(quota.window))
            .arg(id)
            .arg(LEASE.as_millis() as u64);
        let answer: (i64, String, i64, i64, i64, i64, i64) =
            tokio::time::timeout(TIMEOUT, invocation.invoke_async(&mut connection))
                .await
                .map_err(|_| RedisFailure::Timeout)??;
        let (admitted, limit, retry_after_ms, used, tokens, reset_ms, token_reset_ms) = answer;
        let millis = |ms: i64| Duration::from_millis(ms.max(0) as u64);
        let headers = RateHeaders {
            requests: quota.requests_per_minute.map(|limit| WindowState {
                limit,
                remaining: limit.saturating_sub(used.max(0) as u64),
                reset: millis(reset_ms),
            }),
            tokens: quota.tokens_per_minute.map(|limit| WindowState {
                limit,
                remaining: limit.saturating_sub(tokens.max(0) as u64),
                reset: millis(token_reset_ms),
            }),
        };
        if admitted == 1 {
            return Ok(Decision::Admit(Permit {
                headers,
                lease: Lease::Redis {
                    limiter: self.clone(),
                    user: user.clone(),
                    quota,
                    id: id.to_owned(),
                },
            }));
        }
        let limit = match limit.as_str() {
            "concurrency" => LimitKind::Concurrency,
            "tokens" => LimitKind::Tokens,
            _ => LimitKind::Requests,
        };
        Ok(Decision::Refuse(Refusal {
            limit,
            retry_after: millis(retry_after_ms),
            headers,
        }))
    }

    /// Charges tokens; a failure is logged, since the answer was already served.
    pub async fn charge(&self, user: &str, id: &str, tokens: u64, window: Window) {
        let mut connection = self.connection.clone();
        let mut invocation = self.charge.prepare_invoke();
        invocation
            .key(self.key(user, "tokens"))
            .arg(tokens)
            .arg(window_name(window))
            .arg(id);
        let result =
            tokio::time::timeout(TIMEOUT, invocation.invoke_async::<i64>(&mut connection)).await;
        if !matches!(result, Ok(Ok(_))) {
            tracing::warn!(user, "could not charge tokens to redis");
        }
    }

    /// Frees a concurrency slot; if this fails, the slot's lease expires it.
    pub async fn release(&self, user: &str, id: &str) {
        let mut connection = self.connection.clone();
        let command = redis::cmd("ZREM")
            .arg(self.key(user, "inflight"))
            .arg(id)
            .clone();
        let result =
            tokio::time::timeout(TIMEOUT, command.query_async::<i64>(&mut connection)).await;
        if !matches!(result, Ok(Ok(_))) {
            tracing::warn!(user, "could not release a concurrency slot in redis");
        }
    }
}

fn window_name(window: Window) -> &'static str {
    match window {
        Window::Fixed => "fixed",
        Window::Sliding => "sliding",
    }
}
