//! The secret appears in no log line, metric, error body, header, `Debug` output or
//! plain-text byte of the SQLite file, through put, rotation, requests, a 401 that
//! echoes the key back, and a provider that echoes it in a 400, a 422 and a stream's
//! error event. (`tests/gateway/secrets.rs` covers every provider kind and answer path.)
//!
//! Its own test binary, so no other test's thread can reach a log call site first: tracing
//! caches a call site's interest process-wide, and a site first hit where no subscriber is
//! set can stay switched off for this test's capturing subscriber.

// Tests and benches stop at the first surprise: unwrap, expect and panic are how they say so.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

#[path = "gateway/support.rs"]
#[allow(dead_code)]
mod support;

#[path = "common/keyed.rs"]
mod keyed;

use std::io::Write;
use std::sync::{Arc, Mutex};

use serde_json::{Value, json};
use switchyard::fake::Behavior;
use switchyard::keys::Secret;
use switchyard::server::Gateway;
use tracing_subscriber::fmt::MakeWriter;

use keyed::{keyed_config, keyed_primary, put_key, with_admin};
use support::*;

const TOKEN: &str = "admin-token-for-the-leak-test";

/// An admin call with [`TOKEN`].
async fn admin(
    gateway: &Gateway,
    method: reqwest::Method,
    path: &str,
    body: Option<Value>,
) -> reqwest::Response {
    admin_request(gateway, Some(TOKEN), method, path, body.as_ref()).await
}

const FIRST: &str = "sk-live-FIRSTSECRET-7f3a9c";
const SECOND: &str = "sk-live-SECONDSECRET-b81e44";

#[derive(Clone, Default)]
struct Capture(Arc<Mutex<Vec<u8>>>);

impl Write for Capture {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a> MakeWriter<'a> for Capture {
    type Writer = Capture;

    fn make_writer(&'a self) -> Capture {
        self.clone()
    }
}

fn assert_clean(what: &str, text: &str) {
    for secret in [FIRST, SECOND, "FIRSTSECRET", "SECONDSECRET"] {
        assert!(!text.contains(secret), "{what} leaks `{secret}`:\n{text}");
    }
}

