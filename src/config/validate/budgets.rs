//! Spend budgets: `[[roles]] budget_per_day` and `budget_per_month`, and `[budgets]`.
//!
//! Dollars are written as decimals in the file and kept as whole millionths (micro-USD),
//! so every instance, and Redis, adds them up exactly.

use super::Errors;
use crate::config::raw::RawBudgets;
use crate::config::{BudgetsConfig, DEFAULT_BUDGET_MAX_TOKENS, Unpriced};

/// The most a budget may be: far past any real one, and well inside the 2^53 that Lua's
/// numbers (Redis scripts) hold exactly.
const MAX_DOLLARS: f64 = 1e9;

/// A dollar amount as micro-USD: finite, 0 or more, at most a billion.
pub(super) fn dollars(errors: &mut Errors, field: &str, value: Option<f64>) -> Option<u64> {
    let value = value?;
    if !value.is_finite() || !(0.0..=MAX_DOLLARS).contains(&value) {
        errors.add(field, "must be a number of US dollars from 0 to 1000000000");
        return None;
    }
    // Rounded to the nearest micro-dollar: 0.1 is not exact in binary.
    Some((value * 1e6).round() as u64)
}

/// `[budgets]`.
pub(super) fn budgets(errors: &mut Errors, raw: RawBudgets) -> BudgetsConfig {
    let unpriced = match raw.unpriced.as_deref() {
        None | Some("refuse") => Unpriced::Refuse,
        Some("free") => Unpriced::Free,
        Some(other) => {
            errors.add(
                "budgets.unpriced",
                format!("`{other}` is not one of `refuse`, `free`"),
            );
            Unpriced::Refuse
        }
    };
    let default_max_tokens = match raw.default_max_tokens {
        None => DEFAULT_BUDGET_MAX_TOKENS,
        Some(0) => {
            errors.add("budgets.default_max_tokens", "must be at least 1");
            DEFAULT_BUDGET_MAX_TOKENS
        }
        Some(tokens) => tokens,
    };
    BudgetsConfig {
        unpriced,
        default_max_tokens,
    }
}

#[cfg(test)]
mod tests {
    use crate::config::{Config, ConfigError, Unpriced};

    fn errors(text: &str) -> Vec<String> {
        match Config::parse(text) {
            Err(ConfigError::Invalid(errors)) => errors.iter().map(|e| e.to_string()).collect(),
            other => panic!("expected field errors, got {other:?}"),
        }
    }

    #[test]
    fn role_budgets_are_kept_in_micro_dollars() {
        let config = Config::parse(
            "[[roles]]\nname = \"ae\"\nbudget_per_day = 25.0\nbudget_per_month = 0.1\n",
        )
        .unwrap();
        let role = &config.roles[0];
        assert_eq!(role.budget_per_day_micros, Some(25_000_000));
        assert_eq!(role.budget_per_month_micros, Some(100_000));
        assert_eq!(config.budgets.unpriced, Unpriced::Refuse);
        assert_eq!(config.budgets.default_max_tokens, 4096);
    }

    #[test]
    fn bad_budgets_name_their_fields() {
        let found = errors(
            "[[roles]]\nname = \"ae\"\nbudget_per_day = -1.0\nbudget_per_month = inf\n\
             [budgets]\nunpriced = \"maybe\"\ndefault_max_tokens = 0\n",
        );
        for field in [
            "roles[0].budget_per_day",
            "roles[0].budget_per_month",
            "budgets.unpriced",
            "budgets.default_max_tokens",
        ] {
            assert!(
                found.iter().any(|e| e.starts_with(field)),
                "{field}: {found:?}"
            );
        }
    }

    #[test]
    fn budgets_take_free_and_a_default() {
        let config =
            Config::parse("[budgets]\nunpriced = \"free\"\ndefault_max_tokens = 512\n").unwrap();
        assert_eq!(config.budgets.unpriced, Unpriced::Free);
        assert_eq!(config.budgets.default_max_tokens, 512);
    }
}
