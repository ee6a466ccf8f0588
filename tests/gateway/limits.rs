//! Virtual keys and exact per-user limits, in memory and in a real Redis.

use std::future::Future;
use std::time::Duration;

use futures_util::StreamExt;
use futures_util::future::join_all;
use serde_json::Value;
use switchyard::auth::{KeyRequest, issue};
use switchyard::fake::{Behavior, FakeHandle};
use switchyard::server::Gateway;
use switchyard::store::{LimitOverrides, Store};

use super::support::*;

const ROLES: &str = "[[roles]]\nname = \"ae\"\nrequests_per_minute = 20\n";

/// Issues a key straight into a store, returning the key itself.
pub async fn key_in(
    store: &Store,
    user: &str,
    role: &str,
    permissions: &[&str],
    models: Option<&[&str]>,
) -> String {
    let issued = issue(KeyRequest {
        user: user.into(),
        role: role.into(),
        permissions: permissions.iter().map(|p| p.to_string()).collect(),
        models: models.map(|m| m.iter().map(|s| s.to_string()).collect()),
        limits: LimitOverrides::default(),
    })
    .unwrap();
    store.insert_virtual_key(issued.record).await.unwrap();
    issued.key
}

pub async fn key(gateway: &Gateway, user: &str) -> String {
    let key = key_in(gateway.store(), user, "ae", &[], None).await;
    gateway.keys_current().await;
    key
}

pub async fn send(
    client: &reqwest::Client,
    gateway: &Gateway,
    key: &str,
    model: &str,
) -> reqwest::Response {
    client
        .post(format!("{}/v1/chat/completions", gateway.url()))
        .bearer_auth(key)
        .json(&chat(model))
        .send()
        .await
        .unwrap()
}

/// Runs `round` until one run falls inside a single calendar minute, with a second's margin
/// either side. A fixed window resets on the minute, so a run that
/// straddles it may rightly admit more; each run gets its attempt number, for fresh users.
pub async fn within_a_minute<T, F: Future<Output = T>>(mut round: impl FnMut(usize) -> F) -> T {
    let epoch_ms = || {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .expect("after 1970")
            .as_millis()
    };
    // A run lasts well under a second, so a few in a row clear the two seconds around a
    // boundary; the bound only stops a run that always lasts longer than a minute.
    const RUNS: usize = 40;
    for attempt in 0..RUNS {
        let start = epoch_ms();
        let result = round(attempt).await;
        if (start - 1000) / 60_000 == (epoch_ms() + 1000) / 60_000 {
            return result;
        }
    }
    panic!("{RUNS} runs in a row straddled a minute boundary")
}

/// Keys required, and `roles` (each test's limits for role `ae`).
pub fn keyed(roles: &str) -> TestGateway {
    TestGateway::new()
        .with("[auth]\nrequired = true\n")
        .with(roles)
}

/// [`keyed`], with route `smart` to `fake`.
pub fn limited(fake: &FakeHandle, roles: &str) -> TestGateway {
    keyed(roles)
        .provider("up", fake)
        .route("smart", &[("up", "m")], "")
}

