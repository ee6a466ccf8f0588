//! The foundation: passthrough of JSON and SSE, and the gateway's own error answers.

use serde_json::{Value, json};
use switchyard::fake::{Behavior, FakeHandle, FakeUpstream};

use super::support::*;

/// Route `smart` to model `gpt-x` of `fake`.
fn smart(fake: &FakeHandle) -> TestGateway {
    TestGateway::new()
        .provider("up", fake)
        .route("smart", &[("up", "gpt-x")], "")
}

#[tokio::test]
async fn json_passthrough_rewrites_only_the_model() {
    let fake = scripted("up", [Behavior::ok().content("forty-two")]).await;
    let gateway = smart(&fake).start().await;

    let mut body = chat("smart");
    body["temperature"] = json!(0.25);
    body["x_vendor_field"] = json!({"keep": ["me"]});
    let response = post(&gateway, &body).await;
    assert_eq!(response.status(), 200);
    assert_eq!(header(&response, "x-switchyard-step"), "0");
    assert_eq!(header(&response, "x-switchyard-outcome"), "success");
    let answer: Value = response.json().await.unwrap();
    assert_eq!(content(&answer), "forty-two");

    let sent = fake.requests()[0].json();
    assert_eq!(sent["model"], "gpt-x");
    assert_eq!(sent["temperature"], 0.25);
    assert_eq!(sent["x_vendor_field"], json!({"keep": ["me"]}));
    assert_eq!(sent["messages"], body["messages"]);
}

#[tokio::test]
async fn provider_slash_model_routes_directly() {
    let fake = scripted("up", []).await;
    // Any model of a configured provider, not only those in routes, once the operator says so.
    let gateway = TestGateway::new()
        .with("[auth]\nrequired = false\ndirect_models = true\n")
        .provider("up", &fake)
        .start()
        .await;
    let response = post(&gateway, &chat("up/org/model-7b")).await;
    assert_eq!(response.status(), 200);
    assert_eq!(fake.requests()[0].json()["model"], "org/model-7b");
}

#[tokio::test]
async fn sse_passthrough_forwards_each_event_and_the_end_marker() {
    let fake = scripted(
        "up",
        [Behavior::ok().content("one two three four").chunks(4, 0)],
    )
    .await;
    let gateway = smart(&fake).start().await;

    let response = post(&gateway, &chat_stream("smart")).await;
    assert_eq!(response.status(), 200);
    assert_eq!(header(&response, "content-type"), "text/event-stream");
    assert_eq!(header(&response, "x-switchyard-provider"), "up");
    let events = sse_data(&response.text().await.unwrap());
    assert_eq!(streamed_text(&events), "one two three four");
    assert_eq!(events.last().map(String::as_str), Some("[DONE]"));
    // The gateway asked for usage, and stripped the usage chunk the client did not ask for.
    assert!(
        events.iter().all(|e| !e.contains("\"usage\":{")),
        "{events:?}"
    );
    let sent = fake.requests()[0].json();
    assert_eq!(sent["model"], "gpt-x");
    assert_eq!(sent["stream_options"]["include_usage"], true);
}

/// Checks the gateway answered `status`, and returns the answer's JSON body.
async fn json_of(response: reqwest::Response, status: u16) -> Value {
    assert_eq!(response.status(), status);
    response.json().await.unwrap()
}

#[tokio::test]
async fn malformed_json_is_a_400_in_openai_shape() {
    let fake = scripted("up", []).await;
    let gateway = gateway(&provider("up", &fake)).await;
    let response = post_raw(&gateway, "{\"model\": \"up/m\", \"messages\": [").await;
    let body = json_of(response, 400).await;
    assert!(error_message(&body).contains("not valid JSON"), "{body}");
    assert_eq!(fake.calls(), 0);
}

#[tokio::test]
async fn missing_messages_is_a_400_naming_the_param() {
    let fake = scripted("up", []).await;
    let gateway = gateway(&provider("up", &fake)).await;
    let response = post(&gateway, &json!({"model": "up/m"})).await;
    let body = json_of(response, 400).await;
    assert_eq!(body["error"]["param"], "messages");
}

#[tokio::test]
async fn unknown_model_is_a_404_in_openai_shape() {
    let fake = scripted("up", []).await;
    let gateway = gateway(&provider("up", &fake)).await;
    for model in ["no-such-route", "nobody/model"] {
        let response = post(&gateway, &chat(model)).await;
        assert_eq!(response.status(), 404, "{model}");
        let body: Value = response.json().await.unwrap();
        assert!(error_message(&body).contains(model));
        assert_eq!(body["error"]["code"], "model_not_found");
    }
    assert_eq!(fake.calls(), 0);
}

