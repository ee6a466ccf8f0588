//! The request log writer's handles on the series it counts into, kept from one record to
//! the next.
//!
//! `Family::get_or_create` hashes its labels with SipHash under the family's lock: about 300
//! instructions, and every request took five or more. Labels are resolved to configured
//! names (or `other`, or `-`) before they are looked up here, so there are few of them, and
//! each is an `Arc` that the current [`LabelNames`] holds: its address names it, and is
//! what the handles are found by. A reload's names are new `Arc`s, so the cache starts over
//! when the names change; it holds the names it was filled under, so no address in it can
//! be reused by another name meanwhile.

use std::hash::Hash;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;

use foldhash::HashMap;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::{Family, MetricConstructor};
use prometheus_client::metrics::histogram::Histogram;

use super::LabelNames;

/// Handles on the series records have been counted into, by label.
#[derive(Default)]
pub struct SeriesCache {
    /// The names the handles were found under.
    names: Option<Arc<LabelNames>>,
    pub(super) routes: HashMap<usize, RouteSeries>,
    /// By provider label, then model label.
    pub(super) deployments: HashMap<(usize, usize), DeploymentSeries>,
}

impl SeriesCache {
    /// The cache for handles found under `names`: emptied first if they are not the names
    /// it was filled under.
    pub(super) fn under(&mut self, names: &Arc<LabelNames>) -> &mut SeriesCache {
        if !self
            .names
            .as_ref()
            .is_some_and(|held| Arc::ptr_eq(held, names))
        {
            *self = SeriesCache {
                names: Some(names.clone()),
                ..SeriesCache::default()
            };
        }
        self
    }

    /// Series held: at most one per configured name or pair, whatever records named.
    #[cfg(test)]
    pub fn held(&self) -> usize {
        self.routes.len() + self.deployments.len()
    }
}

/// A route label's series; each is created when first counted into, as `get_or_create`
/// would (a route that never streamed has no time-to-first-token series).
#[derive(Default)]
pub(super) struct RouteSeries {
    /// `switchyard_requests_total` by outcome.
    pub requests: Vec<(&'static str, Counter)>,
    pub duration: Option<Histogram>,
    pub overhead: Option<Histogram>,
    pub ttft: Option<Histogram>,
}

/// A provider/model label pair's series.
#[derive(Default)]
pub(super) struct DeploymentSeries {
    /// `switchyard_attempts_total` by result.
    pub attempts: Vec<(&'static str, Counter)>,
    pub tokens_in: Option<Counter>,
    pub tokens_out: Option<Counter>,
    pub cost: Option<Counter<f64, AtomicU64>>,
}

/// A family that hands out its series' handles: `get_or_create`, and a clone of the handle
/// (which shares the series) to keep.
pub(super) trait Handles {
    type Labels;
    type Metric: Clone;

    fn handle(&self, labels: &Self::Labels) -> Self::Metric;
}

impl<S, M, C> Handles for Family<S, M, C>
where
    S: Clone + Hash + Eq,
    M: Clone,
    C: MetricConstructor<M>,
{
    type Labels = S;
    type Metric = M;

    fn handle(&self, labels: &S) -> M {
        self.get_or_create(labels).clone()
    }
}

/// The handle in `slot`, taken from `family` the first time.
pub(super) fn series<'a, F: Handles>(
    slot: &'a mut Option<F::Metric>,
    family: &F,
    labels: impl FnOnce() -> F::Labels,
) -> &'a F::Metric {
    slot.get_or_insert_with(|| family.handle(&labels()))
}

/// The handle for `key` among `slots` (a handful: outcomes, or attempt results), taken from
/// `family` the first time.
pub(super) fn keyed<'a, F: Handles>(
    slots: &'a mut Vec<(&'static str, F::Metric)>,
    key: &'static str,
    family: &F,
    labels: impl FnOnce() -> F::Labels,
) -> &'a F::Metric {
    let at = match slots.iter().position(|(k, _)| *k == key) {
        Some(at) => at,
        None => {
            slots.push((key, family.handle(&labels())));
            slots.len() - 1
        }
    };
    &slots[at].1
}
