//! A circuit breaker for one deployment: a small state machine with no clock of its own.
//!
//! Every call takes `now` (a `tokio::time::Instant`), so tests drive it on paused time and
//! property tests on made-up instants. The breaker never sleeps and never spawns: an open
//! breaker simply refuses until its cooldown has passed, then admits one probe.
//!
//! - *Closed* admits everything. It opens after `consecutive_failures` failures in a row, or
//!   when failures reach `failure_rate` of the requests in the last `window` (with at least
//!   `min_requests` of them), but only if those failures came from at least `min_callers`
//!   distinct callers, or no other caller was served within the `window`: one caller's bad
//!   requests must not send everyone else to the fallback.
//! - *Open* refuses for a cooldown: `cooldown_min` the first time, doubled by each failed
//!   probe up to `cooldown`, and back to `cooldown_min` once a probe succeeds.
//! - *Half-open* admits exactly one probe: success closes it, failure opens it again. A probe
//!   whose request was cancelled, or whose answer says nothing about the provider's health,
//!   frees the slot for the next request.
//!
//! Results are judged in the state they were admitted in: each [`Ticket`] carries the epoch it
//! was issued in, and a result from an earlier epoch (a slow request admitted while closed
//! that returns after the breaker opened) is ignored.

mod callers;
mod shared;

use std::time::Duration;

use tokio::time::Instant;

use super::classify::FailureClass;
use crate::config::BreakerConfig;
pub use callers::CallerTag;
use callers::RecentCallers;
pub use shared::{Gate, Transition};

/// Where a breaker stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BreakerState {
    /// Admits every request.
    Closed,
    /// Admits one probe at a time.
    HalfOpen,
    /// Refuses every request until its cooldown ends.
    Open,
}

impl BreakerState {
    /// The name shown by the admin API.
    pub fn as_str(self) -> &'static str {
        match self {
            BreakerState::Closed => "closed",
            BreakerState::HalfOpen => "half_open",
            BreakerState::Open => "open",
        }
    }

    /// The value of `switchyard_breaker_state`: 0 closed, 1 half-open, 2 open.
    pub fn gauge(self) -> i64 {
        match self {
            BreakerState::Closed => 0,
            BreakerState::HalfOpen => 1,
            BreakerState::Open => 2,
        }
    }
}

/// What one attempt's result says about the provider's health.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// It served.
    Success,
    /// The provider is at fault: 5xx, 529, a timeout, a broken or refused connection, a
    /// malformed answer.
    Failure,
    /// Nothing about its health: the request's fault (4xx), a refused key, a rate limit.
    Neutral,
}

impl Verdict {
    /// Judges an attempt by its failure class (`None` when it served).
    ///
    /// `ModelNotFound` is neutral: a 404 comes from a provider that is up, and it is often a
    /// client's typo in `provider/model`. A 429 is neutral too; the chain benches the
    /// deployment for its `retry-after` instead. A hedge's loser was only slower than another.
    pub fn of(failure: Option<FailureClass>) -> Verdict {
        match failure {
            None => Verdict::Success,
            Some(
                FailureClass::ServerError
                | FailureClass::Redirect
                | FailureClass::Overloaded
                | FailureClass::Timeout
                | FailureClass::Connect
                | FailureClass::Reset
                | FailureClass::Malformed
                | FailureClass::Oversized,
            ) => Verdict::Failure,
            Some(
                FailureClass::RateLimited
                | FailureClass::Auth
                | FailureClass::ModelNotFound
                | FailureClass::ContextLength
                | FailureClass::BadRequest
                | FailureClass::NoKey
                | FailureClass::Deadline
                | FailureClass::CircuitOpen
                | FailureClass::Benched
                | FailureClass::RetryBudgetExhausted
                | FailureClass::HedgeLost,
            ) => Verdict::Neutral,
        }
    }
}

/// Why a breaker refused a request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// Open until then.
    Open { until: Instant },
    /// Half-open, and its one probe is out.
    ProbeInFlight,
    /// Ready for a probe, but in a cluster the probe is another instance's unless this one
    /// takes the cluster's probe lease.
    AwaitingLease,
    /// A 429 asked us to stay away until then.
    Benched { until: Instant },
}

impl Refusal {
    /// The class a skipped step is recorded with.
    pub fn class(self) -> FailureClass {
        match self {
            Refusal::Open { .. } | Refusal::ProbeInFlight | Refusal::AwaitingLease => {
                FailureClass::CircuitOpen
            }
            Refusal::Benched { .. } => FailureClass::Benched,
        }
    }

