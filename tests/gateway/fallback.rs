//! Fallback chains: every row of docs/src/concepts/classification.md's table, budgets and exhaustion.

use std::time::{Duration, Instant};

use serde_json::Value;
use switchyard::fake::{Behavior, FakeHandle};
use switchyard::router::FailureClass;
use switchyard::server::Gateway;

use super::support::*;

/// The route's degraded tier.
const BACK_SOON: &str = "degraded = { content = \"Back soon.\" }";

/// Route `r` = primary → secondary at `models`, `extra` lines for the route, quick retries.
fn chain(
    primary: &FakeHandle,
    secondary: &FakeHandle,
    models: [&str; 2],
    extra: &str,
) -> TestGateway {
    TestGateway::new()
        .provider("primary", primary)
        .provider("secondary", secondary)
        .route(
            "r",
            &[("primary", models[0]), ("secondary", models[1])],
            extra,
        )
        .fast_retry()
}

/// Like [`chain`], but the primary needs a key, which the test puts in.
fn keyed_chain(primary: &FakeHandle, secondary: &FakeHandle, models: [&str; 2]) -> TestGateway {
    TestGateway::new()
        .provider_at("primary", &primary.base_url(), "")
        .provider("secondary", secondary)
        .route("r", &[("primary", models[0]), ("secondary", models[1])], "")
        .fast_retry()
}

/// Runs one request through primary → secondary with the primary scripted as `behavior`.
async fn primary_answers(behavior: Behavior) -> (reqwest::Response, usize, usize) {
    let (primary, secondary) = primary_and_secondary([behavior]).await;
    let gateway = two_step(&primary, &secondary, FAST_RETRY).await;
    let response = post(&gateway, &chat("r")).await;
    (response, primary.calls(), secondary.calls())
}

#[tokio::test]
async fn a_500_falls_back_to_step_1_after_one_call() {
    let (response, primary, secondary) = primary_answers(Behavior::status(500)).await;
    assert_eq!(response.status(), 200);
    assert_eq!(header(&response, "x-switchyard-step"), "1");
    assert_eq!(header(&response, "x-switchyard-outcome"), "fallback");
    assert_eq!(header(&response, "x-switchyard-provider"), "secondary");
    assert_eq!(header(&response, "x-switchyard-model"), "model-b");
    assert_eq!(header(&response, "x-switchyard-attempts"), "2");
    assert_eq!((primary, secondary), (1, 1));
    let body: Value = response.json().await.unwrap();
    assert_eq!(content(&body), "Hello from secondary!");
}

