//! What happened to each request: one [`RequestRecord`] per request, delivered exactly once.
//!
//! The handler builds a record as it goes; a [`RecordGuard`] sends it when the request ends,
//! however it ends (answer, error, client disconnect mid-stream, panic). Records go through a
//! bounded queue (`[log] queue_records`) to a writer task, so the request path never waits on
//! I/O. Each request reserves its place in the queue when it arrives, so a record never
//! finds the queue full when it is done; when no place is left, `[log] when_full` refuses the
//! request or lets it through with its record dropped and counted. The writer stores rows in
//! batches, one transaction each; while the store refuses writes, batches go to a spill
//! journal on disk and are replayed once it takes them again. Shutdown flushes it all.

pub mod access_line;
mod failure;
mod guard;
mod journal;
pub mod logs;
pub mod metrics;
pub mod scorecard;
pub mod spans;
pub mod trace;
mod writer;

use std::collections::VecDeque;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use serde::Serialize;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;

use crate::config::{Config, Durability, ModelName, ProviderId, RouteName, WhenFull};
use crate::store::Store;

pub use failure::FailureClass;
pub use guard::{Durable, RecordGuard};
pub use writer::log_row;

/// How a request ended, from the client's point of view.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Served by the chain's first step.
    Success,
    /// Served by a later step.
    Fallback,
    /// Every step failed; the route's canned answer was served.
    Degraded,
    /// The client got an error of the gateway's or a provider's making, or a stream that
    /// broke after it began.
    Error,
    /// The client's own mistake (a 4xx other than 429: a model no route serves, a malformed
    /// body, a provider's 4xx returned as is): not the gateway's error, kept out of
    /// availability.
    ClientError,
    /// Refused before routing: authentication or rate limits.
    Rejected,
    /// Not a client's request: the gateway's own active health check of an open breaker.
    HealthCheck,
}

impl Outcome {
    /// The name used in headers, logs and metric labels.
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Success => "success",
            Outcome::Fallback => "fallback",
            Outcome::Degraded => "degraded",
            Outcome::Error => "error",
            Outcome::ClientError => "client_error",
            Outcome::Rejected => "rejected",
            Outcome::HealthCheck => "health_check",
        }
    }
}

/// One upstream attempt, or one step skipped without an attempt (`no_key`, `deadline`,
/// `circuit_open`, `benched`), or a retry the budget refused (`retry_budget_exhausted`, named
/// after the deployment whose budget it was).
#[derive(Clone, Debug)]
pub struct AttemptRecord {
    pub step: usize,
    pub provider: ProviderId,
    pub model: ModelName,
    /// `None` when this attempt served the request (a stream: to its end; one that broke
    /// after it began carries the class of the break).
    pub failure: Option<FailureClass>,
    pub status: Option<u16>,
    pub latency: Duration,
    /// Whether this attempt was a hedge: started beside a slow step 0, racing it.
    pub hedge: bool,
    /// Its span, when the request is traced.
    pub span: Option<AttemptSpan>,
}

/// An attempt's span in the request's trace: its id (sent upstream in `traceparent`), and
/// when it began.
#[derive(Clone, Copy, Debug)]
pub struct AttemptSpan {
    pub id: opentelemetry::trace::SpanId,
    pub started_at: SystemTime,
}

impl AttemptSpan {
    /// A span beginning now, when `traced`; else none (and nothing is spent on it).
    pub fn begin(traced: bool) -> Option<AttemptSpan> {
        traced.then(|| AttemptSpan {
            id: opentelemetry::trace::SpanId::from(fastrand::u64(1..)),
            started_at: SystemTime::now(),
        })
    }
}

impl AttemptRecord {
    /// Whether a request actually went upstream (skipped steps are not attempts).
    pub fn reached_upstream(&self) -> bool {
        !matches!(
            self.failure,
            Some(
                FailureClass::NoKey
                    | FailureClass::Deadline
                    | FailureClass::CircuitOpen
                    | FailureClass::Benched
                    | FailureClass::RetryBudgetExhausted
            )
        )
    }
}

