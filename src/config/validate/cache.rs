//! `[cache]` and a route's `cache`.

use super::Errors;
use super::cluster::{key_prefix, redis_target};
use crate::config::raw::{RawCache, RawRouteCache};
use crate::config::{
    CacheBackend, CacheConfig, CacheScope, ClusterConfig, LimitBackend, LimitsConfig, RouteCache,
};

/// `[cache]`. With `backend = "redis"`, `redis_url` defaults to the Redis the instances
/// already share (the cluster's, else the limiter's), and `key_prefix` to the cluster's.
pub(super) fn cache(
    errors: &mut Errors,
    raw: RawCache,
    cluster: &ClusterConfig,
    limits: &LimitsConfig,
) -> CacheConfig {
    let defaults = CacheConfig::default();
    let backend = match raw.backend.as_deref() {
        None | Some("memory") => {
            let redis_only = [
                ("redis_url", raw.redis_url.is_some()),
                ("redis_password_env", raw.redis_password_env.is_some()),
                ("redis_password_file", raw.redis_password_file.is_some()),
                ("redis_ca_file", raw.redis_ca_file.is_some()),
                ("key_prefix", raw.key_prefix.is_some()),
            ];
            for (field, _) in redis_only.iter().filter(|(_, set)| *set) {
                errors.add(
                    format!("cache.{field}"),
                    "applies to backend = \"redis\" only",
                );
            }
            CacheBackend::Memory
        }
        Some("redis") => {
            let shared = cluster
                .redis
                .clone()
                .or_else(|| (limits.backend == LimitBackend::Redis).then(|| limits.redis.clone()));
            let redis = match (raw.redis_url, shared) {
                (Some(url), _) => redis_target(
                    errors,
                    "cache",
                    url,
                    raw.redis_password_env,
                    raw.redis_password_file,
                    raw.redis_ca_file,
                ),
                (None, Some(shared)) => shared,
                (None, None) => {
                    errors.add(
                        "cache.redis_url",
                        "backend = \"redis\" needs a Redis: set redis_url here or in [cluster]",
                    );
                    crate::config::RedisTarget::url("redis://127.0.0.1:6379")
                }
            };
            let key_prefix = match raw.key_prefix {
                Some(prefix) => key_prefix(errors, "cache.key_prefix", prefix),
                None => cluster.key_prefix.clone(),
            };
            CacheBackend::Redis { redis, key_prefix }
        }
        Some(other) => {
            errors.add(
                "cache.backend",
                format!("`{other}` is not one of `memory`, `redis`"),
            );
            CacheBackend::Memory
        }
    };
    let config = CacheConfig {
        backend,
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

#[cfg(test)]
mod tests {
    use crate::config::validate::errors_of;
    use crate::config::{CacheBackend, Config, RedisTarget};

    fn backend(text: &str) -> CacheBackend {
        Config::parse(text).unwrap().cache.backend
    }

    #[test]
    fn redis_defaults_to_the_redis_the_instances_share_and_its_prefix() {
        let own = backend(
            "[cache]\nbackend = \"redis\"\nredis_url = \"redis://cache:6379\"\nkey_prefix = \"c\"\n",
        );
        let want = RedisTarget::url("redis://cache:6379");
        assert_eq!(
            own,
            CacheBackend::Redis {
                redis: want,
                key_prefix: "c".into()
            }
        );
        let cluster = backend(
            "[cluster]\nredis_url = \"redis://breakers:6379\"\nkey_prefix = \"k\"\n\
             [cache]\nbackend = \"redis\"\n",
        );
        assert_eq!(
            cluster,
            CacheBackend::Redis {
                redis: RedisTarget::url("redis://breakers:6379"),
                key_prefix: "k".into()
            }
        );
        let limits = backend(
            "[limits]\nbackend = \"redis\"\nredis_url = \"redis://limits:6379\"\n\
             [cluster]\nshared_breakers = false\n[cache]\nbackend = \"redis\"\n",
        );
        assert_eq!(
            limits,
            CacheBackend::Redis {
                redis: RedisTarget::url("redis://limits:6379"),
                key_prefix: "switchyard".into()
            }
        );
    }

    #[test]
    fn a_redis_cache_without_a_redis_or_redis_settings_on_memory_are_refused_by_field() {
        assert_eq!(
            errors_of("[cache]\nbackend = \"redis\"\n"),
            [
                "cache.redis_url: backend = \"redis\" needs a Redis: set redis_url here or in [cluster]"
            ]
        );
        assert_eq!(
            errors_of("[cache]\nredis_url = \"redis://cache:6379\"\nkey_prefix = \"a b\"\n"),
            [
                "cache.redis_url: applies to backend = \"redis\" only",
                "cache.key_prefix: applies to backend = \"redis\" only"
            ]
        );
        assert_eq!(
            errors_of(
                "[cache]\nbackend = \"redis\"\nredis_url = \"http://x\"\nkey_prefix = \"a b\"\n"
            ),
            [
                "cache.redis_url: is not a Redis URL like redis://127.0.0.1:6379 (redis, rediss or unix scheme)",
                "cache.key_prefix: must not contain spaces"
            ]
        );
        assert_eq!(
            errors_of("[cache]\nbackend = \"disk\"\n"),
            ["cache.backend: `disk` is not one of `memory`, `redis`"]
        );
    }
}
