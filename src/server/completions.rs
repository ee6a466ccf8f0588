//! `POST /v1/completions`: OpenAI's legacy text completions, routed like chat. Steps of the
//! OpenAI family (and Azure) get the request as it came, only `model` rewritten; no other
//! provider has the API, so a step of another kind answers a 400 that says so.

use serde_json::Value;

use super::endpoint::{Endpoint, stream_flag};
use super::error::ApiError;
use crate::providers::{ClientFormat, Operation, RequestBody};

pub(super) const COMPLETIONS: Endpoint = Endpoint {
    format: ClientFormat::OpenAi,
    operation: Operation::Completions,
    check: check_completion,
};

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
