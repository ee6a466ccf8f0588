//! Cluster mode on PostgreSQL: several real `switchyard serve` processes on one database.
//! Each test runs on a fresh database of its own (dropped afterwards); without PostgreSQL
//! they skip, saying so, except under `SWITCHYARD_REQUIRE_SERVICES=1`.

use std::collections::BTreeSet;
use std::time::Duration;

use serde_json::json;
use switchyard::fake::FakeHandle;
use switchyard::store::postgres::testdb::TestDb;
use tokio::time::Instant;

use super::logqueue::{QUIET, Spawned};
use super::support::*;

const BIN: &str = env!("CARGO_BIN_EXE_switchyard");
pub(super) const ADMIN_TOKEN: &str = "cluster-admin-token";
/// The master key every instance shares, so each can open the provider keys another put.
const MASTER_KEY: &str = "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=";
/// What the issue promises: a change on one instance is in effect on all within this.
pub(super) const PROPAGATION: Duration = Duration::from_secs(1);

pub(super) fn env() -> [(&'static str, &'static str); 2] {
    [
        ("SWITCHYARD_ADMIN_TOKEN", ADMIN_TOKEN),
        ("SWITCHYARD_MASTER_KEY", MASTER_KEY),
    ]
}

/// What every instance's config starts with: `[auth] required = auth` and the shared store.
pub(super) fn member(db: &TestDb, auth: bool) -> TestGateway {
    TestGateway::new()
        .with("[auth]\n")
        .set("required", auth)
        .with("[store]\n")
        .set("url", db.url())
}

/// One instance's config: the shared store, `upstream` (provider `up`), and route `r` to it.
pub(super) fn config(db: &TestDb, upstream: &str, auth: bool) -> String {
    member(db, auth)
        .with(upstream)
        .route("r", &[("up", "m")], "")
        .raw_text()
}

/// `count` instances started at the same moment on `config`.
pub(super) fn instances(config: &str, count: usize) -> Vec<Spawned> {
    Spawned::start_all(&vec![config; count], QUIET, &env())
}

/// Runs the CLI against `config`; returns its stdout.
pub(super) fn cli(config: &str, args: &[&str]) -> String {
    let path = std::env::temp_dir().join(format!("switchyard-cli-{}.toml", uuid::Uuid::now_v7()));
    std::fs::write(&path, config).unwrap();
    let output = std::process::Command::new(BIN)
        .args(args)
        .arg("--config")
        .arg(&path)
        .env("SWITCHYARD_MASTER_KEY", MASTER_KEY)
        .output()
        .unwrap();
    let _ = std::fs::remove_file(&path);
    assert!(
        output.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).unwrap()
}

pub(super) async fn send(instance: &Spawned, key: Option<&str>) -> reqwest::Response {
    let mut request = client()
        .post(format!("{}/v1/chat/completions", instance.url))
        .json(&chat("r"));
    if let Some(key) = key {
        request = request.bearer_auth(key);
    }
    request.send().await.unwrap()
}

