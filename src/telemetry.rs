//! What happened to each request: one [`RequestRecord`] per request, delivered exactly once.
//!
//! The handler builds a record as it goes; a [`RecordGuard`] sends it when the request ends,
//! however it ends (answer, error, client disconnect mid-stream, panic). Records go through a
//! bounded queue to a writer task, so the request path never waits on I/O; when the queue is
//! full the record waits in a spawned task instead of being dropped. The writer stores rows in
//! batches, one transaction each, and finishes its last batch before shutdown completes.

pub mod logs;
pub mod metrics;
pub mod scorecard;
mod writer;

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;

use crate::config::{Config, ModelName, ProviderId, RouteName};
use crate::router::FailureClass;
use crate::store::Store;

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
    /// The client got an error, or a stream that broke after it began.
    Error,
    /// Refused before routing: authentication or rate limits.
    Rejected,
}

impl Outcome {
    /// The name used in headers, logs and metric labels.
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Success => "success",
            Outcome::Fallback => "fallback",
            Outcome::Degraded => "degraded",
            Outcome::Error => "error",
            Outcome::Rejected => "rejected",
        }
    }
}

/// One upstream attempt, or one step skipped without an attempt (`no_key`, `deadline`,
/// `circuit_open`, `benched`).
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
        }
    }
}

/// Recent request records, kept in memory for tests and the operator's views.
pub(crate) struct RecentLog {
    rows: Mutex<VecDeque<RequestRecord>>,
    written: watch::Sender<u64>,
}

const RECENT_ROWS: usize = 10_000;
const QUEUE_DEPTH: usize = 4_096;

/// The sending side of the request log; cheap to clone.
#[derive(Clone)]
pub struct Telemetry {
    queue: mpsc::Sender<RequestRecord>,
    log: Arc<RecentLog>,
    /// Counted as records are written, so metrics and the log always agree.
    pub metrics: Arc<metrics::Metrics>,
    /// Requests begun whose record is not sent yet: every request task still alive.
    in_flight: Arc<watch::Sender<usize>>,
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

impl Telemetry {
    /// Starts the writer task, which stores rows in `store` and prices them from `config`.
    pub fn start(store: Store, config: &Config) -> (Telemetry, TelemetryWriter) {
        let (queue, receiver) = mpsc::channel::<RequestRecord>(QUEUE_DEPTH);
        let log = Arc::new(RecentLog {
            rows: Mutex::new(VecDeque::new()),
            written: watch::Sender::new(0),
        });
        let metrics = Arc::new(metrics::Metrics::new(metrics::LabelNames::from_config(
            config,
        )));
        let writer = writer::Writer::new(store, config, log.clone(), metrics.clone());
        let writer = tokio::spawn(writer.run(receiver));
        (
            Telemetry {
                queue,
                log,
                metrics,
                in_flight: Arc::new(watch::Sender::new(0)),
            },
            TelemetryWriter(writer),
        )
    }

    /// Queues one record. Never drops it: a full queue hands it to a task that waits.
    pub fn record(&self, record: RequestRecord) {
        match self.queue.try_send(record) {
            Ok(()) => {}
            Err(mpsc::error::TrySendError::Full(record)) => {
                let queue = self.queue.clone();
                tokio::spawn(async move {
                    let _ = queue.send(record).await;
                });
            }
            Err(mpsc::error::TrySendError::Closed(record)) => {
                tracing::error!(id = %record.id, "request log closed; record lost");
            }
        }
    }

    /// The most recent records, oldest first.
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

    /// Resolves once no request is in flight.
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

    fn append(&self, record: RequestRecord) {
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
        let mut rows = self.lock();
        if rows.len() == RECENT_ROWS {
            rows.pop_front();
        }
        rows.push_back(record);
    }
}

/// Sends its record exactly once: on [`RecordGuard::finish`], or when dropped unfinished
/// (a client that went away, a panic), marked as such.
pub struct RecordGuard {
    record: Option<RequestRecord>,
    telemetry: Telemetry,
    started: tokio::time::Instant,
}

impl RecordGuard {
    /// Starts the record of a request that just arrived.
    pub fn new(telemetry: Telemetry, record: RequestRecord) -> RecordGuard {
        telemetry.in_flight.send_modify(|n| *n += 1);
        RecordGuard {
            record: Some(record),
            telemetry,
            started: tokio::time::Instant::now(),
        }
    }

    /// When the request arrived.
    pub fn started(&self) -> tokio::time::Instant {
        self.started
    }

    /// The record being built. It is only taken by `finish` or `drop`, which consume the guard.
    pub fn record(&mut self) -> &mut RequestRecord {
        self.record
            .get_or_insert_with(|| RequestRecord::new(String::new(), false))
    }

    /// Sends the record now.
    pub fn finish(mut self) {
        self.send();
    }

    /// Ends the request without a row: for refusals past their address's allowance, which
    /// are counted instead.
    pub fn discard(mut self) {
        if self.record.take().is_some() {
            self.telemetry
                .in_flight
                .send_modify(|n| *n = n.saturating_sub(1));
        }
    }

    fn send(&mut self) {
        if let Some(mut record) = self.record.take() {
            record.latency = self.started.elapsed();
            self.telemetry.record(record);
            self.telemetry
                .in_flight
                .send_modify(|n| *n = n.saturating_sub(1));
        }
    }
}

impl Drop for RecordGuard {
    fn drop(&mut self) {
        if let Some(record) = self.record.as_mut() {
            // Dropped before `finish`: the client went away or the handler panicked.
            record.outcome = Outcome::Error;
            record
                .error
                .get_or_insert_with(|| "client_disconnected".into());
            if record.status == 0 {
                record.status = 499;
            }
        }
        self.send();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_full_queue_waits_instead_of_dropping_and_finish_flushes_it_all() {
        let store = Store::open("sqlite::memory:").await.unwrap();
        let config = Config::parse("").unwrap();
        let (telemetry, writer) = Telemetry::start(store.clone(), &config);
        // More than the queue holds, sent without yielding: most land in the full-queue path.
        let count = QUEUE_DEPTH * 3;
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

    #[tokio::test]
    async fn the_writer_purges_rows_past_retention() {
        let store = Store::open("sqlite::memory:").await.unwrap();
        let old = log_row(&RequestRecord {
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
