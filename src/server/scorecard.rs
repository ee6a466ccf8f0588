//! `GET /v1/scorecard` (JSON, from the stored request log) and `GET /dashboard` (one page,
//! embedded in the binary, that draws the scorecard).

use axum::Json;
use axum::extract::State;
use axum::http::header;
use axum::response::{IntoResponse, Response};

use super::{ApiError, AppState};
use crate::store::KeyState;
use crate::store::now_ms;
use crate::telemetry::scorecard::{self, LiveState, Scorecard};

/// The dashboard page: plain SVG drawn by inline script, no external assets.
const DASHBOARD: &str = include_str!("dashboard.html");

/// The scorecard over 5 m, 1 h and 24 h, read from the log's rollups so it survives restarts.
pub async fn scorecard(State(state): State<AppState>) -> Result<Json<Scorecard>, ApiError> {
    let unreadable = |error: crate::store::StoreError| {
        tracing::error!(%error, "scorecard: cannot read the store");
        ApiError::Internal("the request log cannot be read")
    };
    let now = now_ms();
    // At most 1,440 rollups a series, folded one at a time on the store's read connection.
    let builder = state
        .store
        .fold_rollups(
            scorecard::reads_after(now),
            scorecard::Builder::new(now),
            |builder, rollup| builder.add(rollup),
        )
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
    Ok(Json(builder.finish(&live, &state.config.alerts)))
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
