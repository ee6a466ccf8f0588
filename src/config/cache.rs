//! The response cache's settings: `[cache]` for the store, and a route's `cache = { ttl,
//! scope }` to opt in.

use std::time::Duration;

use super::RedisTarget;

/// `[cache]`: where cached answers live and how much room they get.
#[derive(Clone, Debug, PartialEq)]
pub struct CacheConfig {
    pub backend: CacheBackend,
    /// The most bytes of answers kept in memory; the least recently used go first.
    pub max_bytes: usize,
    /// An answer larger than this is served but not kept.
    pub max_entry_bytes: usize,
}

/// Where cached answers live.
#[derive(Clone, Debug, PartialEq)]
pub enum CacheBackend {
    /// In this process, bounded by `max_bytes`.
    Memory,
    /// In Redis, shared by every instance that names the same Redis and prefix; each entry
    /// expires with its route's `ttl`.
    Redis {
        redis: RedisTarget,
        key_prefix: String,
    },
}

impl Default for CacheConfig {
    fn default() -> CacheConfig {
        CacheConfig {
            backend: CacheBackend::Memory,
            max_bytes: 64 * 1024 * 1024,
            max_entry_bytes: 1024 * 1024,
        }
    }
}

/// A route's `cache = { ttl = "1h", scope = "key" }`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RouteCache {
    /// How long an answer is served from the cache after it was stored.
    pub ttl: Duration,
    pub scope: CacheScope,
}

/// Who may be served an answer another request stored.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CacheScope {
    /// Only the virtual key that stored it (anonymous callers are one caller).
    Key,
    /// Every caller of the same role.
    Role,
    /// Every caller of the route.
    Shared,
}

impl CacheScope {
    /// The name the config uses.
    pub fn as_str(self) -> &'static str {
        match self {
            CacheScope::Key => "key",
            CacheScope::Role => "role",
            CacheScope::Shared => "shared",
        }
    }
}
