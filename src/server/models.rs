//! `GET /v1/models` and `GET /v1/models/{id}`: what the caller's key may use, in OpenAI's
//! shape, or in Anthropic's when the caller sends `anthropic-version` (as the anthropic
//! SDKs always do).

use axum::Json;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, State};
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::{Value, json};

use super::{ApiError, AppState};
use crate::providers::ClientFormat;

/// Routes have no creation date; Anthropic's shape needs one, so every model has this one.
const CREATED_AT: &str = "1970-01-01T00:00:00Z";

/// Anthropic's pagination: at most `limit` models (default 20, at most 1000), after or
/// before the model with the given id.
#[derive(Debug, Default, Deserialize)]
pub struct Page {
    limit: Option<usize>,
    after_id: Option<String>,
    before_id: Option<String>,
}

/// Every route and direct `provider/model` the caller's key may use.
pub async fn list(
    State(state): State<AppState>,
    headers: HeaderMap,
    page: Result<Query<Page>, QueryRejection>,
) -> Response {
    let format = format_of(&headers);
    let Ok(Query(page)) = page else {
        let error = ApiError::InvalidRequest {
            message: "the query takes `limit` (a number), `after_id` and `before_id`".into(),
            param: Some("limit"),
        };
        return error.into_response_for(format);
    };
    let usable = match usable(&state, &headers).await {
        Ok(usable) => usable,
        Err(error) => return error.into_response_for(format),
    };
    if format == ClientFormat::Anthropic {
        return Json(anthropic_page(&usable, &page)).into_response();
    }
    let data: Vec<Value> = usable.iter().map(|id| model(id)).collect();
    Json(json!({"object": "list", "data": data})).into_response()
}

/// One of them; a model the key may not use is as unknown as one that does not exist.
pub async fn one(
    State(state): State<AppState>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Response {
    let format = format_of(&headers);
    let usable = match usable(&state, &headers).await {
        Ok(usable) => usable,
        Err(error) => return error.into_response_for(format),
    };
    match (usable.iter().find(|known| **known == id), format) {
        (Some(id), ClientFormat::Anthropic) => Json(anthropic_model(id)).into_response(),
        (Some(id), ClientFormat::OpenAi) => Json(model(id)).into_response(),
        (None, _) => ApiError::NotFound(format!("/v1/models/{id}")).into_response_for(format),
    }
}

fn format_of(headers: &HeaderMap) -> ClientFormat {
    if headers.contains_key("anthropic-version") {
        ClientFormat::Anthropic
    } else {
        ClientFormat::OpenAi
    }
}

fn model(id: &str) -> Value {
    json!({"id": id, "object": "model", "created": 0, "owned_by": "switchyard"})
}

fn anthropic_model(id: &str) -> Value {
    json!({"type": "model", "id": id, "display_name": id, "created_at": CREATED_AT})
}

/// One page of Anthropic's list: `has_more` says whether another follows `last_id`.
fn anthropic_page(ids: &[String], page: &Page) -> Value {
    let limit = page.limit.unwrap_or(20).clamp(1, 1000);
    let position = |id: &Option<String>| {
        id.as_ref()
            .map(|id| ids.iter().position(|known| known == id))
    };
    let (start, end) = match (position(&page.after_id), position(&page.before_id)) {
        (Some(after), _) => {
            let start = after.map_or(ids.len(), |i| i + 1);
            (start, (start + limit).min(ids.len()))
        }
        (None, Some(before)) => {
            let end = before.unwrap_or(0);
            (end.saturating_sub(limit), end)
        }
        (None, None) => (0, limit.min(ids.len())),
    };
    let data: Vec<Value> = ids[start..end]
        .iter()
        .map(|id| anthropic_model(id))
        .collect();
    let has_more = match page.before_id {
        Some(_) if page.after_id.is_none() => start > 0,
        _ => end < ids.len(),
    };
    json!({
        "data": data,
        "has_more": has_more,
        "first_id": ids[start..end].first(),
        "last_id": ids[start..end].last(),
    })
}

/// The routes, then each route step's `provider/model`, that `[auth] direct_models`, the
/// caller's role and its key allow.
async fn usable(state: &AppState, headers: &HeaderMap) -> Result<Vec<String>, ApiError> {
    let caller = state.authenticate(headers).await.map_err(|_| {
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

#[cfg(test)]
mod tests {
    use super::*;

    fn ids(n: usize) -> Vec<String> {
        (0..n).map(|i| format!("m{i}")).collect()
    }

    #[test]
    fn anthropic_pages_follow_after_and_before_ids() {
        let all = ids(5);
        let page = |limit, after: Option<&str>, before: Option<&str>| {
            anthropic_page(
                &all,
                &Page {
                    limit: Some(limit),
                    after_id: after.map(str::to_owned),
                    before_id: before.map(str::to_owned),
                },
            )
        };
        let first = page(2, None, None);
        assert_eq!(first["first_id"], "m0");
        assert_eq!(first["last_id"], "m1");
        assert_eq!(first["has_more"], true);
        assert_eq!(first["data"][0]["type"], "model");
        let last = page(2, Some("m3"), None);
        assert_eq!(last["data"].as_array().unwrap().len(), 1);
        assert_eq!(last["has_more"], false);
        let before = page(2, None, Some("m3"));
        assert_eq!(before["first_id"], "m1");
        assert_eq!(before["has_more"], true);
        let empty = anthropic_page(&[], &Page::default());
        assert_eq!(empty["first_id"], Value::Null);
        assert_eq!(empty["has_more"], false);
    }
}
