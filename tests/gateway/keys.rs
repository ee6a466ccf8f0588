//! Provider keys: stored sealed, rotated and rolled back live, benched on 401, never leaked.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use futures_util::future::join_all;
use serde_json::{Value, json};
use switchyard::fake::{FakeHandle, FakeUpstream};
use switchyard::keys::Secret;
use switchyard::server::{Gateway, StartOptions};

use super::support::*;

const TOKEN: &str = "admin-token-for-key-tests";
const GOOD: &str = "sk-good-key-0000-1111-AAAA";
const WRONG: &str = "sk-wrong-key-2222-3333-BBBB";

use super::keyed::{keyed_config, keyed_primary, with_admin};

/// [`keyed_config`] and `extra`, with the admin API on.
async fn keyed(primary: &FakeHandle, secondary: &FakeHandle, extra: &str) -> Gateway {
    with_admin(keyed_config(primary, secondary).with(extra), TOKEN).await
}

async fn admin(
    gateway: &Gateway,
    method: reqwest::Method,
    path: &str,
    body: Option<Value>,
) -> reqwest::Response {
    admin_request(gateway, Some(TOKEN), method, path, body.as_ref()).await
}

async fn put_key(gateway: &Gateway, secret: &str) {
    super::keyed::put_key(gateway, TOKEN, secret).await;
}

async fn served_step(gateway: &Gateway) -> String {
    let response = post(gateway, &chat("r")).await;
    assert_eq!(response.status(), 200);
    header(&response, "x-switchyard-step").to_owned()
}

#[tokio::test]
async fn the_seeds_three_checks_with_no_restart() {
    let primary = keyed_primary(GOOD).await;
    let secondary = scripted("secondary", []).await;
    let gateway = keyed(&primary, &secondary, "").await;

    put_key(&gateway, GOOD).await;
    assert_eq!(
        served_step(&gateway).await,
        "0",
        "a normal call is served by step 0"
    );

    put_key(&gateway, WRONG).await;
    assert_eq!(
        served_step(&gateway).await,
        "1",
        "a wrong key for the primary: the secondary serves"
    );

    let rolled = admin(
        &gateway,
        reqwest::Method::POST,
        "/admin/keys/primary/rollback",
        None,
    )
    .await;
    assert_eq!(rolled.status(), 200);
    assert_eq!(
        served_step(&gateway).await,
        "0",
        "rolled back to the good key, step 0 serves again"
    );

    put_key(&gateway, WRONG).await;
    assert_eq!(served_step(&gateway).await, "1");
    put_key(&gateway, GOOD).await;
    assert_eq!(
        served_step(&gateway).await,
        "0",
        "rotated to the good key, step 0 serves again"
    );
}

