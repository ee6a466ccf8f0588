//! A breaker as one of a cluster's: its opens and closes go to the other instances, theirs
//! come in, and only the holder of the cluster's probe lease may probe it.
//!
//! The failure counts stay local (each instance judges what it sees); what is shared is
//! the verdict: open, for how long, and closed again.

use std::time::Duration;

use tokio::time::Instant;

use super::{Breaker, Refusal, State};

/// A change of state the other instances must hear of.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Transition {
    /// It opened (tripped, or a probe failed) for this cooldown.
    Opened { cooldown: Duration },
    /// A probe succeeded.
    Closed,
}

/// Who may send the probe once the cooldown is over.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Gate {
    /// This instance alone decides: a single node, or a cluster member cut off from Redis.
    Local,
    /// The cluster decides, and this instance does not hold the probe lease.
    Elsewhere,
    /// This instance holds the cluster's probe lease, taken then.
    Held { since: Instant },
}

impl Breaker {
    /// Refuses a probe that is another instance's to send.
    pub(super) fn may_probe(&self) -> Result<(), Refusal> {
        match self.gate {
            Gate::Elsewhere => Err(Refusal::AwaitingLease),
            Gate::Local | Gate::Held { .. } => Ok(()),
        }
    }

    /// A probe's verdict is in: the lease it went under ends with it.
    pub(super) fn probe_settled(&mut self) {
        if let Gate::Held { .. } = self.gate {
            self.gate = Gate::Elsewhere;
        }
    }

    pub fn gate(&self) -> Gate {
        self.gate
    }

    pub fn set_gate(&mut self, gate: Gate) {
        self.gate = gate;
    }

    /// Whether this instance should ask for the probe lease: the cooldown is over, no probe
    /// is out here, and the lease is not ours yet.
    pub fn wants_lease(&self, now: Instant) -> bool {
        self.gate == Gate::Elsewhere
            && match self.state {
                State::Open { until } => now >= until,
                State::HalfOpen { probing } => !probing,
                State::Closed => false,
            }
    }

    /// Whether a probe is out from this instance.
    pub fn probing(&self) -> bool {
        self.state == (State::HalfOpen { probing: true })
    }

    /// Takes an open announced by another instance (or read from the shared state):
    /// open for `remaining`, with `cooldown` as this open's length. Attempts admitted
    /// before no longer count.
    pub fn adopt_open(&mut self, now: Instant, remaining: Duration, cooldown: Duration) {
        if self.state == State::Closed {
            self.times_opened += 1;
        }
        self.epoch += 1;
        self.cooldown = cooldown.clamp(self.settings.cooldown_min, self.settings.cooldown);
        self.state = State::Open {
            until: now + remaining,
        };
        self.probe_settled();
    }

    /// Takes a close announced by another instance: its probe succeeded.
    pub fn adopt_closed(&mut self) {
        if self.state != State::Closed {
            self.cooldown = self.settings.cooldown_min;
            self.close();
        }
        self.probe_settled();
    }

    /// The shared version this breaker reflects.
    pub fn shared_version(&self) -> u64 {
        self.shared_version
    }

    pub fn set_shared_version(&mut self, version: u64) {
        self.shared_version = version;
    }

    /// Whether a local change is still on its way to the cluster: the shared state is
    /// behind this breaker, not ahead of it.
    pub fn change_pending(&self) -> bool {
        self.pending > 0
    }

    pub fn change_sent(&mut self) {
        self.pending = self.pending.saturating_add(1);
    }

    pub fn change_arrived(&mut self, version: u64) {
        self.pending = self.pending.saturating_sub(1);
        self.shared_version = self.shared_version.max(version);
    }

    /// Forgets changes in flight, for a cluster link that broke before they arrived.
    pub fn forget_pending(&mut self) {
        self.pending = 0;
    }

    /// How long an open breaker has still to wait, and its cooldown; `None` when closed.
    /// Half-open counts as open with nothing left to wait.
    pub fn open_for(&self, now: Instant) -> Option<(Duration, Duration)> {
        match self.state {
            State::Closed => None,
            State::Open { until } => Some((until.saturating_duration_since(now), self.cooldown)),
            State::HalfOpen { .. } => Some((Duration::ZERO, self.cooldown)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::BreakerConfig;
    use crate::router::breaker::{CallerTag, Verdict};

    fn settings() -> BreakerConfig {
        BreakerConfig {
            consecutive_failures: 1,
            failure_rate: 1.0,
            window: Duration::from_secs(60),
            min_requests: 100,
            cooldown: Duration::from_secs(40),
            cooldown_min: Duration::from_secs(10),
            min_callers: 1,
        }
    }

    #[test]
    fn a_clustered_breaker_probes_only_under_the_lease() {
        let t0 = Instant::now();
        let caller = CallerTag::new("a");
        let mut breaker = Breaker::new(settings(), t0);
        breaker.set_gate(Gate::Elsewhere);
        let ticket = breaker.admit(t0).unwrap();
        let opened = breaker.record(t0, ticket, Verdict::Failure, caller);
        assert_eq!(
            opened,
            Some(Transition::Opened {
                cooldown: Duration::from_secs(10)
            })
        );
        let after = t0 + Duration::from_secs(10);
        assert!(breaker.wants_lease(after));
        assert_eq!(breaker.admit(after), Err(Refusal::AwaitingLease));
        assert_eq!(breaker.force_probe(after), Err(Refusal::AwaitingLease));
        breaker.set_gate(Gate::Held { since: after });
        assert!(!breaker.wants_lease(after));
        let probe = breaker.admit(after).unwrap();
        assert!(probe.is_probe());
        // Its verdict goes to the cluster, and the lease ends with it.
        let reopened = breaker.record(after, probe, Verdict::Failure, caller);
        assert_eq!(
            reopened,
            Some(Transition::Opened {
                cooldown: Duration::from_secs(20)
            })
        );
        assert_eq!(breaker.gate(), Gate::Elsewhere);
    }

    #[test]
    fn adopted_states_discard_older_attempts() {
        let t0 = Instant::now();
        let caller = CallerTag::new("a");
        let mut breaker = Breaker::new(settings(), t0);
        let ticket = breaker.admit(t0).unwrap();
        breaker.adopt_open(t0, Duration::from_secs(5), Duration::from_secs(20));
        assert_eq!(breaker.view(t0).cooldown, Duration::from_secs(20));
        assert_eq!(breaker.view(t0).times_opened, 1);
        // Admitted while closed: it says nothing now.
        assert_eq!(breaker.record(t0, ticket, Verdict::Failure, caller), None);
        assert!(breaker.admit(t0 + Duration::from_secs(4)).is_err());
        assert!(breaker.admit(t0 + Duration::from_secs(5)).is_ok());
        breaker.adopt_closed();
        assert_eq!(breaker.open_for(t0), None);
        assert_eq!(breaker.view(t0).cooldown, Duration::from_secs(10));
    }
}
