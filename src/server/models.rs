//! `GET /v1/models` and `GET /v1/models/{id}`: what the caller's key may use.

use axum::Json;
use axum::extract::{Path, State};
use axum::http::HeaderMap;
use serde_json::{Value, json};

use super::{ApiError, AppState};

/// Every route and direct `provider/model` the caller's key may use.
pub async fn list(
    State(state): State<AppState>,
    headers: HeaderMap,
) -> Result<Json<Value>, ApiError> {
    let data: Vec<Value> = usable(&state, &headers)?
        .iter()
        .map(|id| model(id))
        .collect();
    Ok(Json(json!({"object": "list", "data": data})))
}

/// One of them; a model the key may not use is as unknown as one that does not exist.
pub async fn one(
    State(state): State<AppState>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let usable = usable(&state, &headers)?;
    match usable.iter().find(|known| **known == id) {
        Some(id) => Ok(Json(model(id))),
        None => Err(ApiError::NotFound(format!("/v1/models/{id}"))),
    }
}

fn model(id: &str) -> Value {
    json!({"id": id, "object": "model", "created": 0, "owned_by": "switchyard"})
}

/// The routes, then each route step's `provider/model`, that `[auth] direct_models`, the
/// caller's role and its key allow.
fn usable(state: &AppState, headers: &HeaderMap) -> Result<Vec<String>, ApiError> {
    let caller = state.directory.authenticate(headers).map_err(|_| {
        ApiError::Unauthorized("a valid virtual key is required: send Authorization: Bearer sy-…")
    })?;
    let mut ids: Vec<String> = state.routes().iter().map(|r| r.name.to_string()).collect();
    for route in state.routes() {
        for deployment in route.steps.iter().flat_map(|s| &s.deployments) {
            let direct = format!("{}/{}", deployment.provider, deployment.model);
            if !ids.contains(&direct) {
                ids.push(direct);
            }
        }
    }
    ids.retain(|id| caller.may_use(state.config(), id).is_ok());
    Ok(ids)
}
