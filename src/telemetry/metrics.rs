//! Prometheus metrics, one registry per gateway (no process-wide recorder), so every
//! gateway in a test process counts only its own requests.

use std::collections::HashMap;
use std::sync::atomic::AtomicU64;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use super::{FailureClass, RequestRecord};

mod budgets;
mod labels;
mod reload;
mod series;

pub use budgets::{BudgetMetrics, SpendCard};
pub use labels::{LabelNames, LabelValue, NO_ROUTE, OTHER};
pub use reload::{ConfigStamp, ReloadMetrics};
pub use series::SeriesCache;
use series::{keyed, series};

/// `switchyard_requests_total`'s labels.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RouteOutcome {
    pub route: LabelValue,
    pub outcome: &'static str,
}

/// `switchyard_attempts_total`'s labels.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct AttemptLabels {
    pub provider: LabelValue,
    pub model: LabelValue,
    pub result: &'static str,
}

/// The labels of per-deployment families: tokens, cost, breaker state.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ProviderModel {
    pub provider: LabelValue,
    pub model: LabelValue,
}

/// `switchyard_retry_budget_exhausted_total`'s labels: the route, and the deployment whose
/// budget refused the retry.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RouteDeployment {
    pub route: LabelValue,
    pub provider: LabelValue,
    pub model: LabelValue,
}

/// `switchyard_cache_requests_total`'s labels.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CacheLabels {
    pub route: LabelValue,
    /// `hit`, `miss`, `coalesced` or `bypass`.
    pub result: &'static str,
}

/// `switchyard_hedges_total`'s labels.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct HedgeLabels {
    pub route: LabelValue,
    /// `won` (the hedge served), `lost` (another attempt committed first and the hedge was
    /// cancelled) or `failed` (the hedge failed on its own).
    pub result: &'static str,
}

/// The labels of per-route histograms.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RouteLabel {
    pub route: LabelValue,
}

fn latency_histogram() -> Histogram {
    // 0.1 ms to ~105 s: gateway overhead at the bottom, slow generations at the top.
    Histogram::new(exponential_buckets(0.0001, 2.0, 21))
}

/// Every metric the gateway exports.
pub struct Metrics {
    registry: Registry,
    /// The names labels may carry; anything else is counted as `other`. A config reload
    /// swaps them, so a route it adds gets series of its own.
    names: arc_swap::ArcSwap<LabelNames>,
    /// Config reloads, and which config is loaded.
    pub reload: ReloadMetrics,
    /// Spend budgets: dollars settled, refusals, reservations kept.
    pub budgets: BudgetMetrics,
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
    /// Retries refused because the failed deployment's retry budget was spent.
    pub retry_budget_exhausted: Family<RouteDeployment, Counter>,
    /// Hedges started, by route and how each ended.
    pub hedges: Family<HedgeLabels, Counter>,
    /// Hedges that were due but refused by the route's hedge budget.
    pub hedges_refused: Family<RouteLabel, Counter>,
    /// Requests on routes that cache, by what the cache did.
    pub cache_requests: Family<CacheLabels, Counter>,
    /// The bytes of answers the cache keeps, and its evictions, by route; set at each scrape.
    pub cache_bytes: Family<RouteLabel, Gauge>,
    pub cache_evictions: Family<RouteLabel, Gauge>,
    /// Admissions the limit backend could not decide (answered by `on_backend_error`).
    pub limit_backend_errors: Counter,
    /// Cache lookups and stores that went without Redis.
    pub cache_backend_errors: Counter,
    /// Spans dropped: the export queue was full, or the OTLP endpoint did not take them.
    pub otel_spans_dropped: Counter,
    /// Request-log rows lost after all: unreadable in the spill journal, or refused by the
    /// store and the journal at shutdown.
    pub log_rows_lost: Counter,
    /// Provider-key rows the last reload could not decrypt, and skipped.
    pub provider_keys_unreadable: Gauge,
    /// 401s past their source address's allowance of log rows, counted instead of logged.
    pub unauthorized_rows_dropped: Counter,
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
    /// 1 while breakers are shared through the cluster's Redis, 0 while they are local (no
    /// cluster configured, or its Redis unreachable).
    pub breakers_shared: Gauge,
}

impl Default for Metrics {
    /// Metrics with no configured names.
    fn default() -> Metrics {
        Metrics::new(LabelNames::default())
    }
}

