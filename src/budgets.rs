//! Spend budgets: US dollars per caller per UTC day and month, reserved before the call and
//! settled after it.
//!
//! Admission reserves the most a request can cost (its prompt estimated from the body, its
//! output cap, priced at the dearest deployment its route may use) in one atomic step that
//! checks both periods and reserves in both: a per-owner lock in memory, or one Lua script
//! in Redis. Concurrent requests therefore never overshoot a budget, as charging after the
//! answer would. When the answer ends, [`Reservation::settle`] replaces the reservation by
//! the real cost from the reported usage; a reservation dropped unsettled (a stream cut
//! mid-answer, a client gone) stays charged whole, the safe side of an unknown cost.
//!
//! Money is kept in whole micro-dollars (`u64`), so Redis adds it up exactly.

mod memory;
pub mod period;
pub mod price;
mod redis;
mod refusal;
mod reservation;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use crate::auth::Caller;
use crate::config::{Config, FailMode, Route};
use crate::limits::Limits;
use crate::providers::{Operation, RequestBody};
use crate::telemetry::metrics::Metrics;

pub use memory::{Held, MemoryBudgets};
pub use period::{Calendar, Period};
pub use price::{NoPrice, Prices, TokenEstimate};
pub use redis::RedisBudgets;
pub use refusal::{BudgetRefusal, dollars};
pub use reservation::Reservation;
use reservation::{Lease, Tally};

/// A caller's budgets in micro-USD: its role's, with its key's overrides on top.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Budget {
    pub per_day: Option<u64>,
    pub per_month: Option<u64>,
}

impl Budget {
    /// Whether no budget applies.
    pub fn is_unlimited(&self) -> bool {
        self.per_day.is_none() && self.per_month.is_none()
    }

    /// What is left of the tightest budget once `day` and `month` are spent.
    fn remaining(&self, day: u64, month: u64) -> Option<u64> {
        let day = self.per_day.map(|b| b.saturating_sub(day));
        let month = self.per_month.map(|b| b.saturating_sub(month));
        match (day, month) {
            (Some(d), Some(m)) => Some(d.min(m)),
            (d, m) => d.or(m),
        }
    }
}

/// What a backend decided about one reservation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Reserved; what is left of the tightest budget afterwards.
    Reserved { remaining: Option<u64> },
    /// It does not fit what is left of `period`'s budget until it resets.
    Exceeded {
        period: Period,
        budget: u64,
        spent: u64,
        reset: Duration,
    },
    /// It is larger than `period`'s whole budget: it can never fit.
    NeverFits { period: Period, budget: u64 },
}

/// The one decision both backends make (the Lua script mirrors it): a month that cannot
/// take the request is named before a day, since waiting for the day's reset would not help.
fn judge(amount: u64, budget: Budget, day: u64, month: u64, resets: [Duration; 2]) -> Verdict {
    let periods = [
        (Period::Month, budget.per_month, month, resets[1]),
        (Period::Day, budget.per_day, day, resets[0]),
    ];
    for (period, limit, _, _) in periods {
        if let Some(limit) = limit.filter(|limit| amount > *limit) {
            return Verdict::NeverFits {
                period,
                budget: limit,
            };
        }
    }
    for (period, limit, spent, reset) in periods {
        if let Some(limit) = limit.filter(|limit| spent.saturating_add(amount) > *limit) {
            return Verdict::Exceeded {
                period,
                budget: limit,
                spent,
                reset,
            };
        }
    }
    Verdict::Reserved {
        remaining: budget.remaining(day.saturating_add(amount), month.saturating_add(amount)),
    }
}

/// Why a reservation was not made.
#[derive(Debug)]
pub enum BudgetError {
    /// The budget refuses it: a 402.
    Refused(BudgetRefusal),
    /// Redis could not be asked and `[limits] on_backend_error = "closed"`: a 503.
    Unavailable,
}

/// What one request asks of its caller's budget.
pub struct Ask<'a> {
    pub caller: &'a Caller,
    pub request_id: &'a str,
    pub route: &'a Route,
    /// The first step the chain may use (1 when step 0 is skipped on demand).
    pub first_step: usize,
    pub body: &'a RequestBody,
    pub operation: Operation,
}

#[derive(Clone)]
enum Backend {
    Memory(MemoryBudgets),
    Redis {
        shared: RedisBudgets,
        /// Counts this instance's spend while Redis is unreachable and limits fail open.
        local: MemoryBudgets,
    },
}

/// Every caller's budgets, and the backend that counts their spend.
pub struct Budgets {
    roles: HashMap<String, Budget>,
    backend: Backend,
    fail_mode: FailMode,
    prices: Arc<Prices>,
    default_max_tokens: u64,
    metrics: Arc<Metrics>,
}

impl Budgets {
    /// The budgets of `config`, on the limiter's Redis when limits live there.
    pub fn new(config: &Config, limits: &Limits, metrics: Arc<Metrics>) -> Budgets {
        let backend = match limits.redis() {
            None => Backend::Memory(MemoryBudgets::default()),
            Some(limiter) => Backend::Redis {
                shared: RedisBudgets::on(limiter, held_ttl(config)),
                local: MemoryBudgets::default(),
            },
        };
        Budgets {
            roles: roles_of(config),
            backend,
            fail_mode: config.limits.on_backend_error,
            prices: Arc::new(Prices::of(config)),
            default_max_tokens: config.budgets.default_max_tokens,
            metrics,
        }
    }

    /// A reloaded config's budgets on this one's backend: every spend is kept.
    pub fn reconfigured(&self, config: &Config) -> Budgets {
        Budgets {
            roles: roles_of(config),
            backend: self.backend.clone(),
            fail_mode: config.limits.on_backend_error,
            prices: Arc::new(Prices::of(config)),
            default_max_tokens: config.budgets.default_max_tokens,
            metrics: self.metrics.clone(),
        }
    }

