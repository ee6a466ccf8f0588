//! What logging one request costs: the request path's share (reserving the record's place
//! in the queue and sending it, as every request does) and the writer's (pricing, one SQLite
//! transaction per batch, rollups, metrics), into a real file in WAL mode. Then the same with
//! `[log] durability = "fsync"`, where each answer waits until its record is fsynced to the
//! spill journal.
//!
//! The normal path: records go out in rounds of [`ROUND`] (about one writer batch), and the
//! next round starts once the writer has committed the last, so each record meets a nearly
//! empty queue, as a request on a healthy gateway does. Sending all of them at once would
//! grow the queue to every record and measure that instead. The run checks nothing was dropped.
//!
//! `cargo bench --bench telemetry` for release figures, or `cargo test --bench telemetry` for a
//! quick debug-build run (`LOG_BENCH_RECORDS` sets the count; 50,000 by default;
//! `LOG_BENCH_CONCURRENCY` the requests in flight for the fsync run, 64 by default).

// Tests and benches stop at the first surprise: unwrap, expect and panic are how they say so.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use switchyard::config::{Config, ModelName, ProviderId, RouteName};
use switchyard::router::FailureClass;
use switchyard::store::Store;
use switchyard::telemetry::{AttemptRecord, Outcome, RecordGuard, RequestRecord, Telemetry};

const CONFIG: &str = "[[providers]]\nname = \"openai\"\nkind = \"openai\"\n\
    [[prices]]\nprovider = \"openai\"\nmodel = \"gpt-4o\"\ninput_per_1m = 2.5\noutput_per_1m = 10.0\n";

/// A typical row: a fallback after one failed attempt, with tokens and a price.
fn record(i: usize) -> RequestRecord {
    let provider = ProviderId(Arc::from("openai"));
    let model = ModelName(Arc::from("gpt-4o"));
    let mut record = RequestRecord::new(format!("bench-{i:08}"), false);
    record.started_at = SystemTime::now();
    record.user = Some("bench".into());
    record.key_id = Some("key-1".into());
    record.route = Some(RouteName(Arc::from("smart")));
    record.outcome = Outcome::Fallback;
    record.step = Some(1);
    record.provider = Some(provider.clone());
    record.model = Some(model.clone());
    record.attempts = vec![
        AttemptRecord {
            step: 0,
            provider: provider.clone(),
            model: model.clone(),
            failure: Some(FailureClass::ServerError),
            status: Some(503),
            latency: Duration::from_millis(120),
            hedge: false,
            span: None,
        },
        AttemptRecord {
            step: 1,
            provider,
            model,
            failure: None,
            status: Some(200),
            latency: Duration::from_millis(640),
            hedge: false,
            span: None,
        },
    ];
    record.status = 200;
    record.latency = Duration::from_millis(780);
    record.overhead = Duration::from_micros(350);
    record.tokens_in = Some(1_200);
    record.tokens_out = Some(300);
    record
}

fn per_record(elapsed: Duration, records: usize) -> String {
    let micros = elapsed.as_secs_f64() * 1e6 / records as f64;
    format!("{micros:.2} µs")
}

fn env(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(default)
}

struct Batched {
    enqueue: Duration,
    total: Duration,
}

/// Records sent per round before waiting for the writer to commit them.
const ROUND: usize = 64;

/// Every record through a guard, as requests send them, a round at a time; only the sending
/// is timed as the request path's share.
async fn batched(store: Store, config: &Config, records: usize) -> Batched {
    let (telemetry, writer) = Telemetry::start(store.clone(), config);
    let mut prepared: Vec<RequestRecord> = (0..records).map(record).collect();
    let started = Instant::now();
    let mut enqueue = Duration::ZERO;
    let mut sent = 0;
    while !prepared.is_empty() {
        let round: Vec<RequestRecord> = prepared.drain(..ROUND.min(prepared.len())).collect();
        sent += round.len();
        let sending = Instant::now();
        for record in round {
            RecordGuard::new(telemetry.clone(), record).finish();
        }
        enqueue += sending.elapsed();
        telemetry.wait_for_rows(sent as u64).await;
    }
    let dropped = telemetry.metrics.log_records_dropped.get();
    drop(telemetry);
    writer.finish().await;
    let total = started.elapsed();
    assert_eq!(
        dropped, 0,
        "the normal path: no record found the queue full"
    );
    assert_eq!(store.count_log().await.unwrap() as usize, records);
    Batched { enqueue, total }
}

