//! The response cache: exact answers kept per route that opts in, scoped to the caller, and
//! identical misses in flight coalesced into one upstream call.
//!
//! `key` names an entry (who may share it, the route, the endpoint and the `canonical` body).
//! `memory` keeps entries in this process by bytes, least recently used first out; `redis`
//! keeps them where every instance finds them, with a lock that coalesces misses across
//! instances. `flight` makes identical misses in this process wait for the first.

mod canonical;
mod flight;
mod key;
mod memory;
mod redis;

pub use memory::RouteUse;

pub use key::{CacheKey, IGNORED_FIELDS, cache_key, identity};

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use http::HeaderValue;
use prometheus_client::metrics::counter::Counter;
use tokio::time::Instant;

use crate::config::{CacheBackend, CacheConfig, ModelName, ProviderId, RouteName};
use flight::{Flights, Joined};
use memory::MemoryStore;
use redis::{Found, RedisStore};

/// How soon a miss waiting on another instance's looks again, at first; each look doubles
/// the pause, up to [`LONGEST_POLL`].
const FIRST_POLL: Duration = Duration::from_millis(5);
const LONGEST_POLL: Duration = Duration::from_millis(100);

/// A kept answer, as the client got it.
#[derive(Debug)]
pub struct Entry {
    pub body: Bytes,
    pub content_type: HeaderValue,
    /// When it was stored, for the `age` header.
    pub stored_at: SystemTime,
    pub expires: Instant,
    /// The route and the virtual key that stored it, so an operator can purge by either.
    pub route: RouteName,
    pub key_id: Option<String>,
    /// The chain step and deployment that made it.
    pub step: usize,
    pub provider: ProviderId,
    pub model: ModelName,
}

impl Entry {
    /// What it costs the store: its body, and a fixed share for the rest.
    fn size(&self) -> usize {
        self.body.len() + ENTRY_OVERHEAD
    }
}

/// An entry's bookkeeping besides its body (names, times, the map's own slot), roughly.
const ENTRY_OVERHEAD: usize = 256;

/// How a lookup ended.
pub enum Lookup {
    /// An answer kept earlier; `coalesced` when this request waited on another's miss.
    Hit { entry: Arc<Entry>, coalesced: bool },
    /// No answer: this request goes upstream, and identical ones wait until `Lead` drops.
    Miss(Lead),
}

/// The lead of a miss: identical misses in this process wait on it, and with Redis, those
/// of other instances wait on its lock there.
pub struct Lead {
    local: flight::Lead,
    remote: Option<redis::Lock>,
}

/// The cache every route that opts in shares.
pub struct Cache {
    backend: Backend,
    flights: Flights,
    max_entry_bytes: usize,
    counts: Counts,
    /// Requests waiting on an identical miss now, here or on another instance.
    waiting: tokio::sync::watch::Sender<usize>,
    /// Lookups and stores that went without Redis: it failed, was slow, or is left alone.
    backend_errors: Counter,
}

enum Backend {
    Memory(MemoryStore),
    Redis(RedisStore),
}

/// How a store went.
#[must_use]
pub enum Storing {
    /// Over `max_entry_bytes`: served, never kept.
    TooLarge,
    Kept,
    /// On its way to Redis.
    InFlight(tokio::task::JoinHandle<()>),
}

impl Storing {
    /// Whether the answer is kept, or on its way.
    pub fn kept(&self) -> bool {
        !matches!(self, Storing::TooLarge)
    }

    /// Resolves once the answer is where every instance finds it.
    pub async fn done(self) {
        if let Storing::InFlight(task) = self {
            let _ = task.await;
        }
    }
}

/// The store could not be reached (Redis failed or did not answer in time).
#[derive(Debug, thiserror::Error)]
#[error("the response cache's Redis did not answer")]
pub struct Unavailable;

/// What the cache has done since start, for the admin API.
#[derive(Default)]
struct Counts {
    hits: AtomicU64,
    misses: AtomicU64,
    evictions: AtomicU64,
}

/// The cache's size and record, as the admin API reports it.
#[derive(Debug, serde::Serialize)]
pub struct CacheStats {
    /// `memory` or `redis`.
    pub backend: &'static str,
    /// Entries kept, and their bytes: with Redis, every instance's (bodies only).
    pub entries: usize,
    pub bytes: usize,
    /// This instance's lookups since start.
    pub hits: u64,
    pub misses: u64,
    /// Hits over lookups, 0 before the first.
    pub hit_ratio: f64,
    /// Evictions to make room, in memory; Redis evicts by its own `maxmemory-policy`.
    pub evictions: u64,
}

