//! `GET /admin/breakers` and `POST /admin/breakers/reset`: the operator's view of every
//! deployment's breaker, and a way to close them by hand (after fixing a provider's key, say).

use std::time::Duration;

use axum::Json;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use serde::Deserialize;
use serde_json::{Value, json};
use tokio::time::Instant;

use super::Admin;
use crate::server::{ApiError, AppState};

/// Every breaker the gateway has used: state, failure counts, time to the next probe.
pub async fn list(_: Admin, State(state): State<AppState>) -> Json<Value> {
    let now = Instant::now();
    let breakers: Vec<Value> = state
        .health
        .report(now)
        .into_iter()
        .map(|report| {
            let view = report.view;
            let (provider, model) = (&report.id.provider, &report.id.model);
            // Per provider and model: every key's row shows the same counts.
            let retries = state.health.retry_budgets().counts(provider, model, now);
            let budget = state.config().retry.budget;
            json!({
                "provider": report.id.provider.as_str(),
                "model": report.id.model.as_str(),
                "key": report.id.key.as_deref(),
                "state": view.state.as_str(),
                "consecutive_failures": view.consecutive_failures,
                "window": {
                    "requests": view.window_requests,
                    "failures": view.window_failures,
                },
                "times_opened": view.times_opened,
                "probe_in_flight": view.probe_in_flight,
                "next_probe_in_ms": view.next_probe_in.map(ceil_ms),
                // This open's length, or the next one's: it grows while probes fail.
                "cooldown_ms": ceil_ms(view.cooldown),
                "benched_for_ms": view.benched_for.map(ceil_ms),
                "latency_ewma_ms": report.latency.map(|l| l.as_secs_f64() * 1e3),
                "retry_budget": {
                    "requests": retries.requests,
                    "retries": retries.retries,
                    "limit": (!budget.is_off()).then(|| budget.limit(retries.requests) as u64),
                },
            })
        })
        .collect();
    Json(json!({ "breakers": breakers }))
}

/// Which breakers a reset closes: all of them, or one provider's (and model's).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ResetFilter {
    provider: Option<String>,
    model: Option<String>,
}

/// Closes the breakers the query names (`?provider=a&model=m`), or all of them.
pub async fn reset(
    _: Admin,
    State(state): State<AppState>,
    filter: Result<Query<ResetFilter>, QueryRejection>,
) -> Result<Json<Value>, ApiError> {
    let Query(filter) = filter.map_err(|e| ApiError::InvalidRequest {
        message: e.body_text(),
        param: None,
    })?;
    let count = state
        .health
        .reset(filter.provider.as_deref(), filter.model.as_deref());
    export(&state);
    Ok(Json(json!({ "reset": count })))
}

/// Sets `switchyard_breaker_state` from the breakers, as a scrape reads it.
pub fn export(state: &AppState) {
    let states = state.health.states();
    state.telemetry.metrics.set_breakers(
        states
            .iter()
            .map(|(provider, model, gauge)| (provider.as_str(), model.as_str(), *gauge)),
    );
}

/// Whole milliseconds, rounded up: waiting that long is always enough.
fn ceil_ms(duration: Duration) -> u64 {
    u64::try_from(duration.as_nanos().div_ceil(1_000_000)).unwrap_or(u64::MAX)
}
