//! The request side of the log: a [`RecordGuard`] per request, holding its place in the
//! queue from arrival, and (with `[log] durability = "fsync"`) a [`Durable`] the answer
//! waits on.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use tokio::sync::Notify;
use tokio::sync::mpsc::OwnedPermit;

use super::{Entry, Outcome, RequestRecord, Telemetry};
use crate::config::{Durability, WhenFull};

/// Whether a record is queued, and whether it is on disk.
#[derive(Default)]
struct DurableState {
    queued: AtomicBool,
    done: AtomicBool,
    notify: Notify,
}

/// Resolves once a request's record is fsynced to the spill journal (or could not be).
pub struct Durable(Arc<DurableState>);

impl Durable {
    /// Waits for the record, if it has been sent; a record still being built (a stream
    /// under way) settles its own wait.
    pub async fn wait(self) {
        if !self.0.queued.load(Ordering::Acquire) {
            return;
        }
        loop {
            let notified = self.0.notify.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if self.0.done.load(Ordering::Acquire) {
                return;
            }
            notified.await;
        }
    }
}

/// Held by the writer until the record is on disk; dropping it releases the answer, so a
/// record lost on any path can never hold its answer back.
pub(crate) struct Ack(Arc<DurableState>);

impl Drop for Ack {
    fn drop(&mut self) {
        self.0.done.store(true, Ordering::Release);
        self.0.notify.notify_waiters();
    }
}

/// Sends its record exactly once: on [`RecordGuard::finish`], or when dropped unfinished
/// (a client that went away, a panic), marked as such.
pub struct RecordGuard {
    record: Option<Box<RequestRecord>>,
    telemetry: Telemetry,
    started: tokio::time::Instant,
    /// The record's place in the queue, reserved when the request arrived.
    place: Option<OwnedPermit<Entry>>,
    durable: Option<Arc<DurableState>>,
    /// Counted in flight, for tests that wait for idle ([`Telemetry::observe`]).
    counted: bool,
}

impl RecordGuard {
    /// Starts the record of a request that just arrived, reserving its place in the queue.
    pub fn new(telemetry: Telemetry, record: RequestRecord) -> RecordGuard {
        let counted = telemetry.log.observed.load(Ordering::Relaxed);
        if counted {
            telemetry.in_flight.send_modify(|n| *n += 1);
        }
        let place = telemetry.queue.clone().try_reserve_owned().ok();
        let durable = (telemetry.settings.durability == Durability::Fsync)
            .then(|| Arc::new(DurableState::default()));
        RecordGuard {
            record: Some(Box::new(record)),
            telemetry,
            started: tokio::time::Instant::now(),
            place,
            durable,
            counted,
        }
    }

    /// No longer in flight.
    fn leave(&mut self) {
        if std::mem::take(&mut self.counted) {
            self.telemetry
                .in_flight
                .send_modify(|n| *n = n.saturating_sub(1));
        }
    }

    /// Whether the request must be refused: the log has no place for its record and
    /// `[log] when_full = "refuse"`. Its record is then never written; [`Self::refuse`]
    /// counts it instead.
    pub fn must_refuse(&self) -> bool {
        self.place.is_none() && self.telemetry.settings.when_full == WhenFull::Refuse
    }

    /// Ends a request refused because the log is full: counted, not logged (there is no room).
    pub fn refuse(mut self) {
        self.record = None;
        self.telemetry.metrics.log_requests_refused.inc();
        self.leave();
    }

    /// What the answer waits on before it leaves, with `[log] durability = "fsync"`.
    pub fn durable(&self) -> Option<Durable> {
        self.durable.clone().map(Durable)
    }

    /// Dates the record back to `started`: for one begun only once its work was done (the
    /// health checker's, which holds no log sender while its check is out, so a shutdown
    /// never waits on it).
    pub fn since(mut self, started: tokio::time::Instant) -> RecordGuard {
        let ago = started.elapsed();
        self.started = started;
        if let Some(record) = self.record.as_mut() {
            record.started_at = std::time::SystemTime::now()
                .checked_sub(ago)
                .unwrap_or(record.started_at);
        }
        self
    }

    /// When the request arrived.
    pub fn started(&self) -> tokio::time::Instant {
        self.started
    }

    /// The record being built. It is only taken by `finish` or `drop`, which consume the guard.
    pub fn record(&mut self) -> &mut RequestRecord {
        self.record
            .get_or_insert_with(|| Box::new(RequestRecord::new(String::new(), false)))
    }

    /// Prices the request now, as the writer would, and keeps the figure for its row, so an
    /// answer can say what its row will; `None` as the writer's would be.
    pub fn cost(&mut self) -> Option<f64> {
        let record = self.record.as_deref_mut()?;
        record.cost_usd = self.telemetry.cost(record);
        record.cost_usd
    }

    /// Sends the record now.
    pub fn finish(mut self) {
        self.send();
    }

    /// Ends the request without a row: for refusals past their address's allowance, which
    /// are counted instead. Its reserved place in the queue goes back with the guard.
    pub fn discard(mut self) {
        self.durable = None;
        if self.record.take().is_some() {
            self.leave();
        }
    }

    fn send(&mut self) {
        if let Some(mut record) = self.record.take() {
            record.latency = self.started.elapsed();
            let ack = self.durable.take().map(|state| {
                state.queued.store(true, Ordering::Release);
                Ack(state)
            });
            let entry = Entry { record, ack };
            match self.place.take() {
                Some(place) => {
                    place.send(entry);
                }
                None => self.telemetry.enqueue(entry),
            }
            self.leave();
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