    /// When the deployment may be tried again, where that is known.
    pub fn until(self) -> Option<Instant> {
        match self {
            Refusal::Open { until } | Refusal::Benched { until } => Some(until),
            Refusal::ProbeInFlight | Refusal::AwaitingLease => None,
        }
    }
}

/// Leave to make one attempt. Hand it back to [`Breaker::record`] or [`Breaker::cancel`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ticket {
    epoch: u64,
    probe: bool,
}

impl Ticket {
    /// Whether this attempt is the half-open breaker's one probe.
    pub fn is_probe(self) -> bool {
        self.probe
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    Closed,
    Open { until: Instant },
    HalfOpen { probing: bool },
}

/// The failure-rate window is kept in this many buckets, so memory stays fixed however
/// busy the deployment; the rate is exact to within one bucket's width.
const BUCKETS: usize = 10;

#[derive(Clone, Copy, Debug, Default)]
struct Bucket {
    slot: u64,
    successes: u32,
    failures: u32,
}

#[derive(Clone, Debug)]
struct Window {
    origin: Instant,
    width_nanos: u128,
    buckets: [Bucket; BUCKETS],
}

impl Window {
    fn new(window: Duration, now: Instant) -> Window {
        Window {
            origin: now,
            width_nanos: (window.as_nanos() / BUCKETS as u128).max(1),
            buckets: [Bucket::default(); BUCKETS],
        }
    }

    fn slot(&self, now: Instant) -> u64 {
        let elapsed = now.saturating_duration_since(self.origin).as_nanos();
        u64::try_from(elapsed / self.width_nanos).unwrap_or(u64::MAX)
    }

    fn add(&mut self, now: Instant, failed: bool) {
        let slot = self.slot(now);
        let bucket = &mut self.buckets[(slot % BUCKETS as u64) as usize];
        if bucket.slot != slot {
            *bucket = Bucket {
                slot,
                ..Bucket::default()
            };
        }
        if failed {
            bucket.failures = bucket.failures.saturating_add(1);
        } else {
            bucket.successes = bucket.successes.saturating_add(1);
        }
    }

    /// Requests and failures in the window that ends now.
    fn counts(&self, now: Instant) -> (u32, u32) {
        let current = self.slot(now);
        self.buckets
            .iter()
            .filter(|b| b.slot <= current && b.slot + BUCKETS as u64 > current)
            .fold((0u32, 0u32), |(requests, failures), b| {
                (
                    requests.saturating_add(b.successes.saturating_add(b.failures)),
                    failures.saturating_add(b.failures),
                )
            })
    }

    fn clear(&mut self) {
        self.buckets = [Bucket::default(); BUCKETS];
    }
}

/// What the admin API shows of one breaker.
#[derive(Clone, Debug, PartialEq)]
pub struct BreakerView {
    pub state: BreakerState,
    /// Failures in a row since the last success.
    pub consecutive_failures: u32,
    /// Judged requests in the current window, and how many of them failed.
    pub window_requests: u32,
    pub window_failures: u32,
    /// How long until a probe may go: zero when one may go now, `None` when closed or
    /// while the probe is out.
    pub next_probe_in: Option<Duration>,
    pub probe_in_flight: bool,
    /// How long a 429's bench still lasts.
    pub benched_for: Option<Duration>,
    /// How many times it has opened since start (or the last reset).
    pub times_opened: u64,
    /// How long it stays open this time (or would, if it opened now).
    pub cooldown: Duration,
}

/// One deployment's breaker.
#[derive(Clone, Debug)]
pub struct Breaker {
    settings: BreakerConfig,
    state: State,
    epoch: u64,
    consecutive: u32,
    window: Window,
    benched_until: Option<Instant>,
    times_opened: u64,
    /// The current open's cooldown, or the next one's when closed.
    cooldown: Duration,
    /// Recent callers whose requests failed, and whose requests were served, while closed.
    failing: RecentCallers,
    served: RecentCallers,
    /// Who may probe it: this instance alone, or whoever holds the cluster's lease.
    gate: Gate,
    /// The cluster's version of this breaker's state that the local one reflects, and how
    /// many local changes are still on their way to the cluster.
    shared_version: u64,
    pending: u32,
}

impl Breaker {
    /// A closed breaker.
    pub fn new(settings: BreakerConfig, now: Instant) -> Breaker {
        let callers = settings.min_callers as usize;
        Breaker {
            window: Window::new(settings.window, now),
            cooldown: settings.cooldown_min,
            failing: RecentCallers::new(callers),
            served: RecentCallers::new(callers),
            settings,
            state: State::Closed,
            epoch: 0,
            consecutive: 0,
            benched_until: None,
            times_opened: 0,
            gate: Gate::Local,
            shared_version: 0,
            pending: 0,
        }
    }

