//! The writer task: prices each record, stores it in batches, then feeds metrics and the
//! in-memory ring. It is the only place a record touches I/O, so requests never wait on disk.
//!
//! While the store refuses writes (a lock held elsewhere, a full disk), batches go to the
//! spill journal instead, and the writer tries the store again every [`RETRY`], replaying the
//! journal once it takes writes. Only a batch that neither will take stays in the writer's
//! hands; it then stops taking records, the queue fills, and `[log] when_full` decides.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, UNIX_EPOCH};

use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use super::journal::Journal;
use super::metrics::{Metrics, SeriesCache};
use super::{Entry, RecentLog, RequestRecord, WriterState};
use crate::config::{Config, Durability, ModelName, Price, ProviderId};

/// What a reload swaps under the writer: the spans' providers and the prices.
pub struct Swapped {
    pub span_providers: Arc<super::spans::SpanProviders>,
    pub prices: Arc<arc_swap::ArcSwap<PriceTable>>,
}

/// Each priced deployment's price. Looked up on the request path too, for an answer's
/// `x-switchyard-cost`: foldhash, as the other maps a request reads.
pub type PriceTable = foldhash::HashMap<(ProviderId, ModelName), Price>;

/// `config`'s prices, by deployment.
pub fn price_table(config: &Config) -> PriceTable {
    config
        .prices
        .iter()
        .map(|p| ((p.provider.clone(), p.model.clone()), p.clone()))
        .collect()
}
use crate::store::request_log::{LogAttempt, LogRow, Pace};
use crate::store::{Store, StoreError, now_ms, within};

/// How long the writer waits to fill a batch after its first record.
const LINGER: Duration = Duration::from_millis(10);

/// Records taken from the queue at once: one transaction each.
pub const BATCH: usize = 256;
/// How often old rows are purged, at most.
const PURGE_EVERY: Duration = Duration::from_secs(3600);
/// How often a store that refused writes is tried again.
const RETRY: Duration = Duration::from_millis(500);
/// The longest wait between tries of a store that does not answer: each try holds the writer
/// for `[store] timeout`, so a hung store is tried ever more rarely, not every `RETRY`.
const RETRY_MAX: Duration = Duration::from_secs(8);
/// Journal batches replayed before the writer turns back to the queue, so a long replay
/// does not starve new records.
const REPLAY_TURN: usize = 16;

/// Everything the writer task owns.
pub(super) struct Writer {
    store: Store,
    /// What rows are costed with; a reload swaps it (`Telemetry::reconfigure`).
    prices: Arc<arc_swap::ArcSwap<PriceTable>>,
    retention: Duration,
    durability: Durability,
    journal: Option<Journal>,
    log: Arc<RecentLog>,
    metrics: Arc<Metrics>,
    /// Handles on the metric series records are counted into.
    series: SeriesCache,
    state: Arc<WriterState>,
    /// Whether the store took the last write tried; while it refuses, batches go straight
    /// to the journal and the store is tried again at `next_try`.
    store_ok: bool,
    next_try: Instant,
    /// `[store] timeout`.
    store_timeout: Duration,
    /// The wait before the next try, doubled by each try that timed out.
    retry_wait: Duration,
    /// Where sampled requests' spans go, when `[otel]` names an endpoint.
    spans: Option<super::spans::Spans>,
}

impl Writer {
    /// Builds the writer from the config's price table and retention.
    pub fn new(
        store: Store,
        config: &Config,
        journal: Option<Journal>,
        log: Arc<RecentLog>,
        metrics: Arc<Metrics>,
        state: Arc<WriterState>,
        swapped: Swapped,
    ) -> Self {
        let metrics_dropped = metrics.otel_spans_dropped.clone();
        Writer {
            store,
            prices: swapped.prices,
            retention: config.log.retention,
            durability: config.log.durability,
            journal,
            log,
            metrics,
            series: SeriesCache::default(),
            state,
            store_ok: true,
            next_try: Instant::now(),
            store_timeout: config.store.timeout,
            retry_wait: RETRY,
            spans: super::spans::Spans::start(config, swapped.span_providers, metrics_dropped),
        }
    }

