//! The Responses API's conversation state, around routing: the input rebuilt from the turn
//! `previous_response_id` names, and the served response stored before its id leaves.

use std::time::Duration;

use axum::body::Body;
use axum::http::{StatusCode, header};
use axum::response::Response;
use bytes::Bytes;
use futures_util::StreamExt;
use serde_json::{Value, json};

use super::{no_such, scope, store_failed};
use crate::auth::Caller;
use crate::providers::ClientRequest;
use crate::server::AppState;
use crate::server::error::ApiError;
use crate::store::response_state::StoredResponse;
use crate::store::{Store, within};

/// What to store once the request is served.
pub struct Plan {
    store: Option<Store>,
    /// `[store] timeout`.
    store_timeout: Duration,
    scope: String,
    /// The whole input of this turn, earlier turns' included.
    input: Vec<Value>,
}

/// Rebuilds the request's input from its previous turn, if it names one, and plans what to
/// store after.
pub async fn before(
    state: &AppState,
    caller: &Caller,
    request: &mut ClientRequest,
) -> Result<Plan, ApiError> {
    let scope = scope(caller);
    let mut input = match request.body.get("previous_response_id") {
        Some(Value::String(previous)) => earlier_turns(state, previous, &scope).await?,
        _ => Vec::new(),
    };
    match request.body.get("input") {
        Some(Value::String(text)) => {
            input.push(json!({"type": "message", "role": "user", "content": text}));
        }
        Some(Value::Array(items)) => {
            for item in items {
                input.push(resolve_reference(state, item, &scope).await?);
            }
        }
        _ => {}
    }
    let mut body = request.body.tree().clone();
    body.insert("input".into(), Value::Array(input.clone()));
    request.body = body.into();
    let store = request.body.get("store") != Some(&Value::Bool(false));
    Ok(Plan {
        store: store.then(|| state.store.clone()),
        store_timeout: state.config().store.timeout,
        scope,
        input,
    })
}

/// An `item_reference` to an output item the gateway stored, replaced by that item, so any
/// step can read it; any other item (or a reference the gateway does not know) as it is.
async fn resolve_reference(state: &AppState, item: &Value, scope: &str) -> Result<Value, ApiError> {
    let reference = item.get("type").and_then(Value::as_str) == Some("item_reference");
    let Some(id) = item.get("id").and_then(Value::as_str).filter(|_| reference) else {
        return Ok(item.clone());
    };
    let timeout = state.config().store.timeout;
    let stored = within(timeout, state.store.response_item(id, scope))
        .await
        .map_err(store_failed)?;
    Ok(stored
        .and_then(|text| serde_json::from_str(&text).ok())
        .unwrap_or_else(|| item.clone()))
}

/// The input and output items of the turn `id` and every turn before it.
pub async fn earlier_turns(
    state: &AppState,
    id: &str,
    scope: &str,
) -> Result<Vec<Value>, ApiError> {
    let timeout = state.config().store.timeout;
    let stored = within(timeout, state.store.response(id, scope))
        .await
        .map_err(store_failed)?
        .ok_or_else(|| no_such(id))?;
    let mut items: Vec<Value> = serde_json::from_str(&stored.input).unwrap_or_default();
    let response: Value = serde_json::from_str(&stored.response).unwrap_or_default();
    if let Some(output) = response.get("output").and_then(Value::as_array) {
        items.extend(output.iter().cloned());
    }
    Ok(items)
}

/// Stores a served response: a whole one now, a streamed one when its terminal event
/// passes, before that event reaches the client.
pub async fn after(plan: Plan, response: Response) -> Response {
    if plan.store.is_none() || response.status() != StatusCode::OK {
        return response;
    }
    let streamed = response
        .headers()
        .get(header::CONTENT_TYPE)
        .is_some_and(|t| t.as_bytes().starts_with(b"text/event-stream"));
    let (parts, body) = response.into_parts();
    if streamed {
        let plan = std::sync::Arc::new(plan);
        let frames = body.into_data_stream().then(move |frame| {
            let plan = plan.clone();
            async move {
                if let Ok(frame) = &frame
                    && let Some(response) = terminal_response(frame)
                {
                    plan.save(&response).await;
                }
                frame
            }
        });
        return Response::from_parts(parts, Body::from_stream(frames));
    }
    // The gateway made or checked this body itself, within `max_upstream_body_bytes`.
    let Ok(bytes) = axum::body::to_bytes(body, usize::MAX).await else {
        return Response::from_parts(parts, Body::empty());
    };
    if let Ok(response) = serde_json::from_slice::<Value>(&bytes) {
        plan.save(&response).await;
    }
    Response::from_parts(parts, Body::from(bytes))
}

/// Stores a Response served from the cache under the caller's scope, as one served by a
/// step, so a later turn can continue from its id.
pub async fn after_hit(plan: Plan, response: &Value) {
    plan.save(response).await;
}

/// The Response object of a stream's `response.completed` or `response.incomplete` event.
fn terminal_response(frame: &Bytes) -> Option<Value> {
    let text = std::str::from_utf8(frame).ok()?;
    if !text.contains("response.completed") && !text.contains("response.incomplete") {
        return None;
    }
    // A frame may carry several events (a translated stream's last text, its items' ends
    // and its terminal event come in one): the terminal one is the last.
    text.lines()
        .rev()
        .filter_map(|line| line.strip_prefix("data:"))
        .find_map(|data| {
            let event: Value = serde_json::from_str(data.trim()).ok()?;
            match event.get("type").and_then(Value::as_str) {
                Some("response.completed" | "response.incomplete") => {
                    event.get("response").cloned()
                }
                _ => None,
            }
        })
}

/// A Response's output items that have an id, by id.
fn output_items(response: &Value) -> Vec<(String, String)> {
    let output = response.get("output").and_then(Value::as_array);
    output
        .into_iter()
        .flatten()
        .filter_map(|item| Some((item.get("id")?.as_str()?.to_owned(), item.to_string())))
        .collect()
}

impl Plan {
    async fn save(&self, response: &Value) {
        let (Some(store), Some(id)) = (&self.store, response.get("id").and_then(Value::as_str))
        else {
            return;
        };
        let stored = StoredResponse {
            id: id.to_owned(),
            scope: self.scope.clone(),
            created_ms: crate::store::now_ms(),
            input: Value::Array(self.input.clone()).to_string(),
            response: response.to_string(),
            items: output_items(response),
        };
        // The answer is served either way; a turn not stored only breaks a later
        // `previous_response_id`, which then gets a clear 404.
        if let Err(error) = within(self.store_timeout, store.put_response(stored)).await {
            tracing::warn!(%error, "cannot store a served response");
        }
    }
}
