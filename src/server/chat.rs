//! `POST /v1/chat/completions`: check the request, run its route's chain, answer.
//!
//! The routing core here also serves `/v1/messages` and `/v1/embeddings`: their handlers
//! check their own format's fields and call [`handle`], which answers in the client's format.

use std::net::IpAddr;
use std::sync::Arc;

use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderName, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;

use super::AppState;
use super::admission;
use super::degraded;
use super::endpoint::{Endpoint, stream_flag};
use super::error::ApiError;
use super::error::BodyError;
use super::header_values;
use super::spend;
use super::stream::{StreamForwarder, StreamLimits};
use crate::auth::Caller;
use crate::budgets::Reservation;
use crate::config::Route;
use crate::limits::Permit;
use crate::providers::anthropic::ANTHROPIC_BETA;
use crate::providers::{ClientFormat, ClientRequest, JsonKind, Operation, RequestBody};
use crate::router::breaker::CallerTag;
use crate::router::chain::{ChainInputs, describe_failures, rate_limited_everywhere};
use crate::router::retry_budget::ended_by_refusal;
use crate::router::upstream::{JsonAttempter, StreamAttempter};
use crate::router::{ChainEnd, ChainRun, RouteError, resolve_route, run_chain};
use crate::telemetry::{Outcome, RecordGuard, RequestRecord};

/// A request that passed every check and is ready to route.
struct Prepared {
    route: Arc<Route>,
    /// What the client asked for: a route name or `provider/model`.
    model: String,
    request: ClientRequest,
    stream: bool,
    first_step: usize,
    /// Who asks, as breakers tell callers apart.
    caller: CallerTag,
    /// The spend reserved against the caller's budget, settled when the answer ends.
    reservation: Option<Reservation>,
}

pub(super) const CHAT: Endpoint = Endpoint {
    format: ClientFormat::OpenAi,
    operation: Operation::Chat,
    check: check_chat,
};

/// Checks a request on `endpoint`, routes it, and answers in the endpoint's format.
pub(super) async fn handle(
    state: &AppState,
    peer: IpAddr,
    headers: &HeaderMap,
    body: Result<Bytes, BodyError>,
    endpoint: &Endpoint,
) -> Response {
    let id = uuid::Uuid::now_v7().to_string();
    let guard = RecordGuard::new(
        state.telemetry.clone(),
        RequestRecord::new(id.clone(), false),
    );
    if guard.must_refuse() {
        guard.refuse();
        return ApiError::LogFull.into_response_for(endpoint.format);
    }
    // With `[log] durability = "fsync"`, the answer leaves once its record is on disk.
    let durable = guard.durable();
    let response = serve(state, peer, headers, body, endpoint, guard, id).await;
    if let Some(durable) = durable {
        durable.wait().await;
    }
    response
}

/// Everything after the request's record has its place in the log.
async fn serve(
    state: &AppState,
    peer: IpAddr,
    headers: &HeaderMap,
    body: Result<Bytes, BodyError>,
    endpoint: &Endpoint,
    mut guard: RecordGuard,
    id: String,
) -> Response {
    let format = endpoint.format;
    let caller = match admission::authenticate(state, headers, &mut guard).await {
        Ok(caller) => caller,
        Err(error) => return unauthenticated(state, peer, guard, error, format),
    };
    // The body is checked before the limits are taken, so a malformed request costs no quota.
    let mut prepared = match prepare(state, headers, body, endpoint) {
        Ok(prepared) => prepared,
        Err(error) => return refuse(guard, error, format),
    };
    let record = guard.record();
    record.route = Some(prepared.route.name.clone());
    record.stream = prepared.stream;
    prepared.first_step = match admission::authorize(state, &caller, &prepared.model, headers) {
        Ok(first_step) => first_step,
        Err(error) => return refuse(guard, error, format),
    };
    prepared.caller = breaker_caller(&caller);
    // The Responses API's stored state: the input rebuilt from the previous turn.
    let responses_plan = match endpoint.operation {
        Operation::Responses => {
            // Boxed, as is `after` below: only the Responses API waits on its stored state,
            // and inline these made every request's future kilobytes larger.
            match Box::pin(super::responses::before(
                state,
                &caller,
                &mut prepared.request,
            ))
            .await
            {
                Ok(plan) => Some(plan),
                Err(error) => return refuse(guard, error, format),
            }
        }
        _ => None,
    };
    let permit = match admission::admit(state, &caller, &id).await {
        Ok(permit) => permit,
        Err(error) => return refuse(guard, error, format),
    };
    let rate_headers = permit.headers;
    // Spend budgets: after the rate limits admit, before any upstream is called.
    let (route, first_step) = (&prepared.route, prepared.first_step);
    prepared.reservation =
        match spend::reserve(state, &caller, &id, route, first_step, &prepared.request).await {
            Ok(reservation) => reservation,
            Err(error) => return refuse(guard, error, format),
        };
    let remaining = prepared
        .reservation
        .as_ref()
        .and_then(Reservation::remaining_header);
    // Boxed: inline, the larger of the two (5.6 KB) made every future above it as large, and
    // axum's layers move the handler's future by value several times a request.
    let mut response = if prepared.stream {
        Box::pin(route_stream(state, prepared, guard, permit)).await
    } else {
        Box::pin(route_json(state, prepared, guard, permit)).await
    };
    if let Some(plan) = responses_plan {
        response = Box::pin(super::responses::after(plan, response)).await;
    }
    admission::add_rate_headers(&mut response, &rate_headers);
    spend::add_remaining_header(&mut response, remaining);
    response
}

