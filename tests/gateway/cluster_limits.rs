//! Cluster mode's limits: three real `switchyard serve` processes on one PostgreSQL (a fresh
//! database per test) and one Redis (a key prefix per test) hold one limit between them,
//! and keep holding it when one of them is killed. Without PostgreSQL or Redis they skip,
//! saying so, except under `SWITCHYARD_REQUIRE_SERVICES=1`.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use futures_util::future::join_all;
use switchyard::fake::{FakeHandle, FakeUpstream};
use switchyard::store::postgres::testdb::TestDb;
use tokio::time::Instant;

use super::cluster::{cli, env, member};
use super::logqueue::{QUIET, Spawned};
use super::support::*;

/// One instance's config: the shared store and Redis, role `limited` allowing `per_minute`
/// requests over the last 60 s (a sliding window, so no calendar minute's end can reset it
/// mid-test), role `free` without limits, and route `r` to the fake.
fn cluster_config(db: &TestDb, fake: &FakeHandle, prefix: &str, per_minute: usize) -> String {
    member(db, true)
        .with("[limits]\nbackend = \"redis\"\nredis_url = \"redis://127.0.0.1:6379\"\n")
        .set("key_prefix", prefix)
        .with("[[roles]]\nname = \"limited\"\n")
        .set("requests_per_minute", per_minute as i64)
        .with("window = \"sliding\"\n[[roles]]\nname = \"free\"\n")
        .provider("up", fake)
        .route("r", &[("up", "m")], "")
        .raw_text()
}

fn prefix(test: &str) -> String {
    format!("sy-test-{test}-{}", uuid::Uuid::now_v7().simple())
}

/// A key of `role` made in the store before any instance starts, so that every instance's
/// snapshot holds it from the start (checking that it does would spend the limit).
fn create_key(config: &str, role: &str) -> String {
    cli(config, &["vkeys", "create", "--user", role, "--role", role])
        .trim()
        .to_owned()
}

/// Three instances, each ready (its store open and its keys loaded).
async fn three(config: &str) -> Vec<Spawned> {
    let gateways = Spawned::start_all(&[config; 3], QUIET, &env());
    for gateway in &gateways {
        gateway.ready().await;
    }
    gateways
}

async fn send(client: &reqwest::Client, url: &str, key: &str) -> reqwest::Result<u16> {
    let response = client
        .post(format!("{url}/v1/chat/completions"))
        .bearer_auth(key)
        .json(&chat("r"))
        .send()
        .await?;
    Ok(response.status().as_u16())
}

/// Sends `count` requests at once with `key`, round-robin over `urls`; the 200s and 429s.
async fn burst(urls: &[String], key: &str, count: usize) -> (usize, usize) {
    let client = client();
    let requests = (0..count).map(|i| send(&client, &urls[i % urls.len()], key));
    let statuses: Vec<u16> = join_all(requests)
        .await
        .into_iter()
        .map(|s| s.expect("a live instance answers"))
        .collect();
    let ok = statuses.iter().filter(|s| **s == 200).count();
    let limited = statuses.iter().filter(|s| **s == 429).count();
    assert_eq!(ok + limited, count, "{statuses:?}");
    (ok, limited)
}

pub async fn three_processes_admit_exactly_20_of_25_concurrent_requests_with_one_key() {
    let db = TestDb::create().await;
    let fake = FakeUpstream::new("up").start().await.unwrap();
    let config = cluster_config(&db, &fake, &prefix("twenty"), 20);
    let key = create_key(&config, "limited");
    let gateways = three(&config).await;
    let urls: Vec<String> = gateways.iter().map(|g| g.url.clone()).collect();
    assert_eq!(burst(&urls, &key, 25).await, (20, 5));
    assert_eq!(fake.calls(), 20, "only the admitted reached the provider");
}

/// The limited key's limit in the kill test, per sliding minute.
const LIMIT: usize = 60;
/// Unlimited requests answered before the kill, and again by the survivors after it: the
/// kill falls in the middle of the load, measured in answers rather than seconds.
const ANSWERED_EACH_SIDE: usize = 300;

