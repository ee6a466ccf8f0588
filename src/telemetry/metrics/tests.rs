//! Every label path fed arbitrary strings, and the output read back by a strict OpenMetrics
//! reader: it always parses, and its label values are configured names (escaped and
//! unescaped intact) or the fixed `other` and `-`.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use proptest::prelude::*;

use super::*;
use crate::config::{ModelName, ProviderId, RouteName};
use crate::telemetry::FailureClass;
use crate::telemetry::{AttemptRecord, Outcome};

// The test suite's reader, shared with `tests/gateway/metrics.rs`.
#[path = "../../../tests/common/openmetrics.rs"]
mod openmetrics;

/// What the parser should read back for a configured name: controls other than newline
/// cannot be written in the format, so they come back as U+FFFD.
fn read_back(name: &str) -> String {
    name.chars()
        .map(|c| {
            if c.is_control() && c != '\n' {
                '\u{FFFD}'
            } else {
                c
            }
        })
        .collect()
}

/// A finished request through `route`, served by `provider/model` after one failed attempt.
fn record(route: Option<&str>, provider: &str, model: &str) -> RequestRecord {
    let attempt = |failure| AttemptRecord {
        step: 0,
        provider: ProviderId(Arc::from(provider)),
        model: ModelName(Arc::from(model)),
        failure,
        status: Some(200),
        latency: Duration::from_millis(5),
        hedge: false,
        span: None,
    };
    RequestRecord {
        route: route.map(|r| RouteName(Arc::from(r))),
        outcome: Outcome::Fallback,
        provider: Some(ProviderId(Arc::from(provider))),
        model: Some(ModelName(Arc::from(model))),
        attempts: vec![attempt(Some(FailureClass::ServerError)), attempt(None)],
        ttft: Some(Duration::from_millis(7)),
        tokens_in: Some(3),
        tokens_out: Some(4),
        cost_usd: Some(0.5),
        ..RequestRecord::new("id".into(), true)
    }
}

/// `(family, labels)`, `le` left out.
type Series = BTreeSet<(String, BTreeMap<String, String>)>;

/// Every series of an exposition; fails the case when it does not parse.
fn series(text: &str) -> Result<Series, TestCaseError> {
    let families = openmetrics::parse(text)
        .map_err(|e| TestCaseError::fail(format!("not valid OpenMetrics: {e}\n{text}")))?;
    let mut series = BTreeSet::new();
    for family in families {
        for mut sample in family.samples {
            sample.labels.remove("le");
            series.insert((family.name.clone(), sample.labels));
        }
    }
    Ok(series)
}

fn name() -> impl Strategy<Value = String> {
    // Arbitrary text, weighted towards the characters that break an unescaped exposition.
    prop_oneof![
        any::<String>(),
        "[a-z\"\\\\\n\r{}=,# EOF]{0,12}",
        Just("x\"} 1\n# EOF\n".to_owned()),
    ]
}

/// A name the config can hold: validation refuses empty ones.
fn configured() -> impl Strategy<Value = String> {
    name().prop_filter("configured names are not empty", |n| !n.is_empty())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn arbitrary_names_on_every_label_path_parse_back_as_configured_names_or_other(
        routes in prop::collection::vec(configured(), 1..4),
        pairs in prop::collection::vec((configured(), configured()), 1..4),
        hostile in prop::collection::vec((name(), name(), name()), 1..6),
    ) {
        let names = LabelNames::new(
            routes.iter().map(String::as_str),
            pairs.iter().map(|(p, m)| (p.as_str(), m.as_str())),
        );
        let metrics = Metrics::new(names);
        let cache = &mut SeriesCache::default();
        let mut breakers = Vec::new();
        for (route, (provider, model)) in routes.iter().zip(pairs.iter().cycle()) {
            metrics.observe(&record(Some(route), provider, model), cache);
            breakers.push((provider.as_str(), model.as_str(), 0));
        }
        for (route, provider, model) in &hostile {
            // A client's route name, at a configured provider and at an unknown one.
            metrics.observe(&record(Some(route), &pairs[0].0, model), cache);
            metrics.observe(&record(Some(&format!("{provider}/{model}")), provider, model), cache);
            breakers.push((provider.as_str(), model.as_str(), 2));
        }
        metrics.observe(&record(None, &pairs[0].0, &pairs[0].1), cache);
        metrics.set_breakers(breakers);

        let series = series(&metrics.render())?;
        let mut allowed: BTreeSet<String> = [OTHER, NO_ROUTE, "fallback", "success", "server_error"]
            .into_iter()
            .map(str::to_owned)
            .collect();
        allowed.extend(routes.iter().map(|r| read_back(r)));
        for (provider, model) in &pairs {
            allowed.insert(read_back(provider));
            allowed.insert(read_back(model));
            allowed.insert(read_back(&format!("{provider}/{model}")));
        }
        for (family, labels) in &series {
            prop_assert!(family.starts_with("switchyard_"), "forged family {family}");
            for value in labels.values() {
                prop_assert!(allowed.contains(value), "{family}: `{value:?}` is not a configured name");
            }
        }
        // Configured names survive the round trip, so their series are still usable.
        for route in &routes {
            let route = read_back(route);
            prop_assert!(series.iter().any(|(f, l)| f == "switchyard_requests" && l.get("route") == Some(&route)));
        }
        let (provider, model) = (read_back(&pairs[0].0), read_back(&pairs[0].1));
        prop_assert!(series.iter().any(|(f, l)| f == "switchyard_attempts"
            && l.get("provider") == Some(&provider) && l.get("model") == Some(&model)));
        let route_values: BTreeSet<_> = series.iter().filter_map(|(_, l)| l.get("route")).collect();
        prop_assert!(route_values.len() <= routes.len() + pairs.len() + 2);
        // Handles are held per label, not per name a client sent.
        // Routes: configured, direct `provider/model`, `other`, `-`; deployments: (providers
        // and `other`) x (models and `other`).
        let most = routes.len() + pairs.len() + 2 + (pairs.len() + 1) * (pairs.len() + 1);
        prop_assert!(cache.held() <= most, "{} series cached, at most {most} labels", cache.held());
    }
}

