//! `[cluster]`: the Redis through which instances share their breakers.

use super::Errors;
use super::password;
use crate::config::raw::RawCluster;
use crate::config::{ClusterConfig, LimitBackend, LimitsConfig, RedisTarget};

/// Longest `key_prefix`: keys and channel names stay short.
const MAX_PREFIX: usize = 128;

/// `redis_url` defaults to the limiter's when the limits use Redis: one Redis already
/// shared by every instance is the natural place for their breakers too.
/// `shared_breakers = false` keeps breakers local all the same.
pub fn cluster(errors: &mut Errors, raw: RawCluster, limits: &LimitsConfig) -> ClusterConfig {
    let redis = match raw.redis_url {
        Some(url) => Some(redis_target(
            errors,
            "cluster",
            url,
            raw.redis_password_env,
            raw.redis_password_file,
            raw.redis_ca_file,
        )),
        None => (limits.backend == LimitBackend::Redis).then(|| limits.redis.clone()),
    }
    .filter(|_| raw.shared_breakers.unwrap_or(true));
    let key_prefix = match raw.key_prefix {
        Some(prefix) => key_prefix(errors, "cluster.key_prefix", prefix),
        None => limits.key_prefix.clone(),
    };
    ClusterConfig { redis, key_prefix }
}

/// A `key_prefix` set at `field`: short, and without spaces.
pub fn key_prefix(errors: &mut Errors, field: &str, prefix: String) -> String {
    if prefix.is_empty() || prefix.len() > MAX_PREFIX {
        errors.add(field, format!("must be 1 to {MAX_PREFIX} characters"));
    } else if prefix.chars().any(|c| c.is_whitespace() || c.is_control()) {
        errors.add(field, "must not contain spaces");
    }
    prefix
}

/// `section`'s Redis: its URL (checked as the client will read it, without connecting),
/// its password from the environment or a file, and the CA file for `rediss://`. The URL
/// itself may carry a password, so errors never repeat it.
pub fn redis_target(
    errors: &mut Errors,
    section: &str,
    url: String,
    password_env: Option<String>,
    password_file: Option<String>,
    ca_file: Option<String>,
) -> RedisTarget {
    let field = format!("{section}.redis_url");
    let password = password::password(
        errors,
        &format!("{section}.redis_password"),
        password_env,
        password_file,
    );
    let mut target = RedisTarget::url(url);
    target.password = password;
    match url::Url::parse(&target.url) {
        Ok(parsed) if matches!(parsed.scheme(), "redis" | "rediss" | "redis+unix" | "unix") => {
            if target.password.is_some() && parsed.password().is_some() {
                errors.add(
                    format!("{section}.redis_password_env"),
                    "the URL carries a password too: keep one of them",
                );
            }
        }
        _ => {
            errors.add(
                &field,
                "is not a Redis URL like redis://127.0.0.1:6379 (redis, rediss or unix scheme)",
            );
            return target;
        }
    }
    match ca_file {
        Some(_) if !target.tls() => errors.add(
            format!("{section}.redis_ca_file"),
            "applies to rediss:// URLs only: use rediss:// for TLS",
        ),
        Some(path) if !std::path::Path::new(&path).is_file() => errors.add(
            format!("{section}.redis_ca_file"),
            format!("`{path}` is not a file"),
        ),
        Some(path) => target.ca_file = Some(path.into()),
        None => {}
    }
    if let Err(problem) = target.client() {
        errors.add(&field, problem);
    }
    target
}

#[cfg(test)]
mod tests {
    use crate::config::Config;

    fn parse(text: &str) -> Result<Config, String> {
        Config::parse(text).map_err(|e| e.to_string())
    }

    #[test]
    fn breakers_stay_local_unless_redis_is_configured() {
        let config = parse("").unwrap();
        assert_eq!(config.cluster.redis, None);
        let config = parse(
            "[limits]\nbackend = \"redis\"\nredis_url = \"redis://h:7/\"\nkey_prefix = \"p\"\n",
        )
        .unwrap();
        assert_eq!(
            config.cluster.redis.as_ref().map(|r| r.url.as_str()),
            Some("redis://h:7/")
        );
        assert_eq!(config.cluster.key_prefix, "p");
        let config =
            parse("[cluster]\nredis_url = \"redis://c:6379\"\nkey_prefix = \"c1\"\n").unwrap();
        assert_eq!(
            config.cluster.redis.as_ref().map(|r| r.url.as_str()),
            Some("redis://c:6379")
        );
        assert_eq!(config.cluster.key_prefix, "c1");
        let config =
            parse("[limits]\nbackend = \"redis\"\n[cluster]\nshared_breakers = false\n").unwrap();
        assert_eq!(config.cluster.redis, None);
    }

    #[test]
    fn bad_values_name_their_field_without_the_password() {
        let error = parse("[cluster]\nredis_url = \"http://user:hunter2@h\"\n").unwrap_err();
        assert!(error.contains("cluster.redis_url"), "{error}");
        assert!(!error.contains("hunter2"), "{error}");
        let error = parse("[cluster]\nkey_prefix = \"\"\n").unwrap_err();
        assert!(error.contains("cluster.key_prefix"), "{error}");
        let error = parse("[cluster]\nreddis_url = \"redis://h\"\n").unwrap_err();
        assert!(error.contains("reddis_url"), "{error}");
        let debug = format!(
            "{:?}",
            parse("[cluster]\nredis_url = \"redis://:hunter2@h\"\n")
                .unwrap()
                .cluster
        );
        assert!(!debug.contains("hunter2"), "{debug}");
    }
}
