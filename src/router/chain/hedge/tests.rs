//! The race on paused time: each provider answers after a fixed delay with a fixed status.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http::StatusCode;
use tokio::time::Instant;

use crate::config::{Config, Deployment, Provider};
use crate::keys::{KeyLease, KeyRing};
use crate::router::breaker::CallerTag;
use crate::router::chain::{ChainInputs, UpstreamReply};
use crate::router::classify::classify_status;
use crate::router::{
    Attempt, Attempter, ChainEnd, ChainRun, Failure, FailureClass, Health, run_chain,
};

/// Each provider's answer: after a delay, a status (200 serves).
#[derive(Default)]
struct Providers {
    answers: HashMap<&'static str, (u64, u16)>,
    calls: Mutex<Vec<String>>,
}

impl Attempter for Providers {
    type Output = ();

    async fn attempt(
        &self,
        deployment: &Deployment,
        _provider: &Provider,
        _key: Option<&KeyLease>,
        timeout: Duration,
        _span: opentelemetry::trace::SpanId,
    ) -> Attempt<()> {
        let name = deployment.provider.as_str();
        self.calls.lock().unwrap().push(name.to_owned());
        let (delay, status) = self.answers.get(name).copied().unwrap_or((0, 200));
        let delay = Duration::from_millis(delay);
        if delay > timeout {
            tokio::time::sleep(timeout).await;
            return Attempt::Failed(Failure::without_reply(FailureClass::Timeout));
        }
        tokio::time::sleep(delay).await;
        if status == 200 {
            return Attempt::Served(());
        }
        let status = StatusCode::from_u16(status).unwrap();
        let (class, action) = classify_status(status, &Default::default(), b"", false);
        Attempt::Failed(Failure {
            class,
            action,
            reply: Some(UpstreamReply {
                status,
                content_type: None,
                body: Bytes::new(),
                upstream_request_id: None,
            }),
        })
    }
}

fn config(hedge: &str, retry: &str) -> Config {
    let mut text = String::new();
    for name in ["a", "b", "c"] {
        text.push_str(&format!(
            "[[providers]]\nname = \"{name}\"\nkind = \"openai\"\nbase_url = \"http://127.0.0.1:1\"\nkey_required = false\n"
        ));
    }
    text.push_str(&format!(
        "[[routes]]\nname = \"r\"\nsteps = [{{ provider = \"a\", model = \"m\" }}, {{ provider = \"b\", model = \"m\" }}, {{ provider = \"c\", model = \"m\" }}]\nhedge = {hedge}\n[retry]\n{retry}\n"
    ));
    if !retry.contains("hedge_budget_percent") {
        text.push_str("hedge_budget_percent = 100.0\n");
    }
    Config::parse(&text).unwrap()
}

struct Ran {
    run: ChainRun<()>,
    calls: Vec<String>,
    elapsed: Duration,
}

impl Ran {
    fn served_step(&self) -> Option<usize> {
        match self.run.end {
            ChainEnd::Served { step, .. } => Some(step),
            _ => None,
        }
    }

    /// Each attempt as `step:class`, hedges marked with `+`.
    fn story(&self) -> Vec<String> {
        self.run
            .attempts
            .iter()
            .map(|a| {
                let class = a.failure.map_or("served", |f| f.kind());
                let hedge = if a.hedge { "+" } else { "" };
                format!("{hedge}{}:{class}", a.step)
            })
            .collect()
    }
}

