//! The limiter against a Redis that goes away: readiness that comes back by itself, and
//! admissions that stay exact when a connection is cut or a reply is lost on the way back.
//! Each test runs its own `redis-server`, reached through a proxy the test controls.

pub(super) mod proxy;

use std::net::SocketAddr;
use std::time::Duration;

use futures_util::StreamExt;
use serde_json::Value;
use switchyard::fake::{Behavior, FakeHandle, FakeUpstream};
use switchyard::server::Gateway;

use super::services::{RedisServer, redis_seconds};
use super::support::*;
use proxy::Proxy;

/// How long a test waits for something that should happen within a second or two.
const PATIENCE: Duration = Duration::from_secs(10);

/// A gateway whose anonymous callers have role `ae`, limited by `role`, counted in Redis.
/// Its breakers stay local: these tests watch the limiter's own traffic to Redis.
fn config(fake: &FakeHandle, url: &str, fail: &str, role: &str, extra: &str) -> TestGateway {
    TestGateway::new()
        .with("[auth]\nrequired = false\ndefault_role = \"ae\"\n")
        .with("[limits]\nbackend = \"redis\"\n")
        .set("redis_url", url)
        .set("on_backend_error", fail)
        .set(
            "key_prefix",
            format!("switchyard-test-{}", uuid::Uuid::now_v7()),
        )
        .with(extra)
        .with("[cluster]\nshared_breakers = false\n")
        .with("[[roles]]\nname = \"ae\"\n")
        .with(role)
        .provider("up", fake)
        .route("smart", &[("up", "m")], "")
}

fn redis_addr(server: &RedisServer) -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], server.port))
}

/// Asserts a burst of 25 under a limit of 20 got exactly 20 admissions and 5 refusals.
fn assert_20_admitted_5_limited(statuses: &[u16]) {
    let count = |code: u16| statuses.iter().filter(|s| **s == code).count();
    assert_eq!(count(200), 20, "{statuses:?}");
    assert_eq!(count(429), 5, "{statuses:?}");
}

async fn status(gateway: &Gateway) -> u16 {
    post(gateway, &chat("smart")).await.status().as_u16()
}

/// Waits, for at most [`PATIENCE`], until the limiter's last look at Redis (an admission's or
/// the once-a-second check's) found it `healthy` or not, then reads `/readyz` once.
///
/// One read is enough: past the limiter, `/readyz` follows the store (in memory here, always
/// answering), the request log (never full here) and shutdown (not begun), none of which
/// these tests move, and each test's Redis stays as it left it until the next step.
async fn readyz_once_limits(gateway: &Gateway, healthy: bool) -> (u16, Value) {
    let found = gateway.wait_limits(|problem| problem.is_none() == healthy);
    if tokio::time::timeout(PATIENCE, found).await.is_err() {
        let (code, body) = readiness(gateway).await;
        panic!("the limiter never found Redis healthy = {healthy}; /readyz: {code} {body}");
    }
    readiness(gateway).await
}

/// Resolves once no request holds a concurrency slot in `server`, the test's own Redis; panics
/// if one is still held after [`PATIENCE`], far within the slots' 30 s leases. A slot goes
/// back in a task the request's end spawns, which the gateway offers nothing to wait on, but
/// Redis announces each removal from a sorted set to whoever subscribes (keyspace
/// notifications, turned on here): the wait is on those.
async fn slots_freed(server: &RedisServer) {
    let client = ::redis::Client::open(format!("redis://127.0.0.1:{}", server.port)).unwrap();
    let mut connection = client.get_multiplexed_async_connection().await.unwrap();
    let () = ::redis::cmd("CONFIG")
        .arg("SET")
        .arg("notify-keyspace-events")
        .arg("Kz")
        .query_async(&mut connection)
        .await
        .unwrap();
    let mut pubsub = client.get_async_pubsub().await.unwrap();
    pubsub
        .psubscribe("__keyspace@*__:*:inflight")
        .await
        .unwrap();
    let mut removals = pubsub.into_on_message();
    // Subscribed before the first look: a removal after it is always heard.
    let freed = async {
        loop {
            let sets: Vec<String> = ::redis::cmd("KEYS")
                .arg("*:inflight")
                .query_async(&mut connection)
                .await
                .unwrap();
            let mut held = 0;
            for set in &sets {
                let count: u64 = ::redis::cmd("ZCARD")
                    .arg(set)
                    .query_async(&mut connection)
                    .await
                    .unwrap();
                held += count;
            }
            if held == 0 {
                return;
            }
            removals.next().await.expect("the subscription stays open");
        }
    };
    tokio::time::timeout(PATIENCE, freed)
        .await
        .expect("every slot is free again well before its lease runs out");
}

