//! The request log loses nothing: every request that reached the gateway is exactly one row
//! in the store, whatever its outcome, with clients hanging up mid-stream, with 429s, and
//! across a graceful shutdown in the middle of the load.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use futures_util::StreamExt;
use futures_util::stream;
use switchyard::auth::{KeyRequest, issue};
use switchyard::fake::Behavior;
use switchyard::server::Gateway;
use switchyard::store::request_log::LogQuery;
use switchyard::store::{LimitOverrides, Store};

use super::support::*;

async fn issue_key(store: &Store, user: &str, role: &str) -> String {
    let issued = issue(KeyRequest {
        user: user.into(),
        role: role.into(),
        permissions: vec![],
        models: None,
        limits: LimitOverrides::default(),
    })
    .unwrap();
    store.insert_virtual_key(issued.record).await.unwrap();
    issued.key
}

/// What one scripted request is, and what the client saw.
#[derive(Clone, Copy, Debug)]
enum Kind {
    Success,
    Fallback,
    Degraded,
    /// A key whose role allows 50 in a sliding minute (no calendar boundary to straddle); 100
    /// of these are sent.
    Limited,
    /// A stream the client drops after its first chunk.
    Disconnect,
    /// An unknown key: 401.
    Unauthorized,
}

fn kind(i: usize) -> Kind {
    match i % 10 {
        0..=3 => Kind::Success,
        4 | 5 => Kind::Fallback,
        6 => Kind::Degraded,
        7 => Kind::Limited,
        8 => Kind::Disconnect,
        _ => Kind::Unauthorized,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_mixed_requests_are_exactly_a_thousand_rows() {
    let good = scripted("good", []).await;
    let bad = scripted("bad", [Behavior::status(500)]).await;
    let streamer = scripted("streamer", [Behavior::ok().chunks(100, 20)]).await;
    // The bad keys all come from one address: an allowance above their count keeps a row each.
    // `bad` fails every request; this test counts rows, so the retry budget is off
    // (`retry_budget.rs` tests the budget).
    let gateway = TestGateway::new()
        .with(concat!(
            "[auth]\nrequired = true\nunauthorized_log_rows_per_minute = 1000\n",
            "[[roles]]\nname = \"free\"\n",
            "[[roles]]\nname = \"tight\"\nrequests_per_minute = 50\nwindow = \"sliding\"\n",
            "[retry]\nattempts_per_step = 1\nbackoff_base = \"1ms\"\nbackoff_max = \"2ms\"\n",
            "budget_percent = 100\n",
            "[breaker]\nconsecutive_failures = 100000\nmin_requests = 100000\n",
        ))
        .provider("good", &good)
        .provider("bad", &bad)
        .provider("streamer", &streamer)
        .route("ok", &[("good", "m")], "")
        .route("fb", &[("bad", "m"), ("good", "m")], "")
        .route(
            "dg",
            &[("bad", "m"), ("bad", "m2")],
            "degraded = { content = \"later\" }",
        )
        .route("slow", &[("streamer", "m")], "")
        .start()
        .await;
    let free = issue_key(gateway.store(), "ana", "free").await;
    let tight = issue_key(gateway.store(), "bo", "tight").await;
    gateway.keys_current().await;

    let client = client();
    let url = format!("{}/v1/chat/completions", gateway.url());
    let statuses: Vec<(usize, u16)> = stream::iter(0..1000)
        .map(|i| {
            let (client, url, free, tight) = (&client, &url, &free, &tight);
            async move {
                let (key, body) = match kind(i) {
                    Kind::Success => (free.as_str(), chat("ok")),
                    Kind::Fallback => (free.as_str(), chat("fb")),
                    Kind::Degraded => (free.as_str(), chat("dg")),
                    Kind::Limited => (tight.as_str(), chat("ok")),
                    Kind::Disconnect => (free.as_str(), chat_stream("slow")),
                    Kind::Unauthorized => ("sy-not-a-key", chat("ok")),
                };
                let response = client
                    .post(url)
                    .bearer_auth(key)
                    .json(&body)
                    .send()
                    .await
                    .unwrap();
                let status = response.status().as_u16();
                let mut body = response.bytes_stream();
                if let Kind::Disconnect = kind(i) {
                    body.next().await.expect("a first chunk").unwrap();
                    // Dropping the body hangs up mid-stream.
                } else {
                    while body.next().await.is_some() {}
                }
                (i, status)
            }
        })
        .buffer_unordered(48)
        .collect()
        .await;
    let limited = statuses
        .iter()
        .filter(|(i, s)| matches!(kind(*i), Kind::Limited) && *s == 429)
        .count();
    assert_eq!(limited, 50, "the tight role admits 50 of its 100");

    let settled = async {
        gateway.telemetry().wait_idle().await;
        gateway.telemetry().wait_for_rows(1000).await;
    };
    tokio::time::timeout(Duration::from_secs(30), settled)
        .await
        .expect("every request is logged");
    let rows = gateway
        .store()
        .query_log(LogQuery::default())
        .await
        .unwrap();
    assert_eq!(rows.len(), 1000, "exactly one row per request");
    assert_eq!(gateway.store().count_log().await.unwrap(), 1000);
    let ids: BTreeSet<_> = rows.iter().map(|r| r.id.as_str()).collect();
    assert_eq!(ids.len(), 1000, "no request has two rows");
    let mut outcomes: BTreeMap<&str, usize> = BTreeMap::new();
    for row in &rows {
        *outcomes.entry(row.outcome.as_str()).or_default() += 1;
    }
    let expected: BTreeMap<&str, usize> = [
        ("success", 400 + 50),
        ("fallback", 200),
        ("degraded", 100),
        ("error", 100),
        ("rejected", 100 + 50),
    ]
    .into();
    assert_eq!(outcomes, expected);
    let disconnected = rows
        .iter()
        .filter(|r| r.error.as_deref() == Some("client_disconnected") && r.partial && r.stream)
        .count();
    assert_eq!(disconnected, 100);
    let statuses_429 = rows.iter().filter(|r| r.status == 429).count();
    let statuses_401 = rows.iter().filter(|r| r.status == 401).count();
    assert_eq!((statuses_429, statuses_401), (50, 100));
    let fallback = rows.iter().find(|r| r.outcome == "fallback").unwrap();
    assert_eq!(fallback.attempts.len(), 2, "{fallback:?}");
    assert_eq!(
        fallback.attempts[0].failure.as_deref(),
        Some("server_error")
    );
    assert_eq!(fallback.step, Some(1));
    // Nothing arrives late: the writer is idle and the count stays put.
    assert_eq!(gateway.telemetry().rows_written(), 1000);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_graceful_shutdown_mid_load_logs_every_request_it_answered() {
    let good = scripted("good", [Behavior::ok().delay_ms(20)]).await;
    let db = std::env::temp_dir().join(format!("switchyard-lossless-{}.db", uuid::Uuid::now_v7()));
    let url = format!("sqlite://{}", db.display());
    let gateway: Gateway = TestGateway::new()
        .with("[store]\n")
        .set("url", url.as_str())
        .provider("good", &good)
        .route("ok", &[("good", "m")], "")
        .start()
        .await;
    let endpoint = format!("{}/v1/chat/completions", gateway.url());
    let answered = Arc::new(AtomicUsize::new(0));
    let (enough, mut enough_rx) = tokio::sync::watch::channel(false);
    let enough = Arc::new(enough);

    // 600 requests, 40 at a time, on their own task so the load goes on during the shutdown.
    let load = {
        let answered = answered.clone();
        let enough = enough.clone();
        tokio::spawn(async move {
            let client = client();
            stream::iter(0..600)
                .map(|_| {
                    let (client, endpoint) = (&client, &endpoint);
                    let (answered, enough) = (answered.clone(), enough.clone());
                    async move {
                        let response = client.post(endpoint).json(&chat("ok")).send().await;
                        let response = response.ok()?;
                        let id = header(&response, "x-switchyard-request-id").to_owned();
                        response.bytes().await.ok()?;
                        if answered.fetch_add(1, Ordering::SeqCst) + 1 == 150 {
                            let _ = enough.send(true);
                        }
                        Some(id)
                    }
                })
                .buffer_unordered(40)
                .collect::<Vec<Option<String>>>()
                .await
        })
    };
    enough_rx.wait_for(|e| *e).await.unwrap();
    gateway.shutdown().await.expect("a clean shutdown");
    let results = load.await.unwrap();
    let answered: BTreeSet<String> = results.iter().flatten().cloned().collect();
    let refused = results.iter().filter(|r| r.is_none()).count();
    assert!(answered.len() >= 150);
    assert!(refused > 0, "the shutdown came mid-load");

    // A fresh connection to the file sees what the stopped gateway committed.
    let store = Store::open(&url).await.unwrap();
    let rows = store.query_log(LogQuery::default()).await.unwrap();
    let logged: BTreeSet<String> = rows.iter().map(|r| r.id.clone()).collect();
    assert_eq!(rows.len(), logged.len(), "no request has two rows");
    // Each request the gateway answered has its row; a request refused at the socket never
    // reached it and has none. A row without an answer would be a request still logged
    // after its client saw a failure: there must be none of those either.
    assert_eq!(
        logged,
        answered,
        "{} answered, {} logged, {refused} refused",
        answered.len(),
        rows.len()
    );
    eprintln!(
        "shutdown mid-load: {} answered and logged, {refused} refused",
        answered.len()
    );
    drop(store);
    for suffix in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{}{suffix}", db.display()));
    }
}
