//! `GET /admin/budgets`: the retry budget (its settings, and each deployment's retries in its
//! window now) and the hedge budget (its share, and the routes that hedge).

use std::collections::BTreeMap;

use axum::Json;
use axum::extract::State;
use serde_json::{Value, json};
use tokio::time::Instant;

use super::Admin;
use crate::config::HedgeDelay;
use crate::server::AppState;

/// The retry and hedge budgets as configured, with the retry budget's live counts.
pub async fn show(_: Admin, State(state): State<AppState>) -> Json<Value> {
    let now = Instant::now();
    let config = state.config();
    let budget = config.retry.budget;
    // A breaker is per key; a retry budget is per provider and model.
    let mut deployments = BTreeMap::new();
    for report in state.health.report(now) {
        let (provider, model) = (&report.id.provider, &report.id.model);
        let key = (provider.as_str().to_owned(), model.as_str().to_owned());
        deployments.entry(key).or_insert_with(|| {
            let counts = state.health.retry_budgets().counts(provider, model, now);
            json!({
                "provider": provider.as_str(),
                "model": model.as_str(),
                "requests": counts.requests,
                "retries": counts.retries,
                "limit": (!budget.is_off()).then(|| budget.limit(counts.requests) as u64),
            })
        });
    }
    let hedging: Vec<Value> = config
        .routes
        .iter()
        .filter_map(|route| {
            let hedge = route.hedge?;
            let after = match hedge.after {
                HedgeDelay::Fixed(wait) => format!("{}ms", wait.as_millis()),
                HedgeDelay::Percentile(p) => format!("p{p}"),
            };
            Some(json!({ "route": route.name.as_str(), "after": after, "max": hedge.max }))
        })
        .collect();
    Json(json!({
        "retry": {
            "budget_percent": budget.percent(),
            "min_retries_per_second": budget.min_per_second(),
            "off": budget.is_off(),
            "deployments": deployments.into_values().collect::<Vec<_>>(),
        },
        "hedge": {
            "budget_percent": config.retry.hedge_budget_percent,
            "routes": hedging,
        },
    }))
}
