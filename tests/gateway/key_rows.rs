//! Provider-key rows that cannot be used: one that does not decrypt is skipped (the rest, and
//! virtual-key revocations, keep loading), and an expiry too far away is refused.

use std::time::Duration;

use reqwest::Method;
use serde_json::{Value, json};
use switchyard::auth::{KeyRequest, issue};
use switchyard::fake::FakeUpstream;
use switchyard::keys::vault::Sealed;
use switchyard::server::Gateway;
use switchyard::store::{LimitOverrides, NewProviderKey};

use super::support::*;

const TOKEN: &str = "admin-token-for-key-rows";

async fn admin_gateway(config: TestGateway) -> Gateway {
    start_with_admin(&config, TOKEN).await
}

/// Posts a chat request to route `r` as the holder of `key`.
async fn chat_as(gateway: &Gateway, key: &str) -> reqwest::Response {
    let authorization = format!("Bearer {key}");
    post_with(gateway, &chat("r"), &[("authorization", &authorization)]).await
}

#[tokio::test]
async fn an_undecryptable_row_is_skipped_and_revocations_still_arrive() {
    let fake = FakeUpstream::new("up")
        .require_key("sk-good-key-1234")
        .start()
        .await
        .unwrap();
    let config = TestGateway::new()
        .with("[auth]\nrequired = true\n")
        .provider_at("up", &fake.base_url(), "")
        .route("r", &[("up", "m")], "");
    let gateway = admin_gateway(config).await;
    let store = gateway.store();
    store
        .put_provider_key(NewProviderKey {
            provider: "up".into(),
            key_id: "broken".into(),
            sealed: Sealed {
                nonce: vec![0; 12],
                ciphertext: b"not sealed under this master key".to_vec(),
            },
            weight: 1,
            expires_ms: None,
        })
        .await
        .unwrap();
    let issued = issue(KeyRequest {
        user: "ana".into(),
        role: "default".into(),
        permissions: Vec::new(),
        models: None,
        limits: LimitOverrides::default(),
    })
    .unwrap();
    let virtual_key = issued.key.clone();
    let key_id = issued.record.id.clone();
    store.insert_virtual_key(issued.record).await.unwrap();
    // Through the admin API, as an operator would: this reloads the store.
    let put = admin_request(
        &gateway,
        Some(TOKEN),
        Method::PUT,
        "/admin/keys/up",
        Some(&json!({"secret": "sk-good-key-1234", "id": "good"})),
    )
    .await;
    assert_eq!(put.status(), 200, "{}", put.text().await.unwrap());
    tokio::time::timeout(Duration::from_secs(2), gateway.keys_current())
        .await
        .expect("the store reloads despite the broken row");

    let sent = chat_as(&gateway, &virtual_key).await;
    assert_eq!(sent.status(), 200, "the readable key serves");

    assert!(store.revoke_virtual_key(&key_id).await.unwrap());
    tokio::time::timeout(Duration::from_secs(2), gateway.keys_current())
        .await
        .expect("the revocation reaches the gateway");
    let refused = chat_as(&gateway, &virtual_key).await;
    assert_eq!(refused.status(), 401);
    let metrics = metrics_text(&gateway.url(), TOKEN).await;
    assert!(
        metrics
            .lines()
            .any(|l| l == "switchyard_provider_keys_unreadable 1"),
        "{metrics}"
    );
    let (_, ready) = readiness(&gateway).await;
    assert_eq!(ready["keys"]["unreadable_rows"], 1, "{ready}");
}