    /// Its state as stored: an open breaker past its cooldown is still open until a request
    /// comes to probe it.
    pub fn state(&self) -> BreakerState {
        match self.state {
            State::Closed => BreakerState::Closed,
            State::Open { .. } => BreakerState::Open,
            State::HalfOpen { .. } => BreakerState::HalfOpen,
        }
    }

    /// When an open breaker's cooldown ends.
    pub fn open_until(&self) -> Option<Instant> {
        match self.state {
            State::Open { until } => Some(until),
            _ => None,
        }
    }

    /// Whether [`Breaker::admit`] would admit a request now, without admitting it.
    pub fn check(&self, now: Instant) -> Result<(), Refusal> {
        if let Some(until) = self.benched_until.filter(|until| *until > now) {
            return Err(Refusal::Benched { until });
        }
        match self.state {
            State::Closed => Ok(()),
            State::Open { until } if now < until => Err(Refusal::Open { until }),
            State::Open { .. } | State::HalfOpen { probing: false } => self.may_probe(),
            State::HalfOpen { probing: true } => Err(Refusal::ProbeInFlight),
        }
    }

    /// Admits a request, or says why not. Past an open breaker's cooldown, the request that
    /// comes first becomes the probe.
    pub fn admit(&mut self, now: Instant) -> Result<Ticket, Refusal> {
        self.check(now)?;
        Ok(match self.state {
            State::Closed => Ticket {
                epoch: self.epoch,
                probe: false,
            },
            State::Open { .. } | State::HalfOpen { .. } => self.start_probe(),
        })
    }

    /// Admits a probe before the cooldown ends, for a route whose every step is open: stale
    /// state must not black-hole it. Still refuses while a probe is out or a bench lasts.
    pub fn force_probe(&mut self, now: Instant) -> Result<Ticket, Refusal> {
        if let Some(until) = self.benched_until.filter(|until| *until > now) {
            return Err(Refusal::Benched { until });
        }
        match self.state {
            State::HalfOpen { probing: true } => Err(Refusal::ProbeInFlight),
            State::Closed => Ok(Ticket {
                epoch: self.epoch,
                probe: false,
            }),
            State::Open { .. } | State::HalfOpen { probing: false } => {
                self.may_probe()?;
                Ok(self.start_probe())
            }
        }
    }

    /// Whether a user's request may go now to a deployment whose probes are the active
    /// health checker's (`health_check` on its provider): only a closed breaker admits, so no
    /// user's request is ever the probe, however long ago the cooldown ended.
    pub fn check_checked(&self, now: Instant) -> Result<(), Refusal> {
        if let Some(until) = self.benched_until.filter(|until| *until > now) {
            return Err(Refusal::Benched { until });
        }
        match self.state {
            State::Closed => Ok(()),
            State::Open { until } => Err(Refusal::Open { until }),
            State::HalfOpen { .. } => Err(Refusal::ProbeInFlight),
        }
    }

    /// Admits a user's request as [`Breaker::check_checked`] allows.
    pub fn admit_checked(&mut self, now: Instant) -> Result<Ticket, Refusal> {
        self.check_checked(now)?;
        Ok(Ticket {
            epoch: self.epoch,
            probe: false,
        })
    }

    /// Admits an active health check as the probe: while open, whatever its cooldown, or
    /// half-open with no probe out. `None` while closed (checks never run then) or while a
    /// probe is out. In a cluster each instance checks on its own; a success closes the
    /// breaker everywhere, as a probe's does.
    pub fn admit_health_check(&mut self) -> Option<Ticket> {
        match self.state {
            State::Open { .. } | State::HalfOpen { probing: false } => Some(self.start_probe()),
            State::Closed | State::HalfOpen { probing: true } => None,
        }
    }

    /// Whether an active health check would be admitted now.
    pub fn awaits_health_check(&self) -> bool {
        matches!(
            self.state,
            State::Open { .. } | State::HalfOpen { probing: false }
        )
    }

