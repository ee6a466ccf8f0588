//! An upstream's `retry-after` is untrusted: absurd values end in a proper answer, on time.

use std::time::{Duration, Instant};

use serde_json::Value;
use switchyard::fake::Behavior;
use switchyard::server::Gateway;

use super::support::*;

/// FAST_RETRY's `request_deadline`.
const DEADLINE: Duration = Duration::from_secs(10);

/// Posts one chat request, failing the test (instead of hanging) if no answer comes in time.
async fn ask(gateway: &Gateway) -> (reqwest::Response, Duration) {
    let started = Instant::now();
    let request = client()
        .post(format!("{}/v1/chat/completions", gateway.url()))
        .json(&chat("r"))
        .send();
    let response = tokio::time::timeout(DEADLINE + Duration::from_secs(5), request)
        .await
        .expect("the gateway answers within its deadline")
        .expect("the gateway answers instead of dropping the connection");
    (response, started.elapsed())
}

/// primary answers 429 with `retry-after: value`; the request must fall back to secondary,
/// and the gateway must go on serving afterwards.
async fn falls_back_past(value: &str) {
    let (primary, secondary) =
        primary_and_secondary([Behavior::status(429).header("retry-after", value)]).await;
    let gateway = two_step(&primary, &secondary, FAST_RETRY).await;

    let (response, elapsed) = ask(&gateway).await;
    assert_eq!(response.status(), 200, "retry-after: {value}");
    assert!(elapsed < DEADLINE, "took {elapsed:?}");
    assert_eq!(header(&response, "x-switchyard-step"), "1");
    assert_eq!(header(&response, "x-switchyard-outcome"), "fallback");
    let body: Value = response.json().await.unwrap();
    assert_eq!(content(&body), "Hello from secondary!");

    // The health table is still usable: the benched primary is skipped, nothing panics.
    let (again, _) = ask(&gateway).await;
    assert_eq!(
        again.status(),
        200,
        "second request after retry-after: {value}"
    );
    assert_eq!(header(&again, "x-switchyard-step"), "1");
    assert_eq!((primary.calls(), secondary.calls()), (1, 2));
}

#[tokio::test]
async fn a_retry_after_of_1e300_falls_back_within_the_deadline() {
    falls_back_past("1e300").await;
}

#[tokio::test]
async fn a_retry_after_of_u64_max_falls_back_within_the_deadline() {
    falls_back_past("18446744073709551615").await;
}

#[tokio::test]
async fn a_retry_after_date_far_in_the_future_falls_back_within_the_deadline() {
    falls_back_past("Fri, 31 Dec 9999 23:59:59 GMT").await;
}

#[tokio::test]
async fn an_absurd_retry_after_on_the_last_step_is_a_clean_error() {
    for value in ["1e300", "18446744073709551615"] {
        let only = scripted("only", [Behavior::status(429).header("retry-after", value)]).await;
        let gateway = TestGateway::new()
            .provider("only", &only)
            .route("r", &[("only", "model-a")], "")
            .fast_retry()
            .start()
            .await;
        let (response, elapsed) = ask(&gateway).await;
        assert!(elapsed < DEADLINE, "took {elapsed:?}");
        let status = response.status();
        assert!(
            status.is_client_error() || status.is_server_error(),
            "{status}"
        );
        let body: Value = response.json().await.unwrap();
        error_message(&body);
        assert_eq!(only.calls(), 1, "retry-after: {value}");
    }
}
