//! How fast a breaker's open reaches the other instances of a cluster.
//!
//! `cargo bench --bench breakers` (Redis at 127.0.0.1:6379, or `REDIS_URL`). Two gateways
//! in this process, each with its own cluster member, share breakers through Redis under a
//! key prefix of their own. One request through the first opens the primary's breaker
//! (`consecutive_failures = 1`); a watcher thread polls both health tables every ~20 µs
//! and takes the time from the open on the first to the open on the second. An operator's
//! reset on the first closes both again before the next round. 100 rounds; p50 and p99.

// Tests and benches stop at the first surprise: unwrap, expect and panic are how they say so.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

#[path = "percentile.rs"]
mod percentile;

use std::time::{Duration, Instant};

use percentile::percentile;
use switchyard::config::Config;
use switchyard::fake::{Behavior, FakeUpstream};
use switchyard::router::Health;
use switchyard::server::Gateway;

const ROUNDS: usize = 100;
/// A round that takes longer than this has lost its message; the bench says so.
const PATIENCE: Duration = Duration::from_secs(5);

fn primary_open(health: &Health) -> bool {
    health
        .states()
        .iter()
        .any(|(provider, _, gauge)| provider.as_str() == "primary" && *gauge == 2)
}

/// Polls both tables until the second shows the open too; the open's time on each.
fn watch(first: &Health, second: &Health) -> Option<(Instant, Instant)> {
    let started = Instant::now();
    let mut on_first = None;
    loop {
        let now = Instant::now();
        if on_first.is_none() && primary_open(first) {
            on_first = Some(now);
        }
        if primary_open(second) {
            return Some((on_first.unwrap_or(now), now));
        }
        if started.elapsed() > PATIENCE {
            return None;
        }
        std::thread::sleep(Duration::from_micros(20));
    }
}

fn main() {
    let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into());
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let prefix = format!("switchyard-bench-{}", uuid::Uuid::now_v7().simple());
    let (fakes, gateways) = runtime.block_on(async {
        let primary = FakeUpstream::new("primary")
            .then(Behavior::status(500))
            .start()
            .await
            .unwrap();
        let secondary = FakeUpstream::new("secondary").start().await.unwrap();
        let text = format!(
            "[auth]\nrequired = false\n[store]\nurl = \"sqlite::memory:\"\n\
             [cluster]\nredis_url = \"{url}\"\nkey_prefix = \"{prefix}\"\n\
             [breaker]\nconsecutive_failures = 1\nmin_callers = 1\ncooldown = \"60s\"\n\
             [retry]\nattempts_per_step = 1\n\
             [[providers]]\nname = \"primary\"\nkind = \"openai\"\nbase_url = \"{}\"\nkey_required = false\n\
             [[providers]]\nname = \"secondary\"\nkind = \"openai\"\nbase_url = \"{}\"\nkey_required = false\n\
             [[routes]]\nname = \"r\"\nsteps = [{{ provider = \"primary\", model = \"a\" }}, {{ provider = \"secondary\", model = \"b\" }}]\n",
            primary.base_url(),
            secondary.base_url()
        );
        let config = Config::parse(&text).expect("the bench config parses");
        let first = Gateway::start(config.clone()).await.expect("a gateway starts");
        let second = Gateway::start(config).await.expect("a gateway starts");
        ((primary, secondary), (first, second))
    });
    let (first, second) = &gateways;
    let joined = |g: &Gateway| g.health().link().is_some_and(|l| l.shared());
    let waiting = Instant::now();
    while !(joined(first) && joined(second)) {
        if waiting.elapsed() > PATIENCE {
            println!("the gateways could not share breakers through {url} (is Redis running?)");
            return;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let client = reqwest::Client::new();
    let body =
        serde_json::json!({ "model": "r", "messages": [{ "role": "user", "content": "hi" }] });
    let mut delays = Vec::with_capacity(ROUNDS);
    for round in 0..ROUNDS {
        let seen = std::thread::scope(|scope| {
            let watcher = scope.spawn(|| watch(first.health(), second.health()));
            runtime.block_on(async {
                client
                    .post(format!("{}/v1/chat/completions", first.url()))
                    .json(&body)
                    .send()
                    .await
                    .expect("the gateway answers");
            });
            watcher.join().expect("the watcher runs")
        });
        let Some((opened, arrived)) = seen else {
            println!("round {round}: the open never reached the second gateway");
            return;
        };
        delays.push(arrived.saturating_duration_since(opened));
        first.health().reset(None, None);
        let resetting = Instant::now();
        while primary_open(second.health()) || primary_open(first.health()) {
            if resetting.elapsed() > PATIENCE {
                println!("round {round}: the reset never reached the second gateway");
                return;
            }
            std::thread::sleep(Duration::from_micros(50));
        }
    }
    delays.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    let mean = delays.iter().sum::<Duration>() / delays.len() as u32;
    println!("breaker propagation through Redis pub/sub, {ROUNDS} opens\n");
    println!(
        "{:<10} {:>10}",
        "p50",
        format!("{:.2} ms", ms(percentile(&delays, 50.0)))
    );
    println!(
        "{:<10} {:>10}",
        "p99",
        format!("{:.2} ms", ms(percentile(&delays, 99.0)))
    );
    println!(
        "{:<10} {:>10}",
        "max",
        format!("{:.2} ms", ms(delays[delays.len() - 1]))
    );
    println!("{:<10} {:>10}", "mean", format!("{:.2} ms", ms(mean)));
    println!("\nFrom the open as the first gateway's table shows it to the same on the second,");
    println!("both polled every ~20 µs: publish script, pub/sub delivery and apply.");
    drop(fakes);
}