    /// Takes the result of an attempt admitted for `caller` into account; says whether it
    /// opened or closed the breaker, which a cluster must hear of.
    pub fn record(
        &mut self,
        now: Instant,
        ticket: Ticket,
        verdict: Verdict,
        caller: CallerTag,
    ) -> Option<Transition> {
        if ticket.epoch != self.epoch {
            // Admitted under an earlier state; the breaker has moved on since.
            return None;
        }
        match (self.state, ticket.probe) {
            // A probe is judged alone, whoever sent it: it is the only request let through.
            (State::HalfOpen { probing: true }, true) => match verdict {
                Verdict::Success => {
                    self.cooldown = self.settings.cooldown_min;
                    self.close();
                    self.probe_settled();
                    return Some(Transition::Closed);
                }
                Verdict::Failure => {
                    self.cooldown = self
                        .cooldown
                        .saturating_mul(2)
                        .min(self.settings.cooldown)
                        .max(self.settings.cooldown_min);
                    self.open(now);
                    self.probe_settled();
                    return Some(Transition::Opened {
                        cooldown: self.cooldown,
                    });
                }
                Verdict::Neutral => self.state = State::HalfOpen { probing: false },
            },
            (State::Closed, false) => match verdict {
                Verdict::Success => {
                    self.consecutive = 0;
                    self.window.add(now, false);
                    self.served.note(caller, now);
                }
                Verdict::Failure => {
                    self.consecutive = self.consecutive.saturating_add(1);
                    self.window.add(now, true);
                    self.failing.note(caller, now);
                    if self.tripped(now) {
                        self.cooldown = self.settings.cooldown_min;
                        self.open(now);
                        return Some(Transition::Opened {
                            cooldown: self.cooldown,
                        });
                    }
                }
                Verdict::Neutral => {}
            },
            _ => {}
        }
        None
    }

    /// Gives back a ticket whose attempt never finished (the client went away): a probe's
    /// slot is freed for the next request, so a lost probe cannot wedge the breaker.
    pub fn cancel(&mut self, ticket: Ticket) {
        if ticket.probe
            && ticket.epoch == self.epoch
            && self.state == (State::HalfOpen { probing: true })
        {
            self.state = State::HalfOpen { probing: false };
        }
    }

    /// Keeps requests away until `until`, whatever the state (a 429's `retry-after`).
    pub fn bench(&mut self, until: Instant) {
        self.benched_until = Some(self.benched_until.map_or(until, |b| b.max(until)));
    }

    /// Closes it and forgets its history, as an operator's reset does.
    pub fn reset(&mut self) {
        self.cooldown = self.settings.cooldown_min;
        self.close();
        self.benched_until = None;
        self.times_opened = 0;
    }

    /// What the admin API shows.
    pub fn view(&self, now: Instant) -> BreakerView {
        let (window_requests, window_failures) = self.window.counts(now);
        let next_probe_in = match self.state {
            State::Closed | State::HalfOpen { probing: true } => None,
            State::HalfOpen { probing: false } => Some(Duration::ZERO),
            State::Open { until } => Some(until.saturating_duration_since(now)),
        };
        BreakerView {
            state: self.state(),
            consecutive_failures: self.consecutive,
            window_requests,
            window_failures,
            next_probe_in,
            probe_in_flight: self.state == (State::HalfOpen { probing: true }),
            benched_for: self
                .benched_until
                .filter(|until| *until > now)
                .map(|until| until - now),
            times_opened: self.times_opened,
            cooldown: self.cooldown,
        }
    }

    fn start_probe(&mut self) -> Ticket {
        self.epoch += 1;
        self.state = State::HalfOpen { probing: true };
        Ticket {
            epoch: self.epoch,
            probe: true,
        }
    }

    fn open(&mut self, now: Instant) {
        self.epoch += 1;
        self.state = State::Open {
            until: now + self.cooldown,
        };
        self.times_opened += 1;
    }

    fn close(&mut self) {
        self.epoch += 1;
        self.state = State::Closed;
        self.consecutive = 0;
        self.window.clear();
        self.failing.clear();
        self.served.clear();
    }

    fn tripped(&self, now: Instant) -> bool {
        let (requests, failures) = self.window.counts(now);
        let counted = self.consecutive >= self.settings.consecutive_failures
            || (requests > 0
                && requests >= self.settings.min_requests
                && f64::from(failures) >= self.settings.failure_rate * f64::from(requests));
        counted && self.callers_agree(now)
    }

    /// Whether the failures speak for more than one caller: enough distinct callers failed
    /// within the window, or nobody else was served in it (a deployment with one caller
    /// must still be able to open).
    fn callers_agree(&self, now: Instant) -> bool {
        let window = self.settings.window;
        let failing: Vec<CallerTag> = self.failing.within(now, window).collect();
        if failing.len() >= self.settings.min_callers as usize {
            return true;
        }
        !self
            .served
            .within(now, window)
            .any(|caller| !failing.contains(&caller))
    }
}

#[cfg(test)]
mod tests;
