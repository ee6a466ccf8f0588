//! The scorecard: how each route and each provider/model has done over 5 m, 1 h and 24 h,
//! computed from the stored request log, so a restart loses none of it.
//!
//! Rates (success, fallback, degraded, error) and availability are over the requests that were
//! not rejected: a 401 or a 429 says nothing about the providers. Availability is
//! `(success + fallback) / not rejected`. Percentiles are nearest-rank over every row in the
//! window, computed in Rust: exact, and cheap at a gateway's scale (a day of rows per call).
//!
//! A provider/model's card counts each request that reached it upstream once, by the
//! request's outcome (so a primary that keeps failing shows a high fallback rate); its latency
//! is that of its own attempts, its TTFT and cost those of the requests it served.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::config::AlertsConfig;
use crate::store::request_log::LogRow;

/// The windows, their names and lengths.
pub const WINDOWS: [(&str, i64); 3] = [("5m", 300_000), ("1h", 3_600_000), ("24h", 86_400_000)];
/// The requests-over-time series: one bucket a minute, for the last hour.
pub const BUCKET_MS: i64 = 60_000;
const BUCKETS: i64 = 60;

/// The whole scorecard, as `GET /v1/scorecard` answers it.
#[derive(Clone, Debug, Serialize)]
pub struct Scorecard {
    pub generated_at_ms: i64,
    pub thresholds: AlertsView,
    /// Every request, whatever its route (401s before a route was known included).
    pub overall: Windows,
    pub routes: Vec<RouteCard>,
    pub deployments: Vec<DeploymentCard>,
    /// Requests per minute by outcome over the last hour, oldest first.
    pub series: Vec<SeriesPoint>,
    /// The alert flags raised in any window, for a quick look.
    pub alerts: Vec<Alert>,
}

/// The thresholds from `[alerts]`.
#[derive(Clone, Debug, Serialize)]
pub struct AlertsView {
    pub availability_target: f64,
    pub fallback_rate_max: f64,
}

/// One route's stats in each window.
#[derive(Clone, Debug, Serialize)]
pub struct RouteCard {
    pub route: String,
    pub windows: Windows,
}

/// One provider/model's stats in each window, and its breaker.
#[derive(Clone, Debug, Serialize)]
pub struct DeploymentCard {
    pub provider: String,
    pub model: String,
    /// `closed`, `half_open` or `open` (the worst of its keys'); `None` before first use.
    pub breaker: Option<&'static str>,
    /// The provider's keys in use, by id and version, so a rotation shows next to its effect.
    pub keys: Vec<KeyVersion>,
    pub windows: Windows,
}

/// A provider key in use: its id (never the secret) and version.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct KeyVersion {
    pub id: String,
    pub version: i64,
}

/// The three windows.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Windows {
    #[serde(rename = "5m")]
    pub five_minutes: Stats,
    #[serde(rename = "1h")]
    pub one_hour: Stats,
    #[serde(rename = "24h")]
    pub one_day: Stats,
}

/// One group's figures over one window.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Stats {
    pub requests: u64,
    pub success: u64,
    pub fallback: u64,
    pub degraded: u64,
    pub error: u64,
    pub rejected: u64,
    pub success_rate: f64,
    pub fallback_rate: f64,
    pub degraded_rate: f64,
    pub error_rate: f64,
    /// `None` when every request was rejected (or there were none).
    pub availability: Option<f64>,
    pub latency_ms: Percentiles,
    pub ttft_ms: Percentiles,
    /// Upstream attempts (deployments only).
    pub attempts: u64,
    pub tokens_in: u64,
    pub tokens_out: u64,
    pub cost_usd: f64,
    pub alerts: AlertFlags,
}

/// Nearest-rank percentiles; `None` with no samples.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Percentiles {
    pub p50: Option<f64>,
    pub p95: Option<f64>,
    pub p99: Option<f64>,
}

/// The alert flags of one group in one window.
#[derive(Clone, Debug, Default, Serialize)]
pub struct AlertFlags {
    pub availability_below_target: bool,
    pub fallback_rate_above_max: bool,
}

/// A raised flag, named.
#[derive(Clone, Debug, Serialize)]
pub struct Alert {
    /// `overall`, `route` or `deployment`.
    pub scope: &'static str,
    pub name: String,
    pub window: &'static str,
    /// `availability_below_target` or `fallback_rate_above_max`.
    pub alert: &'static str,
    pub value: f64,
    pub threshold: f64,
}

