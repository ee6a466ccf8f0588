//! `POST /v1/chat/completions`: check the request, run its route's chain, answer.
//!
//! The routing core here also serves `/v1/messages` and `/v1/embeddings`: their handlers
//! check their own format's fields and call [`handle`], which answers in the client's format.

use std::net::IpAddr;
use std::sync::Arc;

use axum::body::Body;
use axum::http::{HeaderMap, HeaderName, HeaderValue, header};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;

use super::AppState;
use super::admission;
use super::degraded;
use super::endpoint::{Endpoint, stream_flag};
use super::error::ApiError;
use super::error::BodyError;
use super::refusal::{failed_by, refuse, unauthenticated};
use super::response_cache::{self, Keep, Plan, StreamKeep};
use super::span_content::{self, StreamTrace};
use super::spend;
use super::stamp::{UPSTREAM_REQUEST_ID, stamp, upstream_response};
use super::stream::{StreamForwarder, StreamLimits};
use crate::auth::Caller;
use crate::budgets::Reservation;
use crate::cache::Lookup;
use crate::config::{Config, Route};
use crate::limits::Permit;
use crate::providers::anthropic::ANTHROPIC_BETA;
use crate::providers::{ClientFormat, ClientRequest, JsonKind, Operation, RequestBody};
use crate::router::breaker::CallerTag;
use crate::router::upstream::{CommittedStream, JsonReply};
use crate::router::{Answer, ChainEnd, RouteError, RouteRequest, Routed};
use crate::telemetry::trace::Propagation;
use crate::telemetry::{CacheStatus, Outcome, RecordGuard, RequestRecord};

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
    let guard = RecordGuard::new(state.telemetry.clone(), new_record(state, &id, headers));
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

