//! `GET /v1/scorecard` (JSON, from the stored request log) and `GET /dashboard` (one page,
//! embedded in the binary, that draws the scorecard).

use axum::Json;
use axum::extract::State;
use axum::http::header;
use axum::response::{IntoResponse, Response};

use super::{ApiError, AppState};
use crate::store::KeyState;
use crate::store::now_ms;
use crate::store::request_log::LogQuery;
use crate::telemetry::scorecard::{self, LiveState, Scorecard};

/// The dashboard page: plain SVG drawn by inline script, no external assets.
const DASHBOARD: &str = include_str!("dashboard.html");

/// The scorecard over 5 m, 1 h and 24 h, read from the log so it survives restarts.
pub async fn scorecard(State(state): State<AppState>) -> Result<Json<Scorecard>, ApiError> {
    let unreadable = |error: crate::store::StoreError| {
        tracing::error!(%error, "scorecard: cannot read the store");
        ApiError::Internal("the request log cannot be read")
    };
    let now = now_ms();
    let day = scorecard::WINDOWS[2].1;
    let rows = state
        .store
        .query_log(LogQuery {
            since_ms: Some(now - day),
            ..LogQuery::default()
        })
        .await
        .map_err(unreadable)?;
    let keys = state
        .store
        .provider_keys()
        .await
        .map_err(unreadable)?
        .into_iter()
        .filter(|row| row.state == KeyState::Active)
        .map(|row| (row.provider, row.key_id, row.version))
        .collect();
    let live = LiveState {
        breakers: state
            .health
            .states()
            .into_iter()
            .map(|(provider, model, gauge)| (provider.to_string(), model.to_string(), gauge))
            .collect(),
        keys,
    };
    let alerts = state.config.alerts.clone();
    // A day of rows is real work: keep it off the threads that serve requests.
    let card = tokio::task::spawn_blocking(move || scorecard::compute(&rows, now, &live, &alerts))
        .await
        .map_err(|_| ApiError::Internal("the scorecard could not be computed"))?;
    Ok(Json(card))
}

/// The operator's page; it fetches `/v1/scorecard` every few seconds.
pub async fn dashboard() -> Response {
    (
        [
            (header::CONTENT_TYPE, "text/html; charset=utf-8"),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        DASHBOARD,
    )
        .into_response()
}
