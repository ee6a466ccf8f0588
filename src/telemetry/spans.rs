//! Requests as OpenTelemetry spans, exported in OTLP off the request path.
//!
//! The request log's writer hands each sampled record over once the request is done. It
//! becomes a server span, with a client span for each upstream attempt (retries, fallbacks
//! and hedge racers, the cancelled included). The spans take the ids the request already
//! sent upstream in `traceparent`, and the times the record kept. A task of its own sends
//! them in batches. A full queue or a collector that is down or slow drops spans, and counts
//! them. Requests never wait on either.

mod attributes;
mod exporter;

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use opentelemetry::InstrumentationScope;
use opentelemetry::trace::{SpanContext, SpanId, SpanKind, Status, TraceFlags};
use opentelemetry_sdk::trace::{SpanData, SpanEvents, SpanLinks};
use prometheus_client::metrics::counter::Counter;
use tokio::sync::mpsc;

use super::{AttemptRecord, Outcome, RequestRecord};
use crate::config::{Config, ProviderKind, SemConv};
use attributes::{attempt_attributes, request_attributes};

/// The most spans sent in one export.
const BATCH: usize = 512;

/// Where a record's spans go: a bounded queue to the export task.
pub struct Spans {
    queue: mpsc::Sender<SpanData>,
    providers: Arc<SpanProviders>,
    scope: InstrumentationScope,
    semconv: SemConv,
    dropped: Counter,
}

/// What an attempt's span says of its provider: its kind, and the host.
#[derive(Clone, Debug)]
struct ProviderInfo {
    kind: ProviderKind,
    host: String,
}

/// What spans say of each configured provider, replaced whole when a reload changes them.
pub struct SpanProviders(ArcSwap<HashMap<String, ProviderInfo>>);

impl SpanProviders {
    pub fn new(config: &Config) -> SpanProviders {
        SpanProviders(ArcSwap::from_pointee(provider_infos(config)))
    }

    /// The providers of a reloaded config.
    pub fn set(&self, config: &Config) {
        self.0.store(Arc::new(provider_infos(config)));
    }
}

fn provider_infos(config: &Config) -> HashMap<String, ProviderInfo> {
    let infos = config.providers.iter().map(|p| {
        let host = url::Url::parse(&p.base_url)
            .ok()
            .and_then(|u| u.host_str().map(str::to_owned))
            .unwrap_or_default();
        let info = ProviderInfo { kind: p.kind, host };
        (p.id.as_str().to_owned(), info)
    });
    infos.collect()
}

impl Spans {
    /// Starts the export task for `config`'s `[otel]`, when it names an endpoint;
    /// `dropped` counts the spans that could not be sent.
    pub fn start(
        config: &Config,
        providers: Arc<SpanProviders>,
        dropped: Counter,
    ) -> Option<Spans> {
        let otel = config.otel.clone();
        otel.endpoint.as_ref()?;
        let semconv = otel.semconv;
        let (queue, spans) = mpsc::channel(otel.max_queue_spans);
        tokio::spawn(exporter::run(otel, spans, dropped.clone()));
        Some(Spans {
            queue,
            providers,
            scope: InstrumentationScope::builder("switchyard")
                .with_version(env!("CARGO_PKG_VERSION"))
                .build(),
            semconv,
            dropped,
        })
    }

    /// Queues `record`'s spans, when its trace is sampled; those the queue has no room for
    /// are dropped and counted.
    pub fn offer(&self, record: &RequestRecord) {
        let Some(trace) = record.trace.as_ref().filter(|t| t.sampled) else {
            return;
        };
        let context = SpanContext::new(
            trace.trace_id,
            trace.span,
            TraceFlags::SAMPLED,
            false,
            trace.state.clone(),
        );
        // The record's times and its attempts' are read from two clocks (wall and
        // monotonic) a few µs apart: the server span is widened to hold its children.
        let attempt_times = record.attempts.iter().filter_map(|a| {
            a.span
                .map(|span| (span.started_at, span.started_at + a.latency))
        });
        let (start, end) = attempt_times.fold(
            (record.started_at, record.started_at + record.latency),
            |(start, end), (from, to)| (start.min(from), end.max(to)),
        );
        let providers = self.providers.0.load();
        let serving = record
            .provider
            .as_ref()
            .and_then(|p| providers.get(p.as_str()));
        let mut events = SpanEvents::default();
        if let Some(ttft) = record.ttft.filter(|_| record.stream) {
            events.events.push(opentelemetry::trace::Event::new(
                "gen_ai.first_token",
                record.started_at + ttft,
                Vec::new(),
                0,
            ));
        }
        let server = SpanData {
            span_context: context.clone(),
            parent_span_id: trace.parent.unwrap_or(SpanId::INVALID),
            parent_span_is_remote: trace.parent.is_some(),
            span_kind: SpanKind::Server,
            name: span_name(record.operation, record.requested_model.as_deref()),
            start_time: start,
            end_time: end,
            attributes: request_attributes(record, serving.map(|p| p.kind), self.semconv),
            dropped_attributes_count: 0,
            events,
            links: SpanLinks::default(),
            status: match record.outcome {
                Outcome::Error => Status::error(record.error.clone().unwrap_or_default()),
                _ => Status::Unset,
            },
            instrumentation_scope: self.scope.clone(),
        };
        self.send(server);
        for attempt in &record.attempts {
            let provider = providers.get(attempt.provider.as_str());
            if let Some(span) = self.attempt_span(record, attempt, provider, &context) {
                self.send(span);
            }
        }
    }

    fn attempt_span(
        &self,
        record: &RequestRecord,
        attempt: &AttemptRecord,
        provider: Option<&ProviderInfo>,
        parent: &SpanContext,
    ) -> Option<SpanData> {
        let span = attempt.span?;
        let failed = attempt.failure.is_some();
        Some(SpanData {
            span_context: SpanContext::new(
                parent.trace_id(),
                span.id,
                TraceFlags::SAMPLED,
                false,
                parent.trace_state().clone(),
            ),
            parent_span_id: parent.span_id(),
            parent_span_is_remote: false,
            span_kind: SpanKind::Client,
            name: span_name(record.operation, Some(attempt.model.as_str())),
            start_time: span.started_at,
            end_time: span.started_at + attempt.latency,
            attributes: attempt_attributes(
                record,
                attempt,
                provider.map(|p| (p.kind, &*p.host)),
                self.semconv,
            ),
            dropped_attributes_count: 0,
            events: SpanEvents::default(),
            links: SpanLinks::default(),
            status: match attempt.failure {
                Some(class) if failed => Status::error(class.kind()),
                _ => Status::Unset,
            },
            instrumentation_scope: self.scope.clone(),
        })
    }

    fn send(&self, span: SpanData) {
        if self.queue.try_send(span).is_err() {
            self.dropped.inc();
        }
    }
}

/// `{operation} {model}`, as the GenAI conventions name spans.
fn span_name(operation: Option<&'static str>, model: Option<&str>) -> Cow<'static, str> {
    let operation = operation.unwrap_or("chat");
    match model {
        Some(model) => Cow::Owned(format!("{operation} {model}")),
        None => Cow::Borrowed(operation),
    }
}

/// A duration as whole milliseconds, for attributes.
fn millis(duration: Duration) -> i64 {
    i64::try_from(duration.as_millis()).unwrap_or(i64::MAX)
}
