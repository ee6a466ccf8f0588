//! The attempt loop: walk a route's steps in order, retrying, benching keys and moving on
//! as `classify` says, within the request's attempt budget and deadline, skipping what the
//! breakers hold open.

pub mod hedge;

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::StatusCode;
use http::header::HeaderValue;
use tokio::time::Instant;

use super::breaker::{CallerTag, Verdict};
use super::classify::{Action, FailureClass};
use super::health::{Health, PendingVerdict, Permit, Tried};
use super::retry_budget::{self, Spend};
use crate::config::{Config, Deployment, Provider, Route, Step};
use crate::keys::{KeyLease, KeyRing};
use crate::telemetry::{AttemptRecord, AttemptSpan};
use hedge::Raced;
use opentelemetry::trace::SpanId;

/// An upstream answer the gateway passes on to the client unchanged.
#[derive(Clone, Debug)]
pub struct UpstreamReply {
    pub status: StatusCode,
    pub content_type: Option<HeaderValue>,
    pub body: Bytes,
    /// The provider's own id of the request, for `x-switchyard-upstream-request-id`.
    pub upstream_request_id: Option<HeaderValue>,
}

/// A failed attempt: its class, what to do next, and the upstream's answer if there was one.
#[derive(Debug)]
pub struct Failure {
    pub class: FailureClass,
    pub action: Action,
    pub reply: Option<UpstreamReply>,
}

impl Failure {
    /// A failure with no upstream answer (timeouts, broken connections), which moves on.
    pub fn without_reply(class: FailureClass) -> Failure {
        Failure {
            class,
            action: Action::NextStep,
            reply: None,
        }
    }
}

/// What one attempt came to.
pub enum Attempt<T> {
    /// The upstream served; for a stream, it has committed.
    Served(T),
    Failed(Failure),
}

/// Makes one attempt at one deployment. The chain owns the order, budgets and waits.
pub trait Attempter {
    /// What a served attempt hands back (a body, or a committed stream).
    type Output;

    /// Tries `deployment` once with `key`, giving up after `timeout`; `span` is the
    /// attempt's span id in the request's trace (invalid when untraced). Takes `&self`: a
    /// hedged request has two attempts in flight at once.
    fn attempt(
        &self,
        deployment: &Deployment,
        provider: &Provider,
        key: Option<&KeyLease>,
        timeout: Duration,
        span: SpanId,
    ) -> impl Future<Output = Attempt<Self::Output>> + Send;

    /// Whether serving is the whole story. A stream is served once it commits, but can still
    /// break mid-answer: its verdict is left to whoever forwards it, as [`ChainRun::verdict`].
    fn judged_when_served(&self) -> bool {
        true
    }
}

/// How a chain ended.
pub enum ChainEnd<T> {
    /// Step `step` served.
    Served { step: usize, output: T },
    /// Step `step` answered with an error the client must see as it is.
    Returned { step: usize, reply: UpstreamReply },
    /// No step served within the budgets.
    Exhausted,
}

/// The chain's whole story.
pub struct ChainRun<T> {
    pub end: ChainEnd<T>,
    /// Every attempt and skipped step, in order.
    pub attempts: Vec<AttemptRecord>,
    /// Time spent waiting on upstreams, and sleeping between retries: not the gateway's own.
    pub upstream_time: Duration,
    /// The deployment whose answer ended the chain: the one that served, or whose error the
    /// client gets. A step may have several, so the step index alone does not say.
    pub answered_by: Option<Deployment>,
    /// The served attempt's breaker verdict, when the attempter leaves it for later.
    pub verdict: Option<PendingVerdict>,
    /// The shortest wait a rate-limited attempt asked for (`retry-after`, or a second when it
    /// named none): what the client is told when every step was rate-limited.
    pub rate_limited_wait: Option<Duration>,
    /// A hedge was due, but the route's hedge budget refused it.
    pub hedge_refused: bool,
    /// The provider's own id of the last failed attempt's request, so an answer that names
    /// no serving step still gives the client something to quote to the provider.
    pub last_upstream_request_id: Option<HeaderValue>,
    /// For skipped steps, by index in `attempts`: when they may be tried again.
    pub back_at: Vec<(usize, Instant)>,
}

