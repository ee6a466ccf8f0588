//! Routing: which chain a request takes, and the attempt loop that walks it.
//!
//! `chain` runs the loop, `classify` decides what each failure means, `scrub` takes the keys
//! an attempt sent out of what comes back, and `retry` computes the waits between attempts.
//! `health` remembers how each deployment has done lately: its
//! `breaker`, and what `balance` needs to choose among a step's deployments. The loop knows
//! nothing of wire formats: an [`Attempter`] makes each attempt and reports it.

pub mod balance;
pub mod breaker;
pub mod chain;
pub mod classify;
pub mod health;
pub mod retry;
pub mod scrub;
pub mod upstream;

pub use chain::{Attempt, Attempter, ChainEnd, ChainRun, Failure, UpstreamReply, run_chain};
pub use classify::{Action, FailureClass};
pub use health::Health;

use std::sync::Arc;

use crate::config::{Config, ModelName, ProviderId, Route, RouteName, Step};

/// Finds the route a client's `model` names: a configured route, or `provider/model` directly.
pub fn resolve_route(config: &Config, routes: &[Arc<Route>], model: &str) -> Option<Arc<Route>> {
    if let Some(route) = routes.iter().find(|r| r.name.as_str() == model) {
        return Some(route.clone());
    }
    let (provider, upstream_model) = model.split_once('/')?;
    let provider = config
        .providers
        .iter()
        .find(|p| p.id.as_str() == provider)?;
    if upstream_model.is_empty() {
        return None;
    }
    Some(Arc::new(Route {
        name: RouteName(Arc::from(model)),
        steps: vec![Step::single(
            ProviderId(provider.id.0.clone()),
            ModelName(Arc::from(upstream_model)),
        )],
        fallback_on_context_length: false,
        degraded: None,
    }))
}