/// The caller as breakers count callers: a virtual key's user (so one user's several keys
/// are one caller), and every anonymous caller as one. Source addresses are not used: behind
/// a load balancer or NAT they name the proxy, not the caller.
fn breaker_caller(caller: &Caller) -> CallerTag {
    match caller.key {
        Some(_) => CallerTag::new(&format!("user:{}", caller.user)),
        None => CallerTag::new("anonymous"),
    }
}

/// `/v1/chat/completions`' own fields.
fn check_chat(request: &RequestBody) -> Result<bool, ApiError> {
    if request.field_kind("messages") != Some(JsonKind::Array) {
        return Err(ApiError::InvalidRequest {
            message: "`messages` is required and must be an array".into(),
            param: Some("messages"),
        });
    }
    stream_flag(request)
}

fn prepare(
    state: &AppState,
    headers: &HeaderMap,
    body: Result<Bytes, BodyError>,
    endpoint: &Endpoint,
) -> Result<Prepared, ApiError> {
    let body = body.map_err(|error| match error {
        BodyError::TooLarge => ApiError::BodyTooLarge {
            limit: state.config().server.max_body_bytes,
        },
        BodyError::Timeout => ApiError::BodyTimeout,
        BodyError::Unreadable(why) => ApiError::InvalidJson(why),
    })?;
    // Only the fields the gateway reads are parsed; the rest stays the client's bytes.
    let request = RequestBody::parse(body).map_err(|e| ApiError::InvalidJson(e.to_string()))?;
    let model = match request.field_as::<String>("model") {
        Some(model) if !model.is_empty() => model,
        _ => {
            return Err(ApiError::InvalidRequest {
                message: "`model` is required and must be a non-empty string".into(),
                param: Some("model"),
            });
        }
    };
    let stream = (endpoint.check)(&request)?;
    let route = resolve_route(state.config(), state.routes(), &model).map_err(|e| match e {
        RouteError::Unknown => ApiError::UnknownModel(model.clone()),
        RouteError::BadModelName(why) => ApiError::InvalidRequest {
            message: why.into(),
            param: Some("model"),
        },
    })?;
    Ok(Prepared {
        route,
        model,
        request: ClientRequest {
            format: endpoint.format,
            operation: endpoint.operation,
            body: request,
            anthropic_beta: headers
                .get(ANTHROPIC_BETA)
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned),
        },
        stream,
        first_step: 0,
        caller: CallerTag::new(""),
        reservation: None,
    })
}

async fn route_json(
    state: &AppState,
    prepared: Prepared,
    mut guard: RecordGuard,
    permit: Permit,
) -> Response {
    let deadline = guard.started() + state.config().retry.request_deadline;
    let attempter = JsonAttempter {
        client: &state.client,
        request: prepared.request,
        fallback_on_context_length: prepared.route.fallback_on_context_length,
        deadline,
        max_body_bytes: state.config().server.max_upstream_body_bytes,
    };
    let inputs = ChainInputs {
        config: state.config(),
        keys: &state.keys.ring,
        health: &state.health,
        route: &prepared.route,
        first_step: prepared.first_step,
        deadline,
        caller: prepared.caller,
    };
    let mut run = run_chain(inputs, &attempter).await;
    spend::settle_json(prepared.reservation, &run).await;
    let end = std::mem::replace(&mut run.end, ChainEnd::Exhausted);
    let (response, served) = match end {
        ChainEnd::Served { step, output } => {
            let record = guard.record();
            if let Some(usage) = output.usage {
                record.tokens_in = Some(usage.prompt_tokens);
                record.tokens_out = Some(usage.completion_tokens);
                permit.charge_tokens(usage.prompt_tokens + usage.completion_tokens);
            }
            let outcome = if step == 0 {
                Outcome::Success
            } else {
                Outcome::Fallback
            };
            (upstream_response(output.reply), Some((step, outcome)))
        }
        ChainEnd::Returned { step, reply } => {
            guard.record().error = last_failure(&run);
            let outcome = failed_by(reply.status);
            (upstream_response(reply), Some((step, outcome)))
        }
        ChainEnd::Exhausted => {
            return exhausted(&prepared.route, run, guard, &attempter.request, false);
        }
    };
    finish(response, &prepared.route, &run, served, guard)
}

