//! `GET /v1/scorecard` (JSON, from the stored request log) and `GET /dashboard` (one page,
//! embedded in the binary, that draws the scorecard).

use axum::Json;
use axum::extract::State;
use axum::http::header;
use axum::response::{IntoResponse, Response};

use super::admin::Observer;
use super::{ApiError, AppState};
use crate::store::KeyState;
use crate::store::now_ms;
use crate::telemetry::scorecard::{self, LiveState, Scorecard};

/// The dashboard page: plain SVG drawn by inline script, no external assets.
const DASHBOARD: &str = include_str!("dashboard.html");

/// The scorecard over 5 m, 1 h and 24 h, read from the log's rollups so it survives restarts.
pub async fn scorecard(
    _: Observer,
    State(state): State<AppState>,
) -> Result<Json<Scorecard>, ApiError> {
    // Each one is real work, so a burst of them must not crowd out the requests we serve.
    let _permit = state.scorecards.clone().try_acquire_owned().map_err(|_| {
        ApiError::Busy("too many scorecards are being computed at once; retry in a moment")
    })?;
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
    let mut card = builder.finish(&live, &state.config().alerts);
    card.budget_spend = state.telemetry.metrics.budgets.card();
    Ok(Json(card))
}

/// The operator's page; it fetches `/v1/scorecard` every few seconds.
pub async fn dashboard(_: Observer) -> Response {
    (
        [
            (header::CONTENT_TYPE, "text/html; charset=utf-8"),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        DASHBOARD,
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    use axum::http::StatusCode;

    use super::*;
    use crate::config::Config;
    use crate::server::StartOptions;

    #[tokio::test]
    async fn scorecards_over_the_cap_are_refused_until_one_finishes() {
        let config = Config::parse(
            "[store]\nurl = \"sqlite::memory:\"\n[admin]\nmax_concurrent_scorecards = 2\n",
        )
        .unwrap();
        let (state, _writer) = AppState::new(config, StartOptions::default())
            .await
            .unwrap();
        // Two computations in flight, as two slow callers would hold them.
        let first = state.scorecards.clone().try_acquire_owned().unwrap();
        let _second = state.scorecards.clone().try_acquire_owned().unwrap();

        let refused = scorecard(Observer, State(state.clone()))
            .await
            .err()
            .unwrap();
        let response = refused.into_response();
        assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(response.headers()["retry-after"], "1");

        drop(first);
        assert!(scorecard(Observer, State(state.clone())).await.is_ok());
        // The permit it took went back when the computation finished.
        assert_eq!(state.scorecards.available_permits(), 1);
    }
}
