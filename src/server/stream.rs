//! Forwarding a committed stream: event by event, never switching provider, and ending
//! every failure with an error event in the client's format instead of a silent truncation.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::time::Duration;

use bytes::Bytes;
use tokio::time::timeout;

use crate::limits::Permit;
use crate::providers::sse::SseError;
use crate::providers::{StreamState, Translated, Usage};
use crate::router::upstream::CommittedStream;
use crate::telemetry::{Outcome, RecordGuard, RequestRecord};

/// Hands a committed stream to the client, finishing its record when it ends.
pub struct StreamForwarder {
    stream: CommittedStream,
    /// Client events translated but not yet sent.
    pending: VecDeque<Bytes>,
    /// Held until the stream ends, so a concurrency slot is not freed mid-answer. Declared
    /// before `guard` so that on a disconnect it is released before the record is sent.
    permit: Option<Permit>,
    guard: Option<RecordGuard>,
    /// Set when the record is sent with `[log] durability = "fsync"`: the final events wait
    /// for it to be on disk.
    durable: Option<crate::telemetry::Durable>,
    idle_timeout: Duration,
}

impl StreamForwarder {
    /// Takes over the request's record: from now on the stream decides how it ends.
    pub fn new(
        mut stream: CommittedStream,
        mut guard: RecordGuard,
        permit: Permit,
        idle_timeout: Duration,
    ) -> StreamForwarder {
        let pending = std::mem::take(&mut stream.first).into();
        let record = guard.record();
        // Until the stream ends cleanly, a record sent (say, on disconnect) is a partial one.
        record.partial = true;
        add_usage(record, stream.first_usage.take());
        StreamForwarder {
            stream,
            pending,
            permit: Some(permit),
            guard: Some(guard),
            durable: None,
            idle_timeout,
        }
    }

    /// The response body: one frame an event.
    pub fn into_body(self) -> axum::body::Body {
        let frames = futures_util::stream::unfold(self, |mut forwarder| async move {
            let frame = forwarder.next_frame().await?;
            Some((Ok::<Bytes, Infallible>(frame), forwarder))
        });
        axum::body::Body::from_stream(frames)
    }

    async fn next_frame(&mut self) -> Option<Bytes> {
        if let Some(durable) = self.durable.take() {
            durable.wait().await;
        }
        loop {
            if let Some(frame) = self.pending.pop_front() {
                return Some(frame);
            }
            self.guard.as_ref()?;
            let event = match timeout(self.idle_timeout, self.stream.reader.next_event()).await {
                Err(_) => {
                    return self.fail("stream_idle_timeout", "the upstream stalled mid-stream");
                }
                Ok(Err(SseError::Transport(_))) => {
                    return self.fail(
                        "connection_reset",
                        "the upstream connection broke mid-stream",
                    );
                }
                Ok(Err(_)) => {
                    return self.fail("malformed_event", "the upstream sent a malformed event");
                }
                Ok(Ok(None)) => {
                    let translated = self.stream.translator.end();
                    self.take(translated);
                    continue;
                }
                Ok(Ok(Some(event))) => event,
            };
            if event.data.is_empty() {
                // A keep-alive comment: pass it on, it keeps the client's connection warm too.
                return Some(event.raw);
            }
            let translated = self.stream.translator.event(&event);
            self.take(translated);
        }
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
            StreamState::Open | StreamState::KeepAlive => self.pending.extend(frames),
            StreamState::Done => {
                self.pending.extend(frames);
                self.update(|record| record.partial = false);
                self.finish();
            }
            StreamState::UpstreamError { .. } => {
                // The translator ended the client's stream with its own error event.
                self.pending.extend(frames);
                self.update(|record| {
                    record.outcome = Outcome::Error;
                    record.error = Some("upstream_stream_error".into());
                });
                self.finish();
            }
            StreamState::Malformed => {
                let frame = self.fail("malformed_event", "the upstream sent a malformed event");
                self.pending.extend(frame);
            }
            StreamState::Truncated => {
                let frame = self.fail(
                    "truncated",
                    "the upstream stream ended without its end marker",
                );
                self.pending.extend(frame);
            }
        }
    }

    /// Ends the stream with an error event in the client's format.
    fn fail(&mut self, code: &str, message: &str) -> Option<Bytes> {
        self.guard.as_ref()?;
        self.update(|record| {
            record.outcome = Outcome::Error;
            record.partial = true;
            record.error = Some(code.to_owned());
        });
        self.finish();
        Some(self.stream.translator.error_event(message, code))
    }
    fn update(&mut self, change: impl FnOnce(&mut RequestRecord)) {
        if let Some(guard) = self.guard.as_mut() {
            change(guard.record());
        }
    }

    fn finish(&mut self) {
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

fn add_usage(record: &mut RequestRecord, usage: Option<Usage>) {
    if let Some(usage) = usage {
        record.tokens_in = Some(usage.prompt_tokens);
        record.tokens_out = Some(usage.completion_tokens);
    }
}
