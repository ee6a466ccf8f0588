//! `GET /v1/scorecard` (JSON, from the stored request log) and `GET /dashboard` (one page,
//! embedded in the binary, that draws the scorecard).

use axum::Json;
use axum::extract::State;
use axum::http::header;
use axum::response::{IntoResponse, Response};

use super::{ApiError, AppState};
use crate::store::now_ms;
use crate::store::request_log::LogQuery;
use crate::telemetry::scorecard::{self, Scorecard};

/// The dashboard page: plain SVG drawn by inline script, no external assets.
const DASHBOARD: &str = include_str!("dashboard.html");

/// The scorecard over 5 m, 1 h and 24 h, read from the log so it survives restarts.
pub async fn scorecard(State(state): State<AppState>) -> Result<Json<Scorecard>, ApiError> {
    let now = now_ms();
    let day = scorecard::WINDOWS[2].1;
    let rows = state
        .store
        .query_log(LogQuery {
            since_ms: Some(now - day),
            ..LogQuery::default()
        })
        .await
        .map_err(|error| {
            tracing::error!(%error, "scorecard: cannot read the request log");
            ApiError::Internal("the request log cannot be read")
        })?;
    let breakers: Vec<(String, String, i64)> = state
        .health
        .states()
        .into_iter()
        .map(|(provider, model, gauge)| (provider.to_string(), model.to_string(), gauge))
        .collect();
    Ok(Json(scorecard::compute(
        &rows,
        now,
        &breakers,
        &state.config.alerts,
    )))
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
