//! Chains across vendors: OpenAI clients served by Anthropic, Gemini and Azure steps, and a
//! failing Anthropic primary handing over to an OpenAI secondary.

use serde_json::{Value, json};
use switchyard::fake::{Behavior, FakeHandle};
use switchyard::router::FailureClass;

use super::support::*;

/// Route `r` = primary (of `kind`) → secondary (openai).
async fn chain(
    kind: &str,
    primary: &FakeHandle,
    secondary: &FakeHandle,
) -> switchyard::server::Gateway {
    TestGateway::new()
        .provider_of(kind, "primary", primary)
        .provider("secondary", secondary)
        .route("r", &[("primary", "model-a"), ("secondary", "model-b")], "")
        .fast_retry()
        .start()
        .await
}

async fn fakes(primary: Behavior) -> (FakeHandle, FakeHandle) {
    let primary = scripted("primary", [primary]).await;
    let secondary = scripted("secondary", []).await;
    (primary, secondary)
}

#[tokio::test]
async fn an_anthropic_529_falls_back_to_an_openai_step_as_json() {
    let (primary, secondary) = fakes(Behavior::status(529)).await;
    let gateway = chain("anthropic", &primary, &secondary).await;
    let response = post(&gateway, &chat("r")).await;
    assert_eq!(response.status(), 200);
    assert_eq!(header(&response, "x-switchyard-step"), "1");
    assert_eq!(header(&response, "x-switchyard-outcome"), "fallback");
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["object"], "chat.completion");
    assert_eq!(content(&body), "Hello from secondary!");
    // The primary got Anthropic's shape, with max_tokens filled in from the default.
    let sent = &primary.requests()[0];
    assert_eq!(sent.path, "/v1/messages");
    assert_eq!(sent.headers["anthropic-version"], "2023-06-01");
    assert_eq!(sent.json()["max_tokens"], 4096);
    assert_eq!(sent.json()["model"], "model-a");
    assert_eq!(
        sent.json()["messages"],
        json!([{"role": "user", "content": [{"type": "text", "text": "Hello there"}]}])
    );
}

#[tokio::test]
async fn an_anthropic_529_falls_back_to_an_openai_step_as_a_stream() {
    let (primary, secondary) = fakes(Behavior::status(529)).await;
    let gateway = chain("anthropic", &primary, &secondary).await;
    let response = post(&gateway, &chat_stream("r")).await;
    assert_eq!(response.status(), 200);
    assert_eq!(header(&response, "x-switchyard-step"), "1");
    let events = sse_data(&response.text().await.unwrap());
    assert_eq!(streamed_text(&events), "Hello from secondary!");
    assert_eq!(events.last().map(String::as_str), Some("[DONE]"));
}

#[tokio::test]
async fn an_overloaded_error_event_before_content_falls_back_too() {
    let (primary, secondary) = fakes(Behavior::ok().error_after(0)).await;
    let gateway = chain("anthropic", &primary, &secondary).await;
    let response = post(&gateway, &chat_stream("r")).await;
    assert_eq!(header(&response, "x-switchyard-step"), "1");
    let id = header(&response, "x-switchyard-request-id").to_owned();
    let events = sse_data(&response.text().await.unwrap());
    assert_eq!(streamed_text(&events), "Hello from secondary!");
    let row = record(&gateway, &id).await;
    assert_eq!(row.attempts[0].failure, Some(FailureClass::Overloaded));
}

