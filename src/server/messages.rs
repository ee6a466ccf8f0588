//! `POST /v1/messages`: Anthropic's Messages API in and out, routed through the same chains
//! as chat completions. Steps on Anthropic providers get the request as it came (only `model`
//! rewritten); other steps get its translation, and their answers come back as Anthropic's.

use super::endpoint::{Endpoint, stream_flag};
use super::error::ApiError;
use crate::providers::{ClientFormat, JsonKind, Operation, RequestBody};

pub(super) const MESSAGES: Endpoint = Endpoint {
    format: ClientFormat::Anthropic,
    operation: Operation::Chat,
    check: check_message,
};

/// `POST /v1/messages/count_tokens`: passed to an Anthropic step as it came (only `model`
/// rewritten). Other providers count differently, so a step of another kind is a 400.
pub(super) const COUNT_TOKENS: Endpoint = Endpoint {
    format: ClientFormat::Anthropic,
    operation: Operation::CountTokens,
    check: check_count_tokens,
};

/// A count takes the message's fields but never streams.
fn check_count_tokens(request: &RequestBody) -> Result<bool, ApiError> {
    check_message(request)?;
    Ok(false)
}

/// The Messages API's own fields. `max_tokens` may be left out: Anthropic steps fill in the
/// provider's `default_max_tokens`, and other providers do not need it.
fn check_message(request: &RequestBody) -> Result<bool, ApiError> {
    if request.field_kind("messages") != Some(JsonKind::Array) {
        return Err(ApiError::InvalidRequest {
            message: "messages: Field required (an array of turns)".into(),
            param: Some("messages"),
        });
    }
    match request.raw_field("max_tokens") {
        None => {}
        Some(_)
            if request
                .field_as::<u64>("max_tokens")
                .is_some_and(|m| m >= 1) => {}
        Some(_) => {
            return Err(ApiError::InvalidRequest {
                message: "max_tokens: must be an integer of at least 1".into(),
                param: Some("max_tokens"),
            });
        }
    }
    match request.field_kind("system") {
        None | Some(JsonKind::String) | Some(JsonKind::Array) => {}
        Some(_) => {
            return Err(ApiError::InvalidRequest {
                message: "system: must be a string or an array of text blocks".into(),
                param: Some("system"),
            });
        }
    }
    stream_flag(request)
}
