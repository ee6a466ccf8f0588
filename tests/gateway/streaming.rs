//! Streams: fail over before the first event, never after; end every failure properly.

use std::time::Duration;

use futures_util::StreamExt;
use serde_json::{Value, json};
use switchyard::fake::{Behavior, FakeHandle};
use switchyard::telemetry::Outcome;

use super::support::*;

/// Route `r` to `fake`, the only step.
fn only(fake: &FakeHandle) -> TestGateway {
    TestGateway::new()
        .provider("up", fake)
        .route("r", &[("up", "m")], "")
}

/// Reads a streaming response to its end, returning each event's data.
async fn read_all(response: reqwest::Response) -> Vec<String> {
    sse_data(&response.text().await.expect("the stream ends properly"))
}

#[tokio::test]
async fn failures_before_the_first_event_fall_back() {
    let cases = [
        ("status 500", Behavior::status(500)),
        ("dropped before any event", Behavior::ok().drop_after(0)),
        ("reset before headers", Behavior::reset()),
        (
            "first event malformed",
            Behavior::ok().body("data: {nope\n\n"),
        ),
    ];
    for (case, behavior) in cases {
        let (primary, secondary) = primary_and_secondary([behavior]).await;
        let gateway = two_step(&primary, &secondary, FAST_RETRY).await;
        let response = post(&gateway, &chat_stream("r")).await;
        assert_eq!(response.status(), 200, "{case}");
        assert_eq!(header(&response, "x-switchyard-step"), "1", "{case}");
        assert_eq!(
            header(&response, "x-switchyard-outcome"),
            "fallback",
            "{case}"
        );
        let events = read_all(response).await;
        assert_eq!(streamed_text(&events), "Hello from secondary!", "{case}");
        assert_eq!(events.last().map(String::as_str), Some("[DONE]"), "{case}");
    }
}

#[tokio::test]
async fn the_attempt_timeout_runs_to_the_first_event() {
    // Headers come at once; the first event would come only after 5 s.
    let slow_first_event = Behavior::ok().first_event_after(5_000);
    let (primary, secondary) = primary_and_secondary([slow_first_event]).await;
    let retry = "[retry]\nattempt_timeout = \"300ms\"\nrequest_deadline = \"10s\"\n";
    let gateway = two_step(&primary, &secondary, retry).await;
    let response = post(&gateway, &chat_stream("r")).await;
    assert_eq!(header(&response, "x-switchyard-step"), "1");
}

#[tokio::test]
async fn a_429_before_commit_is_retried_and_a_degraded_stream_parses() {
    let (primary, secondary) = primary_and_secondary([
        Behavior::status(429).header("retry-after", "0"),
        Behavior::ok(),
    ])
    .await;
    let gateway = two_step(&primary, &secondary, FAST_RETRY).await;
    let response = post(&gateway, &chat_stream("r")).await;
    assert_eq!(header(&response, "x-switchyard-step"), "0");
    assert_eq!(header(&response, "x-switchyard-attempts"), "2");
    read_all(response).await;
}

#[tokio::test]
async fn events_are_forwarded_as_they_arrive() {
    let fake = scripted(
        "up",
        [Behavior::ok().content("one two three").chunks(3, 1_000)],
    )
    .await;
    let gateway = only(&fake).start().await;
    let response = post(&gateway, &chat_stream("r")).await;
    // The serving step is known before the first token.
    assert_eq!(header(&response, "x-switchyard-step"), "0");
    assert_eq!(header(&response, "x-switchyard-provider"), "up");
    assert_eq!(header(&response, "x-switchyard-model"), "m");
    let mut body = response.bytes_stream();
    let first = body.next().await.expect("a first chunk").unwrap();
    assert!(String::from_utf8_lossy(&first).contains("one"), "{first:?}");
    // The fake is still two seconds from its last chunk: nothing was buffered.
    assert_eq!(fake.stats().streams_completed, 0);
    let mut rest = Vec::new();
    while let Some(chunk) = body.next().await {
        rest.extend_from_slice(&chunk.unwrap());
    }
    assert!(String::from_utf8_lossy(&rest).ends_with("data: [DONE]\n\n"));
    assert_eq!(fake.stats().streams_completed, 1);
}

/// Starts a stream whose primary fails mid-answer as `behavior` says; returns the events
/// the client got, the secondary's call count, and the request's log row.
async fn mid_stream(
    behavior: Behavior,
    retry: &str,
) -> (Vec<String>, usize, switchyard::telemetry::RequestRecord) {
    let (primary, secondary) = primary_and_secondary([behavior]).await;
    let gateway = two_step(&primary, &secondary, retry).await;
    let response = post(&gateway, &chat_stream("r")).await;
    assert_eq!(response.status(), 200);
    let id = header(&response, "x-switchyard-request-id").to_owned();
    let events = read_all(response).await;
    let row = record(&gateway, &id).await;
    (events, secondary.calls(), row)
}

fn assert_ends_with_error_event(events: &[String], code: &str) {
    assert!(
        !events.contains(&"[DONE]".to_owned()),
        "no end marker after a failure: {events:?}"
    );
    let last: Value = serde_json::from_str(events.last().expect("events")).unwrap();
    assert_eq!(last["error"]["code"], code, "{events:?}");
    assert!(last["error"]["message"].is_string());
}

