//! What a breaker counts, over real HTTP: one caller's slow requests, or requests cut short by
//! their own deadline, do not open it for everyone; failures from several callers do; a
//! stream the provider cuts mid-answer is a failure; and the first open is short.
//!
//! Nothing sleeps: the fakes are scripted slow, and the tests wait on their answers.

use std::time::Duration;

use futures_util::future::join_all;
use switchyard::fake::{Behavior, FakeHandle, FakeUpstream};
use switchyard::router::FailureClass;
use switchyard::router::breaker::{BreakerState, BreakerView};
use switchyard::server::Gateway;
use tokio::time::Instant;

use super::support::*;

/// Issues a virtual key for `user` on a running gateway.
async fn key(gateway: &Gateway, user: &str) -> String {
    stored_key(gateway, user, "default", None).await.0
}

/// Posts a chat request to `model` as the holder of `key`.
async fn send(gateway: &Gateway, key: &str, model: &str) -> reqwest::Response {
    let authorization = format!("Bearer {key}");
    post_with(gateway, &chat(model), &[("authorization", &authorization)]).await
}

/// The breaker of `provider`'s only deployment.
fn breaker(gateway: &Gateway, provider: &str) -> BreakerView {
    gateway
        .health()
        .report(Instant::now())
        .into_iter()
        .find(|r| r.id.provider.as_str() == provider)
        .map(|r| r.view)
        .unwrap_or_else(|| panic!("no breaker for {provider}"))
}

/// primary → secondary, with `retry` and `breaker` as those sections' lines.
async fn two_step_as(
    primary: &FakeHandle,
    secondary: &FakeHandle,
    retry: &str,
    breaker: &str,
) -> Gateway {
    TestGateway::new()
        .provider("primary", primary)
        .provider("secondary", secondary)
        .route("r", &[("primary", "model-a"), ("secondary", "model-b")], "")
        .with(OBSERVABILITY)
        .with("[retry]\nbackoff_base = \"10ms\"\nbackoff_max = \"50ms\"\n")
        .with(retry)
        .with("[breaker]\n")
        .with(breaker)
        .start()
        .await
}

#[tokio::test]
async fn one_keys_slow_requests_do_not_open_the_breaker_for_other_keys() {
    // Bob is served, then alice's five requests each outlast the attempt timeout.
    let mut script = FakeUpstream::new("primary").then(Behavior::ok());
    for _ in 0..5 {
        script = script.then(Behavior::ok().delay_ms(20_000));
    }
    let primary = script.then(Behavior::ok()).start().await.unwrap();
    let secondary = scripted("secondary", []).await;
    let gateway = two_step_as(
        &primary,
        &secondary,
        // Generous, so that a loaded machine cannot make bob's quick answers time out.
        "attempt_timeout = \"2s\"\nrequest_deadline = \"30s\"\nattempts_per_step = 1",
        "consecutive_failures = 5",
    )
    .await;
    let (alice, bob) = (key(&gateway, "alice").await, key(&gateway, "bob").await);

    let served = send(&gateway, &bob, "r").await;
    assert_eq!(header(&served, "x-switchyard-step"), "0");
    let slow = join_all((0..5).map(|_| send(&gateway, &alice, "r"))).await;
    for response in &slow {
        assert_eq!(
            header(response, "x-switchyard-step"),
            "1",
            "alice falls back"
        );
        let row = record_of(&gateway, response).await;
        assert_eq!(row.attempts[0].failure, Some(FailureClass::Timeout));
    }

    let view = breaker(&gateway, "primary");
    assert_eq!(view.state, BreakerState::Closed, "{view:?}");
    let response = send(&gateway, &bob, "r").await;
    assert_eq!(response.status(), 200);
    assert_eq!(
        header(&response, "x-switchyard-step"),
        "0",
        "bob still gets the primary"
    );
}

#[tokio::test]
async fn failures_from_several_keys_still_open_it() {
    let (primary, secondary) = primary_and_secondary([Behavior::ok(), Behavior::status(500)]).await;
    let gateway = two_step_as(
        &primary,
        &secondary,
        "attempts_per_step = 1",
        "consecutive_failures = 5",
    )
    .await;
    let dave = key(&gateway, "dave").await;
    assert_eq!(
        header(&send(&gateway, &dave, "r").await, "x-switchyard-step"),
        "0"
    );
    let callers = [
        key(&gateway, "alice").await,
        key(&gateway, "bob").await,
        key(&gateway, "carol").await,
    ];
    for i in 0..5 {
        let response = send(&gateway, &callers[i % 3], "r").await;
        assert_eq!(header(&response, "x-switchyard-step"), "1");
    }
    assert_eq!(breaker(&gateway, "primary").state, BreakerState::Open);
    let response = send(&gateway, &dave, "r").await;
    let row = record_of(&gateway, &response).await;
    assert_eq!(row.attempts[0].failure, Some(FailureClass::CircuitOpen));
}

