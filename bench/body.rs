//! What checking a client's body costs: [`RequestBody::parse`] (the fast check that finds the
//! top-level fields) on the multi-turn chat bodies `bench/run.sh` sends, 4 KB to 512 KB, per
//! request and per byte; beside it, serde_json's own validation of the same bytes
//! (`serde::de::IgnoredAny`), the floor a general parser sets.
//!
//! `cargo bench --bench body` for release figures (`BODY_BENCH_ROUNDS` sets the parses per
//! size, 2,000 by default); `cargo test --bench body` for a quick debug-build run. The bodies
//! come from `bench/bodies.py`, so python3 must be on the path. Under
//! `valgrind --tool=callgrind` the same binary counts instructions (`BODY_BENCH_ROUNDS=20`).

// Tests and benches stop at the first surprise: unwrap, expect and panic are how they say so.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::process::Command;
use std::time::Instant;

use bytes::Bytes;
use switchyard::providers::RequestBody;

const SIZES: [&str; 4] = ["4k", "32k", "128k", "512k"];

fn body(size: &str) -> Bytes {
    let out = Command::new("python3")
        .args(["bench/bodies.py", "chat", size, "bench"])
        .output()
        .expect("python3 bench/bodies.py runs");
    assert!(out.status.success(), "bench/bodies.py {size} failed");
    Bytes::from(out.stdout)
}

fn main() {
    let rounds: u32 = std::env::var("BODY_BENCH_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(if cfg!(debug_assertions) { 20 } else { 2_000 });
    println!(
        "{:>6} {:>9} {:>14} {:>10} {:>14} {:>10}",
        "size", "bytes", "parse µs", "ns/byte", "serde µs", "ns/byte"
    );
    for size in SIZES {
        let raw = body(size);
        let parse = per_round(rounds, || {
            RequestBody::parse(raw.clone()).expect("the bench body parses");
        });
        let serde = per_round(rounds, || {
            serde_json::from_slice::<serde::de::IgnoredAny>(&raw).expect("valid JSON");
        });
        let len = raw.len() as f64;
        println!(
            "{size:>6} {:>9} {:>14.2} {:>10.3} {:>14.2} {:>10.3}",
            raw.len(),
            parse,
            parse * 1000.0 / len,
            serde,
            serde * 1000.0 / len
        );
    }
}

/// Mean µs of `run` over `rounds` calls.
fn per_round(rounds: u32, mut run: impl FnMut()) -> f64 {
    let start = Instant::now();
    for _ in 0..rounds {
        run();
    }
    start.elapsed().as_secs_f64() * 1e6 / f64::from(rounds)
}
