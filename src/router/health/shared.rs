//! The health table as a cluster member sees it: what the other instances announced comes
//! in here, and what this one must tell them goes out through its [`Link`].

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::link::Link;
use super::{DeploymentId, Health, Table};
use crate::config::BreakerConfig;
use crate::router::breaker::{Breaker, Gate};

/// A breaker's state as the cluster holds it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SharedState {
    /// Open for `remaining` more, with this open's `cooldown`.
    Open {
        remaining: Duration,
        cooldown: Duration,
    },
    Closed,
}

/// A breaker whose probe lease this instance holds.
#[derive(Clone, Debug)]
pub struct HeldLease {
    pub id: DeploymentId,
    /// Whether its probe is out now.
    pub probing: bool,
    pub since: Instant,
}

impl Health {
    /// An empty table whose breakers are shared through `link` once it connects.
    pub fn clustered(settings: BreakerConfig, link: Arc<Link>) -> Health {
        let health = Health::new(settings);
        health.lock().link = Some(link);
        health
    }

    /// The cluster link, in cluster mode.
    pub fn link(&self) -> Option<Arc<Link>> {
        self.lock().link.clone()
    }

    /// Applies a change another instance made, unless this breaker is already past it.
    pub fn adopt(&self, id: &DeploymentId, version: u64, state: SharedState, now: Instant) {
        let mut table = self.lock();
        let Some(breaker) = self.entry(&mut table, id, state, now) else {
            return;
        };
        if version <= breaker.shared_version() {
            return;
        }
        breaker.set_shared_version(version);
        match state {
            SharedState::Open {
                remaining,
                cooldown,
            } => breaker.adopt_open(now, remaining, cooldown),
            SharedState::Closed => breaker.adopt_closed(),
        }
    }

    /// Applies another instance's operator reset, without announcing it again.
    pub fn adopt_reset(&self, provider: Option<&str>, model: Option<&str>, version: u64) {
        let mut table = self.lock();
        for (id, breaker) in table.breakers.iter_mut() {
            let matches = provider.is_none_or(|p| id.provider.as_str() == p)
                && model.is_none_or(|m| id.model.as_str() == m);
            if matches {
                breaker.reset();
                breaker.set_shared_version(breaker.shared_version().max(version));
            }
        }
    }

    /// Brings every breaker in line with a read of the shared state, the backstop for
    /// missed messages: `open` is everything open there, as of cluster version `version`.
    /// Breakers with a change of their own still on its way are left alone.
    pub fn adopt_snapshot(
        &self,
        open: &HashMap<DeploymentId, (u64, SharedState)>,
        version: u64,
        now: Instant,
    ) {
        for (id, (v, state)) in open {
            self.adopt(id, *v, *state, now);
        }
        let mut table = self.lock();
        for (id, breaker) in table.breakers.iter_mut() {
            if !open.contains_key(id)
                && !breaker.change_pending()
                && breaker.open_for(now).is_some()
                && breaker.shared_version() < version
            {
                breaker.set_shared_version(version);
                breaker.adopt_closed();
            }
        }
    }

    /// Breakers open here, for a member that rejoins and tells the cluster what it missed.
    pub fn local_opens(&self, now: Instant) -> Vec<(DeploymentId, Duration, Duration)> {
        let table = self.lock();
        table
            .breakers
            .iter()
            .filter_map(|(id, b)| {
                let (remaining, cooldown) = b.open_for(now)?;
                Some((id.clone(), remaining, cooldown))
            })
            .collect()
    }

    /// Shares every breaker through the cluster, or takes them all back to deciding alone.
    /// Either way what was known of the cluster's versions is forgotten: a Redis that comes
    /// back may have lost them, and the next read is the truth.
    pub fn set_shared(&self, shared: bool) {
        let mut table = self.lock();
        for breaker in table.breakers.values_mut() {
            breaker.set_gate(if shared { Gate::Elsewhere } else { Gate::Local });
            breaker.set_shared_version(0);
            breaker.forget_pending();
        }
    }

    /// A change this instance made has reached the cluster as `version`.
    pub fn change_arrived(&self, id: &DeploymentId, version: u64) {
        if let Some(breaker) = self.lock().breakers.get_mut(id) {
            breaker.change_arrived(version);
        }
    }

    /// The version of the open to ask a probe lease for, if `id` still wants one.
    pub fn lease_wanted(&self, id: &DeploymentId, now: Instant) -> Option<u64> {
        let table = self.lock();
        let breaker = table.breakers.get(id)?;
        (breaker.wants_lease(now) && !breaker.change_pending() && breaker.shared_version() > 0)
            .then(|| breaker.shared_version())
    }

    /// The lease for `version` was taken: this instance may probe, if the breaker is still
    /// at that version. `false` means it moved on, and the lease should go back.
    pub fn lease_taken(&self, id: &DeploymentId, version: u64, now: Instant) -> bool {
        let mut table = self.lock();
        match table.breakers.get_mut(id) {
            Some(breaker) if breaker.shared_version() == version && breaker.wants_lease(now) => {
                breaker.set_gate(Gate::Held { since: now });
                true
            }
            _ => false,
        }
    }

    /// The leases this instance holds.
    pub fn held_leases(&self) -> Vec<HeldLease> {
        let table = self.lock();
        table
            .breakers
            .iter()
            .filter_map(|(id, b)| match b.gate() {
                Gate::Held { since } => Some(HeldLease {
                    id: id.clone(),
                    probing: b.probing(),
                    since,
                }),
                _ => None,
            })
            .collect()
    }

    /// Gives up the lease for `id` if its probe has not gone out; `true` when it did, and
    /// the lease should go back to the cluster.
    pub fn give_back_lease(&self, id: &DeploymentId) -> bool {
        let mut table = self.lock();
        match table.breakers.get_mut(id) {
            Some(breaker) if matches!(breaker.gate(), Gate::Held { .. }) && !breaker.probing() => {
                breaker.set_gate(Gate::Elsewhere);
                true
            }
            _ => false,
        }
    }

    /// The breaker a shared change is about; an open creates it (another instance may
    /// open a deployment this one has not used yet), a close of an unknown one is moot.
    fn entry<'t>(
        &self,
        table: &'t mut Table,
        id: &DeploymentId,
        state: SharedState,
        now: Instant,
    ) -> Option<&'t mut Breaker> {
        if !table.breakers.contains_key(id) {
            if state == SharedState::Closed || table.breakers.len() >= super::MAX_TRACKED {
                return None;
            }
            let breaker = table.new_breaker(&self.settings, now);
            table.breakers.insert(id.clone(), breaker);
        }
        table.breakers.get_mut(id)
    }
}
