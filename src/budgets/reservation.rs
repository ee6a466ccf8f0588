//! A request's reserved spend, which settles at its cost or, dropped, stays charged whole.

use std::sync::Arc;

use super::dollars;
use super::memory::{Held, MemoryBudgets};
use super::price::Prices;
use super::redis::RedisBudgets;
use crate::config::{ModelName, ProviderId, RouteName};
use crate::providers::Usage;
use crate::telemetry::metrics::Metrics;

/// Where a reservation is held.
pub(super) enum Lease {
    Memory {
        budgets: MemoryBudgets,
        owner: Arc<str>,
        held: Held,
    },
    Redis {
        budgets: RedisBudgets,
        owner: Arc<str>,
        id: Arc<str>,
    },
}

/// Whose spend a reservation counts in the metrics.
pub(super) struct Tally {
    pub(super) metrics: Arc<Metrics>,
    pub(super) route: RouteName,
    pub(super) role: Arc<str>,
    pub(super) key: Option<Arc<str>>,
}

impl Tally {
    fn spent(&self, micros: u64) {
        self.metrics
            .budget_spend(self.route.as_str(), &self.role, self.key.as_deref(), micros);
    }
}

/// A request's reserved spend. [`Reservation::settle`] replaces it by the real cost;
/// dropped unsettled, it stays charged whole, so no path can forget and undercharge.
pub struct Reservation {
    pub(super) amount: u64,
    /// The most one attempt can cost; `amount` is a multiple of it on a hedged route.
    pub(super) per_attempt: u64,
    /// Charged on top of the served answer's cost: hedge racers cancelled after they went
    /// upstream, at their whole share, since what the provider billed them is unknown.
    pub(super) cancelled: u64,
    pub(super) remaining: Option<u64>,
    pub(super) lease: Lease,
    pub(super) prices: Arc<Prices>,
    pub(super) tally: Tally,
    pub(super) settled: bool,
}

impl Reservation {
    /// What was reserved, in micro-USD.
    pub fn amount(&self) -> u64 {
        self.amount
    }

    /// Micro-USD left of the tightest budget after this reservation.
    pub fn remaining(&self) -> Option<u64> {
        self.remaining
    }

    /// `x-switchyard-budget-remaining`: US dollars left of the tightest budget after this
    /// reservation.
    pub fn remaining_header(&self) -> Option<String> {
        self.remaining.map(dollars)
    }

    /// What an answer cost at the deployment that served it; `None` when it cannot be told
    /// (no usage reported, or an unpriced model), and the reservation should stand.
    pub fn cost_of(
        &self,
        provider: &ProviderId,
        model: &ModelName,
        usage: Option<Usage>,
    ) -> Option<u64> {
        let usage = usage?;
        self.prices
            .cost(
                provider,
                model,
                usage.prompt_tokens,
                usage.completion_tokens,
            )
            .ok()
    }

    /// Counts `attempts` hedge racers that were cancelled after going upstream: each is
    /// charged its whole share when the reservation settles.
    pub fn charge_cancelled(&mut self, attempts: usize) {
        let attempts = u64::try_from(attempts).unwrap_or(u64::MAX);
        self.cancelled = self.per_attempt.saturating_mul(attempts);
    }

    /// Replaces the reservation by `cost` (plus any cancelled racers' shares), returning what
    /// was unused at once.
    pub async fn settle(mut self, cost: u64) {
        let cost = cost.saturating_add(self.cancelled);
        self.settled = true;
        self.tally.spent(cost);
        match &self.lease {
            Lease::Memory {
                budgets,
                owner,
                held,
            } => budgets.settle(owner, *held, cost),
            // Boxed, as the other round trips on the request path are (see `Limits::admit`).
            Lease::Redis { budgets, owner, id } => Box::pin(budgets.settle(owner, id, cost)).await,
        }
    }

    /// Settles at `cost` when it is known, else keeps the whole reservation.
    pub async fn settle_or_keep(self, cost: Option<u64>) {
        if let Some(cost) = cost {
            self.settle(cost).await;
        }
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        if !self.settled {
            // Kept whole: the cost is unknown, and the budget must not be undercharged.
            self.tally.metrics.budgets.kept.inc();
            self.tally.spent(self.amount);
        }
    }
}
