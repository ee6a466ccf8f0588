//! Readiness follows the backends, not the traffic: a background check asks the limit
//! backend and the store every second, so `/readyz` recovers when they do, even on an
//! instance a load balancer has stopped sending requests to.

use std::sync::{Mutex, Weak};
use std::time::Duration;

use tokio::time::MissedTickBehavior;

use super::Shared;

/// How often the backends are checked.
const INTERVAL: Duration = Duration::from_secs(1);
/// A store slower than this to answer a trivial query counts as down.
const STORE_TIMEOUT: Duration = Duration::from_secs(1);

/// What the last check found of the store.
#[derive(Default)]
pub struct Readiness {
    /// Why the store is unhealthy; `None` while it answers.
    store: Mutex<Option<&'static str>>,
}

impl Readiness {
    /// Why the store failed its last check, in words safe to show anyone.
    pub fn store_problem(&self) -> Option<&'static str> {
        // A poisoned lock only means a panic while storing a plain value; keep using it.
        *self.store.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn set_store(&self, problem: Option<&'static str>) {
        *self.store.lock().unwrap_or_else(|e| e.into_inner()) = problem;
    }
}

/// Checks until the gateway is gone (nothing else holds its state). Nothing of the state is
/// held while a check waits, so a stopping gateway is never kept alive by one.
pub async fn check_backends(state: Weak<Shared>) {
    let mut ticks = tokio::time::interval(INTERVAL);
    ticks.set_missed_tick_behavior(MissedTickBehavior::Delay);
    loop {
        ticks.tick().await;
        let Some(shared) = state.upgrade() else {
            return;
        };
        let limits = shared.live().limits.probe();
        let store = shared.store.clone();
        drop(shared);
        let store = async {
            match tokio::time::timeout(STORE_TIMEOUT, store.generation()).await {
                Ok(Ok(_)) => None,
                Ok(Err(e)) => {
                    tracing::warn!(error = %e, "the store fails its health check");
                    Some("query failed")
                }
                Err(_) => Some("no answer in time"),
            }
        };
        let ((), store) = tokio::join!(limits, store);
        let Some(shared) = state.upgrade() else {
            return;
        };
        shared.readiness.set_store(store);
    }
}
