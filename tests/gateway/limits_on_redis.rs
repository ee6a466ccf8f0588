//! Limits on the real Redis at 127.0.0.1:6379, and on one the test starts and stops. Run
//! by the `services` binary, which skips them, saying so, where Redis is missing.

use switchyard::fake::FakeHandle;
use switchyard::server::Gateway;

use super::limits::{burst, send};
use super::services::{RedisServer, redis_seconds};
use super::support::*;

fn redis_config(
    fake: &FakeHandle,
    prefix: &str,
    url: &str,
    fail: &str,
    window: &str,
) -> TestGateway {
    TestGateway::new()
        .with("[auth]\nrequired = false\ndefault_role = \"ae\"\n[limits]\nbackend = \"redis\"\n")
        .set("redis_url", url)
        .set("on_backend_error", fail)
        .set("key_prefix", prefix)
        .with("[[roles]]\nname = \"ae\"\nrequests_per_minute = 20\n")
        .set("window", window)
        .provider("up", fake)
        .route("smart", &[("up", "m")], "")
}

async fn three_instances(config: &TestGateway) -> [Gateway; 3] {
    [
        config.start().await,
        config.start().await,
        config.start().await,
    ]
}

/// [`redis_config`] against the local Redis, failing closed, under a fresh prefix.
fn local_redis_config(fake: &FakeHandle, window: &str) -> TestGateway {
    redis_config(fake, &prefix(), "redis://127.0.0.1:6379", "closed", window)
}

fn prefix() -> String {
    format!("switchyard-test-{}", uuid::Uuid::now_v7())
}

/// Redis's own clock, in minutes: a fixed window's boundary is where this changes.
async fn redis_minute() -> u64 {
    redis_seconds("redis://127.0.0.1:6379").await / 60
}

pub async fn three_instances_admit_exactly_20_of_25_fifty_times() {
    let fake = scripted("up", []).await;
    let client = client();
    let mut evaluated = 0;
    for round in 0..50 {
        // A fresh prefix a round gives each round fresh counters; the window is the
        // default fixed one, on Redis's clock.
        let config = local_redis_config(&fake, "fixed");
        let gateways = three_instances(&config).await;
        let refs: Vec<&Gateway> = gateways.iter().collect();
        let before = redis_minute().await;
        let (ok, limited) = burst(&client, &refs, "sy-anonymous").await;
        // A burst that straddles a minute boundary may rightly admit more; skip judging it.
        if redis_minute().await == before {
            assert_eq!((ok, limited), (20, 5), "round {round}");
            evaluated += 1;
        }
    }
    assert!(
        evaluated >= 45,
        "only {evaluated} rounds fell inside one minute"
    );
}

pub async fn a_sliding_window_is_exact_across_instances_too() {
    let fake = scripted("up", []).await;
    let config = local_redis_config(&fake, "sliding");
    let gateways = three_instances(&config).await;
    let refs: Vec<&Gateway> = gateways.iter().collect();
    assert_eq!(burst(&client(), &refs, "sy-anonymous").await, (20, 5));
}

pub async fn a_closed_port_fails_closed_or_open_as_configured() {
    let fake = scripted("up", []).await;
    let closed = closed_addr();
    let url = format!("redis://{closed}");
    let client = client();

    let strict = redis_config(&fake, &prefix(), &url, "closed", "fixed")
        .start()
        .await;
    let refused = send(&client, &strict, "k", "smart").await;
    assert_eq!(refused.status(), 503);
    assert!(error_message(&refused.json().await.unwrap()).contains("rate-limit backend"));
    let (status, ready) = readiness(&strict).await;
    assert_eq!(status, 503);
    assert_eq!(ready["status"], "degraded");

    let lenient = redis_config(&fake, &prefix(), &url, "open", "fixed")
        .with(OBSERVABILITY)
        .start()
        .await;
    assert_eq!(send(&client, &lenient, "k", "smart").await.status(), 200);
    let (_, ready) = readiness(&lenient).await;
    assert_eq!(ready["status"], "degraded");
    let metrics = observe(&lenient, "/metrics").await.text().await.unwrap();
    assert!(
        metrics.contains("switchyard_limit_backend_errors_total 1"),
        "{metrics}"
    );
    assert_eq!(fake.calls(), 1);
}

pub async fn a_redis_that_stops_and_comes_back_is_reconnected_by_itself() {
    let mut server = RedisServer::start();
    let fake = scripted("up", []).await;
    let url = format!("redis://127.0.0.1:{}", server.port);
    let gateway = redis_config(&fake, &prefix(), &url, "closed", "fixed")
        .start()
        .await;
    let client = client();
    assert_eq!(send(&client, &gateway, "k", "smart").await.status(), 200);

    server.stop();
    assert_eq!(send(&client, &gateway, "k", "smart").await.status(), 503);
    let (_, ready) = readiness(&gateway).await;
    assert_eq!(ready["limits"]["healthy"], false);

    server.restart();
    // The connection manager reconnects on use: the next requests get through again.
    let mut statuses = Vec::new();
    for _ in 0..3 {
        statuses.push(
            send(&client, &gateway, "k", "smart")
                .await
                .status()
                .as_u16(),
        );
    }
    assert_eq!(statuses.last(), Some(&200), "{statuses:?}");
    let (_, ready) = readiness(&gateway).await;
    assert_eq!(ready["status"], "ready");
}
