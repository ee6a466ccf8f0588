//! The smaller endpoints clients call: token counting, models in Anthropic's shape, legacy
//! completions, and the upstream's own request id.

use serde_json::{Value, json};
use switchyard::fake::{Behavior, FakeHandle, FakeUpstream};

use super::support::*;

async fn fake(name: &str, behavior: Behavior) -> FakeHandle {
    scripted(name, [behavior]).await
}

async fn get_with(
    gateway: &switchyard::server::Gateway,
    path: &str,
    headers: &[(&str, &str)],
) -> reqwest::Response {
    let mut request = client().get(format!("{}{path}", gateway.url()));
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    request.send().await.expect("gateway answers")
}

async fn post_headers(
    gateway: &switchyard::server::Gateway,
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

/// Route `r` to model `claude-x` of `claude`, an Anthropic provider.
fn to_claude(claude: &FakeHandle) -> TestGateway {
    TestGateway::new()
        .provider_of("anthropic", "claude", claude)
        .route("r", &[("claude", "claude-x")], "")
}

/// Route `route` to `model` of `up`, an OpenAI provider.
fn to_up(up: &FakeHandle, route: &str, model: &str) -> TestGateway {
    TestGateway::new()
        .provider("up", up)
        .route(route, &[("up", model)], "")
}

fn count_request(model: &str) -> Value {
    json!({"model": model, "messages": [{"role": "user", "content": "Hello, Claude"}]})
}

#[tokio::test]
async fn count_tokens_is_passed_to_the_anthropic_step_with_its_betas() {
    let claude = fake("claude", Behavior::ok()).await;
    let gateway = to_claude(&claude).start().await;
    let beta = "token-counting-2024-11-01";
    let response = post_headers(
        &gateway,
        "/v1/messages/count_tokens",
        &count_request("r"),
        &[("anthropic-beta", beta)],
    )
    .await;
    assert_eq!(response.status(), 200);
    assert_eq!(header(&response, "x-switchyard-provider"), "claude");
    let body: Value = response.json().await.unwrap();
    assert!(body["input_tokens"].as_u64().is_some(), "{body}");
    let sent = claude.requests().pop().unwrap();
    assert_eq!(sent.path, "/v1/messages/count_tokens");
    assert_eq!(
        sent.headers.get("anthropic-beta").map(String::as_str),
        Some(beta)
    );
    let sent = sent.json();
    assert_eq!(sent["model"], "claude-x");
    assert!(sent.get("max_tokens").is_none(), "{sent}");
}

#[tokio::test]
async fn count_tokens_on_a_route_whose_first_step_is_not_anthropic_is_a_400() {
    let up = fake("up", Behavior::ok()).await;
    let gateway = to_up(&up, "r", "gpt-x").start().await;
    let response = post_to(&gateway, "/v1/messages/count_tokens", &count_request("r")).await;
    assert_eq!(response.status(), 400);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["type"], "error", "{body}");
    assert_eq!(body["error"]["type"], "invalid_request_error");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(message.contains("Anthropic"), "{message}");
    assert_eq!(up.calls(), 0);
}

#[tokio::test]
async fn models_answer_in_anthropics_shape_to_anthropic_clients() {
    let up = fake("up", Behavior::ok()).await;
    let gateway = to_up(&up, "smart", "gpt-x").start().await;
    let version = [("anthropic-version", "2023-06-01")];
    let list: Value = get_with(&gateway, "/v1/models", &version)
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(list["has_more"], false);
    assert_eq!(list["first_id"], "smart");
    assert_eq!(list["last_id"], "up/gpt-x");
    let first = &list["data"][0];
    assert_eq!(first["type"], "model");
    assert_eq!(first["id"], "smart");
    assert_eq!(first["display_name"], "smart");
    assert_eq!(first["created_at"], "1970-01-01T00:00:00Z");
    let page: Value = get_with(&gateway, "/v1/models?limit=1", &version)
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(page["has_more"], true);
    let bad = get_with(&gateway, "/v1/models?limit=many", &version).await;
    assert_eq!(bad.status(), 400);
    let body: Value = bad.json().await.unwrap();
    assert_eq!(body["error"]["type"], "invalid_request_error", "{body}");
    let one: Value = get_with(&gateway, "/v1/models/smart", &version)
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(one["type"], "model");
    assert_eq!(one["id"], "smart");
    let missing = get_with(&gateway, "/v1/models/nope", &version).await;
    assert_eq!(missing.status(), 404);
    let body: Value = missing.json().await.unwrap();
    assert_eq!(body["type"], "error");
    assert_eq!(body["error"]["type"], "not_found_error");
    // Without the header, OpenAI's shape as before.
    let openai: Value = get_with(&gateway, "/v1/models/smart", &[])
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(openai["object"], "model");
}