impl Cache {
    /// The cache `config` describes; `backend_errors` counts what went without Redis. A
    /// Redis is connected to at its first use.
    pub fn new(config: &CacheConfig, backend_errors: Counter) -> Result<Cache, String> {
        let backend = match &config.backend {
            CacheBackend::Memory => Backend::Memory(MemoryStore::new(config.max_bytes)),
            CacheBackend::Redis { redis, key_prefix } => {
                Backend::Redis(RedisStore::new(redis, key_prefix)?)
            }
        };
        Ok(Cache {
            backend,
            flights: Flights::default(),
            max_entry_bytes: config.max_entry_bytes,
            counts: Counts::default(),
            waiting: tokio::sync::watch::Sender::new(0),
            backend_errors,
        })
    }

    /// The answer kept under `key`, or the lead of its miss. An identical miss already in
    /// flight is waited on, and its answer served when it has one; when it has none (it
    /// failed, or its answer may not be kept) this request leads a flight of its own.
    pub async fn lookup(&self, key: CacheKey) -> Lookup {
        let mut waited = false;
        loop {
            if let Some(entry) = self.in_memory(&key) {
                return self.hit(entry, waited);
            }
            let stored = || self.in_memory(&key).is_some();
            match self.flights.join(&key, stored) {
                None => continue,
                Some(Joined::Lead(local)) => match &self.backend {
                    Backend::Memory(_) => return self.miss(local, None),
                    Backend::Redis(redis) => return self.lead_in(redis, &key, local, waited).await,
                },
                Some(Joined::Wait(mut done)) => {
                    // A leader that has its answer and is still storing it: no wait at all.
                    let answer = done.borrow_and_update().clone();
                    if let Some(entry) = answer {
                        return self.hit(entry, waited);
                    }
                    waited = true;
                    let _waiting = Waiting::on(&self.waiting);
                    // Returns once the leader has an answer, or is gone without one.
                    let _ = done.changed().await;
                    let answer = done.borrow().clone();
                    if let Some(entry) = answer {
                        return self.hit(entry, true);
                    }
                }
            }
        }
    }

    /// Leads `key`'s flight in this process through Redis: the entry another instance kept,
    /// or the lock of the miss, waiting while another instance holds it. Without Redis, the
    /// request goes upstream as if uncached.
    async fn lead_in(
        &self,
        redis: &RedisStore,
        key: &CacheKey,
        local: flight::Lead,
        waited: bool,
    ) -> Lookup {
        let mut pause = FIRST_POLL;
        let mut waiting = None;
        let digest = Arc::from(key.digest());
        loop {
            match redis.lookup(&digest, true).await {
                Ok(Found::Entry(entry)) => {
                    local.publish(entry.clone());
                    return self.hit(entry, waited || waiting.is_some());
                }
                Ok(Found::Lead(lock)) => return self.miss(local, Some(lock)),
                Ok(Found::Held) => {
                    waiting.get_or_insert_with(|| Waiting::on(&self.waiting));
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(LONGEST_POLL);
                }
                // An entry this build cannot read: answered afresh, and written over.
                Ok(Found::Nothing) => return self.miss(local, None),
                Err(redis::Unavailable) => {
                    self.backend_errors.inc();
                    return self.miss(local, None);
                }
            }
        }
    }

    fn hit(&self, entry: Arc<Entry>, coalesced: bool) -> Lookup {
        self.counts.hits.fetch_add(1, Ordering::Relaxed);
        Lookup::Hit { entry, coalesced }
    }

    fn miss(&self, local: flight::Lead, remote: Option<redis::Lock>) -> Lookup {
        self.counts.misses.fetch_add(1, Ordering::Relaxed);
        Lookup::Miss(Lead { local, remote })
    }

    fn in_memory(&self, key: &CacheKey) -> Option<Arc<Entry>> {
        match &self.backend {
            Backend::Memory(store) => store.get(key, Instant::now()),
            Backend::Redis(_) => None,
        }
    }