/// The request's record, in its trace when tracing is on. Out of line: built in `handle`, a
/// record that might be changed made the handler's future be copied whole, where it had
/// been built in place (8,000 instructions a request; bench/instructions.sh).
#[inline(never)]
fn new_record(state: &AppState, id: &str, headers: &HeaderMap) -> RequestRecord {
    let mut record = RequestRecord::new(id.to_owned(), false);
    if let Some(tracing) = &state.tracing {
        record.trace = Some(tracing.start(headers));
    }
    record
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
    if record.trace.is_some() {
        record.operation = Some(match endpoint.operation {
            Operation::Embeddings => "embeddings",
            Operation::Completions => "text_completion",
            _ => "chat",
        });
        record.requested_model = Some(prepared.model.clone());
        let body = &prepared.request.body;
        record.max_tokens = ["max_tokens", "max_completion_tokens", "max_output_tokens"]
            .iter()
            .find_map(|field| body.field_as::<u64>(field));
        let sampled = record.trace.as_ref().is_some_and(|trace| trace.sampled);
        if let (true, Some(tracing)) = (sampled, &state.tracing) {
            span_content::begin(record, tracing, &caller.role, &prepared.request);
        }
    }
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
    // The cache: after the rate limits, which count a hit as a request, and before the spend
    // budgets, which a hit costs nothing against.
    let cache_plan = response_cache::plan(
        &state.cache,
        &caller,
        &prepared.route,
        &prepared.request,
        prepared.stream,
        headers,
    );
    let (keep, mut cache_status, kept) = match cache_plan {
        Plan::Off => (None, None, None),
        Plan::Bypass(keep) => (keep, Some(CacheStatus::Bypass), None),
        Plan::Look(keep) => match state.cache.lookup(keep.key()).await {
            Lookup::Hit { entry, coalesced } => (None, None, Some((entry, coalesced))),
            Lookup::Miss(lead) => (Some(keep.led_by(lead)), Some(CacheStatus::Miss), None),
        },
        Plan::Peek(keep) => match state.cache.peek(&keep.key()).await {
            Some(entry) => (None, None, Some((entry, false))),
            None => (Some(keep), Some(CacheStatus::Miss), None),
        },
    };
    if let Some((entry, coalesced)) = kept {
        if guard.record().detail.is_some() {
            let kind = (prepared.request.operation, prepared.request.format);
            span_content::answered(guard.record(), kind, &entry.body);
        }
        match response_cache::body_for(&prepared.request, prepared.stream, &entry) {
            Some(mut replay) => {
                if let (Some(plan), Some(served)) = (responses_plan, replay.response.take()) {
                    // Before the client can see the hit's id, as for a served response.
                    Box::pin(super::responses::after_hit(plan, &served)).await;
                }
                let route = &prepared.route;
                let mut response =
                    response_cache::serve_hit(guard, route, &entry, replay, coalesced);
                admission::add_rate_headers(&mut response, &rate_headers);
                return response;
            }
            // A kept answer this request's format cannot replay: it goes upstream.
            None => cache_status = Some(CacheStatus::Miss),
        }
    }
    guard.record().cache = cache_status;
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
    if let (Some(detail), Some(reserved)) = (
        guard.record().detail.as_deref_mut(),
        prepared.reservation.as_ref(),
    ) {
        detail.budget = Some((reserved.amount(), reserved.remaining()));
    }
    let reservation = prepared.reservation.take();
    let deadline = guard.started() + state.config().retry.request_deadline;
    let propagation = Propagation::of(guard.record().trace.as_ref(), headers);
    let routing = RouteRequest {
        route: prepared.route,
        request: prepared.request,
        stream: prepared.stream,
        first_step: prepared.first_step,
        caller: prepared.caller,
        deadline,
        propagation,
    };
    // Boxed: inline, the chain's future (5.6 KB for a stream) made every future above it as
    // large, and axum's layers move the handler's future by value several times a request.
    let mut response = match Box::pin(state.router().route(routing)).await {
        Routed::Json(answer) => answer_json(answer, guard, permit, reservation, keep).await,
        Routed::Stream(answer) => {
            let limits = StreamLimits {
                idle_timeout: state.config().retry.stream_idle_timeout,
                deadline,
                grace_over: state.grace_over.subscribe(),
            };
            answer_stream(answer, guard, permit, reservation, limits, keep).await
        }
    };
    if let Some(plan) = responses_plan {
        response = Box::pin(super::responses::after(plan, response)).await;
    }
    admission::add_rate_headers(&mut response, &rate_headers);
    spend::add_remaining_header(&mut response, remaining);
    if let Some(status) = cache_status {
        response_cache::set_cache_header(&mut response, status);
    }
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

/// The client headers any provider's `forward_headers` names, as they came (none at all,
/// and nothing spent, when no provider forwards any).
fn forwarded(config: &Config, headers: &HeaderMap) -> Vec<(HeaderName, HeaderValue)> {
    let mut forwarded: Vec<(HeaderName, HeaderValue)> = Vec::new();
    for name in config.providers.iter().flat_map(|p| &p.forward_headers) {
        if forwarded.iter().any(|(have, _)| have == name) {
            continue;
        }
        if let Some(value) = headers.get(name) {
            forwarded.push((name.clone(), value.clone()));
        }
    }
    forwarded
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
    let route = state.router().resolve(&model).map_err(|e| match e {
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
            forwarded: forwarded(state.config(), headers),
        },
        stream,
        first_step: 0,
        caller: CallerTag::new(""),
        reservation: None,
    })
}

async fn answer_json(
    mut answer: Answer<JsonReply>,
    mut guard: RecordGuard,
    permit: Permit,
    reservation: Option<Reservation>,
    keep: Option<Keep>,
) -> Response {
    spend::settle_json(reservation, &answer.run).await;
    let (response, served) = match answer.take_end() {
        ChainEnd::Served { step, output } => {
            if let Some(keep) = keep {
                let served_by = answer.run.answered_by.as_ref();
                keep.keep(
                    &answer.route,
                    &answer.request,
                    &output.reply,
                    step,
                    served_by,
                )
                .await;
            }
            let record = guard.record();
            if record.detail.is_some() {
                let kind = (answer.request.operation, answer.request.format);
                span_content::answered(record, kind, &output.reply.body);
            }
            if let Some(usage) = output.usage {
                record.tokens_in = Some(usage.prompt_tokens);
                record.tokens_out = Some(usage.completion_tokens);
                permit.charge_tokens(usage.prompt_tokens + usage.completion_tokens);
            }
            (
                upstream_response(output.reply),
                Some((step, served_by(step))),
            )
        }
        ChainEnd::Returned { step, reply } => {
            guard.record().error = answer.last_failure();
            let outcome = failed_by(reply.status);
            (upstream_response(reply), Some((step, outcome)))
        }
        ChainEnd::Exhausted => return exhausted(answer, guard, false),
    };
    finish(response, &answer, served, guard)
}