/// Sends 25 requests at once with `key`, spread over `gateways`; counts the 200s and 429s.
pub async fn burst(client: &reqwest::Client, gateways: &[&Gateway], key: &str) -> (usize, usize) {
    let requests = (0..25).map(|i| send(client, gateways[i % gateways.len()], key, "smart"));
    let statuses: Vec<u16> = join_all(requests)
        .await
        .iter()
        .map(|r| r.status().as_u16())
        .collect();
    let ok = statuses.iter().filter(|s| **s == 200).count();
    let limited = statuses.iter().filter(|s| **s == 429).count();
    assert_eq!(ok + limited, 25, "{statuses:?}");
    (ok, limited)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_seeds_test_exactly_20_of_25_concurrent_requests_50_times() {
    let fake = scripted("up", []).await;
    let gateway = limited(&fake, ROLES).start().await;
    let client = client();
    for round in 0..50 {
        let admitted = within_a_minute(|attempt| {
            let (gateway, client) = (&gateway, &client);
            async move {
                let key = key(gateway, &format!("user-{round}-{attempt}")).await;
                burst(client, &[gateway], &key).await
            }
        })
        .await;
        assert_eq!(admitted, (20, 5), "round {round}");
    }
}

#[tokio::test]
async fn a_refusal_is_a_429_in_openai_shape_with_rate_limit_headers() {
    let fake = scripted("up", []).await;
    let gateway = limited(&fake, ROLES).start().await;
    let client = client();
    let (first, statuses, refused, user, calls_before) = within_a_minute(|attempt| {
        let (gateway, client, fake) = (&gateway, &client, &fake);
        async move {
            let user = format!("ana-{attempt}");
            let key = key(gateway, &user).await;
            let calls_before = fake.calls();
            let first = send(client, gateway, &key, "smart").await;
            let mut statuses = Vec::new();
            for _ in 0..19 {
                statuses.push(send(client, gateway, &key, "smart").await.status());
            }
            let refused = send(client, gateway, &key, "smart").await;
            (first, statuses, refused, user, calls_before)
        }
    })
    .await;
    assert_eq!(header(&first, "x-ratelimit-limit-requests"), "20");
    assert_eq!(header(&first, "x-ratelimit-remaining-requests"), "19");
    assert!(!header(&first, "x-ratelimit-reset-requests").is_empty());
    assert!(statuses.iter().all(|s| *s == 200), "{statuses:?}");
    assert_eq!(refused.status(), 429);
    let retry_after: u64 = header(&refused, "retry-after").parse().unwrap();
    assert!((1..=60).contains(&retry_after));
    assert_eq!(header(&refused, "x-ratelimit-remaining-requests"), "0");
    let id = header(&refused, "x-switchyard-request-id").to_owned();
    let body: Value = refused.json().await.unwrap();
    assert!(error_message(&body).contains("requests per minute"));
    assert_eq!(body["error"]["type"], "rate_limit_error");
    let row = record(&gateway, &id).await;
    assert_eq!(row.outcome.as_str(), "rejected");
    assert_eq!(row.user.as_deref(), Some(user.as_str()));
    assert_eq!(fake.calls() - calls_before, 20);
}

#[tokio::test]
async fn another_user_is_unaffected() {
    let fake = scripted("up", []).await;
    let gateway = limited(&fake, ROLES).start().await;
    let client = client();
    let (admitted, other) = within_a_minute(|attempt| {
        let (gateway, client) = (&gateway, &client);
        async move {
            let ana = key(gateway, &format!("ana-{attempt}")).await;
            let bo = key(gateway, &format!("bo-{attempt}")).await;
            let admitted = burst(client, &[gateway], &ana).await;
            (admitted, send(client, gateway, &bo, "smart").await.status())
        }
    })
    .await;
    assert_eq!(admitted, (20, 5));
    assert_eq!(other, 200);
}

#[tokio::test]
async fn tokens_per_minute_refuse_once_the_answers_used_them() {
    let fake = scripted("up", [Behavior::ok().content("one two three four five")]).await;
    let roles = "[[roles]]\nname = \"ae\"\ntokens_per_minute = 10\n";
    let gateway = limited(&fake, roles).start().await;
    let client = client();
    let (first, third) = within_a_minute(|attempt| {
        let (gateway, client) = (&gateway, &client);
        async move {
            let key = key(gateway, &format!("ana-{attempt}")).await;
            // Each answer uses 5 completion tokens plus its prompt's.
            let first = send(client, gateway, &key, "smart").await;
            record(gateway, header(&first, "x-switchyard-request-id")).await;
            let second = send(client, gateway, &key, "smart").await;
            record(gateway, header(&second, "x-switchyard-request-id")).await;
            (first, send(client, gateway, &key, "smart").await)
        }
    })
    .await;
    assert_eq!(header(&first, "x-ratelimit-limit-tokens"), "10");
    assert_eq!(third.status(), 429);
    let body: Value = third.json().await.unwrap();
    assert!(error_message(&body).contains("tokens per minute"));
}

#[tokio::test]
async fn keys_are_checked_by_bearer_or_x_api_key() {
    let fake = scripted("up", []).await;
    let gateway = limited(&fake, ROLES).start().await;
    let client = client();
    let url = format!("{}/v1/chat/completions", gateway.url());

    let missing = client.post(&url).json(&chat("smart")).send().await.unwrap();
    assert_eq!(missing.status(), 401);
    let missing_id = header(&missing, "x-switchyard-request-id").to_owned();
    error_message(&missing.json().await.unwrap());
    assert_eq!(
        record(&gateway, &missing_id).await.outcome.as_str(),
        "rejected"
    );

    let unknown = send(&client, &gateway, "sy-not-a-real-key", "smart").await;
    assert_eq!(unknown.status(), 401);

    let key = key(&gateway, "ana").await;
    let by_header = client
        .post(&url)
        .header("x-api-key", &key)
        .json(&chat("smart"))
        .send()
        .await
        .unwrap();
    assert_eq!(by_header.status(), 200);
    assert_eq!(fake.calls(), 1);
}

#[tokio::test]
async fn a_key_may_use_only_its_models_and_forced_fallback_needs_debug() {
    let primary = scripted("primary", []).await;
    let secondary = scripted("secondary", []).await;
    let gateway = keyed(ROLES)
        .provider("primary", &primary)
        .provider("secondary", &secondary)
        .route("smart", &[("primary", "m"), ("secondary", "m")], "")
        .route("other", &[("primary", "m")], "")
        .start()
        .await;
    let client = client();
    let narrow = key_in(gateway.store(), "ana", "ae", &[], Some(&["smart"])).await;
    let debug = key_in(gateway.store(), "ops", "ae", &["debug"], None).await;
    gateway.keys_current().await;

    assert_eq!(
        send(&client, &gateway, &narrow, "smart").await.status(),
        200
    );
    let other = send(&client, &gateway, &narrow, "other").await;
    assert_eq!(other.status(), 403);
    error_message(&other.json().await.unwrap());

    let forced = |key: String| {
        client
            .post(format!("{}/v1/chat/completions", gateway.url()))
            .bearer_auth(key)
            .header("x-switchyard-force-fallback", "true")
            .json(&chat("smart"))
            .send()
    };
    assert_eq!(forced(narrow.clone()).await.unwrap().status(), 403);
    let allowed = forced(debug).await.unwrap();
    assert_eq!(allowed.status(), 200);
    assert_eq!(header(&allowed, "x-switchyard-step"), "1");
}

#[tokio::test]
async fn a_revoked_key_stops_working_on_a_running_gateway_within_a_second() {
    let fake = scripted("up", []).await;
    let path = std::env::temp_dir().join(format!("switchyard-revoke-{}.db", uuid::Uuid::now_v7()));
    let config = limited(&fake, ROLES)
        .with("[store]\n")
        .set("url", format!("sqlite://{}", path.display()));
    let gateway = config.start().await;
    let client = client();
    let key = key(&gateway, "ana").await;
    assert_eq!(send(&client, &gateway, &key, "smart").await.status(), 200);

    // Revoke from another process, as an operator would, through the CLI.
    let config_path =
        std::env::temp_dir().join(format!("switchyard-revoke-{}.toml", uuid::Uuid::now_v7()));
    std::fs::write(&config_path, config.text()).unwrap();
    let revoked = std::process::Command::new(env!("CARGO_BIN_EXE_switchyard"))
        .args(["vkeys", "revoke", "--config"])
        .arg(&config_path)
        .arg(&key)
        .status()
        .unwrap();
    assert!(revoked.success());
    tokio::time::timeout(Duration::from_secs(1), gateway.keys_current())
        .await
        .expect("the gateway sees the revocation within 1 s");
    assert_eq!(send(&client, &gateway, &key, "smart").await.status(), 401);
    for file in [config_path.clone(), path.clone()] {
        let _ = std::fs::remove_file(file);
    }
}

#[tokio::test]
async fn max_concurrent_is_released_when_a_client_disconnects() {
    let fake = scripted("up", [Behavior::ok().chunks(100, 50)]).await;
    let roles = "[[roles]]\nname = \"ae\"\nmax_concurrent = 1\n";
    let gateway = limited(&fake, roles).start().await;
    let client = client();
    let key = key(&gateway, "ana").await;
    let stream = client
        .post(format!("{}/v1/chat/completions", gateway.url()))
        .bearer_auth(&key)
        .json(&chat_stream("smart"))
        .send()
        .await
        .unwrap();
    let id = header(&stream, "x-switchyard-request-id").to_owned();
    let mut body = stream.bytes_stream();
    body.next().await.unwrap().unwrap();
    let busy = send(&client, &gateway, &key, "smart").await;
    assert_eq!(busy.status(), 429, "one stream is in flight");
    drop(body);
    // The permit is released before the record is written, so the row means the slot is free.
    record(&gateway, &id).await;
    assert_eq!(send(&client, &gateway, &key, "smart").await.status(), 200);
}

#[tokio::test]
async fn anthropic_clients_authenticate_by_x_api_key_and_are_refused_in_their_shape() {
    let fake = scripted("up", []).await;
    let roles = "[[roles]]\nname = \"ae\"\nrequests_per_minute = 1\n";
    let gateway = limited(&fake, roles).start().await;
    let client = client();
    let key = key(&gateway, "ana").await;
    let send_message = || {
        client
            .post(format!("{}/v1/messages", gateway.url()))
            .header("x-api-key", &key)
            .header("anthropic-version", "2023-06-01")
            .json(&message("smart", false))
            .send()
    };
    let first = send_message().await.unwrap();
    assert_eq!(first.status(), 200);
    let refused = send_message().await.unwrap();
    assert_eq!(refused.status(), 429);
    assert!(!header(&refused, "retry-after").is_empty());
    assert_eq!(header(&refused, "x-ratelimit-remaining-requests"), "0");
    let body: Value = refused.json().await.unwrap();
    assert_eq!(body["type"], "error", "{body}");
    assert_eq!(body["error"]["type"], "rate_limit_error", "{body}");

    let unauthenticated = client
        .post(format!("{}/v1/messages", gateway.url()))
        .json(&message("smart", false))
        .send()
        .await
        .unwrap();
    assert_eq!(unauthenticated.status(), 401);
    let body: Value = unauthenticated.json().await.unwrap();
    assert_eq!(body["error"]["type"], "authentication_error", "{body}");
}

#[tokio::test]
async fn models_lists_what_the_callers_key_may_use() {
    let fake = scripted("up", []).await;
    let gateway = limited(&fake, ROLES)
        .route("other", &[("up", "n")], "")
        .start()
        .await;
    let narrow = key_in(gateway.store(), "ana", "ae", &[], Some(&["smart"])).await;
    gateway.keys_current().await;
    let client = client();
    let url = format!("{}/v1/models", gateway.url());
    assert_eq!(client.get(&url).send().await.unwrap().status(), 401);
    let listed = send_for_json(client.get(&url).bearer_auth(&narrow)).await;
    let ids: Vec<&str> = listed["data"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|m| m["id"].as_str())
        .collect();
    assert_eq!(ids, ["smart"]);
}