async fn run_with(
    config: &Config,
    health: &Arc<Health>,
    answers: &[(&'static str, u64, u16)],
) -> Ran {
    let keys = KeyRing::default();
    let providers = Providers {
        answers: answers.iter().map(|(p, d, s)| (*p, (*d, *s))).collect(),
        calls: Mutex::default(),
    };
    let started = Instant::now();
    let inputs = ChainInputs {
        config,
        keys: &keys,
        health,
        route: &config.routes[0],
        first_step: 0,
        deadline: started + config.retry.request_deadline,
        caller: CallerTag::new("test"),
        traced: false,
    };
    let run = run_chain(inputs, &providers).await;
    Ran {
        run,
        calls: providers.calls.into_inner().unwrap(),
        elapsed: started.elapsed(),
    }
}

async fn run(config: &Config, answers: &[(&'static str, u64, u16)]) -> Ran {
    let health = Arc::new(Health::new(config.breaker.clone()));
    run_with(config, &health, answers).await
}

#[tokio::test(start_paused = true)]
async fn a_slow_step_0_is_raced_and_the_first_to_commit_wins() {
    let config = config(r#"{ after = "200ms" }"#, "");
    let ran = run(&config, &[("a", 2_000, 200), ("b", 50, 200)]).await;
    assert_eq!(ran.served_step(), Some(1));
    assert_eq!(ran.calls, ["a", "b"]);
    assert_eq!(ran.elapsed, Duration::from_millis(250));
    assert_eq!(ran.story(), ["+1:served", "0:hedge_lost"]);
    assert_eq!(ran.run.upstream_attempts(), 2);
    // The race's time is the gateway's wait, once, not the sum of its attempts.
    assert_eq!(ran.run.upstream_time, Duration::from_millis(250));
}

#[tokio::test(start_paused = true)]
async fn a_primary_that_commits_first_wins_and_the_hedge_is_cancelled() {
    let config = config(r#"{ after = "200ms" }"#, "");
    let ran = run(&config, &[("a", 300, 200), ("b", 1_000, 200)]).await;
    assert_eq!(ran.served_step(), Some(0));
    assert_eq!(ran.elapsed, Duration::from_millis(300));
    assert_eq!(ran.story(), ["0:served", "+1:hedge_lost"]);
}

#[tokio::test(start_paused = true)]
async fn a_fast_step_0_is_not_hedged() {
    let config = config(r#"{ after = "200ms" }"#, "");
    let ran = run(&config, &[("a", 100, 200)]).await;
    assert_eq!(ran.served_step(), Some(0));
    assert_eq!(ran.calls, ["a"]);
    assert_eq!(ran.story(), ["0:served"]);
}

#[tokio::test(start_paused = true)]
async fn a_step_0_failing_before_the_delay_falls_back_as_without_a_hedge() {
    let config = config(r#"{ after = "200ms" }"#, "");
    let ran = run(&config, &[("a", 10, 500), ("b", 1_000, 200)]).await;
    assert_eq!(ran.served_step(), Some(1));
    assert_eq!(ran.calls, ["a", "b"]);
    assert_eq!(ran.story(), ["0:server_error", "1:served"]);
}

#[tokio::test(start_paused = true)]
async fn a_racer_that_fails_leaves_the_other_to_finish() {
    let config = config(r#"{ after = "200ms" }"#, "");
    let ran = run(&config, &[("a", 1_000, 200), ("b", 10, 500)]).await;
    assert_eq!(ran.served_step(), Some(0));
    assert_eq!(ran.elapsed, Duration::from_secs(1));
    assert_eq!(ran.story(), ["+1:server_error", "0:served"]);
}

#[tokio::test(start_paused = true)]
async fn when_every_racer_fails_the_chain_goes_on_after_the_steps_raced() {
    let config = config(r#"{ after = "200ms" }"#, "");
    let ran = run(
        &config,
        &[("a", 1_000, 500), ("b", 10, 500), ("c", 10, 200)],
    )
    .await;
    assert_eq!(ran.served_step(), Some(2));
    assert_eq!(ran.calls, ["a", "b", "c"]);
    assert_eq!(
        ran.story(),
        ["+1:server_error", "0:server_error", "2:served"]
    );
}

#[tokio::test(start_paused = true)]
async fn max_two_races_two_later_steps_one_delay_apart() {
    let config = config(r#"{ after = "100ms", max = 2 }"#, "");
    let health = Arc::new(Health::new(config.breaker.clone()));
    // The budget counts hedges, not hedged requests: two hedges need two requests.
    run_with(&config, &health, &[]).await;
    let ran = run_with(
        &config,
        &health,
        &[("a", 5_000, 200), ("b", 5_000, 200), ("c", 50, 200)],
    )
    .await;
    assert_eq!(ran.served_step(), Some(2));
    assert_eq!(ran.elapsed, Duration::from_millis(250));
    assert_eq!(ran.story(), ["+2:served", "0:hedge_lost", "+1:hedge_lost"]);
}

#[tokio::test(start_paused = true)]
async fn a_hedge_is_an_attempt_against_max_attempts() {
    let config = config(r#"{ after = "100ms" }"#, "max_attempts = 1");
    let ran = run(&config, &[("a", 1_000, 200), ("b", 10, 200)]).await;
    assert_eq!(ran.served_step(), Some(0));
    assert_eq!(ran.calls, ["a"]);
    assert!(
        !ran.run.hedge_refused,
        "no room is not the budget's refusal"
    );
}

#[tokio::test(start_paused = true)]
async fn the_hedge_budget_refuses_past_its_share() {
    let config = config(r#"{ after = "100ms" }"#, "hedge_budget_percent = 50.0");
    let health = Arc::new(Health::new(config.breaker.clone()));
    let slow = [("a", 1_000, 200), ("b", 10, 200)];
    // 1 request: ceil(0.5) = 1 hedge; 2 requests: ceil(1.0) = 1, spent.
    let first = run_with(&config, &health, &slow).await;
    assert_eq!(first.served_step(), Some(1));
    let second = run_with(&config, &health, &slow).await;
    assert_eq!(second.served_step(), Some(0));
    assert!(second.run.hedge_refused);
    assert_eq!(second.story(), ["0:served"]);
}

#[tokio::test(start_paused = true)]
async fn a_percentile_delay_waits_for_enough_samples_then_follows_them() {
    let config = config(r#"{ after = "p90" }"#, "");
    let health = Arc::new(Health::new(config.breaker.clone()));
    // No estimate yet: a slow step 0 is not hedged.
    let unhedged = run_with(&config, &health, &[("a", 1_000, 200), ("b", 10, 200)]).await;
    assert_eq!(unhedged.story(), ["0:served"]);
    for _ in 0..19 {
        let fast = run_with(&config, &health, &[("a", 100, 200)]).await;
        assert_eq!(fast.served_step(), Some(0));
    }
    // 20 samples: 19 of 100 ms, 1 of 1 s; p90 is 100 ms.
    let hedged = run_with(&config, &health, &[("a", 1_000, 200), ("b", 10, 200)]).await;
    assert_eq!(hedged.served_step(), Some(1));
    assert_eq!(hedged.elapsed, Duration::from_millis(110));
}

#[tokio::test(start_paused = true)]
async fn a_hedge_goes_to_another_deployment_so_no_retry_budget_refuses_it() {
    // No floor, and a step 0 with no finished requests yet: its budget allows no retry in
    // place, but a hedge is a move to step 1's deployment, which the budget never refuses.
    let without_floor = config(
        r#"{ after = "100ms" }"#,
        "budget_percent = 1.0\nmin_retries_per_second = 0",
    );
    let health = Arc::new(Health::new(without_floor.breaker.clone()));
    let ran = run_with(
        &without_floor,
        &health,
        &[("a", 1_000, 200), ("b", 10, 200)],
    )
    .await;
    assert_eq!(ran.served_step(), Some(1));
    assert!(!ran.run.hedge_refused);
    let step0 = &without_floor.routes[0].steps[0].deployments[0];
    let counts = health
        .retry_budgets()
        .counts(&step0.provider, &step0.model, Instant::now());
    assert_eq!(counts.retries, 0, "a hedge is no retry in place");
}
