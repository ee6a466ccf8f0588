//! `[cache]` and a route's `cache`.

use super::Errors;
use crate::config::raw::{RawCache, RawRouteCache};
use crate::config::{CacheConfig, CacheScope, RouteCache};

/// `[cache]`.
pub(super) fn cache(errors: &mut Errors, raw: RawCache) -> CacheConfig {
    let defaults = CacheConfig::default();
    match raw.backend.as_deref() {
        None | Some("memory") => {}
        Some(other) => errors.add(
            "cache.backend",
            format!("`{other}` is not a cache backend this build has: use `memory`"),
        ),
    }
    let config = CacheConfig {
        max_bytes: raw.max_bytes.unwrap_or(defaults.max_bytes),
        max_entry_bytes: raw.max_entry_bytes.unwrap_or(defaults.max_entry_bytes),
    };
    if config.max_bytes == 0 {
        errors.add("cache.max_bytes", "must be greater than 0");
    }
    if config.max_entry_bytes == 0 || config.max_entry_bytes > config.max_bytes {
        errors.add(
            "cache.max_entry_bytes",
            "must be greater than 0 and at most cache.max_bytes",
        );
    }
    config
}

/// A route's `cache = { ttl, scope }`; `path` is the route's own (`routes[0]`).
pub(super) fn route_cache(errors: &mut Errors, path: &str, raw: RawRouteCache) -> RouteCache {
    let field = format!("{path}.cache.ttl");
    let ttl = errors.duration(&field, Some(&raw.ttl), std::time::Duration::from_secs(60));
    if ttl.is_zero() {
        errors.add(field, "must be greater than 0");
    }
    let scope = match raw.scope.as_deref() {
        None | Some("key") => CacheScope::Key,
        Some("role") => CacheScope::Role,
        Some("shared") => CacheScope::Shared,
        Some(other) => {
            errors.add(
                format!("{path}.cache.scope"),
                format!("`{other}` is not a scope: use `key`, `role` or `shared`"),
            );
            CacheScope::Key
        }
    };
    RouteCache { ttl, scope }
}
