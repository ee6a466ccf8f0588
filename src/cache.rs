//! The response cache: exact answers kept per route that opts in, scoped to the caller, and
//! identical misses in flight coalesced into one upstream call.
//!
//! `key` names an entry (who may share it, the route, the endpoint and the `canonical` body),
//! `memory` keeps entries in this process by bytes, least recently used first out, and
//! `flight` makes identical misses wait for the first.

mod canonical;
mod flight;
mod key;
mod memory;

pub use memory::RouteUse;

pub use flight::Lead;
pub use key::{CacheKey, IGNORED_FIELDS, cache_key, identity};

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::SystemTime;

use bytes::Bytes;
use http::HeaderValue;
use tokio::time::Instant;

use crate::config::{CacheConfig, ModelName, ProviderId, RouteName};
use flight::{Flights, Joined};
use memory::MemoryStore;

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

/// The cache every route that opts in shares.
pub struct Cache {
    store: MemoryStore,
    flights: Flights,
    max_entry_bytes: usize,
    counts: Counts,
    /// Requests waiting on an identical miss now.
    waiting: tokio::sync::watch::Sender<usize>,
}

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
    pub entries: usize,
    pub bytes: usize,
    pub hits: u64,
    pub misses: u64,
    /// Hits over lookups, 0 before the first.
    pub hit_ratio: f64,
    pub evictions: u64,
}

impl Cache {
    pub fn new(config: &CacheConfig) -> Cache {
        Cache {
            store: MemoryStore::new(config.max_bytes),
            flights: Flights::default(),
            max_entry_bytes: config.max_entry_bytes,
            counts: Counts::default(),
            waiting: tokio::sync::watch::Sender::new(0),
        }
    }

    /// The answer kept under `key`, or the lead of its miss. An identical miss already in
    /// flight is waited on, and its answer served when it stored one; when it stored none
    /// (it failed, or its answer may not be kept) this request leads a flight of its own.
    pub async fn lookup(&self, key: CacheKey) -> Lookup {
        let mut waited = false;
        loop {
            if let Some(entry) = self.store.get(&key, Instant::now()) {
                self.counts.hits.fetch_add(1, Ordering::Relaxed);
                return Lookup::Hit {
                    entry,
                    coalesced: waited,
                };
            }
            let stored = || self.store.get(&key, Instant::now()).is_some();
            match self.flights.join(&key, stored) {
                None => continue,
                Some(Joined::Lead(lead)) => {
                    self.counts.misses.fetch_add(1, Ordering::Relaxed);
                    return Lookup::Miss(lead);
                }
                Some(Joined::Wait(mut done)) => {
                    waited = true;
                    let _waiting = Waiting::on(&self.waiting);
                    // Returns once the leader is gone, with or without an answer.
                    let _ = done.changed().await;
                }
            }
        }
    }

    /// The answer kept under `key`, without waiting on an identical miss in flight.
    pub fn peek(&self, key: &CacheKey) -> Option<Arc<Entry>> {
        let entry = self.store.get(key, Instant::now());
        let count = match entry {
            Some(_) => &self.counts.hits,
            None => &self.counts.misses,
        };
        count.fetch_add(1, Ordering::Relaxed);
        entry
    }

    /// Keeps `entry` under `key`; false when it is larger than `max_entry_bytes`.
    pub fn store(&self, key: CacheKey, entry: Entry) -> bool {
        if entry.body.len() > self.max_entry_bytes {
            return false;
        }
        let stored = self.store.put(key, Arc::new(entry));
        self.counts
            .evictions
            .fetch_add(stored.evicted as u64, Ordering::Relaxed);
        true
    }

    /// Drops the entries of `route` and of `key_id` (every entry when both are `None`);
    /// how many it dropped.
    pub fn purge(&self, route: Option<&str>, key_id: Option<&str>) -> usize {
        self.store.purge(|entry| {
            route.is_none_or(|r| entry.route.as_str() == r)
                && key_id.is_none_or(|k| entry.key_id.as_deref() == Some(k))
        })
    }

    /// Resolves once `ready` holds for the count of requests waiting on identical misses.
    pub async fn wait_waiting(&self, ready: impl FnMut(&usize) -> bool) {
        // The sender lives in `self`, so the channel cannot close while this waits.
        let _ = self.waiting.subscribe().wait_for(ready).await;
    }

    /// Each route's bytes kept and evictions since start.
    pub fn by_route(&self) -> Vec<(RouteName, RouteUse)> {
        self.store.by_route()
    }

    pub fn stats(&self) -> CacheStats {
        let (entries, bytes) = self.store.size();
        let hits = self.counts.hits.load(Ordering::Relaxed);
        let misses = self.counts.misses.load(Ordering::Relaxed);
        let lookups = hits + misses;
        CacheStats {
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
        }
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
