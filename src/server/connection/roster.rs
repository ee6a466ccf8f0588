//! A listener's roster of its open client connections: which has been idle longest, and how
//! many each address holds. A full gateway makes room by closing the connection idle longest
//! (a kept-alive one between requests, or one that has sent nothing) rather than leaving a
//! new client to wait or be refused; `[server] max_connections_per_ip` keeps one address from
//! holding every connection.

use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use foldhash::{HashMap, HashMapExt};
use tokio::sync::Notify;

use super::ClientStream;
use super::watchdog::Activity;

/// One open connection, as the roster knows it.
struct Entry {
    ip: IpAddr,
    activity: Arc<Activity>,
    /// Told when the connection should close if it is still idle.
    evict: Arc<Notify>,
}

/// Every open connection of one listener.
pub struct Roster {
    entries: Mutex<HashMap<u64, Entry>>,
    next: AtomicU64,
    /// `[server] max_connections_per_ip`.
    per_ip: Option<usize>,
}

impl Roster {
    /// An empty roster; `per_ip` caps each address's connections.
    pub fn new(per_ip: Option<usize>) -> Arc<Roster> {
        Arc::new(Roster {
            entries: Mutex::new(HashMap::new()),
            next: AtomicU64::new(0),
            per_ip,
        })
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<u64, Entry>> {
        // A poisoned lock only means a panic between two map operations.
        self.entries.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Puts `stream`, from `ip`, on the roster until the returned guard is dropped.
    pub fn enrol(self: &Arc<Roster>, ip: IpAddr, stream: &ClientStream) -> Enrolled {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let evict = Arc::new(Notify::new());
        let entry = Entry {
            ip,
            activity: stream.activity.clone(),
            evict: evict.clone(),
        };
        self.lock().insert(id, entry);
        Enrolled {
            roster: self.clone(),
            id,
            evict,
        }
    }

    /// Whether `ip` holds as many connections as it may: then one of its own idle ones must
    /// make room, or the new one is refused.
    pub fn ip_is_full(&self, ip: IpAddr) -> bool {
        let Some(cap) = self.per_ip else {
            return false;
        };
        self.lock().values().filter(|e| e.ip == ip).count() >= cap
    }

    /// Asks the connection idle longest (of `ip` only, when given) to close; false when none
    /// is idle. It closes at once, freeing its slot for the connection that needs one.
    pub fn evict_idlest(&self, ip: Option<IpAddr>) -> bool {
        let entries = self.lock();
        let idlest = entries
            .values()
            .filter(|e| ip.is_none_or(|ip| e.ip == ip))
            .filter_map(|e| e.activity.idle_since().map(|since| (since, e)))
            .min_by_key(|(since, _)| *since);
        match idlest {
            Some((_, entry)) => {
                entry.evict.notify_one();
                true
            }
            None => false,
        }
    }
}

/// A connection on the roster; it leaves the roster when this is dropped.
pub struct Enrolled {
    roster: Arc<Roster>,
    id: u64,
    evict: Arc<Notify>,
}

impl Enrolled {
    /// Resolves when the roster asks this connection to close if it is idle.
    pub async fn evicted(&self) {
        self.evict.notified().await;
    }
}

impl Drop for Enrolled {
    fn drop(&mut self) {
        self.roster.lock().remove(&self.id);
    }
}
