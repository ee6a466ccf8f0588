//! What a scrape and the scorecard say of spend budgets: dollars settled by route, role and
//! key, reservations refused by reason, and reservations kept whole for want of a cost.
//!
//! Every label value is a configured name (route, role), an id the gateway issued (a
//! virtual key's), or one of a few fixed words: never a string the client chose.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::sync::atomic::AtomicU64;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;
use serde::Serialize;

use super::LabelValue;

/// `switchyard_budget_spend_usd_total`'s labels.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RouteRole {
    pub route: LabelValue,
    pub role: LabelValue,
}

/// `switchyard_budget_key_spend_usd_total`'s label: a virtual key's id.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct KeyLabel {
    pub key: LabelValue,
}

/// `switchyard_budget_refused_total`'s label.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct Reason {
    /// `budget_exceeded`, `budget_too_small` or `model_unpriced`.
    pub reason: &'static str,
}

/// Settled spend since this instance started, in US dollars, for the scorecard.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct SpendCard {
    pub routes: BTreeMap<String, f64>,
    pub roles: BTreeMap<String, f64>,
    /// By virtual key id; callers without a key are counted under their route and role.
    pub keys: BTreeMap<String, f64>,
}

/// Micro-dollars by route, role and key.
#[derive(Default)]
struct Tallies {
    routes: BTreeMap<String, u64>,
    roles: BTreeMap<String, u64>,
    keys: BTreeMap<String, u64>,
}

/// The budget metrics.
#[derive(Default)]
pub struct BudgetMetrics {
    spend: Family<RouteRole, Counter<f64, AtomicU64>>,
    key_spend: Family<KeyLabel, Counter<f64, AtomicU64>>,
    refusals: Family<Reason, Counter>,
    /// Reservations dropped unsettled (a stream cut before its usage, a client gone), so
    /// charged whole.
    pub kept: Counter,
    tallies: Mutex<Tallies>,
}

impl BudgetMetrics {
    pub(super) fn register(&self, registry: &mut Registry) {
        registry.register(
            "switchyard_budget_spend_usd",
            "US dollars settled against spend budgets, by route and role",
            self.spend.clone(),
        );
        registry.register(
            "switchyard_budget_key_spend_usd",
            "US dollars settled against spend budgets, by virtual key id",
            self.key_spend.clone(),
        );
        registry.register(
            "switchyard_budget_refused",
            "Requests refused by a spend budget (402), by reason",
            self.refusals.clone(),
        );
        registry.register(
            "switchyard_budget_reservations_kept",
            "Reservations kept whole because no cost was reported (a stream cut mid-answer, a client gone)",
            self.kept.clone(),
        );
    }

    /// Counts a refusal.
    pub fn refused(&self, reason: &'static str) {
        self.refusals.get_or_create(&Reason { reason }).inc();
    }

    /// Counts settled spend; `route` and `role` are already label values.
    pub(super) fn spent(
        &self,
        route: LabelValue,
        role: LabelValue,
        key: Option<&str>,
        micros: u64,
    ) {
        let usd = micros as f64 / 1e6;
        let mut tallies = self.tallies.lock().unwrap_or_else(|e| e.into_inner());
        *tallies.routes.entry(route.as_str().to_owned()).or_default() += micros;
        *tallies.roles.entry(role.as_str().to_owned()).or_default() += micros;
        if let Some(key) = key {
            *tallies.keys.entry(key.to_owned()).or_default() += micros;
            self.key_spend
                .get_or_create(&KeyLabel {
                    key: LabelValue::from(key),
                })
                .inc_by(usd);
        }
        drop(tallies);
        self.spend
            .get_or_create(&RouteRole { route, role })
            .inc_by(usd);
    }

    /// Settled spend since start, for the scorecard.
    pub fn card(&self) -> SpendCard {
        let tallies = self.tallies.lock().unwrap_or_else(|e| e.into_inner());
        let usd = |map: &BTreeMap<String, u64>| {
            map.iter()
                .map(|(name, micros)| (name.clone(), *micros as f64 / 1e6))
                .collect()
        };
        SpendCard {
            routes: usd(&tallies.routes),
            roles: usd(&tallies.roles),
            keys: usd(&tallies.keys),
        }
    }
}
