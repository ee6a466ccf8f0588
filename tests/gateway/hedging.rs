//! Hedged first tokens: a slow step 0 raced by step 1, the loser's connection dropped, one
//! answer to the client; nothing hedged when step 0 is fast; the hedge budget's cap.

use std::time::Duration;

use serde_json::Value;
use switchyard::fake::{Behavior, FakeHandle, FakeUpstream};
use switchyard::telemetry::FailureClass;

use super::support::*;

/// The route `r` = primary → secondary, hedged as `hedge` says.
async fn hedged(
    primary: &FakeHandle,
    secondary: &FakeHandle,
    hedge: &str,
    extra: &str,
) -> switchyard::server::Gateway {
    TestGateway::new()
        .provider("primary", primary)
        .provider("secondary", secondary)
        .route(
            "r",
            &[("primary", "model-a"), ("secondary", "model-b")],
            &format!("hedge = {hedge}"),
        )
        .with(OBSERVABILITY)
        .with(extra)
        .start()
        .await
}

/// Resolves once `fake` has seen a client go away before its answer was written; a bound
/// only so a failure reads as one rather than as a hang: the count cannot rise later, since
/// an answer that was written is never counted.
async fn loser_closed(fake: &FakeHandle) {
    tokio::time::timeout(
        Duration::from_secs(10),
        fake.wait_until(|s| s.answers_abandoned == 1),
    )
    .await
    .expect("the loser's connection is closed before its answer is written");
}

/// Asserts the log tells the race: the hedge served from step 1, step 0 lost.
async fn assert_logged_as_hedged(
    gateway: &switchyard::server::Gateway,
    response: &reqwest::Response,
) {
    let id = header(response, "x-switchyard-request-id").to_owned();
    let row = record(gateway, &id).await;
    let story: Vec<(usize, Option<FailureClass>, bool)> = row
        .attempts
        .iter()
        .map(|a| (a.step, a.failure, a.hedge))
        .collect();
    assert_eq!(
        story,
        [(1, None, true), (0, Some(FailureClass::HedgeLost), false)]
    );
}