/// The request log's row.
#[derive(Clone, Debug)]
pub struct RequestRecord {
    pub id: String,
    pub started_at: SystemTime,
    /// The virtual key's id (never the key), and its user.
    pub key_id: Option<String>,
    pub user: Option<String>,
    pub route: Option<RouteName>,
    pub outcome: Outcome,
    pub step: Option<usize>,
    pub provider: Option<ProviderId>,
    pub model: Option<ModelName>,
    pub attempts: Vec<AttemptRecord>,
    pub status: u16,
    pub latency: Duration,
    pub ttft: Option<Duration>,
    pub overhead: Duration,
    pub tokens_in: Option<u64>,
    pub tokens_out: Option<u64>,
    /// US dollars, priced by the writer from `[[prices]]`; `None` for unpriced models.
    pub cost_usd: Option<f64>,
    pub stream: bool,
    pub partial: bool,
    /// A short, secret-free reason when the outcome is an error.
    pub error: Option<String>,
    /// Whether a hedge was due (step 0 slow past the route's delay) but the route's hedge
    /// budget refused it.
    pub hedge_refused: bool,
    /// What the response cache did; `None` on a route that caches nothing.
    pub cache: Option<CacheStatus>,
    /// The request's trace, when tracing is on.
    pub trace: Option<Arc<trace::TraceContext>>,
    /// For a traced request's spans: the GenAI operation (`chat`, `embeddings`,
    /// `text_completion`) and the model the client asked for.
    pub operation: Option<&'static str>,
    pub requested_model: Option<String>,
    /// The request's `max_tokens` (or `max_completion_tokens`, `max_output_tokens`).
    pub max_tokens: Option<u64>,
    /// The rest of a sampled request's span: role, budget, finish reasons and content.
    pub detail: Option<Box<trace::SpanDetail>>,
}

/// What the response cache did for a request, as `x-switchyard-cache` and the log say.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CacheStatus {
    /// Served a kept answer.
    Hit,
    /// Went upstream; a complete answer is kept.
    Miss,
    /// Served the answer of an identical miss it waited for.
    Coalesced,
    /// The route caches, but not this request: `cache-control: no-store` or `no-cache`, or
    /// a request the cache does not serve.
    Bypass,
}

impl CacheStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            CacheStatus::Hit => "hit",
            CacheStatus::Miss => "miss",
            CacheStatus::Coalesced => "coalesced",
            CacheStatus::Bypass => "bypass",
        }
    }
}

impl RequestRecord {
    /// A fresh record for a request that just arrived.
    pub fn new(id: String, stream: bool) -> RequestRecord {
        RequestRecord {
            id,
            started_at: SystemTime::now(),
            key_id: None,
            user: None,
            route: None,
            outcome: Outcome::Error,
            step: None,
            provider: None,
            model: None,
            attempts: Vec::new(),
            status: 0,
            latency: Duration::ZERO,
            ttft: None,
            overhead: Duration::ZERO,
            tokens_in: None,
            tokens_out: None,
            cost_usd: None,
            stream,
            partial: false,
            error: None,
            hedge_refused: false,
            cache: None,
            trace: None,
            operation: None,
            requested_model: None,
            max_tokens: None,
            detail: None,
        }
    }
}

/// What the writer says as it goes: the access-log line, the count of rows written (bumped
/// once a batch), and, only once [`Telemetry::observe`] turned them on, the last records.
pub(crate) struct RecentLog {
    rows: Mutex<VecDeque<RequestRecord>>,
    written: watch::Sender<u64>,
    /// Whether a test (or the demo) observes: off in a gateway started by `server::run`, so
    /// its requests pay for neither the kept records nor the in-flight count.
    observed: AtomicBool,
}

const RECENT_ROWS: usize = 10_000;

/// A record on its way to the writer, with what its answer waits on (`fsync` only).
pub(crate) struct Entry {
    /// Boxed: a record is about 300 bytes, and the guard that holds it lives in every
    /// request's future, which is moved by value several times a request.
    record: Box<RequestRecord>,
    ack: Option<guard::Ack>,
}

/// How the writer stands, as the writer last saw it: what `/readyz` shows.
#[derive(Default)]
pub(crate) struct WriterState {
    /// Bytes in the spill journal.
    spill_bytes: AtomicU64,
    /// Whether the store took the last write tried.
    store_refusing: AtomicBool,
    /// Whether the writer holds a batch that neither the store nor the journal would take.
    holding: AtomicBool,
}

/// The sending side of the request log; cheap to clone.
#[derive(Clone)]
pub struct Telemetry {
    queue: mpsc::Sender<Entry>,
    log: Arc<RecentLog>,
    /// Counted as records are written, so metrics and the log always agree.
    pub metrics: Arc<metrics::Metrics>,
    /// Requests begun whose record is not sent yet: every request task still alive.
    in_flight: Arc<watch::Sender<usize>>,
    state: Arc<WriterState>,
    settings: Arc<Settings>,
    /// What sampled requests' spans say of each provider.
    span_providers: Arc<spans::SpanProviders>,
    /// What the writer costs rows with.
    prices: Arc<arc_swap::ArcSwap<writer::PriceTable>>,
}

