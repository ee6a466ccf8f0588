//! The writer task: prices each record, stores it in batches, then feeds metrics and the
//! in-memory ring. It is the only place a record touches I/O, so requests never wait on disk.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, UNIX_EPOCH};

use tokio::sync::mpsc;
use tokio::time::Instant;

use super::metrics::Metrics;
use super::{RecentLog, RequestRecord};
use crate::config::{Config, ModelName, Price, ProviderId};
use crate::store::request_log::{LogAttempt, LogRow};
use crate::store::{Store, now_ms};

/// How long the writer waits to fill a batch after its first record.
const LINGER: Duration = Duration::from_millis(10);

/// Records taken from the queue at once: one transaction each.
pub const BATCH: usize = 256;
/// How often old rows are purged, at most.
const PURGE_EVERY: Duration = Duration::from_secs(3600);
/// Waits between tries of a batch the store refused (busy, disk full); while it waits, the
/// queue fills and backpressure reaches the request tasks instead of rows being dropped.
const RETRY_WAITS: [Duration; 4] = [
    Duration::from_millis(50),
    Duration::from_millis(250),
    Duration::from_secs(1),
    Duration::from_secs(5),
];

/// Everything the writer task owns.
pub(super) struct Writer {
    pub store: Store,
    pub prices: HashMap<(ProviderId, ModelName), Price>,
    pub retention: Duration,
    pub log: Arc<RecentLog>,
    pub metrics: Arc<Metrics>,
}

impl Writer {
    /// Builds the writer from the config's price table and retention.
    pub fn new(store: Store, config: &Config, log: Arc<RecentLog>, metrics: Arc<Metrics>) -> Self {
        let prices = config
            .prices
            .iter()
            .map(|p| ((p.provider.clone(), p.model.clone()), p.clone()))
            .collect();
        Writer {
            store,
            prices,
            retention: config.log.retention,
            log,
            metrics,
        }
    }

    /// Runs until every sender is gone and the queue is empty; the last batch is committed
    /// before it returns, which is what makes shutdown a flush.
    pub async fn run(self, mut receiver: mpsc::Receiver<RequestRecord>) {
        let mut batch = Vec::with_capacity(BATCH);
        let mut next_purge = Instant::now();
        while receiver.recv_many(&mut batch, BATCH).await > 0 {
            // Lingering a moment for more records makes one commit serve many requests; at
            // low load that commit, not the request, was the gateway's largest CPU cost.
            let linger_until = Instant::now() + LINGER;
            while batch.len() < BATCH {
                let room = BATCH - batch.len();
                match tokio::time::timeout_at(linger_until, receiver.recv_many(&mut batch, room))
                    .await
                {
                    Ok(received) if received > 0 => {}
                    // Closed (shutdown: flush now) or the linger is over.
                    _ => break,
                }
            }
            for record in &mut batch {
                record.cost_usd = self.cost(record);
            }
            let stored = self.store_batch(&batch).await;
            let count = batch.len() as u64;
            for record in batch.drain(..) {
                self.metrics.observe(&record);
                self.log.append(record);
            }
            if stored {
                self.log.written.send_modify(|n| *n += count);
            } else {
                self.metrics.log_rows_lost.inc_by(count);
            }
            if Instant::now() >= next_purge {
                self.purge().await;
                next_purge = Instant::now() + PURGE_EVERY;
            }
        }
    }

    fn cost(&self, record: &RequestRecord) -> Option<f64> {
        let key = (record.provider.clone()?, record.model.clone()?);
        let price = self.prices.get(&key)?;
        if record.tokens_in.is_none() && record.tokens_out.is_none() {
            return None;
        }
        Some(price.cost(
            record.tokens_in.unwrap_or(0),
            record.tokens_out.unwrap_or(0),
        ))
    }

    async fn store_batch(&self, batch: &[RequestRecord]) -> bool {
        let mut waits = RETRY_WAITS.iter();
        loop {
            // Rebuilt for each try rather than cloned up front: the first try is the usual one.
            let rows: Vec<LogRow> = batch.iter().map(log_row).collect();
            match self.store.insert_log(rows).await {
                Ok(_) => return true,
                Err(error) => match waits.next() {
                    Some(wait) => {
                        tracing::warn!(%error, rows = batch.len(), "request log write failed; retrying");
                        tokio::time::sleep(*wait).await;
                    }
                    None => {
                        tracing::error!(%error, rows = batch.len(), "request log rows lost");
                        return false;
                    }
                },
            }
        }
    }

    async fn purge(&self) {
        let before = now_ms().saturating_sub(self.retention.as_millis() as i64);
        match self.store.purge_log(before).await {
            Ok(0) => {}
            Ok(purged) => tracing::info!(purged, "request log rows past retention purged"),
            Err(error) => tracing::warn!(%error, "request log purge failed"),
        }
    }
}

/// The stored form of a record.
pub fn log_row(record: &RequestRecord) -> LogRow {
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    LogRow {
        id: record.id.clone(),
        time_ms: record
            .started_at
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_millis() as i64)
            .unwrap_or(0),
        key_id: record.key_id.clone(),
        user: record.user.clone(),
        route: record.route.as_ref().map(|r| r.to_string()),
        outcome: record.outcome.as_str().to_owned(),
        step: record.step,
        provider: record.provider.as_ref().map(|p| p.to_string()),
        model: record.model.as_ref().map(|m| m.to_string()),
        attempts: record
            .attempts
            .iter()
            .map(|a| LogAttempt {
                step: a.step,
                provider: a.provider.to_string(),
                model: a.model.to_string(),
                failure: a.failure.map(|f| f.kind().to_owned()),
                status: a.status,
                latency_ms: ms(a.latency),
                reached_upstream: a.reached_upstream(),
            })
            .collect(),
        status: record.status,
        latency_ms: ms(record.latency),
        ttft_ms: record.ttft.map(ms),
        overhead_ms: ms(record.overhead),
        tokens_in: record.tokens_in,
        tokens_out: record.tokens_out,
        cost_usd: record.cost_usd,
        stream: record.stream,
        partial: record.partial,
        error: record.error.clone(),
    }
}
