//! The shared limiter: one Lua script per admission, on the Redis server's clock.
//!
//! Every instance runs the same script against the same keys, and Redis runs scripts one at
//! a time, so the check and the count are one atomic step across the whole cluster.
//!
//! A connection can break between a command and its reply. Commands found on a broken
//! connection are sent once more on the new one, which is safe because each is idempotent
//! by request id: an admission leaves a marker the script honours, a renewal and a release
//! name the request's slot.

mod scripts;

use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use redis::aio::ConnectionManager;
use redis::{RedisError, RedisResult, Script};
use tokio::sync::watch;
use tokio::task::AbortHandle;
use tokio::time::{Instant, MissedTickBehavior};

use super::{Decision, Lease, LimitKind, Permit, Quota, RateHeaders, Refusal, WindowState};
use crate::config::{RedisTarget, Window};
use scripts::{ADMIT, CHARGE, RENEW};

/// A Redis that takes longer than this is treated as down, so requests never hang on it.
const TIMEOUT: Duration = Duration::from_millis(500);
/// How long an admission's marker lives: far longer than its one retry can take.
const MARKER_TTL: Duration = Duration::from_secs(10);
/// The most releases kept for replay while Redis is away; past it, the slots' leases free
/// them, as before there was a replay.
const MAX_PENDING_RELEASES: usize = 100_000;

/// Releases that failed while Redis was away, kept to be sent again once it answers: a
/// release is idempotent (it removes the request's own slot), so sending one twice is safe.
struct PendingReleases {
    slots: Mutex<Vec<(Arc<str>, Arc<str>)>>,
    /// How many are kept, read without the lock on every admission.
    count: AtomicUsize,
    /// The same count, for whoever waits on a change to it (a test, say). Set only where
    /// the list changes, after a failed release or during a replay, never on an admission.
    changes: watch::Sender<usize>,
}

impl Default for PendingReleases {
    fn default() -> PendingReleases {
        PendingReleases {
            slots: Mutex::default(),
            count: AtomicUsize::new(0),
            changes: watch::Sender::new(0),
        }
    }
}

impl PendingReleases {
    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<(Arc<str>, Arc<str>)>> {
        // A poisoned lock only means a panic between two pushes; the list is still whole.
        self.slots.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Sets the count under the list's lock, so the watch sees the counts in their order.
    fn counted(&self, count: usize) {
        self.count.store(count, Ordering::Relaxed);
        self.changes.send_if_modified(|shown| {
            let changed = *shown != count;
            *shown = count;
            changed
        });
    }

    fn keep(&self, slots: impl IntoIterator<Item = (Arc<str>, Arc<str>)>) {
        let mut kept = self.lock();
        for slot in slots {
            if kept.len() >= MAX_PENDING_RELEASES {
                break;
            }
            kept.push(slot);
        }
        self.counted(kept.len());
    }

    /// Empties the list for a replay: the count shows 0 until a failed replay keeps them again.
    fn take(&self) -> Vec<(Arc<str>, Arc<str>)> {
        let mut kept = self.lock();
        self.counted(0);
        std::mem::take(&mut *kept)
    }
}

/// Counters in Redis, shared by every instance that names the same Redis and prefix.
#[derive(Clone)]
pub struct RedisLimiter {
    connection: ConnectionManager,
    /// Host and port, for logs: never the URL, which may carry a password.
    at: Arc<str>,
    prefix: Arc<str>,
    /// How long a slot is held without a renewal.
    lease: Duration,
    admit: Arc<Script>,
    renew: Arc<Script>,
    charge: Arc<Script>,
    pending: Arc<PendingReleases>,
}

/// Redis did not answer in time, or answered with an error.
#[derive(Debug, thiserror::Error)]
pub enum RedisFailure {
    #[error("redis: {0}")]
    Redis(#[from] RedisError),
    #[error("redis did not answer within {TIMEOUT:?}")]
    Timeout,
}

impl RedisFailure {
    /// What went wrong, in words that can never carry the URL or its password.
    pub fn class(&self) -> &'static str {
        match self {
            RedisFailure::Timeout => "no answer in time",
            RedisFailure::Redis(e) if e.is_timeout() => "no answer in time",
            RedisFailure::Redis(e) if e.is_connection_refusal() => "connection refused",
            RedisFailure::Redis(e) if e.kind() == redis::ErrorKind::AuthenticationFailed => {
                "authentication failed: check the password"
            }
            // A handshake refused: the words are rustls's, which never hold the URL.
            RedisFailure::Redis(e) if e.to_string().contains("certificate") => {
                "TLS certificate refused: check rediss:// host name and redis_ca_file"
            }
            RedisFailure::Redis(e) if e.is_connection_dropped() => "connection lost",
            RedisFailure::Redis(e) if e.is_io_error() => "connection failed",
            RedisFailure::Redis(_) => "redis answered with an error",
        }
    }

