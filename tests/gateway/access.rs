//! Who may call what: `[auth] direct_models`, per-role and per-key allow-lists of routes
//! and `provider/model` patterns, refused with a 403 in the client's shape, and a
//! `/v1/models` that lists only what is allowed. And the bearer scheme in any case.

use serde_json::Value;
use switchyard::fake::FakeHandle;
use switchyard::server::Gateway;

use super::support::*;

/// Route `r` = primary/model-a → secondary/model-b, and route `other` = secondary/model-c,
/// then `extra`.
async fn routed(primary: &FakeHandle, secondary: &FakeHandle, extra: &str) -> Gateway {
    TestGateway::new()
        .with(extra)
        .provider("primary", primary)
        .provider("secondary", secondary)
        .route("r", &[("primary", "model-a"), ("secondary", "model-b")], "")
        .route("other", &[("secondary", "model-c")], "")
        .start()
        .await
}

async fn fakes() -> (FakeHandle, FakeHandle) {
    (
        scripted("primary", []).await,
        scripted("secondary", []).await,
    )
}

/// A key of `role` with `models`, issued into the gateway's store and loaded.
async fn key(gateway: &Gateway, role: &str, models: Option<&[&str]>) -> String {
    let models = models.map(|m| m.iter().map(|s| s.to_string()).collect());
    stored_key(gateway, "ana", role, models).await.0
}

/// The status of a chat call to `model`, with `key` if given; a 403 must be OpenAI-shaped.
async fn chat_status(gateway: &Gateway, key: Option<&str>, model: &str) -> u16 {
    let bearer = key.map(|k| format!("Bearer {k}"));
    let headers: Vec<(&str, &str)> = bearer
        .as_deref()
        .map(|b| vec![("authorization", b)])
        .unwrap_or_default();
    let response = post_with(gateway, &chat(model), &headers).await;
    let status = response.status().as_u16();
    let body: Value = response.json().await.unwrap_or(Value::Null);
    if status == 403 {
        error_message(&body);
        assert_eq!(body["error"]["type"], "permission_error", "{body}");
    }
    status
}

/// The status of each model in `models`, in order.
async fn statuses(gateway: &Gateway, key: Option<&str>, models: &[&str]) -> Vec<(String, u16)> {
    let mut out = Vec::new();
    for model in models {
        out.push((model.to_string(), chat_status(gateway, key, model).await));
    }
    out
}

fn expect(pairs: &[(&str, u16)]) -> Vec<(String, u16)> {
    pairs.iter().map(|(m, s)| (m.to_string(), *s)).collect()
}

/// What `/v1/models` lists for `key`.
async fn listed(gateway: &Gateway, key: Option<&str>) -> Vec<String> {
    let mut request = client().get(format!("{}/v1/models", gateway.url()));
    if let Some(key) = key {
        request = request.bearer_auth(key);
    }
    let body: Value = request.send().await.unwrap().json().await.unwrap();
    body["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["id"].as_str().unwrap().to_owned())
        .collect()
}

#[tokio::test]
async fn by_default_only_direct_names_in_some_route_work() {
    let (primary, secondary) = fakes().await;
    let gateway = routed(&primary, &secondary, "").await;
    assert_eq!(
        statuses(
            &gateway,
            None,
            &[
                "r",
                "primary/model-a",
                "secondary/model-c",
                "primary/gpt-anything"
            ]
        )
        .await,
        expect(&[
            ("r", 200),
            ("primary/model-a", 200),
            ("secondary/model-c", 200),
            ("primary/gpt-anything", 403),
        ])
    );
    // In Anthropic's shape on /v1/messages.
    let response = post_to(
        &gateway,
        "/v1/messages",
        &message("primary/gpt-anything", false),
    )
    .await;
    assert_eq!(response.status(), 403);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["type"], "error", "{body}");
    assert_eq!(body["error"]["type"], "permission_error", "{body}");
    assert!(
        primary
            .requests()
            .iter()
            .all(|r| !r.body.contains("gpt-anything"))
    );
}

