//! `switchyard check`: what each route will do, and how long it can take at worst.

use std::fmt::Write;

use std::time::Duration;

use crate::config::{Balance, Config, LimitBackend, RedisTarget, format_duration};
pub use crate::server::{preflight, store_path_problem};
use crate::store::{Store, StoreError};

/// What `check --connect` could not reach.
#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    #[error("the store file {0} does not exist yet (serve creates it on first start)")]
    NoStoreFile(String),
    #[error("cannot open the store: {0}")]
    Store(#[from] StoreError),
    #[error("cannot reach Redis at {url}: {why}")]
    Redis { url: String, why: String },
}

/// A readable report of every route's chain and worst-case latency budget.
pub fn report(config: &Config) -> String {
    let retry = &config.retry;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "retry: {} attempts a step, {} a request; attempt timeout {}, backoff {}..{}, deadline {}",
        retry.attempts_per_step,
        retry.max_attempts,
        format_duration(retry.attempt_timeout),
        format_duration(retry.backoff.ceiling(0)),
        format_duration(retry.backoff.max()),
        format_duration(retry.request_deadline),
    );
    if config.routes.is_empty() {
        let _ = writeln!(
            out,
            "no routes: clients can still name provider/model directly"
        );
    }
    for route in &config.routes {
        let _ = writeln!(out, "\nroute {}", route.name);
        for (index, step) in route.steps.iter().enumerate() {
            match step.deployments.as_slice() {
                [only] => {
                    let _ = writeln!(out, "  step {index}: {} / {}", only.provider, only.model);
                }
                several => {
                    let balance = match step.balance {
                        Balance::Weighted => "by weight",
                        Balance::Latency => "by latency",
                    };
                    let _ = writeln!(out, "  step {index}: balanced {balance} over");
                    for d in several {
                        let _ = writeln!(
                            out,
                            "    {} / {} (weight {})",
                            d.provider, d.model, d.weight
                        );
                    }
                }
            }
        }
        match &route.degraded {
            Some(_) => {
                let _ = writeln!(out, "  then:   degraded tier (canned answer)");
            }
            None => {
                let _ = writeln!(out, "  then:   503 naming each step's failure");
            }
        }
        if route.fallback_on_context_length {
            let _ = writeln!(out, "  a context-length 400 falls back to the next step");
        }
        let worst = retry.worst_case(route.steps.len());
        let capped = if worst == retry.request_deadline {
            " (capped by request_deadline)"
        } else {
            ""
        };
        let _ = writeln!(out, "  worst case: {}{capped}", format_duration(worst));
    }
    out
}

/// What will work but probably not as meant: a provider that needs a key and has none from
/// the environment (the store may still hold one; `--connect` cannot read secrets to tell),
/// and a route's model with no price, neither in `[[prices]]` nor in the shipped table.
pub fn warnings(config: &Config) -> Vec<String> {
    let mut warnings = key_warnings(config);
    warnings.extend(unpriced(config));
    warnings
}

/// Each route deployment no price covers: its cost is unknown, and a budget refuses it
/// (or, with `[budgets] unpriced = "free"`, counts it as free).
fn unpriced(config: &Config) -> Vec<String> {
    let mut named = std::collections::BTreeSet::new();
    let deployments = config
        .routes
        .iter()
        .flat_map(|route| &route.steps)
        .flat_map(|step| &step.deployments);
    for deployment in deployments {
        let priced = config
            .prices
            .iter()
            .any(|p| p.provider == deployment.provider && p.model == deployment.model);
        if !priced {
            named.insert(format!("{}/{}", deployment.provider, deployment.model));
        }
    }
    named
        .into_iter()
        .map(|name| {
            format!(
                "`{name}` has no price: add it to [[prices]] for its cost to be known and for \
                 budgets to admit it"
            )
        })
        .collect()
}

fn key_warnings(config: &Config) -> Vec<String> {
    config
        .providers
        .iter()
        .filter(|p| p.key_required)
        .filter(|p| {
            p.api_key_env
                .as_deref()
                .is_none_or(|var| std::env::var(var).map_or(true, |v| v.is_empty()))
        })
        .map(|p| {
            let source = match &p.api_key_env {
                Some(var) => format!("{var} is not set"),
                None => "it names no api_key_env".to_owned(),
            };
            format!(
                "provider `{}` needs a key and {source}: unless the store holds one \
                 (`switchyard keys list`), its steps are skipped as no_key",
                p.id
            )
        })
        .collect()
}

/// Opens the store and sends a PING to each Redis the config names (the limiter's, when
/// limits use Redis, and the cluster's): what `serve` will need.
pub async fn connect(config: &Config) -> Result<(), ConnectError> {
    if let Some(path) = config.store.url.strip_prefix("sqlite://")
        && !std::path::Path::new(path).exists()
    {
        return Err(ConnectError::NoStoreFile(path.to_owned()));
    }
    Store::connect(&config.store.url, config.store.password.as_ref())
        .await?
        .generation()
        .await?;
    let limits = (config.limits.backend == LimitBackend::Redis).then_some(&config.limits.redis);
    let cluster = config.cluster.redis.as_ref();
    ping_redis(limits).await?;
    if cluster != limits {
        ping_redis(cluster).await?;
    }
    Ok(())
}

