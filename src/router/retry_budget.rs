//! The retry budget's counts (Envoy's, per deployment): for each provider and model, the
//! upstream attempts that reached it and the retries in place its failures caused, over the
//! last [`WINDOW`] in one-second buckets. The policy ([`RetryBudget`]) comes from the
//! request's config, so a reload changes it at once and keeps every count.
//!
//! The budget governs retries **in place** only: an attempt that goes to the same deployment
//! (provider and model, with any of its keys) as the request's last upstream attempt. Those
//! are what multiply the load on a provider that is failing. Moving on to another deployment
//! adds nothing to the failing one, so it is never counted or refused here: the chain's
//! length, `max_attempts`, the deadline and the target's own breaker bound it. Skipped steps
//! (an open breaker, a benched key) never reach upstream, so they are neither requests nor
//! retries. The counts are this instance's own.

use std::sync::{Mutex, MutexGuard};

use foldhash::{HashMap, HashMapExt};
use tokio::time::Instant;

use super::classify::FailureClass;
use crate::config::retry_budget::{RetryBudget, WINDOW};
use crate::config::{Deployment, ModelName, ProviderId};
use crate::telemetry::AttemptRecord;

/// One bucket per second of the window.
const SECONDS: usize = WINDOW.as_secs() as usize;

/// Clients can name any `provider/model`; past this many, idle windows are forgotten, and
/// if that is not enough, new deployments go uncounted, and their retries unrefused, as
/// they were before the budget.
const MAX_TRACKED: usize = 10_000;

/// One second's counts.
#[derive(Clone, Copy, Debug, Default)]
struct Bucket {
    /// Seconds since the counts' epoch: which second this bucket holds now.
    second: u64,
    requests: u64,
    retries: u64,
}

/// One deployment's last [`SECONDS`] seconds, as a ring.
#[derive(Debug, Default)]
struct Window {
    buckets: [Bucket; SECONDS],
}

impl Window {
    /// The bucket of `second`, emptied first if it still holds an older second.
    fn bucket(&mut self, second: u64) -> &mut Bucket {
        let bucket = &mut self.buckets[(second % SECONDS as u64) as usize];
        if bucket.second != second {
            *bucket = Bucket {
                second,
                ..Bucket::default()
            };
        }
        bucket
    }

    /// Requests and retries over the seconds `second - 9 ..= second`.
    fn totals(&self, second: u64) -> BudgetCounts {
        let oldest = second.saturating_sub(SECONDS as u64 - 1);
        self.buckets
            .iter()
            .filter(|b| (oldest..=second).contains(&b.second))
            .fold(BudgetCounts::default(), |sum, b| BudgetCounts {
                requests: sum.requests + b.requests,
                retries: sum.retries + b.retries,
            })
    }
}

/// A deployment's counts over the window.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BudgetCounts {
    /// Upstream attempts that reached it: first attempts and retries alike.
    pub requests: u64,
    /// Retries its failures caused.
    pub retries: u64,
}

/// Every deployment's window; one per gateway, in its health table.
#[derive(Debug)]
pub struct RetryBudgets {
    /// Second 0 of every bucket.
    epoch: Instant,
    /// Behind a sync mutex held for one map operation, never across an await.
    windows: Mutex<HashMap<(ProviderId, ModelName), Window>>,
}

impl Default for RetryBudgets {
    fn default() -> RetryBudgets {
        RetryBudgets::new()
    }
}

