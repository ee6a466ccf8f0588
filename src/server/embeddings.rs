//! `POST /v1/embeddings`: OpenAI's embeddings API through the chains, served by the OpenAI
//! family, Azure or Gemini (translated). There is no degraded tier for embeddings: a canned
//! vector would be a wrong answer, so exhaustion is a 503.

use super::endpoint::Endpoint;
use super::error::ApiError;
use crate::providers::{ClientFormat, JsonKind, Operation, RequestBody};

pub(super) const EMBEDDINGS: Endpoint = Endpoint {
    format: ClientFormat::OpenAi,
    operation: Operation::Embeddings,
    check: check_embeddings,
};

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