#[tokio::test]
async fn a_body_over_the_limit_is_a_413_in_openai_shape() {
    let fake = scripted("up", []).await;
    let gateway = TestGateway::new()
        .with("[server]\nmax_body_bytes = 1024\n")
        .provider("up", &fake)
        .start()
        .await;
    let mut body = chat("up/m");
    body["messages"][0]["content"] = json!("x".repeat(4096));
    let response = post(&gateway, &body).await;
    let body = json_of(response, 413).await;
    assert!(error_message(&body).contains("1024"), "{body}");
    assert_eq!(fake.calls(), 0);
}

#[tokio::test]
async fn every_refused_request_still_gets_one_log_row() {
    let fake = scripted("up", []).await;
    let gateway = gateway(&provider("up", &fake)).await;
    let response = post(&gateway, &chat("missing")).await;
    let id = header(&response, "x-switchyard-request-id").to_owned();
    assert!(!id.is_empty());
    let row = record(&gateway, &id).await;
    assert_eq!(row.status, 404);
    assert_eq!(row.error.as_deref(), Some("model_not_found"));
}

/// GETs `path` on the gateway, with no credentials.
async fn get(gateway: &switchyard::server::Gateway, path: &str) -> reqwest::Response {
    client()
        .get(format!("{}{path}", gateway.url()))
        .send()
        .await
        .unwrap()
}

#[tokio::test]
async fn models_health_and_readiness_answer() {
    let fake = scripted("up", []).await;
    let gateway = smart(&fake).start().await;
    let models: Value = get(&gateway, "/v1/models").await.json().await.unwrap();
    let ids: Vec<&str> = models["data"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|m| m["id"].as_str())
        .collect();
    assert_eq!(ids, ["smart", "up/gpt-x"]);
    let health = get(&gateway, "/healthz").await;
    assert_eq!(health.status(), 200);
    let ready = get(&gateway, "/readyz").await;
    assert_eq!(ready.status(), 200);
    let missing = get(&gateway, "/v1/nothing").await;
    assert_eq!(missing.status(), 404);
    let body: Value = missing.json().await.unwrap();
    error_message(&body);
}

#[tokio::test]
async fn metrics_count_requests_by_route_and_outcome() {
    let fake = scripted("up", []).await;
    let gateway = smart(&fake).with(OBSERVABILITY).start().await;
    let response = post(&gateway, &chat("smart")).await;
    record_of(&gateway, &response).await;
    let text = observe(&gateway, "/metrics").await.text().await.unwrap();
    assert!(
        text.contains("switchyard_requests_total{route=\"smart\",outcome=\"success\"} 1"),
        "{text}"
    );
    assert!(
        text.contains(
            "switchyard_attempts_total{provider=\"up\",model=\"gpt-x\",result=\"success\"} 1"
        ),
        "{text}"
    );
}

/// Posts `body` as it is written, byte for byte.
async fn post_raw(gateway: &switchyard::server::Gateway, body: &'static str) -> reqwest::Response {
    post_raw_json(gateway, "/v1/chat/completions", body).await
}

#[tokio::test]
async fn passthrough_sends_the_clients_own_bytes_with_only_the_model_spliced_in() {
    let fake = FakeUpstream::new("up").cycle().start().await.unwrap();
    let gateway = smart(&fake).start().await;
    // Key order, spacing, escapes and number spellings as a client wrote them, and a nested
    // `model` that is not the request's.
    let body = "{\"temperature\": 1.50, \"model\" : \"smart\",\n \"messages\":[{\"role\":\"user\",\
                \"content\":\"caf\\u00e9 \\\"q\\\"\",\"model\":\"smart\"}], \"n\":1e0}";
    let response = post_raw(&gateway, body).await;
    assert_eq!(response.status(), 200);
    let expected = body.replacen("\"smart\"", "\"gpt-x\"", 1);
    assert_eq!(fake.requests()[0].body, expected);

    // A stream asks for the usage chunk, added in front; the rest is as it came.
    let body = "{\"model\":\"smart\", \"stream\":true, \"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}";
    let response = post_raw(&gateway, body).await;
    assert_eq!(response.status(), 200);
    response.text().await.unwrap();
    assert_eq!(
        fake.requests()[1].body,
        "{\"stream_options\":{\"include_usage\":true},\"model\":\"gpt-x\", \"stream\":true, \
         \"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}"
    );
}