#[tokio::test]
async fn a_key_put_from_the_cli_reaches_a_running_gateway() {
    let primary = keyed_primary(GOOD).await;
    let secondary = scripted("secondary", []).await;
    let db = std::env::temp_dir().join(format!("switchyard-keys-{}.db", uuid::Uuid::now_v7()));
    let store = |config: TestGateway| {
        config
            .with("[store]\n")
            .set("url", format!("sqlite://{}", db.display()))
    };
    let gateway = with_admin(store(keyed_config(&primary, &secondary)), TOKEN).await;
    assert_eq!(
        served_step(&gateway).await,
        "1",
        "no key yet: the primary is skipped"
    );

    let config =
        std::env::temp_dir().join(format!("switchyard-keys-{}.toml", uuid::Uuid::now_v7()));
    std::fs::write(
        &config,
        store(TestGateway::new())
            .provider_at("primary", &primary.base_url(), "")
            .raw_text(),
    )
    .unwrap();
    let mut put = std::process::Command::new(env!("CARGO_BIN_EXE_switchyard"));
    put.args(["keys", "put", "--config"])
        .arg(&config)
        .args(["primary", "--id", "main"]);
    type_secret(put, GOOD);
    tokio::time::timeout(std::time::Duration::from_secs(1), gateway.keys_current())
        .await
        .expect("the gateway loads the new key within 1 s");
    assert_eq!(served_step(&gateway).await, "0");
    for suffix in ["", "-wal", "-shm", ".key"] {
        let _ = std::fs::remove_file(format!("{}{suffix}", db.display()));
    }
    let _ = std::fs::remove_file(config);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rotation_under_load_fails_no_request_and_switches_every_later_one() {
    let primary = scripted("primary", []).await;
    let secondary = scripted("secondary", []).await;
    let gateway = keyed(&primary, &secondary, "").await;
    put_key(&gateway, "sk-old-key-0000-OLD1").await;
    let next = Arc::new(AtomicU64::new(0));
    let rotated_after = Arc::new(AtomicU64::new(u64::MAX));

    let load = (0..4).map(|_| {
        let (next, gateway_url) = (next.clone(), gateway.url());
        async move {
            let client = client();
            let mut statuses = Vec::new();
            for _ in 0..60 {
                let seq = next.fetch_add(1, Ordering::SeqCst);
                let mut body = chat("r");
                body["messages"][0]["content"] = json!(format!("seq {seq}"));
                let response = client
                    .post(format!("{gateway_url}/v1/chat/completions"))
                    .json(&body)
                    .send()
                    .await
                    .unwrap();
                statuses.push((
                    response.status().as_u16(),
                    header(&response, "x-switchyard-step").to_owned(),
                ));
            }
            statuses
        }
    });
    let rotate = async {
        // Rotate once the load is well under way.
        while next.load(Ordering::SeqCst) < 80 {
            tokio::task::yield_now().await;
        }
        put_key(&gateway, "sk-new-key-9999-NEW1").await;
        rotated_after.store(next.load(Ordering::SeqCst), Ordering::SeqCst);
    };
    let (results, ()) = tokio::join!(join_all(load), rotate);
    for (status, step) in results.into_iter().flatten() {
        assert_eq!(
            (status, step.as_str()),
            (200, "0"),
            "no request fails or falls back"
        );
    }
    let boundary = rotated_after.load(Ordering::SeqCst);
    let mut after = 0;
    for request in primary.requests() {
        let content = request.json()["messages"][0]["content"]
            .as_str()
            .unwrap_or("")
            .to_owned();
        let seq: u64 = content.trim_start_matches("seq ").parse().unwrap();
        if seq >= boundary {
            after += 1;
            assert_eq!(
                request.headers["authorization"], "Bearer sk-new-key-9999-NEW1",
                "seq {seq}"
            );
        }
    }
    assert!(after > 0, "some requests started after the rotation");
}

#[tokio::test]
async fn the_admin_api_wants_its_token_and_is_off_without_one() {
    let primary = scripted("primary", []).await;
    let secondary = scripted("secondary", []).await;
    let gateway = keyed(&primary, &secondary, "").await;
    let url = format!("{}/admin/keys", gateway.url());
    assert_eq!(client().get(&url).send().await.unwrap().status(), 401);
    assert_eq!(
        client()
            .get(&url)
            .bearer_auth("nope")
            .send()
            .await
            .unwrap()
            .status(),
        401
    );
    assert_eq!(
        client()
            .get(&url)
            .bearer_auth(TOKEN)
            .send()
            .await
            .unwrap()
            .status(),
        200
    );

    let off = two_step(&primary, &secondary, "").await;
    let response = client()
        .get(format!("{}/admin/keys", off.url()))
        .bearer_auth(TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(
        response.status(),
        404,
        "no token configured: the admin API is off"
    );
}

#[tokio::test]
async fn the_admin_api_can_have_its_own_address() {
    let primary = scripted("primary", []).await;
    let secondary = scripted("secondary", []).await;
    let gateway = keyed(
        &primary,
        &secondary,
        "[server]\nadmin_listen = \"127.0.0.1:0\"\n",
    )
    .await;
    assert_ne!(gateway.admin_url(), gateway.url());
    let public = client()
        .get(format!("{}/admin/keys", gateway.url()))
        .bearer_auth(TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(public.status(), 404, "not on the public address");
    put_key(&gateway, GOOD).await;
    let listed = admin(&gateway, reqwest::Method::GET, "/admin/keys", None).await;
    let body: Value = listed.json().await.unwrap();
    assert_eq!(body["keys"][0]["secret"], "****AAAA");
    assert_eq!(served_step(&gateway).await, "0");
}

#[tokio::test]
async fn bad_admin_requests_get_clear_errors() {
    let primary = scripted("primary", []).await;
    let secondary = scripted("secondary", []).await;
    let gateway = keyed(&primary, &secondary, "").await;
    let put =
        |path: &'static str, body: Value| admin(&gateway, reqwest::Method::PUT, path, Some(body));
    assert_eq!(
        put("/admin/keys/nobody", json!({"secret": "x"}))
            .await
            .status(),
        404
    );
    assert_eq!(
        put("/admin/keys/primary", json!({"secret": ""}))
            .await
            .status(),
        400
    );
    assert_eq!(
        put("/admin/keys/primary", json!({"secret": "s", "weight": 0}))
            .await
            .status(),
        400
    );
    assert_eq!(
        put(
            "/admin/keys/primary",
            json!({"secret": "s", "expires_in": "soon"})
        )
        .await
        .status(),
        400
    );
    let rollback = admin(
        &gateway,
        reqwest::Method::POST,
        "/admin/keys/primary/rollback",
        None,
    )
    .await;
    assert_eq!(rollback.status(), 404, "no key to roll back");
    let removed = admin(
        &gateway,
        reqwest::Method::DELETE,
        "/admin/keys/primary/ghost",
        None,
    )
    .await;
    assert_eq!(removed.status(), 404);
}

#[tokio::test]
async fn a_wrong_master_key_is_a_clear_error_at_start() {
    let db = std::env::temp_dir().join(format!("switchyard-master-{}.db", uuid::Uuid::now_v7()));
    let config = || {
        TestGateway::new()
            .with("[store]\n")
            .set("url", format!("sqlite://{}", db.display()))
            .config()
    };
    let with_key = |byte: u8| StartOptions {
        master_key: Some(Secret::new(base64_of(&[byte; 32]))),
        ..StartOptions::default()
    };
    let first = Gateway::start_with(config(), "127.0.0.1:0".parse().unwrap(), with_key(1)).await;
    assert!(first.is_ok());
    drop(first);
    let error = Gateway::start_with(config(), "127.0.0.1:0".parse().unwrap(), with_key(2))
        .await
        .err()
        .expect("a wrong master key fails the start");
    assert!(
        error.to_string().contains("master key does not open"),
        "{error}"
    );
    for suffix in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{}{suffix}", db.display()));
    }
}

fn base64_of(bytes: &[u8]) -> String {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

/// A key the provider refused once is benched, and comes back by itself: the step it leaves
/// without a usable key is reported `benched`, not `no_key`, while `keys list` still shows it.
#[tokio::test]
async fn a_key_refused_once_is_reported_benched_not_missing() {
    let fake = FakeUpstream::new("up")
        .require_key("sk-the-right-key-1234")
        .start()
        .await
        .unwrap();
    let gateway = TestGateway::new()
        .provider_at("up", &fake.base_url(), "")
        .route("r", &[("up", "m")], "")
        .start()
        .await;
    gateway
        .put_provider_key("up", "main", "sk-a-revoked-key-5678")
        .await
        .unwrap();
    let first = post(&gateway, &chat("r")).await;
    assert_eq!(first.status(), 503);
    let body: Value = first.json().await.unwrap();
    assert!(error_message(&body).contains("auth"), "{body}");
    let second = post(&gateway, &chat("r")).await;
    assert_eq!(second.status(), 503);
    let body: Value = second.json().await.unwrap();
    let message = error_message(&body);
    assert!(!message.contains("no_key"), "{message}");
    // When it comes back: within the breaker's cooldown (20 s by default), from now.
    let back_in: u64 = message
        .split("step 0 up/m: benched, back in ")
        .nth(1)
        .and_then(|rest| rest.split('s').next())
        .and_then(|secs| secs.parse().ok())
        .unwrap_or_else(|| panic!("says when the key is back: {message}"));
    assert!((1..=20).contains(&back_in), "{message}");
    assert_eq!(fake.calls(), 1, "the benched key is not sent again");
}

/// Puts `secret` as `provider`'s key `id` through the CLI, as an operator rotates one.
fn cli_put(config: &std::path::Path, provider: &str, id: &str, secret: &str) {
    let mut put = std::process::Command::new(super::process::BIN);
    put.args(["keys", "put", "--config"])
        .arg(config)
        .args([provider, "--id", id])
        .env_remove("SWITCHYARD_MASTER_KEY");
    type_secret(put, secret);
}

/// Runs `put`, a `keys put`, with `secret` on its stdin as an operator types it; it succeeds.
fn type_secret(mut put: std::process::Command, secret: &str) {
    let mut put = put.stdin(std::process::Stdio::piped()).spawn().unwrap();
    std::io::Write::write_all(
        &mut put.stdin.take().unwrap(),
        format!("{secret}\n").as_bytes(),
    )
    .unwrap();
    assert!(put.wait().unwrap().success());
}

/// A restart must not undo a rotation: `api_key_env` seeds the store only when it holds no
/// key for the provider, or when the environment's value changed since it was last seeded.
#[tokio::test]
async fn a_restart_keeps_a_rotated_key_and_a_changed_environment_seeds_again() {
    use super::process::{TempDir, serve_with};
    const OLD: &str = "sk-from-the-env-file-0001";
    const ROTATED: &str = "sk-rotated-by-the-cli-0002";
    const NEW: &str = "sk-changed-in-the-env-0003";
    let rotated_only = FakeUpstream::new("up")
        .require_key(ROTATED)
        .start()
        .await
        .unwrap();
    let dir = TempDir::new();
    let config = dir.0.join("switchyard.toml");
    let text = TestGateway::new()
        .with("[server]\nlisten = \"127.0.0.1:0\"\ndrain_delay = \"0s\"\n")
        .with("[auth]\nrequired = false\n[store]\n")
        .set(
            "url",
            format!("sqlite://{}", dir.0.join("switchyard.db").display()),
        )
        .provider_at("up", &rotated_only.base_url(), "api_key_env = \"UP_KEY\"")
        .route("r", &[("up", "m")], "")
        .text();
    std::fs::write(&config, text).unwrap();
    let status = async |env: &str| {
        let served = serve_with(&dir.0, &config, &[("UP_KEY", env)]);
        let response = client()
            .post(format!("{}/v1/chat/completions", served.url))
            .json(&chat("r"))
            .send()
            .await
            .unwrap();
        response.status().as_u16()
    };
    // First start: the store has no key, so OLD is seeded (and refused by this upstream).
    assert_eq!(status(OLD).await, 503);
    cli_put(&config, "up", "env", ROTATED);
    // The environment file still says OLD: the rotated key stands, and serves.
    assert_eq!(status(OLD).await, 200, "the rotated key is sent");
    assert_eq!(status(OLD).await, 200, "and still after another restart");
    // The operator changes the environment itself: that is seeded.
    assert_eq!(status(NEW).await, 503, "the changed value is seeded");
}
