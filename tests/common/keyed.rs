//! A keyed primary behind the admin API, for the tests of provider keys: `tests/no_leak.rs`
//! and `tests/gateway/keys.rs`. Include it next to `support` (it uses `super::support`):
//! `#[path = "common/keyed.rs"] mod keyed;` at the root of `tests/no_leak.rs`, and
//! `#[path = "../common/keyed.rs"] mod keyed;` in the `mod gateway` block of `tests/gateway.rs`.

use serde_json::json;
use switchyard::fake::FakeHandle;
use switchyard::keys::Secret;
use switchyard::server::{Gateway, StartOptions};

use super::support::*;

/// Route `r` = primary (keyed: a key must be put for it) → secondary (keyless), with quick
/// retries.
pub fn keyed_config(primary: &FakeHandle, secondary: &FakeHandle) -> TestGateway {
    TestGateway::new()
        .provider_at("primary", &primary.base_url(), "")
        .provider("secondary", secondary)
        .route("r", &[("primary", "model-a"), ("secondary", "model-b")], "")
        .fast_retry()
}

/// A fake `primary` that answers only requests carrying `key`.
pub async fn keyed_primary(key: &str) -> FakeHandle {
    switchyard::fake::FakeUpstream::new("primary")
        .require_key(key)
        .start()
        .await
        .expect("fake starts")
}

/// Starts `config` with the admin API on, behind `token`.
pub async fn with_admin(config: TestGateway, token: &str) -> Gateway {
    let options = StartOptions {
        admin_token: Some(Secret::new(token)),
        ..StartOptions::default()
    };
    Gateway::start_with(config.config(), "127.0.0.1:0".parse().unwrap(), options)
        .await
        .expect("gateway starts")
}

/// Puts `secret` as the primary's key `main` through the admin API, with `token`.
pub async fn put_key(gateway: &Gateway, token: &str, secret: &str) {
    let response = admin_request(
        gateway,
        Some(token),
        reqwest::Method::PUT,
        "/admin/keys/primary",
        Some(&json!({"secret": secret, "id": "main"})),
    )
    .await;
    assert_eq!(response.status(), 200, "{}", response.text().await.unwrap());
}
