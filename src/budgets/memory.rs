//! The in-process budget backend: exact, with a lock per owner so owners never contend.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use super::period::{Calendar, Period};
use super::{Budget, Verdict};

/// One owner's spend, reserved or settled, in the current day and month.
#[derive(Default)]
struct Account {
    day: u64,
    day_spent: u64,
    month: u64,
    month_spent: u64,
}

impl Account {
    /// Forgets a period that has ended.
    fn roll(&mut self, at: Calendar) {
        if self.day != at.day {
            self.day = at.day;
            self.day_spent = 0;
        }
        if self.month != at.month {
            self.month = at.month;
            self.month_spent = 0;
        }
    }
}

/// What a reservation holds, and in which periods, so settling adjusts the right ones.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Held {
    pub amount: u64,
    pub day: u64,
    pub month: u64,
}

/// Each owner's account, behind its own lock.
type Accounts = HashMap<Arc<str>, Arc<Mutex<Account>>>;

/// Spend for every owner, in this process.
#[derive(Clone, Default)]
pub struct MemoryBudgets {
    // The outer lock is held only to find or add an owner; each account has its own.
    owners: Arc<Mutex<Accounts>>,
}

impl MemoryBudgets {
    fn account(&self, owner: &Arc<str>) -> Arc<Mutex<Account>> {
        // Poison only means a panic elsewhere mid-update of plain counters; keep counting.
        let mut owners = self.owners.lock().unwrap_or_else(|e| e.into_inner());
        owners.entry(owner.clone()).or_default().clone()
    }

    /// Checks both periods and reserves `amount` in both, in one step under the owner's lock.
    pub fn reserve(
        &self,
        owner: &Arc<str>,
        amount: u64,
        budget: Budget,
        at: Calendar,
    ) -> (Verdict, Option<Held>) {
        let state = self.account(owner);
        let mut account = state.lock().unwrap_or_else(|e| e.into_inner());
        account.roll(at);
        let verdict = super::judge(
            amount,
            budget,
            account.day_spent,
            account.month_spent,
            [at.reset(Period::Day), at.reset(Period::Month)],
        );
        if !matches!(verdict, Verdict::Reserved { .. }) {
            return (verdict, None);
        }
        account.day_spent = account.day_spent.saturating_add(amount);
        account.month_spent = account.month_spent.saturating_add(amount);
        let held = Held {
            amount,
            day: at.day,
            month: at.month,
        };
        (verdict, Some(held))
    }

    /// Replaces a reservation by what the request cost, in the periods it was made in; a
    /// period that has ended since is left alone.
    pub fn settle(&self, owner: &Arc<str>, held: Held, cost: u64) {
        let state = self.account(owner);
        let mut account = state.lock().unwrap_or_else(|e| e.into_inner());
        if account.day == held.day {
            account.day_spent = account
                .day_spent
                .saturating_sub(held.amount)
                .saturating_add(cost);
        }
        if account.month == held.month {
            account.month_spent = account
                .month_spent
                .saturating_sub(held.amount)
                .saturating_add(cost);
        }
    }

    /// What `owner` has spent or reserved in the day and month of `at`.
    pub fn spent(&self, owner: &Arc<str>, at: Calendar) -> (u64, u64) {
        let state = self.account(owner);
        let mut account = state.lock().unwrap_or_else(|e| e.into_inner());
        account.roll(at);
        (account.day_spent, account.month_spent)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Barrier;

    use super::*;

    const NOV_30: u64 = 1_796_057_213_000;

    fn day_budget(micros: u64) -> Budget {
        Budget {
            per_day: Some(micros),
            per_month: None,
        }
    }

    #[test]
    fn fifty_threads_at_once_reserve_exactly_what_fits() {
        let budgets = MemoryBudgets::default();
        let owner: Arc<str> = Arc::from("key:k");
        let start = Arc::new(Barrier::new(50));
        let threads: Vec<_> = (0..50)
            .map(|_| {
                let (budgets, owner, start) = (budgets.clone(), owner.clone(), start.clone());
                std::thread::spawn(move || {
                    start.wait();
                    let at = Calendar::at(NOV_30);
                    let (verdict, _) = budgets.reserve(&owner, 5_000, day_budget(102_000), at);
                    matches!(verdict, Verdict::Reserved { .. })
                })
            })
            .collect();
        let admitted = threads
            .into_iter()
            .map(|t| t.join().unwrap())
            .filter(|admitted| *admitted)
            .count();
        assert_eq!(admitted, 20);
        assert_eq!(budgets.spent(&owner, Calendar::at(NOV_30)).0, 100_000);
    }

    #[test]
    fn settling_returns_the_unused_part_and_a_new_day_starts_empty() {
        let budgets = MemoryBudgets::default();
        let owner: Arc<str> = Arc::from("user:u");
        let at = Calendar::at(NOV_30);
        let (_, held) = budgets.reserve(&owner, 10_000, day_budget(25_000), at);
        let (_, second) = budgets.reserve(&owner, 10_000, day_budget(25_000), at);
        let (third, none) = budgets.reserve(&owner, 10_000, day_budget(25_000), at);
        assert!(matches!(
            third,
            Verdict::Exceeded {
                period: Period::Day,
                spent: 20_000,
                ..
            }
        ));
        assert!(none.is_none());
        budgets.settle(&owner, held.unwrap(), 2_000);
        budgets.settle(&owner, second.unwrap(), 2_000);
        assert_eq!(budgets.spent(&owner, at), (4_000, 4_000));
        let (fits, _) = budgets.reserve(&owner, 10_000, day_budget(25_000), at);
        assert!(matches!(
            fits,
            Verdict::Reserved {
                remaining: Some(11_000)
            }
        ));
        let tomorrow = Calendar::at(at.end_ms(Period::Day));
        assert_eq!(budgets.spent(&owner, tomorrow).0, 0);
    }

    #[test]
    fn a_reservation_larger_than_the_whole_budget_never_fits() {
        let budgets = MemoryBudgets::default();
        let owner: Arc<str> = Arc::from("user:u");
        let budget = Budget {
            per_day: Some(50_000),
            per_month: Some(40_000),
        };
        let (verdict, _) = budgets.reserve(&owner, 45_000, budget, Calendar::at(NOV_30));
        assert_eq!(
            verdict,
            Verdict::NeverFits {
                period: Period::Month,
                budget: 40_000
            }
        );
        assert_eq!(budgets.spent(&owner, Calendar::at(NOV_30)), (0, 0));
    }
}
