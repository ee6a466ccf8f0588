//! Vertex AI steps against a fake that speaks Vertex's paths and Google auth: the gateway
//! signs a service account's JWT (RS256), the fake's token endpoint verifies it with the
//! public key and issues short-lived tokens, and every Vertex request must carry one.
//! Gemini models go in Gemini's format, Claude models in Anthropic's; tokens refresh once
//! for a crowd; a step whose token cannot be had, or that fails, falls back.

use std::time::Duration;

use futures_util::future::join_all;
use serde_json::{Value, json};
use switchyard::fake::{Behavior, FakeHandle, FakeUpstream};
use switchyard::server::Gateway;

use super::process::TempDir;
use super::support::*;

const PATH: &str = "/v1/projects/switchyard-test/locations/us-east5/publishers";

/// The fixture's public key, as the fake verifies with it.
fn public_key() -> Vec<u8> {
    use base64::Engine;
    let text = include_str!("../fixtures/vertex-public-key.b64");
    base64::engine::general_purpose::STANDARD
        .decode(text.trim())
        .unwrap()
}

/// A fake Vertex whose tokens last `lifetime`, scripted with `script`.
pub(super) async fn vertex_fake(lifetime: Duration, script: Vec<Behavior>) -> FakeHandle {
    script
        .into_iter()
        .fold(FakeUpstream::new("vertex"), FakeUpstream::then)
        .google_auth(public_key(), lifetime)
        .start()
        .await
        .unwrap()
}

/// The fixture's service account key, its `token_uri` at `fake`, written to a file in `dir`.
pub(super) fn key_file(dir: &TempDir, fake: &FakeHandle) -> String {
    let mut key: Value =
        serde_json::from_str(include_str!("../fixtures/vertex-service-account.json")).unwrap();
    key["token_uri"] = json!(format!("{}/token", fake.root_url()));
    let path = dir.0.join("service-account.json");
    std::fs::write(&path, key.to_string()).unwrap();
    path.display().to_string()
}

/// A key file like [`key_file`]'s, signed by a key the fake's public key does not match.
fn wrong_key_file(dir: &TempDir, fake: &FakeHandle) -> String {
    let mut key: Value =
        serde_json::from_str(&std::fs::read_to_string(key_file(dir, fake)).unwrap()).unwrap();
    key["private_key"] = json!(include_str!("../fixtures/vertex-unknown-key.pem"));
    let path = dir.0.join("wrong.json");
    std::fs::write(&path, key.to_string()).unwrap();
    path.display().to_string()
}

/// Route `r`: Vertex's `gemini-2.5-flash` at `fake` (with the key file at `credentials`),
/// then `openai`.
async fn falling_back(fake: &FakeHandle, credentials: &str, openai: &FakeHandle) -> Gateway {
    vertex(fake, credentials)
        .provider("openai", openai)
        .route("r", &[("v", "gemini-2.5-flash"), ("openai", "gpt")], "")
        .start()
        .await
}

/// A Vertex provider `v` at `fake`, with the key file at `credentials`.
pub(super) fn vertex(fake: &FakeHandle, credentials: &str) -> TestGateway {
    TestGateway::new()
        .with("[[providers]]\nname = \"v\"\nkind = \"vertex\"\n")
        .set("base_url", fake.root_url())
        .set("project", "switchyard-test")
        .set("location", "us-east5")
        .set("credentials_file", credentials)
}

/// A fake Vertex whose tokens last `lifetime`, and a gateway with route `r` to its `model`;
/// the key file lives as long as the returned directory.
async fn one_route(lifetime: Duration, model: &str) -> (FakeHandle, Gateway, TempDir) {
    let fake = vertex_fake(lifetime, vec![]).await;
    let dir = TempDir::new();
    let gateway = vertex(&fake, &key_file(&dir, &fake))
        .route("r", &[("v", model)], "")
        .start()
        .await;
    (fake, gateway, dir)
}

#[tokio::test]
async fn a_gemini_model_is_asked_at_vertexs_path_with_a_token_from_a_signed_jwt() {
    let (fake, gateway, _dir) = one_route(Duration::from_secs(3600), "gemini-2.5-flash").await;
    let response = post(&gateway, &chat("r")).await;
    assert_eq!(response.status(), 200);
    let answer: Value = response.json().await.unwrap();
    assert_eq!(answer["object"], "chat.completion");
    assert!(answer["choices"][0]["message"]["content"].is_string());
    let streamed = post(&gateway, &chat_stream("r")).await;
    assert_eq!(streamed.status(), 200);
    assert!(streamed.text().await.unwrap().contains("data: [DONE]"));

    assert_eq!(fake.token_requests(), 1, "one token serves both");
    let requests = fake.requests();
    assert_eq!(
        requests[0].path,
        format!("{PATH}/google/models/gemini-2.5-flash:generateContent")
    );
    assert_eq!(
        requests[1].path,
        format!("{PATH}/google/models/gemini-2.5-flash:streamGenerateContent?alt=sse")
    );
    assert!(requests[0].headers["authorization"].starts_with("Bearer ya29.fake-token-1-"));
    assert!(requests[0].json()["contents"].is_array());
}

