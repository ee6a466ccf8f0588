//! Budgets on the real Redis at 127.0.0.1:6379: three gateways on one Redis, a key prefix per
//! test. Run by the `services` binary, which skips them, saying so, where Redis is missing.

use std::time::Duration;

use switchyard::budgets::{Budget, Period, RedisBudgets, Verdict};
use switchyard::config::{DEFAULT_LEASE, RedisTarget};
use switchyard::fake::Behavior;
use switchyard::limits::RedisLimiter;
use switchyard::server::Gateway;

use super::budgets::{ask, burst, config, five_word_fake, settled_dollars};
use super::services::redis_seconds;
use super::support::*;

fn prefix() -> String {
    format!("switchyard-test-budgets-{}", uuid::Uuid::now_v7())
}

/// `config`, with its limits (and so its budgets) on the real Redis under `prefix`.
fn on_redis(config: TestGateway, prefix: &str) -> TestGateway {
    config
        .with("[limits]\nbackend = \"redis\"\nredis_url = \"redis://127.0.0.1:6379\"\n")
        .with("on_backend_error = \"closed\"\n")
        .set("key_prefix", prefix)
}

/// What Redis holds of the anonymous caller's spend today, in micro-dollars.
async fn spent_today(prefix: &str) -> u64 {
    let seconds = redis_seconds("redis://127.0.0.1:6379").await;
    let client = ::redis::Client::open("redis://127.0.0.1:6379").unwrap();
    let mut connection = client.get_multiplexed_async_connection().await.unwrap();
    let key = format!("{prefix}:{{user:anonymous}}:spend:day:{}", seconds / 86_400);
    let spent: Option<u64> = ::redis::cmd("GET")
        .arg(key)
        .query_async(&mut connection)
        .await
        .unwrap();
    spent.unwrap_or(0)
}

pub async fn three_gateways_on_one_redis_admit_exactly_twenty_of_fifty() {
    let fake = five_word_fake().await;
    let prefix = prefix();
    let config = on_redis(config(&fake, 0.102), &prefix);
    let gateways = [
        config.start().await,
        config.start().await,
        config.start().await,
    ];
    let refs: Vec<&Gateway> = gateways.iter().collect();
    assert_eq!(burst(&refs, &ask("r", 5), 50).await, (20, 30));
    assert_eq!(fake.calls(), 20);
    // Every answer is settled (at its reservation: five words cost what five tokens
    // reserve) before it is sent, so Redis holds the settled spend now.
    let spent = spent_today(&prefix).await;
    assert_eq!(spent, 100_000);
    let mut settled = 0.0;
    for gateway in &gateways {
        settled += settled_dollars(gateway).await;
    }
    assert!((settled - 0.1).abs() < 1e-9, "{settled}");
}

pub async fn settling_on_redis_returns_the_unused_part() {
    let fake = scripted("up", [Behavior::ok().content("two words")]).await;
    let prefix = prefix();
    let config = on_redis(config(&fake, 0.025), &prefix);
    let gateways = [config.start().await, config.start().await];
    let mut admitted = 0;
    while post(&gateways[admitted % 2], &ask("r", 10)).await.status() == 200 {
        admitted += 1;
        assert!(admitted < 20, "the budget never ran out");
    }
    assert_eq!(admitted, 8);
    assert_eq!(spent_today(&prefix).await, 16_000);
}

pub async fn the_scripts_are_idempotent_by_request_id() {
    let prefix = prefix();
    let limiter = RedisLimiter::new(
        &RedisTarget::url("redis://127.0.0.1:6379"),
        &prefix,
        DEFAULT_LEASE,
    )
    .unwrap();
    let budgets = RedisBudgets::on(limiter, Duration::from_secs(60));
    let budget = Budget {
        per_day: Some(25_000),
        per_month: None,
    };
    let owner = "user:anonymous";
    let reserve = async |request: &str, cents: u64| {
        budgets
            .reserve(owner, request, cents, budget)
            .await
            .unwrap()
    };
    for _ in 0..3 {
        // A retried admission of the same request reserves once.
        let verdict = reserve("req-1", 10_000).await;
        assert_eq!(
            verdict,
            Verdict::Reserved {
                remaining: Some(15_000)
            }
        );
    }
    assert_eq!(spent_today(&prefix).await, 10_000);
    reserve("req-2", 10_000).await;
    let third = reserve("req-3", 10_000).await;
    assert!(
        matches!(third, Verdict::Exceeded { spent: 20_000, .. }),
        "{third:?}"
    );
    // A retried settlement releases once, and a settled request cannot reserve again.
    assert!(budgets.try_settle(owner, "req-1", 2_000).await.unwrap());
    assert!(!budgets.try_settle(owner, "req-1", 2_000).await.unwrap());
    assert_eq!(spent_today(&prefix).await, 12_000);
    reserve("req-1", 10_000).await;
    assert_eq!(spent_today(&prefix).await, 12_000);
    // A settlement of a request never reserved changes nothing.
    assert!(!budgets.try_settle(owner, "req-9", 0).await.unwrap());
    let never = reserve("req-4", 30_000).await;
    assert_eq!(
        never,
        Verdict::NeverFits {
            period: Period::Day,
            budget: 25_000
        }
    );
}