/// Once every slot in `server` is free, one request, which must be admitted; its response.
async fn admitted_once_freed(gateway: &Gateway, server: &RedisServer) -> reqwest::Response {
    slots_freed(server).await;
    let response = post(gateway, &chat("smart")).await;
    assert_eq!(response.status(), 200, "admitted once the slot is free");
    response
}

/// Redis's own clock, in minutes: a fixed window's boundary is where this changes.
async fn redis_minute(server: &RedisServer) -> u64 {
    redis_seconds(&format!("redis://127.0.0.1:{}", server.port)).await / 60
}

pub async fn readiness_comes_back_with_redis_without_any_request() {
    let mut server = RedisServer::start();
    let fake = scripted("up", []).await;
    let url = format!("redis://127.0.0.1:{}", server.port);
    let gateway = config(&fake, &url, "closed", "requests_per_minute = 20", "")
        .start()
        .await;
    let (code, ready) = readyz_once_limits(&gateway, true).await;
    assert_eq!(code, 200, "{ready}");
    assert_eq!(ready["status"], "ready", "{ready}");
    assert_eq!(ready["store"]["healthy"], true, "{ready}");

    server.stop();
    // One refused request, as a load balancer's last one before it pulls the instance.
    assert_eq!(status(&gateway).await, 503);
    let (code, down) = readyz_once_limits(&gateway, false).await;
    assert_eq!(code, 503, "{down}");
    assert_eq!(down["limits"]["healthy"], false, "{down}");
    assert!(down["limits"]["error"].is_string(), "{down}");

    server.restart();
    // No request is admitted in between: the gateway's own check must notice.
    let (code, up) = readyz_once_limits(&gateway, true).await;
    assert_eq!(code, 200, "{up}");
    assert_eq!(up["status"], "ready", "{up}");
    assert_eq!(up["limits"]["healthy"], true, "{up}");
    assert_eq!(fake.calls(), 0);
}

pub async fn readiness_notices_redis_going_away_without_any_request() {
    let mut server = RedisServer::start();
    let fake = scripted("up", []).await;
    let url = format!("redis://127.0.0.1:{}", server.port);
    let gateway = config(&fake, &url, "open", "requests_per_minute = 20", "")
        .start()
        .await;
    let (code, ready) = readyz_once_limits(&gateway, true).await;
    assert_eq!((code, ready["status"].as_str()), (200, Some("ready")));
    server.stop();
    // Failing open keeps serving, so the instance stays in rotation, marked degraded.
    let (code, body) = readyz_once_limits(&gateway, false).await;
    assert_eq!((code, body["status"].as_str()), (200, Some("degraded")));
    assert_eq!(body["limits"]["healthy"], false, "{body}");
}

/// One request, a cut, then 24 more, all in one sliding minute with a limit of 20.
async fn cut_then_burst(fail: &str) -> Vec<u16> {
    let server = RedisServer::start();
    let proxy = Proxy::start(redis_addr(&server)).await;
    let fake = scripted("up", []).await;
    let role = "requests_per_minute = 20\nwindow = \"sliding\"";
    let gateway = config(&fake, &proxy.url(), fail, role, "").start().await;
    let mut statuses = vec![status(&gateway).await];
    proxy.cut();
    for _ in 0..24 {
        statuses.push(status(&gateway).await);
    }
    statuses
}

pub async fn a_cut_connection_costs_no_spurious_503_when_failing_closed() {
    let statuses = cut_then_burst("closed").await;
    assert!(!statuses.contains(&503), "{statuses:?}");
    assert_20_admitted_5_limited(&statuses);
}

pub async fn a_cut_connection_admits_no_extra_request_when_failing_open() {
    let statuses = cut_then_burst("open").await;
    assert_20_admitted_5_limited(&statuses);
}

