//! Single flight: of identical misses in flight at once in this process, the first goes
//! upstream and the rest wait for its answer, so 50 identical requests make one upstream
//! call.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use tokio::sync::watch;

use super::{CacheKey, Entry};

/// What a flight's waiters are handed: the answer, once its leader has one.
type Answer = watch::Receiver<Option<Arc<Entry>>>;

/// The misses in flight, each with the channel its waiters listen on.
#[derive(Default)]
pub struct Flights {
    in_flight: Arc<Mutex<HashMap<CacheKey, Answer>>>,
}

/// Joining a key's flight: lead it, or wait for its leader.
pub enum Joined {
    Lead(Lead),
    Wait(Answer),
}

/// The first miss of a key: it goes upstream, and its waiters wake when it hands them the
/// answer, or when it is dropped without one (it failed, or its answer may not be kept).
pub struct Lead {
    key: CacheKey,
    in_flight: Arc<Mutex<HashMap<CacheKey, Answer>>>,
    // Dropped with the lead: its receivers' `changed()` then returns, waking every waiter.
    done: watch::Sender<Option<Arc<Entry>>>,
}

impl Flights {
    /// Leads `key`'s flight when none is in the air, else waits on it. `stored` is asked
    /// once more under the lock, so a leader that stored and left just before is not missed.
    pub fn join(&self, key: &CacheKey, stored: impl FnOnce() -> bool) -> Option<Joined> {
        let mut in_flight = lock(&self.in_flight);
        if let Some(waiting) = in_flight.get(key) {
            return Some(Joined::Wait(waiting.clone()));
        }
        if stored() {
            return None;
        }
        let (done, waiting) = watch::channel(None);
        in_flight.insert(key.clone(), waiting);
        Some(Joined::Lead(Lead {
            key: key.clone(),
            in_flight: self.in_flight.clone(),
            done,
        }))
    }
}

impl Lead {
    /// Hands `entry` to every waiter, now and until the lead drops.
    pub fn publish(&self, entry: Arc<Entry>) {
        self.done.send_replace(Some(entry));
    }
}

impl Drop for Lead {
    fn drop(&mut self) {
        lock(&self.in_flight).remove(&self.key);
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // The map is changed by single inserts and removes, whole before any panic can happen.
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}