#[tokio::test(flavor = "current_thread")]
async fn the_secret_is_never_exposed() {
    let capture = Capture::default();
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::TRACE)
        .with_writer(capture.clone())
        .finish();
    // The only test in this process, so the subscriber can be every thread's.
    tracing::subscriber::set_global_default(subscriber).expect("the first subscriber");

    // The primary takes only another key and echoes whatever it got back in its 401.
    let primary = keyed_primary("sk-the-right-one-0000").await;
    let secondary = scripted("secondary", [switchyard::fake::Behavior::status(500)]).await;
    // A provider that takes the key, then echoes it (whole, then in part) in its answers.
    let echo = |message: &str| {
        json!({"error": {"message": message, "type": "invalid_request_error"}}).to_string()
    };
    let echoer = scripted(
        "echoer",
        [
            Behavior::status(400).body(&echo(&format!("bad key {FIRST}"))),
            Behavior::status(422).body(&echo("key ending FIRSTSECRET-7f3a9c")),
            Behavior::ok()
                .error_after(1)
                .error_message(&format!("bad key {FIRST}")),
        ],
    )
    .await;
    let db = std::env::temp_dir().join(format!("switchyard-leak-{}.db", uuid::Uuid::now_v7()));
    let config = keyed_config(&primary, &secondary)
        .with("[store]\n")
        .set("url", format!("sqlite://{}", db.display()))
        .provider_at("echoer", &echoer.base_url(), "")
        .route("e", &[("echoer", "model-e")], "");
    let gateway = with_admin(config, TOKEN).await;
    gateway
        .put_provider_key("echoer", "main", FIRST)
        .await
        .unwrap();
    put_key(&gateway, TOKEN, FIRST).await;
    put_key(&gateway, TOKEN, SECOND).await;

    let mut seen = String::new();
    for _ in 0..3 {
        let response = post(&gateway, &chat("r")).await;
        assert_eq!(response.status(), 503);
        for (name, value) in response.headers() {
            seen.push_str(&format!("{name}: {}\n", value.to_str().unwrap_or("")));
        }
        seen.push_str(&response.text().await.unwrap());
    }
    for (body, status) in [(chat("e"), 400), (chat("e"), 422), (chat_stream("e"), 200)] {
        let response = post(&gateway, &body).await;
        assert_eq!(response.status(), status);
        for (name, value) in response.headers() {
            seen.push_str(&format!("{name}: {}\n", value.to_str().unwrap_or("")));
        }
        let text = response.text().await.unwrap();
        assert!(
            text.contains("[redacted]"),
            "the echo came back, scrubbed: {text}"
        );
        seen.push_str(&text);
    }
    assert!(
        echoer
            .requests()
            .iter()
            .all(|r| r.headers["authorization"].contains(FIRST)),
        "the echoer got the key"
    );
    assert!(
        primary
            .requests()
            .iter()
            .any(|r| r.headers["authorization"].contains(SECOND)),
        "the key really was sent upstream, and echoed back"
    );
    let listed = admin(&gateway, reqwest::Method::GET, "/admin/keys", None).await;
    seen.push_str(&listed.text().await.unwrap());
    let breakers = admin(&gateway, reqwest::Method::GET, "/admin/breakers", None).await;
    seen.push_str(&breakers.text().await.unwrap());
    let metrics = client()
        .get(format!("{}/metrics", gateway.url()))
        .bearer_auth(TOKEN)
        .send()
        .await
        .unwrap();
    seen.push_str(&metrics.text().await.unwrap());
    let rollback = admin(
        &gateway,
        reqwest::Method::POST,
        "/admin/keys/primary/rollback",
        None,
    )
    .await;
    seen.push_str(&rollback.text().await.unwrap());
    assert_clean("answers, headers, /metrics and the admin API", &seen);

    let ring = &gateway.keys().ring;
    let lease = ring.pick(&switchyard::config::ProviderId("primary".into()), &[]);
    let debug = format!(
        "{lease:?} {:?} {:?}",
        Secret::new(FIRST),
        gateway.telemetry().recent()
    );
    assert!(lease.is_some());
    assert_clean("Debug output", &debug);

    // A virtual key made over the admin API, used, listed, read, changed and revoked: its
    // random part is in the creation answer and nowhere else.
    let created = admin(
        &gateway,
        reqwest::Method::POST,
        "/admin/virtual-keys",
        Some(json!({"user": "ana", "role": "default"})),
    )
    .await;
    assert_eq!(created.status(), 201);
    let created: Value = created.json().await.unwrap();
    let virtual_key = created["secret"].as_str().unwrap().to_owned();
    let hidden = virtual_key[11..].to_owned();
    let path = format!("/admin/virtual-keys/{}", created["id"].as_str().unwrap());
    let bearer = format!("Bearer {virtual_key}");
    let used = post_with(&gateway, &chat("r"), &[("authorization", &bearer)]).await;
    let mut answers = format!("{:?}", used.headers());
    answers.push_str(&used.text().await.unwrap());
    for (method, path, body) in [
        (reqwest::Method::GET, "/admin/virtual-keys", None),
        (reqwest::Method::GET, path.as_str(), None),
        (
            reqwest::Method::PATCH,
            path.as_str(),
            Some(json!({"requests_per_minute": 100})),
        ),
        (reqwest::Method::DELETE, path.as_str(), None),
    ] {
        let response = admin(&gateway, method, path, body).await;
        assert_eq!(response.status(), 200);
        answers.push_str(&response.text().await.unwrap());
    }
    answers.push_str(&format!(
        "{:?}",
        gateway.store().virtual_keys().await.unwrap()
    ));
    assert!(
        !answers.contains(&hidden),
        "the virtual key leaks:\n{answers}"
    );

    gateway.telemetry().wait_for_rows(7).await;
    let logs = String::from_utf8_lossy(&capture.0.lock().unwrap()).into_owned();
    assert!(logs.contains("request"), "the request log was captured");
    assert_clean("the logs", &logs);
    assert!(
        logs.contains("virtual key created"),
        "admin changes are logged"
    );
    assert!(
        !logs.contains(&hidden),
        "the logs leak the virtual key:\n{logs}"
    );

    for suffix in ["", "-wal"] {
        let path = format!("{}{suffix}", db.display());
        let bytes = std::fs::read(&path).unwrap_or_default();
        let text = String::from_utf8_lossy(&bytes);
        assert_clean(&format!("the store file {path}"), &text);
        assert!(!text.contains(&hidden), "{path} holds the virtual key");
    }
    for suffix in ["", "-wal", "-shm", ".key"] {
        let _ = std::fs::remove_file(format!("{}{suffix}", db.display()));
    }
}
