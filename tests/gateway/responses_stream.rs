//! `POST /v1/responses` streamed: the documented event sequence from a translated step, a
//! function call's argument events, the degraded tier's stream, and a break after the commit
//! point ending with an `error` event.

use serde_json::{Value, json};
use switchyard::fake::{Behavior, FakeHandle};

use super::responses::{chain, create, output_text, request, responses_provider};
use super::support::*;

/// Route `r` to `fake`, an OpenAI-compatible provider that speaks only chat.
fn compat(fake: &FakeHandle) -> TestGateway {
    TestGateway::new()
        .provider("compat", fake)
        .route("r", &[("compat", "m")], "")
}

#[tokio::test]
async fn a_translated_stream_has_the_documented_event_sequence() {
    let fake = scripted("compat", []).await;
    let gateway = compat(&fake).start().await;
    let mut body = request("r");
    body["stream"] = json!(true);
    let response = create(&gateway, &body).await;
    assert_eq!(response.status(), 200);
    assert_eq!(header(&response, "content-type"), "text/event-stream");
    let events = sse_events(&response.text().await.unwrap());
    let names: Vec<&str> = events.iter().map(|(name, _)| name.as_str()).collect();
    assert_eq!(
        names[..4],
        [
            "response.created",
            "response.in_progress",
            "response.output_item.added",
            "response.content_part.added"
        ]
    );
    assert_eq!(
        names[names.len() - 4..],
        [
            "response.output_text.done",
            "response.content_part.done",
            "response.output_item.done",
            "response.completed"
        ]
    );
    for (i, (name, data)) in events.iter().enumerate() {
        assert_eq!(data["sequence_number"], i as u64, "{name}");
        assert_eq!(&data["type"], name);
    }
    let text: String = events
        .iter()
        .filter(|(name, _)| name == "response.output_text.delta")
        .filter_map(|(_, data)| data["delta"].as_str())
        .collect();
    assert_eq!(text, "Hello from compat!");
    let completed = &events.last().unwrap().1["response"];
    assert_eq!(output_text(completed), "Hello from compat!");
    assert_eq!(completed["usage"]["output_tokens"], 3);
    assert_eq!(
        fake.requests()[0].json()["stream_options"]["include_usage"],
        true
    );
}

#[tokio::test]
async fn a_streamed_function_call_has_its_argument_events() {
    let fake = scripted(
        "compat",
        [Behavior::ok().tool_call("weather", json!({"city": "Oslo"}))],
    )
    .await;
    let gateway = compat(&fake).start().await;
    let body = json!({"model": "r", "input": "Weather?", "stream": true,
                      "tools": [{"type": "function", "name": "weather", "parameters": {"type": "object"}}]});
    let events = sse_events(&create(&gateway, &body).await.text().await.unwrap());
    let done = events
        .iter()
        .find(|(name, _)| name == "response.function_call_arguments.done")
        .unwrap();
    assert_eq!(done.1["name"], "weather");
    assert_eq!(
        serde_json::from_str::<Value>(done.1["arguments"].as_str().unwrap()).unwrap(),
        json!({"city": "Oslo"})
    );
    let completed = &events.last().unwrap().1["response"];
    assert_eq!(completed["output"][1]["type"], "function_call");
}

#[tokio::test]
async fn the_degraded_tier_answers_a_response_object_and_stream() {
    let primary = scripted("primary", [Behavior::status(500)]).await;
    let secondary = scripted("secondary", [Behavior::status(500)]).await;
    let gateway = chain(
        &primary,
        "openai",
        &secondary,
        "degraded = { content = \"Try later.\" }",
    )
    .await;
    let answer: Value = create(&gateway, &request("r")).await.json().await.unwrap();
    assert_eq!(answer["object"], "response");
    assert_eq!(output_text(&answer), "Try later.");
    let mut body = request("r");
    body["stream"] = json!(true);
    let response = create(&gateway, &body).await;
    assert_eq!(header(&response, "x-switchyard-outcome"), "degraded");
    let events = sse_events(&response.text().await.unwrap());
    assert_eq!(events[0].0, "response.created");
    assert_eq!(
        output_text(&events.last().unwrap().1["response"]),
        "Try later."
    );
}

#[tokio::test]
async fn a_failure_after_commit_ends_with_an_error_event() {
    for passthrough in [true, false] {
        let fake = scripted("p", [Behavior::ok().chunks(4, 0).error_after(2)]).await;
        let gateway = TestGateway::new()
            .with(&responses_provider("openai", "p", &fake, passthrough))
            .route("r", &[("p", "m")], "")
            .start()
            .await;
        let mut body = request("r");
        body["stream"] = json!(true);
        let response = create(&gateway, &body).await;
        assert_eq!(response.status(), 200);
        let id = header(&response, "x-switchyard-request-id").to_owned();
        let events = sse_events(&response.text().await.unwrap());
        let (name, last) = events.last().unwrap();
        assert_eq!(name, "error", "{events:?}");
        assert_eq!(last["type"], "error");
        assert!(
            last["error"]["message"].is_string(),
            "the SDKs raise on a data `error` object"
        );
        let previous = events[events.len() - 2].1["sequence_number"]
            .as_u64()
            .unwrap();
        assert_eq!(last["sequence_number"], previous + 1);
        let row = record(&gateway, &id).await;
        assert_eq!(row.outcome.as_str(), "error");
        assert!(row.partial);
    }
}
