//! Forwarding a committed stream: event by event, never switching provider, and ending
//! every failure with an error event in the client's format instead of a silent truncation.
//!
//! The stream's end is also the served attempt's verdict: a stream the provider breaks
//! mid-answer is that deployment's failure, for its breaker and in the attempt's record.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use tokio::sync::watch;
use tokio::time::{Instant, timeout_at};

use super::response_cache::StreamKeep;
use super::span_content::StreamTrace;
use crate::budgets::Reservation;
use crate::limits::Permit;
use crate::providers::sse::{SseError, SseEvent};
use crate::providers::{StreamState, Translated, Usage};
use crate::router::FailureClass;
use crate::router::breaker::Verdict;
use crate::router::health::PendingVerdict;
use crate::router::upstream::CommittedStream;
use crate::telemetry::{Outcome, RecordGuard, RequestRecord};

mod first_alone;

/// The most bytes of events already arrived that go out as one frame.
const BATCH_BYTES: usize = 64 * 1024;

/// Hands a committed stream to the client, finishing its record when it ends.
pub struct StreamForwarder {
    stream: CommittedStream,
    /// Client events translated but not yet sent.
    pending: VecDeque<Bytes>,
    /// Their total size.
    pending_bytes: usize,
    /// Once the stream has ended: how many of the pending events leave before the record
    /// is durable.
    hold_after: Option<usize>,
    /// Held until the stream ends, so a concurrency slot is not freed mid-answer. Declared
    /// before `guard` so that on a disconnect it is released before the record is sent.
    permit: Option<Permit>,
    guard: Option<RecordGuard>,
    /// The breaker's verdict on the served attempt, given when the stream ends; dropped
    /// unsettled if the client goes first.
    verdict: Option<PendingVerdict>,
    limits: StreamLimits,
    /// Set when the record is sent with `[log] durability = "fsync"`: the final events wait
    /// for it to be on disk.
    durable: Option<crate::telemetry::Durable>,
    /// The spend reserved for the answer. Settled at its usage when the stream ends cleanly;
    /// a stream that breaks, or a client that leaves, drops it, which keeps it whole.
    reservation: Option<Reservation>,
    /// A settlement the final events wait for, so the next request sees the spend returned.
    /// Boxed: a reservation is 240 bytes, and most streams never settle one.
    settling: Option<Box<(Reservation, u64)>>,
    /// The answer gathered for the response cache, on a route that keeps answers. Boxed:
    /// most streams keep none.
    keep: Option<Box<StreamKeep>>,
    /// The answer gathered for a sampled trace's span: its finish reasons, and its content
    /// when captured. Boxed: most streams are not sampled.
    trace: Option<Box<StreamTrace>>,
}

/// What ends a stream that the upstream would carry on forever.
pub struct StreamLimits {
    /// The longest wait for the upstream's next event.
    pub idle_timeout: Duration,
    /// The request's deadline: an endless stream ends here.
    pub deadline: Instant,
    /// Turns true when shutdown's grace has run out.
    pub grace_over: watch::Receiver<bool>,
}

impl StreamForwarder {
    /// Takes over the request's record: from now on the stream decides how it ends.
    pub fn new(
        mut stream: CommittedStream,
        mut guard: RecordGuard,
        permit: Permit,
        verdict: Option<PendingVerdict>,
        limits: StreamLimits,
    ) -> StreamForwarder {
        let pending: VecDeque<Bytes> = std::mem::take(&mut stream.first).into();
        let record = guard.record();
        // Until the stream ends cleanly, a record sent (say, on disconnect) is a partial one.
        record.partial = true;
        add_usage(record, stream.first_usage.take());
        StreamForwarder {
            stream,
            pending_bytes: pending.iter().map(Bytes::len).sum(),
            pending,
            hold_after: None,
            permit: Some(permit),
            guard: Some(guard),
            verdict,
            limits,
            durable: None,
            reservation: None,
            settling: None,
            keep: None,
            trace: None,
        }
    }

    /// Settles `reservation` when the stream ends.
    pub fn with_reservation(mut self, reservation: Option<Reservation>) -> StreamForwarder {
        self.reservation = reservation;
        self
    }

    /// Gathers the stream's answer for the response cache, to keep when it ends cleanly.
    pub fn keeping(mut self, keep: Option<StreamKeep>) -> StreamForwarder {
        self.keep = keep.map(Box::new);
        // The first events are queued already.
        let first: Vec<Bytes> = self.pending.iter().cloned().collect();
        for frame in first {
            self.feed_keep(&frame);
        }
        self
    }

    /// Gathers a sampled stream's answer for its span.
    pub fn tracing(mut self, trace: Option<StreamTrace>) -> StreamForwarder {
        self.trace = trace.map(|mut trace| {
            // The first events are queued already.
            self.pending.iter().for_each(|frame| trace.feed(frame));
            Box::new(trace)
        });
        self
    }

