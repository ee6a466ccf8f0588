//! `POST /v1/embeddings` through chains: the OpenAI family passed through, Gemini translated.

use serde_json::{Value, json};
use switchyard::fake::Behavior;

use super::support::*;

#[tokio::test]
async fn openai_family_embeddings_pass_through_with_the_model_rewritten() {
    let fake = scripted("emb", []).await;
    let gateway = one_route("emb", &fake, "vectors", "text-embedding-3-small").await;
    let request = json!({"model": "vectors", "input": ["a", "bb"], "encoding_format": "float"});
    let response = post_to(&gateway, "/v1/embeddings", &request).await;
    assert_eq!(response.status(), 200);
    assert_eq!(header(&response, "x-switchyard-provider"), "emb");
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["data"].as_array().unwrap().len(), 2);
    let sent = &fake.requests()[0];
    assert_eq!(sent.path, "/v1/embeddings");
    assert_eq!(sent.json()["model"], "text-embedding-3-small");
    assert_eq!(sent.json()["input"], json!(["a", "bb"]));
}

#[tokio::test]
async fn gemini_embeddings_are_translated_and_fall_back_like_chat() {
    let broken = scripted("broken", [Behavior::status(503)]).await;
    let gemini = scripted("gemini", []).await;
    let gateway = TestGateway::new()
        .provider("broken", &broken)
        .provider_of("gemini", "gemini", &gemini)
        .route(
            "vectors",
            &[("broken", "m"), ("gemini", "gemini-embedding-001")],
            "",
        )
        .fast_retry()
        .start()
        .await;
    let request = json!({"model": "vectors", "input": "hello", "dimensions": 3});
    let response = post_to(&gateway, "/v1/embeddings", &request).await;
    assert_eq!(header(&response, "x-switchyard-step"), "1");
    let body: Value = response.json().await.unwrap();
    assert_eq!(
        body["data"],
        json!([{"object": "embedding", "index": 0, "embedding": [5.0, 0.5, -0.25]}])
    );
    let sent = &gemini.requests()[0];
    assert_eq!(
        sent.path,
        "/v1beta/models/gemini-embedding-001:embedContent"
    );
    assert_eq!(
        sent.json(),
        json!({"content": {"parts": [{"text": "hello"}]}, "outputDimensionality": 3})
    );

    let batch = json!({"model": "vectors", "input": ["a", "bb"], "encoding_format": "base64"});
    let body: Value = post_to(&gateway, "/v1/embeddings", &batch)
        .await
        .json()
        .await
        .unwrap();
    // [1.0, 0.5, -0.25] as little-endian f32s.
    assert_eq!(body["data"][0]["embedding"], "AACAPwAAAD8AAIC+");
    assert_eq!(body["data"][1]["index"], 1);
}

#[tokio::test]
async fn an_anthropic_step_cannot_embed_and_bad_input_is_a_400() {
    let fake = scripted("claude", []).await;
    let gateway = TestGateway::new()
        .provider_of("anthropic", "claude", &fake)
        .route("vectors", &[("claude", "claude-x")], "")
        .start()
        .await;
    let response = post_to(
        &gateway,
        "/v1/embeddings",
        &json!({"model": "vectors", "input": "x"}),
    )
    .await;
    assert_eq!(response.status(), 400);
    let body: Value = response.json().await.unwrap();
    assert!(error_message(&body).contains("no embeddings"));
    assert_eq!(fake.calls(), 0);
    let response = post_to(&gateway, "/v1/embeddings", &json!({"model": "vectors"})).await;
    assert_eq!(response.status(), 400);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["error"]["param"], "input");
}
