use std::sync::Arc;

use super::*;
use crate::store::request_log::{LogAttempt, LogRow};
use crate::store::rollup::Rollups;

/// The rows as the store rolls them up.
fn rolled(rows: &[LogRow]) -> impl Iterator<Item = Rollup> {
    let mut rollups = Rollups::default();
    for row in rows {
        rollups.add(row);
    }
    rollups.into_rollups()
}

const ALERTS: AlertsConfig = AlertsConfig {
    availability_target: 0.99,
    fallback_rate_max: 0.2,
};
const NOW: i64 = 100 * 86_400_000;

fn attempt(provider: &str, failure: Option<&str>, latency_ms: f64) -> LogAttempt {
    LogAttempt {
        step: 0,
        provider: provider.into(),
        model: "m".into(),
        failure: failure.map(str::to_owned),
        status: Some(if failure.is_some() { 500 } else { 200 }),
        latency_ms,
        reached_upstream: true,
        hedge: false,
    }
}

fn row(age_ms: i64, outcome: &str, latency_ms: f64) -> LogRow {
    let (attempts, served) = match outcome {
        "success" => (vec![attempt("a", None, latency_ms)], Some("a")),
        "fallback" => (
            vec![
                attempt("a", Some("server_error"), 1.0),
                attempt("b", None, latency_ms),
            ],
            Some("b"),
        ),
        "rejected" => (vec![], None),
        _ => (
            vec![
                attempt("a", Some("server_error"), 1.0),
                attempt("b", Some("server_error"), 1.0),
            ],
            None,
        ),
    };
    LogRow {
        id: format!("{age_ms}-{outcome}"),
        time_ms: NOW - age_ms,
        key_id: None,
        user: None,
        route: Some("r".into()),
        outcome: outcome.into(),
        step: None,
        provider: served.map(Arc::from),
        model: served.map(|_| Arc::from("m")),
        attempts,
        status: 200,
        latency_ms,
        ttft_ms: Some(latency_ms / 2.0),
        overhead_ms: 0.1,
        tokens_in: Some(10),
        tokens_out: Some(5),
        cost_usd: served.map(|_| 0.001),
        stream: false,
        partial: false,
        error: None,
        cache: None,
        trace_id: None,
    }
}

#[test]
fn rates_exclude_rejections_and_windows_split_by_age() {
    let mut rows = Vec::new();
    for i in 0..70 {
        rows.push(row(1_000, "success", i as f64));
    }
    for _ in 0..20 {
        rows.push(row(1_000, "fallback", 50.0));
    }
    for _ in 0..10 {
        rows.push(row(1_000, "degraded", 50.0));
    }
    for _ in 0..5 {
        rows.push(row(1_000, "rejected", 0.1));
    }
    // An hour-old error: in the 24 h window only.
    rows.push(row(2 * 3_600_000, "error", 9.0));
    let card = compute(rolled(&rows), NOW, &LiveState::default(), &ALERTS);
    let five = &card.routes[0].windows.five_minutes;
    assert_eq!((five.requests, five.rejected), (105, 5));
    assert_eq!(five.success_rate, 0.7);
    assert_eq!(five.fallback_rate, 0.2);
    assert_eq!(five.degraded_rate, 0.1);
    assert_eq!(five.availability, Some(0.9));
    assert!(five.alerts.availability_below_target);
    assert!(!five.alerts.fallback_rate_above_max, "0.2 is not over 0.2");
    let day = &card.routes[0].windows.one_day;
    assert_eq!(day.error, 1);
    assert_eq!(card.overall.one_day.requests, 106);
    assert_eq!(card.series.iter().map(|p| p.success).sum::<u64>(), 70);
    assert_eq!(card.series.len(), 60);
}

#[test]
fn deployments_count_the_requests_that_reached_them() {
    let rows = vec![row(1_000, "success", 10.0), row(1_000, "fallback", 30.0)];
    let live = LiveState {
        breakers: vec![("a".to_owned(), "m".to_owned(), 2)],
        keys: vec![("a".to_owned(), "main".to_owned(), 3)],
    };
    let card = compute(rolled(&rows), NOW, &live, &ALERTS);
    let a = &card.deployments[0];
    assert_eq!((a.provider.as_str(), a.breaker), ("a", Some("open")));
    assert_eq!(
        a.keys,
        vec![KeyVersion {
            id: "main".into(),
            version: 3
        }]
    );
    assert_eq!(a.windows.five_minutes.requests, 2);
    assert_eq!(a.windows.five_minutes.fallback_rate, 0.5);
    assert_eq!(a.windows.five_minutes.attempts, 2);
    let b = &card.deployments[1];
    assert_eq!(b.windows.five_minutes.requests, 1);
    assert_eq!(b.windows.five_minutes.latency_ms.p50, Some(30.0));
    assert!((b.windows.five_minutes.cost_usd - 0.001).abs() < 1e-12);
    // The fallback is a's failure; b, which rescued the request, served it.
    assert_eq!(b.windows.five_minutes.success, 1);
    assert_eq!(b.windows.five_minutes.fallback_rate, 0.0);
    let flagged: Vec<&Alert> = card
        .alerts
        .iter()
        .filter(|a| a.scope == "deployment" && a.alert == "fallback_rate_above_max")
        .collect();
    assert_eq!(flagged.len(), 1, "{flagged:?}");
    assert_eq!(flagged[0].name, "a/m");
    // One alert for the condition, naming each window in which it holds.
    let windows: Vec<&str> = flagged[0].windows.iter().map(|w| w.window).collect();
    assert_eq!(windows, ["5m", "1h", "24h"]);
}

#[test]
fn client_errors_do_not_lower_availability() {
    let mut rows = vec![row(1_000, "success", 10.0)];
    for (i, status) in [400, 401, 403, 404, 413, 499].into_iter().enumerate() {
        for j in 0..50 {
            let mut refused = row(1_000, "error", 0.1);
            refused.id = format!("client-{i}-{j}");
            refused.status = status;
            refused.attempts.clear();
            refused.provider = None;
            refused.model = None;
            rows.push(refused);
        }
    }
    let card = compute(rolled(&rows), NOW, &LiveState::default(), &ALERTS);
    let five = &card.overall.five_minutes;
    assert_eq!(five.client_error, 300);
    assert_eq!(five.error, 0);
    assert_eq!(five.availability, Some(1.0));
    assert!(
        !card
            .alerts
            .iter()
            .any(|a| a.alert == "availability_below_target")
    );
    // A 5xx is the gateway's or a provider's, and still counts.
    let mut failed = row(1_000, "error", 1.0);
    failed.status = 503;
    rows.push(failed);
    let card = compute(rolled(&rows), NOW, &LiveState::default(), &ALERTS);
    assert_eq!(card.overall.five_minutes.availability, Some(0.5));
}

#[test]
fn percentiles_are_nearest_rank_within_one_percent() {
    // Read from a sketch, they are no longer exact: within 1 % of the nearest-rank sample.
    let mut sketch = Sketch::default();
    for i in 1..=100 {
        sketch.add(f64::from(i));
    }
    let p = percentiles(&sketch);
    for (read, exact) in [(p.p50, 50.0), (p.p95, 95.0), (p.p99, 99.0)] {
        let read = read.unwrap();
        assert!((read - exact).abs() <= exact * 0.01, "{read} vs {exact}");
    }
    let mut one = Sketch::default();
    one.add(7.0);
    let p = percentiles(&one);
    assert_eq!((p.p50, p.p99), (Some(7.0), Some(7.0)));
}