#[tokio::test]
async fn a_429_with_retry_after_is_retried_on_the_same_step() {
    let (primary, secondary) = primary_and_secondary([
        Behavior::status(429).header("retry-after", "1"),
        Behavior::ok(),
    ])
    .await;
    let gateway = two_step(&primary, &secondary, "").await;
    let started = Instant::now();
    let response = post(&gateway, &chat("r")).await;
    assert!(
        started.elapsed() >= Duration::from_secs(1),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(response.status(), 200);
    assert_eq!(header(&response, "x-switchyard-step"), "0");
    assert_eq!(header(&response, "x-switchyard-outcome"), "success");
    assert_eq!(header(&response, "x-switchyard-attempts"), "2");
    assert_eq!((primary.calls(), secondary.calls()), (2, 0));
}

#[tokio::test]
async fn overload_and_server_errors_move_to_the_next_step() {
    for status in [529, 503, 502, 500, 504, 408] {
        let (response, primary, secondary) = primary_answers(Behavior::status(status)).await;
        assert_eq!(
            header(&response, "x-switchyard-step"),
            "1",
            "status {status}"
        );
        assert_eq!((primary, secondary), (1, 1), "status {status}");
    }
}

#[tokio::test]
async fn a_503_with_retry_after_is_retried_first() {
    let (primary, secondary) = primary_and_secondary([
        Behavior::status(503).header("retry-after", "0"),
        Behavior::ok(),
    ])
    .await;
    let gateway = two_step(&primary, &secondary, FAST_RETRY).await;
    let response = post(&gateway, &chat("r")).await;
    assert_eq!(header(&response, "x-switchyard-step"), "0");
    assert_eq!(primary.calls(), 2);
}

#[tokio::test]
async fn a_reset_connection_moves_to_the_next_step() {
    let (response, primary, secondary) = primary_answers(Behavior::reset()).await;
    assert_eq!(header(&response, "x-switchyard-step"), "1");
    assert_eq!((primary, secondary), (1, 1));
}

#[tokio::test]
async fn a_malformed_success_moves_to_the_next_step() {
    let (response, _, secondary) = primary_answers(Behavior::malformed()).await;
    assert_eq!(header(&response, "x-switchyard-step"), "1");
    assert_eq!(secondary, 1);
}

/// Posts one request and checks that step 1 served it after step 0 failed as `class`.
async fn assert_step_1_served_after(gateway: &Gateway, class: FailureClass) {
    let response = post(gateway, &chat("r")).await;
    assert_eq!(header(&response, "x-switchyard-step"), "1");
    let row = record_of(gateway, &response).await;
    assert_eq!(row.attempts[0].failure, Some(class));
}

#[tokio::test]
async fn a_refused_connection_moves_to_the_next_step() {
    let secondary = scripted("secondary", []).await;
    // Nothing listens on the dead provider's port.
    let gateway = TestGateway::new()
        .dead_provider("dead")
        .provider("secondary", &secondary)
        .route("r", &[("dead", "m"), ("secondary", "m")], "")
        .fast_retry()
        .start()
        .await;
    assert_step_1_served_after(&gateway, FailureClass::Connect).await;
}

#[tokio::test]
async fn no_headers_within_the_attempt_timeout_moves_on() {
    let (primary, secondary) = primary_and_secondary([Behavior::ok().delay_ms(30_000)]).await;
    let retry = "[retry]\nattempt_timeout = \"300ms\"\nrequest_deadline = \"10s\"\n";
    let gateway = two_step(&primary, &secondary, retry).await;
    assert_step_1_served_after(&gateway, FailureClass::Timeout).await;
}

#[tokio::test]
async fn a_401_benches_the_key_and_tries_the_next_one() {
    let (primary, secondary) = primary_and_secondary([Behavior::status(401), Behavior::ok()]).await;
    let gateway = keyed_chain(&primary, &secondary, ["m", "m"]).start().await;
    // Keys load in id order, and equal weights start with the first: the revoked one.
    gateway
        .put_provider_key("primary", "k1-revoked", "sk-revoked-0001")
        .await
        .unwrap();
    gateway
        .put_provider_key("primary", "k2-good", "sk-good-0002")
        .await
        .unwrap();

    let first = post(&gateway, &chat("r")).await;
    assert_eq!(header(&first, "x-switchyard-step"), "0");
    assert_eq!(header(&first, "x-switchyard-attempts"), "2");
    let second = post(&gateway, &chat("r")).await;
    assert_eq!(header(&second, "x-switchyard-step"), "0");

    let keys: Vec<String> = primary
        .requests()
        .iter()
        .map(|r| r.headers["authorization"].clone())
        .collect();
    // The benched key is not tried again by the next request.
    assert_eq!(
        keys,
        [
            "Bearer sk-revoked-0001",
            "Bearer sk-good-0002",
            "Bearer sk-good-0002"
        ]
    );
    assert_eq!(secondary.calls(), 0);
}

#[tokio::test]
async fn a_403_on_the_only_key_moves_to_the_next_step_and_benches_it() {
    let (primary, secondary) = primary_and_secondary([Behavior::status(403)]).await;
    let gateway = keyed_chain(&primary, &secondary, ["m", "m"]).start().await;
    gateway
        .put_provider_key("primary", "only", "sk-only-0003")
        .await
        .unwrap();

    let first = post(&gateway, &chat("r")).await;
    assert_eq!(header(&first, "x-switchyard-step"), "1");
    let second = post(&gateway, &chat("r")).await;
    assert_eq!(header(&second, "x-switchyard-step"), "1");
    assert_eq!(primary.calls(), 1, "a benched key is not sent again");
    let row = record_of(&gateway, &second).await;
    assert_eq!(row.attempts[0].failure, Some(FailureClass::Benched));
}

#[tokio::test]
async fn a_404_model_not_found_moves_to_the_next_step() {
    let (response, primary, secondary) = primary_answers(Behavior::status(404)).await;
    assert_eq!(header(&response, "x-switchyard-step"), "1");
    assert_eq!((primary, secondary), (1, 1));
}

#[tokio::test]
async fn context_length_falls_back_only_when_the_route_says_so() {
    for (allowed, expected_status, expected_secondary) in [(true, 200, 1), (false, 400, 0)] {
        let (primary, secondary) =
            primary_and_secondary([Behavior::context_length_exceeded()]).await;
        let extra = format!("fallback_on_context_length = {allowed}");
        let gateway = chain(&primary, &secondary, ["m", "m"], &extra)
            .start()
            .await;
        let response = post(&gateway, &chat("r")).await;
        assert_eq!(response.status(), expected_status);
        assert_eq!(secondary.calls(), expected_secondary);
        if !allowed {
            let body: Value = response.json().await.unwrap();
            assert_eq!(
                body["error"]["code"], "context_length_exceeded",
                "returned as is"
            );
        }
    }
}

#[tokio::test]
async fn other_4xx_are_returned_as_is_without_fallback() {
    let body = r#"{"error":{"message":"temperature must be <= 2","type":"invalid_request_error","param":"temperature","code":null}}"#;
    let (response, primary, secondary) = primary_answers(Behavior::status(422).body(body)).await;
    assert_eq!(response.status(), 422);
    assert_eq!(header(&response, "x-switchyard-step"), "0");
    assert_eq!(
        header(&response, "x-switchyard-outcome"),
        "client_error",
        "the request is at fault"
    );
    assert_eq!(response.text().await.unwrap(), body);
    assert_eq!((primary, secondary), (1, 0));
}

#[tokio::test]
async fn exhaustion_without_a_degraded_tier_is_a_503_naming_each_failure() {
    let primary = scripted("primary", [Behavior::status(500)]).await;
    let secondary = scripted("secondary", [Behavior::status(502)]).await;
    let gateway = keyed_chain(&primary, &secondary, ["model-a", "model-b"])
        .start()
        .await;
    gateway
        .put_provider_key("primary", "k", "sk-must-not-leak-9876")
        .await
        .unwrap();
    let response = post(&gateway, &chat("r")).await;
    assert_eq!(response.status(), 503);
    assert_eq!(header(&response, "x-switchyard-outcome"), "error");
    let text = response.text().await.unwrap();
    assert!(!text.contains("sk-must-not-leak"), "{text}");
    let message = error_message(&serde_json::from_str(&text).unwrap());
    assert_eq!(
        message,
        "all steps failed: step 0 primary/model-a: server_error (500); step 1 secondary/model-b: server_error (502)"
    );
}

/// Sends one request through a route with the degraded tier whose primary answers 500 and
/// whose secondary answers `secondary_status`, and checks the canned answer came back. The
/// fakes are returned too, to keep answering the test's later requests.
async fn degraded_after_500_then(
    secondary_status: u16,
    models: [&str; 2],
) -> (Gateway, reqwest::Response, [FakeHandle; 2]) {
    let primary = scripted("primary", [Behavior::status(500)]).await;
    let secondary = scripted("secondary", [Behavior::status(secondary_status)]).await;
    let gateway = chain(&primary, &secondary, models, BACK_SOON).start().await;
    let response = post(&gateway, &chat("r")).await;
    assert_eq!(response.status(), 200);
    assert_eq!(header(&response, "x-switchyard-outcome"), "degraded");
    (gateway, response, [primary, secondary])
}

#[tokio::test]
async fn exhaustion_with_a_degraded_tier_serves_the_canned_answer() {
    let (gateway, response, _fakes) = degraded_after_500_then(503, ["m", "m"]).await;
    assert_eq!(header(&response, "x-switchyard-step"), "");
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["object"], "chat.completion");
    assert_eq!(content(&body), "Back soon.");
    assert_eq!(body["choices"][0]["finish_reason"], "stop");

    let stream = post(&gateway, &chat_stream("r")).await;
    assert_eq!(stream.status(), 200);
    assert_eq!(header(&stream, "x-switchyard-outcome"), "degraded");
    let events = sse_data(&stream.text().await.unwrap());
    assert_eq!(streamed_text(&events), "Back soon.");
    assert_eq!(events.last().map(String::as_str), Some("[DONE]"));
}