    /// The caller's budgets: its role's, each replaced by its key's override where it has one.
    pub fn budget(&self, caller: &Caller) -> Budget {
        let role = self.roles.get(&*caller.role).copied().unwrap_or_default();
        let overrides = caller.overrides();
        Budget {
            per_day: overrides.budget_per_day_micros.or(role.per_day),
            per_month: overrides.budget_per_month_micros.or(role.per_month),
        }
    }

    /// Reserves the most `ask` can cost; `None` when no budget applies to its caller.
    pub async fn reserve(&self, ask: Ask<'_>) -> Result<Option<Reservation>, BudgetError> {
        let budget = self.budget(ask.caller);
        if budget.is_unlimited() || ask.operation == Operation::CountTokens {
            return Ok(None);
        }
        let tokens = price::estimate(ask.body, ask.operation, self.default_max_tokens);
        let per_attempt = self
            .prices
            .most_on_route(ask.route, ask.first_step, tokens)
            .map_err(|no_price| self.refused(BudgetRefusal::Unpriced(no_price)))?;
        // A hedged route may have step 0 and `max` hedges in flight at once, and a provider
        // may bill a cancelled attempt, so each racer is reserved for.
        let racers = match ask.route.hedge {
            Some(hedge) if ask.first_step == 0 => 1 + u64::from(hedge.max),
            _ => 1,
        };
        let amount = per_attempt.saturating_mul(racers);
        let owner = owner_of(ask.caller);
        let (verdict, lease) = match &self.backend {
            Backend::Memory(budgets) => memory_reserve(budgets, &owner, amount, budget),
            Backend::Redis { shared, local } => {
                // Boxed, as the rate limits' round trip is (see `Limits::admit`).
                match Box::pin(shared.reserve(&owner, ask.request_id, amount, budget)).await {
                    Ok(verdict) => {
                        let lease = Lease::Redis {
                            budgets: shared.clone(),
                            owner: owner.clone(),
                            id: Arc::from(ask.request_id),
                        };
                        (verdict, Some(lease))
                    }
                    Err(error) => {
                        self.metrics.limit_backend_errors.inc();
                        tracing::warn!(error = error.class(), "budget backend unavailable");
                        if error.may_have_run() {
                            // The script may have reserved and only its reply been lost.
                            let (shared, owner, id) =
                                (shared.clone(), owner.clone(), ask.request_id.to_owned());
                            tokio::spawn(async move { shared.settle(&owner, &id, 0).await });
                        }
                        match self.fail_mode {
                            FailMode::Open => memory_reserve(local, &owner, amount, budget),
                            FailMode::Closed => return Err(BudgetError::Unavailable),
                        }
                    }
                }
            }
        };
        let remaining = match verdict {
            Verdict::Reserved { remaining } => remaining,
            Verdict::Exceeded {
                period,
                budget,
                spent,
                reset,
            } => {
                return Err(self.refused(BudgetRefusal::Exceeded {
                    period,
                    budget,
                    spent,
                    needed: amount,
                    reset,
                    resets_at_ms: Calendar::now().now_ms.saturating_add(millis(reset)),
                }));
            }
            Verdict::NeverFits { period, budget } => {
                return Err(self.refused(BudgetRefusal::NeverFits {
                    period,
                    budget,
                    needed: amount,
                }));
            }
        };
        let Some(lease) = lease else {
            return Ok(None);
        };
        Ok(Some(Reservation {
            amount,
            per_attempt,
            cancelled: 0,
            remaining,
            lease,
            prices: self.prices.clone(),
            tally: Tally {
                metrics: self.metrics.clone(),
                route: ask.route.name.clone(),
                role: if self.roles.contains_key(&*ask.caller.role) {
                    ask.caller.role.clone()
                } else {
                    Arc::from(crate::telemetry::metrics::OTHER)
                },
                key: ask.caller.key.as_ref().map(|k| Arc::from(k.id.as_str())),
            },
            settled: false,
        }))
    }

    fn refused(&self, refusal: BudgetRefusal) -> BudgetError {
        self.metrics.budgets.refused(refusal.kind());
        BudgetError::Refused(refusal)
    }
}

fn memory_reserve(
    budgets: &MemoryBudgets,
    owner: &Arc<str>,
    amount: u64,
    budget: Budget,
) -> (Verdict, Option<Lease>) {
    let (verdict, held) = budgets.reserve(owner, amount, budget, Calendar::now());
    let lease = held.map(|held| Lease::Memory {
        budgets: budgets.clone(),
        owner: owner.clone(),
        held,
    });
    (verdict, lease)
}

/// Whose spend a request counts as: its virtual key's, else its user's.
fn owner_of(caller: &Caller) -> Arc<str> {
    match &caller.key {
        Some(key) => Arc::from(format!("key:{}", key.id)),
        None => Arc::from(format!("user:{}", caller.user)),
    }
}

/// How long an unsettled reservation's marker lives in Redis: past any request's deadline,
/// so that a settlement always finds it.
fn held_ttl(config: &Config) -> Duration {
    config.retry.request_deadline + Duration::from_secs(600)
}

fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

fn roles_of(config: &Config) -> HashMap<String, Budget> {
    config
        .roles
        .iter()
        .map(|r| {
            let budget = Budget {
                per_day: r.budget_per_day_micros,
                per_month: r.budget_per_month_micros,
            };
            (r.name.clone(), budget)
        })
        .collect()
}

#[cfg(test)]
mod tests;
