//! Answers kept in this process, the least recently used evicted first, counted in bytes:
//! each answer's, and its key's (the request's canonical form).

use std::sync::{Arc, Mutex, PoisonError};

use hashlink::LruCache;
use tokio::time::Instant;

use super::{CacheKey, Entry};

/// The in-memory store: bounded by the bytes of the answers it keeps.
pub struct MemoryStore {
    inner: Mutex<Inner>,
    max_bytes: usize,
}

struct Inner {
    entries: LruCache<CacheKey, Arc<Entry>>,
    bytes: usize,
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
        inner.bytes += key.size() + entry.size();
        inner.entries.insert(key, entry);
        let mut stored = Stored::default();
        while inner.bytes > self.max_bytes {
            let Some((key, evicted)) = inner.entries.remove_lru() else {
                break;
            };
            inner.bytes -= key.size() + evicted.size();
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

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        // Every change below leaves the map and its byte count agreeing before it can panic,
        // so a poisoned lock's data is still whole.
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Inner {
    fn remove(&mut self, key: &CacheKey) {
        if let Some(old) = self.entries.remove(key) {
            self.bytes -= key.size() + old.size();
        }
    }
}
