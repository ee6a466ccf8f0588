//! Translation drops nothing silently: each field with a counterpart crosses formats, and
//! the rest is a 400 naming it. Same-format steps get the request as it came.

use serde_json::{Value, json};
use switchyard::fake::{Behavior, FakeHandle};
use switchyard::server::Gateway;

use super::support::*;

/// Route `r` over one fake of `kind`, route `d` straight to a second of the other kind.
async fn one_step(kind: &str, behavior: Behavior) -> (FakeHandle, Gateway) {
    let up = scripted("up", [behavior]).await;
    let gateway = TestGateway::new()
        .provider_of(kind, "up", &up)
        .route("r", &[("up", "model-x")], "")
        .start()
        .await;
    (up, gateway)
}

async fn post_headers(
    gateway: &Gateway,
    path: &str,
    body: &Value,
    headers: &[(&str, &str)],
) -> reqwest::Response {
    let mut request = client().post(format!("{}{path}", gateway.url())).json(body);
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    request.send().await.expect("gateway answers")
}

fn person_schema() -> Value {
    json!({"type": "object", "properties": {"name": {"type": "string"}},
           "required": ["name"], "additionalProperties": false})
}

#[tokio::test]
async fn anthropic_structured_output_reaches_an_openai_step_as_response_format() {
    for field in ["output_config", "output_format"] {
        let (up, gateway) = one_step("openai", Behavior::ok().content(r#"{"name":"Ada"}"#)).await;
        let mut request = message("r", false);
        let format = json!({"type": "json_schema", "schema": person_schema()});
        request[field] = match field {
            "output_config" => json!({"format": format}),
            _ => format,
        };
        let response = post_to(&gateway, "/v1/messages", &request).await;
        assert_eq!(response.status(), 200, "{field}");
        let body: Value = response.json().await.unwrap();
        assert_eq!(body["content"][0]["text"], r#"{"name":"Ada"}"#);
        let sent = up.requests().pop().unwrap().json();
        assert_eq!(
            sent["response_format"],
            json!({"type": "json_schema", "json_schema": {"name": "output", "schema": person_schema(), "strict": true}}),
            "{field}"
        );
    }
}

#[tokio::test]
async fn openai_response_format_reaches_an_anthropic_step_as_output_config() {
    let (up, gateway) = one_step("anthropic", Behavior::ok().content(r#"{"name":"Ada"}"#)).await;
    let mut request = chat("r");
    request["response_format"] = json!({"type": "json_schema",
        "json_schema": {"name": "person", "strict": true, "schema": person_schema()}});
    let response = post(&gateway, &request).await;
    assert_eq!(response.status(), 200);
    let body: Value = response.json().await.unwrap();
    assert_eq!(content(&body), r#"{"name":"Ada"}"#);
    let sent = up.requests().pop().unwrap().json();
    assert_eq!(
        sent["output_config"],
        json!({"format": {"type": "json_schema", "schema": person_schema()}})
    );
}

#[tokio::test]
async fn anthropic_beta_is_forwarded_to_anthropic_steps_only() {
    let beta = "interleaved-thinking-2025-05-14,context-1m-2025-08-07";
    let (claude, gateway) = one_step("anthropic", Behavior::ok()).await;
    let headers = [("anthropic-beta", beta)];
    let response = post_headers(&gateway, "/v1/messages", &message("r", false), &headers).await;
    assert_eq!(response.status(), 200);
    let sent = claude.requests().pop().unwrap();
    assert_eq!(
        sent.headers.get("anthropic-beta").map(String::as_str),
        Some(beta)
    );
    // Another provider: the header has nothing to say to it, so it stays behind.
    let (gpt, gateway) = one_step("openai", Behavior::ok()).await;
    let response = post_headers(&gateway, "/v1/messages", &message("r", false), &headers).await;
    assert_eq!(response.status(), 200);
    let sent = gpt.requests().pop().unwrap();
    assert!(!sent.headers.contains_key("anthropic-beta"));
}

#[tokio::test]
async fn a_beta_field_another_provider_cannot_carry_is_a_400_naming_it() {
    let (gpt, gateway) = one_step("openai", Behavior::ok()).await;
    let mut request = message("r", false);
    request["context_management"] = json!({"edits": [{"type": "clear_tool_uses_20250919"}]});
    let response = post_headers(
        &gateway,
        "/v1/messages",
        &request,
        &[("anthropic-beta", "context-management-2025-06-27")],
    )
    .await;
    assert_eq!(response.status(), 400);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["type"], "error");
    let text = body["error"]["message"].as_str().unwrap();
    assert!(text.contains("context_management"), "{text}");
    assert_eq!(gpt.calls(), 0);
}

#[tokio::test]
async fn cache_control_and_thinking_reach_an_anthropic_step_unchanged() {
    let (claude, gateway) = one_step("anthropic", Behavior::ok()).await;
    let cache = json!({"type": "ephemeral", "ttl": "1h"});
    let request = json!({
        "model": "r", "max_tokens": 2048,
        "thinking": {"type": "enabled", "budget_tokens": 1024},
        "system": [{"type": "text", "text": "Long instructions", "cache_control": cache}],
        "tools": [{"name": "get_weather", "input_schema": {"type": "object"}, "cache_control": cache}],
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": "Weather?", "cache_control": cache}]},
            {"role": "assistant", "content": [
                {"type": "thinking", "thinking": "I should call the tool.", "signature": "EqQBCgIYAhIM1gbcDa9G"},
                {"type": "redacted_thinking", "data": "EmwKAhgBEgy3va3pzix"},
                {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {}}
            ]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "toolu_1", "content": "15 degrees", "cache_control": cache}
            ]}
        ]
    });
    let response = post_to(&gateway, "/v1/messages", &request).await;
    assert_eq!(response.status(), 200);
    let mut sent = claude.requests().pop().unwrap().json();
    assert_eq!(sent["model"], "model-x");
    sent["model"] = json!("r");
    assert_eq!(sent, request);
}

#[tokio::test]
async fn thinking_in_an_anthropic_answer_reaches_anthropic_clients_unchanged() {
    let answer = json!({
        "id": "msg_1", "type": "message", "role": "assistant", "model": "model-x",
        "content": [
            {"type": "thinking", "thinking": "Let me think.", "signature": "EqQBCgIYAhIM1gbcDa9G"},
            {"type": "text", "text": "42."}
        ],
        "stop_reason": "end_turn", "stop_sequence": null,
        "usage": {"input_tokens": 10, "cache_creation_input_tokens": 0,
                  "cache_read_input_tokens": 0, "output_tokens": 20}
    });
    let (_claude, gateway) = one_step("anthropic", Behavior::ok().body(&answer.to_string())).await;
    let body: Value = post_to(&gateway, "/v1/messages", &message("r", false))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(body, answer);
}

#[tokio::test]
async fn thinking_is_not_replayed_as_text_to_another_provider() {
    let (gpt, gateway) = one_step("openai", Behavior::ok()).await;
    let request = json!({"model": "r", "max_tokens": 100, "messages": [
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": [
            {"type": "thinking", "thinking": "private reasoning", "signature": "sig"},
            {"type": "text", "text": "Hello."}
        ]},
        {"role": "user", "content": "And?"}
    ]});
    assert_eq!(
        post_to(&gateway, "/v1/messages", &request).await.status(),
        200
    );
    let sent = gpt.requests().pop().unwrap();
    assert!(!sent.body.contains("private reasoning"), "{}", sent.body);
    assert_eq!(
        sent.json()["messages"][1],
        json!({"role": "assistant", "content": "Hello."})
    );
}