    /// Runs until every sender is gone and the queue is empty; the last batch is committed
    /// (or, if the store still refuses, journaled) before it returns, which is what makes
    /// shutdown a flush.
    pub async fn run(mut self, mut receiver: mpsc::Receiver<Entry>) {
        let mut entries = Vec::with_capacity(BATCH);
        let mut next_purge = Instant::now();
        let mut held: Option<Arc<[LogRow]>> = None;
        // Purges run beside the writer: a large delete, or a store that hangs, must not hold
        // the rows behind them.
        let mut purging: Option<JoinHandle<()>> = None;
        self.replay().await;
        loop {
            if let Some(rows) = held.take() {
                if receiver.is_closed() {
                    // Shutting down with nowhere to put this batch: one last try below.
                    held = Some(rows);
                    break;
                }
                // Nothing will take this batch yet: stop taking records, so the queue
                // (bounded) is what fills, and try again in a while.
                tokio::time::sleep_until(self.next_try).await;
                self.replay().await;
                held = self.put(rows, Pace::FlatOut).await;
                self.state.holding.store(held.is_some(), Ordering::Relaxed);
                continue;
            }
            let open = self.receive(&mut receiver, &mut entries).await;
            if !entries.is_empty() {
                let pace = Pace::for_batch(entries.len(), BATCH);
                let (rows, acks) = self.take(&mut entries, pace);
                held = match self.durability {
                    Durability::Batched => self.put(rows, pace).await,
                    Durability::Fsync => self.put_durably(rows, acks, pace).await,
                };
                self.state.holding.store(held.is_some(), Ordering::Relaxed);
            }
            if self.journal.as_ref().is_some_and(Journal::pending)
                && (self.store_ok || Instant::now() >= self.next_try)
            {
                self.replay().await;
            }
            if Instant::now() >= next_purge && purging.as_ref().is_none_or(JoinHandle::is_finished)
            {
                purging = Some(tokio::spawn(purge(self.store.clone(), self.retention)));
                next_purge = Instant::now() + PURGE_EVERY;
            }
            if !open {
                break;
            }
        }
        // A purge under way finishes before shutdown says the log is done, but a hung store
        // holds shutdown no longer than one store operation may take.
        if let Some(purging) = purging {
            let _ = tokio::time::timeout(self.store_timeout, purging).await;
        }
        self.shut_down(held, receiver).await;
    }

    /// Takes the next batch into `entries`; false once the queue is closed and empty.
    async fn receive(
        &self,
        receiver: &mut mpsc::Receiver<Entry>,
        entries: &mut Vec<Entry>,
    ) -> bool {
        let pending = self.journal.as_ref().is_some_and(Journal::pending);
        // With rows to replay, wake up for them: now if the store takes writes, else at the
        // next try.
        let wake = match (pending, self.store_ok) {
            (false, _) => None,
            (true, true) => Some(Instant::now()),
            (true, false) => Some(self.next_try),
        };
        let received = match wake {
            None => receiver.recv_many(entries, BATCH).await,
            Some(at) => {
                match tokio::time::timeout_at(at, receiver.recv_many(entries, BATCH)).await {
                    Ok(received) => received,
                    Err(_) => return true,
                }
            }
        };
        if received == 0 {
            return false;
        }
        // Lingering a moment for more records makes one commit serve many requests; at
        // low load that commit, not the request, was the gateway's largest CPU cost. With
        // fsync, answers wait on the batch, and records pile up during each fsync anyway.
        if self.durability == Durability::Batched && entries.len() < BATCH {
            // Asleep, not waiting on the queue: a receiver that waits is woken by every
            // record, and each wake was a hand-off to another worker thread (a futex call
            // and a thread switch a request). Records pile up in the queue meanwhile.
            tokio::time::sleep(LINGER).await;
            return drain(receiver, entries);
        }
        true
    }

    /// Prices the batch, counts it in the metrics and the ring; returns its rows and the
    /// acknowledgements its answers wait on.
    fn take(
        &mut self,
        entries: &mut Vec<Entry>,
        pace: Pace,
    ) -> (Arc<[LogRow]>, Vec<super::guard::Ack>) {
        let mut rows = Vec::with_capacity(entries.len());
        let mut acks = Vec::new();
        for (index, Entry { mut record, ack }) in entries.drain(..).enumerate() {
            pace.offer_core_at(index);
            // Priced already when its answer said what it cost: the row says the same.
            if record.cost_usd.is_none() {
                record.cost_usd = cost(&self.prices.load(), &record);
            }
            self.metrics.observe(&record, &mut self.series);
            if let Some(spans) = &self.spans {
                spans.offer(&record);
            }
            self.log.append(&record);
            // Last: the row takes the record's own strings rather than copies.
            rows.push(log_row(*record));
            acks.extend(ack);
        }
        (rows.into(), acks)
    }

