//! A served stream's breaker verdict, given when the stream ends rather than when it
//! commits: a stream the provider breaks mid-answer is that deployment's failure.

use std::sync::Arc;

use tokio::time::Instant;

use super::{DeploymentId, Health};
use crate::router::breaker::{CallerTag, Ticket, Verdict};

/// A served attempt's verdict, still to come. It holds the attempt's ticket, so it must
/// go straight into a [`PendingVerdict`], which gives the ticket back if never settled.
#[derive(Debug)]
pub struct Deferred {
    id: DeploymentId,
    ticket: Option<Ticket>,
    caller: CallerTag,
}

impl Deferred {
    pub(super) fn new(id: DeploymentId, ticket: Option<Ticket>, caller: CallerTag) -> Deferred {
        Deferred { id, ticket, caller }
    }
}

/// A committed stream's verdict, given when the stream ends: a success only if it ended
/// well. Dropped unsettled (the client went away), it says nothing about the provider and
/// frees a probe's slot.
pub struct PendingVerdict {
    health: Arc<Health>,
    deferred: Deferred,
}

impl PendingVerdict {
    /// Holds `deferred` until the stream ends.
    pub fn new(health: Arc<Health>, deferred: Deferred) -> PendingVerdict {
        PendingVerdict { health, deferred }
    }

    /// Gives the verdict.
    pub fn settle(mut self, verdict: Verdict) {
        let Some(ticket) = self.deferred.ticket.take() else {
            return;
        };
        let mut table = self.health.lock();
        let id = &self.deferred.id;
        if let Some(breaker) = table.breakers.get_mut(id) {
            let transition = breaker.record(Instant::now(), ticket, verdict, self.deferred.caller);
            table.announce(id, transition);
        }
    }
}

impl Drop for PendingVerdict {
    fn drop(&mut self) {
        if let Some(ticket) = self.deferred.ticket.take() {
            let mut table = self.health.lock();
            if let Some(breaker) = table.breakers.get_mut(&self.deferred.id) {
                breaker.cancel(ticket);
            }
        }
    }
}