    fn feed_keep(&mut self, frame: &[u8]) {
        if let Some(keep) = self.keep.as_mut()
            && !keep.feed(frame)
        {
            self.keep = None;
        }
    }

    /// The stream ended cleanly: its answer goes to the cache, with the usage it reported.
    fn keep_answer(&mut self) {
        let Some(keep) = self.keep.take() else { return };
        let usage = self.guard.as_mut().and_then(|guard| {
            let record = guard.record();
            record.tokens_in.zip(record.tokens_out)
        });
        keep.finish(usage);
    }

    /// The response body: one frame an event. The forwarder is boxed: `unfold` moves its
    /// state into each frame's future and back out, and inline that was 1.5 KB copied twice
    /// an event.
    pub fn into_body(self) -> axum::body::Body {
        let frames = futures_util::stream::unfold(Box::new(self), |mut forwarder| async move {
            let frame = forwarder.next_frame().await?;
            Some((Ok::<Bytes, Infallible>(frame), forwarder))
        });
        axum::body::Body::from_stream(first_alone::FirstAlone::new(frames))
    }

    async fn next_frame(&mut self) -> Option<Bytes> {
        if let Some(durable) = self.durable.take() {
            Box::pin(durable.wait()).await;
        }
        loop {
            if let Some(settling) = self.settling.take() {
                let (reservation, cost) = *settling;
                // Boxed, as is the durable wait above: each happens once a stream at most,
                // and inline they made every frame's future 1.2 KB larger.
                Box::pin(reservation.settle(cost)).await;
            }
            if let Some(frame) = self.take_pending() {
                return Some(frame);
            }
            self.guard.as_ref()?;
            let wait_until = self
                .limits
                .deadline
                .min(Instant::now() + self.limits.idle_timeout);
            let next = tokio::select! {
                biased;
                () = grace_over(&mut self.limits.grace_over) => None,
                next = timeout_at(wait_until, self.stream.reader.next_event()) => Some(next),
            };
            match next {
                // The gateway's own doing, not the provider's: neutral for its breaker.
                None => self.fail(
                    FailureClass::Deadline,
                    "shutting_down",
                    "the gateway is shutting down",
                ),
                // The request's own budget ran out: neutral, as for a whole answer.
                Some(Err(_)) if Instant::now() >= self.limits.deadline => self.fail(
                    FailureClass::Deadline,
                    "deadline",
                    "the request deadline ran out mid-stream",
                ),
                Some(Err(_)) => self.fail(
                    FailureClass::Timeout,
                    "stream_idle_timeout",
                    "the upstream stalled mid-stream",
                ),
                Some(Ok(read)) => self.read(read),
            }
            // What else has already arrived goes out in the same frame: a burst the upstream
            // sent in one write costs one write to the client, not one per event.
            while self.guard.is_some() && self.pending_bytes < BATCH_BYTES {
                let Some(read) = self.stream.reader.buffered_event() else {
                    break;
                };
                self.read(read.map(Some));
            }
        }
    }

    /// Handles what the reader returned: an event, the end, or a broken stream.
    fn read(&mut self, read: Result<Option<SseEvent>, SseError>) {
        match read {
            Err(SseError::Transport(_)) => self.fail(
                FailureClass::Reset,
                "connection_reset",
                "the upstream connection broke mid-stream",
            ),
            Err(SseError::TooLong) => self.fail(
                FailureClass::Oversized,
                "oversized",
                "the upstream sent an event too large to read",
            ),
            Err(_) => self.fail(
                FailureClass::Malformed,
                "malformed_event",
                "the upstream sent a malformed event",
            ),
            Ok(None) => {
                let translated = self.stream.translator.end();
                self.take(translated);
            }
            // A keep-alive comment: pass it on, it keeps the client's connection warm too.
            Ok(Some(event)) if event.data_bytes().is_empty() => self.queue(event.raw),
            Ok(Some(event)) => {
                let translated = self.stream.translator.event(&event);
                self.take(translated);
            }
        }
    }

    fn queue(&mut self, frame: Bytes) {
        if self.keep.is_some() {
            self.feed_keep(&frame);
        }
        if let Some(trace) = self.trace.as_mut() {
            trace.feed(&frame);
        }
        self.pending_bytes += frame.len();
        self.pending.push_back(frame);
    }

    /// The events queued so far, as one frame. When the stream has just ended, only up to
    /// its first final event: the rest wait for the record to be durable, as they always did.
    fn take_pending(&mut self) -> Option<Bytes> {
        let count = match self.hold_after.take() {
            Some(count) => count.min(self.pending.len()),
            None => self.pending.len(),
        };
        let frame = match count {
            0 => return None,
            1 => self.pending.pop_front()?,
            _ => {
                let size = self.pending.iter().take(count).map(Bytes::len).sum();
                let mut joined = BytesMut::with_capacity(size);
                for frame in self.pending.drain(..count) {
                    joined.extend_from_slice(&frame);
                }
                joined.freeze()
            }
        };
        self.pending_bytes -= frame.len();
        Some(frame)
    }

