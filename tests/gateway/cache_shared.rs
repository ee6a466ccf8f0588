//! The response cache kept in Redis, against real gateways and a real Redis: identical misses
//! on three instances make one upstream call, an answer kept by one instance is served and
//! purged by another, a failed lock holder hands over, and a Redis that stops or hangs fails
//! no request.

use std::time::Duration;

use futures_util::future::join_all;
use futures_util::stream::{self, StreamExt};
use serde_json::{Value, json};
use switchyard::fake::{Behavior, FakeHandle};
use switchyard::server::Gateway;

use super::redis_faults::proxy::Proxy;
use super::services::RedisServer;
use super::support::*;
use super::telemetry::{parse_metrics, sample};

const TOKEN: &str = "admin-token-for-shared-cache-tests";
const SHARED_REDIS: &str = "redis://127.0.0.1:6379";
/// How long a test waits for something that should happen within a second or two.
const PATIENCE: Duration = Duration::from_secs(10);

/// Route `r` over `fake`, whose answers every caller shares, kept in the Redis at `url`
/// under a prefix no other test uses.
fn kept_in_redis(fake: &FakeHandle, url: &str) -> TestGateway {
    let prefix = format!("switchyard-cache-test-{}", uuid::Uuid::now_v7());
    kept_under(fake, url, &prefix)
}

fn kept_under(fake: &FakeHandle, url: &str, prefix: &str) -> TestGateway {
    TestGateway::new()
        .with(OBSERVABILITY)
        .with("[cache]\nbackend = \"redis\"\n")
        .set("redis_url", url)
        .set("key_prefix", prefix)
        .provider("p", fake)
        .route(
            "r",
            &[("p", "m")],
            "cache = { ttl = \"1h\", scope = \"shared\" }",
        )
}

fn ask(text: &str) -> Value {
    json!({"model": "r", "messages": [{"role": "user", "content": text}]})
}

/// The status, `x-switchyard-cache` and body of one request.
async fn send(gateway: &Gateway, body: &Value) -> (u16, String, Value) {
    let response = post(gateway, body).await;
    let status = response.status().as_u16();
    let cache = header(&response, "x-switchyard-cache").to_owned();
    (status, cache, response.json().await.unwrap_or(Value::Null))
}

async fn backend_errors(gateway: &Gateway) -> f64 {
    let text = observe(gateway, "/metrics").await.text().await.unwrap();
    sample(
        &parse_metrics(&text),
        "switchyard_cache_backend_errors_total",
        &[],
    )
}

pub async fn fifty_identical_misses_over_three_instances_make_one_upstream_call() {
    let fake = scripted("p", []).await;
    let config = kept_in_redis(&fake, SHARED_REDIS);
    let instances = [
        config.start().await,
        config.start().await,
        config.start().await,
    ];
    fake.hold();
    let body = ask("hello");
    // The first goes upstream through instance 0, holding the lock in Redis; the other 49,
    // spread over the three, wait on it: in their own instance, or through Redis.
    let first = send(&instances[0], &body);
    let rest = async {
        fake.wait_until(|stats| stats.calls == 1).await;
        join_all((0..49).map(|i| send(&instances[i % 3], &body))).await
    };
    let release = async {
        let all_waiting = async {
            fake.wait_until(|stats| stats.calls == 1).await;
            for (instance, waiting) in instances.iter().zip([17, 16, 16]) {
                instance.cache().wait_waiting(|n| *n == waiting).await;
            }
        };
        let waited = tokio::time::timeout(PATIENCE, all_waiting).await;
        fake.release();
        waited.expect("49 requests wait on the first, on three instances");
    };
    let (first, rest, ()) = tokio::join!(first, rest, release);
    assert_eq!(fake.calls(), 1, "one upstream call for fifty requests");
    assert_eq!((first.0, first.1.as_str()), (200, "miss"));
    for (status, cache, answer) in &rest {
        assert_eq!((*status, cache.as_str()), (200, "coalesced"));
        assert_eq!(answer, &first.2, "the leader's answer, byte for byte");
    }
}

pub async fn an_answer_kept_by_one_instance_is_served_and_purged_by_another() {
    let fake = scripted("p", []).await;
    let config = kept_in_redis(&fake, SHARED_REDIS);
    let (one, other) = (
        start_with_admin(&config, TOKEN).await,
        start_with_admin(&config, TOKEN).await,
    );
    let (_, cache, kept) = send(&one, &ask("hello")).await;
    assert_eq!(cache, "miss");
    let hit = post(&other, &ask("hello")).await;
    assert_eq!(header(&hit, "x-switchyard-cache"), "hit");
    assert_eq!(header(&hit, "x-switchyard-step"), "0");
    assert!(header(&hit, "age").parse::<u64>().is_ok());
    assert_eq!(hit.json::<Value>().await.unwrap(), kept);

    let stats = get_json(&format!("{}/admin/cache", other.admin_url()), TOKEN).await;
    assert_eq!(
        (stats["backend"].as_str(), stats["entries"].as_u64()),
        (Some("redis"), Some(1))
    );
    assert_eq!(stats["hits"], 1, "each instance counts its own lookups");
    let purge = |path: &'static str| {
        admin_request(&other, Some(TOKEN), reqwest::Method::DELETE, path, None)
    };
    let purged: Value = purge("/admin/cache?route=elsewhere")
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(purged["purged"], 0);
    let purged: Value = purge("/admin/cache?route=r").await.json().await.unwrap();
    assert_eq!(purged["purged"], 1);
    assert_eq!(
        send(&one, &ask("hello")).await.1,
        "miss",
        "gone for every instance"
    );
    assert_eq!(fake.calls(), 2);
}

