//! What each client API endpoint is: its wire format, its operation, and the check of its
//! fields. The endpoints' own modules define theirs; `chat` serves them all.

use super::error::ApiError;
use crate::providers::{ClientFormat, JsonKind, Operation, RequestBody};

/// The endpoint a request came in on: its format, what it asks, and how its fields are
/// checked (returning whether it streams).
pub struct Endpoint {
    pub format: ClientFormat,
    pub operation: Operation,
    pub check: fn(&RequestBody) -> Result<bool, ApiError>,
}

/// The `stream` field: absent, null or a boolean.
pub fn stream_flag(request: &RequestBody) -> Result<bool, ApiError> {
    match request.field_kind("stream") {
        None | Some(JsonKind::Null) => Ok(false),
        Some(JsonKind::Bool) => Ok(request.raw_field("stream") == Some("true")),
        Some(_) => Err(ApiError::InvalidRequest {
            message: "`stream` must be a boolean".into(),
            param: Some("stream"),
        }),
    }
}
