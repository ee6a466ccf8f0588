//! Requests refused before routing: each still gets its one log row and its id header.

use std::net::IpAddr;

use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::Response;

use super::AppState;
use super::error::ApiError;
use super::stamp::set_request_id;
use crate::providers::ClientFormat;
use crate::telemetry::{Outcome, RecordGuard, RequestRecord};

/// Refuses a body whose declared length is over `[server] max_body_bytes` on its head, so
/// the gateway neither reads nor waits for it.
pub(super) async fn refuse_declared_oversize(
    State(state): State<AppState>,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    match declared_oversize_refusal(&state, request.headers(), request.uri().path()) {
        Some(refused) => refused,
        None => next.run(request).await,
    }
}

/// The answer to a request whose declared length is over `[server] max_body_bytes`, if so.
pub(super) fn declared_oversize_refusal(
    state: &AppState,
    headers: &HeaderMap,
    path: &str,
) -> Option<Response> {
    let limit = state.config().server.max_body_bytes;
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_none_or(|length| length <= limit as u64) {
        return None;
    }
    let format = if path.starts_with("/v1/messages") {
        ClientFormat::Anthropic
    } else {
        ClientFormat::OpenAi
    };
    let guard = RecordGuard::new(
        state.telemetry.clone(),
        RequestRecord::new(uuid::Uuid::now_v7().to_string(), false),
    );
    let mut response = refuse(guard, ApiError::BodyTooLarge { limit }, format);
    // The body stays unread, so the connection cannot carry another request.
    response
        .headers_mut()
        .insert(header::CONNECTION, HeaderValue::from_static("close"));
    Some(response)
}

/// Refuses a request whose caller is unknown: with its own log row while its address has
/// rows left this minute, else counted in a metric and summed up in a later row.
pub(super) fn unauthenticated(
    state: &AppState,
    peer: IpAddr,
    guard: RecordGuard,
    error: ApiError,
    format: ClientFormat,
) -> Response {
    let verdict = state
        .unauthorized_rows
        .check(peer, tokio::time::Instant::now());
    for summary in verdict.summaries {
        state.telemetry.record(summary);
    }
    if verdict.write {
        return refuse(guard, error, format);
    }
    state.telemetry.metrics.unauthorized_rows_dropped.inc();
    guard.discard();
    error.into_response_for(format)
}

/// The outcome of a request that failed with `status`: the client's own mistake for a 4xx
/// (but a 429, which a provider's or our own limit causes), else an error.
pub(super) fn failed_by(status: StatusCode) -> Outcome {
    if status.is_client_error() && status != StatusCode::TOO_MANY_REQUESTS {
        Outcome::ClientError
    } else {
        Outcome::Error
    }
}

/// Refuses a request before routing, with one log row like any other request.
pub(super) fn refuse(mut guard: RecordGuard, error: ApiError, format: ClientFormat) -> Response {
    let kind = error.kind();
    let outcome = if error.is_rejection() {
        Outcome::Rejected
    } else {
        failed_by(error.status())
    };
    let mut response = error.into_response_for(format);
    let record = guard.record();
    set_request_id(response.headers_mut(), &record.id);
    record.status = response.status().as_u16();
    record.outcome = outcome;
    record.error = Some(kind.into());
    guard.finish();
    response
}
