//! The scorecard: how each route and each provider/model has done over 5 m, 1 h and 24 h,
//! computed from the store's per-minute rollups of the request log, so a restart loses none
//! of it and a call reads at most 1,440 rows a series, however busy the day was.
//!
//! Rates (success, fallback, degraded, error) and availability are over the requests the
//! gateway and its providers answered for: not those rejected by auth or the gateway's own
//! limits (401, 429), nor client errors (another 4xx: a bad body, an unknown model, a body
//! too large), which are counted apart as `client_error`. Availability is
//! `(success + fallback) / (requests - rejected - client_error)`. Windows are whole minutes: the 5 m window is the
//! current minute and the four before it. Percentiles are nearest-rank over the window's
//! merged latency sketches: within 1 % of the exact sample (see [`Sketch`]).
//!
//! A provider/model's card counts each request that reached it upstream once, by what it did:
//! `success` when it served (even as a fallback step), `fallback` when it failed and a later
//! step served. So a primary that keeps failing shows a high fallback rate, and the healthy
//! step that rescued it does not. Its latency is that of its own attempts, its TTFT and cost
//! those of the requests it served.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::config::AlertsConfig;
use crate::store::rollup::{MINUTE_MS, Rollup, RollupData, Series, Sketch};
use crate::telemetry::metrics::SpendCard;

/// The windows, their names and lengths.
pub const WINDOWS: [(&str, i64); 3] = [("5m", 300_000), ("1h", 3_600_000), ("24h", 86_400_000)];
/// The requests-over-time series: one bucket a minute, for the last hour.
pub const BUCKET_MS: i64 = MINUTE_MS;
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
    /// The same, for each route.
    pub route_series: BTreeMap<String, Vec<SeriesPoint>>,
    /// The alerts raised: one per condition, with the windows in which it holds.
    pub alerts: Vec<Alert>,
    /// Dollars settled against spend budgets by route, role and key, since this instance
    /// started (not from the stored log: each instance counts its own).
    pub budget_spend: SpendCard,
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
    /// Failed through the client's own fault (a 4xx other than 429); not in the rates.
    pub client_error: u64,
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

/// A raised condition of one group, with every window in which it holds.
#[derive(Clone, Debug, Serialize)]
pub struct Alert {
    /// `overall`, `route` or `deployment`.
    pub scope: &'static str,
    pub name: String,
    /// `availability_below_target` or `fallback_rate_above_max`.
    pub alert: &'static str,
    pub threshold: f64,
    /// The windows in which it holds, shortest first, each with its value.
    pub windows: Vec<AlertWindow>,
}

/// The value that raised an alert in one window.
#[derive(Clone, Debug, Serialize)]
pub struct AlertWindow {
    pub window: &'static str,
    pub value: f64,
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
    pub client_error: u64,
    /// Of the rejected, refused by the gateway's own rate limits.
    pub rate_limited: u64,
}

impl SeriesPoint {
    fn add(&mut self, counts: &crate::store::rollup::Counts) {
        self.success += counts.success;
        self.fallback += counts.fallback;
        self.degraded += counts.degraded;
        self.rejected += counts.rejected;
        self.error += counts.error;
        self.client_error += counts.client_error;
        self.rate_limited += counts.rate_limited;
    }
}

/// One group's figures in one window, as merged so far.
#[derive(Default)]
struct Tally(RollupData);

impl Tally {
    fn finish(self, alerts: &AlertsConfig) -> Stats {
        let RollupData {
            counts: c,
            latency,
            ttft,
        } = self.0;
        let mut s = Stats {
            requests: c.requests,
            success: c.success,
            fallback: c.fallback,
            degraded: c.degraded,
            error: c.error,
            rejected: c.rejected,
            client_error: c.client_error,
            attempts: c.attempts,
            tokens_in: c.tokens_in,
            tokens_out: c.tokens_out,
            cost_usd: c.cost_usd,
            latency_ms: percentiles(&latency),
            ttft_ms: percentiles(&ttft),
            ..Stats::default()
        };
        let judged = s.requests - s.rejected - s.client_error;
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
        s
    }
}