fn completion_request(model: &str, stream: bool) -> Value {
    json!({"model": model, "prompt": "Say this is a test", "max_tokens": 7, "stream": stream})
}

#[tokio::test]
async fn legacy_completions_pass_through_to_openai_steps_with_fallback() {
    let down = FakeUpstream::new("down")
        .then(Behavior::status(500))
        .cycle()
        .start()
        .await
        .unwrap();
    let up = scripted("up", []).await;
    let gateway = TestGateway::new()
        .provider("down", &down)
        .provider("up", &up)
        .route("r", &[("down", "m0"), ("up", "gpt-3.5-turbo-instruct")], "")
        .fast_retry()
        .start()
        .await;
    let response = post_to(&gateway, "/v1/completions", &completion_request("r", false)).await;
    assert_eq!(response.status(), 200);
    assert_eq!(header(&response, "x-switchyard-outcome"), "fallback");
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["object"], "text_completion");
    assert_eq!(body["choices"][0]["text"], "Hello from up!");
    let sent = up.requests().pop().unwrap();
    assert!(sent.path.ends_with("/v1/completions"), "{}", sent.path);
    let sent = sent.json();
    assert_eq!(sent["model"], "gpt-3.5-turbo-instruct");
    assert_eq!(sent["prompt"], "Say this is a test");
    assert_eq!(sent["max_tokens"], 7);

    let response = post_to(&gateway, "/v1/completions", &completion_request("r", true)).await;
    assert_eq!(response.status(), 200);
    let text = response.text().await.unwrap();
    let events = sse_data(&text);
    assert_eq!(events.last().map(String::as_str), Some("[DONE]"));
    let streamed: String = events
        .iter()
        .filter_map(|e| serde_json::from_str::<Value>(e).ok())
        .filter_map(|v| v["choices"][0]["text"].as_str().map(str::to_owned))
        .collect();
    assert_eq!(streamed, "Hello from up!");
}

#[tokio::test]
async fn legacy_completions_are_refused_for_other_kinds() {
    let claude = fake("claude", Behavior::ok()).await;
    let gateway = to_claude(&claude).start().await;
    let response = post_to(&gateway, "/v1/completions", &completion_request("r", false)).await;
    assert_eq!(response.status(), 400);
    let message = error_message(&response.json().await.unwrap());
    assert!(message.contains("/v1/completions"), "{message}");
    assert!(message.contains("OpenAI-family"), "{message}");
    assert_eq!(claude.calls(), 0);
    let missing = post_to(&gateway, "/v1/completions", &json!({"model": "r"})).await;
    assert_eq!(missing.status(), 400);
}

#[tokio::test]
async fn the_upstreams_request_id_comes_back_on_answers_and_errors() {
    let up = scripted(
        "up",
        [
            Behavior::ok().header("x-request-id", "req_openai_1"),
            Behavior::ok().header("x-request-id", "req_openai_2"),
            Behavior::status(400).header("x-request-id", "req_openai_3"),
        ],
    )
    .await;
    let claude = scripted(
        "claude",
        [Behavior::ok().header("request-id", "req_011CSHoEeqs5C35K2UUqR7Fy")],
    )
    .await;
    let gateway = to_up(&up, "r", "m")
        .provider_of("anthropic", "claude", &claude)
        .route("c", &[("claude", "claude-x")], "")
        .start()
        .await;
    let upstream_id = "x-switchyard-upstream-request-id";
    let json = post(&gateway, &chat("r")).await;
    assert_eq!(header(&json, upstream_id), "req_openai_1");
    assert_ne!(header(&json, "x-request-id"), "req_openai_1");
    let stream = post(&gateway, &chat_stream("r")).await;
    assert_eq!(header(&stream, upstream_id), "req_openai_2");
    let error = post(&gateway, &chat("r")).await;
    assert_eq!(error.status(), 400);
    assert_eq!(header(&error, upstream_id), "req_openai_3");
    let translated = post(&gateway, &chat("c")).await;
    assert_eq!(
        header(&translated, upstream_id),
        "req_011CSHoEeqs5C35K2UUqR7Fy"
    );
}