/// One minute of the series.
#[derive(Clone, Debug, Default, Serialize)]
pub struct SeriesPoint {
    pub t_ms: i64,
    pub success: u64,
    pub fallback: u64,
    pub degraded: u64,
    pub error: u64,
    pub rejected: u64,
}

/// Samples gathered for one group in one window.
#[derive(Default)]
struct Tally {
    stats: Stats,
    latencies: Vec<f64>,
    ttfts: Vec<f64>,
}

impl Tally {
    fn count(&mut self, outcome: &str) {
        let s = &mut self.stats;
        s.requests += 1;
        match outcome {
            "success" => s.success += 1,
            "fallback" => s.fallback += 1,
            "degraded" => s.degraded += 1,
            "rejected" => s.rejected += 1,
            _ => s.error += 1,
        }
    }

    fn served(&mut self, row: &LogRow) {
        let s = &mut self.stats;
        s.tokens_in += row.tokens_in.unwrap_or(0);
        s.tokens_out += row.tokens_out.unwrap_or(0);
        s.cost_usd += row.cost_usd.unwrap_or(0.0);
        self.ttfts.extend(row.ttft_ms);
    }

    fn finish(mut self, alerts: &AlertsConfig) -> Stats {
        let s = &mut self.stats;
        let judged = s.requests - s.rejected;
        if judged > 0 {
            let rate = |n: u64| n as f64 / judged as f64;
            s.success_rate = rate(s.success);
            s.fallback_rate = rate(s.fallback);
            s.degraded_rate = rate(s.degraded);
            s.error_rate = rate(s.error);
            let availability = rate(s.success + s.fallback);
            s.availability = Some(availability);
            s.alerts = AlertFlags {
                availability_below_target: availability < alerts.availability_target,
                fallback_rate_above_max: s.fallback_rate > alerts.fallback_rate_max,
            };
        }
        s.latency_ms = percentiles(&mut self.latencies);
        s.ttft_ms = percentiles(&mut self.ttfts);
        self.stats
    }
}

/// Nearest-rank: the smallest sample with at least q of them at or below it.
fn percentiles(samples: &mut [f64]) -> Percentiles {
    if samples.is_empty() {
        return Percentiles::default();
    }
    samples.sort_by(f64::total_cmp);
    let at = |q: f64| {
        let rank = (q * samples.len() as f64).ceil() as usize;
        samples[rank.clamp(1, samples.len()) - 1]
    };
    Percentiles {
        p50: Some(at(0.50)),
        p95: Some(at(0.95)),
        p99: Some(at(0.99)),
    }
}

/// Three tallies, one per window.
#[derive(Default)]
struct WindowTallies([Tally; 3]);

impl WindowTallies {
    fn finish(self, alerts: &AlertsConfig) -> Windows {
        let [five, hour, day] = self.0;
        Windows {
            five_minutes: five.finish(alerts),
            one_hour: hour.finish(alerts),
            one_day: day.finish(alerts),
        }
    }
}

/// What the scorecard shows besides the log: breakers and keys as they are now.
#[derive(Clone, Debug, Default)]
pub struct LiveState {
    /// `(provider, model, gauge)`, as [`crate::router::Health::states`] gives them.
    pub breakers: Vec<(String, String, i64)>,
    /// `(provider, key id, version)` of each active provider key.
    pub keys: Vec<(String, String, i64)>,
}