#[tokio::test]
async fn direct_models_can_be_off_on_or_a_list_of_patterns() {
    let (primary, secondary) = fakes().await;
    let off = routed(
        &primary,
        &secondary,
        "[auth]\nrequired = false\ndirect_models = false\n",
    )
    .await;
    assert_eq!(
        statuses(&off, None, &["r", "primary/model-a"]).await,
        expect(&[("r", 200), ("primary/model-a", 403)])
    );
    assert_eq!(listed(&off, None).await, ["r", "other"]);

    let on = routed(
        &primary,
        &secondary,
        "[auth]\nrequired = false\ndirect_models = true\n",
    )
    .await;
    assert_eq!(
        statuses(&on, None, &["primary/anything"]).await,
        expect(&[("primary/anything", 200)])
    );

    let some = routed(
        &primary,
        &secondary,
        "[auth]\nrequired = false\ndirect_models = [\"primary/*\"]\n",
    )
    .await;
    assert_eq!(
        statuses(
            &some,
            None,
            &["primary/anything", "secondary/model-b", "other"]
        )
        .await,
        expect(&[
            ("primary/anything", 200),
            ("secondary/model-b", 403),
            ("other", 200)
        ])
    );
}

#[tokio::test]
async fn a_role_reaches_only_its_routes_and_patterns() {
    let (primary, secondary) = fakes().await;
    let roles = "[auth]\nrequired = false\ndefault_role = \"ae\"\n[[roles]]\nname = \"ae\"\nmodels = [\"r\", \"primary/*\"]\n[[roles]]\nname = \"ops\"\n";
    let gateway = routed(&primary, &secondary, roles).await;
    // An anonymous caller has the default role.
    assert_eq!(
        statuses(
            &gateway,
            None,
            &["r", "primary/model-a", "other", "secondary/model-b"]
        )
        .await,
        expect(&[
            ("r", 200),
            ("primary/model-a", 200),
            ("other", 403),
            ("secondary/model-b", 403),
        ])
    );
    assert_eq!(listed(&gateway, None).await, ["r", "primary/model-a"]);
    // A key of a role without a list reaches everything the direct-name rule allows.
    let ops = key(&gateway, "ops", None).await;
    assert_eq!(
        statuses(&gateway, Some(&ops), &["other", "secondary/model-b"]).await,
        expect(&[("other", 200), ("secondary/model-b", 200)])
    );
    // A key's own list narrows its role's further.
    let narrow = key(&gateway, "ae", Some(&["primary/*", "other"])).await;
    assert_eq!(
        statuses(&gateway, Some(&narrow), &["primary/model-a", "r", "other"]).await,
        expect(&[("primary/model-a", 200), ("r", 403), ("other", 403)])
    );
    assert_eq!(listed(&gateway, Some(&narrow)).await, ["primary/model-a"]);
}

#[tokio::test]
async fn a_keys_model_list_takes_patterns() {
    let (primary, secondary) = fakes().await;
    let gateway = routed(&primary, &secondary, "[auth]\nrequired = true\n").await;
    let key = key(&gateway, "default", Some(&["secondary/*"])).await;
    assert_eq!(
        statuses(
            &gateway,
            Some(&key),
            &[
                "secondary/model-b",
                "secondary/model-c",
                "r",
                "primary/model-a"
            ]
        )
        .await,
        expect(&[
            ("secondary/model-b", 200),
            ("secondary/model-c", 200),
            ("r", 403),
            ("primary/model-a", 403),
        ])
    );
    assert_eq!(
        listed(&gateway, Some(&key)).await,
        ["secondary/model-b", "secondary/model-c"]
    );
}

#[tokio::test]
async fn the_bearer_scheme_is_case_insensitive() {
    let (primary, secondary) = fakes().await;
    let gateway = routed(&primary, &secondary, "[auth]\nrequired = true\n").await;
    let key = key(&gateway, "default", None).await;
    for scheme in ["Bearer", "bearer", "BEARER"] {
        let value = format!("{scheme} {key}");
        let response = post_with(&gateway, &chat("r"), &[("authorization", &value)]).await;
        assert_eq!(response.status(), 200, "{scheme}");
    }
    let response = post_with(&gateway, &chat("r"), &[("authorization", "Basic abc")]).await;
    assert_eq!(response.status(), 401);
}
