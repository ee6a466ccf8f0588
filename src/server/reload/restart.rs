//! Settings a running gateway cannot take live: what they are built into (a bound socket,
//! an open store, the limiter's backend, the request-log writer, the breakers' windows)
//! exists once per process. A reload keeps their running values, names each one the file
//! changed, and applies everything else.

use crate::config::{Config, FieldError};

/// `new` with every restart-only setting put back to `running`'s, and the ones the file
/// changed, by field path.
pub fn keep_running(running: &Config, mut new: Config) -> (Config, Vec<FieldError>) {
    let mut changed = Vec::new();
    // Compared by `Debug`: every config type has it, and it masks secrets the same way on
    // both sides. A changed setting is put back, so the live config says what is in force.
    macro_rules! keep {
        ($($path:ident).+) => {
            if format!("{:?}", running.$($path).+) != format!("{:?}", new.$($path).+) {
                new.$($path).+ = running.$($path).+.clone();
                changed.push(FieldError {
                    field: stringify!($($path).+).replace(' ', ""),
                    message: "needs a restart: the running value is kept until then".into(),
                });
            }
        };
    }
    // Bound sockets, and what the listener and the routers are built with.
    keep!(server.listen);
    keep!(server.admin_listen);
    keep!(server.max_connections);
    keep!(server.max_connections_per_ip);
    keep!(server.max_body_bytes);
    keep!(server.header_timeout);
    keep!(server.idle_timeout);
    keep!(server.body_timeout);
    keep!(server.shutdown_grace);
    keep!(server.drain_delay);
    keep!(server.threads);
    // The open store, the vault sealed for it, and its rollback window.
    keep!(store);
    keep!(keys.rollback_window);
    // The limiter's backend; the roles and `on_backend_error` do reload.
    keep!(limits.backend);
    if running.limits.redis != new.limits.redis {
        new.limits.redis = running.limits.redis.clone();
        changed.push(FieldError {
            field: "limits.redis_url".into(),
            message: "needs a restart: the running value is kept until then".into(),
        });
    }
    keep!(limits.key_prefix);
    keep!(limits.lease);
    // The key directory's rules for callers without a key, and the 401 budget.
    keep!(auth.required);
    keep!(auth.default_role);
    keep!(auth.unauthorized_log_rows_per_minute);
    // Each breaker is built with its settings, and keeps its state across a reload.
    keep!(breaker);
    // The request-log writer, its queue and journal.
    keep!(log);
    // The admin token is read once; the scorecard permits are counted once.
    keep!(admin.token_file);
    keep!(admin.max_concurrent_scorecards);
    // The breakers' link to the cluster's Redis is made once. Compared by value, since its
    // `Debug` hides the URL.
    if running.cluster.redis != new.cluster.redis
        || running.cluster.key_prefix != new.cluster.key_prefix
    {
        new.cluster = running.cluster.clone();
        changed.push(FieldError {
            field: "cluster".into(),
            message: "needs a restart: the running value is kept until then".into(),
        });
    }
    // The span exporter is made once, with the request-log writer.
    keep!(otel);
    // The response cache's store is made once; routes' `cache` settings do reload.
    if running.cache != new.cache {
        new.cache = running.cache.clone();
        changed.push(FieldError {
            field: "cache".into(),
            message: "needs a restart: the running value is kept until then".into(),
        });
    }
    (new, changed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_restart_only_change_is_named_and_kept_and_the_rest_applies() {
        let running =
            Config::parse("[server]\nlisten = \"127.0.0.1:8080\"\n[[roles]]\nname = \"default\"\n")
                .unwrap();
        let new = Config::parse(
            "[server]\nlisten = \"127.0.0.1:9090\"\nmax_body_bytes = 1000\n\
             [[roles]]\nname = \"default\"\nrequests_per_minute = 5\n\
             [breaker]\nconsecutive_failures = 2\n\
             [cluster]\nredis_url = \"redis://127.0.0.1:6390\"\n\
             [cache]\nmax_bytes = 2048\nmax_entry_bytes = 1024\n",
        )
        .unwrap();
        let (kept, changed) = keep_running(&running, new);
        let fields: Vec<&str> = changed.iter().map(|e| e.field.as_str()).collect();
        assert_eq!(
            fields,
            [
                "server.listen",
                "server.max_body_bytes",
                "breaker",
                "cluster",
                "cache"
            ],
            "{changed:?}"
        );
        assert_eq!(kept.server.listen, running.server.listen);
        assert_eq!(kept.server.max_body_bytes, running.server.max_body_bytes);
        assert_eq!(kept.cluster.redis, None);
        assert_eq!(kept.cache, running.cache);
        assert_eq!(kept.roles[0].requests_per_minute, Some(5), "roles reload");
    }

    #[test]
    fn the_same_file_needs_nothing() {
        let text = "[server]\nlisten = \"127.0.0.1:8080\"\n[admin]\nmetrics_token = \"t\"\n";
        let (_, changed) =
            keep_running(&Config::parse(text).unwrap(), Config::parse(text).unwrap());
        assert!(changed.is_empty(), "{changed:?}");
    }
}