/// The `[log]` settings the sending side needs.
struct Settings {
    when_full: WhenFull,
    durability: Durability,
    spill_capacity: u64,
    spill_path: PathBuf,
}

/// The request log's state, for `/readyz`.
#[derive(Clone, Debug, Serialize)]
pub struct LogHealth {
    /// `ok`, `spilling` (the store refuses writes; rows go to the journal) or `full` (the
    /// queue and the journal are full: new requests are refused or their records dropped).
    pub status: &'static str,
    /// Why, in words, when the status is not `ok`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Places taken in the queue (queued records and those reserved by requests in flight).
    pub queue_records: usize,
    pub queue_capacity: usize,
    pub spill_bytes: u64,
    pub spill_capacity: u64,
    /// `refuse` or `drop`.
    pub when_full: &'static str,
    /// `batched` or `fsync`.
    pub durability: &'static str,
}

/// The writer task; awaiting [`TelemetryWriter::finish`] after every sender is gone flushes it.
pub struct TelemetryWriter(JoinHandle<()>);

impl TelemetryWriter {
    /// Waits until every queued record has been written.
    pub async fn finish(self) {
        // A panicked writer has nothing left to flush.
        let _ = self.0.await;
    }
}

/// Where the spill journal goes unless `[log] spill_path` says: beside the store's file or,
/// for an in-memory store, a file of this process's own in the temp dir.
pub fn default_spill_path(store_url: &str) -> PathBuf {
    match store_url.strip_prefix("sqlite://") {
        Some(path) if !path.is_empty() => PathBuf::from(format!("{path}-spill")),
        _ => std::env::temp_dir().join(format!(
            "switchyard-spill-{}-{}",
            std::process::id(),
            uuid::Uuid::now_v7()
        )),
    }
}

impl Telemetry {
    /// Starts the writer task, which stores rows in `store` and prices them from `config`.
    /// Rows a previous run left in the spill journal are replayed first.
    pub fn start(store: Store, config: &Config) -> (Telemetry, TelemetryWriter) {
        let settings = &config.log;
        let (queue, receiver) = mpsc::channel::<Entry>(settings.queue_records);
        let log = Arc::new(RecentLog {
            rows: Mutex::new(VecDeque::new()),
            written: watch::Sender::new(0),
            observed: AtomicBool::new(false),
        });
        let metrics = Arc::new(metrics::Metrics::new(metrics::LabelNames::from_config(
            config,
        )));
        let state = Arc::new(WriterState::default());
        let spill_path = settings
            .spill_path
            .clone()
            .unwrap_or_else(|| default_spill_path(&config.store.url));
        let journal = (settings.spill_bytes > 0)
            .then(|| journal::Journal::open(spill_path.clone(), settings.spill_bytes));
        let span_providers = Arc::new(spans::SpanProviders::new(config));
        let prices = Arc::new(arc_swap::ArcSwap::from_pointee(writer::price_table(config)));
        let writer = writer::Writer::new(
            store,
            config,
            journal,
            log.clone(),
            metrics.clone(),
            state.clone(),
            writer::Swapped {
                span_providers: span_providers.clone(),
                prices: prices.clone(),
            },
        );
        let writer = tokio::spawn(writer.run(receiver));
        (
            Telemetry {
                queue,
                log,
                metrics,
                in_flight: Arc::new(watch::Sender::new(0)),
                state,
                settings: Arc::new(Settings {
                    when_full: settings.when_full,
                    durability: settings.durability,
                    spill_capacity: settings.spill_bytes,
                    spill_path,
                }),
                span_providers,
                prices,
            },
            TelemetryWriter(writer),
        )
    }

    /// What `record`'s request cost in US dollars, as the writer costs rows.
    pub fn cost(&self, record: &RequestRecord) -> Option<f64> {
        writer::cost(&self.prices.load(), record)
    }

    /// What `provider`'s `model` charges for these tokens, by the prices rows are costed
    /// with; `None` without a price.
    pub fn price(
        &self,
        provider: &str,
        model: &str,
        tokens_in: u64,
        tokens_out: u64,
    ) -> Option<f64> {
        let key = (ProviderId(provider.into()), ModelName(model.into()));
        let prices = self.prices.load();
        Some(prices.get(&key)?.cost(tokens_in, tokens_out))
    }

