//! Per-minute rollups of the request log: what the scorecard reads instead of raw rows.
//!
//! The writer folds each batch into one [`Rollup`] per series (overall, each route, each
//! provider/model) and minute, in the same transaction as the rows, so a scorecard reads at
//! most one row per series and minute. Latencies go into a [`Sketch`]: counts in fixed
//! log-scale buckets that merge by adding, so percentiles over any span of minutes come out
//! of the merged buckets.

use std::cmp::Ordering;

use foldhash::HashMap;

use super::request_log::{LogAttempt, LogRow};

/// One minute, in milliseconds: a rollup's span.
pub const MINUTE_MS: i64 = 60_000;

/// Whose figures a rollup holds.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Series {
    /// Every request.
    Overall,
    /// The requests of one route.
    Route(String),
    /// The requests that reached one provider/model upstream.
    Deployment { provider: String, model: String },
}

/// Counts of one series over one minute (or, merged, over a window).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Counts {
    pub requests: u64,
    pub success: u64,
    pub fallback: u64,
    pub degraded: u64,
    pub error: u64,
    pub rejected: u64,
    /// Requests that failed through the client's own fault (a 4xx other than 429: a bad
    /// body, an unknown model, a refused key, a body too large, a client that went away).
    pub client_error: u64,
    /// Of the rejected, those the gateway's own rate limits refused (429).
    pub rate_limited: u64,
    /// Upstream attempts (deployments only).
    pub attempts: u64,
    pub tokens_in: u64,
    pub tokens_out: u64,
    pub cost_usd: f64,
}

impl Counts {
    fn outcome(&mut self, outcome: &str, status: u16) {
        self.requests += 1;
        match outcome {
            "success" => self.success += 1,
            "fallback" => self.fallback += 1,
            "degraded" => self.degraded += 1,
            "rejected" => {
                self.rejected += 1;
                if status == 429 {
                    self.rate_limited += 1;
                }
            }
            _ if is_client_error(status) => self.client_error += 1,
            _ => self.error += 1,
        }
    }

    /// Adds another span's counts.
    pub fn merge(&mut self, other: &Counts) {
        self.requests += other.requests;
        self.success += other.success;
        self.fallback += other.fallback;
        self.degraded += other.degraded;
        self.error += other.error;
        self.rejected += other.rejected;
        self.client_error += other.client_error;
        self.rate_limited += other.rate_limited;
        self.attempts += other.attempts;
        self.tokens_in += other.tokens_in;
        self.tokens_out += other.tokens_out;
        self.cost_usd += other.cost_usd;
    }
}

/// Whether a failed request's status puts the fault on the client: any 4xx but a 429, which
/// an upstream's rate limit can cause.
fn is_client_error(status: u16) -> bool {
    (400..500).contains(&status) && status != 429
}

/// Smallest latency told apart, in ms; anything at or under it shares bucket 0.
const SKETCH_MIN_MS: f64 = 0.01;
/// Each bucket is 2 % wider than the one before: a value read back from its bucket's
/// geometric middle is within 1 % of every sample in it.
const SKETCH_GROWTH: f64 = 1.02;
/// 0.01 ms × 1.02^1200 ≈ 2 × 10^8 ms: two days, past any request's deadline.
const SKETCH_BUCKETS: u16 = 1200;

/// Latency samples in fixed log-scale buckets, with the exact minimum and maximum.
///
/// A percentile read from it is within 1 % (relative) of the exact nearest-rank sample,
/// and exact when every sample is the same value.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Sketch {
    /// (bucket, count), in bucket order, each bucket once. A minute holds a few dozen: a
    /// sorted vector is one allocation where a B-tree map was one per node, and the writer
    /// builds and merges these for every batch.
    buckets: Vec<(u16, u64)>,
    count: u64,
    min: f64,
    max: f64,
}

impl Sketch {
    /// Counts one sample, in milliseconds.
    pub fn add(&mut self, ms: f64) {
        let ms = if ms.is_finite() { ms.max(0.0) } else { 0.0 };
        self.count_in(bucket(ms), 1);
        self.min = if self.count == 0 {
            ms
        } else {
            self.min.min(ms)
        };
        self.max = if self.count == 0 {
            ms
        } else {
            self.max.max(ms)
        };
        self.count += 1;
    }