/// Steady load with the unlimited `key` from `workers` connections, round-robin over all
/// three instances until `killed`, over the first two after. Returns, per worker, how
/// many the survivors answered after the kill. Any failure from a survivor fails the test;
/// only a request to the killed instance (the last) may fail, and only once it is killed.
fn steady_load(
    urls: &[String],
    key: &str,
    killed: &Arc<AtomicBool>,
    stop: &Arc<AtomicBool>,
    answered: &tokio::sync::watch::Sender<usize>,
) -> Vec<tokio::task::JoinHandle<usize>> {
    (0..6)
        .map(|worker| {
            let (urls, key) = (urls.to_vec(), key.to_owned());
            let (killed, stop, answered) = (killed.clone(), stop.clone(), answered.clone());
            tokio::spawn(async move {
                let client = client();
                let mut after_kill = 0;
                let mut i = worker;
                while !stop.load(Ordering::SeqCst) {
                    let was_killed = killed.load(Ordering::SeqCst);
                    let alive = if was_killed { 2 } else { 3 };
                    let target = i % alive;
                    i += 1;
                    match send(&client, &urls[target], &key).await {
                        Ok(status) => {
                            assert_eq!(status, 200, "{} answered {status}", urls[target]);
                            answered.send_modify(|n| *n += 1);
                            after_kill += usize::from(was_killed);
                        }
                        Err(error) => assert!(
                            target == 2 && killed.load(Ordering::SeqCst),
                            "{} failed a request: {error}",
                            urls[target]
                        ),
                    }
                }
                after_kill
            })
        })
        .collect()
}

/// Waits until the load's workers have counted `count` answers, for at most 60 s.
async fn until_answered(answered: &tokio::sync::watch::Sender<usize>, count: usize) {
    let mut counted = answered.subscribe();
    let reached = counted.wait_for(|n| *n >= count);
    tokio::time::timeout(Duration::from_secs(60), reached)
        .await
        .expect("the load stalled")
        .unwrap();
}

pub async fn kill_9_of_one_instance_mid_load_leaves_two_serving_with_the_limit_exact() {
    let db = TestDb::create().await;
    let fake = FakeUpstream::new("up").start().await.unwrap();
    let config = cluster_config(&db, &fake, &prefix("kill"), LIMIT);
    let (limited, free) = (create_key(&config, "limited"), create_key(&config, "free"));
    let mut gateways = three(&config).await;
    let urls: Vec<String> = gateways.iter().map(|g| g.url.clone()).collect();
    let (killed, stop) = (
        Arc::new(AtomicBool::new(false)),
        Arc::new(AtomicBool::new(false)),
    );
    let answered = tokio::sync::watch::Sender::new(0);
    let load = steady_load(&urls, &free, &killed, &stop, &answered);

    // What "exact" means here. The limit lives in Redis, so a request the killed instance
    // admitted there and never answered still spends it, and the client cannot tell it from
    // one refused or never read. So the limited key's requests to the instance to be killed
    // are all answered before the kill: half the limit, spread over all three at once,
    // while the load runs. Its admissions then sit in Redis with nobody left to own them,
    // and the survivors must count them: of everything sent afterwards only the other half
    // is admitted, so the client sees exactly LIMIT admitted in all, out of more sent.
    let started = Instant::now();
    assert_eq!(burst(&urls, &limited, LIMIT / 2).await, (LIMIT / 2, 0));

    until_answered(&answered, ANSWERED_EACH_SIDE).await;
    killed.store(true, Ordering::SeqCst);
    let victim = &mut gateways[2];
    victim.child.kill().unwrap(); // SIGKILL: no flush, no shutdown, no goodbye to Redis.
    victim.child.wait().unwrap();
    let at_kill = *answered.borrow();

    let survivors = &urls[..2];
    let (ok, refused) = burst(survivors, &limited, LIMIT).await;
    assert_eq!(
        (ok, refused),
        (LIMIT / 2, LIMIT / 2),
        "the survivors admit only what the killed instance left of the limit"
    );
    assert!(
        started.elapsed() < Duration::from_secs(50),
        "the limited requests spanned less than the 60 s window, or the test judges nothing"
    );

    until_answered(&answered, at_kill + ANSWERED_EACH_SIDE).await;
    stop.store(true, Ordering::SeqCst);
    let mut after_kill = 0;
    for worker in load {
        after_kill += worker.await.unwrap();
    }
    assert!(after_kill >= ANSWERED_EACH_SIDE - 6, "{after_kill}");
}