async fn answer_stream(
    mut answer: Answer<CommittedStream>,
    mut guard: RecordGuard,
    permit: Permit,
    mut reservation: Option<Reservation>,
    limits: StreamLimits,
    keep: Option<Keep>,
) -> Response {
    spend::charge_cancelled_hedges(&mut reservation, &answer.run);
    if !matches!(answer.run.end, ChainEnd::Served { .. }) {
        spend::settle_unserved(reservation.take()).await;
    }
    match answer.take_end() {
        ChainEnd::Served { step, output } => {
            guard.record().ttft = Some(guard.started().elapsed());
            let mut response = Response::new(Body::empty());
            stamp(
                &mut response,
                &answer,
                Some(step),
                served_by(step),
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
            let verdict = answer.run.verdict.take();
            let keeping = keep.map(|keep| {
                let served_by = answer.run.answered_by.clone();
                StreamKeep::new(keep, answer.route.clone(), &answer.request, step, served_by)
            });
            let trace = StreamTrace::of(guard.record(), &answer.request);
            let forwarder = StreamForwarder::new(output, guard, permit, verdict, limits)
                .with_reservation(reservation)
                .keeping(keeping)
                .tracing(trace);
            *response.body_mut() = forwarder.into_body();
            response
        }
        ChainEnd::Returned { step, reply } => {
            guard.record().error = answer.last_failure();
            let outcome = failed_by(reply.status);
            finish(
                upstream_response(reply),
                &answer,
                Some((step, outcome)),
                guard,
            )
        }
        ChainEnd::Exhausted => exhausted(answer, guard, true),
    }
}

/// The outcome of an answer served by `step`: the first step's success, or a fallback's.
fn served_by(step: usize) -> Outcome {
    if step == 0 {
        Outcome::Success
    } else {
        Outcome::Fallback
    }
}

/// Every step failed: the canned tier if the route has one, else a 503 naming each failure.
fn exhausted<T>(answer: Answer<T>, mut guard: RecordGuard, stream: bool) -> Response {
    let (route, request) = (&answer.route, &answer.request);
    let degraded = route
        .degraded
        .as_ref()
        .filter(|_| request.operation != Operation::Embeddings);
    let Some(content) = degraded else {
        let exhausted = answer.exhausted();
        let failures = exhausted.failures;
        // Rate-limited everywhere: a 429 with the soonest retry lets the client's SDK wait
        // and retry as it does for any rate limit, where a 503 would not.
        let error = match exhausted.retry_after {
            Some(retry_after) => ApiError::UpstreamRateLimited {
                failures,
                retry_after,
            },
            None => ApiError::AllStepsFailed(failures),
        };
        let reason = if exhausted.by_retry_budget {
            "retry_budget_exhausted"
        } else {
            error.kind()
        };
        guard.record().error = Some(reason.into());
        let mut response = error.into_response_for(request.format);
        if let Some(id) = answer.run.last_upstream_request_id.clone() {
            response.headers_mut().insert(UPSTREAM_REQUEST_ID, id);
        }
        return finish(response, &answer, None, guard);
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
    stamp(&mut response, &answer, None, Outcome::Degraded, &mut guard);
    guard.record().ttft = Some(guard.started().elapsed());
    guard.finish();
    response
}

fn finish<T>(
    mut response: Response,
    answer: &Answer<T>,
    served: Option<(usize, Outcome)>,
    mut guard: RecordGuard,
) -> Response {
    let (step, outcome) = match served {
        Some((step, outcome)) => (Some(step), outcome),
        None => (None, Outcome::Error),
    };
    stamp(&mut response, answer, step, outcome, &mut guard);
    guard.finish();
    response
}