    /// Adds another sketch's samples.
    pub fn merge(&mut self, other: &Sketch) {
        if other.count == 0 {
            return;
        }
        self.buckets = merge_buckets(&self.buckets, &other.buckets);
        self.min = if self.count == 0 {
            other.min
        } else {
            self.min.min(other.min)
        };
        self.max = if self.count == 0 {
            other.max
        } else {
            self.max.max(other.max)
        };
        self.count += other.count;
    }

    /// How many samples it holds.
    pub fn count(&self) -> u64 {
        self.count
    }

    /// The nearest-rank `q` quantile (0..=1), read from its bucket; `None` when empty.
    pub fn quantile(&self, q: f64) -> Option<f64> {
        if self.count == 0 {
            return None;
        }
        let rank = ((q * self.count as f64).ceil() as u64).clamp(1, self.count);
        let mut seen = 0;
        for (bucket, count) in &self.buckets {
            seen += count;
            if seen >= rank {
                return Some(middle(*bucket).clamp(self.min, self.max));
            }
        }
        Some(self.max)
    }

    /// The stored form: min and max, then (bucket, count) pairs, little-endian.
    pub fn encode(&self) -> Vec<u8> {
        let mut bytes = Vec::with_capacity(16 + self.buckets.len() * 10);
        bytes.extend_from_slice(&self.min.to_le_bytes());
        bytes.extend_from_slice(&self.max.to_le_bytes());
        for (bucket, count) in &self.buckets {
            bytes.extend_from_slice(&bucket.to_le_bytes());
            bytes.extend_from_slice(&count.to_le_bytes());
        }
        bytes
    }

    /// Reads [`Sketch::encode`]'s form; anything malformed reads as far as it is whole.
    pub fn decode(bytes: &[u8]) -> Sketch {
        let mut sketch = Sketch::default();
        let (Some(min), Some(max)) = (f64_at(bytes, 0), f64_at(bytes, 8)) else {
            return sketch;
        };
        sketch.buckets.reserve_exact((bytes.len() - 16) / 10);
        for pair in bytes[16..].chunks_exact(10) {
            let bucket = u16::from_le_bytes([pair[0], pair[1]]);
            let mut count = [0u8; 8];
            count.copy_from_slice(&pair[2..]);
            let count = u64::from_le_bytes(count);
            // What `encode` wrote comes in order; anything else still reads right.
            if sketch
                .buckets
                .last()
                .is_some_and(|&(last, _)| last >= bucket)
            {
                sketch.count_in(bucket, count);
            } else {
                sketch.buckets.push((bucket, count));
            }
            sketch.count += count;
        }
        sketch.min = min;
        sketch.max = max;
        sketch
    }
}

impl Sketch {
    /// Adds `count` samples to `bucket`'s count, keeping the buckets in order; the caller
    /// counts them in `count`.
    fn count_in(&mut self, bucket: u16, count: u64) {
        match self.buckets.binary_search_by_key(&bucket, |&(b, _)| b) {
            Ok(at) => self.buckets[at].1 += count,
            Err(at) => self.buckets.insert(at, (bucket, count)),
        }
    }
}

/// Two bucket lists, each in order, as one in order, with shared buckets' counts added.
fn merge_buckets(a: &[(u16, u64)], b: &[(u16, u64)]) -> Vec<(u16, u64)> {
    let mut merged = Vec::with_capacity(a.len() + b.len());
    let (mut i, mut j) = (0, 0);
    while let (Some(&x), Some(&y)) = (a.get(i), b.get(j)) {
        match x.0.cmp(&y.0) {
            Ordering::Less => {
                merged.push(x);
                i += 1;
            }
            Ordering::Greater => {
                merged.push(y);
                j += 1;
            }
            Ordering::Equal => {
                merged.push((x.0, x.1 + y.1));
                i += 1;
                j += 1;
            }
        }
    }
    merged.extend_from_slice(&a[i..]);
    merged.extend_from_slice(&b[j..]);
    merged
}

fn f64_at(bytes: &[u8], at: usize) -> Option<f64> {
    let slice = bytes.get(at..at + 8)?;
    let mut array = [0u8; 8];
    array.copy_from_slice(slice);
    Some(f64::from_le_bytes(array))
}

fn bucket(ms: f64) -> u16 {
    if ms <= SKETCH_MIN_MS {
        return 0;
    }
    let index = ((ms / SKETCH_MIN_MS).ln() / SKETCH_GROWTH.ln()).floor() as i64 + 1;
    index.clamp(1, i64::from(SKETCH_BUCKETS)) as u16
}

