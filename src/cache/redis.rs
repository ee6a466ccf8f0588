//! Answers kept in Redis, shared by every instance that names the same Redis and prefix, and
//! the short lock through which identical misses on different instances make one upstream
//! call.
//!
//! An entry is a hash (`meta`, `body`) that expires with its route's `ttl`; its name is the
//! SHA-256 of the request's whole form, so two instances name the same request alike and no
//! request can be made to name another's. Each script below is one atomic step, so a lookup
//! that finds no entry and the lock it takes cannot be split by another instance's store.
//!
//! Redis is never a reason to fail a request: a command that errs or takes longer than
//! [`TIMEOUT`] leaves the request uncached, and Redis is skipped for [`DOWN_FOR`] after, so
//! a Redis that is down or slow costs one timeout, not one per request.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use http::HeaderValue;
use redis::aio::ConnectionManager;
use redis::{RedisResult, Script, Value};
use tokio::task::AbortHandle;
use tokio::time::Instant;

use super::{CacheKey, Entry};
use crate::config::{ModelName, ProviderId, RedisTarget, RouteName};

/// A Redis slower than this is treated as down for the request at hand.
const TIMEOUT: Duration = Duration::from_millis(500);
/// How long Redis is left alone after it failed a command.
const DOWN_FOR: Duration = Duration::from_secs(1);
/// How long a miss's lock lives without renewal: an instance that dies holding it stalls
/// the waiters on other instances for at most this long.
const LOCK_TTL: Duration = Duration::from_secs(10);
/// How long an admin command (a purge, the size) may walk the keys.
const ADMIN_TIMEOUT: Duration = Duration::from_secs(5);
/// How often a live lock is renewed.
const RENEW_EVERY: Duration = Duration::from_secs(3);

/// Finds the entry (`{1, meta, body, pttl}`); failing that, with `ARGV[3] == '1'`, takes the
/// miss's lock (`{2}`), or finds it held by another miss (`{3}`); `{0}` when only looking.
const LOOKUP: &str = r#"
local found = redis.call('HMGET', KEYS[1], 'meta', 'body')
if found[1] then return {1, found[1], found[2], redis.call('PTTL', KEYS[1])} end
if ARGV[3] ~= '1' then return {0} end
if redis.call('SET', KEYS[2], ARGV[1], 'NX', 'PX', ARGV[2]) then return {2} end
return {3}
"#;

/// Keeps the entry for `ARGV[4]` ms, and frees the lock when this miss still holds it.
const STORE: &str = r#"
redis.call('HSET', KEYS[1], 'meta', ARGV[2], 'body', ARGV[3])
redis.call('PEXPIRE', KEYS[1], ARGV[4])
if redis.call('GET', KEYS[2]) == ARGV[1] then redis.call('DEL', KEYS[2]) end
return 1
"#;

/// Frees the lock, or renews it for `ARGV[2]` ms, when this miss still holds it.
const RELEASE_OR_RENEW: &str = r#"
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
if ARGV[2] == '0' then return redis.call('DEL', KEYS[1]) end
return redis.call('PEXPIRE', KEYS[1], ARGV[2])
"#;

/// The Redis store; cheap to clone, every clone on one connection.
#[derive(Clone)]
pub struct RedisStore {
    inner: Arc<Inner>,
}

struct Inner {
    connection: ConnectionManager,
    /// Host and port, for logs: never the URL, which may carry a password.
    at: String,
    prefix: String,
    lookup: Script,
    store: Script,
    release_or_renew: Script,
    /// Until when Redis is skipped, after a failure.
    down_until: Mutex<Option<Instant>>,
    /// Tells one lock from another's: this process's, then a count.
    tokens: AtomicU64,
    process: u64,
}

/// What a lookup found.
pub enum Found {
    Entry(Arc<Entry>),
    /// No entry, and this miss holds the lock: it goes upstream.
    Lead(Lock),
    /// No entry, and another miss holds the lock.
    Held,
    /// Only looking, and no entry.
    Nothing,
}

/// Redis failed the command, took too long, or is being left alone after failing.
#[derive(Debug)]
pub struct Unavailable;