impl Metrics {
    /// Metrics whose labels are limited to `names`.
    pub fn new(names: LabelNames) -> Metrics {
        let mut registry = Registry::default();
        let metrics = Metrics {
            names: arc_swap::ArcSwap::from_pointee(names),
            reload: ReloadMetrics::default(),
            budgets: BudgetMetrics::default(),
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
            retry_budget_exhausted: Family::default(),
            hedges: Family::default(),
            hedges_refused: Family::default(),
            cache_requests: Family::default(),
            cache_bytes: Family::default(),
            cache_evictions: Family::default(),
            limit_backend_errors: Counter::default(),
            cache_backend_errors: Counter::default(),
            otel_spans_dropped: Counter::default(),
            log_rows_lost: Counter::default(),
            provider_keys_unreadable: Gauge::default(),
            unauthorized_rows_dropped: Counter::default(),
            log_records_dropped: Counter::default(),
            log_requests_refused: Counter::default(),
            log_rows_spilled: Counter::default(),
            log_rows_replayed: Counter::default(),
            log_spill_bytes: Gauge::default(),
            breakers_shared: Gauge::default(),
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
            "switchyard_retry_budget_exhausted",
            "Retries refused because the failed deployment's retry budget was spent",
            metrics.retry_budget_exhausted.clone(),
        );
        registry.register(
            "switchyard_hedges",
            "Hedged attempts by route and result: won (the hedge served), lost (cancelled when another attempt committed first), failed",
            metrics.hedges.clone(),
        );
        registry.register(
            "switchyard_hedges_refused",
            "Hedges that were due but refused by the route's hedge budget",
            metrics.hedges_refused.clone(),
        );
        registry.register(
            "switchyard_cache_requests",
            "Requests on routes that cache, by route and result: hit, miss, coalesced (served the answer of an identical miss it waited for), bypass",
            metrics.cache_requests.clone(),
        );
        registry.register(
            "switchyard_cache_bytes",
            "Bytes the response cache keeps (answers and their keys), by route",
            metrics.cache_bytes.clone(),
        );
        registry.register(
            "switchyard_cache_evictions",
            "Answers evicted from the response cache to make room, since start, by route",
            metrics.cache_evictions.clone(),
        );
        registry.register(
            "switchyard_cache_backend_errors",
            "Response-cache lookups and stores that went without Redis (it failed, answered too late, or was left alone for a second after failing): the request went upstream as if uncached",
            metrics.cache_backend_errors.clone(),
        );
        registry.register(
            "switchyard_otel_spans_dropped",
            "Spans not exported: the export queue was full, or the OTLP endpoint refused them, failed or did not answer in time",
            metrics.otel_spans_dropped.clone(),
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
            "switchyard_provider_keys_unreadable",
            "Provider-key rows that do not decrypt under the master key, skipped at the last reload",
            metrics.provider_keys_unreadable.clone(),
        );
        registry.register(
            "switchyard_unauthorized_rows_dropped",
            "401s not logged one by one: past their address's allowance of rows a minute",
            metrics.unauthorized_rows_dropped.clone(),
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
        metrics.reload.register(&mut registry);
        metrics.budgets.register(&mut registry);
        registry.register(
            "switchyard_breakers_shared",
            "1 while breakers are shared through the cluster's Redis, 0 while they are local",
            metrics.breakers_shared.clone(),
        );
        Metrics {
            registry,
            ..metrics
        }
    }

    /// Limits labels to a reloaded config's names.
    pub fn set_names(&self, names: LabelNames) {
        self.names.store(std::sync::Arc::new(names));
    }

    /// Counts one finished request, into the series `cache` holds handles on (the writer
    /// keeps one across records).
    pub fn observe(&self, record: &RequestRecord, cache: &mut SeriesCache) {
        let names = self.names.load();
        let cache = cache.under(&names);
        let route = names.route(record.route.as_ref().map(|r| r.as_str()));
        let outcome = record.outcome.as_str();
        // Found once: the attempts below borrow only `cache.deployments`.
        let by_route = cache.routes.entry(route.id()).or_default();
        keyed(&mut by_route.requests, outcome, &self.requests, || {
            RouteOutcome {
                route: route.clone(),
                outcome,
            }
        })
        .inc();
        for attempt in &record.attempts {
            let (provider, model) = (attempt.provider.as_str(), attempt.model.as_str());
            let (provider, model) = (names.provider(provider), names.model(provider, model));
            let result = attempt.failure.map(|f| f.kind()).unwrap_or("success");
            let deployment = cache
                .deployments
                .entry((provider.id(), model.id()))
                .or_default();
            keyed(&mut deployment.attempts, result, &self.attempts, || {
                AttemptLabels {
                    provider: provider.clone(),
                    model: model.clone(),
                    result,
                }
            })
            .inc();
            // Rare: looked up in their families each time.
            if attempt.failure == Some(FailureClass::RetryBudgetExhausted) {
                self.retry_budget_exhausted
                    .get_or_create(&RouteDeployment {
                        route: route.clone(),
                        provider,
                        model,
                    })
                    .inc();
            }
            if attempt.hedge {
                let result = match attempt.failure {
                    None => "won",
                    Some(super::FailureClass::HedgeLost) => "lost",
                    Some(_) => "failed",
                };
                self.hedges
                    .get_or_create(&HedgeLabels {
                        route: route.clone(),
                        result,
                    })
                    .inc();
            }
        }
        let label = || RouteLabel {
            route: route.clone(),
        };
        if record.hedge_refused {
            self.hedges_refused.get_or_create(&label()).inc();
        }
        if let Some(cache) = record.cache {
            self.cache_requests
                .get_or_create(&CacheLabels {
                    route: route.clone(),
                    result: cache.as_str(),
                })
                .inc();
        }
        series(&mut by_route.duration, &self.duration, label).observe(record.latency.as_secs_f64());
        series(&mut by_route.overhead, &self.overhead, label)
            .observe(record.overhead.as_secs_f64());
        if let Some(ttft) = record.ttft {
            series(&mut by_route.ttft, &self.ttft, label).observe(ttft.as_secs_f64());
        }
        if let (Some(provider), Some(model)) = (&record.provider, &record.model) {
            let (provider, model) = (provider.as_str(), model.as_str());
            let (provider, model) = (names.provider(provider), names.model(provider, model));
            let deployment = cache
                .deployments
                .entry((provider.id(), model.id()))
                .or_default();
            let labels = || ProviderModel {
                provider: provider.clone(),
                model: model.clone(),
            };
            if let Some(tokens) = record.tokens_in {
                series(&mut deployment.tokens_in, &self.tokens_in, labels).inc_by(tokens);
            }
            if let Some(tokens) = record.tokens_out {
                series(&mut deployment.tokens_out, &self.tokens_out, labels).inc_by(tokens);
            }
            if let Some(cost) = record.cost_usd {
                series(&mut deployment.cost, &self.cost, labels).inc_by(cost);
            }
        }
    }

    /// Counts spend settled against a budget. The route is labelled as every route is (a
    /// configured name, else `other`); `role` must already be a configured role or `other`.
    pub fn budget_spend(&self, route: &str, role: &str, key: Option<&str>, micros: u64) {
        let route = self.names.load().route(Some(route));
        self.budgets
            .spent(route, LabelValue::from(role), key, micros);
    }

    /// Sets `switchyard_breaker_state` from every breaker's `(provider, model, gauge)`.
    /// Breakers that share a label (the unconfigured models counted as `other`) show the
    /// worst state among them, so an open one is never hidden by a closed one.
    pub fn set_breakers<'a>(&self, states: impl IntoIterator<Item = (&'a str, &'a str, i64)>) {
        let mut worst: HashMap<ProviderModel, i64> = HashMap::new();
        for (provider, model, gauge) in states {
            let state = worst
                .entry(self.deployment(provider, model))
                .or_insert(gauge);
            *state = (*state).max(gauge);
        }
        for (labels, gauge) in worst {
            self.breaker_state.get_or_create(&labels).set(gauge);
        }
    }

    /// Sets the response cache's bytes and evictions, route by route.
    pub fn set_cache<'a>(&self, routes: impl IntoIterator<Item = (&'a str, usize, u64)>) {
        let names = self.names.load();
        for (route, bytes, evictions) in routes {
            let label = RouteLabel {
                route: names.route(Some(route)),
            };
            let as_gauge = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
            self.cache_bytes
                .get_or_create(&label)
                .set(as_gauge(bytes as u64));
            self.cache_evictions
                .get_or_create(&label)
                .set(as_gauge(evictions));
        }
    }

    fn deployment(&self, provider: &str, model: &str) -> ProviderModel {
        let names = self.names.load();
        ProviderModel {
            provider: names.provider(provider),
            model: names.model(provider, model),
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

#[cfg(test)]
mod tests;