/// The geometric middle of a bucket: bucket i ≥ 1 spans [MIN·g^(i-1), MIN·g^i).
fn middle(bucket: u16) -> f64 {
    if bucket == 0 {
        // Clamped to the minimum, which is in this bucket.
        return 0.0;
    }
    SKETCH_MIN_MS * SKETCH_GROWTH.powf(f64::from(bucket) - 0.5)
}

/// One series' figures over one minute.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RollupData {
    pub counts: Counts,
    /// Request latency (overall and routes) or attempt latency (deployments).
    pub latency: Sketch,
    pub ttft: Sketch,
}

impl RollupData {
    /// Adds another span's figures.
    pub fn merge(&mut self, other: &RollupData) {
        self.counts.merge(&other.counts);
        self.latency.merge(&other.latency);
        self.ttft.merge(&other.ttft);
    }

    /// Tokens, cost and TTFT of a request this series served.
    fn served(&mut self, row: &LogRow) {
        self.counts.tokens_in += row.tokens_in.unwrap_or(0);
        self.counts.tokens_out += row.tokens_out.unwrap_or(0);
        self.counts.cost_usd += row.cost_usd.unwrap_or(0.0);
        if let Some(ttft) = row.ttft_ms {
            self.ttft.add(ttft);
        }
    }
}

/// One series' rollup of one minute, as stored.
#[derive(Clone, Debug, PartialEq)]
pub struct Rollup {
    /// The minute's start, in epoch milliseconds.
    pub minute_ms: i64,
    pub series: Series,
    pub data: RollupData,
}

/// Rows folded into rollups, one per series and minute.
#[derive(Default)]
pub struct Rollups(HashMap<i64, MinuteRollups>);

/// One minute's rollups, by series. Keyed by name, not by [`Series`], so a row whose series
/// is already there is folded in without copying its names.
#[derive(Default)]
struct MinuteRollups {
    /// Every row of the minute: the minute exists only once a row is folded in.
    overall: RollupData,
    routes: HashMap<String, RollupData>,
    /// By provider, then model.
    deployments: HashMap<String, HashMap<String, RollupData>>,
}

/// Folds into `name`'s entry, adding it (and copying the name) only when absent.
fn fold_into<V: Default>(map: &mut HashMap<String, V>, name: &str, fold: impl FnOnce(&mut V)) {
    match map.get_mut(name) {
        Some(data) => fold(data),
        None => fold(map.entry(name.to_owned()).or_default()),
    }
}

impl Rollups {
    /// Folds one row into its minute's rollups.
    ///
    /// A provider/model counts each request that reached it upstream once, by what it did
    /// for that request: `success` when it served it (even as a fallback step), `fallback`
    /// when it failed and a later step served, else the request's outcome. So a fallback is
    /// the failing step's and the route's, never the rescuer's. Its latency is that of its
    /// own attempts, its TTFT, tokens and cost those of the requests it served.
    pub fn add(&mut self, row: &LogRow) {
        // The gateway's own health checks are no client's request: they stay out of the
        // scorecard's rates and availability (their tokens and cost are in the metrics).
        if row.outcome == "health_check" {
            return;
        }
        let minute_ms = row.time_ms.div_euclid(MINUTE_MS) * MINUTE_MS;
        let minute = self.0.entry(minute_ms).or_default();
        let whole_request = |data: &mut RollupData| {
            data.counts.outcome(&row.outcome, row.status);
            data.latency.add(row.latency_ms);
            data.served(row);
        };
        whole_request(&mut minute.overall);
        if let Some(route) = &row.route {
            fold_into(&mut minute.routes, route, whole_request);
        }
        let reached = |a: &&LogAttempt| a.reached_upstream;
        for (index, attempt) in row
            .attempts
            .iter()
            .enumerate()
            .filter(|(_, a)| a.reached_upstream)
        {
            let (provider, model) = (&*attempt.provider, &*attempt.model);
            let same = |a: &&LogAttempt| &*a.provider == provider && &*a.model == model;
            // Each deployment once a request, at its first attempt.
            if row.attempts[..index]
                .iter()
                .filter(reached)
                .any(|a| same(&a))
            {
                continue;
            }
            let served_here =
                row.provider.as_deref() == Some(provider) && row.model.as_deref() == Some(model);
            let answered = matches!(row.outcome.as_str(), "success" | "fallback");
            let outcome = match (answered, served_here) {
                (true, true) => "success",
                (true, false) => "fallback",
                (false, _) => row.outcome.as_str(),
            };
            let fold = |data: &mut RollupData| {
                data.counts.outcome(outcome, row.status);
                for attempt in row.attempts[index..].iter().filter(reached).filter(same) {
                    data.counts.attempts += 1;
                    data.latency.add(attempt.latency_ms);
                }
                if served_here {
                    data.served(row);
                }
            };
            fold_into(&mut minute.deployments, provider, |models| {
                fold_into(models, model, fold)
            });
        }
    }

