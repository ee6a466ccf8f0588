//! Exact per-user limits: requests and tokens per minute, and concurrent requests.
//!
//! Every admission is one atomic step that checks every limit and then counts the request:
//! a per-user lock in memory, or one Lua script on the Redis server's clock. Never a read
//! followed by a separate write, which is how limiters lose increments under load.

mod memory;
mod redis;

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use foldhash::HashMap;
use tokio::sync::watch;
use tokio::task::AbortHandle;

use crate::auth::Caller;
use crate::config::{Config, FailMode, LimitBackend, Role, Window};
use crate::telemetry::metrics::Metrics;

pub use memory::MemoryLimiter;
pub use redis::{RedisFailure, RedisLimiter};

/// The limits that apply to one caller: its role's, with its key's overrides.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Quota {
    pub requests_per_minute: Option<u64>,
    pub tokens_per_minute: Option<u64>,
    pub max_concurrent: Option<u64>,
    pub window: Window,
}

impl Quota {
    fn is_unlimited(&self) -> bool {
        self.requests_per_minute.is_none()
            && self.tokens_per_minute.is_none()
            && self.max_concurrent.is_none()
    }
}

/// Which limit refused a request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LimitKind {
    /// Requests per minute.
    Requests,
    /// Tokens per minute.
    Tokens,
    /// Concurrent requests.
    Concurrency,
}

impl LimitKind {
    /// The name used in error messages and logs.
    pub fn as_str(self) -> &'static str {
        match self {
            LimitKind::Requests => "requests per minute",
            LimitKind::Tokens => "tokens per minute",
            LimitKind::Concurrency => "concurrent requests",
        }
    }
}

/// Where one window stands, for the `x-ratelimit-*` headers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WindowState {
    pub limit: u64,
    pub remaining: u64,
    pub reset: Duration,
}

/// The `x-ratelimit-*-requests` and `-tokens` headers' content.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RateHeaders {
    pub requests: Option<WindowState>,
    pub tokens: Option<WindowState>,
}

impl RateHeaders {
    /// The headers as name/value pairs, named as OpenAI names them.
    pub fn pairs(&self) -> Vec<(&'static str, String)> {
        let mut pairs = Vec::new();
        if let Some(r) = self.requests {
            pairs.push(("x-ratelimit-limit-requests", r.limit.to_string()));
            pairs.push(("x-ratelimit-remaining-requests", r.remaining.to_string()));
            pairs.push(("x-ratelimit-reset-requests", format_reset(r.reset)));
        }
        if let Some(t) = self.tokens {
            pairs.push(("x-ratelimit-limit-tokens", t.limit.to_string()));
            pairs.push(("x-ratelimit-remaining-tokens", t.remaining.to_string()));
            pairs.push(("x-ratelimit-reset-tokens", format_reset(t.reset)));
        }
        pairs
    }
}

/// A reset time as OpenAI writes it: `250ms`, `12s`, `1m0s`.
pub fn format_reset(reset: Duration) -> String {
    let millis = reset.as_millis();
    if millis < 1_000 {
        format!("{millis}ms")
    } else {
        let seconds = reset.as_secs() + u64::from(reset.subsec_millis() > 0);
        if seconds < 60 {
            format!("{seconds}s")
        } else {
            format!("{}m{}s", seconds / 60, seconds % 60)
        }
    }
}

/// A refused request's story.
#[derive(Clone, Copy, Debug)]
pub struct Refusal {
    pub limit: LimitKind,
    pub retry_after: Duration,
    pub headers: RateHeaders,
}

/// What releases a permit's concurrency slot and charges its tokens.
enum Lease {
    None,
    Memory {
        limiter: MemoryLimiter,
        user: Arc<str>,
        quota: Quota,
    },
    Redis {
        limiter: RedisLimiter,
        user: Arc<str>,
        quota: Quota,
        id: Arc<str>,
        /// Renews the request's concurrency slot, when the quota limits concurrency.
        renewal: Option<AbortHandle>,
    },
}

/// An admitted request. Dropping it releases its concurrency slot, however the request
/// ended: answer, error, client disconnect or panic.
pub struct Permit {
    pub headers: RateHeaders,
    lease: Lease,
}

impl Permit {
    /// A permit that limits nothing.
    pub fn unlimited() -> Permit {
        Permit {
            headers: RateHeaders::default(),
            lease: Lease::None,
        }
    }