    /// Queues an event's translation and settles the record when the stream ends.
    fn take(&mut self, translated: Translated) {
        let Translated {
            frames,
            usage,
            state,
        } = translated;
        self.update(|record| add_usage(record, usage));
        match state {
            StreamState::Open | StreamState::KeepAlive => {
                frames.into_iter().for_each(|f| self.queue(f))
            }
            StreamState::Done => {
                self.finish_with(frames);
                self.keep_answer();
                if let Some(trace) = self.trace.take() {
                    self.update(|record| trace.finish(record));
                }
                self.update(|record| record.partial = false);
                self.judge(None);
                self.settle();
                self.finish();
            }
            StreamState::UpstreamError { overloaded, .. } => {
                // The translator ended the client's stream with its own error event.
                self.finish_with(frames);
                self.update(|record| {
                    record.outcome = Outcome::Error;
                    record.error = Some("upstream_stream_error".into());
                });
                self.judge(Some(if overloaded {
                    FailureClass::Overloaded
                } else {
                    FailureClass::ServerError
                }));
                self.finish();
            }
            StreamState::Malformed => self.fail(
                FailureClass::Malformed,
                "malformed_event",
                "the upstream sent a malformed event",
            ),
            StreamState::Truncated => self.fail(
                FailureClass::Reset,
                "truncated",
                "the upstream stream ended before the answer finished",
            ),
        }
    }

    /// Queues the stream's final events. The first leaves with what came before it; the
    /// others wait for the record to be durable (`[log] durability = "fsync"`).
    fn finish_with(&mut self, frames: Vec<Bytes>) {
        self.hold_after = Some(self.pending.len() + 1);
        frames.into_iter().for_each(|f| self.queue(f));
    }

    /// Ends the stream with an error event in the client's format; `class` is what the
    /// break says about the provider.
    fn fail(&mut self, class: FailureClass, code: &str, message: &str) {
        if self.guard.is_none() {
            return;
        }
        self.update(|record| {
            record.outcome = Outcome::Error;
            record.partial = true;
            record.error = Some(code.to_owned());
        });
        self.judge(Some(class));
        self.finish();
        let event = self.stream.translator.error_event(message, code);
        self.finish_with(vec![event]);
    }

    /// Settles the served attempt: its breaker's verdict, and its failure class in the
    /// record, which the attempt metrics and the scorecard read.
    fn judge(&mut self, failure: Option<FailureClass>) {
        if let Some(class) = failure {
            self.update(|record| {
                if let Some(served) = record.attempts.last_mut() {
                    served.failure = Some(class);
                }
            });
        }
        if let Some(verdict) = self.verdict.take() {
            verdict.settle(Verdict::of(failure));
        }
    }

    /// Prices a cleanly ended stream at the usage it reported, by the deployment that served;
    /// without usage, the reservation stands.
    fn settle(&mut self) {
        let (Some(reservation), Some(guard)) = (self.reservation.take(), self.guard.as_mut())
        else {
            return;
        };
        let record = guard.record();
        let usage = (record.tokens_in.is_some() || record.tokens_out.is_some()).then(|| Usage {
            prompt_tokens: record.tokens_in.unwrap_or(0),
            completion_tokens: record.tokens_out.unwrap_or(0),
        });
        let cost = match (&record.provider, &record.model) {
            (Some(provider), Some(model)) => reservation.cost_of(provider, model, usage),
            _ => None,
        };
        match cost {
            Some(cost) => self.settling = Some(Box::new((reservation, cost))),
            None => drop(reservation),
        }
    }

    fn update(&mut self, change: impl FnOnce(&mut RequestRecord)) {
        if let Some(guard) = self.guard.as_mut() {
            change(guard.record());
        }
    }

    fn finish(&mut self) {
        // Not settled by now (a break, an upstream error): kept whole, before the client
        // hears the end, so its next request already sees it.
        drop(self.reservation.take());
        if let Some(mut guard) = self.guard.take() {
            let record = guard.record();
            let tokens = record.tokens_in.unwrap_or(0) + record.tokens_out.unwrap_or(0);
            if let Some(permit) = self.permit.take() {
                permit.charge_tokens(tokens);
            }
            self.durable = guard.durable();
            guard.finish();
        }
    }
}

/// Resolves once shutdown's grace is over; never, if no shutdown can come any more.
async fn grace_over(over: &mut watch::Receiver<bool>) {
    if over.wait_for(|over| *over).await.is_err() {
        std::future::pending::<()>().await;
    }
}

fn add_usage(record: &mut RequestRecord, usage: Option<Usage>) {
    if let Some(usage) = usage {
        record.tokens_in = Some(usage.prompt_tokens);
        record.tokens_out = Some(usage.completion_tokens);
    }
}