async fn route_stream(
    state: &AppState,
    mut prepared: Prepared,
    mut guard: RecordGuard,
    permit: Permit,
) -> Response {
    let deadline = guard.started() + state.config().retry.request_deadline;
    let attempter = StreamAttempter {
        client: &state.client,
        request: prepared.request,
        fallback_on_context_length: prepared.route.fallback_on_context_length,
        max_body_bytes: state.config().server.max_upstream_body_bytes,
        max_event_bytes: state.config().server.max_sse_event_bytes,
    };
    let inputs = ChainInputs {
        config: state.config(),
        keys: &state.keys.ring,
        health: &state.health,
        route: &prepared.route,
        first_step: prepared.first_step,
        deadline,
        caller: prepared.caller,
    };
    let mut run = run_chain(inputs, &attempter).await;
    spend::charge_cancelled_hedges(&mut prepared.reservation, &run);
    if !matches!(run.end, ChainEnd::Served { .. }) {
        spend::settle_unserved(prepared.reservation.take()).await;
    }
    match std::mem::replace(&mut run.end, ChainEnd::Exhausted) {
        ChainEnd::Served { step, output } => {
            let outcome = if step == 0 {
                Outcome::Success
            } else {
                Outcome::Fallback
            };
            guard.record().ttft = Some(guard.started().elapsed());
            let mut response = Response::new(Body::empty());
            stamp(
                &mut response,
                &prepared.route,
                &run,
                Some(step),
                outcome,
                &mut guard,
            );
            let headers = response.headers_mut();
            headers.insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static("text/event-stream"),
            );
            if let Some(id) = output.upstream_request_id.clone() {
                headers.insert(UPSTREAM_REQUEST_ID, id);
            }
            headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
            let limits = StreamLimits {
                idle_timeout: state.config().retry.stream_idle_timeout,
                deadline,
                grace_over: state.grace_over.subscribe(),
            };
            let verdict = run.verdict.take();
            let forwarder = StreamForwarder::new(output, guard, permit, verdict, limits)
                .with_reservation(prepared.reservation);
            *response.body_mut() = forwarder.into_body();
            response
        }
        ChainEnd::Returned { step, reply } => {
            guard.record().error = last_failure(&run);
            let outcome = failed_by(reply.status);
            finish(
                upstream_response(reply),
                &prepared.route,
                &run,
                Some((step, outcome)),
                guard,
            )
        }
        ChainEnd::Exhausted => exhausted(&prepared.route, run, guard, &attempter.request, true),
    }
}

/// Every step failed: the canned tier if the route has one, else a 503 naming each failure.
fn exhausted<T>(
    route: &Route,
    run: ChainRun<T>,
    mut guard: RecordGuard,
    request: &ClientRequest,
    stream: bool,
) -> Response {
    let degraded = route
        .degraded
        .as_ref()
        .filter(|_| request.operation != Operation::Embeddings);
    let Some(content) = degraded else {
        let failures = describe_failures(&run);
        // Rate-limited everywhere: a 429 with the soonest retry lets the client's SDK wait
        // and retry as it does for any rate limit, where a 503 would not.
        let error = match rate_limited_everywhere(&run) {
            Some(retry_after) => ApiError::UpstreamRateLimited {
                failures,
                retry_after,
            },
            None => ApiError::AllStepsFailed(failures),
        };
        let reason = if ended_by_refusal(&run.attempts) {
            "retry_budget_exhausted"
        } else {
            error.kind()
        };
        guard.record().error = Some(reason.into());
        let mut response = error.into_response_for(request.format);
        if let Some(id) = run.last_upstream_request_id.clone() {
            response.headers_mut().insert(UPSTREAM_REQUEST_ID, id);
        }
        return finish(response, route, &run, None, guard);
    };
    let id = guard.record().id.clone();
    let name = route.name.as_str();
    let response = match (stream, request.format) {
        _ if request.operation == Operation::Responses => {
            let (content_type, body) = if stream {
                let body = super::responses::degraded::stream(&request.body, name, content);
                ("text/event-stream", body)
            } else {
                let body = super::responses::degraded::response(&request.body, name, content);
                ("application/json", body)
            };
            ([(header::CONTENT_TYPE, content_type)], body).into_response()
        }
        (true, ClientFormat::OpenAi) => {
            let body = degraded::stream(&id, name, content, request.asked_stream_usage());
            ([(header::CONTENT_TYPE, "text/event-stream")], body).into_response()
        }
        (true, ClientFormat::Anthropic) => {
            let body = degraded::message_stream(&id, name, content);
            ([(header::CONTENT_TYPE, "text/event-stream")], body).into_response()
        }
        (false, ClientFormat::OpenAi) => {
            let body = degraded::completion(&id, name, content);
            ([(header::CONTENT_TYPE, "application/json")], body).into_response()
        }
        (false, ClientFormat::Anthropic) => {
            let body = degraded::message(&id, name, content);
            ([(header::CONTENT_TYPE, "application/json")], body).into_response()
        }
    };
    let mut response = response;
    stamp(
        &mut response,
        route,
        &run,
        None,
        Outcome::Degraded,
        &mut guard,
    );
    guard.record().ttft = Some(guard.started().elapsed());
    guard.finish();
    response
}