    /// Charges the tokens an answer used against the caller's tokens-per-minute.
    pub fn charge_tokens(&self, tokens: u64) {
        if tokens == 0 {
            return;
        }
        match &self.lease {
            Lease::None => {}
            Lease::Memory {
                limiter,
                user,
                quota,
            } => {
                if quota.tokens_per_minute.is_some() {
                    limiter.charge(user, tokens, quota.window);
                }
            }
            Lease::Redis {
                limiter,
                user,
                quota,
                id,
                ..
            } => {
                if quota.tokens_per_minute.is_some() {
                    let (limiter, user, id, window) =
                        (limiter.clone(), user.clone(), id.clone(), quota.window);
                    tokio::spawn(async move { limiter.charge(&user, &id, tokens, window).await });
                }
            }
        }
    }
}

impl Drop for Permit {
    fn drop(&mut self) {
        match &self.lease {
            Lease::None => {}
            Lease::Memory {
                limiter,
                user,
                quota,
            } => {
                if quota.max_concurrent.is_some() {
                    limiter.release(user);
                }
            }
            Lease::Redis {
                limiter,
                user,
                id,
                renewal: Some(renewal),
                ..
            } => {
                renewal.abort();
                // Without a runtime (process exit) the lease simply expires in Redis.
                if let Ok(runtime) = tokio::runtime::Handle::try_current() {
                    let (limiter, user, id) = (limiter.clone(), user.clone(), id.clone());
                    runtime.spawn(async move { limiter.release(&user, &id).await });
                }
            }
            Lease::Redis { renewal: None, .. } => {}
        }
    }
}

/// What the limiter decided.
pub enum Decision {
    Admit(Permit),
    Refuse(Refusal),
}

/// The limit backend could not be asked, and the config says to fail closed.
#[derive(Debug, thiserror::Error)]
#[error("the rate-limit backend is unavailable")]
pub struct BackendUnavailable;

#[derive(Clone)]
enum Backend {
    Memory(MemoryLimiter),
    Redis {
        shared: RedisLimiter,
        /// Counts what this instance admits while Redis is unreachable and limits fail
        /// open, so an outage costs exactness across instances, not every limit.
        local: MemoryLimiter,
    },
}

/// What the last look at the backend found, by a health check or an admission. A watch, so
/// whoever cares (a test, say) can wait for the next change instead of asking again.
struct BackendHealth {
    /// Why it is unhealthy; `None` while it answers.
    problem: watch::Sender<Option<&'static str>>,
}

impl Default for BackendHealth {
    fn default() -> BackendHealth {
        BackendHealth {
            problem: watch::Sender::new(None),
        }
    }
}

impl BackendHealth {
    /// Called on every Redis admission: one brief write lock, as the plain lock it replaced
    /// took, with no allocation; waiters are woken only when the finding changes.
    fn set(&self, problem: Option<&'static str>) {
        self.problem.send_if_modified(|current| {
            let changed = *current != problem;
            *current = problem;
            changed
        });
    }

    fn problem(&self) -> Option<&'static str> {
        *self.problem.borrow()
    }
}

/// Every caller's limits, and the backend that counts them.
pub struct Limits {
    roles: HashMap<String, Role>,
    backend: Backend,
    fail_mode: FailMode,
    health: Arc<BackendHealth>,
    metrics: Arc<Metrics>,
}

impl Limits {
    /// Builds the limits of a config; Redis is connected lazily and reconnects by itself.
    pub fn new(config: &Config, metrics: Arc<Metrics>) -> Result<Limits, String> {
        let backend = match config.limits.backend {
            LimitBackend::Memory => Backend::Memory(MemoryLimiter::default()),
            LimitBackend::Redis => Backend::Redis {
                shared: RedisLimiter::new(
                    &config.limits.redis,
                    &config.limits.key_prefix,
                    config.limits.lease,
                )?,
                local: MemoryLimiter::default(),
            },
        };
        Ok(Limits {
            roles: roles_of(config),
            backend,
            fail_mode: config.limits.on_backend_error,
            health: Arc::default(),
            metrics,
        })
    }

    /// The limits of a reloaded `config` on this one's backend: the roles and the fail mode
    /// are the new config's; every count and concurrency slot is kept, so a reload neither
    /// forgives nor forgets a caller's requests. The backend itself changes only at a restart.
    pub fn reconfigured(&self, config: &Config) -> Limits {
        Limits {
            roles: roles_of(config),
            backend: self.backend.clone(),
            fail_mode: config.limits.on_backend_error,
            health: self.health.clone(),
            metrics: self.metrics.clone(),
        }
    }

    /// The caller's quota: its role's limits, with its key's overrides on top.
    pub fn quota(&self, caller: &Caller) -> Quota {
        let role = self.roles.get(&*caller.role);
        let overrides = caller.overrides();
        Quota {
            requests_per_minute: overrides
                .requests_per_minute
                .or(role.and_then(|r| r.requests_per_minute)),
            tokens_per_minute: overrides
                .tokens_per_minute
                .or(role.and_then(|r| r.tokens_per_minute)),
            max_concurrent: overrides
                .max_concurrent
                .or(role.and_then(|r| r.max_concurrent)),
            window: role.map(|r| r.window).unwrap_or_default(),
        }
    }

