//! How one upstream attempt's failure is classified, and what the chain does about it.
//!
//! This is docs/src/concepts/classification.md's table in code; keep the two in step.

use std::time::{Duration, SystemTime};

use http::StatusCode;
use http::header::HeaderMap;

use super::retry::parse_retry_after;

// The request log's records name failure classes, and `telemetry` sits below `router`, so
// it owns the type; the chain decides which class an answer is.
pub use crate::telemetry::FailureClass;

/// What the chain does after a failed attempt.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    /// Try the same step again after at least this long (the provider's `retry-after`).
    Retry { after: Option<Duration> },
    /// Bench the key, then try the provider's next key or the next step.
    NextKey,
    /// Move to the next step.
    NextStep,
    /// Give the upstream's answer to the client as is: no other step would do better.
    ReturnToClient,
}

/// Classifies an upstream answer that was not a success.
pub fn classify_status(
    status: StatusCode,
    headers: &HeaderMap,
    body: &[u8],
    fallback_on_context_length: bool,
) -> (FailureClass, Action) {
    let retry_after = headers
        .get(http::header::RETRY_AFTER)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| parse_retry_after(v, SystemTime::now()));
    if let Some(kind) = aws_error_type(headers) {
        // AWS names the error in a header; its status alone would misfile some (a model
        // that is not ready answers 429, a model's own failure 424).
        match kind {
            "ThrottlingException" => {
                return (
                    FailureClass::RateLimited,
                    Action::Retry { after: retry_after },
                );
            }
            "ServiceUnavailableException"
            | "InternalServerException"
            | "ModelNotReadyException"
            | "ModelErrorException"
            | "ModelStreamErrorException" => return (FailureClass::ServerError, Action::NextStep),
            "ModelTimeoutException" => return (FailureClass::Timeout, Action::NextStep),
            "AccessDeniedException"
            | "UnrecognizedClientException"
            | "InvalidSignatureException"
            | "ExpiredTokenException" => return (FailureClass::Auth, Action::NextKey),
            "ResourceNotFoundException" => {
                return (FailureClass::ModelNotFound, Action::NextStep);
            }
            // ValidationException and the rest: by status, as below.
            _ => {}
        }
    }
    match status.as_u16() {
        429 => (
            FailureClass::RateLimited,
            Action::Retry { after: retry_after },
        ),
        503 | 529 if retry_after.is_some() => (
            FailureClass::Overloaded,
            Action::Retry { after: retry_after },
        ),
        529 => (FailureClass::Overloaded, Action::NextStep),
        408 => (FailureClass::Timeout, Action::NextStep),
        401 | 403 => (FailureClass::Auth, Action::NextKey),
        404 => (FailureClass::ModelNotFound, Action::NextStep),
        400 if is_context_length(body) => {
            let action = if fallback_on_context_length {
                Action::NextStep
            } else {
                Action::ReturnToClient
            };
            (FailureClass::ContextLength, action)
        }
        500..=599 => (FailureClass::ServerError, Action::NextStep),
        // A provider that redirects is misconfigured or compromised; like a 5xx, another
        // step may serve, and the redirect's target is never contacted.
        300..=399 => (FailureClass::Redirect, Action::NextStep),
        _ => (FailureClass::BadRequest, Action::ReturnToClient),
    }
}

/// The error type of an AWS answer: `x-amzn-errortype: ThrottlingException:http://...`.
fn aws_error_type(headers: &HeaderMap) -> Option<&str> {
    let value = headers.get("x-amzn-errortype")?.to_str().ok()?;
    value.split(':').next()
}

