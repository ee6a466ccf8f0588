//! What hedging buys and costs on a slow-tailed primary.
//!
//! `cargo bench --bench hedge`. Fake upstreams in this process, both slow-tailed: each
//! answers in 50 ms, but one answer in 20 (5 %) takes 10× as long (500 ms). The same load goes through
//! three gateways, one run: no hedge, `hedge = { after = "100ms" }`, and
//! `hedge = { after = "p95" }` (the primary's own observed p95, once it has 20 samples).
//! Each gets `BENCH_HEDGE_REQUESTS` requests (default 400) at concurrency
//! `BENCH_HEDGE_CONCURRENCY` (default 8), and fakes of its own, so the upstream calls it
//! cost are its own. Prints p50, p99 and max latency, and upstream calls per request.

// Tests and benches stop at the first surprise: unwrap, expect and panic are how they say so.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

#[path = "percentile.rs"]
mod percentile;

use std::time::{Duration, Instant};

use futures_util::StreamExt;
use percentile::percentile;
use switchyard::config::Config;
use switchyard::fake::{Behavior, FakeHandle, FakeUpstream};
use switchyard::server::Gateway;

const FAST_MS: u64 = 50;
const SLOW_MS: u64 = 500;
/// One answer in this many is slow.
const SLOW_ONE_IN: usize = 20;

fn env(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// A fake whose every `SLOW_ONE_IN`-th answer is slow, starting at `offset`.
async fn slow_tailed(name: &str, offset: usize) -> FakeHandle {
    let mut fake = FakeUpstream::new(name).cycle();
    for i in 0..SLOW_ONE_IN {
        let delay = if i == offset { SLOW_MS } else { FAST_MS };
        fake = fake.then(Behavior::ok().delay_ms(delay));
    }
    fake.start().await.expect("a fake starts")
}

struct Figures {
    name: &'static str,
    p50: Duration,
    p99: Duration,
    max: Duration,
    calls_per_request: f64,
    hedged: usize,
}

async fn measure(
    name: &'static str,
    hedge: Option<&str>,
    requests: usize,
    concurrency: usize,
) -> Figures {
    // Offsets apart, so the two fakes' slow answers do not fall on the same request.
    let primary = slow_tailed("primary", SLOW_ONE_IN - 1).await;
    let secondary = slow_tailed("secondary", SLOW_ONE_IN / 2).await;
    let hedge = hedge.map(|h| format!("hedge = {h}\n")).unwrap_or_default();
    let text = format!(
        "[auth]\nrequired = false\n[store]\nurl = \"sqlite::memory:\"\n\
         [[providers]]\nname = \"primary\"\nkind = \"openai\"\nbase_url = \"{}\"\nkey_required = false\n\
         [[providers]]\nname = \"secondary\"\nkind = \"openai\"\nbase_url = \"{}\"\nkey_required = false\n\
         [[routes]]\nname = \"r\"\nsteps = [{{ provider = \"primary\", model = \"a\" }}, {{ provider = \"secondary\", model = \"b\" }}]\n{hedge}",
        primary.base_url(),
        secondary.base_url()
    );
    let config = Config::parse(&text).expect("the bench config parses");
    let gateway = Gateway::start(config).await.expect("a gateway starts");
    let client = reqwest::Client::new();
    let url = format!("{}/v1/chat/completions", gateway.url());
    let body =
        serde_json::json!({ "model": "r", "messages": [{ "role": "user", "content": "hi" }] });
    let results: Vec<(Duration, bool)> = futures_util::stream::iter(0..requests)
        .map(|_| {
            let (client, url, body) = (&client, &url, &body);
            async move {
                let started = Instant::now();
                let response = client
                    .post(url)
                    .json(body)
                    .send()
                    .await
                    .expect("the gateway answers");
                let hedged = response.headers().contains_key("x-switchyard-hedged");
                assert_eq!(response.status(), 200, "every request is served");
                response.bytes().await.expect("a whole body");
                (started.elapsed(), hedged)
            }
        })
        .buffer_unordered(concurrency)
        .collect()
        .await;
    let mut latencies: Vec<Duration> = results.iter().map(|(l, _)| *l).collect();
    latencies.sort();
    let calls = primary.calls() + secondary.calls();
    Figures {
        name,
        p50: percentile(&latencies, 50.0),
        p99: percentile(&latencies, 99.0),
        max: latencies[latencies.len() - 1],
        calls_per_request: calls as f64 / requests as f64,
        hedged: results.iter().filter(|(_, h)| *h).count(),
    }
}

fn main() {
    let requests = env("BENCH_HEDGE_REQUESTS", 400).max(1);
    let concurrency = env("BENCH_HEDGE_CONCURRENCY", 8).max(1);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime");
    println!(
        "slow-tailed upstreams: {FAST_MS} ms, one answer in {SLOW_ONE_IN} {SLOW_MS} ms; \
         {requests} requests at concurrency {concurrency} per row"
    );
    println!(
        "{:<22} {:>8} {:>8} {:>8} {:>16} {:>8}",
        "route", "p50", "p99", "max", "upstream calls", "hedged"
    );
    let rows = [
        ("no hedge", None),
        ("hedge after 100ms", Some(r#"{ after = "100ms" }"#)),
        ("hedge after p95", Some(r#"{ after = "p95" }"#)),
    ];
    for (name, hedge) in rows {
        let figures = runtime.block_on(measure(name, hedge, requests, concurrency));
        println!(
            "{:<22} {:>6.0}ms {:>6.0}ms {:>6.0}ms {:>12.3}/req {:>7.1}%",
            figures.name,
            figures.p50.as_secs_f64() * 1e3,
            figures.p99.as_secs_f64() * 1e3,
            figures.max.as_secs_f64() * 1e3,
            figures.calls_per_request,
            100.0 * figures.hedged as f64 / requests as f64,
        );
    }
}