#[tokio::test]
async fn anthropic_cache_usage_is_openais_cached_tokens() {
    let answer = json!({
        "id": "msg_1", "type": "message", "role": "assistant", "model": "model-x",
        "content": [{"type": "text", "text": "Hi"}], "stop_reason": "end_turn", "stop_sequence": null,
        "usage": {"input_tokens": 10, "cache_creation_input_tokens": 200,
                  "cache_read_input_tokens": 1800, "output_tokens": 5}
    });
    let (_claude, gateway) = one_step("anthropic", Behavior::ok().body(&answer.to_string())).await;
    let body: Value = post(&gateway, &chat("r")).await.json().await.unwrap();
    assert_eq!(body["usage"]["prompt_tokens"], 2010);
    assert_eq!(
        body["usage"]["prompt_tokens_details"]["cached_tokens"],
        1800
    );
}

#[tokio::test]
async fn openai_cached_tokens_are_anthropics_cache_reads() {
    let answer = json!({
        "id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": "model-x",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "Hi"}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 2006, "completion_tokens": 5, "total_tokens": 2011,
                  "prompt_tokens_details": {"cached_tokens": 1920}}
    });
    let (_gpt, gateway) = one_step("openai", Behavior::ok().body(&answer.to_string())).await;
    let body: Value = post_to(&gateway, "/v1/messages", &message("r", false))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(body["usage"]["input_tokens"], 86);
    assert_eq!(body["usage"]["cache_read_input_tokens"], 1920);
    assert_eq!(body["usage"]["output_tokens"], 5);
}

