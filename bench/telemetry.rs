//! What logging one request costs: the request path's share (queueing its record) and the
//! writer's (pricing, one SQLite transaction per batch, metrics), into a real file in WAL mode.
//!
//! `cargo bench --bench telemetry` for release figures, or `cargo test --bench telemetry` for a
//! quick debug-build run (`LOG_BENCH_RECORDS` sets the count; 50,000 by default).

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use switchyard::config::{Config, ModelName, ProviderId, RouteName};
use switchyard::router::FailureClass;
use switchyard::store::Store;
use switchyard::telemetry::{AttemptRecord, Outcome, RequestRecord, Telemetry};

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
        },
        AttemptRecord {
            step: 1,
            provider,
            model,
            failure: None,
            status: Some(200),
            latency: Duration::from_millis(640),
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

fn main() {
    let records: usize = std::env::var("LOG_BENCH_RECORDS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(50_000);
    let path = std::env::temp_dir().join(format!("switchyard-bench-{}.db", uuid::Uuid::now_v7()));
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let config = Config::parse(CONFIG).unwrap();
    let (enqueue, total, stored) = runtime.block_on(async {
        let store = Store::open(&format!("sqlite://{}", path.display()))
            .await
            .unwrap();
        let (telemetry, writer) = Telemetry::start(store.clone(), &config);
        let prepared: Vec<RequestRecord> = (0..records).map(record).collect();
        let started = Instant::now();
        for record in prepared {
            telemetry.record(record);
        }
        let enqueue = started.elapsed();
        drop(telemetry);
        writer.finish().await;
        let total = started.elapsed();
        (enqueue, total, store.count_log().await.unwrap())
    });
    assert_eq!(stored as usize, records, "every record is stored");
    println!("logging {records} requests into SQLite (WAL, batches of up to 256)\n");
    println!(
        "{:<46} {:>12}",
        "request path: queue one record",
        per_record(enqueue, records)
    );
    println!(
        "{:<46} {:>12}",
        "end to end: queued, priced, committed, counted",
        per_record(total, records)
    );
    println!(
        "{:<46} {:>9.0} /s",
        "writer throughput",
        records as f64 / total.as_secs_f64()
    );
    println!(
        "\nThe request path's figure is what a request pays; the writer's runs on its own task \
         and the blocking pool."
    );
    for suffix in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{}{suffix}", path.display()));
    }
}