    /// Whether Redis may have run the command: anything but a refused connection.
    pub fn may_have_run(&self) -> bool {
        !matches!(self, RedisFailure::Redis(e) if e.is_connection_refusal())
    }

    /// Whether the command met a connection that had broken, which the connection manager
    /// is now replacing: worth one more try. A refused connection means Redis is down.
    fn found_broken_connection(&self) -> bool {
        match self {
            RedisFailure::Redis(e) => e.is_unrecoverable_error() && !e.is_connection_refusal(),
            RedisFailure::Timeout => false,
        }
    }
}

impl RedisLimiter {
    /// Connects lazily: the first request makes the connection, and lost ones are remade.
    pub fn new(
        target: &RedisTarget,
        prefix: &str,
        lease: Duration,
    ) -> Result<RedisLimiter, String> {
        Ok(RedisLimiter {
            connection: target.lazy_connection(TIMEOUT)?,
            at: Arc::from(target.shown()),
            prefix: Arc::from(prefix),
            lease,
            admit: Arc::new(Script::new(ADMIT)),
            renew: Arc::new(Script::new(RENEW)),
            charge: Arc::new(Script::new(CHARGE)),
            pending: Arc::default(),
        })
    }

    /// Host and port of the Redis, for logs.
    pub fn at(&self) -> &str {
        &self.at
    }

    /// The user's keys; the hash tag keeps them in one slot of a Redis cluster.
    pub(crate) fn key(&self, user: &str, what: &str) -> String {
        format!("{}:{{{user}}}:{what}", self.prefix)
    }

    /// Runs one command with a deadline, and once more if it found the connection broken.
    /// Only for commands that are safe to repeat.
    pub(crate) async fn run<T, F, Fut>(&self, command: F) -> Result<T, RedisFailure>
    where
        F: Fn(ConnectionManager) -> Fut,
        Fut: Future<Output = RedisResult<T>>,
    {
        let once = || async {
            match tokio::time::timeout(TIMEOUT, command(self.connection.clone())).await {
                Ok(result) => result.map_err(RedisFailure::from),
                Err(_) => Err(RedisFailure::Timeout),
            }
        };
        match once().await {
            Err(failure) if failure.found_broken_connection() => once().await,
            result => result,
        }
    }

    /// Whether Redis answers a PING, through the connection admissions use, so a broken
    /// connection is replaced before a request meets it.
    pub async fn ping(&self) -> Result<(), RedisFailure> {
        let ping = redis::cmd("PING");
        self.run(|mut c| {
            let ping = &ping;
            async move { ping.query_async::<String>(&mut c).await }
        })
        .await?;
        self.replay_releases().await;
        Ok(())
    }

    /// Releases kept because they failed while Redis was away, not yet sent again.
    pub fn pending_releases(&self) -> usize {
        self.pending.count.load(Ordering::Relaxed)
    }

    /// [`RedisLimiter::pending_releases`] as it changes.
    pub fn pending_release_changes(&self) -> watch::Receiver<usize> {
        self.pending.changes.subscribe()
    }

    /// Sends the kept releases again, in one round trip; those that fail again are kept.
    async fn replay_releases(&self) {
        if self.pending_releases() == 0 {
            return;
        }
        let slots = self.pending.take();
        let mut pipe = redis::pipe();
        for (user, id) in &slots {
            pipe.cmd("ZREM")
                .arg(self.key(user, "inflight"))
                .arg(&**id)
                .ignore();
        }
        let sent = self
            .run(|mut c| {
                let pipe = &pipe;
                async move { pipe.query_async::<()>(&mut c).await }
            })
            .await;
        match sent {
            Ok(()) => tracing::info!(
                releases = slots.len(),
                "redis answers again: released the slots of requests that ended while it was away"
            ),
            Err(_) => self.pending.keep(slots),
        }
    }