/// A primary playing `slow` and a secondary playing `quick`, behind a hedge after 200 ms.
async fn slow_and_quick(
    slow: Behavior,
    quick: Behavior,
) -> (FakeHandle, FakeHandle, switchyard::server::Gateway) {
    let primary = scripted("primary", [slow]).await;
    let secondary = scripted("secondary", [quick]).await;
    let gateway = hedged(&primary, &secondary, r#"{ after = "200ms" }"#, "").await;
    (primary, secondary, gateway)
}

fn assert_served_by_the_hedge(response: &reqwest::Response) {
    assert_eq!(response.status(), 200);
    assert_eq!(header(response, "x-switchyard-step"), "1");
    assert_eq!(header(response, "x-switchyard-hedged"), "true");
}

#[tokio::test]
async fn a_slow_json_step_0_is_hedged_and_its_connection_closed() {
    let (primary, secondary, gateway) =
        slow_and_quick(Behavior::ok().delay_ms(2_000), Behavior::ok().delay_ms(50)).await;
    let response = post(&gateway, &chat("r")).await;
    assert_served_by_the_hedge(&response);
    assert_eq!(header(&response, "x-switchyard-attempts"), "2");
    assert_logged_as_hedged(&gateway, &response).await;
    let body: Value = response.json().await.unwrap();
    assert_eq!(content(&body), "Hello from secondary!");
    assert_eq!(body["model"], "model-b");
    loser_closed(&primary).await;
    assert_eq!((primary.calls(), secondary.calls()), (1, 1));
    let metrics = metrics_text(&gateway.url(), METRICS_TOKEN).await;
    assert!(
        metrics.contains(r#"switchyard_hedges_total{route="r",result="won"} 1"#),
        "{metrics}"
    );
}

#[tokio::test]
async fn a_slow_first_event_is_hedged_and_only_the_winner_is_streamed() {
    let (primary, _secondary, gateway) = slow_and_quick(
        Behavior::ok().first_event_after(2_000),
        Behavior::ok().first_event_after(50),
    )
    .await;
    let response = post(&gateway, &chat_stream("r")).await;
    assert_served_by_the_hedge(&response);
    let id = header(&response, "x-switchyard-request-id").to_owned();
    let events = sse_data(&response.text().await.expect("the stream ends properly"));
    assert_eq!(streamed_text(&events), "Hello from secondary!");
    let done = events.iter().filter(|e| *e == "[DONE]").count();
    assert_eq!(done, 1, "{events:?}");
    for event in events.iter().filter(|e| *e != "[DONE]") {
        let event: Value = serde_json::from_str(event).unwrap();
        assert_eq!(event["model"], "model-b", "every event is step 1's");
    }
    loser_closed(&primary).await;
    assert_eq!(primary.stats().streams_completed, 0);
    let row = record(&gateway, &id).await;
    assert_eq!(row.attempts.len(), 2);
    assert!(row.attempts[0].hedge && row.attempts[0].failure.is_none());
    assert_eq!(row.attempts[1].failure, Some(FailureClass::HedgeLost));
}

#[tokio::test]
async fn a_fast_step_0_is_never_hedged() {
    let primary = scripted("primary", []).await;
    let secondary = scripted("secondary", []).await;
    let gateway = hedged(&primary, &secondary, r#"{ after = "2s" }"#, "").await;
    for body in [chat("r"), chat_stream("r"), chat("r")] {
        let response = post(&gateway, &body).await;
        assert_eq!(response.status(), 200);
        assert_eq!(header(&response, "x-switchyard-step"), "0");
        assert_eq!(header(&response, "x-switchyard-hedged"), "");
        assert_eq!(header(&response, "x-switchyard-attempts"), "1");
        response.text().await.unwrap();
    }
    assert_eq!(secondary.calls(), 0);
    assert_eq!(primary.stats().answers_abandoned, 0);
}

#[tokio::test]
async fn the_hedge_budget_hedges_only_its_share_of_slow_requests() {
    // Every primary answer is slow; 20 requests at once, 10 % may be hedged: 2.
    let primary = scripted("primary", [Behavior::ok().delay_ms(1_000)]).await;
    let secondary = scripted("secondary", []).await;
    let budget = "[retry]\nhedge_budget_percent = 10.0\n";
    let gateway = hedged(&primary, &secondary, r#"{ after = "300ms" }"#, budget).await;
    let body = chat("r");
    let requests = (0..20).map(|_| post(&gateway, &body));
    let responses = futures_util::future::join_all(requests).await;
    let hedged = responses
        .iter()
        .filter(|r| header(r, "x-switchyard-hedged") == "true")
        .count();
    assert!(responses.iter().all(|r| r.status() == 200));
    assert_eq!(hedged, 2);
    assert_eq!(secondary.calls(), 2);
    // The counter is kept by the log writer, which may not have every row yet when the
    // answers' heads are in: wait for all 20 rows before reading it.
    let telemetry = gateway.telemetry();
    tokio::time::timeout(Duration::from_secs(10), telemetry.wait_for_rows(20))
        .await
        .expect("every request is logged");
    let metrics = metrics_text(&gateway.url(), METRICS_TOKEN).await;
    assert!(
        metrics.contains(r#"switchyard_hedges_refused_total{route="r"} 18"#),
        "{metrics}"
    );
}

#[tokio::test]
async fn a_percentile_delay_hedges_only_once_it_has_an_estimate() {
    // First a slow answer with no estimate yet: not hedged. Then 19 quick ones, so that
    // only the next request has the 20 samples an estimate needs: a slow one, late against
    // the primary's own p95 (the quickest answers' slowest).
    let mut primary = FakeUpstream::new("primary").then(Behavior::ok().delay_ms(300));
    for _ in 0..19 {
        primary = primary.then(Behavior::ok());
    }
    let primary = primary
        .then(Behavior::ok().delay_ms(5_000))
        .start()
        .await
        .unwrap();
    let secondary = scripted("secondary", []).await;
    let gateway = hedged(&primary, &secondary, r#"{ after = "p95" }"#, "").await;
    let first = post(&gateway, &chat("r")).await;
    assert_eq!(header(&first, "x-switchyard-step"), "0");
    assert_eq!(header(&first, "x-switchyard-hedged"), "");
    for _ in 0..19 {
        let quick = post(&gateway, &chat("r")).await;
        assert_eq!(header(&quick, "x-switchyard-step"), "0");
    }
    let late = post(&gateway, &chat("r")).await;
    assert_eq!(header(&late, "x-switchyard-step"), "1");
    assert_eq!(header(&late, "x-switchyard-hedged"), "true");
    loser_closed(&primary).await;
}
