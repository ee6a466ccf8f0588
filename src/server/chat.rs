//! `POST /v1/chat/completions`: check the request, run its route's chain, answer.

use std::sync::Arc;

use axum::body::Body;
use axum::extract::State;
use axum::extract::rejection::BytesRejection;
use axum::http::{HeaderMap, HeaderName, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use serde_json::{Map, Value};

use super::AppState;
use super::degraded;
use super::error::ApiError;
use super::stream::StreamForwarder;
use crate::config::Route;
use crate::router::chain::{ChainInputs, describe_failures};
use crate::router::upstream::{JsonAttempter, StreamAttempter};
use crate::router::{ChainEnd, ChainRun, resolve_route, run_chain};
use crate::telemetry::{Outcome, RecordGuard, RequestRecord};

/// The request header that skips step 0, for operators demoing degraded paths.
pub const FORCE_FALLBACK: &str = "x-switchyard-force-fallback";

/// A request that passed every check and is ready to route.
struct Prepared {
    route: Arc<Route>,
    request: Map<String, Value>,
    stream: bool,
    first_step: usize,
}

pub async fn chat_completions(
    State(state): State<AppState>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let id = uuid::Uuid::now_v7().to_string();
    let mut guard = RecordGuard::new(state.telemetry.clone(), RequestRecord::new(id, false));
    match prepare(&state, &headers, body) {
        Ok(prepared) => {
            let record = guard.record();
            record.route = Some(prepared.route.name.clone());
            record.stream = prepared.stream;
            if prepared.stream {
                route_stream(&state, prepared, guard).await
            } else {
                route_json(&state, prepared, guard).await
            }
        }
        Err(error) => refuse(guard, error),
    }
}

fn prepare(
    state: &AppState,
    headers: &HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<Prepared, ApiError> {
    let body = body.map_err(|rejection| match rejection.status() {
        StatusCode::PAYLOAD_TOO_LARGE => ApiError::BodyTooLarge {
            limit: state.config.server.max_body_bytes,
        },
        _ => ApiError::InvalidJson(rejection.body_text()),
    })?;
    let request: Map<String, Value> =
        serde_json::from_slice(&body).map_err(|e| ApiError::InvalidJson(e.to_string()))?;
    let model = match request.get("model") {
        Some(Value::String(model)) if !model.is_empty() => model,
        _ => {
            return Err(ApiError::InvalidRequest {
                message: "`model` is required and must be a non-empty string".into(),
                param: Some("model"),
            });
        }
    };
    if !matches!(request.get("messages"), Some(Value::Array(_))) {
        return Err(ApiError::InvalidRequest {
            message: "`messages` is required and must be an array".into(),
            param: Some("messages"),
        });
    }
    let stream = match request.get("stream") {
        None | Some(Value::Null) => false,
        Some(Value::Bool(stream)) => *stream,
        Some(_) => {
            return Err(ApiError::InvalidRequest {
                message: "`stream` must be a boolean".into(),
                param: Some("stream"),
            });
        }
    };
    let route = resolve_route(&state.config, &state.routes, model)
        .ok_or_else(|| ApiError::UnknownModel(model.clone()))?;
    let forced = headers
        .get(FORCE_FALLBACK)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.eq_ignore_ascii_case("true"));
    if forced && !state.config.debug.allow_force_fallback {
        return Err(ApiError::Forbidden(
            "x-switchyard-force-fallback needs a key with the debug permission, or [debug] allow_force_fallback = true",
        ));
    }
    Ok(Prepared {
        route,
        request,
        stream,
        first_step: usize::from(forced),
    })
}

async fn route_json(state: &AppState, prepared: Prepared, mut guard: RecordGuard) -> Response {
    let deadline = guard.started() + state.config.retry.request_deadline;
    let mut attempter = JsonAttempter {
        client: &state.client,
        request: prepared.request,
        fallback_on_context_length: prepared.route.fallback_on_context_length,
        deadline,
    };
    let inputs = ChainInputs {
        config: &state.config,
        keys: &state.keys,
        health: &state.health,
        route: &prepared.route,
        first_step: prepared.first_step,
        deadline,
    };
    let mut run = run_chain(inputs, &mut attempter).await;
    let end = std::mem::replace(&mut run.end, ChainEnd::Exhausted);
    let (response, served) = match end {
        ChainEnd::Served { step, output } => {
            let record = guard.record();
            if let Some(usage) = output.usage {
                record.tokens_in = Some(usage.prompt_tokens);
                record.tokens_out = Some(usage.completion_tokens);
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
            (upstream_response(reply), Some((step, Outcome::Error)))
        }
        ChainEnd::Exhausted => return exhausted(&prepared.route, run, guard, false, false),
    };
    finish(response, &prepared.route, &run, served, guard)
}

async fn route_stream(state: &AppState, prepared: Prepared, mut guard: RecordGuard) -> Response {
    let deadline = guard.started() + state.config.retry.request_deadline;
    let client_asked_usage = prepared
        .request
        .get("stream_options")
        .and_then(|o| o.get("include_usage"))
        == Some(&Value::Bool(true));
    let mut attempter = StreamAttempter {
        client: &state.client,
        request: prepared.request,
        fallback_on_context_length: prepared.route.fallback_on_context_length,
    };
    let inputs = ChainInputs {
        config: &state.config,
        keys: &state.keys,
        health: &state.health,
        route: &prepared.route,
        first_step: prepared.first_step,
        deadline,
    };
    let mut run = run_chain(inputs, &mut attempter).await;
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
            headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
            let forwarder =
                StreamForwarder::new(output, guard, state.config.retry.stream_idle_timeout);
            *response.body_mut() = forwarder.into_body();
            response
        }
        ChainEnd::Returned { step, reply } => {
            guard.record().error = last_failure(&run);
            finish(
                upstream_response(reply),
                &prepared.route,
                &run,
                Some((step, Outcome::Error)),
                guard,
            )
        }
        ChainEnd::Exhausted => exhausted(&prepared.route, run, guard, true, client_asked_usage),
    }
}

