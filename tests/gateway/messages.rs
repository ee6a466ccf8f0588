//! `POST /v1/messages`: Anthropic clients, passed through to Anthropic steps and translated
//! for the others, with errors, fallbacks and degraded answers in Anthropic's shape.

use serde_json::{Value, json};
use switchyard::fake::{Behavior, FakeHandle};

use super::support::*;

/// Route `r` = primary (of `kind`) → secondary (openai), with a degraded tier.
async fn chain(
    kind: &str,
    primary: &FakeHandle,
    secondary: &FakeHandle,
) -> switchyard::server::Gateway {
    TestGateway::new()
        .provider_of(kind, "primary", primary)
        .provider("secondary", secondary)
        .route(
            "r",
            &[("primary", "model-a"), ("secondary", "model-b")],
            "degraded = { content = \"Sorry, try later.\" }",
        )
        .fast_retry()
        .start()
        .await
}

async fn fakes(primary: Behavior, secondary: Behavior) -> (FakeHandle, FakeHandle) {
    let primary = scripted("primary", [primary]).await;
    let secondary = scripted("secondary", [secondary]).await;
    (primary, secondary)
}

/// Asserts an Anthropic-shaped error and returns its type.
fn anthropic_error(body: &Value) -> String {
    assert_eq!(body["type"], "error", "not an Anthropic error: {body}");
    assert!(body["error"]["message"].is_string(), "{body}");
    body["error"]["type"].as_str().unwrap_or("").to_owned()
}

#[tokio::test]
async fn an_anthropic_step_gets_the_request_as_it_came() {
    let (primary, secondary) = fakes(Behavior::ok(), Behavior::ok()).await;
    let gateway = chain("anthropic", &primary, &secondary).await;
    let mut request = message("r", false);
    request["x_future_field"] = json!({"kept": true});
    request["top_k"] = json!(3);
    let response = post_to(&gateway, "/v1/messages", &request).await;
    assert_eq!(response.status(), 200);
    assert_eq!(header(&response, "x-switchyard-step"), "0");
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["type"], "message");
    assert_eq!(body["content"][0]["text"], "Hello from primary!");
    let mut expected = request.clone();
    expected["model"] = json!("model-a");
    assert_eq!(
        primary.requests()[0].json(),
        expected,
        "only the model changes"
    );
}

#[tokio::test]
async fn a_529_falls_back_to_an_openai_step_in_anthropics_shape() {
    let (primary, secondary) = fakes(Behavior::status(529), Behavior::ok()).await;
    let gateway = chain("anthropic", &primary, &secondary).await;
    let response = post_to(&gateway, "/v1/messages", &message("r", false)).await;
    assert_eq!(response.status(), 200);
    assert_eq!(header(&response, "x-switchyard-step"), "1");
    assert_eq!(header(&response, "x-switchyard-outcome"), "fallback");
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["type"], "message");
    assert_eq!(body["role"], "assistant");
    assert_eq!(
        body["content"],
        json!([{"type": "text", "text": "Hello from secondary!"}])
    );
    assert_eq!(body["stop_reason"], "end_turn");
    assert!(body["usage"]["output_tokens"].as_u64().unwrap() > 0);
    let sent = secondary.requests()[0].json();
    assert_eq!(
        sent["messages"],
        json!([{"role": "user", "content": "Hello there"}])
    );
    assert_eq!(sent["max_tokens"], 256);

    let response = post_to(&gateway, "/v1/messages", &message("r", true)).await;
    assert_eq!(header(&response, "x-switchyard-step"), "1");
    let events = sse_events(&response.text().await.unwrap());
    let names: Vec<&str> = events.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names.first(), Some(&"message_start"));
    assert_eq!(names.last(), Some(&"message_stop"));
    assert_eq!(anthropic_text(&events), "Hello from secondary!");
    let delta = events.iter().find(|(n, _)| n == "message_delta").unwrap();
    assert_eq!(delta.1["delta"]["stop_reason"], "end_turn");
    assert!(delta.1["usage"]["output_tokens"].as_u64().unwrap() > 0);
}

#[tokio::test]
async fn tool_calls_translate_both_ways_for_anthropic_clients() {
    let call = Behavior::ok()
        .content("Checking.")
        .tool_call("get_weather", json!({"city": "Oslo"}));
    let (primary, secondary) = fakes(Behavior::status(500), call.clone()).await;
    let gateway = chain("anthropic", &primary, &secondary).await;
    let mut request = message("r", false);
    request["tools"] = json!([{"name": "get_weather", "description": "Weather", "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}}}]);
    let body: Value = post_to(&gateway, "/v1/messages", &request)
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(body["stop_reason"], "tool_use");
    assert_eq!(
        body["content"][1],
        json!({"type": "tool_use", "id": "call_fake_0", "name": "get_weather", "input": {"city": "Oslo"}})
    );
    assert_eq!(
        secondary.requests()[0].json()["tools"][0]["function"]["name"],
        "get_weather"
    );

    // The tool result goes back, and the OpenAI step sees it as a tool message.
    request["messages"] = json!([
        {"role": "user", "content": "Weather in Oslo?"},
        {"role": "assistant", "content": body["content"].clone()},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "call_fake_0", "content": "-3C"}]}
    ]);
    request["stream"] = json!(true);
    let response = post_to(&gateway, "/v1/messages", &request).await;
    let events = sse_events(&response.text().await.unwrap());
    let tool_start = events
        .iter()
        .find(|(n, d)| n == "content_block_start" && d["content_block"]["type"] == "tool_use")
        .expect("a tool_use block");
    assert_eq!(tool_start.1["content_block"]["name"], "get_weather");
    let partial: String = events
        .iter()
        .filter_map(|(_, d)| d["delta"]["partial_json"].as_str().map(str::to_owned))
        .collect();
    assert_eq!(
        serde_json::from_str::<Value>(&partial).unwrap(),
        json!({"city": "Oslo"})
    );
    let sent = secondary.requests()[1].json();
    assert_eq!(
        sent["messages"][2],
        json!({"role": "tool", "tool_call_id": "call_fake_0", "content": "-3C"})
    );
}