/// The names the series-cache test switches between: a reload adds `late` and drops `gone`.
fn reloadable_names(reloaded: bool) -> LabelNames {
    let routes = if reloaded {
        ["smart", "late"]
    } else {
        ["smart", "gone"]
    };
    LabelNames::new(routes, [("openai", "gpt-4o"), ("groq", "llama")])
}

const OUTCOMES: [Outcome; 5] = [
    Outcome::Success,
    Outcome::Fallback,
    Outcome::Degraded,
    Outcome::Error,
    Outcome::Rejected,
];

const FAILURES: [Option<FailureClass>; 6] = [
    None,
    Some(FailureClass::ServerError),
    Some(FailureClass::RateLimited),
    Some(FailureClass::Timeout),
    Some(FailureClass::RetryBudgetExhausted),
    Some(FailureClass::HedgeLost),
];

/// One step of the series-cache test: a record, or a reload of the names.
#[derive(Clone, Debug)]
enum Step {
    Reload(bool),
    Record(Box<RequestRecord>),
}

fn step() -> impl Strategy<Value = Step> {
    let route = prop::option::of(prop::sample::select(vec![
        "smart",
        "late",
        "gone",
        "client-made",
        "openai/gpt-4o",
    ]));
    let provider = prop::sample::select(vec!["openai", "groq", "stranger"]);
    let model = prop::sample::select(vec!["gpt-4o", "llama", "made-up"]);
    let attempt = (provider, model, 0..FAILURES.len(), any::<bool>()).prop_map(
        |(provider, model, failure, hedge)| AttemptRecord {
            step: 0,
            provider: ProviderId(Arc::from(provider)),
            model: ModelName(Arc::from(model)),
            failure: FAILURES[failure],
            status: Some(200),
            latency: Duration::from_millis(3),
            hedge,
            span: None,
        },
    );
    let record = (
        route,
        0..OUTCOMES.len(),
        prop::collection::vec(attempt, 0..3),
        prop::option::of(1..5_000u64),
        prop::option::of((0..100u64, 0..100u64)),
        prop::option::of(0.0..1.0f64),
        any::<bool>(),
    )
        .prop_map(
            |(route, outcome, attempts, ttft, tokens, cost, hedge_refused)| {
                let served = attempts.last().filter(|a| a.failure.is_none()).cloned();
                Step::Record(Box::new(RequestRecord {
                    route: route.map(|r| RouteName(Arc::from(r))),
                    outcome: OUTCOMES[outcome],
                    provider: served.as_ref().map(|a| a.provider.clone()),
                    model: served.map(|a| a.model),
                    attempts,
                    latency: Duration::from_micros(1_000 + outcome as u64 * 37),
                    overhead: Duration::from_micros(40),
                    ttft: ttft.map(Duration::from_micros),
                    tokens_in: tokens.map(|t| t.0),
                    tokens_out: tokens.map(|t| t.1),
                    cost_usd: cost,
                    hedge_refused,
                    ..RequestRecord::new("id".into(), ttft.is_some())
                }))
            },
        );
    prop_oneof![1 => any::<bool>().prop_map(Step::Reload), 8 => record]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    /// Counting through the writer's cache of series handles renders what looking every
    /// series up in its family does (a new cache a record), across reloads of the names.
    #[test]
    fn cached_series_handles_count_as_family_lookups_do(steps in prop::collection::vec(step(), 1..40)) {
        let (cached, looked_up) = (Metrics::new(reloadable_names(false)), Metrics::new(reloadable_names(false)));
        let mut cache = SeriesCache::default();
        for step in &steps {
            match step {
                Step::Record(record) => {
                    cached.observe(record, &mut cache);
                    looked_up.observe(record, &mut SeriesCache::default());
                }
                Step::Reload(reloaded) => {
                    cached.set_names(reloadable_names(*reloaded));
                    looked_up.set_names(reloadable_names(*reloaded));
                }
            }
        }
        // A family's series come out in its hash map's order, seeded per family: compare
        // the lines, not their order.
        let lines = |text: String| {
            let mut lines: Vec<String> = text.lines().map(str::to_owned).collect();
            lines.sort();
            lines
        };
        prop_assert_eq!(lines(cached.render()), lines(looked_up.render()));
        // One handle set per label: three routes and `other` and `-`, (2 providers and
        // `other`) x (2 models and `other`) deployments.
        prop_assert!(cache.held() <= 5 + 9, "{} series cached", cache.held());
    }
}

#[test]
fn an_open_breaker_among_unconfigured_models_shows_in_their_other_series() {
    let metrics = Metrics::new(LabelNames::new(["r"], [("p", "m")]));
    metrics.set_breakers([("p", "m", 0), ("p", "a", 0), ("p", "b", 2), ("p", "c", 1)]);
    let text = metrics.render();
    assert!(
        text.contains("switchyard_breaker_state{provider=\"p\",model=\"other\"} 2\n"),
        "{text}"
    );
    assert!(text.contains("switchyard_breaker_state{provider=\"p\",model=\"m\"} 0\n"));
}
