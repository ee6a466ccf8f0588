//! What one spend-budget check costs at admission: the body's estimate, the route's price,
//! and the atomic check-and-reserve, then the settlement; in memory and in Redis.
//!
//! `cargo bench --bench budgets` (Redis at 127.0.0.1:6379, or `REDIS_URL`).

// Tests and benches stop at the first surprise: unwrap, expect and panic are how they say so.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use switchyard::auth::Caller;
use switchyard::budgets::{Ask, Budgets};
use switchyard::config::Config;
use switchyard::limits::Limits;
use switchyard::providers::{Operation, RequestBody};

const MEMORY_CHECKS: u32 = 200_000;
const REDIS_CHECKS: u32 = 10_000;

fn config(limits: &str) -> Config {
    Config::parse(&format!(
        "{limits}[[providers]]\nname = \"a\"\nkind = \"openai\"\nbase_url = \"http://127.0.0.1:1\"\n\
         [[routes]]\nname = \"r\"\nsteps = [{{ provider = \"a\", model = \"m\" }}, {{ provider = \"a\", model = \"n\" }}]\n\
         [[prices]]\nprovider = \"a\"\nmodel = \"m\"\ninput_per_1m = 3.0\noutput_per_1m = 15.0\n\
         [[prices]]\nprovider = \"a\"\nmodel = \"n\"\ninput_per_1m = 1.0\noutput_per_1m = 2.0\n\
         [[roles]]\nname = \"default\"\nbudget_per_day = 1000000000.0\nbudget_per_month = 1000000000.0\n"
    ))
    .expect("the bench config is valid")
}

fn per_check(elapsed: Duration, checks: u32) -> String {
    let nanos = elapsed.as_nanos() as f64 / f64::from(checks);
    if nanos < 1_000.0 {
        format!("{nanos:.0} ns")
    } else {
        format!("{:.1} µs", nanos / 1_000.0)
    }
}

/// `checks` reservations, each settled, from `tasks` tasks at once.
async fn run(budgets: Arc<Budgets>, config: Arc<Config>, checks: u32, tasks: u32) -> Duration {
    let body = RequestBody::parse(Bytes::from_static(
        br#"{"model":"r","max_tokens":512,"messages":[{"role":"user","content":"How far is the moon?"}]}"#,
    ))
    .expect("the bench body parses");
    let body = Arc::new(body);
    let started = Instant::now();
    let handles: Vec<_> = (0..tasks)
        .map(|task| {
            let (budgets, config, body) = (budgets.clone(), config.clone(), body.clone());
            tokio::spawn(async move {
                let caller = Caller {
                    key: None,
                    user: Arc::from("bench"),
                    role: Arc::from("default"),
                };
                for i in 0..checks / tasks {
                    let id = format!("{task}-{i}");
                    let ask = Ask {
                        caller: &caller,
                        request_id: &id,
                        route: &config.routes[0],
                        first_step: 0,
                        body: &body,
                        operation: Operation::Chat,
                    };
                    match budgets.reserve(ask).await {
                        Ok(Some(reservation)) => reservation.settle(100).await,
                        _ => panic!("the bench budget is never reached, and Redis answers"),
                    }
                }
            })
        })
        .collect();
    for handle in handles {
        handle.await.expect("a bench task finishes");
    }
    started.elapsed()
}

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime");
    println!("one budget check (estimate, price, atomic check-and-reserve, settle)\n");
    println!("{:<40} {:>14}", "backend", "per check");
    let memory = Arc::new(config(""));
    let budgets = runtime.block_on(async {
        let limits = Limits::new(&memory, Arc::default()).expect("memory limits");
        Arc::new(Budgets::new(&memory, &limits, Arc::default()))
    });
    let elapsed = runtime.block_on(run(budgets, memory, MEMORY_CHECKS, 1));
    println!("{:<40} {:>14}", "memory", per_check(elapsed, MEMORY_CHECKS));

    let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into());
    let prefix = format!("switchyard-bench-{}", uuid::Uuid::now_v7());
    let redis = Arc::new(config(&format!(
        "[limits]\nbackend = \"redis\"\nredis_url = \"{url}\"\nkey_prefix = \"{prefix}\"\n"
    )));
    for tasks in [1, 64] {
        let label = format!("redis, {tasks} in flight");
        let result = runtime.block_on(async {
            let limits = Limits::new(&redis, Arc::default()).ok()?;
            let budgets = Arc::new(Budgets::new(&redis, &limits, Arc::default()));
            // One check first, to connect and load the scripts; none if Redis is away.
            let probe = tokio::time::timeout(Duration::from_secs(2), limits.probe()).await;
            probe.ok()?;
            if !limits.healthy() {
                return None;
            }
            Some(run(budgets, redis.clone(), REDIS_CHECKS, tasks).await)
        });
        match result {
            Some(elapsed) => println!("{label:<40} {:>14}", per_check(elapsed, REDIS_CHECKS)),
            None => println!("{label:<40} {:>14}", "(no redis)"),
        }
    }
    println!("\nEach check is two script runs in Redis (reserve, settle); with 64 in flight the");
    println!("figure is wall time over checks: throughput, not latency.");
}