struct Fsynced {
    total: Duration,
    waits: Vec<Duration>,
}

/// `concurrency` request tasks, each sending its record and waiting until it is on disk.
async fn fsynced(store: Store, config: &Config, records: usize, concurrency: usize) -> Fsynced {
    let (telemetry, writer) = Telemetry::start(store.clone(), config);
    let started = Instant::now();
    let tasks: Vec<_> = (0..concurrency)
        .map(|task| {
            let telemetry = telemetry.clone();
            tokio::spawn(async move {
                let mut waits = Vec::new();
                for i in (task..records).step_by(concurrency) {
                    let guard = RecordGuard::new(telemetry.clone(), record(i));
                    let durable = guard.durable().expect("fsync durability");
                    let sent = Instant::now();
                    guard.finish();
                    durable.wait().await;
                    waits.push(sent.elapsed());
                }
                waits
            })
        })
        .collect();
    let mut waits = Vec::with_capacity(records);
    for task in tasks {
        waits.extend(task.await.unwrap());
    }
    let total = started.elapsed();
    drop(telemetry);
    writer.finish().await;
    assert_eq!(store.count_log().await.unwrap() as usize, records);
    waits.sort();
    Fsynced { total, waits }
}

fn main() {
    let records = env("LOG_BENCH_RECORDS", 50_000);
    let concurrency = env("LOG_BENCH_CONCURRENCY", 64).max(1);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let paths: Vec<_> = (0..2)
        .map(|_| std::env::temp_dir().join(format!("switchyard-bench-{}.db", uuid::Uuid::now_v7())))
        .collect();
    let open = |path: &std::path::Path, log: &str| {
        let url = format!("sqlite://{}", path.display());
        let config = Config::parse(&format!("[store]\nurl = \"{url}\"\n{log}{CONFIG}")).unwrap();
        (url, config)
    };
    let (batched, fsynced) = runtime.block_on(async {
        let (url, config) = open(&paths[0], "");
        let batched = batched(Store::open(&url).await.unwrap(), &config, records).await;
        let (url, config) = open(&paths[1], "[log]\ndurability = \"fsync\"\n");
        let store = Store::open(&url).await.unwrap();
        let fsynced = fsynced(store, &config, records, concurrency).await;
        (batched, fsynced)
    });
    println!("logging {records} requests into SQLite (WAL, batches of up to 256)\n");
    println!("[log] durability = \"batched\" (the default)");
    println!(
        "  {:<50} {:>12}",
        "request path: reserve a place, send the record",
        per_record(batched.enqueue, records)
    );
    // Each round waits out the writer's linger (10 ms) for more records, so this is a
    // latency-bound figure, not the writer's throughput.
    println!(
        "  {:<50} {:>12}",
        format!("end to end, rounds of {ROUND}: queued .. committed"),
        per_record(batched.total, records)
    );
    let at = |q: f64| {
        let index =
            ((q * fsynced.waits.len() as f64).ceil() as usize).clamp(1, fsynced.waits.len());
        fsynced.waits[index - 1].as_secs_f64() * 1e3
    };
    println!("\n[log] durability = \"fsync\", {concurrency} requests in flight");
    println!(
        "  {:<50} {:>6.2} / {:.2} ms",
        "answer waits for its record on disk: p50 / p99",
        at(0.5),
        at(0.99)
    );
    println!(
        "  {:<50} {:>9.0} /s",
        "records made durable",
        records as f64 / fsynced.total.as_secs_f64()
    );
    println!(
        "\nThe request path's figure is what a request pays with batching; the writer runs on \
         its own task and the blocking pool. With fsync, each answer also waits for one \
         journal append and fdatasync, shared by the records that arrived meanwhile."
    );
    for path in &paths {
        for suffix in ["", "-wal", "-shm", "-spill"] {
            let _ = std::fs::remove_file(format!("{}{suffix}", path.display()));
        }
    }
}