/// The cross-instance lock of one miss: renewed while held, freed when dropped unless the
/// answer's store already freed it.
pub struct Lock {
    store: RedisStore,
    digest: Arc<str>,
    token: String,
    renewal: Option<AbortHandle>,
    freed: bool,
}

/// What an entry carries besides its body, as it sits in Redis.
#[derive(serde::Serialize, serde::Deserialize)]
struct Meta {
    content_type: String,
    /// Milliseconds since the epoch.
    stored_at: u64,
    route: String,
    key_id: Option<String>,
    step: usize,
    provider: String,
    model: String,
}

impl RedisStore {
    /// Connects lazily: the first request makes the connection, and lost ones are remade.
    pub fn new(target: &RedisTarget, prefix: &str) -> Result<RedisStore, String> {
        let connection = target.lazy_connection(TIMEOUT)?;
        Ok(RedisStore {
            inner: Arc::new(Inner {
                connection,
                at: target.shown(),
                prefix: prefix.to_owned(),
                lookup: Script::new(LOOKUP),
                store: Script::new(STORE),
                release_or_renew: Script::new(RELEASE_OR_RENEW),
                down_until: Mutex::new(None),
                tokens: AtomicU64::new(0),
                process: fastrand::u64(..),
            }),
        })
    }

    /// The entry named `digest` (a key's); failing that, when `lead`, the miss's lock if it
    /// is free.
    pub async fn lookup(&self, digest: &Arc<str>, lead: bool) -> Result<Found, Unavailable> {
        let token = match lead {
            true => self.token(),
            false => String::new(),
        };
        let mut invocation = self.inner.lookup.prepare_invoke();
        invocation
            .key(self.entry_key(digest))
            .key(self.lock_key(digest))
            .arg(&token)
            .arg(LOCK_TTL.as_millis() as u64)
            .arg(if lead { "1" } else { "0" });
        let found: Vec<Value> = self
            .run(|mut c| {
                let invocation = &invocation;
                async move { invocation.invoke_async(&mut c).await }
            })
            .await?;
        match found.first() {
            Some(Value::Int(1)) => match entry_of(found) {
                Some(entry) => Ok(Found::Entry(Arc::new(entry))),
                // Written by another version, or damaged: served as a miss, and overwritten.
                None => Ok(Found::Nothing),
            },
            Some(Value::Int(2)) => Ok(Found::Lead(Lock::held(self.clone(), digest.clone(), token))),
            Some(Value::Int(3)) => Ok(Found::Held),
            _ => Ok(Found::Nothing),
        }
    }

    /// Keeps `entry` under `key` until it expires, freeing `lock` when it is this key's.
    pub async fn store(
        &self,
        key: &CacheKey,
        entry: &Entry,
        lock: Option<&mut Lock>,
    ) -> Result<(), Unavailable> {
        let ttl = entry.expires.saturating_duration_since(Instant::now());
        if ttl.is_zero() {
            return Ok(());
        }
        let meta = Meta {
            content_type: entry.content_type.to_str().unwrap_or("").to_owned(),
            stored_at: millis(entry.stored_at),
            route: entry.route.as_str().to_owned(),
            key_id: entry.key_id.clone(),
            step: entry.step,
            provider: entry.provider.as_str().to_owned(),
            model: entry.model.as_str().to_owned(),
        };
        let meta = serde_json::to_string(&meta).map_err(|_| Unavailable)?;
        // The lock's digest is the key's, already taken: SHA-256 costs a pass over the form.
        let digest = match &lock {
            Some(lock) => lock.digest.clone(),
            None => Arc::from(key.digest()),
        };
        let token = lock.as_ref().map_or("", |lock| lock.token.as_str());
        let mut invocation = self.inner.store.prepare_invoke();
        invocation
            .key(self.entry_key(&digest))
            .key(self.lock_key(&digest))
            .arg(token)
            .arg(meta)
            .arg(&entry.body[..])
            .arg(ttl.as_millis().max(1) as u64);
        self.run(|mut c| {
            let invocation = &invocation;
            async move { invocation.invoke_async::<i64>(&mut c).await }
        })
        .await?;
        if let Some(lock) = lock {
            lock.freed = true;
        }
        Ok(())
    }

