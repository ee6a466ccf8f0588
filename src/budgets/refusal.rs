//! What the client is told when a budget refuses a request.

use std::fmt;
use std::time::Duration;

use super::period::{self, Period};
use super::price::NoPrice;

/// Why a request was refused by a budget: the client's 402.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BudgetRefusal {
    /// The request's most cost does not fit what is left until the period resets.
    Exceeded {
        period: Period,
        budget: u64,
        spent: u64,
        needed: u64,
        reset: Duration,
        /// When it resets, in milliseconds since the Unix epoch.
        resets_at_ms: u64,
    },
    /// The request's most cost is more than the whole budget.
    NeverFits {
        period: Period,
        budget: u64,
        needed: u64,
    },
    /// A model the route may use has no price, and `[budgets] unpriced = "refuse"`.
    Unpriced(NoPrice),
}

impl BudgetRefusal {
    /// The error's `code`, and the reason label of the refusals metric.
    pub fn kind(&self) -> &'static str {
        match self {
            BudgetRefusal::Exceeded { .. } => "budget_exceeded",
            BudgetRefusal::NeverFits { .. } => "budget_too_small",
            BudgetRefusal::Unpriced(_) => "model_unpriced",
        }
    }

    /// How long until retrying can help; `None` when it never will.
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            BudgetRefusal::Exceeded { reset, .. } => Some(*reset),
            _ => None,
        }
    }
}

impl fmt::Display for BudgetRefusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BudgetRefusal::Exceeded {
                period,
                budget,
                spent,
                needed,
                resets_at_ms,
                ..
            } => write!(
                f,
                "spend budget exceeded: this request may cost up to ${}, and ${} of the ${} {} budget is spent or reserved; it resets at {}",
                dollars(*needed),
                dollars(*spent),
                dollars(*budget),
                adjective(*period),
                period::iso8601(*resets_at_ms),
            ),
            BudgetRefusal::NeverFits {
                period,
                budget,
                needed,
            } => write!(
                f,
                "this request may cost up to ${}, more than the whole ${} {} budget, so it can never fit: lower max_tokens or shorten the prompt",
                dollars(*needed),
                dollars(*budget),
                adjective(*period),
            ),
            BudgetRefusal::Unpriced(NoPrice { provider, model }) => write!(
                f,
                "`{provider}/{model}`, which this route may use, has no price in [[prices]], so a spend budget cannot bound this request ([budgets] unpriced = \"refuse\")"
            ),
        }
    }
}

fn adjective(period: Period) -> &'static str {
    match period {
        Period::Day => "daily",
        Period::Month => "monthly",
    }
}

/// Micro-dollars as dollars with six decimals: `0.005000`.
pub fn dollars(micros: u64) -> String {
    format!("{}.{:06}", micros / 1_000_000, micros % 1_000_000)
}