impl<T> ChainRun<T> {
    /// How many requests went upstream, retries included.
    pub fn upstream_attempts(&self) -> usize {
        self.attempts
            .iter()
            .filter(|a| a.reached_upstream())
            .count()
    }
}

/// Everything the loop needs besides the attempter.
pub struct ChainInputs<'a> {
    pub config: &'a Config,
    pub keys: &'a KeyRing,
    /// Breakers, latency estimates and balancing state, shared by every request.
    pub health: &'a Arc<Health>,
    pub route: &'a Route,
    /// The first step to try: 1 when an operator forces a fallback.
    pub first_step: usize,
    pub deadline: Instant,
    /// Who is asking, so a breaker can tell one caller's failures from everyone's.
    pub caller: CallerTag,
    /// Whether the request is traced: each attempt then has a span of its own.
    pub traced: bool,
}

/// What a failed attempt leaves the loop to do.
pub(super) struct Failed {
    pub(super) action: Action,
    pub(super) key: Option<KeyLease>,
    /// Whether its answer benched the deployment (a `retry-after`).
    pub(super) benched: bool,
}

/// The loop's running totals.
pub(super) struct Walk<'a, T> {
    pub(super) inputs: ChainInputs<'a>,
    pub(super) run: ChainRun<T>,
    pub(super) total_attempts: u32,
}