/// Every step failed: the canned tier if the route has one, else a 503 naming each failure.
fn exhausted<T>(
    route: &Route,
    run: ChainRun<T>,
    mut guard: RecordGuard,
    stream: bool,
    include_usage: bool,
) -> Response {
    let Some(content) = &route.degraded else {
        let error = ApiError::AllStepsFailed(describe_failures(&run.attempts));
        guard.record().error = Some(error.kind().into());
        return finish(error.into_response(), route, &run, None, guard);
    };
    let id = guard.record().id.clone();
    let response = if stream {
        let body = degraded::stream(&id, route.name.as_str(), content, include_usage);
        ([(header::CONTENT_TYPE, "text/event-stream")], body).into_response()
    } else {
        let body = degraded::completion(&id, route.name.as_str(), content);
        ([(header::CONTENT_TYPE, "application/json")], body).into_response()
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
    set(headers, "x-switchyard-request-id", &record.id);
    set(headers, "x-switchyard-route", route.name.as_str());
    set(headers, "x-switchyard-attempts", &attempts.to_string());
    set(headers, "x-switchyard-outcome", outcome.as_str());
    set(
        headers,
        "x-switchyard-overhead-ms",
        &format!("{:.3}", overhead.as_secs_f64() * 1e3),
    );
    if let (Some(step), Some(served)) = (step, &run.answered_by) {
        set(headers, "x-switchyard-step", &step.to_string());
        set(headers, "x-switchyard-provider", served.provider.as_str());
        set(headers, "x-switchyard-model", served.model.as_str());
        record.step = Some(step);
        record.provider = Some(served.provider.clone());
        record.model = Some(served.model.clone());
    }
    record.outcome = outcome;
    record.status = response.status().as_u16();
    record.attempts = run.attempts.clone();
}

fn set(headers: &mut HeaderMap, name: &'static str, value: &str) {
    if let Ok(value) = HeaderValue::from_str(value) {
        headers.insert(HeaderName::from_static(name), value);
    }
}

fn last_failure<T>(run: &ChainRun<T>) -> Option<String> {
    run.attempts
        .last()
        .and_then(|a| a.failure)
        .map(|f| f.kind().to_owned())
}

/// An upstream answer, body and status as they came.
fn upstream_response(reply: crate::router::UpstreamReply) -> Response {
    let mut response = Response::new(Body::from(reply.body));
    *response.status_mut() = reply.status;
    let content_type = reply
        .content_type
        .unwrap_or_else(|| HeaderValue::from_static("application/json"));
    response
        .headers_mut()
        .insert(header::CONTENT_TYPE, content_type);
    response
}

/// Refuses a request before routing, with one log row like any other request.
fn refuse(mut guard: RecordGuard, error: ApiError) -> Response {
    let kind = error.kind();
    let mut response = error.into_response();
    let record = guard.record();
    set(
        response.headers_mut(),
        "x-switchyard-request-id",
        &record.id,
    );
    record.status = response.status().as_u16();
    record.outcome = Outcome::Error;
    record.error = Some(kind.into());
    guard.finish();
    response
}
