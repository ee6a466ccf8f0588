//! Hedged first tokens: when step 0 of a route with a `hedge` has not committed (a stream:
//! its first event; JSON: its whole answer) after the hedge's delay, the next step starts
//! beside it, and the first to commit wins. The others are dropped at once, which closes
//! their upstream connections, and nothing of theirs reaches the client.
//!
//! - The delay is fixed, or a percentile of the step-0 deployment's own recent times to
//!   commit ([`super::health::commit_times`]); until it has enough of them, no hedge fires.
//! - A racer that fails while another still runs is recorded, and the others are awaited.
//!   If all fail, the chain goes on after the last step raced. If step 0 fails before any
//!   hedge started, nothing was hedged, and the chain goes on as without a hedge.
//! - Each hedge is an attempt against `max_attempts`, and must be allowed by
//!   [`Walk::may_hedge`] (the route's hedge budget, [`budget`]).
//! - A cancelled racer is recorded as `hedge_lost`, with a neutral verdict for its breaker:
//!   being slower than another provider is no failure.

pub use super::super::hedge_budget::HedgeBudgets;

use std::time::Duration;

use futures_util::StreamExt;
use futures_util::stream::FuturesUnordered;
use tokio::time::Instant;

use super::super::breaker::Verdict;
use super::super::classify::{Action, FailureClass};
use super::super::health::{Permit, Tried};
use super::{Attempt, Attempter, Failed, Settled, Walk, record, span_id};
use crate::config::{Deployment, Hedge, HedgeDelay, Provider, Route, Step};
use crate::keys::KeyLease;
use crate::telemetry::AttemptSpan;
use opentelemetry::trace::SpanId;

/// How a hedged attempt at step 0 ended.
pub(super) enum Raced {
    /// A racer served, or its answer goes to the client as is: the chain is over.
    Ended,
    /// Step 0 failed before any hedge started: the chain goes on as after any attempt.
    Alone(Failed),
    /// Every racer failed: the chain goes on after `last_step`, the last step raced.
    AllFailed { last_step: usize },
}

/// Why a hedge that was due did not start.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum HedgeRefusal {
    /// The route's hedge budget is spent for now.
    Budget,
    /// The request's attempt budget (`max_attempts`) or its deadline leaves no room.
    NoRoom,
}

/// The route's hedge, when this attempt (step 0's first) may race one.
pub(super) fn hedges_here(route: &Route, index: usize, step_attempts: u32) -> Option<Hedge> {
    route
        .hedge
        .filter(|_| index == 0 && step_attempts == 1 && route.steps.len() > 1)
}

/// One attempt in the race.
struct Racer<'a, 'h> {
    index: usize,
    deployment: &'a Deployment,
    /// `None` once its attempt is settled.
    permit: Option<Permit<'h>>,
    timeout: Duration,
    started: Instant,
    hedge: bool,
    span: Option<AttemptSpan>,
}

/// One attempt, tagged with its racer's index, timed from its start.
async fn run_one<A: Attempter>(
    attempter: &A,
    tag: usize,
    deployment: &Deployment,
    provider: &Provider,
    key: Option<KeyLease>,
    (timeout, span): (Duration, SpanId),
) -> (usize, Attempt<A::Output>, Duration) {
    let started = Instant::now();
    let attempt = attempter
        .attempt(deployment, provider, key.as_ref(), timeout, span)
        .await;
    (tag, attempt, started.elapsed())
}

