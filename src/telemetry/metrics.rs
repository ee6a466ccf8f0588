//! Prometheus metrics, one registry per gateway (no process-wide recorder), so every
//! gateway in a test process counts only its own requests.

use std::sync::atomic::AtomicU64;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use super::RequestRecord;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RouteOutcome {
    pub route: String,
    pub outcome: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct AttemptLabels {
    pub provider: String,
    pub model: String,
    pub result: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ProviderModel {
    pub provider: String,
    pub model: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RouteLabel {
    pub route: String,
}

fn latency_histogram() -> Histogram {
    // 0.1 ms to ~105 s: gateway overhead at the bottom, slow generations at the top.
    Histogram::new(exponential_buckets(0.0001, 2.0, 21))
}

/// Every metric the gateway exports.
pub struct Metrics {
    registry: Registry,
    pub requests: Family<RouteOutcome, Counter>,
    pub attempts: Family<AttemptLabels, Counter>,
    pub duration: Family<RouteLabel, Histogram, fn() -> Histogram>,
    pub ttft: Family<RouteLabel, Histogram, fn() -> Histogram>,
    pub overhead: Family<RouteLabel, Histogram, fn() -> Histogram>,
    pub tokens_in: Family<ProviderModel, Counter>,
    pub tokens_out: Family<ProviderModel, Counter>,
    /// US dollars spent, priced from `[[prices]]`.
    pub cost: Family<ProviderModel, Counter<f64, AtomicU64>>,
    /// 0 closed, 1 half-open, 2 open.
    pub breaker_state: Family<ProviderModel, Gauge>,
    pub ratelimited: Counter,
    /// Admissions the limit backend could not decide (answered by `on_backend_error`).
    pub limit_backend_errors: Counter,
    /// Request-log rows lost after all: unreadable in the spill journal, or refused by the
    /// store and the journal at shutdown.
    pub log_rows_lost: Counter,
    /// Records dropped because the queue and the journal were full (`when_full = "drop"`).
    pub log_records_dropped: Counter,
    /// Requests refused with a 503 because the log was full (`when_full = "refuse"`).
    pub log_requests_refused: Counter,
    /// Rows written to the spill journal while the store refused them.
    pub log_rows_spilled: Counter,
    /// Rows replayed from the spill journal into the store.
    pub log_rows_replayed: Counter,
    /// Bytes in the spill journal now.
    pub log_spill_bytes: Gauge,
}

impl Default for Metrics {
    fn default() -> Metrics {
        let mut registry = Registry::default();
        let metrics = Metrics {
            requests: Family::default(),
            attempts: Family::default(),
            duration: Family::new_with_constructor(latency_histogram),
            ttft: Family::new_with_constructor(latency_histogram),
            overhead: Family::new_with_constructor(latency_histogram),
            tokens_in: Family::default(),
            tokens_out: Family::default(),
            cost: Family::default(),
            breaker_state: Family::default(),
            ratelimited: Counter::default(),
            limit_backend_errors: Counter::default(),
            log_rows_lost: Counter::default(),
            log_records_dropped: Counter::default(),
            log_requests_refused: Counter::default(),
            log_rows_spilled: Counter::default(),
            log_rows_replayed: Counter::default(),
            log_spill_bytes: Gauge::default(),
            registry: Registry::default(),
        };
        registry.register(
            "switchyard_requests",
            "Requests by route and outcome",
            metrics.requests.clone(),
        );
        registry.register(
            "switchyard_attempts",
            "Upstream attempts by provider, model and result",
            metrics.attempts.clone(),
        );
        registry.register(
            "switchyard_request_duration_seconds",
            "Total request latency",
            metrics.duration.clone(),
        );
        registry.register(
            "switchyard_ttft_seconds",
            "Time to the first token",
            metrics.ttft.clone(),
        );
        registry.register(
            "switchyard_overhead_seconds",
            "Time spent in the gateway itself",
            metrics.overhead.clone(),
        );
        registry.register(
            "switchyard_tokens_in",
            "Prompt tokens by provider and model",
            metrics.tokens_in.clone(),
        );
        registry.register(
            "switchyard_tokens_out",
            "Completion tokens by provider and model",
            metrics.tokens_out.clone(),
        );
        registry.register(
            "switchyard_cost_usd",
            "US dollars spent by provider and model, from the price table",
            metrics.cost.clone(),
        );
        registry.register(
            "switchyard_breaker_state",
            "Circuit breaker state: 0 closed, 1 half-open, 2 open",
            metrics.breaker_state.clone(),
        );
        registry.register(
            "switchyard_ratelimited",
            "Requests refused by rate limits",
            metrics.ratelimited.clone(),
        );
        registry.register(
            "switchyard_limit_backend_errors",
            "Admissions the rate-limit backend could not decide",
            metrics.limit_backend_errors.clone(),
        );
        registry.register(
            "switchyard_log_rows_lost",
            "Request-log rows lost: unreadable in the spill journal, or refused by the store and the journal at shutdown",
            metrics.log_rows_lost.clone(),
        );
        registry.register(
            "switchyard_log_records_dropped",
            "Request-log records dropped because the queue and the spill journal were full",
            metrics.log_records_dropped.clone(),
        );
        registry.register(
            "switchyard_log_requests_refused",
            "Requests refused because the request log's queue and spill journal were full",
            metrics.log_requests_refused.clone(),
        );
        registry.register(
            "switchyard_log_rows_spilled",
            "Request-log rows written to the spill journal while the store refused them",
            metrics.log_rows_spilled.clone(),
        );
        registry.register(
            "switchyard_log_rows_replayed",
            "Request-log rows replayed from the spill journal into the store",
            metrics.log_rows_replayed.clone(),
        );
        registry.register(
            "switchyard_log_spill_bytes",
            "Bytes in the request log's spill journal",
            metrics.log_spill_bytes.clone(),
        );
        Metrics {
            registry,
            ..metrics
        }
    }
}

impl Metrics {
    /// Counts one finished request.
    pub fn observe(&self, record: &RequestRecord) {
        let route = record
            .route
            .as_ref()
            .map(|r| r.to_string())
            .unwrap_or_else(|| "-".into());
        self.requests
            .get_or_create(&RouteOutcome {
                route: route.clone(),
                outcome: record.outcome.as_str().into(),
            })
            .inc();
        for attempt in &record.attempts {
            let result = attempt.failure.map(|f| f.kind()).unwrap_or("success");
            self.attempts
                .get_or_create(&AttemptLabels {
                    provider: attempt.provider.to_string(),
                    model: attempt.model.to_string(),
                    result: result.into(),
                })
                .inc();
        }
        let label = RouteLabel { route };
        self.duration
            .get_or_create(&label)
            .observe(record.latency.as_secs_f64());
        self.overhead
            .get_or_create(&label)
            .observe(record.overhead.as_secs_f64());
        if let Some(ttft) = record.ttft {
            self.ttft.get_or_create(&label).observe(ttft.as_secs_f64());
        }
        if let (Some(provider), Some(model)) = (&record.provider, &record.model) {
            let labels = ProviderModel {
                provider: provider.to_string(),
                model: model.to_string(),
            };
            if let Some(tokens) = record.tokens_in {
                self.tokens_in.get_or_create(&labels).inc_by(tokens);
            }
            if let Some(tokens) = record.tokens_out {
                self.tokens_out.get_or_create(&labels).inc_by(tokens);
            }
            if let Some(cost) = record.cost_usd {
                self.cost.get_or_create(&labels).inc_by(cost);
            }
        }
    }

    /// The Prometheus text exposition.
    pub fn render(&self) -> String {
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = encode(&mut out, &self.registry);
        out
    }
}