fn finish<T>(
    mut response: Response,
    route: &Route,
    run: &ChainRun<T>,
    served: Option<(usize, Outcome)>,
    mut guard: RecordGuard,
) -> Response {
    let (step, outcome) = match served {
        Some((step, outcome)) => (Some(step), outcome),
        None => (None, Outcome::Error),
    };
    stamp(&mut response, route, run, step, outcome, &mut guard);
    guard.finish();
    response
}

/// Writes the chain's story into the response headers and the request's record.
fn stamp<T>(
    response: &mut Response,
    route: &Route,
    run: &ChainRun<T>,
    step: Option<usize>,
    outcome: Outcome,
    guard: &mut RecordGuard,
) {
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
}

fn set(headers: &mut HeaderMap, name: HeaderName, value: &str) {
    if let Ok(value) = HeaderValue::from_str(value) {
        headers.insert(name, value);
    }
}

// Header names as constants: `HeaderName::from_static` outside a const checks its name
// against every standard header and byte by byte, on every answer.
const REQUEST_ID: HeaderName = HeaderName::from_static("x-switchyard-request-id");
const X_REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");
const ROUTE: HeaderName = HeaderName::from_static("x-switchyard-route");
const ATTEMPTS: HeaderName = HeaderName::from_static("x-switchyard-attempts");
const OUTCOME: HeaderName = HeaderName::from_static("x-switchyard-outcome");
const OVERHEAD_MS: HeaderName = HeaderName::from_static("x-switchyard-overhead-ms");
const STEP: HeaderName = HeaderName::from_static("x-switchyard-step");
const PROVIDER: HeaderName = HeaderName::from_static("x-switchyard-provider");
const MODEL: HeaderName = HeaderName::from_static("x-switchyard-model");
const HEDGED: HeaderName = HeaderName::from_static("x-switchyard-hedged");
/// The headers `stamp` writes, at most: the ten above.
const STAMPED_HEADERS: usize = 10;
/// The headers an upstream's answer carries out: its content type and request id, and what
/// `stamp` writes. (Rate limit and budget headers, when configured, may grow it once.)
const ANSWER_HEADERS: usize = STAMPED_HEADERS + 2;

fn last_failure<T>(run: &ChainRun<T>) -> Option<String> {
    run.attempts
        .last()
        .and_then(|a| a.failure)
        .map(|f| f.kind().to_owned())
}

/// Where the client finds the provider's own id of its request, to quote to the provider.
const UPSTREAM_REQUEST_ID: HeaderName = HeaderName::from_static("x-switchyard-upstream-request-id");

/// An upstream answer, body and status as they came.
fn upstream_response(reply: crate::router::UpstreamReply) -> Response {
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
fn unauthenticated(
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

/// The request's id as the gateway's own header, and as `x-request-id`, which the official
/// SDKs read into their `request_id`.
fn set_request_id(headers: &mut HeaderMap, id: &str) {
    if let Ok(value) = HeaderValue::from_str(id) {
        headers.insert(X_REQUEST_ID, value.clone());
        headers.insert(REQUEST_ID, value);
    }
}

/// The outcome of a request that failed with `status`: the client's own mistake for a 4xx
/// (but a 429, which a provider's or our own limit causes), else an error.
fn failed_by(status: StatusCode) -> Outcome {
    if status.is_client_error() && status != StatusCode::TOO_MANY_REQUESTS {
        Outcome::ClientError
    } else {
        Outcome::Error
    }
}

/// Refuses a request before routing, with one log row like any other request.
fn refuse(mut guard: RecordGuard, error: ApiError, format: ClientFormat) -> Response {
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
