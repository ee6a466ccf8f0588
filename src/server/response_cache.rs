//! The response cache on the request path: whether a request may be served from the cache,
//! the answer of a hit, and keeping a miss's answer.

mod assemble;
mod replay;
mod responses;

pub(super) use assemble::Assembler;

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use axum::body::Body;
use axum::http::{HeaderMap, HeaderValue, header};
use axum::response::Response;
use bytes::Bytes;
use serde_json::Value;
use tokio::time::Instant;

use super::stamp::stamp_hit;
use crate::auth::Caller;
use crate::cache::{Cache, CacheKey, Entry, Lead, Storing, cache_key, identity};
use crate::config::{Deployment, Route};
use crate::providers::{ClientFormat, ClientRequest, Operation};
use crate::router::UpstreamReply;
use crate::telemetry::{CacheStatus, Outcome, RecordGuard};

/// What the cache does for one request.
pub(super) enum Plan {
    /// The route keeps no answers.
    Off,
    /// The route does, but this request is not read from the cache; its answer is kept when
    /// `Keep` is given (`cache-control: no-cache`).
    Bypass(Option<Keep>),
    /// Look the request up; on a miss, keep its answer.
    Look(Keep),
    /// A stream: served a kept answer replayed as a stream when there is one, else it
    /// streams from upstream at once, without waiting on an identical miss, and its answer
    /// is kept once the stream ends whole.
    Peek(Keep),
}

/// Where a miss's answer goes once it is whole.
pub(super) struct Keep {
    cache: Arc<Cache>,
    key: CacheKey,
    ttl: Duration,
    key_id: Option<String>,
    /// Held while the answer is made: identical misses wait until it hands them the
    /// answer, or drops without one.
    lead: Option<Lead>,
}

/// The cache's part for `request` on `route`.
pub(super) fn plan(
    cache: &Arc<Cache>,
    caller: &Caller,
    route: &Route,
    request: &ClientRequest,
    stream: bool,
    headers: &HeaderMap,
) -> Plan {
    let Some(settings) = route.cache else {
        return Plan::Off;
    };
    let (no_store, no_cache) = directives(headers);
    // A Responses turn that continues another carries state the key does not name (the
    // earlier turns, kept per caller).
    let cacheable = match request.operation {
        Operation::Chat | Operation::Completions => true,
        Operation::Responses => request
            .body
            .get("previous_response_id")
            .is_none_or(Value::is_null),
        Operation::Embeddings => !stream,
        Operation::CountTokens => false,
    };
    if !cacheable || no_store {
        return Plan::Bypass(None);
    }
    let key_id = caller.key.as_ref().map(|k| k.id.clone());
    let identity = identity(settings.scope, key_id.as_deref(), &caller.role);
    let Some(key) = cache_key(&identity, route.name.as_str(), request) else {
        return Plan::Bypass(None);
    };
    let keep = Keep {
        cache: cache.clone(),
        key,
        ttl: settings.ttl,
        key_id,
        lead: None,
    };
    match (no_cache, stream) {
        (true, _) => Plan::Bypass(Some(keep)),
        (false, true) => Plan::Peek(keep),
        (false, false) => Plan::Look(keep),
    }
}

/// `cache-control`'s `no-store` and `no-cache`, in any of its values.
fn directives(headers: &HeaderMap) -> (bool, bool) {
    let mut found = (false, false);
    for value in headers.get_all(header::CACHE_CONTROL) {
        let Ok(value) = value.to_str() else { continue };
        for directive in value.split(',').map(str::trim) {
            if directive.eq_ignore_ascii_case("no-store") {
                found.0 = true;
            } else if directive.eq_ignore_ascii_case("no-cache") {
                found.1 = true;
            }
        }
    }
    found
}

impl Keep {
    /// The key a lookup needs.
    pub(super) fn key(&self) -> CacheKey {
        self.key.clone()
    }

    /// The same, leading the key's flight.
    pub(super) fn led_by(self, lead: Lead) -> Keep {
        Keep {
            lead: Some(lead),
            ..self
        }
    }

    /// Keeps `reply`, served by `step`'s `deployment` on `route`, when it is a whole,
    /// successful answer, handing it to the identical misses that wait. Returns once it is
    /// where every instance finds it, so a client that has its answer finds it kept.
    pub(super) async fn keep(
        self,
        route: &Route,
        request: &ClientRequest,
        reply: &UpstreamReply,
        step: usize,
        deployment: Option<&Deployment>,
    ) {
        if !reply.status.is_success() {
            return;
        }
        let content_type = reply.content_type.clone();
        let kind = (request.operation, request.format);
        let body = reply.body.clone();
        if let Some(storing) = self.keep_body(route, kind, body, content_type, step, deployment) {
            storing.done().await;
        }
    }

    /// Keeps `body`, an answer to a request of `kind`, when it is whole.
    fn keep_body(
        self,
        route: &Route,
        kind: (Operation, ClientFormat),
        body: Bytes,
        content_type: Option<HeaderValue>,
        step: usize,
        deployment: Option<&Deployment>,
    ) -> Option<Storing> {
        let deployment = deployment?;
        if !complete(kind, &body) {
            return None;
        }
        let entry = Entry {
            body,
            content_type: content_type
                .unwrap_or_else(|| HeaderValue::from_static("application/json")),
            stored_at: SystemTime::now(),
            expires: Instant::now() + self.ttl,
            route: route.name.clone(),
            key_id: self.key_id,
            step,
            provider: deployment.provider.clone(),
            model: deployment.model.clone(),
        };
        Some(self.cache.store(self.key, entry, self.lead))
    }
}