    /// Drops the entries whose route and virtual key `matches` picks; how many it dropped.
    pub async fn purge(
        &self,
        matches: impl Fn(&str, Option<&str>) -> bool,
    ) -> Result<usize, Unavailable> {
        let mut purged = 0;
        for names in self.entry_names().await? {
            let mut pipe = redis::pipe();
            for name in &names {
                pipe.cmd("HGET").arg(name).arg("meta");
            }
            let mut c = self.inner.connection.clone();
            let metas: Vec<Option<Vec<u8>>> = admin(pipe.query_async(&mut c)).await?;
            let doomed: Vec<&String> = names
                .iter()
                .zip(metas)
                .filter(|(_, meta)| {
                    let meta = meta.as_deref().and_then(|m| serde_json::from_slice(m).ok());
                    // An entry whose meta cannot be read cannot be told apart: it goes.
                    meta.is_none_or(|m: Meta| matches(&m.route, m.key_id.as_deref()))
                })
                .map(|(name, _)| name)
                .collect();
            if doomed.is_empty() {
                continue;
            }
            let mut unlink = redis::cmd("UNLINK");
            unlink.arg(&doomed);
            let dropped: usize = admin(unlink.query_async(&mut c)).await?;
            purged += dropped;
        }
        Ok(purged)
    }

    /// How many entries the prefix holds, and the bytes of their bodies.
    pub async fn size(&self) -> Result<(usize, usize), Unavailable> {
        let (mut entries, mut bytes) = (0, 0);
        for names in self.entry_names().await? {
            let mut pipe = redis::pipe();
            for name in &names {
                pipe.cmd("HSTRLEN").arg(name).arg("body");
            }
            let mut c = self.inner.connection.clone();
            let lengths: Vec<usize> = admin(pipe.query_async(&mut c)).await?;
            entries += names.len();
            bytes += lengths.iter().sum::<usize>();
        }
        Ok((entries, bytes))
    }

    /// The names of every entry under the prefix, in the batches `SCAN` gives them.
    async fn entry_names(&self) -> Result<Vec<Vec<String>>, Unavailable> {
        let pattern = format!("{}:cache:{{*}}:entry", self.inner.prefix);
        let mut cursor = 0u64;
        let mut batches = Vec::new();
        loop {
            let mut scan = redis::cmd("SCAN");
            scan.arg(cursor)
                .arg("MATCH")
                .arg(&pattern)
                .arg("COUNT")
                .arg(1000);
            let mut c = self.inner.connection.clone();
            let (next, names): (u64, Vec<String>) = admin(scan.query_async(&mut c)).await?;
            if !names.is_empty() {
                batches.push(names);
            }
            if next == 0 {
                return Ok(batches);
            }
            cursor = next;
        }
    }

    /// Runs one command with a deadline, unless Redis failed less than [`DOWN_FOR`] ago.
    async fn run<T, F, Fut>(&self, command: F) -> Result<T, Unavailable>
    where
        F: FnOnce(ConnectionManager) -> Fut,
        Fut: Future<Output = RedisResult<T>>,
    {
        if self.is_down() {
            return Err(Unavailable);
        }
        let failure =
            match tokio::time::timeout(TIMEOUT, command(self.inner.connection.clone())).await {
                Ok(Ok(answer)) => return Ok(answer),
                Ok(Err(e)) => format!("{:?}", e.kind()),
                Err(_) => format!("no answer within {TIMEOUT:?}"),
            };
        self.mark_down(&failure);
        Err(Unavailable)
    }

    fn is_down(&self) -> bool {
        let mut down = lock(&self.inner.down_until);
        match *down {
            Some(until) if Instant::now() < until => true,
            Some(_) => {
                *down = None;
                false
            }
            None => false,
        }
    }

