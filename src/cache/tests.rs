use std::sync::Arc;
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use http::HeaderValue;
use tokio::time::Instant;

use prometheus_client::metrics::counter::Counter;

use super::*;
use crate::config::{CacheConfig, ModelName, ProviderId, RouteName};
use crate::providers::{ClientFormat, ClientRequest, Operation, RequestBody};

fn key(text: &str) -> CacheKey {
    let body = format!(r#"{{"model":"r","messages":[{{"role":"user","content":"{text}"}}]}}"#);
    let body = RequestBody::parse(Bytes::from(body)).unwrap();
    let request = ClientRequest::new(ClientFormat::OpenAi, Operation::Chat, body);
    cache_key("shared", "r", &request).unwrap()
}

fn entry(route: &str, key_id: Option<&str>, bytes: usize, ttl: Duration) -> Entry {
    Entry {
        body: Bytes::from(vec![b'x'; bytes]),
        content_type: HeaderValue::from_static("application/json"),
        stored_at: SystemTime::now(),
        expires: Instant::now() + ttl,
        route: RouteName(Arc::from(route)),
        key_id: key_id.map(str::to_owned),
        step: 0,
        provider: ProviderId(Arc::from("p")),
        model: ModelName(Arc::from("m")),
    }
}

fn cache(max_bytes: usize, max_entry_bytes: usize) -> Cache {
    let config = CacheConfig {
        backend: crate::config::CacheBackend::Memory,
        max_bytes,
        max_entry_bytes,
    };
    Cache::new(&config, Counter::default()).unwrap()
}

const HOUR: Duration = Duration::from_secs(3600);

async fn is_hit(cache: &Cache, key: CacheKey) -> bool {
    matches!(cache.lookup(key).await, Lookup::Hit { .. })
}

#[tokio::test]
async fn a_stored_answer_is_served_and_another_misses() {
    let cache = cache(1 << 20, 1 << 16);
    let Lookup::Miss(lead) = cache.lookup(key("a")).await else {
        panic!("an empty cache misses");
    };
    assert!(
        cache
            .store(key("a"), entry("r", None, 100, HOUR), Some(lead))
            .kept()
    );
    assert!(is_hit(&cache, key("a")).await);
    assert!(!is_hit(&cache, key("b")).await);
    let stats = cache.stats().await.unwrap();
    assert_eq!((stats.entries, stats.hits, stats.misses), (1, 1, 2));
}

#[tokio::test(start_paused = true)]
async fn an_entry_expires_after_its_ttl() {
    let cache = cache(1 << 20, 1 << 16);
    let _ = cache.store(
        key("a"),
        entry("r", None, 10, Duration::from_secs(60)),
        None,
    );
    tokio::time::advance(Duration::from_secs(59)).await;
    assert!(is_hit(&cache, key("a")).await);
    tokio::time::advance(Duration::from_secs(1)).await;
    assert!(!is_hit(&cache, key("a")).await, "gone at its ttl");
    assert_eq!(cache.stats().await.unwrap().entries, 0, "and dropped");
}

#[tokio::test]
async fn the_least_recently_used_go_first_when_the_bytes_run_out() {
    // Room for three entries of 1,000 bytes (each costs its overhead and its key too).
    let each = 1000 + ENTRY_OVERHEAD + key("a").size();
    let cache = cache(3 * each, 2000);
    for name in ["a", "b", "c"] {
        let _ = cache.store(key(name), entry("r", None, 1000, HOUR), None);
    }
    assert!(is_hit(&cache, key("a")).await, "a is now the most recent");
    let _ = cache.store(key("d"), entry("r", None, 1000, HOUR), None);
    assert!(!is_hit(&cache, key("b")).await, "b was the least recent");
    for name in ["a", "c", "d"] {
        assert!(is_hit(&cache, key(name)).await, "{name} kept");
    }
    let stats = cache.stats().await.unwrap();
    assert_eq!(stats.evictions, 1);
    assert!(stats.bytes <= 3 * each, "{stats:?}");
    let by_route = cache.by_route();
    assert_eq!(by_route.len(), 1);
    let (route, usage) = &by_route[0];
    assert_eq!(route.as_str(), "r");
    assert_eq!((usage.bytes, usage.evictions), (stats.bytes, 1));
}

#[tokio::test]
async fn an_answer_over_the_entry_limit_is_not_kept() {
    let cache = cache(1 << 20, 1000);
    assert!(
        !cache
            .store(key("a"), entry("r", None, 1001, HOUR), None)
            .kept()
    );
    assert!(
        cache
            .store(key("b"), entry("r", None, 1000, HOUR), None)
            .kept()
    );
    assert_eq!(cache.stats().await.unwrap().entries, 1);
}

#[tokio::test]
async fn fifty_identical_misses_wait_for_one_leader() {
    let cache = Arc::new(cache(1 << 20, 1 << 16));
    let Lookup::Miss(lead) = cache.lookup(key("a")).await else {
        panic!("misses");
    };
    let waiters: Vec<_> = (0..49)
        .map(|_| {
            let cache = cache.clone();
            tokio::spawn(async move {
                match cache.lookup(key("a")).await {
                    Lookup::Hit { coalesced, .. } => coalesced,
                    Lookup::Miss(_) => panic!("a second upstream call"),
                }
            })
        })
        .collect();
    cache.wait_waiting(|waiting| *waiting == 49).await;
    let _ = cache.store(key("a"), entry("r", None, 10, HOUR), Some(lead));
    for waiter in waiters {
        assert!(waiter.await.unwrap(), "served the leader's answer");
    }
    assert_eq!(cache.stats().await.unwrap().misses, 1);
}

#[tokio::test]
async fn when_the_leader_stores_nothing_a_waiter_leads_in_its_place() {
    let cache = Arc::new(cache(1 << 20, 1 << 16));
    let Lookup::Miss(lead) = cache.lookup(key("a")).await else {
        panic!("misses");
    };
    let waiter = {
        let cache = cache.clone();
        tokio::spawn(async move { matches!(cache.lookup(key("a")).await, Lookup::Miss(_)) })
    };
    cache.wait_waiting(|waiting| *waiting == 1).await;
    drop(lead); // failed upstream: nothing stored
    assert!(waiter.await.unwrap(), "the waiter makes its own call");
}

#[tokio::test]
async fn a_purge_drops_by_route_by_key_or_everything() {
    let cache = cache(1 << 20, 1 << 16);
    let _ = cache.store(key("a"), entry("r1", Some("k1"), 10, HOUR), None);
    let _ = cache.store(key("b"), entry("r1", Some("k2"), 10, HOUR), None);
    let _ = cache.store(key("c"), entry("r2", Some("k1"), 10, HOUR), None);
    let _ = cache.store(key("d"), entry("r2", Some("k2"), 10, HOUR), None);
    assert_eq!(cache.purge(Some("r1"), None).await.unwrap(), 2);
    assert_eq!(cache.purge(None, Some("k1")).await.unwrap(), 1);
    assert_eq!(cache.purge(None, None).await.unwrap(), 1);
    assert_eq!(cache.stats().await.unwrap().entries, 0);
    assert!(
        cache.by_route().iter().all(|(_, usage)| usage.bytes == 0),
        "purges count"
    );
}
