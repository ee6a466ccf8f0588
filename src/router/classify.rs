//! How one upstream attempt's failure is classified, and what the chain does about it.
//!
//! This is the README's classification table ("How fallback works") in code; keep the two in step.

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

/// Whether a 400 says the prompt is too long, in any provider's words.
fn is_context_length(body: &[u8]) -> bool {
    const MARKERS: [&[u8]; 4] = [
        b"context_length_exceeded",
        b"maximum context length",
        b"prompt is too long",
        b"context window",
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