#[tokio::test]
async fn a_claude_model_goes_to_raw_predict_in_anthropics_format() {
    let (fake, gateway, _dir) =
        one_route(Duration::from_secs(3600), "claude-sonnet-4@20250514").await;
    let response = post(&gateway, &chat("r")).await;
    assert_eq!(response.status(), 200);
    let answer: Value = response.json().await.unwrap();
    assert_eq!(answer["object"], "chat.completion");
    assert_eq!(answer["model"], "claude-sonnet-4@20250514");
    let streamed = post(&gateway, &chat_stream("r"))
        .await
        .text()
        .await
        .unwrap();
    assert!(streamed.contains("chat.completion.chunk") && streamed.contains("[DONE]"));

    let requests = fake.requests();
    let model = "claude-sonnet-4@20250514";
    assert_eq!(
        requests[0].path,
        format!("{PATH}/anthropic/models/{model}:rawPredict")
    );
    assert_eq!(
        requests[1].path,
        format!("{PATH}/anthropic/models/{model}:streamRawPredict")
    );
    let body = requests[0].json();
    assert_eq!(body["anthropic_version"], "vertex-2023-10-16");
    assert!(body.get("model").is_none(), "the path names the model");
    assert!(body["max_tokens"].is_u64());
    assert!(!requests[0].headers.contains_key("anthropic-version"));
    assert!(!requests[0].headers.contains_key("x-api-key"));
}

#[tokio::test]
async fn a_hundred_requests_at_once_cost_one_token() {
    let (fake, gateway, _dir) = one_route(Duration::from_secs(3600), "gemini-2.5-flash").await;
    let body = chat("r");
    let answers = join_all((0..100).map(|_| post(&gateway, &body))).await;
    assert!(answers.iter().all(|a| a.status() == 200));
    assert_eq!(
        fake.token_requests(),
        1,
        "a crowd at start shares the first token"
    );
}

#[tokio::test]
async fn an_expired_token_is_refreshed_before_use_even_under_load() {
    // Tokens that last 20 s are due for refresh at once, by the client's 20 s margin.
    let (fake, gateway, _dir) = one_route(Duration::from_secs(20), "gemini-2.5-flash").await;
    let body = chat("r");
    for expected in 1..=2 {
        assert_eq!(post(&gateway, &body).await.status(), 200);
        assert_eq!(fake.token_requests(), expected);
    }
    let tokens: std::collections::BTreeSet<String> = fake
        .requests()
        .iter()
        .map(|r| r.headers["authorization"].clone())
        .collect();
    assert_eq!(tokens.len(), 2, "each request used a fresh token");
    // A crowd that finds the token expired shares its refresh: every request is served with
    // a token the fake still takes.
    let answers = join_all((0..100).map(|_| post(&gateway, &body))).await;
    assert!(answers.iter().all(|a| a.status() == 200));
    let refreshes = fake.token_requests() - 2;
    // One here; gcp_auth on its own makes one for each caller that found the token expired.
    assert!((1..=10).contains(&refreshes), "{refreshes} refreshes");
}

#[tokio::test]
async fn a_key_the_token_endpoint_refuses_or_a_failing_vertex_falls_back() {
    let script = vec![Behavior::status(503), Behavior::ok()];
    let fake = vertex_fake(Duration::from_secs(3600), script).await;
    let openai = scripted("openai", []).await;
    let dir = TempDir::new();
    // First a key whose signature the fake's public key does not verify.
    let gateway = falling_back(&fake, &wrong_key_file(&dir, &fake), &openai).await;
    let response = post(&gateway, &chat("r")).await;
    assert_eq!(response.status(), 200);
    assert_eq!(header(&response, "x-switchyard-step"), "1");
    assert!(fake.token_requests() >= 1);
    assert_eq!(fake.calls(), 0, "no token, no request");

    // Then the right key, and Vertex answering 503 once: a stream falls back too.
    let right = falling_back(&fake, &key_file(&dir, &fake), &openai).await;
    let streamed = post(&right, &chat_stream("r")).await;
    assert_eq!(streamed.status(), 200);
    assert_eq!(header(&streamed, "x-switchyard-step"), "1");
    assert!(streamed.text().await.unwrap().contains("[DONE]"));
    assert_eq!(fake.calls(), 1);
    let served = post(&right, &chat("r")).await;
    assert_eq!(header(&served, "x-switchyard-step"), "0");
}

#[tokio::test]
async fn a_token_vertex_refuses_is_dropped_and_the_next_request_gets_a_fresh_one() {
    let fake = vertex_fake(Duration::from_secs(3600), vec![]).await;
    let openai = scripted("openai", []).await;
    let dir = TempDir::new();
    let gateway = falling_back(&fake, &key_file(&dir, &fake), &openai).await;
    assert_eq!(
        header(&post(&gateway, &chat("r")).await, "x-switchyard-step"),
        "0"
    );
    fake.revoke_tokens();
    // The revoked token is refused (401): this request falls back, and the token is dropped.
    let refused = post(&gateway, &chat("r")).await;
    assert_eq!(header(&refused, "x-switchyard-step"), "1");
    let served = post(&gateway, &chat("r")).await;
    assert_eq!(header(&served, "x-switchyard-step"), "0");
    assert_eq!(fake.token_requests(), 2);
}

#[tokio::test]
async fn requests_that_wait_on_a_failing_refresh_share_its_failure() {
    let fake = vertex_fake(Duration::from_secs(3600), vec![]).await;
    let openai = scripted("openai", []).await;
    let dir = TempDir::new();
    let gateway = falling_back(&fake, &wrong_key_file(&dir, &fake), &openai).await;
    let body = chat("r");
    let answers = join_all((0..20).map(|_| post(&gateway, &body))).await;
    assert!(answers.iter().all(|a| a.status() == 200), "all fell back");
    // gcp_auth tries a refused grant five times; the twenty requests share those tries
    // instead of making five each, one after another.
    let tries = fake.token_requests();
    assert!(tries <= 10, "{tries} token requests for 20 requests");
}