    /// Stores a batch or, while the store refuses, journals it; gives it back when neither
    /// would take it.
    async fn put(&mut self, rows: Arc<[LogRow]>, pace: Pace) -> Option<Arc<[LogRow]>> {
        if (self.store_ok || Instant::now() >= self.next_try)
            && self.store(rows.clone(), pace).await
        {
            return None;
        }
        self.spill(rows, false)
    }

    /// Journals a batch and syncs it before its answers go, then stores it.
    async fn put_durably(
        &mut self,
        rows: Arc<[LogRow]>,
        acks: Vec<super::guard::Ack>,
        pace: Pace,
    ) -> Option<Arc<[LogRow]>> {
        let Some(journal) = self.journal.as_mut() else {
            return self.put(rows, pace).await;
        };
        let before = journal.len();
        let all_stored_before = journal.stored_up_to() == before;
        let journaled = match journal.append(&rows, true) {
            Ok(()) => true,
            Err(error) => {
                tracing::warn!(%error, rows = rows.len(), "request log: cannot journal a batch");
                false
            }
        };
        // On disk (or, if the journal failed, as safe as it will get): the answers may go.
        drop(acks);
        if !journaled {
            return self.put(rows, pace).await;
        }
        note_spill(&self.state, &self.metrics, journal.len());
        if self.store_ok && all_stored_before && self.store(rows, pace).await {
            // Nothing else was pending: the journal is all stored now.
            if let Some(journal) = self.journal.as_mut() {
                let end = journal.len();
                journal.mark_stored(end);
                note_spill(&self.state, &self.metrics, journal.len());
            }
        }
        None
    }

    /// One try of the store; notes whether it took the rows.
    async fn store(&mut self, rows: Arc<[LogRow]>, pace: Pace) -> bool {
        let count = rows.len();
        // A batch that timed out may still commit later: its replay from the journal is
        // idempotent by request id, so the row is stored once either way.
        match within(self.store_timeout, self.store.insert_log_at(rows, pace)).await {
            Ok(inserted) => {
                self.log.written.send_modify(|n| *n += inserted as u64);
                self.store_ok = true;
                self.retry_wait = RETRY;
                self.state.store_refusing.store(false, Ordering::Relaxed);
                true
            }
            Err(error) => {
                if self.store_ok {
                    tracing::warn!(%error, rows = count, "the store refuses request-log writes; spilling to the journal");
                }
                self.retry_wait = if matches!(error, StoreError::Timeout(_)) {
                    (self.retry_wait * 2).min(RETRY_MAX)
                } else {
                    RETRY
                };
                self.store_ok = false;
                self.next_try = Instant::now() + self.retry_wait;
                self.state.store_refusing.store(true, Ordering::Relaxed);
                false
            }
        }
    }

    fn spill(&mut self, rows: Arc<[LogRow]>, sync: bool) -> Option<Arc<[LogRow]>> {
        let Some(journal) = self.journal.as_mut() else {
            return Some(rows);
        };
        match journal.append(&rows, sync) {
            Ok(()) => {
                self.metrics.log_rows_spilled.inc_by(rows.len() as u64);
                note_spill(&self.state, &self.metrics, journal.len());
                None
            }
            Err(error) => {
                if !self.state.holding.load(Ordering::Relaxed) {
                    tracing::error!(%error, "request log: the store and the spill journal both refuse rows; holding them");
                }
                self.next_try = self.next_try.max(Instant::now() + RETRY);
                Some(rows)
            }
        }
    }

    /// Moves journaled rows into the store, a few batches a turn.
    async fn replay(&mut self) {
        for _ in 0..REPLAY_TURN {
            let Some(journal) = self.journal.as_ref() else {
                return;
            };
            if !journal.pending() {
                return;
            }
            let pending = match journal.read_pending(BATCH) {
                Ok(pending) => pending,
                Err(error) => {
                    tracing::warn!(%error, "cannot read the spill journal");
                    self.next_try = Instant::now() + RETRY;
                    return;
                }
            };
            if pending.unreadable > 0 {
                tracing::error!(
                    rows = pending.unreadable,
                    "unreadable rows in the spill journal"
                );
                self.metrics.log_rows_lost.inc_by(pending.unreadable);
            }
            let count = pending.rows.len() as u64;
            if count > 0 && !self.store(pending.rows.into(), Pace::FlatOut).await {
                return;
            }
            self.metrics.log_rows_replayed.inc_by(count);
            if let Some(journal) = self.journal.as_mut() {
                journal.mark_stored(pending.end);
                note_spill(&self.state, &self.metrics, journal.len());
                if !journal.pending() {
                    tracing::info!("the spill journal is replayed into the store");
                }
            }
        }
    }