    /// The answer kept under `key`, without waiting on an identical miss in flight.
    pub async fn peek(&self, key: &CacheKey) -> Option<Arc<Entry>> {
        let entry = match &self.backend {
            Backend::Memory(store) => store.get(key, Instant::now()),
            Backend::Redis(redis) => match redis.lookup(&Arc::from(key.digest()), false).await {
                Ok(Found::Entry(entry)) => Some(entry),
                Ok(_) => None,
                Err(redis::Unavailable) => {
                    self.backend_errors.inc();
                    None
                }
            },
        };
        let count = match entry {
            Some(_) => &self.counts.hits,
            None => &self.counts.misses,
        };
        count.fetch_add(1, Ordering::Relaxed);
        entry
    }

    /// Keeps `entry` under `key`, handing it first to the misses waiting on `lead`; nothing
    /// when it is larger than `max_entry_bytes`. With Redis, the store runs on a task of its
    /// own, which holds the lead until it is done, so no identical miss elsewhere goes
    /// upstream meanwhile; a caller may wait for it, and nothing is lost if it does not.
    pub fn store(&self, key: CacheKey, entry: Entry, lead: Option<Lead>) -> Storing {
        if entry.body.len() > self.max_entry_bytes {
            return Storing::TooLarge;
        }
        let entry = Arc::new(entry);
        if let Some(lead) = &lead {
            lead.local.publish(entry.clone());
        }
        match &self.backend {
            Backend::Memory(store) => {
                let stored = store.put(key, entry);
                self.counts
                    .evictions
                    .fetch_add(stored.evicted as u64, Ordering::Relaxed);
                Storing::Kept
            }
            Backend::Redis(redis) => {
                let (redis, errors) = (redis.clone(), self.backend_errors.clone());
                Storing::InFlight(tokio::spawn(async move {
                    let mut lead = lead;
                    let lock = lead.as_mut().and_then(|lead| lead.remote.as_mut());
                    if redis.store(&key, &entry, lock).await.is_err() {
                        errors.inc();
                    }
                }))
            }
        }
    }

    /// Drops the entries of `route` and of `key_id` (every entry when both are `None`);
    /// how many it dropped.
    pub async fn purge(
        &self,
        route: Option<&str>,
        key_id: Option<&str>,
    ) -> Result<usize, Unavailable> {
        let matches = |entry_route: &str, entry_key: Option<&str>| {
            route.is_none_or(|r| entry_route == r) && key_id.is_none_or(|k| entry_key == Some(k))
        };
        match &self.backend {
            Backend::Memory(store) => {
                Ok(store.purge(|entry| matches(entry.route.as_str(), entry.key_id.as_deref())))
            }
            Backend::Redis(redis) => redis.purge(matches).await.map_err(|_| Unavailable),
        }
    }

    /// Resolves once `ready` holds for the count of requests waiting on identical misses.
    pub async fn wait_waiting(&self, ready: impl FnMut(&usize) -> bool) {
        // The sender lives in `self`, so the channel cannot close while this waits.
        let _ = self.waiting.subscribe().wait_for(ready).await;
    }

    /// Each route's bytes kept and evictions since start, in memory; Redis keeps its own.
    pub fn by_route(&self) -> Vec<(RouteName, RouteUse)> {
        match &self.backend {
            Backend::Memory(store) => store.by_route(),
            Backend::Redis(_) => Vec::new(),
        }
    }

    pub async fn stats(&self) -> Result<CacheStats, Unavailable> {
        let (backend, (entries, bytes)) = match &self.backend {
            Backend::Memory(store) => ("memory", store.size()),
            Backend::Redis(redis) => ("redis", redis.size().await.map_err(|_| Unavailable)?),
        };
        let hits = self.counts.hits.load(Ordering::Relaxed);
        let misses = self.counts.misses.load(Ordering::Relaxed);
        let lookups = hits + misses;
        Ok(CacheStats {
            backend,
            entries,
            bytes,
            hits,
            misses,
            hit_ratio: if lookups == 0 {
                0.0
            } else {
                hits as f64 / lookups as f64
            },
            evictions: self.counts.evictions.load(Ordering::Relaxed),
        })
    }
}

/// One request counted as waiting, for as long as it is held (a waiter dropped while it
/// waits stops counting too).
struct Waiting<'a>(&'a tokio::sync::watch::Sender<usize>);

impl<'a> Waiting<'a> {
    fn on(count: &'a tokio::sync::watch::Sender<usize>) -> Waiting<'a> {
        count.send_modify(|n| *n += 1);
        Waiting(count)
    }
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.send_modify(|n| *n -= 1);
    }
}

#[cfg(test)]
mod tests;