/// Walks the route's steps until one serves, one must be returned, or the budgets run out.
///
/// Within a step, the health table chooses among the deployments (and keys) whose breakers
/// admit, by the step's balance. A failure that another key can fix tries another key; one
/// that it cannot tries the step's other deployments, then the next step. A step with
/// nothing admissible is skipped at no cost. If every step was skipped as open, the
/// deployment whose cooldown ends soonest is probed anyway.
///
/// On a route with a `hedge`, step 0's first attempt may race the next steps: see
/// [`hedge`].
pub async fn run_chain<A: Attempter>(
    inputs: ChainInputs<'_>,
    attempter: &A,
) -> ChainRun<A::Output> {
    let mut walk = Walk {
        inputs,
        run: ChainRun {
            end: ChainEnd::Exhausted,
            attempts: Vec::new(),
            upstream_time: Duration::ZERO,
            answered_by: None,
            verdict: None,
            rate_limited_wait: None,
            hedge_refused: false,
            last_upstream_request_id: None,
            back_at: Vec::new(),
        },
        total_attempts: 0,
    };
    let inputs = &walk.inputs;
    let (config, route, health) = (inputs.config, inputs.route, inputs.health);
    let retry = &config.retry;
    let mut skipped_open = false;
    // After a hedged race that every racer lost, the chain goes on past the steps it raced.
    let mut resume_at = 0;

    'steps: for (index, step) in route.steps.iter().enumerate().skip(inputs.first_step) {
        if index < resume_at {
            continue;
        }
        let mut tried = Tried::default();
        let mut step_attempts = 0u32;
        loop {
            if walk.total_attempts >= retry.max_attempts {
                break 'steps;
            }
            let now = Instant::now();
            let remaining = walk.inputs.deadline.saturating_duration_since(now);
            if remaining.is_zero() {
                let first = &step.deployments[0];
                walk.run
                    .attempts
                    .push(skipped(index, first, FailureClass::Deadline));
                break 'steps;
            }
            let keys = walk.inputs.keys;
            let permit = match health.choose(&route.name, index, step, config, keys, &tried, now) {
                Ok(permit) => permit,
                Err(skip) => {
                    // After an attempt, the step's failure is that attempt's; say so once.
                    if let (0, Some(class)) = (step_attempts, skip.class) {
                        let deployment = &step.deployments[skip.deployment];
                        if let Some(until) = skip.until {
                            walk.run.back_at.push((walk.run.attempts.len(), until));
                        }
                        walk.run.attempts.push(skipped(index, deployment, class));
                        skipped_open |= class == FailureClass::CircuitOpen;
                    }
                    continue 'steps;
                }
            };
            // Going back to the deployment that just failed is a retry in place, which its
            // retry budget may refuse; then the step's other deployments, and the next
            // steps, are still tried.
            let chosen = permit.deployment;
            let next = &step.deployments[chosen];
            let attempts = &mut walk.run.attempts;
            let budget = &retry.budget;
            if retry_budget::refuses_retry_in_place(
                health.retry_budgets(),
                budget,
                attempts,
                next,
                now,
                Spend::Charge,
            ) {
                tried.endpoints.push(chosen);
                continue;
            }
            step_attempts += 1;
            let failed =
                if let Some(hedge) = hedge::hedges_here(walk.inputs.route, index, step_attempts) {
                    match walk.race(hedge, step, permit, remaining, attempter).await {
                        Raced::Ended => return walk.run,
                        Raced::Alone(failed) => failed,
                        Raced::AllFailed { last_step } => {
                            resume_at = last_step + 1;
                            continue 'steps;
                        }
                    }
                } else {
                    match walk
                        .attempt(index, step, permit, remaining, attempter)
                        .await
                    {
                        Ok(()) => return walk.run,
                        Err(failed) => failed,
                    }
                };
            match failed.action {
                Action::ReturnToClient => continue 'steps,
                Action::NextStep => tried.endpoints.push(chosen),
                Action::NextKey => match failed.key {
                    Some(key) => {
                        let provider = step.deployments[chosen].provider.clone();
                        keys.bench(&provider, &key.id, config.breaker.cooldown);
                        tried.keys.push((provider, key.id));
                    }
                    // A keyless provider refused us; another try cannot change that.
                    None => tried.endpoints.push(chosen),
                },
                Action::Retry { after } => {
                    if step_attempts >= retry.attempts_per_step {
                        continue 'steps;
                    }
                    // Benched for its retry-after: another deployment of the step can go now.
                    let now = Instant::now();
                    if failed.benched && health.can_choose(step, config, keys, &tried, now) {
                        continue;
                    }
                    let remaining = walk.inputs.deadline.saturating_duration_since(now);
                    let Some(wait) = retry.backoff.wait_before_retry(
                        step_attempts - 1,
                        fastrand::f64(),
                        after,
                        remaining,
                    ) else {
                        continue 'steps;
                    };
                    // A retry in place the budget would refuse is not waited for: the
                    // chain moves on at once.
                    let failed_deployment = &step.deployments[chosen];
                    let attempts = &mut walk.run.attempts;
                    if retry_budget::refuses_retry_in_place(
                        health.retry_budgets(),
                        &retry.budget,
                        attempts,
                        failed_deployment,
                        now,
                        Spend::Peek,
                    ) {
                        tried.endpoints.push(chosen);
                        continue;
                    }
                    tokio::time::sleep(wait).await;
                    walk.run.upstream_time += wait;
                }
            }
        }
    }

    if skipped_open && walk.run.upstream_attempts() == 0 {
        walk.probe_soonest(attempter).await;
    }
    walk.run
}