    /// Takes a reloaded config's names and prices: the metrics' labels, the spans'
    /// providers, and what rows are costed with.
    pub fn reconfigure(&self, config: &Config) {
        self.metrics
            .set_names(metrics::LabelNames::from_config(config));
        self.span_providers.set(config);
        self.prices.store(Arc::new(writer::price_table(config)));
    }

    /// Queues one record that holds no reserved place: when the queue is full it is dropped,
    /// and counted.
    pub fn record(&self, record: RequestRecord) {
        self.enqueue(Entry {
            record: Box::new(record),
            ack: None,
        });
    }

    fn enqueue(&self, entry: Entry) {
        match self.queue.try_send(entry) {
            Ok(()) => {}
            Err(mpsc::error::TrySendError::Full(entry)) => {
                self.metrics.log_records_dropped.inc();
                tracing::debug!(id = %entry.record.id, "request log full; record dropped");
            }
            Err(mpsc::error::TrySendError::Closed(entry)) => {
                self.metrics.log_rows_lost.inc();
                tracing::error!(id = %entry.record.id, "request log closed; record lost");
            }
        }
    }

    /// The request log's state: queue, journal, and whether new requests are refused.
    pub fn health(&self) -> LogHealth {
        let capacity = self.queue.max_capacity();
        let taken = capacity - self.queue.capacity();
        let spill_bytes = self.state.spill_bytes.load(Ordering::Relaxed);
        let full = taken >= capacity;
        let refusing = self.state.store_refusing.load(Ordering::Relaxed);
        let (status, reason) = if full {
            let reason = full_reason(&self.settings, capacity, spill_bytes, refusing);
            ("full", Some(reason))
        } else if refusing || self.state.holding.load(Ordering::Relaxed) {
            let reason = format!(
                "the store refuses writes; request-log rows are spilled to {} and replayed when it takes writes again",
                self.settings.spill_path.display()
            );
            ("spilling", Some(reason))
        } else {
            ("ok", None)
        };
        LogHealth {
            status,
            reason,
            queue_records: taken,
            queue_capacity: capacity,
            spill_bytes,
            spill_capacity: self.settings.spill_capacity,
            when_full: match self.settings.when_full {
                WhenFull::Refuse => "refuse",
                WhenFull::Drop => "drop",
            },
            durability: match self.settings.durability {
                Durability::Batched => "batched",
                Durability::Fsync => "fsync",
            },
        }
    }

    /// Whether new requests are being refused because the log has no room.
    pub fn refusing(&self) -> bool {
        self.settings.when_full == WhenFull::Refuse && self.queue.capacity() == 0
    }

    /// Keeps the last 10,000 records in memory and counts the requests in flight, for
    /// [`Self::recent`] and [`Self::wait_idle`]. Tests and the demo turn it on (through
    /// `server::Gateway`); a production gateway never does, so no request pays for it.
    pub fn observe(&self) {
        self.log.observed.store(true, Ordering::Relaxed);
    }

    /// The most recent records written since [`Self::observe`], oldest first.
    pub fn recent(&self) -> Vec<RequestRecord> {
        self.log.lock().iter().cloned().collect()
    }

    /// Resolves once at least `count` records have been written (committed to the store)
    /// since start.
    pub async fn wait_for_rows(&self, count: u64) {
        let mut written = self.log.written.subscribe();
        // The sender lives as long as `self`, so this cannot fail while we wait.
        let _ = written.wait_for(|n| *n >= count).await;
    }

    /// Resolves once no request begun since [`Self::observe`] is in flight.
    pub async fn wait_idle(&self) {
        let mut in_flight = self.in_flight.subscribe();
        // The sender lives in `self`, so the channel cannot close while we wait.
        let _ = in_flight.wait_for(|n| *n == 0).await;
    }

    /// How many records have been written since start.
    pub fn rows_written(&self) -> u64 {
        *self.log.written.borrow()
    }
}