#[tokio::test]
async fn the_seeds_accident_a_wrong_fallback_model_ends_in_the_degraded_tier() {
    // The fallback names a model its provider does not have.
    let (gateway, response, _fakes) = degraded_after_500_then(404, ["m", "gpt-4o-typo"]).await;
    let row = record_of(&gateway, &response).await;
    let classes: Vec<_> = row.attempts.iter().map(|a| a.failure).collect();
    assert_eq!(
        classes,
        [
            Some(FailureClass::ServerError),
            Some(FailureClass::ModelNotFound)
        ]
    );
}

#[tokio::test]
async fn force_fallback_skips_step_0_only_when_allowed() {
    let (primary, secondary) = primary_and_secondary([]).await;
    let denied = two_step(&primary, &secondary, "").await;
    let response = post_with(
        &denied,
        &chat("r"),
        &[("x-switchyard-force-fallback", "true")],
    )
    .await;
    assert_eq!(response.status(), 403);
    error_message(&response.json().await.unwrap());

    let allowed = two_step(
        &primary,
        &secondary,
        "[debug]\nallow_force_fallback = true\n",
    )
    .await;
    let response = post_with(
        &allowed,
        &chat("r"),
        &[("x-switchyard-force-fallback", "true")],
    )
    .await;
    assert_eq!(response.status(), 200);
    assert_eq!(header(&response, "x-switchyard-step"), "1");
    assert_eq!(header(&response, "x-switchyard-outcome"), "fallback");
    assert_eq!((primary.calls(), secondary.calls()), (0, 1));
}

