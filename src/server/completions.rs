//! `POST /v1/completions`: OpenAI's legacy text completions, routed like chat. Steps of the
//! OpenAI family (and Azure) get the request as it came, only `model` rewritten; no other
//! provider has the API, so a step of another kind answers a 400 that says so.

use axum::extract::State;
use axum::extract::rejection::BytesRejection;
use axum::http::HeaderMap;
use axum::response::Response;
use bytes::Bytes;
use serde_json::Value;

use super::AppState;
use super::chat::{Endpoint, handle, stream_flag};
use super::error::ApiError;
use super::listener::ClientAddr;
use crate::providers::{ClientFormat, Operation, RequestBody};

const COMPLETIONS: Endpoint = Endpoint {
    format: ClientFormat::OpenAi,
    operation: Operation::Completions,
    check: check_completion,
};

pub async fn completions(
    State(state): State<AppState>,
    peer: ClientAddr,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    handle(&state, peer, &headers, body, &COMPLETIONS).await
}

/// The legacy API's one required field besides `model`.
fn check_completion(request: &RequestBody) -> Result<bool, ApiError> {
    match request.get("prompt") {
        Some(Value::String(_) | Value::Array(_)) => stream_flag(request),
        _ => Err(ApiError::InvalidRequest {
            message: "`prompt` is required: a string or an array of strings or tokens".into(),
            param: Some("prompt"),
        }),
    }
}
