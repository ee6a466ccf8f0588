//! The attempt loop: walk a route's steps in order, retrying, benching keys and moving on
//! as `classify` says, within the request's attempt budget and deadline.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use reqwest::StatusCode;
use reqwest::header::HeaderValue;
use tokio::time::Instant;

use super::classify::{Action, FailureClass};
use crate::config::{Config, Provider, Route, Step};
use crate::keys::{KeyLease, KeyRing};
use crate::telemetry::AttemptRecord;

/// An upstream answer the gateway passes on to the client unchanged.
#[derive(Clone, Debug)]
pub struct UpstreamReply {
    pub status: StatusCode,
    pub content_type: Option<HeaderValue>,
    pub body: Bytes,
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

/// Makes one attempt at one step. The chain owns the order, budgets and waits.
pub trait Attempter {
    /// What a served attempt hands back (a body, or a committed stream).
    type Output;

    /// Tries `step` once with `key`, giving up after `timeout`.
    fn attempt(
        &mut self,
        step: &Step,
        provider: &Provider,
        key: Option<&KeyLease>,
        timeout: Duration,
    ) -> impl Future<Output = Attempt<Self::Output>> + Send;
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
    pub route: &'a Route,
    /// The first step to try: 1 when an operator forces a fallback.
    pub first_step: usize,
    pub deadline: Instant,
}

/// Walks the route's steps until one serves, one must be returned, or the budgets run out.
pub async fn run_chain<A: Attempter>(
    inputs: ChainInputs<'_>,
    attempter: &mut A,
) -> ChainRun<A::Output> {
    let retry = &inputs.config.retry;
    let backoff = retry.backoff;
    let mut run = ChainRun {
        end: ChainEnd::Exhausted,
        attempts: Vec::new(),
        upstream_time: Duration::ZERO,
    };
    let mut total_attempts = 0u32;

    'steps: for (index, step) in inputs
        .route
        .steps
        .iter()
        .enumerate()
        .skip(inputs.first_step)
    {
        let Some(provider) = inputs.config.provider(&step.provider) else {
            continue;
        };
        let mut step_attempts = 0u32;
        let mut tried_keys: Vec<Arc<str>> = Vec::new();
        loop {
            if total_attempts >= retry.max_attempts {
                break 'steps;
            }
            let now = Instant::now();
            let remaining = inputs.deadline.saturating_duration_since(now);
            if remaining.is_zero() {
                run.attempts
                    .push(skipped(index, step, FailureClass::Deadline));
                break 'steps;
            }
            let key = if provider.key_required {
                match inputs.keys.pick(&provider.id, &tried_keys) {
                    Some(key) => Some(key),
                    None => {
                        // With keys tried already, the step's failure is theirs; say so once.
                        if tried_keys.is_empty() {
                            run.attempts.push(skipped(index, step, FailureClass::NoKey));
                        }
                        continue 'steps;
                    }
                }
            } else {
                None
            };

            let timeout = retry.attempt_timeout.min(remaining);
            let attempt = attempter
                .attempt(step, provider, key.as_ref(), timeout)
                .await;
            let latency = now.elapsed();
            run.upstream_time += latency;
            total_attempts += 1;
            step_attempts += 1;

            let failure = match attempt {
                Attempt::Served(output) => {
                    run.attempts
                        .push(record(index, step, None, Some(200), latency));
                    run.end = ChainEnd::Served {
                        step: index,
                        output,
                    };
                    return run;
                }
                Attempt::Failed(failure) => failure,
            };
            let status = failure.reply.as_ref().map(|r| r.status.as_u16());
            run.attempts
                .push(record(index, step, Some(failure.class), status, latency));

            match failure.action {
                Action::ReturnToClient => {
                    if let Some(reply) = failure.reply {
                        run.end = ChainEnd::Returned { step: index, reply };
                        return run;
                    }
                    continue 'steps;
                }
                Action::NextStep => continue 'steps,
                Action::NextKey => {
                    if let Some(key) = key {
                        inputs
                            .keys
                            .bench(&provider.id, &key.id, inputs.config.breaker.cooldown);
                        tried_keys.push(key.id);
                    } else {
                        // A keyless provider refused us; another try cannot change that.
                        continue 'steps;
                    }
                }
                Action::Retry { after } => {
                    if step_attempts >= retry.attempts_per_step {
                        continue 'steps;
                    }
                    let remaining = inputs.deadline.saturating_duration_since(Instant::now());
                    let Some(wait) = backoff.wait_before_retry(
                        step_attempts - 1,
                        fastrand::f64(),
                        after,
                        remaining,
                    ) else {
                        continue 'steps;
                    };
                    tokio::time::sleep(wait).await;
                    run.upstream_time += wait;
                }
            }
        }
    }
    run
}

fn record(
    index: usize,
    step: &Step,
    failure: Option<FailureClass>,
    status: Option<u16>,
    latency: Duration,
) -> AttemptRecord {
    AttemptRecord {
        step: index,
        provider: step.provider.clone(),
        model: step.model.clone(),
        failure,
        status,
        latency,
    }
}

fn skipped(index: usize, step: &Step, class: FailureClass) -> AttemptRecord {
    record(index, step, Some(class), None, Duration::ZERO)
}

/// One line per step for the 503's message: each step's last failure class, never a secret.
pub fn describe_failures(attempts: &[AttemptRecord]) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut last_step = None;
    for attempt in attempts {
        let class = attempt.failure.map(|f| f.kind()).unwrap_or("served");
        let status = attempt
            .status
            .map(|s| format!(" ({s})"))
            .unwrap_or_default();
        let text = format!(
            "step {} {}/{}: {class}{status}",
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
mod tests {
    use std::collections::VecDeque;

    use super::*;

    /// Answers each attempt from a script: after `delay`, a status (200 serves).
    struct Scripted {
        script: VecDeque<(Duration, u16, Option<&'static str>)>,
        calls: Vec<String>,
    }

    impl Attempter for Scripted {
        type Output = ();

        async fn attempt(
            &mut self,
            step: &Step,
            _provider: &Provider,
            _key: Option<&KeyLease>,
            timeout: Duration,
        ) -> Attempt<()> {
            self.calls.push(step.provider.to_string());
            let (delay, status, retry_after) =
                self.script
                    .pop_front()
                    .unwrap_or((Duration::ZERO, 200, None));
            if delay > timeout {
                tokio::time::sleep(timeout).await;
                return Attempt::Failed(Failure::without_reply(FailureClass::Timeout));
            }
            tokio::time::sleep(delay).await;
            if status == 200 {
                return Attempt::Served(());
            }
            let mut headers = reqwest::header::HeaderMap::new();
            if let Some(after) = retry_after {
                headers.insert(
                    reqwest::header::RETRY_AFTER,
                    HeaderValue::from_static(after),
                );
            }
            let status = StatusCode::from_u16(status).unwrap();
            let (class, action) =
                super::super::classify::classify_status(status, &headers, b"", false);
            Attempt::Failed(Failure {
                class,
                action,
                reply: Some(UpstreamReply {
                    status,
                    content_type: None,
                    body: Bytes::new(),
                }),
            })
        }
    }

    fn config(retry: &str) -> Config {
        Config::parse(&format!(
            r#"
[[providers]]
name = "a"
kind = "openai"
base_url = "http://127.0.0.1:1"
key_required = false
[[providers]]
name = "b"
kind = "openai"
base_url = "http://127.0.0.1:1"
key_required = false
[[routes]]
name = "r"
steps = [{{ provider = "a", model = "m" }}, {{ provider = "b", model = "m" }}]
[retry]
{retry}
"#
        ))
        .unwrap()
    }

    async fn run(
        config: &Config,
        script: Vec<(Duration, u16, Option<&'static str>)>,
    ) -> (ChainRun<()>, Vec<String>, Duration) {
        let keys = KeyRing::default();
        let started = Instant::now();
        let mut attempter = Scripted {
            script: script.into(),
            calls: Vec::new(),
        };
        let inputs = ChainInputs {
            config,
            keys: &keys,
            route: &config.routes[0],
            first_step: 0,
            deadline: started + config.retry.request_deadline,
        };
        let run = run_chain(inputs, &mut attempter).await;
        (run, attempter.calls, started.elapsed())
    }

    fn served_step<T>(run: &ChainRun<T>) -> Option<usize> {
        match run.end {
            ChainEnd::Served { step, .. } => Some(step),
            _ => None,
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_429_waits_for_its_retry_after_then_retries_the_same_step() {
        let config = config("");
        let (run, calls, elapsed) = run(&config, vec![(Duration::ZERO, 429, Some("2"))]).await;
        assert_eq!(served_step(&run), Some(0));
        assert_eq!(calls, ["a", "a"]);
        assert!(elapsed >= Duration::from_secs(2), "{elapsed:?}");
        assert!(elapsed < Duration::from_secs(3), "{elapsed:?}");
    }

    #[tokio::test(start_paused = true)]
    async fn a_retry_after_past_the_deadline_moves_on_at_once() {
        let config = config("");
        let (run, calls, elapsed) = run(&config, vec![(Duration::ZERO, 429, Some("3600"))]).await;
        assert_eq!(served_step(&run), Some(1));
        assert_eq!(calls, ["a", "b"]);
        assert_eq!(elapsed, Duration::ZERO);
    }

    #[tokio::test(start_paused = true)]
    async fn attempts_per_step_and_max_attempts_bound_the_retries() {
        let config = config(
            "attempts_per_step = 2\nmax_attempts = 3\nbackoff_base = \"10ms\"\nbackoff_max = \"20ms\"",
        );
        let always_429 = vec![(Duration::ZERO, 429, None); 10];
        let (run, calls, _) = run(&config, always_429).await;
        assert!(matches!(run.end, ChainEnd::Exhausted));
        assert_eq!(calls, ["a", "a", "b"]);
        assert_eq!(run.upstream_attempts(), 3);
    }

    #[tokio::test(start_paused = true)]
    async fn hanging_upstreams_cannot_outlast_the_deadline() {
        let config = config("attempt_timeout = \"4s\"\nrequest_deadline = \"10s\"");
        let hang = (Duration::from_secs(3600), 200, None);
        let (run, _, elapsed) = run(&config, vec![hang; 10]).await;
        assert!(matches!(run.end, ChainEnd::Exhausted));
        assert!(elapsed <= Duration::from_secs(10), "{elapsed:?}");
    }

    #[tokio::test(start_paused = true)]
    async fn a_5xx_moves_on_without_waiting() {
        let config = config("");
        let (run, calls, elapsed) = run(&config, vec![(Duration::ZERO, 500, None)]).await;
        assert_eq!(served_step(&run), Some(1));
        assert_eq!(calls, ["a", "b"]);
        assert_eq!(elapsed, Duration::ZERO);
        assert_eq!(
            describe_failures(&run.attempts),
            "step 0 a/m: server_error (500); step 1 b/m: served (200)"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_client_error_is_returned_without_fallback() {
        let config = config("");
        let (run, calls, _) = run(&config, vec![(Duration::ZERO, 422, None)]).await;
        assert!(matches!(run.end, ChainEnd::Returned { step: 0, .. }));
        assert_eq!(calls, ["a"]);
    }
}