impl RecentLog {
    fn lock(&self) -> std::sync::MutexGuard<'_, VecDeque<RequestRecord>> {
        // Poison only means a panic mid-push; the deque is still valid.
        self.rows.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn append(&self, record: &RequestRecord) {
        // The target is `access_line::TARGET`, which the text format writes directly.
        tracing::info!(
            target: "switchyard::requests",
            id = %record.id,
            route = record.route.as_ref().map(|r| r.as_str()).unwrap_or("-"),
            outcome = record.outcome.as_str(),
            status = record.status,
            step = record.step.map(|s| s as i64).unwrap_or(-1),
            provider = record.provider.as_ref().map(|p| p.as_str()).unwrap_or("-"),
            attempts = record.attempts.len(),
            latency_ms = record.latency.as_secs_f64() * 1e3,
            stream = record.stream,
            partial = record.partial,
            error = record.error.as_deref().unwrap_or(""),
            "request"
        );
        if !self.observed.load(Ordering::Relaxed) {
            return;
        }
        let mut rows = self.lock();
        if rows.len() == RECENT_ROWS {
            rows.pop_front();
        }
        rows.push_back(record.clone());
    }
}

/// Why the request log is full. The queue fills when the store refuses writes and the
/// journal is full too, but also when the store takes rows more slowly than requests arrive
/// (a saturated gateway, a slow disk), with the journal empty: the reason says which.
fn full_reason(
    settings: &Settings,
    capacity: usize,
    spill_bytes: u64,
    store_refusing: bool,
) -> String {
    let consequence = match settings.when_full {
        WhenFull::Refuse => "new requests are refused with 503",
        WhenFull::Drop => "records of new requests are dropped",
    };
    if store_refusing {
        format!(
            "the request-log queue ({capacity} records) and spill journal ({spill_bytes} of {} bytes at {}) are full: the store refuses writes; {consequence}",
            settings.spill_capacity,
            settings.spill_path.display(),
        )
    } else {
        format!(
            "the request-log queue ({capacity} records) is full: the store takes rows more slowly than requests arrive; {consequence}"
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn finish_flushes_a_queue_filled_without_yielding() {
        let store = Store::open("sqlite::memory:").await.unwrap();
        let config = Config::parse("[log]\nqueue_records = 20000\n").unwrap();
        let (telemetry, writer) = Telemetry::start(store.clone(), &config);
        let count = 20_000;
        for i in 0..count {
            telemetry.record(RequestRecord::new(format!("r{i}"), false));
        }
        let probe = telemetry.clone();
        drop(telemetry);
        probe.wait_for_rows(count as u64).await;
        drop(probe);
        writer.finish().await;
        assert_eq!(store.count_log().await.unwrap(), count as u64);
    }

    #[test]
    fn a_full_log_blames_the_store_only_when_it_refuses_writes() {
        let settings = Settings {
            when_full: WhenFull::Refuse,
            durability: Durability::Batched,
            spill_capacity: 1024,
            spill_path: PathBuf::from("/var/lib/switchyard/log-spill"),
        };
        let behind = full_reason(&settings, 4096, 0, false);
        assert!(!behind.contains("refuses writes"), "{behind}");
        assert!(!behind.contains("journal"), "{behind}");
        assert!(behind.contains("more slowly"), "{behind}");
        assert!(
            behind.ends_with("new requests are refused with 503"),
            "{behind}"
        );
        let refusing = full_reason(&settings, 4096, 1024, true);
        assert!(refusing.contains("the store refuses writes"), "{refusing}");
        assert!(refusing.contains("1024 of 1024 bytes"), "{refusing}");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_full_queue_spawns_no_task_per_record() {
        let path =
            std::env::temp_dir().join(format!("switchyard-full-{}.db", uuid::Uuid::now_v7()));
        let url = format!("sqlite://{}", path.display());
        let store = Store::open(&url).await.unwrap();
        // Another connection holds the write lock: the writer cannot commit anything, and
        // with no journal it has nowhere else to put rows.
        let blocker = rusqlite::Connection::open(&path).unwrap();
        blocker.execute_batch("BEGIN EXCLUSIVE").unwrap();
        let text = format!(
            "[store]\nurl = \"{url}\"\n[log]\nqueue_records = 64\nspill_bytes = 0\nwhen_full = \"drop\"\n"
        );
        let config = Config::parse(&text).unwrap();
        let (telemetry, writer) = Telemetry::start(store.clone(), &config);
        let metrics = tokio::runtime::Handle::current().metrics();
        let before = metrics.num_alive_tasks();
        let count = 20_000;
        for i in 0..count {
            telemetry.record(RequestRecord::new(format!("r{i}"), false));
        }
        let after = metrics.num_alive_tasks();
        assert!(after <= before + 1, "{before} tasks before, {after} after");
        let health = telemetry.health();
        assert!(health.queue_records <= 64, "{health:?}");
        // The queue holds 64 and the writer's one batch at most 256 (it lingers for more while
        // it fills); the rest is dropped, and counted.
        let dropped = telemetry.metrics.log_records_dropped.get();
        assert!(dropped >= count - 64 - 256, "{dropped} dropped");
        blocker.execute_batch("COMMIT").unwrap();
        drop(blocker);
        let probe = telemetry.clone();
        drop(telemetry);
        let kept = count - dropped;
        probe.wait_for_rows(kept).await;
        drop(probe);
        writer.finish().await;
        assert_eq!(store.count_log().await.unwrap(), kept);
        for suffix in ["", "-wal", "-shm"] {
            let _ = std::fs::remove_file(format!("{}{suffix}", path.display()));
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn shutdown_ends_even_when_nothing_will_take_the_rows() {
        let path =
            std::env::temp_dir().join(format!("switchyard-stuck-{}.db", uuid::Uuid::now_v7()));
        let url = format!("sqlite://{}", path.display());
        let store = Store::open(&url).await.unwrap();
        // The store refuses writes for the whole test, and there is no journal.
        let blocker = rusqlite::Connection::open(&path).unwrap();
        blocker.execute_batch("BEGIN EXCLUSIVE").unwrap();
        let text = format!(
            "[store]\nurl = \"{url}\"\n[log]\nqueue_records = 4\nspill_bytes = 0\nwhen_full = \"drop\"\n"
        );
        let config = Config::parse(&text).unwrap();
        let (telemetry, writer) = Telemetry::start(store.clone(), &config);
        for i in 0..10 {
            telemetry.record(RequestRecord::new(format!("r{i}"), false));
        }
        // Shut down only once the writer holds a batch it could not put anywhere.
        let holding = async {
            while !telemetry.state.holding.load(Ordering::Relaxed) {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        };
        tokio::time::timeout(Duration::from_secs(10), holding)
            .await
            .expect("the writer finds the store refusing");
        let metrics = telemetry.metrics.clone();
        drop(telemetry);
        tokio::time::timeout(Duration::from_secs(20), writer.finish())
            .await
            .expect("the writer ends: it does not wait forever for the store");
        // Every record is accounted for: dropped at the queue, or lost at shutdown.
        assert_eq!(
            metrics.log_records_dropped.get() + metrics.log_rows_lost.get(),
            10
        );
        drop(blocker);
        for suffix in ["", "-wal", "-shm"] {
            let _ = std::fs::remove_file(format!("{}{suffix}", path.display()));
        }
    }

    #[tokio::test]
    async fn only_an_observed_log_keeps_records_and_counts_requests() {
        let store = Store::open("sqlite::memory:").await.unwrap();
        let (telemetry, writer) = Telemetry::start(store.clone(), &Config::parse("").unwrap());
        let guard = RecordGuard::new(telemetry.clone(), RequestRecord::new("a".into(), false));
        assert_eq!(
            *telemetry.in_flight.borrow(),
            0,
            "nobody observes: nothing counted"
        );
        guard.finish();
        telemetry.wait_for_rows(1).await;
        assert!(
            telemetry.recent().is_empty(),
            "nobody observes: nothing kept"
        );

        telemetry.observe();
        let guard = RecordGuard::new(telemetry.clone(), RequestRecord::new("b".into(), false));
        assert_eq!(*telemetry.in_flight.borrow(), 1);
        guard.finish();
        telemetry.wait_idle().await;
        telemetry.wait_for_rows(2).await;
        let ids: Vec<_> = telemetry.recent().into_iter().map(|r| r.id).collect();
        assert_eq!(ids, ["b"]);
        drop(telemetry);
        writer.finish().await;
        assert_eq!(
            store.count_log().await.unwrap(),
            2,
            "every record is stored either way"
        );
    }

    #[tokio::test]
    async fn the_writer_purges_rows_past_retention() {
        let store = Store::open("sqlite::memory:").await.unwrap();
        let old = log_row(RequestRecord {
            started_at: SystemTime::now() - Duration::from_secs(2 * 24 * 3600),
            ..RequestRecord::new("old".into(), false)
        });
        store.insert_log(vec![old]).await.unwrap();
        let config = Config::parse("[log]\nretention = \"1d\"\n").unwrap();
        let (telemetry, writer) = Telemetry::start(store.clone(), &config);
        telemetry.record(RequestRecord::new("new".into(), false));
        drop(telemetry);
        writer.finish().await;
        let rows = store.query_log(Default::default()).await.unwrap();
        let ids: Vec<_> = rows.iter().map(|r| r.id.as_str()).collect();
        assert_eq!(ids, ["new"]);
    }
}