impl<T> Walk<'_, T> {
    /// Makes one attempt and reports it to its breaker. `Ok` when the chain has ended (it
    /// served, or its answer goes to the client as is).
    async fn attempt<A: Attempter<Output = T>>(
        &mut self,
        index: usize,
        step: &Step,
        permit: Permit<'_>,
        remaining: Duration,
        attempter: &A,
    ) -> Result<(), Failed> {
        let retry = &self.inputs.config.retry;
        let deployment = &step.deployments[permit.deployment];
        let Some(provider) = self.inputs.config.provider(&deployment.provider) else {
            // Validation guarantees the provider; without one there is nothing to try.
            return Err(Failed {
                action: Action::NextStep,
                key: None,
                benched: false,
            });
        };
        let timeout = retry.attempt_timeout.min(remaining);
        let span = AttemptSpan::begin(self.inputs.traced);
        let started = Instant::now();
        let attempt = attempter
            .attempt(
                deployment,
                provider,
                permit.key.as_ref(),
                timeout,
                span_id(span),
            )
            .await;
        let latency = started.elapsed();
        self.run.upstream_time += latency;
        let settled = Settled {
            index,
            deployment,
            timeout,
            latency,
            judged_when_served: attempter.judged_when_served(),
            hedge: false,
            span,
        };
        self.settle(settled, permit, attempt)
    }

    /// Records a finished attempt and reports it to its breaker. `Ok` when the chain has
    /// ended (it served, or its answer goes to the client as is).
    pub(super) fn settle(
        &mut self,
        settled: Settled<'_>,
        permit: Permit<'_>,
        attempt: Attempt<T>,
    ) -> Result<(), Failed> {
        let retry = &self.inputs.config.retry;
        let Settled {
            index,
            deployment,
            timeout,
            latency,
            ..
        } = settled;
        self.total_attempts += 1;
        let failure = match attempt {
            Attempt::Served(output) => {
                let mut record = record(index, deployment, None, Some(200), latency);
                record.hedge = settled.hedge;
                record.span = settled.span;
                self.run.attempts.push(record);
                let caller = self.inputs.caller;
                if settled.judged_when_served {
                    permit.finish(Verdict::Success, Some(latency), None, caller);
                } else {
                    let deferred = permit.defer(Some(latency), caller);
                    let health = Arc::clone(self.inputs.health);
                    self.run.verdict = Some(PendingVerdict::new(health, deferred));
                }
                self.run.end = ChainEnd::Served {
                    step: index,
                    output,
                };
                self.run.answered_by = Some(deployment.clone());
                return Ok(());
            }
            Attempt::Failed(failure) => failure,
        };
        let status = failure.reply.as_ref().map(|r| r.status.as_u16());
        if let Some(id) = failure
            .reply
            .as_ref()
            .and_then(|r| r.upstream_request_id.clone())
        {
            self.run.last_upstream_request_id = Some(id);
        }
        let class = failure.class;
        let mut record = record(index, deployment, Some(class), status, latency);
        record.hedge = settled.hedge;
        record.span = settled.span;
        self.run.attempts.push(record);

        // A timeout says something about the provider only when it is the attempt timeout:
        // one the request's own deadline cut short, or one that ran out the deadline while
        // a long answer was still coming, is the request's doing.
        let silent = failure.reply.is_none() && class == FailureClass::Timeout;
        let cut_short =
            silent && (timeout < retry.attempt_timeout || Instant::now() >= self.inputs.deadline);
        let verdict = if cut_short {
            Verdict::Neutral
        } else {
            Verdict::of(Some(class))
        };
        // A timeout is a latency sample too: the endpoint was at least that slow.
        let sample = (silent && !cut_short).then_some(latency);
        let bench = match failure.action {
            Action::Retry { after } => after.filter(|after| !after.is_zero()),
            _ => None,
        };
        if class == FailureClass::RateLimited {
            let wait = bench.unwrap_or(Duration::from_secs(1));
            let shortest = self.run.rate_limited_wait.map_or(wait, |w| w.min(wait));
            self.run.rate_limited_wait = Some(shortest);
        }
        let key = permit.key.clone();
        permit.finish(verdict, sample, bench, self.inputs.caller);

        if let (Action::ReturnToClient, Some(reply)) = (failure.action, failure.reply) {
            self.run.end = ChainEnd::Returned { step: index, reply };
            self.run.answered_by = Some(deployment.clone());
            return Ok(());
        }
        Err(Failed {
            action: failure.action,
            key,
            benched: bench.is_some(),
        })
    }

    /// Every step was skipped as open: probe the one whose cooldown ends soonest, once.
    async fn probe_soonest<A: Attempter<Output = T>>(&mut self, attempter: &A) {
        let inputs = &self.inputs;
        let (config, keys) = (inputs.config, inputs.keys);
        let now = Instant::now();
        let remaining = inputs.deadline.saturating_duration_since(now);
        if remaining.is_zero() || self.total_attempts >= config.retry.max_attempts {
            return;
        }
        let health = inputs.health;
        let Some((index, step, permit)) =
            health.probe_soonest(inputs.route, inputs.first_step, config, keys, now)
        else {
            return;
        };
        let provider = step.deployments[permit.deployment].provider.clone();
        if let Err(failed) = self
            .attempt(index, step, permit, remaining, attempter)
            .await
            && let (Action::NextKey, Some(key)) = (failed.action, failed.key)
        {
            keys.bench(&provider, &key.id, config.breaker.cooldown);
        }
    }
}

