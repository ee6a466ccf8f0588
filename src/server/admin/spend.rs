//! `GET /admin/spend`: what each virtual key, each role and each keyless user spent today and
//! this month (UTC), beside the budgets that apply.
//!
//! The figures are the settled costs the request log records (`cost_usd`), so they hold
//! across restarts and, on a shared store, across instances. The budgets themselves count
//! reservations as well, so a budget may refuse a request a little before these totals
//! reach it. The log is read a day at a time, so a month's rows are never held at once.

use std::collections::BTreeMap;

use axum::Json;
use axum::extract::State;
use serde_json::{Value, json};

use super::Admin;
use crate::auth::usd;
use crate::budgets::period::iso8601;
use crate::calendar::{civil_from_days, days_from_civil};
use crate::server::{ApiError, AppState};
use crate::store::request_log::LogQuery;
use crate::store::{VirtualKey, now_ms};

const DAY_MS: i64 = 86_400_000;

/// Micro-dollars spent today and this month.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Spent {
    day: u64,
    month: u64,
}

impl Spent {
    fn add(&mut self, micros: u64, today: bool) {
        self.month = self.month.saturating_add(micros);
        if today {
            self.day = self.day.saturating_add(micros);
        }
    }

    fn json(self) -> Value {
        json!({ "day_usd": usd::to_json(self.day), "month_usd": usd::to_json(self.month) })
    }
}

/// Spend by key, by keyless user and by role, with each one's budgets.
pub async fn report(_: Admin, State(state): State<AppState>) -> Result<Json<Value>, ApiError> {
    let now = now_ms();
    let today_start = now.div_euclid(DAY_MS) * DAY_MS;
    // The clock's day always has a date; without one, the month is counted from today.
    let month_start = civil_from_days(now.div_euclid(DAY_MS))
        .and_then(|(year, month, _)| days_from_civil(year, month, 1))
        .map_or(today_start, |day| day * DAY_MS);

    let mut by_key: BTreeMap<String, Spent> = BTreeMap::new();
    let mut by_user: BTreeMap<String, Spent> = BTreeMap::new();
    let mut day_start = month_start;
    while day_start <= now {
        let query = LogQuery {
            since_ms: Some(day_start),
            until_ms: Some(day_start + DAY_MS),
            ..LogQuery::default()
        };
        let rows = state.store.query_log(query).await.map_err(unreadable)?;
        let today = day_start == today_start;
        for row in rows {
            let Some(micros) = row.cost_usd.map(micros_of).filter(|m| *m > 0) else {
                continue;
            };
            match (row.key_id, row.user) {
                (Some(key), _) => by_key.entry(key).or_default().add(micros, today),
                (None, Some(user)) => by_user.entry(user).or_default().add(micros, today),
                (None, None) => by_user.entry(String::new()).or_default().add(micros, today),
            }
        }
        day_start += DAY_MS;
    }

    let keys = state.store.virtual_keys().await.map_err(unreadable)?;
    let config = state.config();
    let role_budget = |role: &str| {
        config
            .roles
            .iter()
            .find(|r| r.name == role)
            .map(|r| (r.budget_per_day_micros, r.budget_per_month_micros))
            .unwrap_or_default()
    };
    let mut by_role: BTreeMap<String, Spent> = config
        .roles
        .iter()
        .map(|r| (r.name.clone(), Spent::default()))
        .collect();
    let mut key_rows = Vec::new();
    for key in &keys {
        let spent = by_key.remove(&key.id).unwrap_or_default();
        if key.revoked_ms.is_some() && spent.month == 0 {
            continue;
        }
        let role = by_role.entry(key.role.clone()).or_default();
        role.add(spent.month - spent.day, false);
        role.add(spent.day, true);
        key_rows.push(key_row(key, spent, role_budget(&key.role), now));
    }
    // Keys spent on this month but gone from the store since.
    for (id, spent) in by_key {
        let mut row = spent.json();
        row["id"] = json!(id);
        row["state"] = json!("deleted");
        key_rows.push(row);
    }
    let roles: Vec<Value> = by_role
        .into_iter()
        .map(|(name, spent)| {
            let (day, month) = role_budget(&name);
            let mut row = spent.json();
            row["role"] = json!(name);
            // A role's budgets apply to each of its callers, not to the role's total.
            row["budget_per_day_per_caller"] = json!(day.map(usd::to_json));
            row["budget_per_month_per_caller"] = json!(month.map(usd::to_json));
            row
        })
        .collect();
    let users: Vec<Value> = by_user
        .into_iter()
        .map(|(user, spent)| {
            let mut row = spent.json();
            row["user"] = json!(user);
            row
        })
        .collect();
    let day = iso8601(u64::try_from(today_start).unwrap_or(0));
    let month = iso8601(u64::try_from(month_start).unwrap_or(0));
    Ok(Json(json!({
        "day": day.get(..10),
        "month": month.get(..7),
        "as_of_ms": now,
        "source": "request_log",
        "keys": key_rows,
        "roles": roles,
        "users": users,
    })))
}

/// A key's spend beside its budgets: its own, else its role's.
fn key_row(key: &VirtualKey, spent: Spent, role: (Option<u64>, Option<u64>), now: i64) -> Value {
    let day = key.limits.budget_per_day_micros.or(role.0);
    let month = key.limits.budget_per_month_micros.or(role.1);
    let mut row = spent.json();
    row["id"] = json!(key.id);
    row["user"] = json!(key.user);
    row["role"] = json!(key.role);
    row["state"] = json!(key.state(now));
    row["budget_per_day"] = json!(day.map(usd::to_json));
    row["budget_per_month"] = json!(month.map(usd::to_json));
    // The share of the tighter budget used, for a bar: 1 when spent whole.
    let share = |spent: u64, budget: Option<u64>| {
        budget.filter(|b| *b > 0).map(|b| spent as f64 / b as f64)
    };
    row["day_used"] = json!(share(spent.day, day));
    row["month_used"] = json!(share(spent.month, month));
    row
}

/// Dollars as whole micro-dollars; the log's costs are never negative.
fn micros_of(usd: f64) -> u64 {
    if usd.is_finite() && usd > 0.0 {
        (usd * 1e6).round() as u64
    } else {
        0
    }
}

fn unreadable(error: crate::store::StoreError) -> ApiError {
    tracing::error!(%error, "admin: cannot read spend");
    ApiError::Internal("the request log cannot be read")
}
