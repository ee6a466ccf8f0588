//! The retry budget policy (`[retry] budget_percent`, `min_retries_per_second`): validated
//! with the rest of the config, applied by the router's per-deployment windows
//! (`router::retry_budget`), so the policy and its arithmetic sit here, below both.

use std::time::Duration;

/// How far back a deployment's requests and retries are counted.
pub const WINDOW: Duration = Duration::from_secs(10);

/// Envoy's retry budget, per deployment: its retries in place over the last [`WINDOW`] may be
/// at most `percent` % of its requests over the same window, or `min_per_second` × the
/// window's seconds, whichever is more. `percent = 100` turns the budget off.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RetryBudget {
    percent: f64,
    min_per_second: u32,
}

/// Why a retry budget could not be built.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum RetryBudgetError {
    #[error("must be a number from 0 to 100")]
    PercentOutOfRange,
    #[error(
        "0 with min_retries_per_second = 0 would refuse every retry in place; \
         set budget_percent = 100 to turn the budget off"
    )]
    NoRetriesAtAll,
}

impl RetryBudget {
    /// The defaults: 20 % of the requests, and at least 3 retries a second.
    pub const DEFAULT: RetryBudget = RetryBudget {
        percent: 20.0,
        min_per_second: 3,
    };

    /// Checks the bounds once, here: a percentage, and not a budget that refuses every retry.
    pub fn try_new(percent: f64, min_per_second: u32) -> Result<RetryBudget, RetryBudgetError> {
        if !(0.0..=100.0).contains(&percent) {
            return Err(RetryBudgetError::PercentOutOfRange);
        }
        if percent == 0.0 && min_per_second == 0 {
            return Err(RetryBudgetError::NoRetriesAtAll);
        }
        Ok(RetryBudget {
            percent,
            min_per_second,
        })
    }

    /// The share of a deployment's requests that may be retries, in percent.
    pub fn percent(&self) -> f64 {
        self.percent
    }

    /// The retries a second every deployment may make, however few its requests.
    pub fn min_per_second(&self) -> u32 {
        self.min_per_second
    }

    /// Whether the budget is off (`budget_percent = 100`): no retry is ever refused.
    pub fn is_off(&self) -> bool {
        self.percent >= 100.0
    }

    /// How many retries a deployment with `requests` over the window may make in it.
    pub fn limit(&self, requests: u64) -> f64 {
        let floor = u64::from(self.min_per_second) * WINDOW.as_secs();
        (self.percent / 100.0 * requests as f64).max(floor as f64)
    }

    /// Whether one more retry fits: the window's retries, this one included, stay within
    /// [`RetryBudget::limit`].
    pub fn allows(&self, requests: u64, retries: u64) -> bool {
        self.is_off() || (retries.saturating_add(1) as f64) <= self.limit(requests)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_floor_holds_at_low_traffic_and_the_percentage_above_it() {
        let budget = RetryBudget::try_new(20.0, 3).unwrap();
        // 3 a second over 10 s: 30 retries, even with a single request.
        assert!(budget.allows(1, 29));
        assert!(!budget.allows(1, 30));
        // 20 % of 1,000 requests is 200.
        assert!(budget.allows(1_000, 199));
        assert!(!budget.allows(1_000, 200));
    }

    #[test]
    fn without_a_floor_a_retry_waits_for_enough_requests() {
        let budget = RetryBudget::try_new(20.0, 0).unwrap();
        assert!(!budget.allows(4, 0));
        assert!(budget.allows(5, 0));
        assert!(!budget.allows(5, 1));
    }

    #[test]
    fn a_hundred_percent_is_off_and_nothing_is_refused() {
        let budget = RetryBudget::try_new(100.0, 0).unwrap();
        assert!(budget.is_off());
        assert!(budget.allows(0, u64::MAX));
        assert!(!RetryBudget::DEFAULT.is_off());
    }

    #[test]
    fn bounds_are_checked_when_built() {
        assert_eq!(
            RetryBudget::try_new(100.5, 3),
            Err(RetryBudgetError::PercentOutOfRange)
        );
        assert_eq!(
            RetryBudget::try_new(-1.0, 3),
            Err(RetryBudgetError::PercentOutOfRange)
        );
        assert_eq!(
            RetryBudget::try_new(f64::NAN, 3),
            Err(RetryBudgetError::PercentOutOfRange)
        );
        assert_eq!(
            RetryBudget::try_new(0.0, 0),
            Err(RetryBudgetError::NoRetriesAtAll)
        );
        assert!(RetryBudget::try_new(0.0, 1).is_ok());
        assert!(RetryBudget::try_new(u32::MAX as f64, 1).is_err());
        assert!(
            RetryBudget::try_new(0.0, u32::MAX)
                .unwrap()
                .allows(0, 1_000)
        );
    }
}