/// RFC 9110: a 405 names in `Allow` the methods its path serves; every path's 405 does, the
/// client API's POST paths (served before the router) included.
#[tokio::test]
async fn every_405_names_the_methods_its_path_serves() {
    let up = fake("up", Behavior::ok()).await;
    let gateway = to_up(&up, "r", "m").start().await;
    let post = &["POST"][..];
    let get = &["GET", "HEAD"][..];
    for (method, path, allowed) in [
        ("GET", "/v1/chat/completions", post),
        ("GET", "/v1/messages", post),
        ("GET", "/v1/messages/count_tokens", post),
        ("GET", "/v1/completions", post),
        ("GET", "/v1/embeddings", post),
        ("GET", "/v1/responses", post),
        (
            "PUT",
            "/v1/responses/resp_1",
            &["DELETE", "GET", "HEAD"][..],
        ),
        ("POST", "/v1/models", get),
        ("POST", "/v1/models/m", get),
        ("POST", "/healthz", get),
        ("POST", "/readyz", get),
        ("POST", "/metrics", get),
        ("POST", "/v1/scorecard", get),
        ("POST", "/dashboard", get),
        ("GET", "/admin/reload", post),
        ("POST", "/admin/breakers", get),
        ("GET", "/admin/breakers/reset", post),
        ("POST", "/admin/cache", &["DELETE", "GET", "HEAD"][..]),
        ("POST", "/admin/keys", get),
        ("GET", "/admin/keys/p", &["PUT"][..]),
        ("GET", "/admin/keys/p/rollback", post),
        ("GET", "/admin/keys/p/k1", &["DELETE"][..]),
        ("PUT", "/admin/virtual-keys", &["GET", "HEAD", "POST"][..]),
        (
            "PUT",
            "/admin/virtual-keys/v1",
            &["DELETE", "GET", "HEAD", "PATCH"][..],
        ),
    ] {
        let method = reqwest::Method::from_bytes(method.as_bytes()).unwrap();
        let response = client()
            .request(method.clone(), format!("{}{path}", gateway.url()))
            .send()
            .await
            .expect("gateway answers");
        assert_eq!(response.status(), 405, "{method} {path}");
        let mut named: Vec<&str> = header(&response, "allow")
            .split(',')
            .map(str::trim)
            .filter(|m| !m.is_empty())
            .collect();
        named.sort_unstable();
        assert_eq!(named, allowed, "{method} {path}");
    }
}

/// The client API's POSTs are served before the router; any other method on their paths
/// still gets the router's 405, never a routed request.
#[tokio::test]
async fn other_methods_on_the_client_apis_paths_are_a_405() {
    let up = fake("up", Behavior::ok()).await;
    let gateway = to_up(&up, "r", "m").start().await;
    for path in [
        "/v1/chat/completions",
        "/v1/messages",
        "/v1/messages/count_tokens",
        "/v1/completions",
        "/v1/embeddings",
        "/v1/responses",
    ] {
        for method in [
            reqwest::Method::GET,
            reqwest::Method::PUT,
            reqwest::Method::DELETE,
        ] {
            let response = client()
                .request(method.clone(), format!("{}{path}", gateway.url()))
                .json(&json!({"model": "r", "messages": [{"role": "user", "content": "hi"}]}))
                .send()
                .await
                .expect("gateway answers");
            assert_eq!(response.status(), 405, "{method} {path}");
            let body: Value = response.json().await.unwrap();
            assert_eq!(
                body["error"]["code"], "method_not_allowed",
                "{method} {path}: {body}"
            );
        }
    }
    assert!(
        up.requests().is_empty(),
        "no method but POST reaches a step"
    );
    let response = post_to(
        &gateway,
        "/v1/chat/completions",
        &json!({"model": "r", "messages": [{"role": "user", "content": "hi"}]}),
    )
    .await;
    assert_eq!(response.status(), 200);
}