/// Computes the scorecard from the log's last 24 h of rows and the live breakers and keys.
pub fn compute(rows: &[LogRow], now_ms: i64, live: &LiveState, alerts: &AlertsConfig) -> Scorecard {
    let breakers = &live.breakers;
    let mut overall = WindowTallies::default();
    let mut routes: BTreeMap<String, WindowTallies> = BTreeMap::new();
    let mut deployments: BTreeMap<(String, String), WindowTallies> = BTreeMap::new();
    let series_start = (now_ms / BUCKET_MS - (BUCKETS - 1)) * BUCKET_MS;
    let mut series: Vec<SeriesPoint> = (0..BUCKETS)
        .map(|i| SeriesPoint {
            t_ms: series_start + i * BUCKET_MS,
            ..SeriesPoint::default()
        })
        .collect();
    for row in rows {
        if row.time_ms >= series_start {
            let bucket = ((row.time_ms - series_start) / BUCKET_MS) as usize;
            if let Some(point) = series.get_mut(bucket) {
                match row.outcome.as_str() {
                    "success" => point.success += 1,
                    "fallback" => point.fallback += 1,
                    "degraded" => point.degraded += 1,
                    "rejected" => point.rejected += 1,
                    _ => point.error += 1,
                }
            }
        }
        // The deployments this request reached, each once.
        let mut reached: Vec<(&str, &str)> = Vec::new();
        for attempt in row.attempts.iter().filter(|a| a.reached_upstream) {
            let key = (attempt.provider.as_str(), attempt.model.as_str());
            if !reached.contains(&key) {
                reached.push(key);
            }
        }
        for (w, (_, length)) in WINDOWS.iter().enumerate() {
            if row.time_ms < now_ms - length {
                continue;
            }
            for tally in [
                Some(&mut overall.0[w]),
                row.route
                    .as_ref()
                    .map(|r| &mut routes.entry(r.clone()).or_default().0[w]),
            ]
            .into_iter()
            .flatten()
            {
                tally.count(&row.outcome);
                tally.latencies.push(row.latency_ms);
                tally.served(row);
            }
            for &(provider, model) in &reached {
                let key = (provider.to_owned(), model.to_owned());
                let tally = &mut deployments.entry(key).or_default().0[w];
                tally.count(&row.outcome);
                for attempt in row
                    .attempts
                    .iter()
                    .filter(|a| a.reached_upstream && a.provider == provider && a.model == model)
                {
                    tally.stats.attempts += 1;
                    tally.latencies.push(attempt.latency_ms);
                }
                if row.provider.as_deref() == Some(provider) && row.model.as_deref() == Some(model)
                {
                    tally.served(row);
                }
            }
        }
    }
    for (provider, model, _) in breakers {
        deployments
            .entry((provider.clone(), model.clone()))
            .or_default();
    }
    let overall = overall.finish(alerts);
    let routes: Vec<RouteCard> = routes
        .into_iter()
        .map(|(route, tallies)| RouteCard {
            route,
            windows: tallies.finish(alerts),
        })
        .collect();
    let deployments: Vec<DeploymentCard> = deployments
        .into_iter()
        .map(|((provider, model), tallies)| DeploymentCard {
            breaker: breakers
                .iter()
                .find(|(p, m, _)| *p == provider && *m == model)
                .map(|(_, _, gauge)| breaker_name(*gauge)),
            keys: live
                .keys
                .iter()
                .filter(|(p, _, _)| *p == provider)
                .map(|(_, id, version)| KeyVersion {
                    id: id.clone(),
                    version: *version,
                })
                .collect(),
            provider,
            model,
            windows: tallies.finish(alerts),
        })
        .collect();
    let mut raised = Vec::new();
    collect_alerts(&mut raised, "overall", "all", &overall, alerts);
    for card in &routes {
        collect_alerts(&mut raised, "route", &card.route, &card.windows, alerts);
    }
    for card in &deployments {
        let name = format!("{}/{}", card.provider, card.model);
        collect_alerts(&mut raised, "deployment", &name, &card.windows, alerts);
    }
    Scorecard {
        generated_at_ms: now_ms,
        thresholds: AlertsView {
            availability_target: alerts.availability_target,
            fallback_rate_max: alerts.fallback_rate_max,
        },
        overall,
        routes,
        deployments,
        series,
        alerts: raised,
    }
}

fn breaker_name(gauge: i64) -> &'static str {
    match gauge {
        0 => "closed",
        1 => "half_open",
        _ => "open",
    }
}

fn collect_alerts(
    raised: &mut Vec<Alert>,
    scope: &'static str,
    name: &str,
    windows: &Windows,
    alerts: &AlertsConfig,
) {
    let each = [
        ("5m", &windows.five_minutes),
        ("1h", &windows.one_hour),
        ("24h", &windows.one_day),
    ];
    for (window, stats) in each {
        if stats.alerts.availability_below_target {
            raised.push(Alert {
                scope,
                name: name.to_owned(),
                window,
                alert: "availability_below_target",
                value: stats.availability.unwrap_or(0.0),
                threshold: alerts.availability_target,
            });
        }
        if stats.alerts.fallback_rate_above_max {
            raised.push(Alert {
                scope,
                name: name.to_owned(),
                window,
                alert: "fallback_rate_above_max",
                value: stats.fallback_rate,
                threshold: alerts.fallback_rate_max,
            });
        }
    }
}

#[cfg(test)]
mod tests;