    fn mark_down(&self, failure: &str) {
        let mut down = lock(&self.inner.down_until);
        if down.is_none() {
            tracing::warn!(
                redis = %self.inner.at,
                failure,
                "the response cache's Redis failed: requests go uncached for {DOWN_FOR:?}, then it is tried again"
            );
        }
        *down = Some(Instant::now() + DOWN_FOR);
    }

    fn token(&self) -> String {
        let n = self.inner.tokens.fetch_add(1, Ordering::Relaxed);
        format!("{:016x}-{n}", self.inner.process)
    }

    /// The hash tag keeps an entry and its lock in one slot of a Redis cluster, as the
    /// scripts that touch both need.
    fn entry_key(&self, digest: &str) -> String {
        format!("{}:cache:{{{digest}}}:entry", self.inner.prefix)
    }

    fn lock_key(&self, digest: &str) -> String {
        format!("{}:cache:{{{digest}}}:lock", self.inner.prefix)
    }

    /// Frees `token`'s lock on `digest`, or renews it for `ttl`.
    async fn release_or_renew(&self, digest: &str, token: &str, ttl: Duration) -> bool {
        let mut invocation = self.inner.release_or_renew.prepare_invoke();
        invocation
            .key(self.lock_key(digest))
            .arg(token)
            .arg(ttl.as_millis() as u64);
        let done = self
            .run(|mut c| {
                let invocation = &invocation;
                async move { invocation.invoke_async::<i64>(&mut c).await }
            })
            .await;
        matches!(done, Ok(1))
    }
}

impl Lock {
    fn held(store: RedisStore, digest: Arc<str>, token: String) -> Lock {
        let renewal = {
            let (store, digest, token) = (store.clone(), digest.clone(), token.clone());
            tokio::spawn(async move {
                let mut every = tokio::time::interval(RENEW_EVERY);
                every.tick().await;
                loop {
                    every.tick().await;
                    if !store.release_or_renew(&digest, &token, LOCK_TTL).await {
                        return;
                    }
                }
            })
            .abort_handle()
        };
        Lock {
            store,
            digest,
            token,
            renewal: Some(renewal),
            freed: false,
        }
    }
}

impl Drop for Lock {
    fn drop(&mut self) {
        if let Some(renewal) = self.renewal.take() {
            renewal.abort();
        }
        if self.freed {
            return;
        }
        // The answer was not kept: the lock goes now, so a waiter elsewhere leads at once.
        let (store, digest, token) = (
            self.store.clone(),
            self.digest.clone(),
            std::mem::take(&mut self.token),
        );
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move {
                store
                    .release_or_renew(&digest, &token, Duration::ZERO)
                    .await
            });
        }
    }
}

/// An entry from what a lookup found: `1`, its `meta` and `body`, and its time to live in ms.
fn entry_of(found: Vec<Value>) -> Option<Entry> {
    let [
        _,
        Value::BulkString(meta),
        Value::BulkString(body),
        Value::Int(pttl),
    ] = <[Value; 4]>::try_from(found).ok()?
    else {
        return None;
    };
    let meta: Meta = serde_json::from_slice(&meta).ok()?;
    let left = Duration::from_millis(u64::try_from(pttl).ok()?);
    Some(Entry {
        body: Bytes::from(body),
        content_type: HeaderValue::try_from(meta.content_type).ok()?,
        stored_at: UNIX_EPOCH + Duration::from_millis(meta.stored_at),
        expires: Instant::now() + left,
        route: RouteName(Arc::from(meta.route)),
        key_id: meta.key_id,
        step: meta.step,
        provider: ProviderId(Arc::from(meta.provider)),
        model: ModelName(Arc::from(meta.model)),
    })
}

/// Runs an admin command: with more time than a request's, since it may walk every key,
/// and without marking Redis down, since no request waits on it.
async fn admin<T>(command: impl Future<Output = RedisResult<T>>) -> Result<T, Unavailable> {
    match tokio::time::timeout(ADMIN_TIMEOUT, command).await {
        Ok(Ok(answer)) => Ok(answer),
        _ => Err(Unavailable),
    }
}

fn millis(at: SystemTime) -> u64 {
    at.duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // Holds one `Option<Instant>`, whole before any panic can happen.
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}