pub async fn a_lost_reply_holds_no_slot_and_counts_once() {
    let server = RedisServer::start();
    let proxy = Proxy::start(redis_addr(&server)).await;
    let fake = scripted("up", []).await;
    let role = "requests_per_minute = 20\nmax_concurrent = 1";
    let gateway = config(&fake, &proxy.url(), "closed", role, "")
        .start()
        .await;
    let minute = redis_minute(&server).await;
    // The first admission connects and loads the script; the second one's reply is lost.
    assert_eq!(status(&gateway).await, 200);
    proxy.lose_reply(b"EVALSHA", b"*7\r\n");
    let lost = status(&gateway).await;
    assert_eq!(proxy.cuts(), 1, "the reply was lost and the connection cut");
    assert_eq!(
        lost, 200,
        "the retry finds the admission the script already made"
    );

    let next = admitted_once_freed(&gateway, &server).await;
    if redis_minute(&server).await == minute {
        // Three admissions, each counted once.
        assert_eq!(header(&next, "x-ratelimit-remaining-requests"), "17");
    }
}

pub async fn a_slot_is_released_over_a_new_connection_after_a_cut() {
    let server = RedisServer::start();
    let proxy = Proxy::start(redis_addr(&server)).await;
    let fake = scripted("up", [Behavior::ok().chunks(100, 50)]).await;
    let gateway = config(&fake, &proxy.url(), "closed", "max_concurrent = 1", "")
        .start()
        .await;
    let stream = post(&gateway, &chat_stream("smart")).await;
    assert_eq!(stream.status(), 200);
    let id = header(&stream, "x-switchyard-request-id").to_owned();
    let mut body = stream.bytes_stream();
    body.next().await.unwrap().unwrap();
    assert_eq!(status(&gateway).await, 429, "one stream is in flight");

    proxy.cut();
    drop(body);
    record(&gateway, &id).await;
    admitted_once_freed(&gateway, &server).await;
}

pub async fn a_slot_outlives_its_lease_while_its_stream_lives() {
    let server = RedisServer::start();
    // 16 chunks 300 ms apart: the stream outlives its 2 s lease by far.
    let fake = scripted("up", [Behavior::ok().chunks(16, 300)]).await;
    let url = format!("redis://127.0.0.1:{}", server.port);
    let lease = "lease = \"2s\"\n";
    let gateway = config(&fake, &url, "closed", "max_concurrent = 1", lease)
        .start()
        .await;
    let stream = post(&gateway, &chat_stream("smart")).await;
    assert_eq!(stream.status(), 200);
    let mut body = stream.bytes_stream();
    let mut chunks = 0;
    let mut competitors = Vec::new();
    while let Some(chunk) = body.next().await {
        let chunk = chunk.unwrap();
        chunks += chunk.windows(6).filter(|w| w == b"data: ").count();
        // Past 8 chunks the stream is 2.4 s old: older than its lease. Up to 13 of 16, the
        // next chunk is 300 ms away, so the stream is surely still alive.
        if (9..=13).contains(&chunks) {
            competitors.push(status(&gateway).await);
        }
    }
    assert!(competitors.len() >= 4, "{competitors:?}");
    assert!(competitors.iter().all(|s| *s == 429), "{competitors:?}");
}

pub async fn failing_open_still_holds_each_instance_to_the_limit() {
    let fake = scripted("up", []).await;
    let closed = closed_addr();
    let url = format!("redis://{closed}");
    let gateway = config(
        &fake,
        &url,
        "open",
        "requests_per_minute = 20\nwindow = \"sliding\"",
        "",
    )
    .start()
    .await;
    let statuses = futures_util::future::join_all((0..25).map(|_| status(&gateway))).await;
    assert_20_admitted_5_limited(&statuses);
}

