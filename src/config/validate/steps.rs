//! A route's step, in its short form `{ provider, model }` or as several balanced
//! `deployments`.

use std::sync::Arc;

use super::Errors;
use crate::config::raw::{RawDeployment, RawStep};
use crate::config::{Balance, Deployment, ModelName, Provider, ProviderId, Step};

/// A step in either form; `path` is the step's own (`routes[0].steps[1]`).
pub(super) fn step(errors: &mut Errors, path: &str, raw: RawStep, providers: &[Provider]) -> Step {
    let balance = match raw.balance.as_deref() {
        None | Some("weighted") => Balance::Weighted,
        Some("latency") => Balance::Latency,
        Some(other) => {
            errors.add(
                format!("{path}.balance"),
                format!("`{other}` is not one of `weighted`, `latency`"),
            );
            Balance::Weighted
        }
    };
    let raw_deployments = match (raw.provider, raw.model, raw.deployments) {
        (Some(provider), Some(model), None) => {
            if raw.balance.is_some() {
                errors.add(
                    format!("{path}.balance"),
                    "only a step with `deployments` has anything to balance",
                );
            }
            vec![(
                path.to_owned(),
                RawDeployment {
                    provider,
                    model,
                    weight: None,
                },
            )]
        }
        (None, None, Some(deployments)) => {
            if deployments.is_empty() {
                errors.add(
                    format!("{path}.deployments"),
                    "a step needs at least one deployment",
                );
            }
            deployments
                .into_iter()
                .enumerate()
                .map(|(k, d)| (format!("{path}.deployments[{k}]"), d))
                .collect()
        }
        (_, _, Some(_)) => {
            errors.add(
                path,
                "give either `provider` and `model`, or `deployments`, not both",
            );
            Vec::new()
        }
        (provider, _, None) => {
            let missing = if provider.is_none() {
                "provider"
            } else {
                "model"
            };
            errors.add(
                format!("{path}.{missing}"),
                "is required (or give `deployments`)",
            );
            Vec::new()
        }
    };
    let mut deployments: Vec<Deployment> = Vec::with_capacity(raw_deployments.len());
    for (field, d) in raw_deployments {
        errors.unknown_provider(format!("{field}.provider"), &d.provider, providers);
        if d.model.is_empty() {
            errors.add(format!("{field}.model"), "must not be empty");
        }
        if d.weight == Some(0) {
            errors.add(format!("{field}.weight"), "must be at least 1");
        }
        let deployment = Deployment {
            provider: ProviderId(Arc::from(d.provider.as_str())),
            model: ModelName(Arc::from(d.model.as_str())),
            weight: d.weight.unwrap_or(1).max(1),
        };
        // One breaker and one latency estimate per provider and model: a twin would share them.
        if deployments
            .iter()
            .any(|e| e.provider == deployment.provider && e.model == deployment.model)
        {
            errors.add(
                field,
                format!("`{}/{}` is listed twice in this step", d.provider, d.model),
            );
        }
        deployments.push(deployment);
    }
    Step {
        deployments,
        balance,
    }
}

#[cfg(test)]
mod tests {
    use crate::config::Config;

    use crate::config::validate::errors_of as errors;

    const PROVIDERS: &str = r#"
[[providers]]
name = "a"
kind = "openai"
base_url = "http://127.0.0.1:1/v1"
"#;

    fn route_with(steps: &str) -> String {
        format!("{PROVIDERS}\n[[routes]]\nname = \"r\"\nsteps = [{steps}]\n")
    }

    #[test]
    fn a_step_may_balance_weighted_deployments() {
        let text = route_with(
            r#"{ provider = "a", model = "m" }, { deployments = [{ provider = "a", model = "x", weight = 3 }, { provider = "a", model = "y" }], balance = "latency" }"#,
        );
        let config = Config::parse(&text).unwrap();
        let steps = &config.routes[0].steps;
        assert_eq!(steps[0].deployments.len(), 1);
        assert_eq!(steps[0].deployments[0].weight, 1);
        let weights: Vec<u32> = steps[1].deployments.iter().map(|d| d.weight).collect();
        assert_eq!(weights, [3, 1]);
        assert_eq!(steps[1].balance, crate::config::Balance::Latency);
    }

    #[test]
    fn deployment_errors_name_their_field_path() {
        let text = route_with(
            r#"{ provider = "a", model = "m" }, { deployments = [{ provider = "a", model = "m", weight = 0 }, { provider = "ghost", model = "" }], balance = "fair" }"#,
        );
        let errors = errors(&text);
        for expected in [
            "routes[0].steps[1].deployments[0].weight: must be at least 1",
            "routes[0].steps[1].deployments[1].provider: no provider is named `ghost`",
            "routes[0].steps[1].deployments[1].model: must not be empty",
            "routes[0].steps[1].balance: `fair` is not one of `weighted`, `latency`",
        ] {
            assert!(
                errors.iter().any(|e| e == expected),
                "{expected}: {errors:?}"
            );
        }
    }

    #[test]
    fn a_step_takes_one_form_only() {
        let both = errors(&route_with(
            r#"{ provider = "a", model = "m", deployments = [] }"#,
        ));
        assert!(
            both[0].starts_with("routes[0].steps[0]: give either"),
            "{both:?}"
        );
        let neither = errors(&route_with(r#"{ model = "m" }"#));
        assert!(
            neither[0].starts_with("routes[0].steps[0].provider"),
            "{neither:?}"
        );
        let empty = errors(&route_with("{ deployments = [] }"));
        assert!(
            empty[0].starts_with("routes[0].steps[0].deployments"),
            "{empty:?}"
        );
        let lone_balance = errors(&route_with(
            r#"{ provider = "a", model = "m", balance = "latency" }"#,
        ));
        assert!(
            lone_balance[0].starts_with("routes[0].steps[0].balance"),
            "{lone_balance:?}"
        );
        let twice = errors(&route_with(
            r#"{ deployments = [{ provider = "a", model = "m" }, { provider = "a", model = "m" }] }"#,
        ));
        assert!(
            twice[0].starts_with("routes[0].steps[0].deployments[1]: `a/m` is listed twice"),
            "{twice:?}"
        );
    }

    #[test]
    fn unknown_and_mistyped_deployment_fields_name_their_path() {
        let unknown = errors(&route_with(
            r#"{ deployments = [{ provider = "a", model = "m", colour = 1 }] }"#,
        ));
        assert!(
            unknown[0].starts_with("routes[0].steps[0].deployments[0]"),
            "{unknown:?}"
        );
        assert!(unknown[0].contains("colour"), "{unknown:?}");
        let negative = errors(&route_with(
            r#"{ deployments = [{ provider = "a", model = "m", weight = -1 }] }"#,
        ));
        assert!(
            negative[0].starts_with("routes[0].steps[0].deployments[0].weight"),
            "{negative:?}"
        );
        let short_weight = errors(&route_with(
            r#"{ provider = "a", model = "m", weight = 2 }"#,
        ));
        assert!(short_weight[0].contains("weight"), "{short_weight:?}");
    }
}