async fn log_rows(db: &TestDb) -> i64 {
    let (client, connection) = tokio_postgres::connect(&db.url(), tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(connection);
    client
        .query_one("SELECT COUNT(*) FROM request_log", &[])
        .await
        .unwrap()
        .get(0)
}

pub async fn three_instances_starting_at_once_on_an_empty_database_migrate_it_once() {
    let db = TestDb::create().await;
    let fake = scripted("up", []).await;
    let gateways = instances(&config(&db, &provider("up", &fake), false), 3);
    for gateway in &gateways {
        gateway.ready().await;
        assert_eq!(send(gateway, None).await.status(), 200);
    }
    let migrated: usize = gateways
        .iter()
        .map(|g| {
            g.stderr
                .lock()
                .unwrap()
                .matches("PostgreSQL store migrated")
                .count()
        })
        .sum();
    let (client, connection) = tokio_postgres::connect(&db.url(), tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(connection);
    let versions: i64 = client
        .query_one("SELECT COUNT(*) FROM schema_migrations", &[])
        .await
        .unwrap()
        .get(0);
    assert!(versions > 0);
    assert_eq!(
        migrated, versions as usize,
        "each migration ran on exactly one instance"
    );
}

pub async fn three_thousand_requests_over_three_instances_are_three_thousand_rows() {
    let db = TestDb::create().await;
    let fake = scripted("up", []).await;
    let gateways = instances(&config(&db, &provider("up", &fake), false), 3);
    let urls: Vec<String> = gateways.iter().map(|g| g.url.clone()).collect();
    let workers = (0..30).map(|worker| {
        let urls = urls.clone();
        tokio::spawn(async move {
            let client = client();
            let mut ids = Vec::new();
            for i in 0..100 {
                let url = &urls[(worker + i) % urls.len()];
                let response = client
                    .post(format!("{url}/v1/chat/completions"))
                    .json(&chat("r"))
                    .send()
                    .await
                    .unwrap();
                assert_eq!(response.status(), 200);
                ids.push(header(&response, "x-switchyard-request-id").to_owned());
            }
            ids
        })
    });
    let mut ids = BTreeSet::new();
    for worker in workers {
        ids.extend(worker.await.unwrap());
    }
    assert_eq!(ids.len(), 3000, "every request has an id of its own");
    // A clean stop flushes each instance's last batch.
    for gateway in gateways {
        gateway.terminate();
    }
    assert_eq!(log_rows(&db).await, 3000);
}

/// The store's generation: what the change just made moved it to.
pub(super) async fn generation(db: &TestDb) -> i64 {
    let (client, connection) = tokio_postgres::connect(&db.url(), tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(connection);
    client
        .query_one("SELECT value FROM meta WHERE key = 'generation'", &[])
        .await
        .unwrap()
        .get(0)
}

/// Resolves once each of `instances` has said it loaded the store's changes at `generation`
/// (its own line, when its watch has them in effect); panics, with the laggard's stderr, if
/// one has not by `deadline`. Nothing else writes the store meanwhile, so every instance
/// loads exactly that generation, and a line from an earlier change cannot match.
pub(super) async fn loaded(instances: &[Spawned], generation: i64, deadline: Instant) {
    let words = format!("loaded the store's changes generation={generation}\n");
    for instance in instances {
        let left = deadline.saturating_duration_since(Instant::now());
        instance.said(&words, 0, left).await;
    }
}

/// The key the fake's last request carried.
fn last_key(fake: &FakeHandle) -> String {
    fake.requests()
        .last()
        .and_then(|r| r.headers.get("authorization").cloned())
        .unwrap_or_default()
}

async fn put_key(instance: &Spawned, secret: &str) {
    let response = client()
        .put(format!("{}/admin/keys/up", instance.url))
        .bearer_auth(ADMIN_TOKEN)
        .json(&json!({"secret": secret, "id": "main"}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200, "{}", response.text().await.unwrap());
}

pub async fn a_provider_key_rotated_on_one_instance_is_sent_by_the_others_within_a_second() {
    let db = TestDb::create().await;
    let fake = scripted("up", []).await;
    let config = member(&db, false)
        .provider_at("up", &fake.base_url(), "")
        .route("r", &[("up", "m")], "");
    let gateways = instances(&config.raw_text(), 3);
    put_key(&gateways[0], "sk-old-0000").await;
    let deadline = Instant::now() + PROPAGATION;
    loaded(&gateways, generation(&db).await, deadline).await;
    for gateway in &gateways {
        assert_eq!(send(gateway, None).await.status(), 200, "{}", gateway.url);
        // Requests go one at a time, so the fake's last request is the one just sent.
        assert_eq!(last_key(&fake), "Bearer sk-old-0000", "{}", gateway.url);
    }
    put_key(&gateways[0], "sk-new-1111").await;
    let deadline = Instant::now() + PROPAGATION;
    loaded(&gateways[1..], generation(&db).await, deadline).await;
    for gateway in &gateways[1..] {
        assert_eq!(send(gateway, None).await.status(), 200, "{}", gateway.url);
        assert_eq!(
            last_key(&fake),
            "Bearer sk-new-1111",
            "{} sends the rotated key once it has loaded it",
            gateway.url
        );
    }
}

pub fn check_and_serve_refuse_a_sslmode_they_do_not_know_and_name_a_store_they_cannot_reach() {
    let path = std::env::temp_dir().join(format!("switchyard-tls-{}.toml", uuid::Uuid::now_v7()));
    let config = |query: &str| {
        TestGateway::new()
            .with("[server]\nlisten = \"127.0.0.1:0\"\n[store]\n")
            .set(
                "url",
                format!("postgres://sy:s3cret@127.0.0.1:1/db?{query}"),
            )
            .raw_text()
    };
    let run = |command: &str| {
        let output = std::process::Command::new(BIN)
            .args([command, "--config"])
            .arg(&path)
            .env("SWITCHYARD_MASTER_KEY", MASTER_KEY)
            .output()
            .unwrap();
        assert!(!output.status.success(), "{command} refuses it");
        let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
        assert!(!stderr.contains("s3cret"), "{command}: {stderr}");
        stderr
    };
    std::fs::write(&path, config("sslmode=allow-anything")).unwrap();
    for command in ["check", "serve"] {
        let stderr = run(command);
        assert!(
            stderr.contains("store.url: sslmode=allow-anything is not one of disable, prefer"),
            "{command}: {stderr}"
        );
    }
    std::fs::write(&path, config("sslmode=require")).unwrap();
    let stderr = run("serve");
    assert!(
        stderr.contains("cannot reach PostgreSQL at 127.0.0.1:1/db"),
        "{stderr}"
    );
    let _ = std::fs::remove_file(&path);
}
