//! What an answer tells of its chain, in its headers and its log row: the route, the step
//! and deployment that served, the attempts, the outcome, the gateway's own time, and what a
//! whole answer cost.

use axum::body::Body;
use axum::http::{HeaderMap, HeaderName, HeaderValue, header};
use axum::response::Response;

use super::header_values;
use crate::cache::Entry;
use crate::config::Route;
use crate::router::Answer;
use crate::telemetry::{Outcome, RecordGuard};

/// Writes the chain's story into the response headers and the request's record.
pub(super) fn stamp<T>(
    response: &mut Response,
    answer: &Answer<T>,
    step: Option<usize>,
    outcome: Outcome,
    guard: &mut RecordGuard,
) {
    let (route, run) = (&answer.route, &answer.run);
    let overhead = guard.started().elapsed().saturating_sub(run.upstream_time);
    let record = guard.record();
    record.overhead = overhead;
    let attempts = run.upstream_attempts();
    let headers = response.headers_mut();
    // Room for every header below at once, rather than the map growing midway.
    headers.reserve(STAMPED_HEADERS);
    set_request_id(headers, &record.id);
    set(headers, ROUTE, route.name.as_str());
    headers.insert(ATTEMPTS, header_values::count(attempts));
    headers.insert(OUTCOME, HeaderValue::from_static(outcome.as_str()));
    headers.insert(OVERHEAD_MS, header_values::millis(overhead));
    if let (Some(step), Some(served)) = (step, &run.answered_by) {
        headers.insert(STEP, header_values::count(step));
        set(headers, PROVIDER, served.provider.as_str());
        set(headers, MODEL, served.model.as_str());
        record.step = Some(step);
        record.provider = Some(served.provider.clone());
        record.model = Some(served.model.clone());
    }
    if run.attempts.iter().any(|a| a.hedge) {
        headers.insert(HEDGED, HeaderValue::from_static("true"));
    }
    record.outcome = outcome;
    record.status = response.status().as_u16();
    record.attempts = run.attempts.clone();
    record.hedge_refused = run.hedge_refused;
    // A whole answer's usage is known here; a stream's comes at its end, after the headers,
    // so its cost is in the log only.
    if let Some(cost) = guard.cost().and_then(header_values::dollars) {
        response.headers_mut().insert(COST, cost);
    }
}

/// [`stamp`] for an answer served from the cache: no attempt, all of its time the
/// gateway's, and the step and deployment that made the kept answer.
pub(super) fn stamp_hit(
    response: &mut Response,
    route: &Route,
    entry: &Entry,
    outcome: Outcome,
    guard: &mut RecordGuard,
) {
    let overhead = guard.started().elapsed();
    let record = guard.record();
    record.overhead = overhead;
    let headers = response.headers_mut();
    headers.reserve(STAMPED_HEADERS);
    set_request_id(headers, &record.id);
    set(headers, ROUTE, route.name.as_str());
    headers.insert(ATTEMPTS, header_values::count(0));
    headers.insert(OUTCOME, HeaderValue::from_static(outcome.as_str()));
    headers.insert(OVERHEAD_MS, header_values::millis(overhead));
    headers.insert(STEP, header_values::count(entry.step));
    set(headers, PROVIDER, entry.provider.as_str());
    set(headers, MODEL, entry.model.as_str());
    record.step = Some(entry.step);
    record.provider = Some(entry.provider.clone());
    record.model = Some(entry.model.clone());
    record.outcome = outcome;
    record.status = response.status().as_u16();
}

fn set(headers: &mut HeaderMap, name: HeaderName, value: &str) {
    if let Ok(value) = HeaderValue::from_str(value) {
        headers.insert(name, value);
    }
}

// Header names as constants: `HeaderName::from_static` outside a const checks its name
// against every standard header and byte by byte, on every answer.
pub(super) const REQUEST_ID: HeaderName = HeaderName::from_static("x-switchyard-request-id");
const X_REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");
const ROUTE: HeaderName = HeaderName::from_static("x-switchyard-route");
const ATTEMPTS: HeaderName = HeaderName::from_static("x-switchyard-attempts");
const OUTCOME: HeaderName = HeaderName::from_static("x-switchyard-outcome");
const OVERHEAD_MS: HeaderName = HeaderName::from_static("x-switchyard-overhead-ms");
const STEP: HeaderName = HeaderName::from_static("x-switchyard-step");
pub(super) const PROVIDER: HeaderName = HeaderName::from_static("x-switchyard-provider");
pub(super) const MODEL: HeaderName = HeaderName::from_static("x-switchyard-model");
const HEDGED: HeaderName = HeaderName::from_static("x-switchyard-hedged");
/// What a whole answer cost in US dollars, at the configured or shipped prices: the figure
/// its log row records ([`header_values::dollars`]).
const COST: HeaderName = HeaderName::from_static("x-switchyard-cost");
/// Room for the headers `stamp` writes: the eleven above but one, as an answer is rarely both
/// hedged and a priced whole one (that one grows the map once). One more would double the
/// map's table on every answer.
const STAMPED_HEADERS: usize = 10;
/// The headers an upstream's answer carries out: its content type and request id, and what
/// `stamp` writes. (Rate limit and budget headers, when configured, may grow it once.)
const ANSWER_HEADERS: usize = STAMPED_HEADERS + 2;

/// Where the client finds the provider's own id of its request, to quote to the provider.
pub(super) const UPSTREAM_REQUEST_ID: HeaderName =
    HeaderName::from_static("x-switchyard-upstream-request-id");

/// An upstream answer, body and status as they came.
pub(super) fn upstream_response(reply: crate::router::UpstreamReply) -> Response {
    let mut response = Response::new(Body::from(reply.body));
    // Sized for what `stamp` adds: grown from empty, the map was allocated twice and
    // rehashed once on every answer.
    *response.headers_mut() = HeaderMap::with_capacity(ANSWER_HEADERS);
    *response.status_mut() = reply.status;
    if let Some(id) = reply.upstream_request_id {
        response.headers_mut().insert(UPSTREAM_REQUEST_ID, id);
    }
    let content_type = reply
        .content_type
        .unwrap_or_else(|| HeaderValue::from_static("application/json"));
    response
        .headers_mut()
        .insert(header::CONTENT_TYPE, content_type);
    response
}

/// The request's id as the gateway's own header, and as `x-request-id`, which the official
/// SDKs read into their `request_id`.
pub(super) fn set_request_id(headers: &mut HeaderMap, id: &str) {
    if let Ok(value) = HeaderValue::from_str(id) {
        headers.insert(X_REQUEST_ID, value.clone());
        headers.insert(REQUEST_ID, value);
    }
}