/// Nearest-rank percentiles, read from a sketch.
fn percentiles(sketch: &Sketch) -> Percentiles {
    Percentiles {
        p50: sketch.quantile(0.50),
        p95: sketch.quantile(0.95),
        p99: sketch.quantile(0.99),
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
    /// `(provider, model, gauge)`, as the router's `Health::states` gives them.
    pub breakers: Vec<(String, String, i64)>,
    /// `(provider, key id, version)` of each active provider key.
    pub keys: Vec<(String, String, i64)>,
}

/// The minute starts a scorecard reads are after this: its longest window.
pub fn reads_after(now_ms: i64) -> i64 {
    now_ms - WINDOWS[2].1
}

/// A scorecard folded together one rollup at a time, so its memory is one tally per group
/// and window, however many rows the day had.
pub struct Builder {
    now_ms: i64,
    overall: WindowTallies,
    routes: BTreeMap<String, WindowTallies>,
    deployments: BTreeMap<(String, String), WindowTallies>,
    series_start: i64,
    series: Vec<SeriesPoint>,
    route_series: BTreeMap<String, Vec<SeriesPoint>>,
}

impl Builder {
    /// An empty scorecard as of `now_ms`.
    pub fn new(now_ms: i64) -> Builder {
        let series_start = (now_ms / BUCKET_MS - (BUCKETS - 1)) * BUCKET_MS;
        Builder {
            now_ms,
            overall: WindowTallies::default(),
            routes: BTreeMap::new(),
            deployments: BTreeMap::new(),
            series_start,
            series: empty_series(series_start),
            route_series: BTreeMap::new(),
        }
    }

    /// Folds in one series' minute.
    pub fn add(&mut self, rollup: Rollup) {
        let Rollup {
            minute_ms,
            series,
            data,
        } = rollup;
        if minute_ms >= self.series_start {
            let bucket = ((minute_ms - self.series_start) / BUCKET_MS) as usize;
            let start = self.series_start;
            let points = match &series {
                Series::Overall => Some(&mut self.series),
                Series::Route(route) => Some(
                    self.route_series
                        .entry(route.clone())
                        .or_insert_with(|| empty_series(start)),
                ),
                Series::Deployment { .. } => None,
            };
            if let Some(point) = points.and_then(|p| p.get_mut(bucket)) {
                point.add(&data.counts);
            }
        }
        let tallies = match series {
            Series::Overall => &mut self.overall,
            Series::Route(route) => self.routes.entry(route).or_default(),
            Series::Deployment { provider, model } => {
                self.deployments.entry((provider, model)).or_default()
            }
        };
        for (w, (_, length)) in WINDOWS.iter().enumerate() {
            // A minute belongs to a window when it starts inside it: exactly as many
            // minutes as the window is long, the current one included.
            if minute_ms > self.now_ms - length && minute_ms <= self.now_ms {
                tallies.0[w].0.merge(&data);
            }
        }
    }

    /// The scorecard, with the live breakers and keys.
    pub fn finish(self, live: &LiveState, alerts: &AlertsConfig) -> Scorecard {
        let Builder {
            now_ms,
            overall,
            routes,
            mut deployments,
            series,
            route_series,
            ..
        } = self;
        let breakers = &live.breakers;
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
            route_series,
            alerts: raised,
            budget_spend: SpendCard::default(),
        }
    }
}

/// Computes the scorecard from rollups and the live breakers and keys.
pub fn compute(
    rollups: impl IntoIterator<Item = Rollup>,
    now_ms: i64,
    live: &LiveState,
    alerts: &AlertsConfig,
) -> Scorecard {
    let mut builder = Builder::new(now_ms);
    for rollup in rollups {
        builder.add(rollup);
    }
    builder.finish(live, alerts)
}

/// An hour of empty minutes from `start`.
fn empty_series(start: i64) -> Vec<SeriesPoint> {
    (0..BUCKETS)
        .map(|i| SeriesPoint {
            t_ms: start + i * BUCKET_MS,
            ..SeriesPoint::default()
        })
        .collect()
}

fn breaker_name(gauge: i64) -> &'static str {
    match gauge {
        0 => "closed",
        1 => "half_open",
        _ => "open",
    }
}

/// Whether a condition holds in a window's stats, and the value that says so.
type Holds = fn(&Stats) -> Option<f64>;

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
    let conditions: [(&'static str, f64, Holds); 2] = [
        (
            "availability_below_target",
            alerts.availability_target,
            |s| {
                s.alerts
                    .availability_below_target
                    .then(|| s.availability.unwrap_or(0.0))
            },
        ),
        ("fallback_rate_above_max", alerts.fallback_rate_max, |s| {
            s.alerts.fallback_rate_above_max.then_some(s.fallback_rate)
        }),
    ];
    for (alert, threshold, holds) in conditions {
        let held: Vec<AlertWindow> = each
            .iter()
            .filter_map(|(window, stats)| holds(stats).map(|value| AlertWindow { window, value }))
            .collect();
        if !held.is_empty() {
            raised.push(Alert {
                scope,
                name: name.to_owned(),
                alert,
                threshold,
                windows: held,
            });
        }
    }
}

#[cfg(test)]
mod tests;
