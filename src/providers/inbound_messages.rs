//! Anthropic's Messages API as clients speak it, for `/v1/messages` served by a provider of
//! another format: `request` reads the client's request into a chat completion request,
//! `response` writes a completion back as a message, and `stream` writes chunks as
//! Messages events.
//!
//! It lives apart from the Anthropic adapter because the OpenAI and Gemini adapters use it
//! too, and none of them may lean on another.

pub mod request;
pub mod response;
pub mod stream;

use bytes::Bytes;

/// The mid-stream error event an Anthropic client's SDK raises as an exception.
pub fn stream_error_event(message: &str, overloaded: bool) -> Bytes {
    let kind = if overloaded {
        "overloaded_error"
    } else {
        "api_error"
    };
    let event = serde_json::json!({"type": "error", "error": {"type": kind, "message": message}});
    super::stream::named_event("error", &event)
}
