//! `GET /admin/cache` and `DELETE /admin/cache`: the response cache's size and record, and a
//! purge of everything, one route's entries (`?route=`) or one virtual key's (`?key_id=`).

use axum::Json;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use serde::Deserialize;
use serde_json::{Value, json};

use super::Admin;
use crate::server::{ApiError, AppState};

/// The cache's entries, bytes, hits, misses, hit ratio and evictions since start.
pub async fn stats(_: Admin, State(state): State<AppState>) -> Result<Json<Value>, ApiError> {
    let stats = state.cache.stats().await.map_err(unavailable)?;
    Ok(Json(json!(stats)))
}

/// The cache's Redis did not answer: the admin is told, and may try again.
fn unavailable(_: crate::cache::Unavailable) -> ApiError {
    ApiError::Busy("the response cache's Redis did not answer in time: try again")
}

/// Which entries a purge drops: all of them, or those of a route, a key, or both.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PurgeFilter {
    route: Option<String>,
    key_id: Option<String>,
}

/// Drops the entries the query names, and says how many.
pub async fn purge(
    _: Admin,
    State(state): State<AppState>,
    filter: Result<Query<PurgeFilter>, QueryRejection>,
) -> Result<Json<Value>, ApiError> {
    let Query(filter) = filter.map_err(|e| ApiError::InvalidRequest {
        message: e.body_text(),
        param: None,
    })?;
    let purged = state
        .cache
        .purge(filter.route.as_deref(), filter.key_id.as_deref())
        .await
        .map_err(unavailable)?;
    Ok(Json(json!({ "purged": purged })))
}
