//! Virtual keys over HTTP: created (the key shown once), listed and read masked, updated and
//! revoked through the admin API, each change in effect on the gateway's next request;
//! bad requests refused with the field at fault; expired keys refused with a 401 and a row.

use reqwest::Method;
use serde_json::{Value, json};
use switchyard::fake::FakeHandle;
use switchyard::keys::Secret;
use switchyard::server::{Gateway, StartOptions};
use switchyard::store::now_ms;

use super::support::*;

pub(super) const TOKEN: &str = "admin-token-for-virtual-keys";

/// Auth required; role `ae` may use everything, role `ops` only route `r`; route `r` =
/// primary/model-a and route `other` = secondary/model-c; the admin API on with [`TOKEN`].
async fn keyed_gateway(primary: &FakeHandle, secondary: &FakeHandle) -> Gateway {
    start(&keyed_config(primary, secondary)).await
}

/// The config [`keyed_gateway`] runs.
/// A keyed gateway's config whose store is SQLite in a fresh directory named for `tag`,
/// written to `switchyard.toml` there: the directory, the config and the file.
pub(super) fn keyed_config_on_disk(
    primary: &FakeHandle,
    secondary: &FakeHandle,
    tag: &str,
) -> (std::path::PathBuf, TestGateway, std::path::PathBuf) {
    let dir = std::env::temp_dir().join(format!("switchyard-{tag}-{}", uuid::Uuid::now_v7()));
    std::fs::create_dir_all(&dir).unwrap();
    let served = keyed_config(primary, secondary).with("[store]\n").set(
        "url",
        format!("sqlite://{}", dir.join("store.db").display()),
    );
    let config = dir.join("switchyard.toml");
    std::fs::write(&config, served.raw_text()).unwrap();
    (dir, served, config)
}

/// Runs `switchyard vkeys <args> --config <config>`.
pub(super) fn vkeys_cli(config: &std::path::Path, args: &[&str]) -> std::process::Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_switchyard"))
        .args(["vkeys"])
        .args(args)
        .arg("--config")
        .arg(config)
        .output()
        .unwrap()
}

/// Sends `body` to the admin API, which must refuse it with a 400: its answer.
pub(super) async fn refused(gateway: &Gateway, method: Method, path: &str, body: &Value) -> Value {
    let (status, answer) = admin(gateway, method, path, Some(body.clone())).await;
    assert_eq!(status, 400, "{body} -> {answer}");
    answer
}

pub(super) fn keyed_config(primary: &FakeHandle, secondary: &FakeHandle) -> TestGateway {
    TestGateway::new()
        .with("[auth]\nrequired = true\n")
        .with("[[roles]]\nname = \"ae\"\n[[roles]]\nname = \"ops\"\nmodels = [\"r\"]\n")
        .provider("primary", primary)
        .provider("secondary", secondary)
        .route("r", &[("primary", "model-a")], "")
        .route("other", &[("secondary", "model-c")], "")
}

/// A gateway of `config` with the admin API on with [`TOKEN`].
pub(super) async fn start(config: &TestGateway) -> Gateway {
    let config = config.config();
    let options = StartOptions {
        admin_token: Some(Secret::new(TOKEN)),
        ..StartOptions::default()
    };
    Gateway::start_with(config, "127.0.0.1:0".parse().unwrap(), options)
        .await
        .expect("gateway starts")
}

pub(super) async fn started() -> (FakeHandle, FakeHandle, Gateway) {
    let primary = scripted("primary", []).await;
    let secondary = scripted("secondary", []).await;
    let gateway = keyed_gateway(&primary, &secondary).await;
    (primary, secondary, gateway)
}

/// An admin call with the right token: its status and JSON body.
pub(super) async fn admin(
    gateway: &Gateway,
    method: Method,
    path: &str,
    body: Option<Value>,
) -> (u16, Value) {
    let response = admin_request(gateway, Some(TOKEN), method, path, body.as_ref()).await;
    let status = response.status().as_u16();
    (status, response.json().await.unwrap_or(Value::Null))
}

/// Creates a key; returns its id and the key itself.
pub(super) async fn create(gateway: &Gateway, body: Value) -> (String, String) {
    let (status, created) = admin(gateway, Method::POST, "/admin/virtual-keys", Some(body)).await;
    assert_eq!(status, 201, "{created}");
    let secret = created["secret"]
        .as_str()
        .expect("the key, once")
        .to_owned();
    (created["id"].as_str().unwrap().to_owned(), secret)
}

