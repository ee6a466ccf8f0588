//! `POST /v1/embeddings`: OpenAI's embeddings API through the chains, served by the OpenAI
//! family, Azure or Gemini (translated). There is no degraded tier for embeddings: a canned
//! vector would be a wrong answer, so exhaustion is a 503.

use axum::extract::State;
use axum::extract::rejection::BytesRejection;
use axum::http::HeaderMap;
use axum::response::Response;
use bytes::Bytes;

use super::AppState;
use super::chat::{Endpoint, handle};
use super::error::ApiError;
use super::listener::ClientAddr;
use crate::providers::{ClientFormat, JsonKind, Operation, RequestBody};

const EMBEDDINGS: Endpoint = Endpoint {
    format: ClientFormat::OpenAi,
    operation: Operation::Embeddings,
    check: check_embeddings,
};

pub async fn embeddings(
    State(state): State<AppState>,
    peer: ClientAddr,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    handle(&state, peer, &headers, body, &EMBEDDINGS).await
}

/// `input` is a string, or an array (of strings, or of token ids); embeddings never stream.
fn check_embeddings(request: &RequestBody) -> Result<bool, ApiError> {
    match request.field_kind("input") {
        Some(JsonKind::String) => Ok(false),
        Some(JsonKind::Array) if !request.is_empty_array("input") => Ok(false),
        _ => Err(ApiError::InvalidRequest {
            message: "`input` is required: a string or a non-empty array".into(),
            param: Some("input"),
        }),
    }
}
