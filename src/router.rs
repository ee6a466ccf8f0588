//! Routing: which chain a request takes, and the attempt loop that walks it.
//!
//! The server comes in through `entry` alone: it hands over a checked request and reads
//! back how the chain ended.
//! `chain` runs the loop (and its `hedge`s), `classify` decides what each failure means,
//! `upstream` makes an attempt over HTTP (its `scrub` takes the key it sent out of what comes
//! back), and `retry` computes the waits between attempts.
//! `health` remembers how each deployment has done lately: its
//! `breaker`, what `balance` needs to choose among a step's deployments, and the counts
//! `retry_budget` holds each deployment's retries to. The loop knows
//! nothing of wire formats: an [`Attempter`] makes each attempt and reports it.

pub mod balance;
pub mod breaker;
pub mod chain;
pub mod classify;
pub mod entry;
pub mod health;
pub mod hedge_budget;
pub mod retry;
pub mod retry_budget;
pub mod upstream;

pub use chain::{Attempt, Attempter, ChainEnd, ChainRun, Failure, UpstreamReply, run_chain};
pub use classify::{Action, FailureClass};
pub use entry::{Answer, Exhausted, RouteRequest, Routed, Router};
pub use health::Health;

use std::sync::Arc;

use crate::config::{Config, ModelName, ProviderId, Route, RouteName, Step};

/// Why a client's `model` names no route it can take.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RouteError {
    /// Neither a route nor `provider/model` of a configured provider.
    Unknown,
    /// A direct name whose model part cannot go to its provider, and why.
    BadModelName(&'static str),
}

/// Finds the route a client's `model` names: a configured route, or `provider/model` directly.
/// A direct model part is checked before any upstream sees it, since it is the client's.
pub fn resolve_route(
    config: &Config,
    routes: &[Arc<Route>],
    model: &str,
) -> Result<Arc<Route>, RouteError> {
    if let Some(route) = routes.iter().find(|r| r.name.as_str() == model) {
        return Ok(route.clone());
    }
    let (provider, upstream_model) = model.split_once('/').ok_or(RouteError::Unknown)?;
    let provider = config
        .providers
        .iter()
        .find(|p| p.id.as_str() == provider)
        .ok_or(RouteError::Unknown)?;
    if upstream_model.is_empty() {
        return Err(RouteError::Unknown);
    }
    crate::providers::check_model_name(provider.kind, upstream_model)
        .map_err(RouteError::BadModelName)?;
    Ok(Arc::new(Route {
        name: RouteName(Arc::from(model)),
        steps: vec![Step::single(
            ProviderId(provider.id.0.clone()),
            ModelName(Arc::from(upstream_model)),
        )],
        fallback_on_context_length: false,
        degraded: None,
        hedge: None,
        cache: None,
    }))
}
