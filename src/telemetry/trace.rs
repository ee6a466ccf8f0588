//! W3C trace context for one request: continued from the client's `traceparent`, or begun
//! here; sampled as `[otel] sample_ratio` says (a client's choice is kept); and sent on to
//! every upstream attempt with the attempt's own span id.
//!
//! With tracing off, a client's `traceparent` and `tracestate` are still sent on unchanged, so
//! a trace the client started reaches the provider.

use std::sync::Arc;

use http::{HeaderMap, HeaderName, HeaderValue};
use opentelemetry::propagation::{Extractor, TextMapPropagator};
use opentelemetry::trace::{SpanId, SpanKind, TraceContextExt, TraceId, TraceState};
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::{
    IdGenerator, RandomIdGenerator, Sampler, SamplingDecision, ShouldSample,
};

pub const TRACEPARENT: HeaderName = HeaderName::from_static("traceparent");
pub const TRACESTATE: HeaderName = HeaderName::from_static("tracestate");

/// The trace one request belongs to, and the gateway's span in it.
#[derive(Clone, Debug)]
pub struct TraceContext {
    pub trace_id: TraceId,
    /// The client's span, when it sent one.
    pub parent: Option<SpanId>,
    /// The gateway's own span: the request's server span.
    pub span: SpanId,
    pub sampled: bool,
    /// The client's `tracestate`, sent on as it came.
    pub state: TraceState,
}

/// What a request's upstream attempts carry of its trace.
#[derive(Clone, Debug, Default)]
pub enum Propagation {
    /// The client sent no trace context and the gateway traces nothing.
    #[default]
    None,
    /// Tracing is off: the client's own headers, sent on as they came.
    Forward {
        parent: HeaderValue,
        state: Option<HeaderValue>,
    },
    /// Tracing is on: each attempt is a span of this trace.
    Traced(Arc<TraceContext>),
}

/// What a sampled request's spans tell beyond its log row. Made only for a sampled trace,
/// and boxed in the record, which most requests send without one.
#[derive(Clone, Debug, Default)]
pub struct SpanDetail {
    /// The caller's role.
    pub role: Option<Arc<str>>,
    /// The tightest spend budget's reservation for this request, and what it leaves, in
    /// micro-USD; `None` when no budget applies.
    pub budget: Option<(u64, Option<u64>)>,
    /// Why each choice of the answer ended, as the client was told.
    pub finish_reasons: Vec<String>,
    /// With `[otel] capture_content`: the GenAI conventions' JSON of the system
    /// instructions, the messages in and the messages out.
    pub system_instructions: Option<String>,
    pub input_messages: Option<String>,
    pub output_messages: Option<String>,
    /// With capture on, the bytes of content the answer may still take.
    pub content_room: Option<usize>,
}

/// Starts requests' traces: on when `[otel]` names an endpoint.
#[derive(Debug)]
pub struct Tracing {
    sampler: Sampler,
    ids: RandomIdGenerator,
    /// With `[otel] capture_content`, the most bytes of content a span carries.
    content_bytes: Option<usize>,
}

impl Tracing {
    pub fn new(sample_ratio: f64) -> Tracing {
        Tracing {
            sampler: Sampler::ParentBased(Box::new(Sampler::TraceIdRatioBased(sample_ratio))),
            ids: RandomIdGenerator::default(),
            content_bytes: None,
        }
    }

    /// Tracing as `[otel]` sets it.
    pub fn from_config(otel: &crate::config::OtelConfig) -> Tracing {
        Tracing {
            content_bytes: otel.capture_content.then_some(otel.max_content_bytes),
            ..Tracing::new(otel.sample_ratio)
        }
    }

    /// The most bytes of prompt and answer a span carries; `None` when none is captured.
    pub fn content_bytes(&self) -> Option<usize> {
        self.content_bytes
    }

    /// The request's trace: the client's continued when `headers` carry a valid
    /// `traceparent`, else a new one; sampled by the parent's choice, else by the ratio.
    pub fn start(&self, headers: &HeaderMap) -> Arc<TraceContext> {
        let context = TraceContextPropagator::new().extract(&Headers(headers));
        let remote = context.span().span_context().clone();
        let (trace_id, parent, state) = match remote.is_valid() {
            true => (
                remote.trace_id(),
                Some(remote.span_id()),
                remote.trace_state().clone(),
            ),
            false => (self.ids.new_trace_id(), None, TraceState::default()),
        };
        let sampled = self
            .sampler
            .should_sample(Some(&context), trace_id, "", &SpanKind::Server, &[], &[])
            .decision
            == SamplingDecision::RecordAndSample;
        Arc::new(TraceContext {
            trace_id,
            parent,
            span: self.ids.new_span_id(),
            sampled,
            state,
        })
    }

