//! `POST /v1/responses`, and `GET` / `DELETE /v1/responses/{id}`: OpenAI's Responses API
//! through the chains, with the conversation state kept in the gateway's store.
//!
//! Routing is chat's ([`handle`]): the same limits, breakers, log row, metrics and headers.
//! Around it this module does what only the Responses API has: before routing, it rebuilds
//! the whole input from the stored turn `previous_response_id` names, so any provider can
//! serve the next turn; after, it stores the served response (`store: true`, the default)
//! before the client can see its id. `POST /v1/responses/compact` ([`compact`]) summarises a
//! conversation into a sealed `compaction` item, which `before` opens again for its own key.

pub(super) mod compact;
pub mod degraded;
mod state;

use axum::extract::{Path, State};
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use super::AppState;
use super::endpoint::{Endpoint, stream_flag};
use super::error::ApiError;
use crate::auth::Caller;
use crate::providers::responses::request::unknown_field;
use crate::providers::responses::spec;
use crate::providers::{ClientFormat, Operation, RequestBody};
use crate::store::within;

pub(super) use state::{after, after_hit, earlier_turns};

/// Rebuilds the request's input from its previous turn and plans what to store after
/// ([`state::before`]); then opens the compaction items the gateway sealed for this caller,
/// so the serving step reads their summaries while the stored turn keeps them sealed.
pub(super) async fn before(
    state: &AppState,
    caller: &Caller,
    request: &mut crate::providers::ClientRequest,
) -> Result<state::Plan, ApiError> {
    let plan = state::before(state, caller, request).await?;
    compact::open_items(state.keys.vault(), &scope(caller), request)?;
    Ok(plan)
}

pub(super) const RESPONSES: Endpoint = Endpoint {
    format: ClientFormat::OpenAi,
    operation: Operation::Responses,
    check: check_responses,
};

/// A Responses request's own fields: all known, `input` a string or items.
fn check_responses(request: &RequestBody) -> Result<bool, ApiError> {
    // Every Responses request is read whole (its state, its translation), so a body whose
    // tree cannot be built stops here rather than reading as an empty one.
    if let Some(why) = request.tree_error() {
        return Err(ApiError::InvalidJson(why.to_owned()));
    }
    if let Some(field) = unknown_field(request) {
        return Err(ApiError::UnknownField(field.to_owned()));
    }
    match request.get("input") {
        Some(Value::String(_) | Value::Array(_)) => {}
        _ => {
            return Err(ApiError::InvalidRequest {
                message: "`input` is required: a string or an array of input items".into(),
                param: Some("input"),
            });
        }
    }
    if !matches!(
        request.get("store"),
        None | Some(Value::Null | Value::Bool(_))
    ) {
        return Err(ApiError::InvalidRequest {
            message: "`store` must be a boolean".into(),
            param: Some("store"),
        });
    }
    if !matches!(
        request.get("previous_response_id"),
        None | Some(Value::Null | Value::String(_))
    ) {
        return Err(ApiError::InvalidRequest {
            message: "`previous_response_id` must be a string".into(),
            param: Some("previous_response_id"),
        });
    }
    stream_flag(request)
}

/// Whose stored responses a caller sees: its virtual key's, or every anonymous caller's.
pub(super) fn scope(caller: &Caller) -> String {
    match &caller.key {
        Some(key) => key.id.clone(),
        None => "anonymous".into(),
    }
}

async fn caller(state: &AppState, headers: &HeaderMap) -> Result<Caller, ApiError> {
    state.authenticate(headers).await.map_err(|_| {
        ApiError::Unauthorized("a valid virtual key is required: send Authorization: Bearer sy-…")
    })
}

fn no_such(id: &str) -> ApiError {
    ApiError::Missing(format!("no response with id `{id}` is stored for this key"))
}

fn store_failed(error: crate::store::StoreError) -> ApiError {
    tracing::warn!(%error, "stored responses: the store failed");
    ApiError::Internal("the gateway's store failed; retry later")
}

/// `GET /v1/responses/{id}`: a response this key stored.
pub async fn retrieve(
    State(state): State<AppState>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Response {
    let caller = match caller(&state, &headers).await {
        Ok(caller) => caller,
        Err(error) => return error.into_response(),
    };
    let timeout = state.config().store.timeout;
    match within(timeout, state.store.response(&id, &scope(&caller))).await {
        Ok(Some(stored)) => (
            [(axum::http::header::CONTENT_TYPE, "application/json")],
            completed(stored.response),
        )
            .into_response(),
        Ok(None) => no_such(&id).into_response(),
        Err(error) => store_failed(error).into_response(),
    }
}

/// A stored Response with what it lacks filled in: one an earlier release stored may lack
/// fields a Response now holds (its request's settings are not stored, so their defaults).
fn completed(stored: String) -> String {
    let Ok(Value::Object(mut response)) = serde_json::from_str::<Value>(&stored) else {
        return stored;
    };
    if !spec::lacks_any(&response) {
        return stored;
    }
    spec::complete(&mut response, &serde_json::Map::new());
    Value::Object(response).to_string()
}

/// `DELETE /v1/responses/{id}`: forgets a response this key stored.
pub async fn delete(
    State(state): State<AppState>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Response {
    let caller = match caller(&state, &headers).await {
        Ok(caller) => caller,
        Err(error) => return error.into_response(),
    };
    let timeout = state.config().store.timeout;
    match within(timeout, state.store.delete_response(&id, &scope(&caller))).await {
        Ok(true) => {
            axum::Json(json!({"id": id, "object": "response", "deleted": true})).into_response()
        }
        Ok(false) => no_such(&id).into_response(),
        Err(error) => store_failed(error).into_response(),
    }
}
