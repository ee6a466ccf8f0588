//! `POST /v1/responses`: passed through to a provider that speaks the Responses API,
//! translated to chat for every other step, in JSON and in the stream, with fallback, the
//! degraded tier, and a 400 naming every field that cannot be carried.

use serde_json::{Value, json};
use switchyard::fake::{Behavior, FakeHandle};

use super::support::*;

/// A provider block for a fake of `kind`, `responses = true` when `passthrough`.
pub fn responses_provider(kind: &str, name: &str, fake: &FakeHandle, passthrough: bool) -> String {
    let mut block = provider_of(kind, name, fake);
    if passthrough {
        block.push_str("responses = true\n");
    }
    block
}

/// Route `r` = primary (a Responses-speaking OpenAI provider) → secondary (of `kind`).
pub async fn chain(
    primary: &FakeHandle,
    kind: &str,
    secondary: &FakeHandle,
    extra: &str,
) -> switchyard::server::Gateway {
    TestGateway::new()
        .with(&responses_provider("openai", "primary", primary, true))
        .with(&responses_provider(kind, "secondary", secondary, false))
        .route(
            "r",
            &[("primary", "model-a"), ("secondary", "model-b")],
            extra,
        )
        .fast_retry()
        .start()
        .await
}

/// Route `r` to `fake`, an OpenAI-compatible provider that speaks only chat.
fn compat(fake: &FakeHandle) -> TestGateway {
    TestGateway::new()
        .provider("compat", fake)
        .route("r", &[("compat", "m")], "")
}

pub fn request(model: &str) -> Value {
    json!({"model": model, "instructions": "Be brief.", "input": "Hello there"})
}

pub async fn create(gateway: &switchyard::server::Gateway, body: &Value) -> reqwest::Response {
    post_to(gateway, "/v1/responses", body).await
}

/// The output text of a Response object.
pub fn output_text(response: &Value) -> String {
    response["output"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|item| item["type"] == "message")
        .flat_map(|item| item["content"].as_array().cloned().unwrap_or_default())
        .filter_map(|part| part["text"].as_str().map(str::to_owned))
        .collect()
}

#[tokio::test]
async fn a_responses_provider_gets_the_body_with_only_the_model_rewritten() {
    let (primary, secondary) = primary_and_secondary([]).await;
    let gateway = chain(&primary, "openai", &secondary, "").await;
    let body = json!({"model": "r", "input": [{"role": "user", "content": "Hi"}],
                      "include": ["reasoning.encrypted_content"], "store": true, "metadata": {"k": "v"}});
    let response = create(&gateway, &body).await;
    assert_eq!(response.status(), 200);
    assert_eq!(header(&response, "x-switchyard-step"), "0");
    assert_eq!(header(&response, "x-switchyard-provider"), "primary");
    let answer: Value = response.json().await.unwrap();
    assert_eq!(answer["id"], "resp_primary_0");
    assert_eq!(output_text(&answer), "Hello from primary!");
    let sent = &primary.requests()[0];
    assert_eq!(sent.path, "/v1/responses");
    let mut expected = body.clone();
    expected["model"] = json!("model-a");
    assert_eq!(sent.json(), expected);
}

#[tokio::test]
async fn only_openais_own_base_url_speaks_the_responses_api_by_default() {
    let config = |kind: &str, url: &str, extra: &str| {
        TestGateway::new()
            .with("[[providers]]\nname = \"p\"\n")
            .set("kind", kind)
            .set("base_url", url)
            .with("key_required = false\n")
            .with(extra)
    };
    let parsed = config("openai", "https://api.openai.com/v1", "").config();
    assert!(parsed.providers[0].responses);
    let parsed = config("openai", "https://api.groq.com/openai/v1", "").config();
    assert!(!parsed.providers[0].responses);
    let parsed = config("openai", "http://127.0.0.1:1/v1", "responses = true\n").config();
    assert!(parsed.providers[0].responses);
    let refused = switchyard::config::Config::parse(
        &config(
            "anthropic",
            "https://api.anthropic.com",
            "responses = true\n",
        )
        .raw_text(),
    )
    .unwrap_err()
    .to_string();
    assert!(refused.contains("providers[0].responses"), "{refused}");
}

#[tokio::test]
async fn a_chat_only_step_gets_chat_and_answers_a_response_object() {
    let fake = scripted("compat", []).await;
    let gateway = compat(&fake).start().await;
    let body = json!({"model": "r", "instructions": "Be brief.", "input": "Hello there",
                      "max_output_tokens": 64, "temperature": 0.3, "reasoning": {"effort": "low"}});
    let response = create(&gateway, &body).await;
    assert_eq!(response.status(), 200);
    let answer: Value = response.json().await.unwrap();
    assert_eq!(answer["object"], "response");
    assert_eq!(answer["status"], "completed");
    assert_eq!(answer["instructions"], "Be brief.");
    assert!(answer["id"].as_str().unwrap().starts_with("resp_"));
    assert_eq!(output_text(&answer), "Hello from compat!");
    assert!(answer["usage"]["input_tokens"].as_u64().unwrap() > 0);
    assert_eq!(answer["usage"]["output_tokens"], 3);
    assert_eq!(answer["usage"]["input_tokens_details"]["cached_tokens"], 0);
    let sent = &fake.requests()[0];
    assert_eq!(sent.path, "/v1/chat/completions");
    assert_eq!(
        sent.json(),
        json!({"model": "m", "messages": [{"role": "system", "content": "Be brief."},
                                          {"role": "user", "content": "Hello there"}],
               "max_completion_tokens": 64, "temperature": 0.3, "reasoning_effort": "low"})
    );
}