    /// Every sender is gone: one last try for what is held and what is left in the queue.
    /// Rows the journal keeps are replayed at the next start, so the shutdown does not wait
    /// for a long replay.
    async fn shut_down(mut self, held: Option<Arc<[LogRow]>>, mut receiver: mpsc::Receiver<Entry>) {
        let mut entries = Vec::new();
        while let Ok(entry) = receiver.try_recv() {
            entries.push(entry);
        }
        let rest = (!entries.is_empty()).then(|| self.take(&mut entries, Pace::FlatOut).0);
        for rows in held.into_iter().chain(rest) {
            let rows = match self.store(rows.clone(), Pace::FlatOut).await {
                true => None,
                false => self.spill(rows, true),
            };
            if let Some(rows) = rows {
                tracing::error!(rows = rows.len(), "request-log rows lost at shutdown");
                self.metrics.log_rows_lost.inc_by(rows.len() as u64);
            }
        }
        if self.store_ok {
            self.replay().await;
        }
        if let Some(journal) = self.journal.take() {
            journal.close();
        }
    }
}

/// What a request cost in US dollars at `prices`: its tokens at the price of the deployment
/// that served; `None` when none served, it reported no tokens, or its model has no price.
pub fn cost(prices: &PriceTable, record: &RequestRecord) -> Option<f64> {
    if record.tokens_in.is_none() && record.tokens_out.is_none() {
        return None;
    }
    let key = (record.provider.clone()?, record.model.clone()?);
    let price = prices.get(&key)?;
    Some(price.cost(
        record.tokens_in.unwrap_or(0),
        record.tokens_out.unwrap_or(0),
    ))
}

/// Deletes request-log rows and stored responses older than `retention`.
async fn purge(store: Store, retention: Duration) {
    let before = now_ms().saturating_sub(retention.as_millis() as i64);
    match store.purge_log(before).await {
        Ok(0) => {}
        Ok(purged) => tracing::info!(purged, "request log rows past retention purged"),
        Err(error) => tracing::warn!(%error, "request log purge failed"),
    }
    // Stored responses live as long as the log rows of the requests that made them.
    match store.purge_responses(before).await {
        Ok(0) => {}
        Ok(purged) => tracing::info!(purged, "stored responses past retention purged"),
        Err(error) => tracing::warn!(%error, "stored responses purge failed"),
    }
}

/// Takes what is already queued into `entries`, up to a batch, without waiting; false once
/// the queue is closed and empty (shutdown: flush now).
fn drain(receiver: &mut mpsc::Receiver<Entry>, entries: &mut Vec<Entry>) -> bool {
    while entries.len() < BATCH {
        match receiver.try_recv() {
            Ok(entry) => entries.push(entry),
            Err(mpsc::error::TryRecvError::Empty) => return true,
            Err(mpsc::error::TryRecvError::Disconnected) => return false,
        }
    }
    true
}

/// Notes the journal's size where `/readyz` and `/metrics` show it.
fn note_spill(state: &WriterState, metrics: &Metrics, bytes: u64) {
    state.spill_bytes.store(bytes, Ordering::Relaxed);
    metrics.log_spill_bytes.set(bytes as i64);
}

