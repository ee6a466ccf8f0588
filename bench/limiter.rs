//! What one rate-limit check costs: the in-memory limiter and the Redis script.
//!
//! `cargo bench --bench limiter` (Redis at 127.0.0.1:6379, or `REDIS_URL`). Each check is a
//! full admission: every window checked and the request counted, in one atomic step.

// Tests and benches stop at the first surprise: unwrap, expect and panic are how they say so.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use switchyard::config::Window;
use switchyard::limits::{Decision, MemoryLimiter, Quota, RedisLimiter};

const MEMORY_CHECKS: u32 = 1_000_000;
const REDIS_CHECKS: u32 = 20_000;

fn quota(window: Window) -> Quota {
    Quota {
        requests_per_minute: Some(u64::MAX / 2),
        tokens_per_minute: Some(u64::MAX / 2),
        max_concurrent: None,
        window,
    }
}

fn per_check(elapsed: Duration, checks: u32) -> String {
    let nanos = elapsed.as_nanos() as f64 / f64::from(checks);
    if nanos < 1_000.0 {
        format!("{nanos:.0} ns")
    } else {
        format!("{:.1} µs", nanos / 1_000.0)
    }
}

fn memory(window: Window) -> Duration {
    let limiter = MemoryLimiter::default();
    let user: Arc<str> = Arc::from("bench");
    let started = Instant::now();
    for _ in 0..MEMORY_CHECKS {
        if let Decision::Refuse(_) = limiter.admit(&user, quota(window)) {
            panic!("the bench quota is never reached");
        }
    }
    started.elapsed()
}

async fn redis(url: &str, concurrency: u32) -> Option<Duration> {
    let limiter = RedisLimiter::new(
        &switchyard::config::RedisTarget::url(url),
        &format!("switchyard-bench-{}", uuid::Uuid::now_v7()),
        switchyard::config::DEFAULT_LEASE,
    )
    .ok()?;
    let user: Arc<str> = Arc::from("bench");
    // One check first, to connect and load the script.
    limiter
        .admit(&user, quota(Window::Fixed), "warm-up")
        .await
        .ok()?;
    let started = Instant::now();
    let per_task = REDIS_CHECKS / concurrency;
    let tasks: Vec<_> = (0..concurrency)
        .map(|task| {
            let (limiter, user) = (limiter.clone(), user.clone());
            tokio::spawn(async move {
                for i in 0..per_task {
                    let id = format!("{task}-{i}");
                    let _ = limiter.admit(&user, quota(Window::Fixed), &id).await;
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.ok()?;
    }
    Some(started.elapsed())
}

fn main() {
    println!("one limiter check (admission: every window checked, the request counted)\n");
    println!("{:<40} {:>14}", "backend", "per check");
    println!(
        "{:<40} {:>14}",
        "memory, fixed window",
        per_check(memory(Window::Fixed), MEMORY_CHECKS)
    );
    println!(
        "{:<40} {:>14}",
        "memory, sliding window",
        per_check(memory(Window::Sliding), MEMORY_CHECKS)
    );

    let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into());
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    for concurrency in [1, 64] {
        let label = format!("redis, fixed window, {concurrency} in flight");
        match runtime.block_on(redis(&url, concurrency)) {
            Some(elapsed) => println!("{label:<40} {:>14}", per_check(elapsed, REDIS_CHECKS)),
            None => println!("{label:<40} {:>14}", "(no redis)"),
        }
    }
    println!("\nWith 64 in flight the figure is wall time over checks: throughput, not latency.");
}