#[tokio::test]
async fn an_anthropic_step_serves_an_openai_client_with_tool_calls() {
    let behavior = Behavior::ok()
        .content("Let me look.")
        .tool_call("get_weather", json!({"location": "Paris"}));
    let (primary, secondary) = fakes(behavior.clone()).await;
    let gateway = chain("anthropic", &primary, &secondary).await;
    let response = post(&gateway, &chat("r")).await;
    assert_eq!(header(&response, "x-switchyard-step"), "0");
    let id = header(&response, "x-switchyard-request-id").to_owned();
    let body: Value = response.json().await.unwrap();
    let choice = &body["choices"][0];
    assert_eq!(choice["finish_reason"], "tool_calls");
    assert_eq!(choice["message"]["content"], "Let me look.");
    assert_eq!(
        choice["message"]["tool_calls"][0]["function"]["name"],
        "get_weather"
    );
    assert_eq!(
        choice["message"]["tool_calls"][0]["function"]["arguments"],
        "{\"location\":\"Paris\"}"
    );
    assert!(body["usage"]["completion_tokens"].as_u64().unwrap() > 0);
    let row = record(&gateway, &id).await;
    assert!(row.tokens_out.unwrap() > 0);

    // The same answer streamed: text, then the call's arguments, then the finish.
    let response = post(&gateway, &chat_stream("r")).await;
    let events = sse_data(&response.text().await.unwrap());
    assert_eq!(streamed_text(&events), "Let me look.");
    let chunks: Vec<Value> = events
        .iter()
        .filter_map(|e| serde_json::from_str(e).ok())
        .collect();
    let calls: Vec<&Value> = chunks
        .iter()
        .filter_map(|c| c["choices"][0]["delta"].get("tool_calls"))
        .collect();
    assert_eq!(calls[0][0]["function"]["name"], "get_weather");
    let arguments: String = calls
        .iter()
        .filter_map(|c| c[0]["function"]["arguments"].as_str())
        .collect();
    assert_eq!(arguments, "{\"location\":\"Paris\"}");
    assert!(
        chunks
            .iter()
            .any(|c| c["choices"][0]["finish_reason"] == "tool_calls")
    );
    assert_eq!(events.last().map(String::as_str), Some("[DONE]"));
    assert_eq!(secondary.calls(), 0);
}

#[tokio::test]
async fn an_anthropic_error_mid_stream_ends_in_an_openai_error_event() {
    let behavior = Behavior::ok()
        .content("a b c d")
        .chunks(4, 0)
        .error_after(2);
    let (primary, secondary) = fakes(behavior).await;
    let gateway = chain("anthropic", &primary, &secondary).await;
    let response = post(&gateway, &chat_stream("r")).await;
    assert_eq!(header(&response, "x-switchyard-step"), "0");
    let id = header(&response, "x-switchyard-request-id").to_owned();
    let events = sse_data(&response.text().await.unwrap());
    assert_eq!(streamed_text(&events), "a b");
    let last: Value = serde_json::from_str(events.last().unwrap()).unwrap();
    assert_eq!(last["error"]["message"], "Overloaded");
    assert_eq!(secondary.calls(), 0, "never splice another model in");
    let row = record(&gateway, &id).await;
    assert!(row.partial);
}

#[tokio::test]
async fn an_anthropic_client_error_comes_back_in_openais_shape() {
    let (primary, secondary) = fakes(Behavior::status(400)).await;
    let gateway = chain("anthropic", &primary, &secondary).await;
    let response = post(&gateway, &chat("r")).await;
    assert_eq!(response.status(), 400);
    let body: Value = response.json().await.unwrap();
    assert_eq!(error_message(&body), "fake upstream answered 400");
    assert_eq!(body["error"]["code"], "invalid_request_error");
    assert_eq!(secondary.calls(), 0);
}

#[tokio::test]
async fn an_untranslatable_field_is_a_400_naming_it() {
    let (primary, secondary) = fakes(Behavior::ok()).await;
    let gateway = chain("anthropic", &primary, &secondary).await;
    let mut body = chat("r");
    body["n"] = json!(2);
    let response = post(&gateway, &body).await;
    assert_eq!(response.status(), 400);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["error"]["param"], "n");
    assert_eq!(body["error"]["code"], "untranslatable_field");
    assert_eq!((primary.calls(), secondary.calls()), (0, 0));
}

#[tokio::test]
async fn anthropic_keys_go_in_x_api_key() {
    let primary = scripted("primary", []).await;
    let gateway = keyed_vendor(
        &primary,
        ["anthropic", "claude"],
        "anthropic_version = \"2023-06-01\"\ndefault_max_tokens = 64\n",
        "claude-x",
        "sk-ant-test",
    )
    .await;
    let response = post(&gateway, &chat("r")).await;
    assert_eq!(response.status(), 200);
    let sent = &primary.requests()[0];
    assert_eq!(sent.headers["x-api-key"], "sk-ant-test");
    assert!(!sent.headers.contains_key("authorization"));
    assert_eq!(sent.json()["max_tokens"], 64);
}

