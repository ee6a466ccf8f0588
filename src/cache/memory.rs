//! Answers kept in this process, the least recently used evicted first, counted in bytes:
//! each answer's, and its key's (the request's canonical form).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use hashlink::LruCache;
use tokio::time::Instant;

use super::{CacheKey, Entry};
use crate::config::RouteName;

/// The in-memory store: bounded by the bytes of the answers it keeps.
pub struct MemoryStore {
    inner: Mutex<Inner>,
    max_bytes: usize,
}

struct Inner {
    entries: LruCache<CacheKey, Arc<Entry>>,
    bytes: usize,
    /// Each route's bytes kept, and evictions since start.
    routes: HashMap<RouteName, RouteUse>,
}

/// One route's share of the store.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RouteUse {
    pub bytes: usize,
    pub evictions: u64,
}

/// What storing an answer did.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Stored {
    /// Entries evicted to make room.
    pub evicted: usize,
}

impl MemoryStore {
    pub fn new(max_bytes: usize) -> MemoryStore {
        MemoryStore {
            inner: Mutex::new(Inner {
                entries: LruCache::new_unbounded(),
                bytes: 0,
                routes: HashMap::new(),
            }),
            max_bytes,
        }
    }

    /// The entry under `key`, if it has not expired by `now`; an expired one is dropped.
    pub fn get(&self, key: &CacheKey, now: Instant) -> Option<Arc<Entry>> {
        let mut inner = self.lock();
        let entry = inner.entries.get(key)?.clone();
        if entry.expires <= now {
            inner.remove(key);
            return None;
        }
        Some(entry)
    }

    /// Keeps `entry` under `key`, evicting the least recently used until it fits.
    pub fn put(&self, key: CacheKey, entry: Arc<Entry>) -> Stored {
        let mut inner = self.lock();
        inner.remove(&key);
        inner.add(&key, &entry);
        inner.entries.insert(key, entry);
        let mut stored = Stored::default();
        while inner.bytes > self.max_bytes {
            let Some((key, evicted)) = inner.entries.remove_lru() else {
                break;
            };
            inner.subtract(&key, &evicted);
            inner
                .routes
                .entry(evicted.route.clone())
                .or_default()
                .evictions += 1;
            stored.evicted += 1;
        }
        stored
    }

    /// Drops every entry `matches` picks; how many it dropped.
    pub fn purge(&self, matches: impl Fn(&Entry) -> bool) -> usize {
        let mut inner = self.lock();
        let doomed: Vec<CacheKey> = inner
            .entries
            .iter()
            .filter(|(_, entry)| matches(entry))
            .map(|(key, _)| key.clone())
            .collect();
        for key in &doomed {
            inner.remove(key);
        }
        doomed.len()
    }

    /// How many entries, and their bytes.
    pub fn size(&self) -> (usize, usize) {
        let inner = self.lock();
        (inner.entries.len(), inner.bytes)
    }

    /// Each route's bytes kept and evictions, for every route that kept an answer.
    pub fn by_route(&self) -> Vec<(RouteName, RouteUse)> {
        let inner = self.lock();
        inner
            .routes
            .iter()
            .map(|(route, usage)| (route.clone(), *usage))
            .collect()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        // Every change below leaves the map and its byte count agreeing before it can panic,
        // so a poisoned lock's data is still whole.
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Inner {
    fn remove(&mut self, key: &CacheKey) {
        if let Some(old) = self.entries.remove(key) {
            self.subtract(key, &old);
        }
    }

    fn add(&mut self, key: &CacheKey, entry: &Entry) {
        let size = key.size() + entry.size();
        self.bytes += size;
        self.routes.entry(entry.route.clone()).or_default().bytes += size;
    }

    fn subtract(&mut self, key: &CacheKey, entry: &Entry) {
        let size = key.size() + entry.size();
        self.bytes -= size;
        if let Some(route) = self.routes.get_mut(&entry.route) {
            route.bytes -= size;
        }
    }
}