/// What [`Walk::settle`] needs to know of a finished attempt besides its result.
pub(super) struct Settled<'d> {
    pub(super) index: usize,
    pub(super) deployment: &'d Deployment,
    /// The timeout it was given: one cut short by the deadline says nothing of the provider.
    pub(super) timeout: Duration,
    pub(super) latency: Duration,
    pub(super) judged_when_served: bool,
    /// Whether it was a hedge, raced against a slow step 0.
    pub(super) hedge: bool,
    pub(super) span: Option<AttemptSpan>,
}

/// The id an attempt's span has, invalid when the request is untraced.
pub(super) fn span_id(span: Option<AttemptSpan>) -> SpanId {
    span.map_or(SpanId::INVALID, |span| span.id)
}

pub(super) fn record(
    index: usize,
    deployment: &Deployment,
    failure: Option<FailureClass>,
    status: Option<u16>,
    latency: Duration,
) -> AttemptRecord {
    AttemptRecord {
        step: index,
        provider: deployment.provider.clone(),
        model: deployment.model.clone(),
        failure,
        status,
        latency,
        hedge: false,
        span: None,
    }
}

fn skipped(index: usize, deployment: &Deployment, class: FailureClass) -> AttemptRecord {
    record(index, deployment, Some(class), None, Duration::ZERO)
}

/// The wait to tell the client when every attempt was refused by a provider's rate limit (or
/// skipped while benched for one): then a 429 with it says more than a 503.
pub fn rate_limited_everywhere<T>(run: &ChainRun<T>) -> Option<Duration> {
    let wait = run.rate_limited_wait?;
    run.attempts
        .iter()
        .all(|a| {
            matches!(
                a.failure,
                Some(
                    FailureClass::RateLimited
                        | FailureClass::Benched
                        | FailureClass::RetryBudgetExhausted
                )
            )
        })
        .then_some(wait)
}

/// One line per step for the 503's message: each step's last failure class, and for a step
/// skipped while benched or open, when it comes back; never a secret.
pub fn describe_failures<T>(run: &ChainRun<T>) -> String {
    let now = Instant::now();
    let mut parts: Vec<String> = Vec::new();
    let mut last_step = None;
    for (index, attempt) in run.attempts.iter().enumerate() {
        // A refused retry ends the chain; it names the deployment whose budget it was.
        if attempt.failure == Some(FailureClass::RetryBudgetExhausted) {
            let (provider, model) = (&attempt.provider, &attempt.model);
            parts.push(format!(
                "no retry: retry_budget_exhausted ({provider}/{model})"
            ));
            continue;
        }
        let class = attempt.failure.map(|f| f.kind()).unwrap_or("served");
        let status = attempt
            .status
            .map(|s| format!(" ({s})"))
            .unwrap_or_default();
        let back = run
            .back_at
            .iter()
            .find(|(i, _)| *i == index)
            .map(|(_, until)| {
                let secs = until.saturating_duration_since(now).as_secs_f64().ceil();
                match attempt.failure {
                    Some(FailureClass::CircuitOpen) => format!(", next probe in {secs}s"),
                    _ => format!(", back in {secs}s"),
                }
            })
            .unwrap_or_default();
        let text = format!(
            "step {} {}/{}: {class}{status}{back}",
            attempt.step, attempt.provider, attempt.model
        );
        if last_step == Some(attempt.step) {
            if let Some(last) = parts.last_mut() {
                *last = text;
            }
        } else {
            parts.push(text);
        }
        last_step = Some(attempt.step);
    }
    if parts.is_empty() {
        "no step could be tried".into()
    } else {
        parts.join("; ")
    }
}

#[cfg(test)]
mod tests;
