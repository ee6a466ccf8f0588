//! The retry budget: in an outage, retries and fallbacks stay within `[retry] budget_percent`
//! of each deployment's requests (or its floor), counted at the fakes; ordinary failover is
//! never starved; and a refused retry shows in the log row and the metrics.

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::Value;
use switchyard::fake::{Behavior, FakeHandle, FakeUpstream, Script, ScriptMode};
use switchyard::router::FailureClass;
use switchyard::server::Gateway;

use super::support::*;

/// Breakers that never open, so the budget alone decides what goes upstream.
const NO_BREAKER: &str = "[breaker]\nconsecutive_failures = 1000000\nmin_requests = 1000000\n";

async fn failing(name: &str) -> FakeHandle {
    FakeUpstream::new(name)
        .then(Behavior::status(500))
        .start()
        .await
        .unwrap()
}

/// Sends `total` requests to route `r` at `per_second`, each on its own task, and waits for
/// every answer; returns how long that took, from the first send to the last answer.
async fn steady_load(gateway: &Gateway, per_second: u64, total: usize) -> Duration {
    let client = client();
    let url = format!("{}/v1/chat/completions", gateway.url());
    let body = Arc::new(chat("r"));
    let mut ticks = tokio::time::interval(Duration::from_micros(1_000_000 / per_second));
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let started = Instant::now();
    let mut answers = Vec::with_capacity(total);
    for _ in 0..total {
        ticks.tick().await;
        let (client, url, body) = (client.clone(), url.clone(), body.clone());
        answers.push(tokio::spawn(async move {
            let response = client.post(url).json(&*body).send().await.unwrap();
            response.status().as_u16()
        }));
    }
    for answer in answers {
        let status = tokio::time::timeout(Duration::from_secs(60), answer)
            .await
            .expect("every request is answered")
            .unwrap();
        assert_eq!(
            status, 503,
            "every step answers 500, and no route is degraded"
        );
    }
    started.elapsed()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_an_outage_attempts_stay_within_the_budget() {
    // 200 requests a second for 5 s over three steps that all answer 500. Without a budget
    // each request makes 3 attempts (3,000 in all); with 20 % and a floor of 1 a second,
    // each step's failures may cause at most 20 % of its requests (or 10) as retries.
    const PER_SECOND: u64 = 200;
    const TOTAL: usize = 1_000;
    let (a, b, c) = (failing("a").await, failing("b").await, failing("c").await);
    let config = format!(
        "{}{}{}{}{NO_BREAKER}[retry]\nbudget_percent = 20\nmin_retries_per_second = 1\n",
        provider("a", &a),
        provider("b", &b),
        provider("c", &c),
        route("r", &[("a", "m"), ("b", "m"), ("c", "m")], ""),
    );
    let gateway = gateway(&config).await;
    let elapsed = steady_load(&gateway, PER_SECOND, TOTAL).await;
    let (to_a, to_b, to_c) = (a.calls(), b.calls(), c.calls());
    let attempts = to_a + to_b + to_c;
    println!(
        "{TOTAL} requests in {elapsed:?}: {to_a} + {to_b} + {to_c} = {attempts} attempts \
         ({:.1} % retries)",
        (attempts - TOTAL) as f64 * 100.0 / TOTAL as f64
    );
    assert_eq!(
        to_a, TOTAL,
        "every request's first attempt goes, never refused"
    );
    // Every retry made within one 9-second stretch was allowed by a window holding the whole
    // stretch, so each stretch adds at most 20 % of a step's calls, plus its floor of 10.
    // Within 9 s that is the whole bound; a slower run gets one more allowance per stretch.
    let stretches = elapsed.as_secs_f64() / 9.0;
    let stretches = stretches.ceil().max(1.0) as usize;
    let allowance = |calls: usize| stretches * (calls / 5 + 10);
    assert!(to_b <= allowance(to_a), "{to_b} retries after a's failures");
    assert!(to_c <= allowance(to_b), "{to_c} retries after b's failures");
    assert!(
        attempts <= TOTAL + allowance(to_a) + allowance(to_b),
        "{attempts} attempts for {TOTAL} requests"
    );
    // The budget binds, rather than refusing everything: a's failures were retried.
    assert!(to_b >= TOTAL / 10, "{to_b}");
}

#[tokio::test]
async fn a_single_failing_request_always_falls_back() {
    let primary = failing("primary").await;
    let secondary = FakeUpstream::new("secondary").start().await.unwrap();
    // The defaults: 20 % of one request is no retry, but the floor of 3 a second is.
    let gateway = two_step(&primary, &secondary, NO_BREAKER).await;
    let response = post(&gateway, &chat("r")).await;
    assert_eq!(response.status(), 200);
    assert_eq!(header(&response, "x-switchyard-outcome"), "fallback");
    assert_eq!((primary.calls(), secondary.calls()), (1, 1));
}

#[tokio::test]
async fn occasional_failures_all_fall_back() {
    // One request in ten fails on step 0, from the very first one on.
    let mut behaviors = vec![Behavior::status(500)];
    behaviors.extend((0..9).map(|_| Behavior::ok()));
    let primary = FakeUpstream::new("primary")
        .script(Script {
            behaviors,
            mode: ScriptMode::Cycle,
        })
        .start()
        .await
        .unwrap();
    let secondary = FakeUpstream::new("secondary").start().await.unwrap();
    let gateway = two_step(&primary, &secondary, NO_BREAKER).await;
    const TOTAL: usize = 200;
    let body = chat("r");
    let mut served = 0;
    for _ in 0..TOTAL / 20 {
        let batch = (0..20).map(|_| post(&gateway, &body));
        for response in futures_util::future::join_all(batch).await {
            assert_eq!(response.status(), 200);
            served += 1;
        }
    }
    assert_eq!(served, TOTAL);
    assert_eq!(secondary.calls(), TOTAL / 10, "every failure fell back");
}

/// Two steps whose first always fails, with a budget of exactly 10 retries per 10 s.
async fn floor_of_ten() -> (FakeHandle, FakeHandle, Gateway) {
    let primary = failing("primary").await;
    let secondary = FakeUpstream::new("secondary").start().await.unwrap();
    let retry = "[retry]\nbudget_percent = 0\nmin_retries_per_second = 1\n";
    let gateway = two_step(
        &primary,
        &secondary,
        &format!("{NO_BREAKER}{retry}{OBSERVABILITY}"),
    )
    .await;
    (primary, secondary, gateway)
}

#[tokio::test]
async fn a_refused_retry_is_logged_and_counted_and_the_client_gets_the_503() {
    let (primary, secondary, gateway) = floor_of_ten().await;
    for _ in 0..10 {
        let response = post(&gateway, &chat("r")).await;
        assert_eq!(header(&response, "x-switchyard-outcome"), "fallback");
    }
    let response = post(&gateway, &chat("r")).await;
    assert_eq!(response.status(), 503);
    assert_eq!(header(&response, "x-switchyard-attempts"), "1");
    assert_eq!(header(&response, "x-should-retry"), "false");
    let id = header(&response, "x-switchyard-request-id").to_owned();
    let body: Value = response.json().await.unwrap();
    let message = error_message(&body);
    assert!(
        message.contains("step 0 primary/model-a: server_error (500)")
            && message.contains("retry_budget_exhausted"),
        "{message}"
    );
    assert_eq!((primary.calls(), secondary.calls()), (11, 10));

    let row = record(&gateway, &id).await;
    assert_eq!(row.error.as_deref(), Some("retry_budget_exhausted"));
    let classes: Vec<_> = row.attempts.iter().map(|a| a.failure).collect();
    assert_eq!(
        classes,
        [
            Some(FailureClass::ServerError),
            Some(FailureClass::RetryBudgetExhausted)
        ]
    );
    assert_eq!(row.attempts[1].provider.as_str(), "primary");
    assert!(!row.attempts[1].reached_upstream());

    let metrics = observe(&gateway, "/metrics").await.text().await.unwrap();
    let series = "switchyard_retry_budget_exhausted_total{route=\"r\",provider=\"primary\",model=\"model-a\"} 1";
    assert!(metrics.contains(series), "{metrics}");
}

#[tokio::test]
async fn a_refused_retry_on_a_degraded_route_gets_the_degraded_tier() {
    let primary = failing("primary").await;
    let secondary = FakeUpstream::new("secondary").start().await.unwrap();
    let config = format!(
        "{}{}{}{NO_BREAKER}[retry]\nbudget_percent = 0\nmin_retries_per_second = 1\n",
        provider("primary", &primary),
        provider("secondary", &secondary),
        route(
            "r",
            &[("primary", "model-a"), ("secondary", "model-b")],
            "degraded = { content = \"Try again soon.\" }"
        ),
    );
    let gateway = gateway(&config).await;
    for _ in 0..10 {
        let response = post(&gateway, &chat("r")).await;
        assert_eq!(header(&response, "x-switchyard-outcome"), "fallback");
    }
    let response = post(&gateway, &chat("r")).await;
    assert_eq!(response.status(), 200);
    assert_eq!(header(&response, "x-switchyard-outcome"), "degraded");
    let id = header(&response, "x-switchyard-request-id").to_owned();
    let body: Value = response.json().await.unwrap();
    assert_eq!(content(&body), "Try again soon.");
    let row = record(&gateway, &id).await;
    assert_eq!(
        row.attempts.last().and_then(|a| a.failure),
        Some(FailureClass::RetryBudgetExhausted)
    );
}