pub async fn the_health_check_ends_with_the_gateway() {
    let server = RedisServer::start();
    let fake = scripted("up", []).await;
    let url = format!("redis://127.0.0.1:{}", server.port);
    let gateway = config(&fake, &url, "closed", "max_concurrent = 1", "")
        .start()
        .await;
    let (code, ready) = readyz_once_limits(&gateway, true).await;
    assert_eq!(code, 200, "{ready}");
    let client = ::redis::Client::open(url).unwrap();
    let mut connection = client.get_multiplexed_async_connection().await.unwrap();
    let mut clients = async || {
        let list: String = ::redis::cmd("CLIENT")
            .arg("LIST")
            .query_async(&mut connection)
            .await
            .unwrap();
        list.lines().count()
    };
    assert_eq!(clients().await, 2, "the gateway's connection and ours");

    // Nothing may keep the stopped gateway's state, and with it its connection, alive: the
    // shutdown itself waits for the last holder to let go.
    tokio::time::timeout(PATIENCE, gateway.shutdown())
        .await
        .expect("the gateway stops")
        .unwrap();
    // A poll, for want of an event: the gateway's socket closes as its last handle goes,
    // and Redis drops the client when its own loop reads that close; neither says so.
    let gone = async {
        while clients().await > 1 {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    };
    tokio::time::timeout(PATIENCE, gone)
        .await
        .expect("the gateway's Redis connection closes");
}

/// Streams that end while the link to Redis is down cannot release their slots then; the
/// releases are kept and replayed once Redis answers, so the user is not locked out until the
/// slots' 30 s leases run out.
pub async fn releases_missed_while_redis_was_away_are_replayed_when_it_answers() {
    let server = RedisServer::start();
    let proxy = Proxy::start(redis_addr(&server)).await;
    let fake = FakeUpstream::new("up")
        .then(Behavior::ok().chunks(100, 50))
        .cycle()
        .start()
        .await
        .unwrap();
    let gateway = config(&fake, &proxy.url(), "closed", "max_concurrent = 3", "")
        .start()
        .await;
    let mut streams = Vec::new();
    for _ in 0..3 {
        let stream = post(&gateway, &chat_stream("smart")).await;
        assert_eq!(stream.status(), 200);
        let mut body = stream.bytes_stream();
        body.next().await.unwrap().unwrap();
        streams.push(body);
    }
    assert_eq!(
        status(&gateway).await,
        429,
        "three streams hold the three slots"
    );

    // Redis stops answering; the three streams end meanwhile, and their releases fail.
    proxy.freeze(true);
    drop(streams);
    // Each release gives up at the limiter's 500 ms timeout and is kept for replay.
    let kept = gateway.wait_pending_releases(|pending| *pending == 3);
    tokio::time::timeout(PATIENCE, kept)
        .await
        .expect("the three failed releases are kept");
    let (_, body) = readiness(&gateway).await;
    assert_eq!(body["limits"]["pending_releases"], 3, "{body}");

    // Redis answers again: the very next request is admitted, far within the 30 s lease.
    proxy.freeze(false);
    proxy.cut();
    let first = post(&gateway, &chat("smart")).await;
    assert_eq!(first.status(), 200, "not locked out past the reconnect");
    let (_, body) = readiness(&gateway).await;
    assert_eq!(body["limits"]["pending_releases"], 0, "{body}");
}

/// A Redis that answers every command 5 s late, under load: no request is held for Redis's
/// delay (the limiter gives up at its own 500 ms timeout), `on_backend_error` decides the
/// answer, `/readyz` says why, and everything comes back when Redis is quick again.
async fn a_slow_redis_holds_no_request(fail: &str) {
    let server = RedisServer::start();
    let proxy = Proxy::start(redis_addr(&server)).await;
    let fake = scripted("up", []).await;
    let gateway = config(
        &fake,
        &proxy.url(),
        fail,
        "requests_per_minute = 100000\nmax_concurrent = 1000",
        "",
    )
    .start()
    .await;
    assert_eq!(status(&gateway).await, 200);
    const REDIS_DELAY: Duration = Duration::from_secs(5);
    proxy.delay(REDIS_DELAY);
    // 8 clients, 10 requests each, one after another.
    let clients = (0..8).map(|_| async {
        let mut seen = Vec::new();
        for _ in 0..10 {
            let started = std::time::Instant::now();
            let status = status(&gateway).await;
            seen.push((status, started.elapsed()));
        }
        seen
    });
    let expected = if fail == "open" { 200 } else { 503 };
    for (status, took) in futures_util::future::join_all(clients)
        .await
        .into_iter()
        .flatten()
    {
        assert!(
            status == expected || status == 200,
            "{status} with on_backend_error = {fail}"
        );
        assert!(
            took < REDIS_DELAY,
            "a request waited {took:?} on a slow Redis"
        );
    }
    let (code, body) = readyz_once_limits(&gateway, false).await;
    assert_eq!(code, if fail == "open" { 200 } else { 503 }, "{body}");
    assert_eq!(body["limits"]["healthy"], false, "{body}");
    assert_eq!(body["limits"]["error"], "no answer in time", "{body}");

    proxy.delay(Duration::ZERO);
    proxy.cut();
    let (code, body) = readyz_once_limits(&gateway, true).await;
    assert_eq!(
        (code, body["status"].as_str()),
        (200, Some("ready")),
        "{body}"
    );
    assert_eq!(status(&gateway).await, 200);
}

pub async fn a_slow_redis_holds_no_request_when_failing_closed() {
    a_slow_redis_holds_no_request("closed").await;
}

pub async fn a_slow_redis_holds_no_request_when_failing_open() {
    a_slow_redis_holds_no_request("open").await;
}
