//! A route's `hedge`, and `[retry] hedge_budget_percent`, the cap on how much hedging costs.

use std::time::Duration;

use super::Errors;
use crate::config::duration::parse_duration;
use crate::config::raw::RawHedge;
use crate::config::{Hedge, HedgeDelay};

/// The most extra attempts one request may race against step 0: each is one more upstream
/// call paid for, so a few at most.
pub const MAX_HEDGES: u32 = 3;
/// `hedge_budget_percent` when unset.
pub const DEFAULT_BUDGET_PERCENT: f64 = 10.0;

/// A route's hedge; `path` is the route's own (`routes[0]`), `steps` how many it has.
pub(super) fn hedge(errors: &mut Errors, path: &str, raw: RawHedge, steps: usize) -> Hedge {
    let after = delay(errors, &format!("{path}.hedge.after"), &raw.after);
    let max = raw.max.unwrap_or(1);
    if steps < 2 {
        errors.add(
            format!("{path}.hedge"),
            "a route with one step has no next step to hedge onto",
        );
    } else if max == 0 || max > MAX_HEDGES {
        errors.add(
            format!("{path}.hedge.max"),
            format!("must be between 1 and {MAX_HEDGES}"),
        );
    } else if max as usize > steps - 1 {
        errors.add(
            format!("{path}.hedge.max"),
            format!(
                "is {max}, but the route has only {} step(s) after the first to hedge onto",
                steps - 1
            ),
        );
    }
    Hedge { after, max }
}

/// `"800ms"` or `"p50"` to `"p99"`.
fn delay(errors: &mut Errors, field: &str, text: &str) -> HedgeDelay {
    let fallback = HedgeDelay::Fixed(Duration::from_secs(1));
    if let Some(digits) = text.trim().strip_prefix('p') {
        return match digits.parse::<u8>() {
            Ok(percentile @ 50..=99) => HedgeDelay::Percentile(percentile),
            _ => {
                errors.add(
                    field,
                    format!("`{text}` is not a percentile from p50 to p99"),
                );
                fallback
            }
        };
    }
    match parse_duration(text) {
        Ok(duration) if duration.is_zero() => {
            errors.add(field, "must be greater than 0");
            fallback
        }
        Ok(duration) => HedgeDelay::Fixed(duration),
        Err(message) => {
            errors.add(
                field,
                format!("{message}; or give a percentile from p50 to p99"),
            );
            fallback
        }
    }
}

/// `[retry] hedge_budget_percent`: a share, so within (0, 100].
pub(super) fn budget_percent(errors: &mut Errors, raw: Option<f64>) -> f64 {
    let percent = raw.unwrap_or(DEFAULT_BUDGET_PERCENT);
    if !(percent > 0.0 && percent <= 100.0) {
        errors.add("retry.hedge_budget_percent", "must be in (0, 100]");
        return DEFAULT_BUDGET_PERCENT;
    }
    percent
}

#[cfg(test)]
mod tests {
    use crate::config::validate::errors_of;
    use crate::config::{Config, HedgeDelay};

    const PROVIDERS: &str = "[[providers]]\nname = \"a\"\nkind = \"openai\"\nbase_url = \"http://127.0.0.1:1\"\nkey_required = false\n";

    fn route(steps: usize, hedge: &str) -> String {
        let steps = vec![r#"{ provider = "a", model = "m" }"#; steps].join(", ");
        format!("{PROVIDERS}[[routes]]\nname = \"r\"\nsteps = [{steps}]\nhedge = {hedge}\n")
    }

    #[test]
    fn a_fixed_delay_and_a_percentile_parse_with_max_defaulting_to_one() {
        let config = Config::parse(&route(2, r#"{ after = "200ms" }"#)).unwrap();
        let hedge = config.routes[0].hedge.unwrap();
        assert_eq!(
            hedge.after,
            HedgeDelay::Fixed(std::time::Duration::from_millis(200))
        );
        assert_eq!(hedge.max, 1);
        let config = Config::parse(&route(3, r#"{ after = "p95", max = 2 }"#)).unwrap();
        let hedge = config.routes[0].hedge.unwrap();
        assert_eq!((hedge.after, hedge.max), (HedgeDelay::Percentile(95), 2));
        assert_eq!(config.retry.hedge_budget_percent, 10.0);
    }

    #[test]
    fn bad_hedges_name_their_fields() {
        let cases = [
            (route(1, r#"{ after = "1s" }"#), "routes[0].hedge:"),
            (route(2, r#"{ after = "0ms" }"#), "routes[0].hedge.after:"),
            (route(2, r#"{ after = "p100" }"#), "routes[0].hedge.after:"),
            (route(2, r#"{ after = "p49" }"#), "routes[0].hedge.after:"),
            (route(2, r#"{ after = "soon" }"#), "routes[0].hedge.after:"),
            (
                route(2, r#"{ after = "1s", max = 0 }"#),
                "routes[0].hedge.max:",
            ),
            (
                route(2, r#"{ after = "1s", max = 2 }"#),
                "routes[0].hedge.max:",
            ),
            (
                route(6, r#"{ after = "1s", max = 4 }"#),
                "routes[0].hedge.max:",
            ),
            (
                format!(
                    "{}[retry]\nhedge_budget_percent = 0.0\n",
                    route(2, r#"{ after = "1s" }"#)
                ),
                "retry.hedge_budget_percent:",
            ),
        ];
        for (text, field) in cases {
            let errors = errors_of(&text);
            assert!(
                errors.iter().any(|e| e.starts_with(field)),
                "{field} in {errors:?}"
            );
        }
    }
}