/// Whether a 400 says the prompt is too long, in any provider's words.
fn is_context_length(body: &[u8]) -> bool {
    const MARKERS: [&[u8]; 6] = [
        b"context_length_exceeded",
        b"maximum context length",
        b"prompt is too long",
        b"context window",
        // Bedrock's ValidationException for models other than Claude.
        b"input is too long",
        b"too many input tokens",
    ];
    MARKERS.iter().any(|marker| {
        body.windows(marker.len())
            .any(|w| w.eq_ignore_ascii_case(marker))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::header::{HeaderValue, RETRY_AFTER};

    fn classify(status: u16, retry_after: Option<&str>, body: &str) -> (FailureClass, Action) {
        let mut headers = HeaderMap::new();
        if let Some(value) = retry_after {
            headers.insert(RETRY_AFTER, HeaderValue::from_str(value).unwrap());
        }
        classify_status(
            StatusCode::from_u16(status).unwrap(),
            &headers,
            body.as_bytes(),
            false,
        )
    }

    /// Bedrock's error table (docs/src/providers/bedrock.md): the type in `x-amzn-errortype` decides.
    #[test]
    fn aws_errors_are_classed_by_their_type() {
        let aws = |status: u16, kind: &str, body: &str| {
            let mut headers = HeaderMap::new();
            let value = format!("{kind}:http://internal.amazon.com/coral/com.amazon.bedrock/");
            headers.insert("x-amzn-errortype", HeaderValue::from_str(&value).unwrap());
            classify_status(
                StatusCode::from_u16(status).unwrap(),
                &headers,
                body.as_bytes(),
                false,
            )
        };
        let retry = Action::Retry { after: None };
        assert_eq!(
            aws(429, "ThrottlingException", ""),
            (FailureClass::RateLimited, retry)
        );
        assert_eq!(
            aws(429, "ModelNotReadyException", ""),
            (FailureClass::ServerError, Action::NextStep)
        );
        assert_eq!(
            aws(503, "ServiceUnavailableException", ""),
            (FailureClass::ServerError, Action::NextStep)
        );
        assert_eq!(
            aws(500, "InternalServerException", ""),
            (FailureClass::ServerError, Action::NextStep)
        );
        assert_eq!(
            aws(424, "ModelErrorException", ""),
            (FailureClass::ServerError, Action::NextStep)
        );
        assert_eq!(
            aws(408, "ModelTimeoutException", ""),
            (FailureClass::Timeout, Action::NextStep)
        );
        assert_eq!(
            aws(403, "AccessDeniedException", ""),
            (FailureClass::Auth, Action::NextKey)
        );
        assert_eq!(
            aws(403, "UnrecognizedClientException", ""),
            (FailureClass::Auth, Action::NextKey)
        );
        assert_eq!(
            aws(400, "ValidationException", r#"{"message":"bad"}"#),
            (FailureClass::BadRequest, Action::ReturnToClient)
        );
        assert_eq!(
            aws(
                400,
                "ValidationException",
                r#"{"message":"Input is too long for requested model."}"#
            )
            .0,
            FailureClass::ContextLength
        );
    }

    #[test]
    fn follows_the_design_table() {
        let secs = |s| Some(Duration::from_secs(s));
        assert_eq!(
            classify(429, Some("2"), ""),
            (FailureClass::RateLimited, Action::Retry { after: secs(2) })
        );
        assert_eq!(
            classify(503, Some("1"), ""),
            (FailureClass::Overloaded, Action::Retry { after: secs(1) })
        );
        assert_eq!(classify(529, None, "").1, Action::NextStep);
        assert_eq!(classify(503, None, "").1, Action::NextStep);
        assert_eq!(classify(502, None, "").1, Action::NextStep);
        assert_eq!(classify(408, None, "").0, FailureClass::Timeout);
        assert_eq!(classify(401, None, "").1, Action::NextKey);
        assert_eq!(classify(403, None, "").1, Action::NextKey);
        assert_eq!(classify(404, None, "").1, Action::NextStep);
        assert_eq!(classify(422, None, "").1, Action::ReturnToClient);
        assert_eq!(classify(400, None, "bad").1, Action::ReturnToClient);
        assert_eq!(
            classify(307, None, ""),
            (FailureClass::Redirect, Action::NextStep)
        );
        assert_eq!(classify(301, None, "").1, Action::NextStep);
    }

    #[test]
    fn context_length_falls_back_only_when_the_route_says_so() {
        let body = br#"{"error":{"code":"context_length_exceeded"}}"#;
        let headers = HeaderMap::new();
        let status = StatusCode::BAD_REQUEST;
        assert_eq!(
            classify_status(status, &headers, body, false),
            (FailureClass::ContextLength, Action::ReturnToClient)
        );
        assert_eq!(
            classify_status(status, &headers, body, true),
            (FailureClass::ContextLength, Action::NextStep)
        );
    }
}