#[tokio::test]
async fn tool_argument_deltas_stream_faithfully_to_anthropic_clients() {
    let chunk = |delta: Value, finish: Value| {
        format!(
            "data: {}\n\n",
            json!({"id": "c1", "object": "chat.completion.chunk", "created": 1, "model": "m",
                   "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})
        )
    };
    let pieces = ["{\"loc", "ation\": \"Par", "is\"}"];
    let mut body = chunk(
        json!({"role": "assistant", "tool_calls": [{"index": 0, "id": "call_1", "type": "function",
               "function": {"name": "get_weather", "arguments": ""}}]}),
        Value::Null,
    );
    for piece in pieces {
        body.push_str(&chunk(
            json!({"tool_calls": [{"index": 0, "function": {"arguments": piece}}]}),
            Value::Null,
        ));
    }
    body.push_str(&chunk(json!({}), json!("tool_calls")));
    body.push_str("data: [DONE]\n\n");
    let (_gpt, gateway) = one_step("openai", Behavior::ok().body(&body)).await;
    let text = post_to(&gateway, "/v1/messages", &message("r", true))
        .await
        .text()
        .await
        .unwrap();
    let partials: Vec<String> = sse_events(&text)
        .into_iter()
        .filter(|(_, data)| data["delta"]["type"] == "input_json_delta")
        .map(|(_, data)| data["delta"]["partial_json"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(partials, pieces);
}

#[tokio::test]
async fn streamed_cache_usage_maps_both_ways() {
    let anthropic_stream = [
        json!({"type": "message_start", "message": {"id": "msg_1", "type": "message", "role": "assistant",
            "model": "model-x", "content": [], "stop_reason": null, "stop_sequence": null,
            "usage": {"input_tokens": 10, "cache_creation_input_tokens": 200,
                      "cache_read_input_tokens": 1800, "output_tokens": 1}}}),
        json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
        json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Hi"}}),
        json!({"type": "content_block_stop", "index": 0}),
        json!({"type": "message_delta", "delta": {"stop_reason": "end_turn", "stop_sequence": null},
               "usage": {"output_tokens": 5}}),
        json!({"type": "message_stop"}),
    ]
    .iter()
    .map(|event| format!("event: {}\ndata: {event}\n\n", event["type"].as_str().unwrap()))
    .collect::<String>();
    let (_claude, gateway) = one_step("anthropic", Behavior::ok().body(&anthropic_stream)).await;
    let mut request = chat_stream("r");
    request["stream_options"] = json!({"include_usage": true});
    let text = post(&gateway, &request).await.text().await.unwrap();
    let usage: Value = sse_data(&text)
        .iter()
        .filter_map(|e| serde_json::from_str::<Value>(e).ok())
        .find_map(|chunk| chunk.get("usage").filter(|u| u.is_object()).cloned())
        .expect("a usage chunk");
    assert_eq!(usage["prompt_tokens"], 2010);
    assert_eq!(usage["prompt_tokens_details"]["cached_tokens"], 1800);

    let openai_stream = [
        json!({"id": "c1", "object": "chat.completion.chunk", "created": 1, "model": "m",
               "choices": [{"index": 0, "delta": {"role": "assistant", "content": "Hi"}, "finish_reason": "stop"}]}),
        json!({"id": "c1", "object": "chat.completion.chunk", "created": 1, "model": "m", "choices": [],
               "usage": {"prompt_tokens": 2006, "completion_tokens": 5, "total_tokens": 2011,
                         "prompt_tokens_details": {"cached_tokens": 1920}}}),
    ]
    .iter()
    .map(|chunk| format!("data: {chunk}\n\n"))
    .chain(std::iter::once("data: [DONE]\n\n".to_owned()))
    .collect::<String>();
    let (_gpt, gateway) = one_step("openai", Behavior::ok().body(&openai_stream)).await;
    let text = post_to(&gateway, "/v1/messages", &message("r", true))
        .await
        .text()
        .await
        .unwrap();
    let (_, delta) = sse_events(&text)
        .into_iter()
        .find(|(name, _)| name == "message_delta")
        .expect("a message_delta");
    assert_eq!(delta["usage"]["input_tokens"], 86);
    assert_eq!(delta["usage"]["cache_read_input_tokens"], 1920);
}

#[tokio::test]
async fn a_body_only_a_tree_refuses_is_a_400_for_a_translating_step_never_an_empty_one() {
    // Valid JSON the splice passes on as it is, but a number past a float's range: the
    // translation cannot build a tree of it.
    let body = r#"{"model":"r","messages":[{"role":"user","content":"hi"}],"seed":1e400}"#;
    let (up, gateway) = one_step("anthropic", Behavior::ok()).await;
    let response = post_raw_json(&gateway, "/v1/chat/completions", body).await;
    assert_eq!(response.status(), 400);
    let error: Value = response.json().await.unwrap();
    let message = error["error"]["message"].as_str().unwrap();
    assert!(message.contains("number out of range"), "{error}");
    assert_eq!(
        up.calls(),
        0,
        "nothing, least of all an empty conversation, was sent"
    );
}

#[tokio::test]
async fn a_responses_body_only_a_tree_refuses_is_a_400() {
    let body = r#"{"model":"r","input":"hi","temperature":1e400}"#;
    let (up, gateway) = one_step("openai", Behavior::ok()).await;
    let response = post_raw_json(&gateway, "/v1/responses", body).await;
    assert_eq!(response.status(), 400);
    let error: Value = response.json().await.unwrap();
    assert!(error.to_string().contains("number out of range"), "{error}");
    assert_eq!(up.calls(), 0);
}