#[tokio::test]
async fn a_gemini_step_serves_json_streams_and_tool_calls() {
    let (primary, secondary) = fakes(Behavior::ok().content("one two three")).await;
    let gateway = chain("gemini", &primary, &secondary).await;
    gateway
        .put_provider_key("primary", "k", "gemini-key")
        .await
        .unwrap();
    let response = post(&gateway, &chat("r")).await;
    assert_eq!(header(&response, "x-switchyard-step"), "0");
    let body: Value = response.json().await.unwrap();
    assert_eq!(content(&body), "one two three");
    assert_eq!(body["choices"][0]["finish_reason"], "stop");
    let sent = &primary.requests()[0];
    assert_eq!(sent.path, "/v1beta/models/model-a:generateContent");
    assert_eq!(
        sent.json()["contents"],
        json!([{"role": "user", "parts": [{"text": "Hello there"}]}])
    );

    let mut streamed = chat_stream("r");
    streamed["stream_options"] = json!({"include_usage": true});
    let response = post(&gateway, &streamed).await;
    assert_eq!(header(&response, "x-switchyard-step"), "0");
    let events = sse_data(&response.text().await.unwrap());
    assert_eq!(streamed_text(&events), "one two three");
    let usage: Value = serde_json::from_str(&events[events.len() - 2]).unwrap();
    assert_eq!(usage["usage"]["completion_tokens"], 3);
    assert_eq!(events.last().map(String::as_str), Some("[DONE]"));
    assert_eq!(
        primary.requests()[1].path,
        "/v1beta/models/model-a:streamGenerateContent?alt=sse"
    );

    primary.set_script(switchyard::fake::Script {
        behaviors: vec![Behavior::ok().tool_call("lookup", json!({"q": "x"}))],
        ..Default::default()
    });
    let body: Value = post(&gateway, &chat("r")).await.json().await.unwrap();
    assert_eq!(body["choices"][0]["finish_reason"], "tool_calls");
    assert_eq!(
        body["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"],
        "{\"q\":\"x\"}"
    );
}

#[tokio::test]
async fn gemini_failures_are_classified_like_any_provider() {
    for (status, primary_calls) in [(503, 1), (500, 1), (404, 1)] {
        let (primary, secondary) = fakes(Behavior::status(status)).await;
        let gateway = chain("gemini", &primary, &secondary).await;
        let response = post(&gateway, &chat("r")).await;
        assert_eq!(header(&response, "x-switchyard-step"), "1", "{status}");
        assert_eq!(
            (primary.calls(), secondary.calls()),
            (primary_calls, 1),
            "{status}"
        );
    }
    let primary = scripted(
        "primary",
        [
            Behavior::status(429).header("retry-after", "0"),
            Behavior::ok(),
        ],
    )
    .await;
    let secondary = scripted("secondary", []).await;
    let gateway = chain("gemini", &primary, &secondary).await;
    let response = post(&gateway, &chat("r")).await;
    assert_eq!(header(&response, "x-switchyard-step"), "0");
    assert_eq!(primary.calls(), 2);
    // A Gemini 400 is the client's fault: returned, in OpenAI's shape.
    let (primary, secondary) = fakes(Behavior::status(400)).await;
    let gateway = chain("gemini", &primary, &secondary).await;
    let response = post(&gateway, &chat("r")).await;
    assert_eq!(response.status(), 400);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["error"]["code"], "INVALID_ARGUMENT");
}

#[tokio::test]
async fn azure_gets_deployment_urls_and_the_api_key_header() {
    let primary = scripted("azure", []).await;
    let gateway = keyed_vendor(
        &primary,
        ["azure", "az"],
        "api_version = \"2024-10-21\"\n",
        "gpt-4o-prod",
        "azure-key",
    )
    .await;
    let response = post(&gateway, &chat("r")).await;
    assert_eq!(response.status(), 200);
    let body: Value = response.json().await.unwrap();
    assert_eq!(content(&body), "Hello from azure!");
    let sent = &primary.requests()[0];
    assert_eq!(
        sent.path,
        "/openai/deployments/gpt-4o-prod/chat/completions?api-version=2024-10-21"
    );
    assert_eq!(sent.headers["api-key"], "azure-key");
    let events = sse_data(
        &post(&gateway, &chat_stream("r"))
            .await
            .text()
            .await
            .unwrap(),
    );
    assert_eq!(streamed_text(&events), "Hello from azure!");
}

/// Route `r` = `model` on the one provider `[kind, name]` at `fake` (its `extra` lines
/// added), whose key `key` is put in the store.
async fn keyed_vendor(
    fake: &FakeHandle,
    [kind, name]: [&str; 2],
    extra: &str,
    model: &str,
    key: &str,
) -> switchyard::server::Gateway {
    let gateway = TestGateway::new()
        .with("[[providers]]\n")
        .set("name", name)
        .set("kind", kind)
        .set("base_url", fake.root_url())
        .with(extra)
        .route("r", &[(name, model)], "")
        .start()
        .await;
    gateway.put_provider_key(name, "k", key).await.unwrap();
    gateway
}