    /// Admits or refuses one request of `caller`, counting it if admitted.
    pub async fn admit(
        &self,
        caller: &Caller,
        request_id: &str,
    ) -> Result<Decision, BackendUnavailable> {
        let quota = self.quota(caller);
        if quota.is_unlimited() {
            return Ok(Decision::Admit(Permit::unlimited()));
        }
        let decision = match &self.backend {
            Backend::Memory(limiter) => limiter.admit(&caller.user, quota),
            Backend::Redis { shared, local } => {
                // Boxed: the round trip's future is a kilobyte, and inline it would be part
                // of every request's future, moved by value, Redis or not.
                match Box::pin(shared.admit(&caller.user, quota, request_id)).await {
                    Ok(decision) => {
                        self.health.set(None);
                        decision
                    }
                    Err(error) => {
                        self.health.set(Some(error.class()));
                        self.metrics.limit_backend_errors.inc();
                        tracing::warn!(
                            redis = shared.at(),
                            error = error.class(),
                            "rate-limit backend unavailable"
                        );
                        if quota.max_concurrent.is_some() && error.may_have_run() {
                            // The script may have run and only its reply been lost.
                            let (shared, user, id) =
                                (shared.clone(), caller.user.clone(), request_id.to_owned());
                            tokio::spawn(async move { shared.release(&user, &id).await });
                        }
                        match self.fail_mode {
                            FailMode::Open => local.admit(&caller.user, quota),
                            FailMode::Closed => return Err(BackendUnavailable),
                        }
                    }
                }
            }
        };
        if matches!(decision, Decision::Refuse(_)) {
            self.metrics.ratelimited.inc();
        }
        Ok(decision)
    }

    /// Asks the backend whether it answers, and keeps what it says for [`Limits::healthy`].
    /// The future holds no borrow, so a health check can run it without the gateway's state.
    pub fn probe(&self) -> impl Future<Output = ()> + Send + 'static {
        let shared = match &self.backend {
            Backend::Memory(_) => None,
            Backend::Redis { shared, .. } => Some(shared.clone()),
        };
        let health = self.health.clone();
        async move {
            if let Some(shared) = shared {
                health.set(shared.ping().await.err().map(|e| e.class()));
            }
        }
    }

    /// Whether the backend answered the last time it was asked.
    pub fn healthy(&self) -> bool {
        self.health.problem().is_none()
    }

    /// The backend's health as it changes: `None` while it answers, else why not.
    pub fn health_changes(&self) -> watch::Receiver<Option<&'static str>> {
        self.health.problem.subscribe()
    }

    /// Concurrency slots whose release failed while the backend was away, kept to be sent
    /// again once it answers.
    pub fn pending_releases(&self) -> usize {
        match &self.backend {
            Backend::Memory(_) => 0,
            Backend::Redis { shared, .. } => shared.pending_releases(),
        }
    }

    /// [`Limits::pending_releases`] as it changes. In memory nothing is ever kept: the
    /// channel is closed at 0.
    pub fn pending_release_changes(&self) -> watch::Receiver<usize> {
        match &self.backend {
            Backend::Memory(_) => watch::channel(0).1,
            Backend::Redis { shared, .. } => shared.pending_release_changes(),
        }
    }

    /// Why the backend is unhealthy, in words safe to show anyone.
    pub fn problem(&self) -> Option<&'static str> {
        self.health.problem()
    }

    /// What happens to requests while the backend is down.
    pub fn fail_mode(&self) -> FailMode {
        self.fail_mode
    }

    /// The shared limiter's Redis, when limits live there: spend budgets use it too.
    pub fn redis(&self) -> Option<RedisLimiter> {
        match &self.backend {
            Backend::Memory(_) => None,
            Backend::Redis { shared, .. } => Some(shared.clone()),
        }
    }

    /// The backend's name, for `/readyz`.
    pub fn backend_name(&self) -> &'static str {
        match self.backend {
            Backend::Memory(_) => "memory",
            Backend::Redis { .. } => "redis",
        }
    }
}

fn roles_of(config: &Config) -> HashMap<String, Role> {
    config
        .roles
        .iter()
        .map(|r| (r.name.clone(), r.clone()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resets_are_written_as_openai_writes_them() {
        assert_eq!(format_reset(Duration::from_millis(250)), "250ms");
        assert_eq!(format_reset(Duration::from_millis(11_200)), "12s");
        assert_eq!(format_reset(Duration::from_secs(60)), "1m0s");
        assert_eq!(format_reset(Duration::from_secs(75)), "1m15s");
    }
}