#[tokio::test]
async fn the_gateways_own_errors_are_in_anthropics_shape() {
    let (primary, secondary) = fakes(Behavior::ok(), Behavior::ok()).await;
    let gateway = chain("anthropic", &primary, &secondary).await;
    let response = post_to(&gateway, "/v1/messages", &message("nope", false)).await;
    assert_eq!(response.status(), 404);
    assert_eq!(
        anthropic_error(&response.json().await.unwrap()),
        "not_found_error"
    );

    let response = post_raw_json(&gateway, "/v1/messages", "{not json").await;
    assert_eq!(response.status(), 400);
    assert_eq!(
        anthropic_error(&response.json().await.unwrap()),
        "invalid_request_error"
    );

    let mut bad = message("r", false);
    bad["max_tokens"] = json!(0);
    let response = post_to(&gateway, "/v1/messages", &bad).await;
    assert_eq!(response.status(), 400);

    let huge = json!({"model": "r", "messages": [{"role": "user", "content": "x".repeat(5 * 1024 * 1024)}]});
    let response = post_to(&gateway, "/v1/messages", &huge).await;
    assert_eq!(response.status(), 413);
    assert_eq!(
        anthropic_error(&response.json().await.unwrap()),
        "request_too_large"
    );
}

#[tokio::test]
async fn an_upstream_error_is_returned_in_anthropics_shape() {
    let (primary, secondary) = fakes(Behavior::status(422), Behavior::ok()).await;
    let gateway = chain("openai", &primary, &secondary).await;
    let response = post_to(&gateway, "/v1/messages", &message("r", false)).await;
    assert_eq!(response.status(), 422);
    let body: Value = response.json().await.unwrap();
    assert_eq!(anthropic_error(&body), "invalid_request_error");
    assert_eq!(body["error"]["message"], "fake upstream answered 422");
}

#[tokio::test]
async fn exhaustion_is_degraded_or_a_503_in_anthropics_shape() {
    let (primary, secondary) = fakes(Behavior::status(503), Behavior::status(502)).await;
    let degraded = chain("anthropic", &primary, &secondary).await;
    let response = post_to(&degraded, "/v1/messages", &message("r", false)).await;
    assert_eq!(header(&response, "x-switchyard-outcome"), "degraded");
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["content"][0]["text"], "Sorry, try later.");
    let response = post_to(&degraded, "/v1/messages", &message("r", true)).await;
    let events = sse_events(&response.text().await.unwrap());
    assert_eq!(anthropic_text(&events), "Sorry, try later.");
    assert_eq!(events.last().unwrap().0, "message_stop");

    let bare = TestGateway::new()
        .provider_of("anthropic", "primary", &primary)
        .route("bare", &[("primary", "m")], "")
        .fast_retry()
        .start()
        .await;
    let response = post_to(&bare, "/v1/messages", &message("bare", false)).await;
    assert_eq!(response.status(), 503);
    assert_eq!(
        anthropic_error(&response.json().await.unwrap()),
        "api_error"
    );
}

#[tokio::test]
async fn a_mid_stream_failure_ends_with_an_anthropic_error_event() {
    let dropping = Behavior::ok()
        .content("a b c d")
        .chunks(4, 20)
        .drop_after(2);
    let (primary, secondary) = fakes(Behavior::status(500), dropping).await;
    let gateway = chain("anthropic", &primary, &secondary).await;
    let response = post_to(&gateway, "/v1/messages", &message("r", true)).await;
    assert_eq!(header(&response, "x-switchyard-step"), "1");
    let events = sse_events(&response.text().await.unwrap());
    assert_eq!(anthropic_text(&events), "a b");
    let (name, data) = events.last().unwrap();
    assert_eq!(name, "error");
    assert_eq!(data["type"], "error");
    assert_eq!(data["error"]["type"], "api_error");

    // From an Anthropic upstream, its own error event is passed on as it came.
    let overloaded = Behavior::ok()
        .content("a b c d")
        .chunks(4, 0)
        .error_after(2);
    let (primary, secondary) = fakes(overloaded, Behavior::ok()).await;
    let gateway = chain("anthropic", &primary, &secondary).await;
    let response = post_to(&gateway, "/v1/messages", &message("r", true)).await;
    let events = sse_events(&response.text().await.unwrap());
    assert_eq!(anthropic_text(&events), "a b");
    let (name, data) = events.last().unwrap();
    assert_eq!(name, "error");
    assert_eq!(data["error"]["type"], "overloaded_error");
    assert_eq!(secondary.calls(), 0);
}

#[tokio::test]
async fn a_gemini_step_serves_anthropic_clients() {
    let (primary, secondary) = fakes(Behavior::ok().content("from gemini"), Behavior::ok()).await;
    let gateway = chain("gemini", &primary, &secondary).await;
    let body: Value = post_to(&gateway, "/v1/messages", &message("r", false))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(body["content"][0]["text"], "from gemini");
    let response = post_to(&gateway, "/v1/messages", &message("r", true)).await;
    let events = sse_events(&response.text().await.unwrap());
    assert_eq!(anthropic_text(&events), "from gemini");
    assert_eq!(events.last().unwrap().0, "message_stop");
}