/// The stored form of a record, which it takes apart: its own strings move into the row, and
/// the names are the config's `Arc`s, shared.
pub fn log_row(record: RequestRecord) -> LogRow {
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    LogRow {
        time_ms: record
            .started_at
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_millis() as i64)
            .unwrap_or(0),
        route: record.route.map(|r| r.0),
        outcome: record.outcome.as_str().to_owned(),
        step: record.step,
        provider: record.provider.map(|p| p.0),
        model: record.model.map(|m| m.0),
        attempts: record
            .attempts
            .iter()
            .map(|a| LogAttempt {
                step: a.step,
                provider: a.provider.0.clone(),
                model: a.model.0.clone(),
                failure: a.failure.map(|f| f.kind().to_owned()),
                status: a.status,
                latency_ms: ms(a.latency),
                reached_upstream: a.reached_upstream(),
                hedge: a.hedge,
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
        id: record.id,
        key_id: record.key_id,
        user: record.user,
        error: record.error,
        cache: record.cache.map(|c| c.as_str().to_owned()),
        trace_id: record.trace.as_ref().map(|t| t.trace_id.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::telemetry::{AttemptRecord, FailureClass, Outcome};

    #[test]
    fn a_row_holds_what_its_record_said() {
        let started_at = UNIX_EPOCH + Duration::from_millis(1_764_000_000_123);
        let attempt = AttemptRecord {
            step: 1,
            provider: ProviderId(Arc::from("groq")),
            model: ModelName(Arc::from("llama")),
            failure: Some(FailureClass::Timeout),
            status: None,
            latency: Duration::from_micros(2_500),
            hedge: true,
            span: None,
        };
        let record = RequestRecord {
            started_at,
            key_id: Some("key-1".into()),
            user: Some("ada".into()),
            route: Some(crate::config::RouteName(Arc::from("smart"))),
            outcome: Outcome::Fallback,
            step: Some(1),
            provider: Some(ProviderId(Arc::from("openai"))),
            model: Some(ModelName(Arc::from("gpt-4o"))),
            attempts: vec![attempt],
            status: 200,
            latency: Duration::from_millis(12),
            ttft: Some(Duration::from_millis(3)),
            overhead: Duration::from_micros(250),
            tokens_in: Some(7),
            tokens_out: Some(9),
            cost_usd: Some(0.25),
            partial: true,
            error: Some("upstream_timeout".into()),
            cache: None,
            ..RequestRecord::new("req-1".into(), true)
        };
        let row = log_row(record);
        assert_eq!(
            row,
            LogRow {
                id: "req-1".into(),
                time_ms: 1_764_000_000_123,
                key_id: Some("key-1".into()),
                user: Some("ada".into()),
                route: Some("smart".into()),
                outcome: "fallback".into(),
                step: Some(1),
                provider: Some("openai".into()),
                model: Some("gpt-4o".into()),
                attempts: vec![LogAttempt {
                    step: 1,
                    provider: "groq".into(),
                    model: "llama".into(),
                    failure: Some("timeout".into()),
                    status: None,
                    latency_ms: 2.5,
                    reached_upstream: true,
                    hedge: true,
                }],
                status: 200,
                latency_ms: 12.0,
                ttft_ms: Some(3.0),
                overhead_ms: 0.25,
                tokens_in: Some(7),
                tokens_out: Some(9),
                cost_usd: Some(0.25),
                stream: true,
                partial: true,
                error: Some("upstream_timeout".into()),
                cache: None,
                trace_id: None,
            }
        );
    }

    fn entry(id: usize) -> Entry {
        Entry {
            record: Box::new(RequestRecord::new(format!("r{id}"), false)),
            ack: None,
        }
    }

    fn queue(records: usize) -> (mpsc::Sender<Entry>, mpsc::Receiver<Entry>) {
        let (sender, receiver) = mpsc::channel(BATCH * 2);
        for id in 0..records {
            sender.try_send(entry(id)).unwrap();
        }
        (sender, receiver)
    }

    #[test]
    fn drain_takes_what_is_queued_up_to_a_batch() {
        let (_sender, mut receiver) = queue(BATCH + 10);
        let mut entries = vec![entry(0)];
        assert!(drain(&mut receiver, &mut entries));
        assert_eq!(entries.len(), BATCH);
        // The rest waits for the next batch.
        entries.clear();
        assert!(drain(&mut receiver, &mut entries));
        assert_eq!(entries.len(), 11);
    }

    #[test]
    fn drain_of_a_closed_queue_keeps_its_records_and_says_closed() {
        let (sender, mut receiver) = queue(3);
        drop(sender);
        let mut entries = Vec::new();
        assert!(!drain(&mut receiver, &mut entries));
        assert_eq!(entries.len(), 3);
    }

    #[test]
    fn drain_of_an_open_empty_queue_waits_for_nothing() {
        let (_sender, mut receiver) = queue(0);
        let mut entries = Vec::new();
        assert!(drain(&mut receiver, &mut entries));
        assert!(entries.is_empty());
    }
}
