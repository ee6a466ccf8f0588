//! The shared budget backend: one Lua script per reservation and one per settlement, on the
//! limiter's Redis connection and key prefix.
//!
//! Every instance runs the same script against the same keys, and Redis runs scripts one at
//! a time, so the check and the reservation are one atomic step across the whole cluster.
//! Both scripts are idempotent by request id, so a command sent again after a broken
//! connection never reserves or releases twice.

mod scripts;

use std::sync::Arc;
use std::time::Duration;

use redis::Script;

use super::{Budget, Period, Verdict};
use crate::limits::{RedisFailure, RedisLimiter};

/// How long a settled marker lives: far longer than a retried reservation can come late.
const SETTLED_TTL: Duration = Duration::from_secs(600);
/// How long a counter outlives its period, so a settlement just after midnight finds the
/// day it reserved in.
const GRACE: Duration = Duration::from_secs(3600);
/// The largest reservation sent to Redis: past any budget (a budget is at most 10^15
/// micro-dollars), and exact in Lua's numbers.
const MAX_AMOUNT: u64 = 1 << 52;

/// Spend counters in Redis, shared by every instance that names the same Redis and prefix.
#[derive(Clone)]
pub struct RedisBudgets {
    limiter: RedisLimiter,
    /// How long an unsettled reservation's marker lives.
    held_ttl: Duration,
    reserve: Arc<Script>,
    settle: Arc<Script>,
}

impl RedisBudgets {
    /// Budgets on `limiter`'s connection and prefix; `held_ttl` must outlast any request.
    pub fn on(limiter: RedisLimiter, held_ttl: Duration) -> RedisBudgets {
        RedisBudgets {
            limiter,
            held_ttl,
            reserve: Arc::new(Script::new(&scripts::reserve())),
            settle: Arc::new(Script::new(scripts::SETTLE)),
        }
    }

    fn keys(&self, owner: &str, id: &str) -> [String; 3] {
        [
            self.limiter.key(owner, "spend:day"),
            self.limiter.key(owner, "spend:month"),
            self.limiter.key(owner, &format!("spend:held:{id}")),
        ]
    }

    /// Checks both budgets and reserves `amount` in both, in one script run. Run again for
    /// the same `id`, it reserves nothing more and admits.
    pub async fn reserve(
        &self,
        owner: &str,
        id: &str,
        amount: u64,
        budget: Budget,
    ) -> Result<Verdict, RedisFailure> {
        let amount = amount.min(MAX_AMOUNT);
        let limit = |limit: Option<u64>| limit.map_or(-1, |l| l.min(MAX_AMOUNT) as i64);
        let mut invocation = self.reserve.prepare_invoke();
        for key in self.keys(owner, id) {
            invocation.key(key);
        }
        invocation
            .arg(amount)
            .arg(limit(budget.per_day))
            .arg(limit(budget.per_month))
            .arg(millis(self.held_ttl))
            .arg(millis(GRACE));
        let answer: (i64, String, i64, i64, i64, i64) = self
            .limiter
            .run(|mut c| {
                let invocation = &invocation;
                async move { invocation.invoke_async(&mut c).await }
            })
            .await?;
        let (_, reason, day, month, day_reset, month_reset) = answer;
        let (day, month) = (day.max(0) as u64, month.max(0) as u64);
        let reset = |ms: i64| Duration::from_millis(ms.max(0) as u64);
        Ok(match reason.as_str() {
            "ok" => Verdict::Reserved {
                remaining: budget.remaining(day, month),
            },
            "never_month" | "never_day" => {
                let (period, budget) = match reason.as_str() {
                    "never_month" => (Period::Month, budget.per_month),
                    _ => (Period::Day, budget.per_day),
                };
                Verdict::NeverFits {
                    period,
                    budget: budget.unwrap_or(0),
                }
            }
            "month" => Verdict::Exceeded {
                period: Period::Month,
                budget: budget.per_month.unwrap_or(0),
                spent: month,
                reset: reset(month_reset),
            },
            _ => Verdict::Exceeded {
                period: Period::Day,
                budget: budget.per_day.unwrap_or(0),
                spent: day,
                reset: reset(day_reset),
            },
        })
    }

    /// Replaces request `id`'s reservation by `cost`; a failure is logged, and the
    /// reservation then stays charged whole.
    pub async fn settle(&self, owner: &str, id: &str, cost: u64) {
        if let Err(error) = self.try_settle(owner, id, cost).await {
            tracing::warn!(
                error = error.class(),
                "could not settle a spend reservation in redis: it stays reserved"
            );
        }
    }

    /// [`RedisBudgets::settle`], saying whether Redis answered and whether a reservation
    /// was there to settle.
    pub async fn try_settle(&self, owner: &str, id: &str, cost: u64) -> Result<bool, RedisFailure> {
        let mut invocation = self.settle.prepare_invoke();
        for key in self.keys(owner, id) {
            invocation.key(key);
        }
        invocation
            .arg(cost.min(MAX_AMOUNT))
            .arg(millis(SETTLED_TTL));
        let settled: i64 = self
            .limiter
            .run(|mut c| {
                let invocation = &invocation;
                async move { invocation.invoke_async(&mut c).await }
            })
            .await?;
        Ok(settled == 1)
    }
}

fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}
