//! Cluster mode's shared breakers: gateways on one Redis open, probe and close together.
//!
//! The headline test runs three gateway processes on the machine's Redis; the others run
//! gateways in this process, and the one that takes Redis away runs a `redis-server` of its
//! own. Each test uses its own key prefix, so tests running at once never meet.

mod primary;

use std::future::Future;
use std::time::Duration;

use serde_json::Value;
use switchyard::fake::{Behavior, FakeHandle, FakeUpstream};
use tokio::time::Instant;

use super::logqueue::{QUIET, Spawned};
use super::services::RedisServer;
use super::support::*;
use primary::{Mode, Primary};

const METRICS_TOKEN: &str = "cluster-metrics-token";
/// Long enough that the checks made while a breaker is open finish inside it, even on a
/// busy machine.
const COOLDOWN: &str = "4s";

/// The sections every member shares: route `r` = primary → secondary, a breaker that opens
/// after three failures from anyone, and a [`COOLDOWN`]. The caller adds provider `primary`.
fn member_config(secondary: &FakeHandle, redis_url: &str, prefix: &str) -> TestGateway {
    TestGateway::new()
        .with("[admin]\n")
        .set("metrics_token", METRICS_TOKEN)
        .with("[cluster]\n")
        .set("redis_url", redis_url)
        .set("key_prefix", prefix)
        .with("[breaker]\nconsecutive_failures = 3\nmin_callers = 1\n")
        .set("cooldown", COOLDOWN)
        .set("cooldown_min", COOLDOWN)
        .with("[retry]\nattempts_per_step = 1\nattempt_timeout = \"20s\"\nrequest_deadline = \"30s\"\n")
        .provider("secondary", secondary)
        .route("r", &[("primary", "model-a"), ("secondary", "model-b")], "")
}

fn unique_prefix(test: &str) -> String {
    format!("sy-test-{test}-{}", uuid::Uuid::now_v7().simple())
}

/// What a member logs once its breakers are shared through the cluster's Redis.
const JOINED: &str = "breakers are shared through the cluster's Redis";