/// Whether an answer is whole and ended as answers should: never one whose finish reason
/// is an error or a filter, nor one the gateway cannot read.
fn complete(kind: (Operation, ClientFormat), body: &[u8]) -> bool {
    let Ok(answer) = serde_json::from_slice::<Value>(body) else {
        return false;
    };
    match kind {
        (Operation::Embeddings, _) => answer["data"].is_array(),
        (Operation::Responses, _) => responses::complete(&answer),
        (_, ClientFormat::Anthropic) => matches!(
            answer["stop_reason"].as_str(),
            Some("end_turn" | "max_tokens" | "stop_sequence" | "tool_use")
        ),
        (_, ClientFormat::OpenAi) => answer["choices"].as_array().is_some_and(|choices| {
            !choices.is_empty()
                && choices.iter().all(|choice| {
                    matches!(
                        choice["finish_reason"].as_str(),
                        Some("stop" | "length" | "tool_calls" | "function_call")
                    )
                })
        }),
    }
}

/// A stream's answer on its way to be kept: its events gathered as they go out, kept whole
/// when the stream ends cleanly, dropped at the first sign it will not.
pub(super) struct StreamKeep {
    keep: Keep,
    assembler: assemble::Assembler,
    route: Arc<Route>,
    kind: (Operation, ClientFormat),
    step: usize,
    deployment: Option<Deployment>,
}

impl StreamKeep {
    pub(super) fn new(
        keep: Keep,
        route: Arc<Route>,
        request: &ClientRequest,
        step: usize,
        deployment: Option<Deployment>,
    ) -> StreamKeep {
        StreamKeep {
            keep,
            assembler: assemble::Assembler::new(request.operation, request.format),
            route,
            kind: (request.operation, request.format),
            step,
            deployment,
        }
    }

    /// Reads the events of one frame the client got; false once no whole answer can come.
    pub(super) fn feed(&mut self, frame: &[u8]) -> bool {
        self.assembler.feed(frame)
    }

    /// The stream ended cleanly, having reported `usage` (prompt and completion tokens):
    /// keeps its answer, if whole. With Redis, it is there a moment after the last event.
    pub(super) fn finish(self, usage: Option<(u64, u64)>) {
        let Some(answer) = self.assembler.answer(usage) else {
            return;
        };
        let body = Bytes::from(answer.to_string());
        let deployment = self.deployment.as_ref();
        let route = &self.route;
        let storing = self
            .keep
            .keep_body(route, self.kind, body, None, self.step, deployment);
        // Not waited for: the stream's last event is already on its way to the client.
        drop(storing);
    }
}

/// A kept answer as a request asks for it.
pub(super) struct Replay {
    pub body: Bytes,
    pub content_type: HeaderValue,
    /// A Responses hit's own Response object (a fresh id, made now), for the caller's
    /// conversation state.
    pub response: Option<Value>,
}

/// A kept answer as `request` asks for it: the body as kept, or replayed as a stream in the
/// request's format; a Responses answer under an id of its own. `None` when it cannot be.
pub(super) fn body_for(request: &ClientRequest, stream: bool, entry: &Entry) -> Option<Replay> {
    const EVENTS: HeaderValue = HeaderValue::from_static("text/event-stream");
    if request.operation == Operation::Responses {
        let store = request.body.get("store") != Some(&Value::Bool(false));
        let response = responses::fresh(&entry.body, store)?;
        let (body, content_type) = match stream {
            true => (responses::replay(&response)?, EVENTS),
            false => (
                Bytes::from(response.to_string()),
                entry.content_type.clone(),
            ),
        };
        return Some(Replay {
            body,
            content_type,
            response: Some(response),
        });
    }
    if !stream {
        return Some(Replay {
            body: entry.body.clone(),
            content_type: entry.content_type.clone(),
            response: None,
        });
    }
    let answer: Value = serde_json::from_slice(&entry.body).ok()?;
    let usage = request.asked_stream_usage();
    let body = match (request.operation, request.format) {
        (Operation::Completions, _) => replay::text_completion_stream(&answer, usage),
        (_, ClientFormat::OpenAi) => replay::completion_stream(&answer, usage),
        (_, ClientFormat::Anthropic) => replay::message_stream(&answer),
    }?;
    Some(Replay {
        body,
        content_type: EVENTS,
        response: None,
    })
}

/// A hit's answer, `replay` made from `entry`: with `age`, the step that made it, and one
/// log row with no upstream attempt.
pub(super) fn serve_hit(
    mut guard: RecordGuard,
    route: &Route,
    entry: &Entry,
    replay: Replay,
    coalesced: bool,
) -> Response {
    let mut response = Response::new(Body::from(replay.body));
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, replay.content_type);
    let age = SystemTime::now()
        .duration_since(entry.stored_at)
        .unwrap_or_default()
        .as_secs();
    headers.insert(header::AGE, HeaderValue::from(age));
    let status = if coalesced {
        CacheStatus::Coalesced
    } else {
        CacheStatus::Hit
    };
    set_cache_header(&mut response, status);
    guard.record().cache = Some(status);
    stamp_hit(&mut response, route, entry, Outcome::Success, &mut guard);
    guard.finish();
    response
}

/// `x-switchyard-cache`: what the cache did.
pub(super) fn set_cache_header(response: &mut Response, status: CacheStatus) {
    response
        .headers_mut()
        .insert(CACHE, HeaderValue::from_static(status.as_str()));
}

pub(super) const CACHE: axum::http::HeaderName =
    axum::http::HeaderName::from_static("x-switchyard-cache");