#[tokio::test]
async fn a_failing_responses_step_falls_back_to_an_anthropic_step() {
    for stream in [false, true] {
        let (primary, secondary) = primary_and_secondary([Behavior::status(500)]).await;
        let gateway = chain(&primary, "anthropic", &secondary, "").await;
        let mut body = request("r");
        body["stream"] = json!(stream);
        let response = create(&gateway, &body).await;
        assert_eq!(response.status(), 200);
        assert_eq!(header(&response, "x-switchyard-outcome"), "fallback");
        assert_eq!(header(&response, "x-switchyard-provider"), "secondary");
        let id = header(&response, "x-switchyard-request-id").to_owned();
        let answer = if stream {
            let events = sse_events(&response.text().await.unwrap());
            assert_eq!(events.last().unwrap().0, "response.completed");
            events.last().unwrap().1["response"].clone()
        } else {
            response.json().await.unwrap()
        };
        assert_eq!(output_text(&answer), "Hello from secondary!");
        let sent = secondary.requests()[0].json();
        assert_eq!(sent["system"], "Be brief.");
        assert_eq!(sent["messages"][0]["content"][0]["text"], "Hello there");
        let row = record(&gateway, &id).await;
        assert_eq!(row.outcome.as_str(), "fallback");
        assert_eq!(row.step, Some(1));
        assert!(row.tokens_out.is_some(), "usage is logged");
    }
}

#[tokio::test]
async fn a_function_tool_round_trip_translates_both_ways() {
    let fake = scripted(
        "compat",
        [Behavior::ok().tool_call("weather", json!({"city": "Oslo"}))],
    )
    .await;
    let gateway = compat(&fake).start().await;
    let tools = json!([{"type": "function", "name": "weather", "description": "Weather in a city",
                        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}]);
    let body = json!({"model": "r", "input": "Weather in Oslo?", "tools": tools, "tool_choice": "required"});
    let answer: Value = create(&gateway, &body).await.json().await.unwrap();
    let call = answer["output"]
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["type"] == "function_call")
        .unwrap()
        .clone();
    assert_eq!(call["name"], "weather");
    assert_eq!(call["call_id"], "call_fake_0");
    assert_eq!(
        serde_json::from_str::<Value>(call["arguments"].as_str().unwrap()).unwrap(),
        json!({"city": "Oslo"})
    );
    let sent = fake.requests()[0].json();
    assert_eq!(sent["tools"][0]["function"]["name"], "weather");
    assert_eq!(sent["tool_choice"], "required");

    let next = json!({"model": "r", "tools": tools, "input": [
        {"role": "user", "content": "Weather in Oslo?"},
        call,
        {"type": "function_call_output", "call_id": "call_fake_0", "output": "sunny"},
    ]});
    assert_eq!(create(&gateway, &next).await.status(), 200);
    let sent = fake.requests()[1].json();
    assert_eq!(sent["messages"][1]["tool_calls"][0]["id"], "call_fake_0");
    assert_eq!(
        sent["messages"][2],
        json!({"role": "tool", "tool_call_id": "call_fake_0", "content": "sunny"})
    );
}

#[tokio::test]
async fn a_json_schema_text_format_is_sent_as_response_format() {
    let fake = scripted("compat", [Behavior::ok().content("{\"city\":\"Oslo\"}")]).await;
    let gateway = compat(&fake).start().await;
    let schema = json!({"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"], "additionalProperties": false});
    let body = json!({"model": "r", "input": "City?", "text": {"format": {"type": "json_schema", "name": "city", "schema": schema, "strict": true}}});
    let answer: Value = create(&gateway, &body).await.json().await.unwrap();
    assert_eq!(output_text(&answer), "{\"city\":\"Oslo\"}");
    assert_eq!(answer["text"]["format"]["name"], "city");
    assert_eq!(
        fake.requests()[0].json()["response_format"],
        json!({"type": "json_schema", "json_schema": {"name": "city", "schema": schema, "strict": true}})
    );
}

#[tokio::test]
async fn fields_that_cannot_be_carried_are_a_400_naming_them() {
    let fake = scripted("compat", []).await;
    let gateway = compat(&fake).start().await;
    for (body, param) in [
        (
            json!({"model": "r", "input": "x", "frobnicate": true}),
            "frobnicate",
        ),
        (
            json!({"model": "r", "input": "x", "include": ["file_search_call.results"]}),
            "include",
        ),
        (
            json!({"model": "r", "input": "x", "tools": [{"type": "web_search"}]}),
            "tools[0].type",
        ),
        (
            json!({"model": "r", "input": "x", "text": {"verbosity": "low"}}),
            "text.verbosity",
        ),
    ] {
        let response = create(&gateway, &body).await;
        assert_eq!(response.status(), 400, "{body}");
        let id = header(&response, "x-switchyard-request-id").to_owned();
        let error: Value = response.json().await.unwrap();
        error_message(&error);
        assert_eq!(error["error"]["param"], param);
        assert_eq!(error["error"]["type"], "invalid_request_error");
        assert_eq!(record(&gateway, &id).await.status, 400);
    }
    assert_eq!(fake.calls(), 0, "nothing reached the provider");
}

#[tokio::test]
async fn reasoning_effort_is_refused_for_an_anthropic_step() {
    let fake = scripted("claude", []).await;
    let gateway = TestGateway::new()
        .provider_of("anthropic", "claude", &fake)
        .route("r", &[("claude", "m")], "")
        .start()
        .await;
    let body = json!({"model": "r", "input": "x", "reasoning": {"effort": "high"}});
    let response = create(&gateway, &body).await;
    assert_eq!(response.status(), 400);
    let error: Value = response.json().await.unwrap();
    assert_eq!(error["error"]["param"], "reasoning.effort");
}