impl RetryBudgets {
    /// Empty windows, counting from now.
    pub fn new() -> RetryBudgets {
        RetryBudgets {
            epoch: Instant::now(),
            windows: Mutex::new(HashMap::new()),
        }
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<(ProviderId, ModelName), Window>> {
        // Poison only means a panic between two counter updates; the counts are still whole.
        self.windows.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn second(&self, now: Instant) -> u64 {
        now.saturating_duration_since(self.epoch).as_secs()
    }

    /// Counts one upstream attempt that reached `provider`'s `model`.
    pub fn count_request(&self, provider: &ProviderId, model: &ModelName, now: Instant) {
        let second = self.second(now);
        let mut windows = self.lock();
        if let Some(window) = window_of(&mut windows, provider, model, second) {
            window.bucket(second).requests += 1;
        }
    }

    /// Whether `budget` lets `provider`'s `model` cause one more retry now, and if so counts
    /// it, under one hold of the lock, so concurrent retries never overshoot the budget.
    pub fn try_retry(
        &self,
        provider: &ProviderId,
        model: &ModelName,
        budget: &RetryBudget,
        now: Instant,
    ) -> bool {
        let second = self.second(now);
        let mut windows = self.lock();
        let Some(window) = window_of(&mut windows, provider, model, second) else {
            return true;
        };
        let counts = window.totals(second);
        let allowed = budget.allows(counts.requests, counts.retries);
        if allowed {
            window.bucket(second).retries += 1;
        }
        allowed
    }

    /// Whether [`RetryBudgets::try_retry`] would allow a retry now, without counting one.
    pub fn would_allow(
        &self,
        provider: &ProviderId,
        model: &ModelName,
        budget: &RetryBudget,
        now: Instant,
    ) -> bool {
        let counts = self.counts(provider, model, now);
        budget.allows(counts.requests, counts.retries)
    }

    /// A deployment's requests and retries over the window now.
    pub fn counts(&self, provider: &ProviderId, model: &ModelName, now: Instant) -> BudgetCounts {
        let key = (provider.clone(), model.clone());
        self.lock()
            .get(&key)
            .map(|w| w.totals(self.second(now)))
            .unwrap_or_default()
    }
}

/// `provider`'s `model`'s window, made on first use; `None` when the table is full.
fn window_of<'a>(
    windows: &'a mut HashMap<(ProviderId, ModelName), Window>,
    provider: &ProviderId,
    model: &ModelName,
    second: u64,
) -> Option<&'a mut Window> {
    let key = (provider.clone(), model.clone());
    if !windows.contains_key(&key) && windows.len() >= MAX_TRACKED {
        windows.retain(|_, w| w.totals(second) != BudgetCounts::default());
        if windows.len() >= MAX_TRACKED {
            return None;
        }
    }
    Some(windows.entry(key).or_default())
}

/// Whether the budget asks only, or counts the retry it allows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Spend {
    /// The retry goes now: count it if it is allowed.
    Charge,
    /// The retry would go after a wait (a backoff): only ask, so a refused one is not waited
    /// for; it is charged when it goes.
    Peek,
}

/// Whether the budget refuses the chain's next upstream attempt, which goes to `next`. Only a
/// retry in place can be refused: the request's first attempt, and a move to any other
/// deployment, always go. A refusal is recorded in `attempts`, named after the deployment
/// whose failures (and budget) it was; the chain then moves on without it.
pub fn refuses_retry_in_place(
    budgets: &RetryBudgets,
    budget: &RetryBudget,
    attempts: &mut Vec<AttemptRecord>,
    next: &Deployment,
    now: Instant,
    spend: Spend,
) -> bool {
    let Some(failed) = attempts.iter().rev().find(|a| a.reached_upstream()) else {
        return false;
    };
    if failed.provider != next.provider || failed.model != next.model {
        return false;
    }
    let (provider, model) = (&failed.provider, &failed.model);
    let allowed = match spend {
        Spend::Charge => budgets.try_retry(provider, model, budget, now),
        Spend::Peek => budgets.would_allow(provider, model, budget, now),
    };
    if allowed {
        return false;
    }
    let refusal = AttemptRecord {
        step: failed.step,
        provider: provider.clone(),
        model: model.clone(),
        failure: Some(FailureClass::RetryBudgetExhausted),
        status: None,
        latency: std::time::Duration::ZERO,
        hedge: false,
        span: None,
    };
    attempts.push(refusal);
    true
}

/// Whether the budget had the last word: after a refused retry in place, no other attempt
/// went upstream, so the client's answer is the refusal's.
pub fn ended_by_refusal(attempts: &[AttemptRecord]) -> bool {
    attempts
        .iter()
        .rev()
        .find(|a| a.reached_upstream() || a.failure == Some(FailureClass::RetryBudgetExhausted))
        .is_some_and(|a| a.failure == Some(FailureClass::RetryBudgetExhausted))
}

#[cfg(test)]
mod tests;