impl<'a, T> Walk<'a, T> {
    /// Makes step 0's first attempt, racing it against the next steps once it is late.
    pub(super) async fn race<A: Attempter<Output = T>>(
        &mut self,
        hedge: Hedge,
        step: &'a Step,
        permit: Permit<'a>,
        remaining: Duration,
        attempter: &A,
    ) -> Raced {
        let inputs = &self.inputs;
        let (config, route, health, keys) =
            (inputs.config, inputs.route, inputs.health, inputs.keys);
        let begun = Instant::now();
        health.hedge_budgets().note_request(&route.name, begun);
        let primary = &step.deployments[permit.deployment];
        let delay = match hedge.after {
            HedgeDelay::Fixed(delay) => Some(delay),
            HedgeDelay::Percentile(p) => health.commit_time_percentile(primary, p),
        };
        let feeds_estimate = matches!(hedge.after, HedgeDelay::Percentile(_));

        let mut racers: Vec<Racer<'a, 'a>> = Vec::new();
        let mut running = FuturesUnordered::new();
        let timeout = config.retry.attempt_timeout.min(remaining);
        let Some(provider) = config.provider(&primary.provider) else {
            // Validation guarantees the provider; without one there is nothing to try.
            return Raced::Alone(Failed {
                action: Action::NextStep,
                key: None,
                benched: false,
            });
        };
        let span = AttemptSpan::begin(inputs.traced);
        running.push(run_one(
            attempter,
            0,
            primary,
            provider,
            permit.key.clone(),
            (timeout, span_id(span)),
        ));
        racers.push(Racer {
            index: 0,
            deployment: primary,
            permit: Some(permit),
            timeout,
            started: begun,
            hedge: false,
            span,
        });
        let mut next_hedge = delay.map(|delay| begun + delay);
        let mut hedges = 0u32;
        let mut last_step = 0;

        let ended = loop {
            let timer = async move {
                match next_hedge {
                    Some(at) => tokio::time::sleep_until(at).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                Some((tag, attempt, latency)) = running.next() => {
                    let racer = &mut racers[tag];
                    let Some(permit) = racer.permit.take() else { continue };
                    if racer.index == 0 && feeds_estimate && matches!(attempt, Attempt::Served(_)) {
                        health.observe_commit_time(racer.deployment, latency);
                    }
                    let settled = Settled {
                        index: racer.index,
                        deployment: racer.deployment,
                        timeout: racer.timeout,
                        latency,
                        judged_when_served: attempter.judged_when_served(),
                        hedge: racer.hedge,
                        span: racer.span,
                    };
                    let provider = racer.deployment.provider.clone();
                    match self.settle(settled, permit, attempt) {
                        Ok(()) => break Raced::Ended,
                        Err(failed) if running.is_empty() && hedges == 0 => {
                            break Raced::Alone(failed);
                        }
                        Err(failed) => {
                            // The chain will not see this failure: bench a refused key here.
                            if let (Action::NextKey, Some(key)) = (failed.action, failed.key) {
                                keys.bench(&provider, &key.id, config.breaker.cooldown);
                            }
                            if running.is_empty() {
                                break Raced::AllFailed { last_step };
                            }
                        }
                    }
                }
                () = timer => {
                    next_hedge = None;
                    let Some((index, step, permit)) = self.hedge_target(last_step) else {
                        continue;
                    };
                    if let Err(refusal) = self.may_hedge(running.len()) {
                        self.run.hedge_refused |= refusal == HedgeRefusal::Budget;
                        continue;
                    }
                    let deployment = &step.deployments[permit.deployment];
                    let Some(provider) = config.provider(&deployment.provider) else {
                        continue;
                    };
                    let now = Instant::now();
                    let remaining = self.inputs.deadline.saturating_duration_since(now);
                    let timeout = config.retry.attempt_timeout.min(remaining);
                    let span = AttemptSpan::begin(self.inputs.traced);
                    running.push(run_one(
                        attempter,
                        racers.len(),
                        deployment,
                        provider,
                        permit.key.clone(),
                        (timeout, span_id(span)),
                    ));
                    racers.push(Racer {
                        index,
                        deployment,
                        permit: Some(permit),
                        timeout,
                        started: now,
                        hedge: true,
                        span,
                    });
                    hedges += 1;
                    last_step = index;
                    if hedges < hedge.max {
                        next_hedge = delay.map(|delay| now + delay);
                    }
                }
            }
        };
        // Dropping the attempts still in flight drops their connections, before anything
        // else is done: the upstream stops working (and billing) for an answer never used.
        drop(running);
        for racer in &mut racers {
            let Some(permit) = racer.permit.take() else {
                continue;
            };
            let waited = racer.started.elapsed();
            if racer.index == 0 && feeds_estimate {
                // It would have taken at least this long: a sample that keeps the estimate
                // honest about the slow answers a won hedge never lets finish.
                health.observe_commit_time(racer.deployment, waited);
            }
            let mut lost = record(
                racer.index,
                racer.deployment,
                Some(FailureClass::HedgeLost),
                None,
                waited,
            );
            lost.hedge = racer.hedge;
            lost.span = racer.span;
            self.run.attempts.push(lost);
            self.total_attempts += 1;
            permit.finish(Verdict::Neutral, Some(waited), None, self.inputs.caller);
        }
        self.run.upstream_time += begun.elapsed();
        ended
    }

    /// The first step after `last_step` whose health admits a deployment now, with its
    /// permit; steps it does not admit are passed over, as the chain passes them.
    fn hedge_target(&self, last_step: usize) -> Option<(usize, &'a Step, Permit<'a>)> {
        let inputs = &self.inputs;
        let (config, route, health, keys) =
            (inputs.config, inputs.route, inputs.health, inputs.keys);
        let now = Instant::now();
        let tried = Tried::default();
        route
            .steps
            .iter()
            .enumerate()
            .skip(last_step + 1)
            .find_map(|(index, step)| {
                let permit = health
                    .choose(&route.name, index, step, config, keys, &tried, now)
                    .ok()?;
                Some((index, step, permit))
            })
    }

    /// May I hedge? Asked once a hedge is due, with how many attempts are in flight. Refused
    /// when the request's attempt budget or deadline has no room for one more attempt, or
    /// when the route's hedge budget is spent. A hedge goes to another step's deployment, so
    /// the retry budget, which governs retries in place only, never refuses it. The spend
    /// reservation already holds a share for every racer a route may start (see `budgets`).
    /// Every check a hedge must pass belongs here.
    pub(super) fn may_hedge(&mut self, in_flight: usize) -> Result<(), HedgeRefusal> {
        let inputs = &self.inputs;
        let now = Instant::now();
        let in_flight = u32::try_from(in_flight).unwrap_or(u32::MAX);
        let retry = &inputs.config.retry;
        if self.total_attempts.saturating_add(in_flight) >= retry.max_attempts
            || now >= inputs.deadline
        {
            return Err(HedgeRefusal::NoRoom);
        }
        let percent = retry.hedge_budget_percent;
        if !inputs
            .health
            .hedge_budgets()
            .try_hedge(&inputs.route.name, percent, now)
        {
            return Err(HedgeRefusal::Budget);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