/// Polls `check` until it holds or `limit` has passed; whether it held.
///
/// A poll, for want of an event: what it looks at is a breaker's state, or whether breakers
/// are shared, in another gateway (another process, or one in this process that keeps both
/// under a lock), and neither says when they change. Where the test's claim is a deadline
/// (within a second), the poll is also the observation: each look is a real read of the
/// state, and the answer is whether one came true in time.
async fn within<F, Fut>(limit: Duration, mut check: F) -> bool
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = Instant::now() + limit;
    loop {
        if check().await {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// `switchyard_breaker_state` of the primary on the gateway at `base`: 0 closed, 2 open.
async fn primary_state(base: &str) -> Option<i64> {
    let text = metrics_text(base, METRICS_TOKEN).await;
    text.lines()
        .find(|l| l.starts_with("switchyard_breaker_state{") && l.contains("provider=\"primary\""))
        .and_then(|l| l.rsplit(' ').next()?.parse().ok())
}

async fn readiness(base: &str) -> Value {
    send_for_json(client().get(format!("{base}/readyz"))).await
}

async fn shared(base: &str) -> bool {
    readiness(base).await["breakers"]["shared"] == true
}

/// One chat request through route `r`; whether the primary answered it.
async fn ask(base: &str) -> bool {
    let response = client()
        .post(format!("{base}/v1/chat/completions"))
        .json(&chat("r"))
        .send()
        .await
        .expect("gateway answers");
    assert_eq!(response.status(), 200);
    let body: Value = response.json().await.expect("a JSON body");
    content(&body) == "from primary"
}

async fn secondary() -> FakeHandle {
    FakeUpstream::new("secondary")
        .then(Behavior::ok().content("from secondary"))
        .start()
        .await
        .unwrap()
}

pub async fn three_processes_open_together_send_one_probe_and_close_together() {
    let primary = Primary::start(Mode::Fail).await;
    let secondary = secondary().await;
    let prefix = unique_prefix("three");
    let rest = member_config(&secondary, "redis://127.0.0.1:6379", &prefix)
        .provider_at("primary", &primary.base_url(), "key_required = false")
        .text();
    let members = Spawned::start_all(&[&rest, &rest, &rest], QUIET, &[]);
    for member in &members {
        // Each says so once it has joined; generous, for a loaded machine.
        member.said(JOINED, 0, Duration::from_secs(10)).await;
        assert!(
            shared(&member.url).await,
            "{} joins the cluster",
            member.url
        );
    }
    let urls: Vec<String> = members.iter().map(|m| m.url.clone()).collect();
    let (a, others) = (&urls[0], &urls[1..]);

    // Three failures through A open the primary's breaker there.
    for _ in 0..3 {
        assert!(
            !ask(a).await,
            "the secondary serves while the primary fails"
        );
    }
    let opened = Instant::now();
    assert_eq!(primary_state(a).await, Some(2), "open on A");
    let calls_at_open = primary.calls();
    assert_eq!(calls_at_open, 3);

    // Within a second B and C have it open too, and skip the primary.
    for url in others {
        let open = within(Duration::from_secs(1), || async {
            primary_state(url).await == Some(2)
        })
        .await;
        assert!(
            open,
            "{url} has the breaker open within 1 s of the open on A"
        );
    }
    assert!(opened.elapsed() < Duration::from_secs(1));
    for url in others {
        for _ in 0..5 {
            assert!(!ask(url).await);
        }
    }
    assert_eq!(
        primary.calls(),
        calls_at_open,
        "B and C never called the primary"
    );

    // Hammer all three through the cooldown's end. The primary holds what it receives,
    // so the probe stays out while the whole cluster is looked at.
    primary.set_mode(Mode::Hold);
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut workers = Vec::new();
    for url in &urls {
        for _ in 0..4 {
            let (url, stop) = (url.clone(), stop.clone());
            workers.push(tokio::spawn(async move {
                let mut served_by_primary = 0;
                while !stop.load(std::sync::atomic::Ordering::SeqCst) {
                    if ask(&url).await {
                        served_by_primary += 1;
                    }
                }
                served_by_primary
            }));
        }
    }
    // A poll: the primary counts its calls with nothing to wait on (see `primary.rs`).
    let probed = within(Duration::from_secs(10), || async {
        primary.calls() > calls_at_open
    })
    .await;
    assert!(probed, "a probe reaches the primary after the cooldown");
    // While the probe is out, every instance keeps sending to the secondary: each asks
    // fifty more times (each worker reaching the secondary in turn), and the primary still
    // has seen exactly one probe.
    let counted = secondary.calls();
    let many = secondary.wait_until(|s| s.calls >= counted + 150);
    tokio::time::timeout(Duration::from_secs(20), many)
        .await
        .expect("the hammer goes on while the probe is out");
    assert_eq!(
        primary.calls(),
        calls_at_open + 1,
        "exactly one probe across the three instances"
    );

    // The probe succeeds: closed on all three within a second of its answer.
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    primary.release();
    let closed = within(Duration::from_secs(1), || async {
        let states = futures_util::future::join_all(urls.iter().map(|u| primary_state(u))).await;
        states.iter().all(|s| *s == Some(0))
    })
    .await;
    assert!(closed, "all three close within 1 s of the probe's success");
    for worker in workers {
        worker.await.unwrap();
    }
    for url in others {
        assert!(ask(url).await, "{url} sends to the primary again");
    }
}

/// Two gateways in this process on one cluster.
async fn pair(
    primary: &FakeHandle,
    secondary: &FakeHandle,
    redis_url: &str,
    prefix: &str,
) -> (switchyard::server::Gateway, switchyard::server::Gateway) {
    let rest = member_config(secondary, redis_url, prefix).provider("primary", primary);
    let one = rest.start().await;
    let two = rest.start().await;
    for g in [&one, &two] {
        assert!(within(Duration::from_secs(10), || async { shared(&g.url()).await }).await);
    }
    (one, two)
}

async fn failing_primary() -> FakeHandle {
    FakeUpstream::new("primary")
        .then(Behavior::status(500))
        .start()
        .await
        .unwrap()
}

pub async fn a_reset_on_one_instance_closes_the_breaker_on_all() {
    let (primary, secondary) = (failing_primary().await, secondary().await);
    let prefix = unique_prefix("reset");
    let (one, two) = pair(&primary, &secondary, "redis://127.0.0.1:6379", &prefix).await;
    for _ in 0..3 {
        ask(&one.url()).await;
    }
    let open_on_two = within(Duration::from_secs(1), || async {
        primary_state(&two.url()).await == Some(2)
    })
    .await;
    assert!(open_on_two);
    assert_eq!(two.health().reset(Some("primary"), None), 1);
    let closed_on_one = within(Duration::from_secs(1), || async {
        primary_state(&one.url()).await == Some(0)
    })
    .await;
    assert!(
        closed_on_one,
        "a reset on one instance closes the breaker on the other"
    );
}

pub async fn an_instance_that_joins_later_reads_the_open_breakers() {
    let (primary, secondary) = (failing_primary().await, secondary().await);
    let prefix = unique_prefix("late");
    let rest =
        member_config(&secondary, "redis://127.0.0.1:6379", &prefix).provider("primary", &primary);
    let early = rest.start().await;
    assert!(
        within(Duration::from_secs(10), || async {
            shared(&early.url()).await
        })
        .await
    );
    for _ in 0..3 {
        ask(&early.url()).await;
    }
    let calls = primary.calls();
    let late = rest.start().await;
    let open = within(Duration::from_secs(10), || async {
        shared(&late.url()).await && primary_state(&late.url()).await == Some(2)
    })
    .await;
    assert!(
        open,
        "the shared state read at joining has the breaker open"
    );
    assert!(!ask(&late.url()).await);
    assert_eq!(primary.calls(), calls);
}

pub async fn without_redis_breakers_are_local_and_rejoin_when_it_returns() {
    let mut redis = RedisServer::start();
    let (primary, secondary) = (failing_primary().await, secondary().await);
    let url = format!("redis://127.0.0.1:{}", redis.port);
    let (one, two) = pair(&primary, &secondary, &url, &unique_prefix("away")).await;
    let metric = |base: String| async move {
        metrics_text(&base, METRICS_TOKEN)
            .await
            .lines()
            .find_map(|l| {
                l.strip_prefix("switchyard_breakers_shared ")
                    .map(str::to_owned)
            })
    };
    assert_eq!(metric(one.url()).await.as_deref(), Some("1"));

    redis.stop();
    for g in [&one, &two] {
        let local = within(Duration::from_secs(5), || async { !shared(&g.url()).await }).await;
        assert!(local, "breakers go local when Redis is away");
        let ready = readiness(&g.url()).await;
        assert_eq!(ready["breakers"]["mode"], "cluster");
        assert!(ready["breakers"]["error"].is_string(), "{ready}");
        assert_eq!(metric(g.url()).await.as_deref(), Some("0"));
    }
    // Local breakers still protect each instance: the first opens alone.
    for _ in 0..3 {
        assert!(!ask(&one.url()).await);
    }
    assert_eq!(primary_state(&one.url()).await, Some(2));
    let calls = primary.calls();
    assert!(!ask(&one.url()).await);
    assert_eq!(primary.calls(), calls, "the open breaker is skipped");
    assert!(!ask(&two.url()).await);
    assert_eq!(
        primary.calls(),
        calls + 1,
        "the other instance still decides alone"
    );

    // Redis returns: both rejoin by themselves, and what opened meanwhile is shared.
    redis.restart();
    for g in [&one, &two] {
        assert!(
            within(Duration::from_secs(5), || async { shared(&g.url()).await }).await,
            "rejoins"
        );
        assert_eq!(metric(g.url()).await.as_deref(), Some("1"));
        assert_eq!(readiness(&g.url()).await["breakers"]["error"], Value::Null);
    }
    let open_on_two = within(Duration::from_secs(1), || async {
        primary_state(&two.url()).await == Some(2)
    })
    .await;
    assert!(
        open_on_two,
        "the open made while apart reaches the other instance"
    );
}

pub async fn without_a_cluster_breakers_stay_local() {
    let (primary, secondary) = (failing_primary().await, secondary().await);
    let one = two_step(&primary, &secondary, "").await;
    let ready = readiness(&one.url()).await;
    assert_eq!(ready["breakers"]["mode"], "local");
    assert_eq!(ready["breakers"]["shared"], false);
    assert_eq!(ready["status"], "ready");
}