#[tokio::test]
async fn an_expiry_past_what_a_date_can_hold_is_refused() {
    let fake = scripted("up", []).await;
    let gateway = admin_gateway(TestGateway::new().provider_at("up", &fake.base_url(), "")).await;
    for expires_in in ["200000000000d", "106751991167d", "0s"] {
        let response = admin_request(
            &gateway,
            Some(TOKEN),
            Method::PUT,
            "/admin/keys/up",
            Some(&json!({"secret": "sk-some-key-1234", "expires_in": expires_in})),
        )
        .await;
        assert_eq!(response.status(), 400, "{expires_in}");
        let body: Value = response.json().await.unwrap();
        let message = error_message(&body);
        assert!(message.contains("expires_in"), "{message}");
    }
    let keys: Value = get_json(&format!("{}/admin/keys", gateway.admin_url()), TOKEN).await;
    assert_eq!(keys["keys"], json!([]), "nothing was stored");

    let ok = admin_request(
        &gateway,
        Some(TOKEN),
        Method::PUT,
        "/admin/keys/up",
        Some(&json!({"secret": "sk-some-key-1234", "expires_in": "30d"})),
    )
    .await;
    assert_eq!(ok.status(), 200);
}

/// `curl -d '{…}'` sends `application/x-www-form-urlencoded`: every admin endpoint reads a
/// JSON body whatever its content-type, and a body that is not JSON stays a 400.
#[tokio::test]
async fn admin_key_bodies_are_json_whatever_their_content_type() {
    let fake = scripted("up", []).await;
    let config = TestGateway::new()
        .provider_at("up", &fake.base_url(), "")
        .route("r", &[("up", "m")], "");
    let gateway = admin_gateway(config).await;
    let send = |method: reqwest::Method, path: &str, body: &'static str| {
        client()
            .request(method, format!("{}{path}", gateway.admin_url()))
            .bearer_auth(TOKEN)
            .header("content-type", "application/x-www-form-urlencoded")
            .body(body)
            .send()
    };
    for body in [
        r#"{"secret": "sk-first-key-1234", "id": "main"}"#,
        r#"{"secret": "sk-second-key-5678", "id": "main"}"#,
    ] {
        let put = send(reqwest::Method::PUT, "/admin/keys/up", body)
            .await
            .unwrap();
        assert_eq!(put.status(), 200, "{}", put.text().await.unwrap());
    }
    let rollback = send(
        reqwest::Method::POST,
        "/admin/keys/up/rollback",
        r#"{"id": "main"}"#,
    )
    .await
    .unwrap();
    assert_eq!(rollback.status(), 200, "{}", rollback.text().await.unwrap());

    let bad = send(
        reqwest::Method::PUT,
        "/admin/keys/up",
        "secret=sk-form-key-9999",
    )
    .await
    .unwrap();
    assert_eq!(bad.status(), 400);
    let text = bad.text().await.unwrap();
    assert!(!text.contains("sk-form-key-9999"), "{text}");
    let body: Value = serde_json::from_str(&text).unwrap();
    assert!(body["error"]["message"].as_str().unwrap().contains("JSON"));
}

/// `/readyz` stays ready when a provider has no usable key (its steps are skipped and the
/// chain falls back, on every instance alike), but its detail names that provider, until a
/// key is put.
#[tokio::test]
async fn readyz_names_the_providers_without_a_usable_key() {
    let keyed = scripted("keyed", []).await;
    let open = scripted("open", []).await;
    let config = TestGateway::new()
        .provider_at("keyed", &keyed.base_url(), "")
        .provider("open", &open)
        .route("r", &[("keyed", "m"), ("open", "m")], "");
    let gateway = admin_gateway(config).await;
    let (status, ready) = readiness(&gateway).await;
    assert_eq!(status, 200, "{ready}");
    assert_eq!(ready["status"], "ready", "{ready}");
    assert_eq!(
        ready["keys"]["providers_without_usable_key"],
        json!(["keyed"]),
        "{ready}"
    );
    gateway
        .put_provider_key("keyed", "main", "sk-keyed-key-1234")
        .await
        .unwrap();
    let (_, ready) = readiness(&gateway).await;
    assert_eq!(
        ready["keys"]["providers_without_usable_key"],
        json!([]),
        "{ready}"
    );
}
