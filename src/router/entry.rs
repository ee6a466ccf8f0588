//! The router's one entry: the server hands over a checked request and gets back how the
//! chain ended, with what its headers, log row and degraded tier need to say.
//!
//! Everything between lives here: which attempter serves the request, the attempts, hedges,
//! retry and hedge budgets, breakers and keys. The server knows none of it; it asks the
//! answer what happened through [`Answer`]'s methods.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::breaker::CallerTag;
use super::chain::{ChainInputs, describe_failures, rate_limited_everywhere, run_chain};
use super::retry_budget::ended_by_refusal;
use super::upstream::{CommittedStream, JsonAttempter, JsonReply, StreamAttempter, UpstreamClient};
use super::{ChainEnd, ChainRun, Health, RouteError, resolve_route};
use crate::config::{Config, Route};
use crate::keys::KeyRing;
use crate::providers::ClientRequest;
use crate::telemetry::trace::Propagation;

/// What routing reads that every request shares: the config, keys, health and client.
pub struct Router<'a> {
    pub config: &'a Config,
    pub routes: &'a [Arc<Route>],
    pub keys: &'a KeyRing,
    /// Breakers, latency estimates and balancing state.
    pub health: &'a Arc<Health>,
    pub client: &'a UpstreamClient,
}

/// One checked request, ready to route.
pub struct RouteRequest {
    pub route: Arc<Route>,
    pub request: ClientRequest,
    pub stream: bool,
    /// The first step to try: 1 when an operator forces a fallback.
    pub first_step: usize,
    /// Who asks, as breakers tell callers apart.
    pub caller: CallerTag,
    /// When the whole request must be over, retries and fallbacks included.
    pub deadline: Instant,
    /// The request's trace context, for its attempts.
    pub propagation: Propagation,
}

/// How routing ended, by the kind of answer asked for.
pub enum Routed {
    Json(Answer<JsonReply>),
    Stream(Answer<CommittedStream>),
}

/// How one request's chain ended, and the request, given back for the degraded tier.
pub struct Answer<T> {
    pub route: Arc<Route>,
    pub request: ClientRequest,
    pub run: ChainRun<T>,
}

/// Why every step failed, as the client is told.
pub struct Exhausted {
    /// Each step's failure, in order.
    pub failures: String,
    /// Every step was rate-limited: the soonest any may be retried.
    pub retry_after: Option<Duration>,
    /// The chain ended because a retry budget refused the attempt it needed.
    pub by_retry_budget: bool,
}

impl Router<'_> {
    /// The route a client's `model` names.
    pub fn resolve(&self, model: &str) -> Result<Arc<Route>, RouteError> {
        resolve_route(self.config, self.routes, model)
    }

    /// Walks the request's chain until a step answers or none is left.
    pub async fn route(&self, request: RouteRequest) -> Routed {
        let RouteRequest {
            route,
            request,
            stream,
            first_step,
            caller,
            deadline,
            propagation,
        } = request;
        let server = &self.config.server;
        let inputs = ChainInputs {
            config: self.config,
            keys: self.keys,
            health: self.health,
            route: &route,
            first_step,
            deadline,
            caller,
            traced: propagation.traced(),
        };
        if stream {
            let attempter = StreamAttempter {
                client: self.client,
                request,
                fallback_on_context_length: route.fallback_on_context_length,
                max_body_bytes: server.max_upstream_body_bytes,
                max_event_bytes: server.max_sse_event_bytes,
                propagation,
            };
            let run = run_chain(inputs, &attempter).await;
            Routed::Stream(Answer {
                request: attempter.request,
                route,
                run,
            })
        } else {
            let attempter = JsonAttempter {
                client: self.client,
                request,
                fallback_on_context_length: route.fallback_on_context_length,
                deadline,
                max_body_bytes: server.max_upstream_body_bytes,
                propagation,
            };
            let run = run_chain(inputs, &attempter).await;
            Routed::Json(Answer {
                request: attempter.request,
                route,
                run,
            })
        }
    }
}

impl<T> Answer<T> {
    /// Takes how the chain ended, leaving `Exhausted` in its place.
    pub fn take_end(&mut self) -> ChainEnd<T> {
        std::mem::replace(&mut self.run.end, ChainEnd::Exhausted)
    }

    /// Why every step failed, for an answer that ended exhausted.
    pub fn exhausted(&self) -> Exhausted {
        Exhausted {
            failures: describe_failures(&self.run),
            retry_after: rate_limited_everywhere(&self.run),
            by_retry_budget: ended_by_refusal(&self.run.attempts),
        }
    }

    /// The kind of the last attempt's failure, for the log row of an error passed back.
    pub fn last_failure(&self) -> Option<String> {
        self.run
            .attempts
            .last()
            .and_then(|a| a.failure)
            .map(|f| f.kind().to_owned())
    }
}