fn assert_partial_error(row: &switchyard::telemetry::RequestRecord) {
    assert_eq!(row.outcome, Outcome::Error);
    assert!(row.partial);
    assert_eq!(row.step, Some(0));
}

#[tokio::test]
async fn a_dropped_connection_mid_stream_ends_with_an_error_event_and_no_switch() {
    let (events, secondary, row) = mid_stream(
        Behavior::ok()
            .content("a b c d")
            .chunks(4, 50)
            .drop_after(2),
        FAST_RETRY,
    )
    .await;
    assert_eq!(streamed_text(&events), "a b");
    assert_ends_with_error_event(&events, "connection_reset");
    assert_eq!(secondary, 0, "never splice another model in");
    assert_partial_error(&row);
}

#[tokio::test]
async fn a_malformed_event_mid_stream_ends_with_an_error_event() {
    let mut malformed = Behavior::ok().chunks(2, 0);
    malformed.malformed = true;
    let (events, secondary, row) = mid_stream(malformed, FAST_RETRY).await;
    assert_ends_with_error_event(&events, "malformed_event");
    assert_eq!(secondary, 0);
    assert_partial_error(&row);
}

#[tokio::test]
async fn a_stall_past_the_idle_timeout_ends_with_an_error_event() {
    let retry = "[retry]\nstream_idle_timeout = \"300ms\"\n";
    let (events, secondary, row) =
        mid_stream(Behavior::ok().chunks(3, 0).stall_after(1), retry).await;
    assert_ends_with_error_event(&events, "stream_idle_timeout");
    assert_eq!(secondary, 0);
    assert_partial_error(&row);
}

#[tokio::test]
async fn usage_is_counted_and_stripped_unless_asked_for() {
    let fake = scripted("up", [Behavior::ok().content("one two three")]).await;
    let gateway = only(&fake).start().await;

    let response = post(&gateway, &chat_stream("r")).await;
    let id = header(&response, "x-switchyard-request-id").to_owned();
    let events = read_all(response).await;
    assert!(
        events.iter().all(|e| !e.contains("\"usage\":{")),
        "{events:?}"
    );
    let row = record(&gateway, &id).await;
    assert_eq!(row.tokens_out, Some(3));
    assert!(row.ttft.is_some());
    assert!(!row.partial);
    assert_eq!(row.outcome, Outcome::Success);

    let mut asked = chat_stream("r");
    asked["stream_options"] = json!({"include_usage": true});
    let events = read_all(post(&gateway, &asked).await).await;
    let usage: Vec<&String> = events
        .iter()
        .filter(|e| e.contains("\"usage\":{"))
        .collect();
    assert_eq!(usage.len(), 1, "{events:?}");
}

#[tokio::test]
async fn a_client_disconnect_cancels_the_upstream_and_is_logged() {
    let fake = scripted("up", [Behavior::ok().chunks(50, 100)]).await;
    let gateway = only(&fake).start().await;
    let response = post(&gateway, &chat_stream("r")).await;
    let id = header(&response, "x-switchyard-request-id").to_owned();
    let mut body = response.bytes_stream();
    body.next().await.expect("first chunk").unwrap();
    drop(body);

    let cancelled = fake.wait_until(|s| s.streams_cancelled == 1);
    tokio::time::timeout(Duration::from_secs(1), cancelled)
        .await
        .expect("the upstream request is cancelled within 1 s");
    let row = record(&gateway, &id).await;
    assert_eq!(row.error.as_deref(), Some("client_disconnected"));
    assert!(row.partial);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_hundred_disconnects_leak_no_connections_or_tasks() {
    let fake = scripted("up", [Behavior::ok().chunks(1_000, 20)]).await;
    let gateway = only(&fake).start().await;
    let client = client();
    let disconnect = || async {
        let response = client
            .post(format!("{}/v1/chat/completions", gateway.url()))
            .json(&chat_stream("r"))
            .send()
            .await
            .unwrap();
        let mut body = response.bytes_stream();
        body.next().await.expect("first chunk").unwrap();
    };
    for _ in 0..200 {
        disconnect().await;
    }
    drop(client);
    // Every count returns to zero: the fake's upstream connections (each stream cancelled),
    // the gateway's client connections, and its request tasks (a request's task ends when its
    // record is sent). Each is waited on as an event, not polled.
    let settled = async {
        fake.wait_until(|s| s.streams_cancelled == 200 && s.open_connections == 0)
            .await;
        gateway.wait_connections(|open| *open == 0).await;
        gateway.telemetry().wait_idle().await;
    };
    tokio::time::timeout(Duration::from_secs(30), settled)
        .await
        .unwrap_or_else(|_| panic!("left open: fake {:?}", fake.stats()));
    gateway.telemetry().wait_for_rows(200).await;
    let rows = gateway.telemetry().recent();
    assert_eq!(
        rows.iter()
            .filter(|r| r.error.as_deref() == Some("client_disconnected"))
            .count(),
        200
    );
}