/// The status of a chat call to `model` with `key`.
async fn call(gateway: &Gateway, key: &str, model: &str) -> u16 {
    let bearer = format!("Bearer {key}");
    post_with(gateway, &chat(model), &[("authorization", &bearer)])
        .await
        .status()
        .as_u16()
}

#[tokio::test]
async fn a_key_made_over_http_works_changes_and_is_revoked_at_once() {
    let (_primary, _secondary, gateway) = started().await;
    let (id, key) = create(
        &gateway,
        json!({"user": "ana", "role": "ae", "models": ["r"]}),
    )
    .await;
    assert!(key.starts_with("sy-"), "{key}");
    assert_eq!(call(&gateway, &key, "r").await, 200, "the new key works");
    assert_eq!(call(&gateway, &key, "other").await, 403, "but only for r");

    // Listed and read masked, never the key.
    let (status, listed) = admin(&gateway, Method::GET, "/admin/virtual-keys", None).await;
    assert_eq!(status, 200);
    let (status, one) = admin(
        &gateway,
        Method::GET,
        &format!("/admin/virtual-keys/{id}"),
        None,
    )
    .await;
    assert_eq!(status, 200);
    let shown = &listed["virtual_keys"][0];
    assert_eq!(shown["id"], id.as_str());
    assert_eq!(shown["key"], format!("{}…", &key[..11]), "{shown}");
    assert_eq!(shown["state"], "active");
    assert_eq!(&one, shown);
    for text in [listed.to_string(), one.to_string()] {
        assert!(!text.contains(&key[11..]), "the key leaks: {text}");
        assert!(text.contains(&key[..11]), "the masked prefix shows");
    }

    // Its models: the next request follows the new list.
    let path = format!("/admin/virtual-keys/{id}");
    let (status, updated) = admin(
        &gateway,
        Method::PATCH,
        &path,
        Some(json!({"models": ["other"]})),
    )
    .await;
    assert_eq!(status, 200, "{updated}");
    assert!(updated.get("secret").is_none());
    assert_eq!(call(&gateway, &key, "other").await, 200);
    assert_eq!(call(&gateway, &key, "r").await, 403);

    // Its role: `ops` may use only r, whatever the key allows.
    let change = json!({"role": "ops", "models": null});
    let (status, updated) = admin(&gateway, Method::PATCH, &path, Some(change)).await;
    assert_eq!(status, 200, "{updated}");
    assert_eq!(
        (&updated["role"], &updated["models"]),
        (&json!("ops"), &Value::Null)
    );
    assert_eq!(call(&gateway, &key, "r").await, 200);
    assert_eq!(call(&gateway, &key, "other").await, 403);

    // Its limits: one request a minute. Wherever the minute turns, three calls meet a 429.
    let (status, _) = admin(
        &gateway,
        Method::PATCH,
        &path,
        Some(json!({"requests_per_minute": 1})),
    )
    .await;
    assert_eq!(status, 200);
    let mut statuses = Vec::new();
    for _ in 0..3 {
        statuses.push(call(&gateway, &key, "r").await);
    }
    assert!(statuses.contains(&429), "{statuses:?}");
    assert!(
        statuses.iter().all(|s| [200, 429].contains(s)),
        "{statuses:?}"
    );
    let (status, _) = admin(
        &gateway,
        Method::PATCH,
        &path,
        Some(json!({"requests_per_minute": null})),
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(
        call(&gateway, &key, "r").await,
        200,
        "back on the role's limits"
    );

    // Revoked: the next request is refused; revoking again answers the same.
    let (status, revoked) = admin(&gateway, Method::DELETE, &path, None).await;
    assert_eq!(status, 200, "{revoked}");
    assert_eq!(revoked["state"], "revoked");
    assert!(revoked["revoked_ms"].is_i64());
    assert_eq!(call(&gateway, &key, "r").await, 401);
    let (status, again) = admin(&gateway, Method::DELETE, &path, None).await;
    assert_eq!((status, &again), (200, &revoked), "revoking is idempotent");
    let (status, body) = admin(&gateway, Method::PATCH, &path, Some(json!({"role": "ae"}))).await;
    assert_eq!(status, 409, "a revoked key cannot change: {body}");
    error_message(&body);
    assert_eq!(call(&gateway, &key, "r").await, 401);

    // The request log and the store's records name the key by id, never by itself.
    let rows = format!("{:?}", gateway.telemetry().recent());
    assert!(rows.contains(&id), "the rows name the key's id");
    let stored = format!("{:?}", gateway.store().virtual_keys().await.unwrap());
    for (what, text) in [("the log rows", rows), ("the stored keys' Debug", stored)] {
        assert!(!text.contains(&key[11..]), "{what} leak the key: {text}");
    }
}

#[tokio::test]
async fn bad_requests_are_refused_with_the_field_at_fault() {
    let (_primary, _secondary, gateway) = started().await;
    let past = now_ms() - 1_000;
    let creates = [
        (json!({"user": "ana", "role": "boss"}), Some("role")),
        (
            json!({"user": "ana", "role": "ae", "models": ["nowhere"]}),
            Some("models"),
        ),
        (
            json!({"user": "ana", "role": "ae", "models": ["openai/gpt-4o"]}),
            Some("models"),
        ),
        (
            json!({"user": "ana", "role": "ae", "permissions": ["root"]}),
            Some("permissions"),
        ),
        (
            json!({"user": "ana", "role": "ae", "max_concurrent": 0}),
            Some("max_concurrent"),
        ),
        (
            json!({"user": "ana", "role": "ae", "expires_ms": past}),
            Some("expires_ms"),
        ),
        (
            json!({"user": "ana", "role": "ae", "expires_in": "soon"}),
            Some("expires_in"),
        ),
        (
            json!({"user": "ana", "role": "ae", "expires_in": "1d", "expires_ms": past}),
            Some("expires_in"),
        ),
        (json!({"user": "", "role": "ae"}), Some("user")),
        (json!({"user": "ana", "role": "ae", "admin": true}), None),
        (
            json!({"user": "ana", "role": "ae", "requests_per_minute": -1}),
            None,
        ),
        (json!({"role": "ae"}), None),
    ];
    for (body, param) in creates {
        let answer = refused(&gateway, Method::POST, "/admin/virtual-keys", &body).await;
        let message = error_message(&answer);
        assert_eq!(answer["error"]["param"], json!(param), "{body} -> {answer}");
        if body.get("admin").is_some() {
            assert!(message.contains("unknown field `admin`"), "{message}");
        }
    }
    let malformed = client()
        .post(format!("{}/admin/virtual-keys", gateway.admin_url()))
        .bearer_auth(TOKEN)
        .body("{\"user\": ")
        .send()
        .await
        .unwrap();
    assert_eq!(malformed.status(), 400);
    error_message(&malformed.json().await.unwrap());
    let (status, listed) = admin(&gateway, Method::GET, "/admin/virtual-keys", None).await;
    assert_eq!(
        (status, listed),
        (200, json!({"virtual_keys": []})),
        "nothing was stored"
    );

    let (id, _) = create(&gateway, json!({"user": "ana", "role": "ae"})).await;
    let path = format!("/admin/virtual-keys/{id}");
    let updates = [
        (json!({}), None),
        (json!({"user": "bo"}), None),
        (json!({"role": "boss"}), Some("role")),
        (json!({"models": []}), Some("models")),
        (json!({"tokens_per_minute": 0}), Some("tokens_per_minute")),
        (json!({"expires_ms": past}), Some("expires_ms")),
    ];
    for (body, param) in updates {
        let answer = refused(&gateway, Method::PATCH, &path, &body).await;
        error_message(&answer);
        assert_eq!(answer["error"]["param"], json!(param), "{body} -> {answer}");
    }
    let (_, unchanged) = admin(&gateway, Method::GET, &path, None).await;
    assert_eq!(
        (&unchanged["role"], &unchanged["state"]),
        (&json!("ae"), &json!("active"))
    );

    for method in [Method::GET, Method::PATCH, Method::DELETE] {
        let body = (method == Method::PATCH).then(|| json!({"role": "ae"}));
        let (status, answer) = admin(
            &gateway,
            method.clone(),
            "/admin/virtual-keys/no-such-id",
            body,
        )
        .await;
        assert_eq!(status, 404, "{method} {answer}");
        error_message(&answer);
    }
    // A key where its id belongs is refused without echoing it.
    let key_as_id = "sy-NOTANIDBUTAKEY0123456789";
    let (status, answer) = admin(
        &gateway,
        Method::GET,
        &format!("/admin/virtual-keys/{key_as_id}"),
        None,
    )
    .await;
    assert_eq!(status, 404);
    assert!(!answer.to_string().contains("NOTANID"), "{answer}");
}

#[tokio::test]
async fn only_the_admin_token_opens_the_virtual_key_api() {
    let (_primary, _secondary, gateway) = started().await;
    let (id, key) = create(&gateway, json!({"user": "ana", "role": "ae"})).await;
    let paths = [
        "/admin/virtual-keys".to_owned(),
        format!("/admin/virtual-keys/{id}"),
    ];
    let create_body = json!({"user": "mallory", "role": "ae"});
    for token in [None, Some("wrong-token"), Some(key.as_str())] {
        for (method, path, body) in [
            (Method::GET, &paths[0], None),
            (Method::POST, &paths[0], Some(&create_body)),
            (Method::GET, &paths[1], None),
            (Method::PATCH, &paths[1], Some(&json!({"role": "ops"}))),
            (Method::DELETE, &paths[1], None),
        ] {
            let response = admin_request(&gateway, token, method.clone(), path, body).await;
            assert_eq!(response.status(), 401, "{method} {path} with {token:?}");
            let text = response.text().await.unwrap();
            error_message(&serde_json::from_str(&text).unwrap());
            assert!(!text.contains(&id) && !text.contains(&key[..11]), "{text}");
        }
    }
    let (_, listed) = admin(&gateway, Method::GET, "/admin/virtual-keys", None).await;
    let shown = &listed["virtual_keys"];
    assert_eq!(
        shown.as_array().unwrap().len(),
        1,
        "nothing was created: {shown}"
    );
    assert_eq!(
        (&shown[0]["role"], &shown[0]["state"]),
        (&json!("ae"), &json!("active"))
    );
    assert_eq!(
        call(&gateway, &key, "r").await,
        200,
        "nor changed or revoked"
    );

    // Without an admin token the admin API is off.
    let off = gateway_without_admin().await;
    let response = admin_request(&off, Some(TOKEN), Method::GET, "/admin/virtual-keys", None).await;
    assert_eq!(response.status(), 404);
}

async fn gateway_without_admin() -> Gateway {
    gateway("[auth]\nrequired = true\n").await
}

#[tokio::test]
async fn an_expired_key_is_refused_with_a_401_and_a_log_row() {
    let (_primary, _secondary, gateway) = started().await;
    let (id, key) = create(
        &gateway,
        json!({"user": "ana", "role": "ae", "expires_in": "1h"}),
    )
    .await;
    let path = format!("/admin/virtual-keys/{id}");
    let (_, shown) = admin(&gateway, Method::GET, &path, None).await;
    let expires = shown["expires_ms"].as_i64().expect("an expiry");
    assert!(expires > now_ms() + 3_500_000, "{shown}");
    assert_eq!(call(&gateway, &key, "r").await, 200);

    // The API refuses a past expiry, so the store is told directly: the key expired a
    // second ago, as it would after an hour.
    let mut stored = gateway
        .store()
        .virtual_keys()
        .await
        .unwrap()
        .into_iter()
        .find(|k| k.id == id)
        .unwrap();
    stored.expires_ms = Some(now_ms() - 1_000);
    assert!(gateway.store().update_virtual_key(stored).await.unwrap());
    gateway.keys_current().await;

    let bearer = format!("Bearer {key}");
    let response = post_with(&gateway, &chat("r"), &[("authorization", &bearer)]).await;
    assert_eq!(response.status(), 401);
    let request_id = header(&response, "x-switchyard-request-id").to_owned();
    let body: Value = response.json().await.unwrap();
    assert!(error_message(&body).contains("expired"), "{body}");
    assert_eq!(body["error"]["type"], "authentication_error");
    let row = record(&gateway, &request_id).await;
    assert_eq!(row.status, 401);
    assert_eq!(
        row.key_id.as_deref(),
        Some(id.as_str()),
        "the row names the key"
    );
    assert_eq!(row.user.as_deref(), Some("ana"));
    let (_, shown) = admin(&gateway, Method::GET, &path, None).await;
    assert_eq!(shown["state"], "expired");

    // A later expiry brings it back on the next request.
    let (status, shown) = admin(
        &gateway,
        Method::PATCH,
        &path,
        Some(json!({"expires_in": "1d"})),
    )
    .await;
    assert_eq!(
        (status, &shown["state"]),
        (200, &json!("active")),
        "{shown}"
    );
    assert_eq!(call(&gateway, &key, "r").await, 200);
    let (_, shown) = admin(
        &gateway,
        Method::PATCH,
        &path,
        Some(json!({"expires_ms": null})),
    )
    .await;
    assert_eq!(shown["expires_ms"], Value::Null, "never expires");

    // An expiry set over the API a moment ahead takes hold by itself, with no reload. Two
    // seconds ahead, so a busy machine cannot reach it before the API has accepted it.
    let soon = now_ms() + 2_000;
    let (_, key) = create(
        &gateway,
        json!({"user": "bo", "role": "ae", "expires_ms": soon}),
    )
    .await;
    let before = call(&gateway, &key, "r").await;
    if now_ms() < soon {
        // Answered, and so judged, before the expiry: on a machine slow enough to have
        // passed it already, the request says nothing.
        assert_eq!(before, 200, "refused before its expiry");
    }
    // The passage of time is the behaviour under test, and no clock can be moved for it:
    // an expiry is a wall-clock date (`now_ms`, from `SystemTime`), which tokio's paused
    // clock does not govern. So this waits, once, for exactly the time left to it.
    while now_ms() < soon {
        let left = (soon - now_ms()).max(1) as u64;
        tokio::time::sleep(std::time::Duration::from_millis(left)).await;
    }
    assert_eq!(
        call(&gateway, &key, "r").await,
        401,
        "the key is refused on the first request after its expiry"
    );
}

#[tokio::test]
async fn the_cli_and_the_api_share_keys_and_refuse_the_same_requests() {
    let primary = scripted("primary", []).await;
    let secondary = scripted("secondary", []).await;
    let (dir, served, config) = keyed_config_on_disk(&primary, &secondary, "vkeys");
    let gateway = start(&served).await;
    let cli = |args: &[&str]| vkeys_cli(&config, args);

    let refused = cli(&[
        "create", "--user", "cli", "--role", "ae", "--models", "nowhere",
    ]);
    assert!(!refused.status.success());
    let said = String::from_utf8_lossy(&refused.stderr);
    assert!(
        said.contains("models") && said.contains("`nowhere`"),
        "{said}"
    );

    let created = cli(&["create", "--user", "cli", "--role", "ae", "--models", "r"]);
    assert!(created.status.success(), "{created:?}");
    let key = String::from_utf8(created.stdout).unwrap().trim().to_owned();
    gateway.keys_current().await;
    assert_eq!(call(&gateway, &key, "r").await, 200, "a CLI key works");
    let (_, listed) = admin(&gateway, Method::GET, "/admin/virtual-keys", None).await;
    let shown = &listed["virtual_keys"][0];
    assert_eq!(
        (&shown["user"], &shown["models"]),
        (&json!("cli"), &json!(["r"]))
    );
    assert_eq!(shown["key"], format!("{}…", &key[..11]));

    let path = format!("/admin/virtual-keys/{}", shown["id"].as_str().unwrap());
    let (status, _) = admin(&gateway, Method::DELETE, &path, None).await;
    assert_eq!(status, 200);
    assert_eq!(call(&gateway, &key, "r").await, 401, "revoked over HTTP");
    let listed = cli(&["list"]);
    let table = String::from_utf8_lossy(&listed.stdout);
    assert!(
        table.contains("revoked") && !table.contains(&key[11..]),
        "{table}"
    );

    gateway.shutdown().await.unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}

/// A key put in the store behind the gateway's back (as `switchyard vkeys create` does) works
/// on the very next request: an unknown key is looked up in the store before a 401, rather
/// than refused until the store watcher's next poll.
#[tokio::test]
async fn a_key_made_in_the_store_works_on_the_very_next_request() {
    let (_primary, _secondary, gateway) = started().await;
    for user in ["ana", "bo", "cy", "di", "ed"] {
        let issued = switchyard::auth::issue(switchyard::auth::KeyRequest {
            user: user.into(),
            role: "ae".into(),
            permissions: Vec::new(),
            models: None,
            limits: switchyard::store::LimitOverrides::default(),
        })
        .unwrap();
        gateway
            .store()
            .insert_virtual_key(issued.record)
            .await
            .unwrap();
        assert_eq!(call(&gateway, &issued.key, "r").await, 200, "{user}");
    }
    // A key that is nowhere is still refused.
    assert_eq!(call(&gateway, "sy-not-a-key-anywhere", "r").await, 401);
}