/// Sends `target`'s Redis a PING, if there is one, within 3 s.
async fn ping_redis(target: Option<&RedisTarget>) -> Result<(), ConnectError> {
    let Some(target) = target else {
        return Ok(());
    };
    // The URL may carry a password: only its host and port are shown.
    let fail = |why: String| ConnectError::Redis {
        url: target.shown(),
        why,
    };
    let client = target.client().map_err(fail)?;
    let ping = async {
        let mut connection = client.get_multiplexed_async_connection().await?;
        redis::cmd("PING")
            .query_async::<String>(&mut connection)
            .await
    };
    match tokio::time::timeout(Duration::from_secs(3), ping).await {
        Ok(Ok(_)) => Ok(()),
        Ok(Err(e)) => Err(fail(e.to_string())),
        Err(_) => Err(fail("no answer in 3 s".into())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn connect_pings_the_clusters_redis_too() {
        // Limits in memory, breakers shared through a Redis nothing listens for.
        let config = Config::parse(
            "[store]\nurl = \"sqlite::memory:\"\n\
             [cluster]\nredis_url = \"redis://:hunter2@127.0.0.1:1\"\n",
        )
        .unwrap();
        let error = connect(&config).await.unwrap_err().to_string();
        assert!(error.contains("127.0.0.1:1"), "{error}");
        assert!(!error.contains("hunter2"), "{error}");
    }

    #[test]
    fn a_route_model_with_no_price_is_named_and_a_shipped_or_filed_one_is_not() {
        let config = Config::parse(
            r#"
[[providers]]
name = "openai"
kind = "openai"
key_required = false
[[providers]]
name = "groq"
kind = "openai"
compat = "groq"
key_required = false
[[routes]]
name = "r"
steps = [{ provider = "openai", model = "gpt-4o-mini" }, { provider = "openai", model = "mine" },
         { provider = "groq", model = "gpt-4o-mini" }, { provider = "groq", model = "llama" }]
[[prices]]
provider = "groq"
model = "llama"
input_per_1m = 0.5
output_per_1m = 0.8
"#,
        )
        .unwrap();
        let warnings = warnings(&config);
        assert_eq!(
            warnings,
            [
                "`groq/gpt-4o-mini` has no price: add it to [[prices]] for its cost to be known and for budgets to admit it",
                "`openai/mine` has no price: add it to [[prices]] for its cost to be known and for budgets to admit it"
            ]
        );
        let shipped = config
            .prices
            .iter()
            .find(|p| p.model.as_str() == "gpt-4o-mini")
            .unwrap();
        assert_eq!(
            shipped.origin,
            crate::config::PriceOrigin::Shipped {
                as_of: "2026-11-20"
            }
        );
        assert_eq!(
            config.providers[1].base_url,
            "https://api.groq.com/openai/v1"
        );
    }

    #[test]
    fn reports_each_route_with_its_worst_case() {
        let config = Config::parse(
            r#"
[[providers]]
name = "a"
kind = "openai"
base_url = "http://127.0.0.1:1"
[[routes]]
name = "smart"
steps = [{ provider = "a", model = "m1" }, { provider = "a", model = "m2" }]
degraded = { content = "later" }
[retry]
attempts_per_step = 1
attempt_timeout = "2s"
request_deadline = "60s"
"#,
        )
        .unwrap();
        let report = report(&config);
        assert!(report.contains("route smart"), "{report}");
        assert!(report.contains("step 1: a / m2"), "{report}");
        assert!(report.contains("degraded tier"), "{report}");
        // Two single attempts of 2 s each, no retries: 4 s, well under the deadline.
        assert!(report.contains("worst case: 4s\n"), "{report}");
    }

    #[test]
    fn a_huge_retry_budget_is_capped_by_the_deadline_not_overflowed() {
        // Found by fuzzing (fuzz/corpus/config): the product of timeouts and attempts
        // saturated, and adding the backoff to it overflowed.
        let config = Config::parse(
            r#"
[[providers]]
name = "a"
kind = "openai"
base_url = "http://127.0.0.1:1"
[[routes]]
name = "smart"
steps = [{ provider = "a", model = "m1" }]
[retry]
attempt_timeout = "18446744073709551615s"
max_attempts = 4294967295
attempts_per_step = 4294967295
request_deadline = "60s"
"#,
        )
        .unwrap();
        let report = report(&config);
        assert!(
            report.contains("worst case: 1m (capped by request_deadline)"),
            "{report}"
        );
    }

    #[test]
    fn shows_each_balanced_deployment_with_its_weight() {
        let config = Config::parse(
            r#"
[[providers]]
name = "a"
kind = "openai"
base_url = "http://127.0.0.1:1"
[[routes]]
name = "spread"
steps = [{ deployments = [{ provider = "a", model = "m1", weight = 3 }, { provider = "a", model = "m2" }] }]
"#,
        )
        .unwrap();
        let report = report(&config);
        assert!(
            report.contains("step 0: balanced by weight over\n"),
            "{report}"
        );
        assert!(report.contains("    a / m1 (weight 3)\n"), "{report}");
        assert!(report.contains("    a / m2 (weight 1)\n"), "{report}");
    }
}
