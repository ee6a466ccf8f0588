//! Request-log rows per second into PostgreSQL: batches as the log writer sends them (256
//! rows, one `INSERT … FROM UNNEST` and one rollup merge per transaction), from one writer
//! and from two at once (two instances, or the pool's spare connection), into a fresh
//! database of the bench's own on the local server.
//!
//! `cargo bench --bench pg_log` for release figures (`SWITCHYARD_TEST_POSTGRES` names the
//! server, `postgres://postgres@127.0.0.1:5432` by default; `PG_BENCH_ROWS` the rows per run,
//! 200,000 by default).

// Tests and benches stop at the first surprise: unwrap, expect and panic are how they say so.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Arc;
use std::time::Instant;

use switchyard::store::Store;
use switchyard::store::now_ms;
use switchyard::store::postgres::testdb::TestDb;
use switchyard::store::request_log::{LogAttempt, LogRow};

/// The log writer's batch (`telemetry::writer::BATCH`).
const BATCH: usize = 256;

fn row(run: &str, i: usize, now: i64) -> LogRow {
    let attempt = |step: usize, failure: Option<&str>, status: u16, latency_ms: f64| LogAttempt {
        step,
        provider: "openai".into(),
        model: "gpt-4o".into(),
        failure: failure.map(str::to_owned),
        status: Some(status),
        latency_ms,
        reached_upstream: true,
        hedge: false,
    };
    LogRow {
        id: format!("{run}-{i:09}"),
        time_ms: now + (i as i64 % 1000),
        key_id: Some("key-1".into()),
        user: Some("bench".into()),
        route: Some(["smart", "fast"][i % 2].into()),
        outcome: "fallback".into(),
        step: Some(1),
        provider: Some("openai".into()),
        model: Some("gpt-4o".into()),
        attempts: vec![
            attempt(0, Some("server_error"), 503, 120.0),
            attempt(1, None, 200, 640.0 + (i % 97) as f64),
        ],
        status: 200,
        latency_ms: 780.0,
        ttft_ms: None,
        overhead_ms: 0.35,
        tokens_in: Some(1_200),
        tokens_out: Some(300),
        cost_usd: Some(0.006),
        stream: false,
        partial: false,
        error: None,
        cache: None,
        trace_id: None,
    }
}

/// Inserts `rows` rows in writer-sized batches from `writers` tasks at once; rows a second.
async fn run(store: &Store, run: &str, rows: usize, writers: usize) -> f64 {
    let now = now_ms();
    let batches: Vec<Arc<[LogRow]>> = (0..rows)
        .collect::<Vec<_>>()
        .chunks(BATCH)
        .map(|chunk| chunk.iter().map(|&i| row(run, i, now)).collect())
        .collect();
    let per_writer = batches.len().div_ceil(writers);
    let started = Instant::now();
    let tasks: Vec<_> = batches
        .chunks(per_writer)
        .map(|mine| {
            let (store, mine) = (store.clone(), mine.to_vec());
            tokio::spawn(async move {
                for batch in mine {
                    let stored = store.insert_log(batch.clone()).await.expect("insert");
                    assert_eq!(stored, batch.len());
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.expect("writer");
    }
    rows as f64 / started.elapsed().as_secs_f64()
}

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async {
        let rows: usize = std::env::var("PG_BENCH_ROWS")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(200_000);
        if let Err(why) = TestDb::usable().await {
            eprintln!("pg_log: not measured: {why}");
            return;
        }
        let db = TestDb::create().await;
        let store = Store::open(&db.url()).await.expect("store");
        // Warm up: connections, prepared statements, the table's first pages.
        run(&store, "warm", 10 * BATCH, 1).await;
        for writers in [1, 2] {
            let per_second = run(&store, &format!("w{writers}"), rows, writers).await;
            println!(
                "pg request log: {rows} rows in batches of {BATCH}, {writers} writer(s): {per_second:.0} rows/s"
            );
        }
        let stored = store.count_log().await.expect("count");
        assert_eq!(stored as usize, 10 * BATCH + 2 * rows, "every row stored once");
        drop(store);
        db.drop_now().await;
    });
}