pub async fn every_key_the_cache_writes_in_redis_expires_within_the_routes_ttl() {
    let fake = scripted("p", []).await;
    let prefix = format!("switchyard-cache-test-{}", uuid::Uuid::now_v7());
    let gateway = kept_under(&fake, SHARED_REDIS, &prefix).start().await;
    for text in ["one", "two", "one"] {
        send(&gateway, &ask(text)).await;
    }
    let client = ::redis::Client::open(SHARED_REDIS).unwrap();
    let mut redis = client.get_multiplexed_async_connection().await.unwrap();
    let keys: Vec<String> = ::redis::cmd("KEYS")
        .arg(format!("{prefix}:*"))
        .query_async(&mut redis)
        .await
        .unwrap();
    assert_eq!(
        keys.len(),
        2,
        "one entry an answer, and no lock left: {keys:?}"
    );
    for key in keys {
        let ttl: i64 = ::redis::cmd("PTTL")
            .arg(&key)
            .query_async(&mut redis)
            .await
            .unwrap();
        assert!(0 < ttl && ttl <= 3_600_000, "{key}: {ttl} ms");
    }
}

pub async fn when_the_lock_holder_fails_a_waiter_on_another_instance_makes_its_own_call() {
    let fake = scripted("p", [Behavior::status(500), Behavior::ok()]).await;
    let config = kept_in_redis(&fake, SHARED_REDIS).with("[retry]\nattempts_per_step = 1\n");
    let (holder, waiter) = (config.start().await, config.start().await);
    fake.hold();
    let body = ask("hello");
    let failed = send(&holder, &body);
    let waited = async {
        fake.wait_until(|stats| stats.calls == 1).await;
        send(&waiter, &body).await
    };
    let release = async {
        let waiting = async {
            fake.wait_until(|stats| stats.calls == 1).await;
            waiter.cache().wait_waiting(|n| *n == 1).await;
        };
        let waited = tokio::time::timeout(PATIENCE, waiting).await;
        fake.release();
        waited.expect("the other instance waits on the lock");
    };
    let (failed, waited, ()) = tokio::join!(failed, waited, release);
    assert_ne!(failed.0, 200);
    assert_eq!((waited.0, waited.1.as_str()), (200, "miss"), "{waited:?}");
    assert_eq!(fake.calls(), 2, "the waiter went upstream itself");
}

pub async fn a_redis_that_stops_mid_load_fails_no_request_and_is_used_again_once_back() {
    let mut redis = RedisServer::start();
    let fake = scripted("p", []).await;
    let url = format!("redis://127.0.0.1:{}", redis.port);
    let gateway = kept_in_redis(&fake, &url).start().await;
    // 100 requests over 20 prompts, 10 at a time, in three rounds: with Redis, while it
    // stops (once 10 of the round's 20 new prompts have gone upstream), and without it.
    let round = |first: usize| {
        let gateway = &gateway;
        stream::iter(0..100)
            .map(move |i| async move {
                send(gateway, &ask(&format!("question {}", first + i % 20))).await
            })
            .buffer_unordered(10)
            .collect::<Vec<_>>()
    };
    let before = round(0).await;
    let stop = async {
        fake.wait_until(|stats| stats.calls >= 30).await;
        redis.stop();
    };
    let (during, ()) = tokio::join!(round(20), stop);
    let after = round(0).await;
    let answers: Vec<_> = before.iter().chain(&during).chain(&after).collect();
    let failed: Vec<_> = answers
        .iter()
        .filter(|(status, ..)| *status != 200)
        .collect();
    assert!(failed.is_empty(), "{failed:?}");
    assert!(
        before.iter().any(|(_, cache, _)| cache == "hit"),
        "it cached before"
    );
    assert!(
        backend_errors(&gateway).await > 0.0,
        "and counted going without"
    );

    redis.restart();
    let back = async {
        // Each lookup is a request, not a sleep: the gateway tries Redis again within a
        // second of its failure, and the answer kept after that is served.
        while send(&gateway, &ask("after")).await.1 != "hit" {}
    };
    tokio::time::timeout(PATIENCE, back)
        .await
        .expect("the cache is used again once Redis is back");
}

pub async fn a_redis_that_hangs_costs_a_request_its_timeout_not_its_answer() {
    let redis = RedisServer::start();
    let proxy = Proxy::start(std::net::SocketAddr::from(([127, 0, 0, 1], redis.port))).await;
    let fake = scripted("p", []).await;
    let gateway = kept_in_redis(&fake, &proxy.url()).start().await;
    assert_eq!(send(&gateway, &ask("hello")).await.1, "miss");
    assert_eq!(send(&gateway, &ask("hello")).await.1, "hit");
    proxy.freeze(true);
    let (status, cache, answer) = send(&gateway, &ask("hello")).await;
    assert_eq!((status, cache.as_str()), (200, "miss"), "{answer}");
    assert_eq!(fake.calls(), 2, "the request went upstream as if uncached");
    assert!(backend_errors(&gateway).await > 0.0);
}