    /// Admits or refuses, in one script run. Run again for the same `id`, it returns the
    /// verdict already given instead of counting the request twice.
    pub async fn admit(
        &self,
        user: &Arc<str>,
        quota: Quota,
        id: &str,
    ) -> Result<Decision, RedisFailure> {
        // Slots freed while Redis was away go back before anyone is counted against them.
        self.replay_releases().await;
        let mut invocation = self.admit.prepare_invoke();
        invocation
            .key(self.key(user, "requests"))
            .key(self.key(user, "tokens"))
            .key(self.key(user, "inflight"))
            .key(self.key(user, &format!("admitted:{id}")))
            .arg(quota.requests_per_minute.unwrap_or(0))
            .arg(quota.tokens_per_minute.unwrap_or(0))
            .arg(quota.max_concurrent.unwrap_or(0))
            .arg(window_name(quota.window))
            .arg(id)
            .arg(millis_of(self.lease))
            .arg(millis_of(MARKER_TTL));
        let answer: (i64, String, i64, i64, i64, i64, i64) = self
            .run(|mut c| {
                let invocation = &invocation;
                async move { invocation.invoke_async(&mut c).await }
            })
            .await?;
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
            let id: Arc<str> = Arc::from(id);
            let renewal = quota
                .max_concurrent
                .map(|_| self.renew_while_held(user, &id));
            return Ok(Decision::Admit(Permit {
                headers,
                lease: Lease::Redis {
                    limiter: self.clone(),
                    user: user.clone(),
                    quota,
                    id,
                    renewal,
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

    /// Renews an admitted request's slot every third of its lease until the permit aborts
    /// the task, so a stream of any length keeps its slot and a crashed instance soon loses it.
    fn renew_while_held(&self, user: &Arc<str>, id: &Arc<str>) -> AbortHandle {
        let (limiter, owner, request) = (self.clone(), user.clone(), id.clone());
        let every = self.lease / 3;
        tokio::spawn(async move {
            let mut ticks = tokio::time::interval_at(Instant::now() + every, every);
            ticks.set_missed_tick_behavior(MissedTickBehavior::Delay);
            loop {
                ticks.tick().await;
                match limiter.renew(&owner, &request).await {
                    Ok(true) => {}
                    Ok(false) => {
                        // Expired while Redis was out of reach; its place may be taken.
                        tracing::warn!(user = %owner, "a concurrency slot expired before its request ended");
                        return;
                    }
                    Err(e) => {
                        tracing::warn!(user = %owner, error = e.class(), "could not renew a concurrency slot");
                    }
                }
            }
        })
        .abort_handle()
    }

    /// Extends a slot's lease; `false` when the slot is no longer held.
    async fn renew(&self, user: &str, id: &str) -> Result<bool, RedisFailure> {
        let mut invocation = self.renew.prepare_invoke();
        invocation
            .key(self.key(user, "inflight"))
            .arg(id)
            .arg(millis_of(self.lease));
        let held: i64 = self
            .run(|mut c| {
                let invocation = &invocation;
                async move { invocation.invoke_async(&mut c).await }
            })
            .await?;
        Ok(held == 1)
    }

    /// Charges tokens; a failure is logged, since the answer was already served. Not retried:
    /// a fixed window's charge is an increment, and its reply may be what was lost.
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

    /// Frees request `id`'s concurrency slot, if it holds one; if this fails, the release
    /// is kept and sent again once Redis answers (and the slot's lease expires it meanwhile).
    pub async fn release(&self, user: &str, id: &str) {
        let command = redis::cmd("ZREM")
            .arg(self.key(user, "inflight"))
            .arg(id)
            .clone();
        let result = self
            .run(|mut c| {
                let command = &command;
                async move { command.query_async::<i64>(&mut c).await }
            })
            .await;
        if let Err(e) = result {
            tracing::warn!(
                user,
                error = e.class(),
                "could not release a concurrency slot in redis: kept to send again"
            );
            self.pending.keep([(Arc::from(user), Arc::from(id))]);
        }
    }
}

fn millis_of(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

fn window_name(window: Window) -> &'static str {
    match window {
        Window::Fixed => "fixed",
        Window::Sliding => "sliding",
    }
}