    /// A span id for one upstream attempt.
    pub fn span_id(&self) -> SpanId {
        self.ids.new_span_id()
    }
}

impl Propagation {
    /// What a request with `headers` sends on, when `tracing` (if on) has started `trace`.
    pub fn of(trace: Option<&Arc<TraceContext>>, headers: &HeaderMap) -> Propagation {
        if let Some(trace) = trace {
            return Propagation::Traced(trace.clone());
        }
        match headers.get(TRACEPARENT) {
            Some(parent) => Propagation::Forward {
                parent: parent.clone(),
                state: headers.get(TRACESTATE).cloned(),
            },
            None => Propagation::None,
        }
    }

    /// Adds the trace context to an upstream attempt whose span is `span`.
    pub fn inject(&self, headers: &mut HeaderMap, span: SpanId) {
        match self {
            Propagation::None => {}
            Propagation::Forward { parent, state } => {
                headers.insert(TRACEPARENT, parent.clone());
                if let Some(state) = state {
                    headers.insert(TRACESTATE, state.clone());
                }
            }
            Propagation::Traced(trace) => {
                let flags = if trace.sampled { "01" } else { "00" };
                let parent = format!("00-{}-{span}-{flags}", trace.trace_id);
                if let Ok(parent) = HeaderValue::try_from(parent) {
                    headers.insert(TRACEPARENT, parent);
                }
                let state = trace.state.header();
                if let (false, Ok(state)) = (state.is_empty(), HeaderValue::try_from(state)) {
                    headers.insert(TRACESTATE, state);
                }
            }
        }
    }

    /// Whether attempts are spans of a trace the gateway records.
    pub fn traced(&self) -> bool {
        matches!(self, Propagation::Traced(_))
    }
}

/// A request's headers, as the propagator reads them.
struct Headers<'a>(&'a HeaderMap);

impl Extractor for Headers<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).and_then(|value| value.to_str().ok())
    }

    fn keys(&self) -> Vec<&str> {
        self.0.keys().map(HeaderName::as_str).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        pairs
            .iter()
            .map(|(k, v)| (HeaderName::from_static(k), HeaderValue::from_static(v)))
            .collect()
    }

    const PARENT: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

    #[test]
    fn a_clients_trace_is_continued_and_its_sampling_kept() {
        let tracing = Tracing::new(0.0);
        let trace = tracing.start(&headers(&[
            ("traceparent", PARENT),
            ("tracestate", "vendor=abc"),
        ]));
        assert_eq!(
            trace.trace_id.to_string(),
            "4bf92f3577b34da6a3ce929d0e0e4736"
        );
        assert_eq!(
            trace.parent.map(|p| p.to_string()).as_deref(),
            Some("00f067aa0ba902b7")
        );
        assert!(
            trace.sampled,
            "the client sampled it, though the ratio is 0"
        );
        assert_ne!(trace.span, SpanId::INVALID);

        let attempt = SpanId::from(0x1122_3344_5566_7788);
        let mut upstream = HeaderMap::new();
        Propagation::Traced(trace).inject(&mut upstream, attempt);
        assert_eq!(
            upstream[TRACEPARENT],
            "00-4bf92f3577b34da6a3ce929d0e0e4736-1122334455667788-01"
        );
        assert_eq!(upstream[TRACESTATE], "vendor=abc");
    }

    #[test]
    fn without_a_valid_parent_a_trace_begins_and_the_ratio_decides() {
        let unsampled = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00";
        assert!(
            !Tracing::new(1.0)
                .start(&headers(&[("traceparent", unsampled)]))
                .sampled
        );
        for bad in [
            "garbage",
            "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        ] {
            let trace = Tracing::new(1.0).start(&headers(&[("traceparent", bad)]));
            assert_eq!(trace.parent, None, "{bad}");
            assert!(trace.sampled);
        }
        assert!(!Tracing::new(0.0).start(&HeaderMap::new()).sampled);
    }

    #[test]
    fn with_tracing_off_a_clients_headers_are_sent_on_as_they_came() {
        let client = headers(&[("traceparent", PARENT), ("tracestate", "v=1")]);
        let mut upstream = HeaderMap::new();
        Propagation::of(None, &client).inject(&mut upstream, SpanId::INVALID);
        assert_eq!(upstream[TRACEPARENT], PARENT);
        assert_eq!(upstream[TRACESTATE], "v=1");
        let mut untouched = HeaderMap::new();
        Propagation::of(None, &HeaderMap::new()).inject(&mut untouched, SpanId::INVALID);
        assert!(untouched.is_empty());
    }
}
