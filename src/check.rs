//! `switchyard check`: what each route will do, and how long it can take at worst.

use std::fmt::Write;

use crate::config::{Balance, Config, format_duration};

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

#[cfg(test)]
mod tests {
    use super::*;

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
attempt_timeout = "18446744073709551615ms"
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
