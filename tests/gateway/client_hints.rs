//! What the gateway tells clients' SDKs so they behave: the request id where the SDKs read
//! it, `retry-after-ms` beside every `retry-after` of a 429, and `x-should-retry: false` once
//! the chain has already spent the request's retries.

use switchyard::fake::{Behavior, FakeHandle};

use super::support::*;

/// Route `r` to `up`.
fn to_up(up: &FakeHandle) -> TestGateway {
    TestGateway::new()
        .provider("up", up)
        .route("r", &[("up", "m")], "")
}

/// Route `r` to `down`, with quick retries and `extra` lines for the route.
fn to_down(down: &FakeHandle, extra: &str) -> TestGateway {
    TestGateway::new()
        .provider("down", down)
        .route("r", &[("down", "m")], extra)
        .fast_retry()
}

/// Route `r` over two steps of `(name, fake)`, with one attempt a step.
fn one_attempt_each(first: (&str, &FakeHandle), second: (&str, &FakeHandle)) -> TestGateway {
    TestGateway::new()
        .provider(first.0, first.1)
        .provider(second.0, second.1)
        .route("r", &[(first.0, "m"), (second.0, "m")], "")
        .with("[retry]\nattempts_per_step = 1\n")
}

#[tokio::test]
async fn the_request_id_is_also_x_request_id_on_answers_and_refusals() {
    let up = scripted("up", []).await;
    let gateway = to_up(&up).start().await;
    for (model, status) in [("r", 200), ("no-such-route", 404)] {
        let response = post(&gateway, &chat(model)).await;
        assert_eq!(response.status(), status);
        let id = header(&response, "x-switchyard-request-id");
        assert!(!id.is_empty());
        assert_eq!(header(&response, "x-request-id"), id, "{model}");
    }
}

#[tokio::test]
async fn a_429_from_the_limits_carries_retry_after_ms_too() {
    let up = scripted("up", []).await;
    let gateway = to_up(&up)
        .with("[[roles]]\nname = \"default\"\nrequests_per_minute = 1\nwindow = \"sliding\"\n")
        .start()
        .await;
    assert_eq!(post(&gateway, &chat("r")).await.status(), 200);
    let refused = post(&gateway, &chat("r")).await;
    assert_eq!(refused.status(), 429);
    let seconds: u64 = header(&refused, "retry-after").parse().unwrap();
    let millis: u64 = header(&refused, "retry-after-ms").parse().unwrap();
    assert!(
        millis > 0 && millis <= seconds * 1000,
        "{millis} ms vs {seconds} s"
    );
    assert!(millis > (seconds - 1) * 1000, "{millis} ms vs {seconds} s");
}

#[tokio::test]
async fn an_exhausted_chain_tells_sdks_not_to_retry() {
    let down = scripted("down", [Behavior::status(500)]).await;
    let gateway = to_down(&down, "").start().await;
    let response = post(&gateway, &chat("r")).await;
    assert_eq!(response.status(), 503);
    assert_eq!(header(&response, "x-should-retry"), "false");
}

#[tokio::test]
async fn the_degraded_answer_has_the_fields_openais_schema_requires() {
    let down = scripted("down", [Behavior::status(500)]).await;
    let gateway = to_down(&down, "degraded = { content = \"later\" }")
        .start()
        .await;
    let body: serde_json::Value = post(&gateway, &chat("r")).await.json().await.unwrap();
    let message = &body["choices"][0]["message"];
    assert_eq!(message["content"], "later");
    assert!(
        message.get("refusal").is_some_and(|r| r.is_null()),
        "{body}"
    );
}

#[tokio::test]
async fn a_404_under_an_anthropic_path_is_in_anthropics_shape() {
    let up = scripted("up", []).await;
    let gateway = gateway(&provider("up", &up)).await;
    let response = post_to(&gateway, "/v1/messages/no-such-thing", &message("m", false)).await;
    assert_eq!(response.status(), 404);
    let body: serde_json::Value = response.json().await.unwrap();
    assert_eq!(body["type"], "error", "{body}");
    assert_eq!(body["error"]["type"], "not_found_error", "{body}");
}

#[tokio::test]
async fn one_model_can_be_retrieved_by_its_id() {
    let up = scripted("up", []).await;
    let gateway = to_up(&up).start().await;
    for id in ["r", "up/m"] {
        let response = client()
            .get(format!("{}/v1/models/{id}", gateway.url()))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 200, "{id}");
        let body: serde_json::Value = response.json().await.unwrap();
        assert_eq!(
            (body["id"].as_str(), body["object"].as_str()),
            (Some(id), Some("model"))
        );
    }
    let missing = client()
        .get(format!("{}/v1/models/nope", gateway.url()))
        .send()
        .await
        .unwrap();
    assert_eq!(missing.status(), 404);
}

#[tokio::test]
async fn rate_limited_at_every_step_is_a_429_with_the_soonest_retry() {
    let slow = scripted("slow", [Behavior::status(429).header("retry-after", "30")]).await;
    let soon = scripted("soon", [Behavior::status(429).header("retry-after", "7")]).await;
    let gateway = one_attempt_each(("slow", &slow), ("soon", &soon))
        .start()
        .await;
    let response = post(&gateway, &chat("r")).await;
    assert_eq!(response.status(), 429);
    assert_eq!(header(&response, "retry-after"), "7");
    assert_eq!(header(&response, "retry-after-ms"), "7000");
    let body: serde_json::Value = response.json().await.unwrap();
    assert_eq!(body["error"]["type"], "rate_limit_error", "{body}");
    assert_eq!(body["error"]["code"], "upstream_rate_limited", "{body}");

    // One step rate-limited and one broken is still the gateway's 503.
    let broken = scripted("broken", [Behavior::status(500)]).await;
    let mixed = one_attempt_each(("soon", &soon), ("broken", &broken))
        .start()
        .await;
    assert_eq!(post(&mixed, &chat("r")).await.status(), 503);
}