#[tokio::test]
async fn requests_cut_short_by_their_own_deadline_do_not_count() {
    // The answer starts at once but drips out for 10 s: each request's 3 s deadline ends it.
    let primary = scripted("primary", [Behavior::ok().chunks(20, 500)]).await;
    let gateway = TestGateway::new()
        .provider("primary", &primary)
        .route("r", &[("primary", "model-a")], "")
        .with("[retry]\nattempt_timeout = \"2s\"\nrequest_deadline = \"3s\"\n")
        .with("[breaker]\nconsecutive_failures = 5\n")
        .start()
        .await;
    let body = chat("r");
    let responses = join_all((0..5).map(|_| post(&gateway, &body))).await;
    for response in &responses {
        assert_eq!(response.status(), 503);
    }
    let view = breaker(&gateway, "primary");
    assert_eq!(view.state, BreakerState::Closed, "{view:?}");
    assert_eq!(view.consecutive_failures, 0, "{view:?}");
}

#[tokio::test]
async fn nine_streams_cut_mid_answer_open_the_breaker_and_count_as_failed_attempts() {
    let primary = scripted(
        "primary",
        [Behavior::ok()
            .content("a b c d")
            .chunks(4, 20)
            .drop_after(2)],
    )
    .await;
    let secondary = scripted("secondary", []).await;
    let gateway = two_step_as(&primary, &secondary, "", "consecutive_failures = 9").await;
    for _ in 0..9 {
        let response = post(&gateway, &chat_stream("r")).await;
        assert_eq!(header(&response, "x-switchyard-step"), "0");
        let id = header(&response, "x-switchyard-request-id").to_owned();
        let body = response.text().await.unwrap();
        assert!(
            body.contains("\"error\""),
            "the client sees the break: {body}"
        );
        let row = record(&gateway, &id).await;
        assert_eq!(row.outcome.as_str(), "error");
        assert!(row.partial);
        assert_eq!(row.attempts.len(), 1);
        assert_eq!(row.attempts[0].failure, Some(FailureClass::Reset));
    }
    assert_eq!(breaker(&gateway, "primary").state, BreakerState::Open);
    let metrics = metrics_text(&gateway.url(), METRICS_TOKEN).await;
    let failed = metrics
        .lines()
        .find(|l| {
            l.starts_with("switchyard_attempts_total")
                && l.contains("provider=\"primary\"")
                && l.contains("result=\"connection_reset\"")
        })
        .unwrap_or_else(|| panic!("no failed attempts in:\n{metrics}"));
    assert!(failed.ends_with(" 9"), "{failed}");
    assert!(
        !metrics
            .lines()
            .any(|l| l.starts_with("switchyard_attempts_total")
                && l.contains("provider=\"primary\"")
                && l.contains("result=\"success\"")),
        "{metrics}"
    );
    // The tenth goes to the secondary at once.
    let response = post(&gateway, &chat_stream("r")).await;
    assert_eq!(header(&response, "x-switchyard-step"), "1");
}

#[tokio::test]
async fn a_stream_that_ends_well_is_a_success_for_the_breaker() {
    let (primary, secondary) = primary_and_secondary([]).await;
    let gateway = two_step_as(&primary, &secondary, "", "consecutive_failures = 1").await;
    for _ in 0..3 {
        let response = post(&gateway, &chat_stream("r")).await;
        let id = header(&response, "x-switchyard-request-id").to_owned();
        assert!(response.text().await.unwrap().ends_with("data: [DONE]\n\n"));
        let row = record(&gateway, &id).await;
        assert_eq!(row.attempts[0].failure, None);
    }
    let view = breaker(&gateway, "primary");
    assert_eq!(
        (view.state, view.window_requests),
        (BreakerState::Closed, 3)
    );
}

#[tokio::test]
async fn the_first_open_lasts_the_minimum_cooldown() {
    let (primary, secondary) = primary_and_secondary([Behavior::status(500)]).await;
    let gateway = two_step_as(&primary, &secondary, "", "consecutive_failures = 1").await;
    let response = post(&gateway, &chat("r")).await;
    assert_eq!(header(&response, "x-switchyard-step"), "1");
    let view = breaker(&gateway, "primary");
    assert_eq!(view.state, BreakerState::Open);
    let wait = view.next_probe_in.expect("open");
    assert!(
        wait <= Duration::from_secs(10) && wait > Duration::from_secs(9),
        "{wait:?}"
    );
}