#[tokio::test]
async fn every_response_carries_the_full_set_of_headers() {
    let (response, _, _) = primary_answers(Behavior::status(500)).await;
    for name in [
        "x-switchyard-request-id",
        "x-switchyard-route",
        "x-switchyard-step",
        "x-switchyard-provider",
        "x-switchyard-model",
        "x-switchyard-attempts",
        "x-switchyard-outcome",
        "x-switchyard-overhead-ms",
    ] {
        assert!(!header(&response, name).is_empty(), "missing {name}");
    }
    let overhead: f64 = header(&response, "x-switchyard-overhead-ms")
        .parse()
        .unwrap();
    assert!(overhead >= 0.0);
    assert_eq!(header(&response, "x-switchyard-route"), "r");
}

#[tokio::test]
async fn the_record_tells_the_whole_chain_story() {
    let (primary, secondary) = primary_and_secondary([
        Behavior::status(429).header("retry-after", "0"),
        Behavior::status(500),
    ])
    .await;
    let gateway = two_step(&primary, &secondary, FAST_RETRY).await;
    let response = post(&gateway, &chat("r")).await;
    let row = record_of(&gateway, &response).await;
    let story: Vec<_> = row
        .attempts
        .iter()
        .map(|a| {
            (
                a.step,
                a.provider.to_string(),
                a.model.to_string(),
                a.failure,
                a.status,
            )
        })
        .collect();
    assert_eq!(
        story,
        [
            (
                0,
                "primary".into(),
                "model-a".into(),
                Some(FailureClass::RateLimited),
                Some(429)
            ),
            (
                0,
                "primary".into(),
                "model-a".into(),
                Some(FailureClass::ServerError),
                Some(500)
            ),
            (1, "secondary".into(), "model-b".into(), None, Some(200)),
        ]
    );
    assert_eq!(row.outcome.as_str(), "fallback");
    assert_eq!(row.step, Some(1));
    assert!(row.tokens_out.is_some());
}

mod bounded {
    //! No request outlives its deadline by more than a small margin, whatever upstreams do.
    use super::*;

    const DEADLINE: &str = "[retry]\nattempt_timeout = \"1s\"\nrequest_deadline = \"2s\"\nbackoff_base = \"10ms\"\nbackoff_max = \"50ms\"\n";
    /// Scheduling and connection set-up on a loaded 2-core CI machine; still far below any
    /// upstream's scripted delay, so a wait past the deadline would show.
    const MARGIN: Duration = Duration::from_millis(1500);

    async fn elapsed_with(
        primary: Behavior,
        secondary: Behavior,
    ) -> (Duration, reqwest::StatusCode) {
        let primary = scripted("primary", [primary]).await;
        let secondary = scripted("secondary", [secondary]).await;
        let gateway = two_step(&primary, &secondary, DEADLINE).await;
        let started = Instant::now();
        let response = post(&gateway, &chat("r")).await;
        (started.elapsed(), response.status())
    }

    #[tokio::test]
    async fn hanging_upstreams() {
        let hang = Behavior::ok().delay_ms(3_600_000);
        let (elapsed, status) = elapsed_with(hang.clone(), hang).await;
        assert_eq!(status, 503);
        assert!(elapsed < Duration::from_secs(2) + MARGIN, "{elapsed:?}");
    }

    #[tokio::test]
    async fn a_retry_after_of_an_hour() {
        let busy = Behavior::status(429).header("retry-after", "3600");
        let (elapsed, status) = elapsed_with(busy.clone(), busy).await;
        // Rate-limited at every step: the client's own 429, to wait out as its SDK does.
        assert_eq!(status, 429);
        assert!(
            elapsed < MARGIN,
            "no wait past the deadline is even begun: {elapsed:?}"
        );
    }

    #[tokio::test]
    async fn a_slow_drip_of_the_body() {
        // Headers at once, then the body in 20 pieces 500 ms apart: 10 s in all.
        let drip = Behavior::ok().chunks(20, 500);
        let (elapsed, status) = elapsed_with(drip.clone(), drip).await;
        assert_eq!(status, 503);
        assert!(elapsed < Duration::from_secs(2) + MARGIN, "{elapsed:?}");
    }
}

#[tokio::test]
async fn an_exhausted_503_names_the_last_upstreams_request_id() {
    let primary = scripted(
        "primary",
        [Behavior::status(500).header("x-request-id", "req_primary_1")],
    )
    .await;
    let secondary = scripted(
        "secondary",
        [Behavior::status(502).header("x-request-id", "req_secondary_2")],
    )
    .await;
    let gateway = two_step(&primary, &secondary, "").await;
    let response = post(&gateway, &chat("r")).await;
    assert_eq!(response.status(), 503);
    assert_eq!(
        header(&response, "x-switchyard-upstream-request-id"),
        "req_secondary_2"
    );
}