    /// Whether nothing was folded in.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The rollups, in no particular order.
    pub fn into_rollups(self) -> impl Iterator<Item = Rollup> {
        self.0.into_iter().flat_map(|(minute_ms, minute)| {
            let rollup = move |series, data| Rollup {
                minute_ms,
                series,
                data,
            };
            let overall = rollup(Series::Overall, minute.overall);
            let routes = minute
                .routes
                .into_iter()
                .map(move |(route, data)| rollup(Series::Route(route), data));
            let deployments = minute
                .deployments
                .into_iter()
                .flat_map(move |(provider, models)| {
                    models.into_iter().map(move |(model, data)| {
                        let series = Series::Deployment {
                            provider: provider.clone(),
                            model,
                        };
                        rollup(series, data)
                    })
                });
            std::iter::once(overall).chain(routes).chain(deployments)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_are_within_one_percent_of_nearest_rank() {
        let mut sketch = Sketch::default();
        let samples: Vec<f64> = (1..=10_000).map(|i| f64::from(i) * 0.37).collect();
        for s in &samples {
            sketch.add(*s);
        }
        for q in [0.5, 0.95, 0.99] {
            let exact = samples[(q * samples.len() as f64).ceil() as usize - 1];
            let read = sketch.quantile(q).unwrap();
            assert!(
                (read - exact).abs() <= exact * 0.01,
                "q{q}: {read} vs {exact}"
            );
        }
        let mut one = Sketch::default();
        one.add(7.0);
        assert_eq!(one.quantile(0.5), Some(7.0));
    }

    #[test]
    fn sketches_merge_and_round_trip() {
        let (mut a, mut b) = (Sketch::default(), Sketch::default());
        for i in 0..100 {
            a.add(f64::from(i));
            b.add(f64::from(i) * 1000.0);
        }
        let mut merged = a.clone();
        merged.merge(&b);
        assert_eq!(merged.count(), 200);
        assert_eq!(Sketch::decode(&merged.encode()), merged);
        assert_eq!(merged.quantile(1.0), Some(99_000.0));
        assert_eq!(merged.quantile(0.0), Some(0.0));
    }

    proptest::proptest! {
        /// However samples are split between sketches, the merged buckets are those of one
        /// sketch that took them all: in order, each once.
        #[test]
        fn a_merge_is_the_sketch_of_all_samples(
            samples in proptest::collection::vec((0.0f64..1e7, proptest::bool::ANY), 0..200),
        ) {
            let (mut all, mut left, mut right) = <(Sketch, Sketch, Sketch)>::default();
            for &(ms, goes_left) in &samples {
                all.add(ms);
                if goes_left { left.add(ms) } else { right.add(ms) }
            }
            left.merge(&right);
            proptest::prop_assert_eq!(&left.buckets, &all.buckets);
            proptest::prop_assert_eq!(left.count(), all.count());
            proptest::prop_assert!(all.buckets.windows(2).all(|w| w[0].0 < w[1].0));
            proptest::prop_assert_eq!(Sketch::decode(&all.encode()), all);
        }
    }

    /// How rows were folded before rollups were keyed by name: the reference for
    /// `folds_as_keyed_by_series_did`.
    fn by_series(rows: &[LogRow]) -> Vec<Rollup> {
        let mut map: std::collections::HashMap<(Series, i64), RollupData> = Default::default();
        for row in rows {
            let minute_ms = row.time_ms.div_euclid(MINUTE_MS) * MINUTE_MS;
            for series in [
                Some(Series::Overall),
                row.route.as_deref().map(|r| Series::Route(r.to_owned())),
            ]
            .into_iter()
            .flatten()
            {
                let data = map.entry((series, minute_ms)).or_default();
                data.counts.outcome(&row.outcome, row.status);
                data.latency.add(row.latency_ms);
                data.served(row);
            }
            let mut reached: Vec<(&str, &str)> = Vec::new();
            for attempt in row.attempts.iter().filter(|a| a.reached_upstream) {
                let key = (&*attempt.provider, &*attempt.model);
                if !reached.contains(&key) {
                    reached.push(key);
                }
            }
            for (provider, model) in reached {
                let series = Series::Deployment {
                    provider: provider.to_owned(),
                    model: model.to_owned(),
                };
                let served_here = row.provider.as_deref() == Some(provider)
                    && row.model.as_deref() == Some(model);
                let answered = matches!(row.outcome.as_str(), "success" | "fallback");
                let outcome = match (answered, served_here) {
                    (true, true) => "success",
                    (true, false) => "fallback",
                    (false, _) => row.outcome.as_str(),
                };
                let data = map.entry((series, minute_ms)).or_default();
                data.counts.outcome(outcome, row.status);
                for attempt in row.attempts.iter().filter(|a| {
                    a.reached_upstream && &*a.provider == provider && &*a.model == model
                }) {
                    data.counts.attempts += 1;
                    data.latency.add(attempt.latency_ms);
                }
                if served_here {
                    data.served(row);
                }
            }
        }
        let mut rollups: Vec<Rollup> = map
            .into_iter()
            .map(|((series, minute_ms), data)| Rollup {
                minute_ms,
                series,
                data,
            })
            .collect();
        rollups.sort_by(|a, b| (a.minute_ms, &a.series).cmp(&(b.minute_ms, &b.series)));
        rollups
    }

    fn arbitrary_row() -> impl proptest::strategy::Strategy<Value = LogRow> {
        use proptest::prelude::*;
        let attempt = (0..2usize, 0..2usize, any::<bool>(), 0.0f64..1e4).prop_map(
            |(provider, model, reached_upstream, latency_ms)| LogAttempt {
                step: 0,
                provider: ["a", "b"][provider].into(),
                model: ["m", "n"][model].into(),
                failure: None,
                status: Some(200),
                latency_ms,
                reached_upstream,
                hedge: false,
            },
        );
        (
            0..3 * MINUTE_MS,
            proptest::option::of(0..2usize),
            0..6usize,
            prop::sample::select(vec![200u16, 400, 429, 500]),
            proptest::collection::vec(attempt, 0..4),
            proptest::option::of((0..2usize, 0..2usize)),
            0.0f64..1e4,
        )
            .prop_map(
                |(time_ms, route, outcome, status, attempts, served, latency_ms)| {
                    let outcomes = ["success", "fallback", "degraded", "error", "rejected", "x"];
                    LogRow {
                        id: String::new(),
                        time_ms,
                        key_id: None,
                        user: None,
                        route: route.map(|r| ["r", "s"][r].into()),
                        outcome: outcomes[outcome].into(),
                        step: None,
                        provider: served.map(|(p, _)| ["a", "b"][p].into()),
                        model: served.map(|(_, m)| ["m", "n"][m].into()),
                        attempts,
                        status,
                        latency_ms,
                        ttft_ms: Some(latency_ms / 2.0),
                        overhead_ms: 0.0,
                        tokens_in: Some(3),
                        tokens_out: Some(4),
                        cost_usd: Some(0.25),
                        stream: false,
                        partial: false,
                        error: None,
                        cache: None,
                        trace_id: None,
                    }
                },
            )
    }

    proptest::proptest! {
        /// Keyed by name, the rollups are what keying them by series made of the same rows:
        /// retries on one deployment, fallbacks, attempts that never went upstream, rows
        /// with no route, across minutes.
        #[test]
        fn folds_as_keyed_by_series_did(
            rows in proptest::collection::vec(arbitrary_row(), 0..12),
        ) {
            let mut rollups = Rollups::default();
            for row in &rows {
                rollups.add(row);
            }
            proptest::prop_assert_eq!(rollups.is_empty(), rows.is_empty());
            let mut folded: Vec<Rollup> = rollups.into_rollups().collect();
            folded.sort_by(|a, b| (a.minute_ms, &a.series).cmp(&(b.minute_ms, &b.series)));
            proptest::prop_assert_eq!(folded, by_series(&rows));
        }
    }

    #[test]
    fn a_stored_sketch_out_of_order_reads_as_its_sum() {
        let mut bytes = [1.0f64.to_le_bytes(), 9.0f64.to_le_bytes()].concat();
        for (bucket, count) in [(7u16, 2u64), (3, 1), (7, 4), (5, 1)] {
            bytes.extend_from_slice(&bucket.to_le_bytes());
            bytes.extend_from_slice(&count.to_le_bytes());
        }
        let sketch = Sketch::decode(&bytes);
        assert_eq!(sketch.buckets, vec![(3, 1), (5, 1), (7, 6)]);
        assert_eq!(sketch.count(), 8);
    }
}
