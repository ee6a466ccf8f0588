//! `[retry] budget_percent` and `min_retries_per_second`: how many retries each deployment's
//! failures may cause.

use super::Errors;
use crate::config::raw::RawRetry;
use crate::config::retry_budget::{RetryBudget, RetryBudgetError};

pub fn retry_budget(errors: &mut Errors, raw: &RawRetry) -> RetryBudget {
    let defaults = RetryBudget::DEFAULT;
    let percent = raw.budget_percent.unwrap_or(defaults.percent());
    let floor = raw
        .min_retries_per_second
        .unwrap_or(defaults.min_per_second());
    RetryBudget::try_new(percent, floor).unwrap_or_else(|e: RetryBudgetError| {
        // Either error is the percentage's: any count is a valid floor on its own.
        errors.add("retry.budget_percent", e.to_string());
        defaults
    })
}

#[cfg(test)]
mod tests {
    use crate::config::Config;
    use crate::config::retry_budget::RetryBudget;

    fn parse(retry: &str) -> Result<Config, String> {
        Config::parse(&format!("[retry]\n{retry}\n")).map_err(|e| e.to_string())
    }

    #[test]
    fn defaults_are_twenty_percent_and_three_a_second() {
        let config = parse("").unwrap();
        assert_eq!(config.retry.budget, RetryBudget::DEFAULT);
        assert_eq!(config.retry.budget.percent(), 20.0);
        assert_eq!(config.retry.budget.min_per_second(), 3);
    }

    #[test]
    fn integers_and_fractions_both_read() {
        let config = parse("budget_percent = 35\nmin_retries_per_second = 0").unwrap();
        assert_eq!(config.retry.budget.percent(), 35.0);
        assert_eq!(config.retry.budget.min_per_second(), 0);
        let config = parse("budget_percent = 12.5").unwrap();
        assert_eq!(config.retry.budget.percent(), 12.5);
        assert!(parse("budget_percent = 100").unwrap().retry.budget.is_off());
    }

    #[test]
    fn bad_values_name_their_field() {
        for bad in [
            "budget_percent = 101",
            "budget_percent = -5",
            "budget_percent = nan",
            "budget_percent = 0\nmin_retries_per_second = 0",
        ] {
            let error = parse(bad).unwrap_err();
            assert!(error.contains("retry.budget_percent"), "{bad}: {error}");
        }
        let error = parse("min_retries_per_second = -1").unwrap_err();
        assert!(error.contains("min_retries_per_second"), "{error}");
        // A floor alone is a budget: only the floor's retries go.
        assert!(parse("budget_percent = 0\nmin_retries_per_second = 1").is_ok());
    }
}
