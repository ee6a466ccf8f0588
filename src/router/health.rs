//! What the router remembers of each deployment between requests: its breaker, its recent
//! latency, and where each balanced step's round robin stands.
//!
//! One table behind one sync mutex, held for a few map operations and never across an
//! await. Choosing a deployment and admitting it happen under one hold of the lock, so a
//! half-open breaker admits exactly one probe however many requests arrive at once. Lock
//! order: this table, then the [`KeyRing`]'s; the key ring never calls back.

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use foldhash::{HashMap, HashMapExt};
use tokio::time::Instant;

use super::balance::{Ewma, fastest, smooth_pick};
use super::breaker::{Breaker, BreakerView, CallerTag, Gate, Refusal, Ticket, Transition, Verdict};
use super::classify::FailureClass;
use super::hedge_budget::HedgeBudgets;
use super::retry::MAX_RETRY_AFTER;
use super::retry_budget::RetryBudgets;
use crate::config::{
    Balance, BreakerConfig, Config, Deployment, ModelName, ProviderId, Route, RouteName, Step,
};
use crate::keys::{KeyLease, KeyRing};

/// What one breaker watches: a model at a provider, with one key (`None` for a keyless
/// provider).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct DeploymentId {
    pub provider: ProviderId,
    pub model: ModelName,
    /// The key's id, safe to show.
    pub key: Option<Arc<str>>,
}

impl DeploymentId {
    fn sort_key(&self) -> (&str, &str, Option<&str>) {
        (
            self.provider.as_str(),
            self.model.as_str(),
            self.key.as_deref(),
        )
    }

    fn new(deployment: &Deployment, key: Option<Arc<str>>) -> DeploymentId {
        DeploymentId {
            provider: deployment.provider.clone(),
            model: deployment.model.clone(),
            key,
        }
    }
}

/// Clients can name any `provider/model`, and each would get a breaker; past this many, idle
/// closed breakers are forgotten, and if that is not enough, new ones go untracked.
const MAX_TRACKED: usize = 10_000;

#[derive(Default)]
struct Table {
    breakers: HashMap<DeploymentId, Breaker>,
    /// Only for the endpoints of steps balanced by latency, which config bounds.
    latency: HashMap<(ProviderId, ModelName), Ewma>,
    /// Smooth round robin's running values, per (route, step) with several deployments.
    rotations: HashMap<(RouteName, usize), Vec<i64>>,
    /// Cluster mode's link to the other instances; `None` on a single node.
    link: Option<Arc<Link>>,
    /// Told whenever a breaker here opens, so the active health checker starts counting.
    opened: Arc<tokio::sync::Notify>,
}

impl Table {
    /// Whether a user's request may go to `id`; `checked` when its provider has active
    /// health checks, which then send every probe.
    fn check(&self, id: &DeploymentId, now: Instant, checked: bool) -> Result<(), Refusal> {
        let verdict = self.breakers.get(id).map_or(Ok(()), |b| {
            if checked {
                b.check_checked(now)
            } else {
                b.check(now)
            }
        });
        self.wish_lease(id, verdict);
        verdict
    }

    /// A breaker ready for a probe that is the cluster's to give: ask for the lease.
    fn wish_lease<T>(&self, id: &DeploymentId, verdict: Result<T, Refusal>) {
        if let (Err(Refusal::AwaitingLease), Some(link)) = (verdict, &self.link) {
            link.wish_lease(id);
        }
    }

    /// Hands a breaker's change to the cluster, if there is one to tell.
    fn announce(&mut self, id: &DeploymentId, transition: Option<Transition>) {
        if let Some(Transition::Opened { .. }) = transition {
            self.opened.notify_one();
        }
        let (Some(transition), Some(link)) = (transition, &self.link) else {
            return;
        };
        if link.moved(id, transition)
            && let Some(breaker) = self.breakers.get_mut(id)
        {
            breaker.change_sent();
        }
    }

    /// A new breaker, gated by the cluster while breakers are shared.
    fn new_breaker(&self, settings: &BreakerConfig, now: Instant) -> Breaker {
        let mut breaker = Breaker::new(settings.clone(), now);
        if self.link.as_ref().is_some_and(|link| link.shared()) {
            breaker.set_gate(Gate::Elsewhere);
        }
        breaker
    }
}

/// Every deployment's health; one per gateway, in its shared state.
pub struct Health {
    settings: BreakerConfig,
    table: Mutex<Table>,
    /// Each deployment's requests and retries, for the retry budget; behind its own lock.
    retry_budgets: RetryBudgets,
    /// Times to commit of the deployments hedges wait on by percentile; apart from the
    /// table, since only hedging routes read or feed them.
    commit_times: Mutex<CommitTimeTable>,
    /// Each hedging route's share of hedged requests.
    hedge_budgets: HedgeBudgets,
}

/// Which of a step's deployments this request has given up on.
#[derive(Default)]
pub struct Tried {
    /// Indices into the step's deployments: failed in a way another key cannot fix.
    pub endpoints: Vec<usize>,
    /// Keys the provider refused (401/403).
    pub keys: Vec<(ProviderId, Arc<str>)>,
}

impl Tried {
    fn keys_of(&self, provider: &ProviderId) -> Vec<Arc<str>> {
        self.keys
            .iter()
            .filter(|(p, _)| p == provider)
            .map(|(_, id)| id.clone())
            .collect()
    }
}

/// Why no deployment of a step could be tried now, for the chain's story.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Skip {
    /// `circuit_open`, `benched` or `no_key`; `None` when every deployment was tried already.
    pub class: Option<FailureClass>,
    /// The deployment the class is about.
    pub deployment: usize,
    /// When a deployment of that class may be tried again (its breaker's next probe, its
    /// bench's end), the soonest; `None` when unknown.
    pub until: Option<Instant>,
}

impl Skip {
    /// Keeps the most telling reason: an open breaker explains a skip better than a bench,
    /// and both better than a missing key.
    fn note(&mut self, class: FailureClass, deployment: usize, until: Option<Instant>) {
        let rank = |c: Option<FailureClass>| match c {
            Some(FailureClass::CircuitOpen) => 3,
            Some(FailureClass::Benched) => 2,
            Some(_) => 1,
            None => 0,
        };
        let (new, old) = (rank(Some(class)), rank(self.class));
        if new > old {
            *self = Skip {
                class: Some(class),
                deployment,
                until,
            };
        } else if new == old && until.is_some_and(|u| self.until.is_none_or(|s| u < s)) {
            self.until = until;
        }
    }
}

/// Leave to attempt one deployment. Report the attempt with [`Permit::finish`]; dropped
/// unfinished (the client went away), it frees a probe's slot.
pub struct Permit<'h> {
    health: &'h Health,
    id: DeploymentId,
    /// `None` when the table is full and this deployment goes untracked.
    ticket: Option<Ticket>,
    track_latency: bool,
    /// The index of the chosen deployment in its step.
    pub deployment: usize,
    /// The key to send, for a provider that needs one.
    pub key: Option<KeyLease>,
}

impl Permit<'_> {
    /// The breaker's deployment.
    pub fn id(&self) -> &DeploymentId {
        &self.id
    }

    /// Whether this attempt is a half-open breaker's one probe.
    pub fn is_probe(&self) -> bool {
        self.ticket.is_some_and(Ticket::is_probe)
    }

    /// Reports the attempt, made for `caller`: its verdict to the breaker, a latency sample
    /// (for a success or a timeout) to the estimate, and a bench (a 429's `retry-after`) if
    /// there is one.
    pub fn finish(
        mut self,
        verdict: Verdict,
        latency: Option<Duration>,
        bench: Option<Duration>,
        caller: CallerTag,
    ) {
        let now = Instant::now();
        self.count_request(now);
        let mut table = self.health.lock();
        let breaker = table.breakers.get_mut(&self.id);
        let mut transition = None;
        if let (Some(ticket), Some(breaker)) = (self.ticket.take(), breaker) {
            transition = breaker.record(now, ticket, verdict, caller);
            if let Some(bench) = bench {
                // Capped again here: an overflow would panic with the health lock held.
                breaker.bench(now + bench.min(MAX_RETRY_AFTER));
            }
        }
        table.announce(&self.id, transition);
        self.observe(&mut table, latency, now);
    }

    /// Reports a served attempt whose verdict must wait (a stream, which can still break
    /// mid-answer): the latency sample now, the verdict through the returned [`Deferred`].
    /// Until then a probe stays in flight, so a deployment that cuts its streams gets one
    /// broken answer through, not a burst of them.
    pub fn defer(mut self, latency: Option<Duration>, caller: CallerTag) -> Deferred {
        let now = Instant::now();
        self.count_request(now);
        let mut table = self.health.lock();
        self.observe(&mut table, latency, now);
        Deferred::new(self.id.clone(), self.ticket.take(), caller)
    }

    /// A finished attempt reached its deployment: one request for its retry budget.
    fn count_request(&self, now: Instant) {
        let budgets = &self.health.retry_budgets;
        budgets.count_request(&self.id.provider, &self.id.model, now);
    }

    fn observe(&self, table: &mut Table, latency: Option<Duration>, now: Instant) {
        if let Some(sample) = latency.filter(|_| self.track_latency) {
            let endpoint = (self.id.provider.clone(), self.id.model.clone());
            match table.latency.get_mut(&endpoint) {
                Some(ewma) => ewma.observe(sample, now),
                None => {
                    table.latency.insert(endpoint, Ewma::new(sample, now));
                }
            }
        }
    }
}

impl Drop for Permit<'_> {
    fn drop(&mut self) {
        if let Some(ticket) = self.ticket.take() {
            let mut table = self.health.lock();
            if let Some(breaker) = table.breakers.get_mut(&self.id) {
                breaker.cancel(ticket);
            }
        }
    }
}

/// One breaker as the admin API shows it.
#[derive(Clone, Debug)]
pub struct BreakerReport {
    pub id: DeploymentId,
    pub view: BreakerView,
    /// The endpoint's latency estimate, for steps balanced by latency.
    pub latency: Option<Duration>,
}

impl Health {
    /// An empty table: every deployment starts closed.
    pub fn new(settings: BreakerConfig) -> Health {
        Health {
            settings,
            table: Mutex::new(Table::default()),
            retry_budgets: RetryBudgets::new(),
            commit_times: Mutex::new(CommitTimeTable::default()),
            hedge_budgets: HedgeBudgets::default(),
        }
    }

    /// Each deployment's requests and retries over the retry budget's window.
    pub fn retry_budgets(&self) -> &RetryBudgets {
        &self.retry_budgets
    }

    /// Takes in a served attempt's time to commit (a stream's first event, a whole JSON
    /// answer), or a cancelled one's time so far, which the real one was at least.
    pub fn observe_commit_time(&self, deployment: &Deployment, sample: Duration) {
        let mut times = self.commit_times.lock().unwrap_or_else(|e| e.into_inner());
        times.observe(&deployment.provider, &deployment.model, sample);
    }

    /// `deployment`'s time to commit at `percentile`, over its recent attempts; `None`
    /// until it has [`commit_times::MIN_SAMPLES`] of them.
    pub fn commit_time_percentile(
        &self,
        deployment: &Deployment,
        percentile: u8,
    ) -> Option<Duration> {
        let times = self.commit_times.lock().unwrap_or_else(|e| e.into_inner());
        times.percentile(&deployment.provider, &deployment.model, percentile)
    }

    /// Each hedging route's hedge budget.
    pub fn hedge_budgets(&self) -> &HedgeBudgets {
        &self.hedge_budgets
    }

    fn lock(&self) -> MutexGuard<'_, Table> {
        // Poison only means a panic between two map operations; every entry is still whole.
        self.table.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Chooses a deployment of `step` (and a key) that its breaker admits, and admits it;
    /// or says why none can be tried now.
    #[allow(clippy::too_many_arguments)]
    pub fn choose(
        &self,
        route: &RouteName,
        index: usize,
        step: &Step,
        config: &Config,
        keys: &KeyRing,
        tried: &Tried,
        now: Instant,
    ) -> Result<Permit<'_>, Skip> {
        let mut table = self.lock();
        let (eligible, mut skip) = eligibility(&table, step, config, keys, tried, now);
        let Some(chosen) = pick(&mut table, route, index, step, &eligible, now) else {
            return Err(skip);
        };
        let deployment = &step.deployments[chosen];
        let provider = config.provider(&deployment.provider);
        let checked = provider.is_some_and(|p| p.health_check.is_some());
        let key = match provider {
            Some(provider) if provider.key_required => {
                let tried_keys = tried.keys_of(&provider.id);
                let admits = |id: &str| {
                    let id = DeploymentId::new(deployment, Some(id.into()));
                    table.check(&id, now, checked)
                };
                // Eligible above, under this same lock: one of its keys admits.
                let lease = keys.pick_where(&provider.id, &tried_keys, |id| admits(id).is_ok());
                Some(lease.ok_or(skip)?)
            }
            _ => None,
        };
        let id = DeploymentId::new(deployment, key.as_ref().map(|k| k.id.clone()));
        let how = if checked {
            Breaker::admit_checked
        } else {
            Breaker::admit
        };
        let ticket = self.admit(&mut table, &id, now, how);
        let ticket = match ticket {
            Ok(ticket) => ticket,
            Err(refusal) => {
                skip.note(refusal.class(), chosen, refusal.until());
                return Err(skip);
            }
        };
        Ok(Permit {
            health: self,
            id,
            ticket,
            track_latency: tracks_latency(step),
            deployment: chosen,
            key,
        })
    }

    /// Whether [`Health::choose`] would find a deployment of `step` now, without choosing.
    pub fn can_choose(
        &self,
        step: &Step,
        config: &Config,
        keys: &KeyRing,
        tried: &Tried,
        now: Instant,
    ) -> bool {
        let table = self.lock();
        let (eligible, _) = eligibility(&table, step, config, keys, tried, now);
        eligible.contains(&true)
    }

    /// For a route whose every step was skipped as open: probes the deployment whose
    /// cooldown ends soonest, before it ends, so stale state cannot black-hole the route.
    /// Returns the step index with the permit; `None` if none can be probed (benched, or a
    /// probe is out everywhere).
    pub fn probe_soonest<'r>(
        &self,
        route: &'r Route,
        first_step: usize,
        config: &Config,
        keys: &KeyRing,
        now: Instant,
    ) -> Option<(usize, &'r Step, Permit<'_>)> {
        let mut table = self.lock();
        let mut candidates: Vec<(Instant, usize, usize, DeploymentId)> = Vec::new();
        for (s, step) in route.steps.iter().enumerate().skip(first_step) {
            for (d, deployment) in step.deployments.iter().enumerate() {
                // Active health checks send a checked provider's every probe, never a user.
                let Some(provider) = config
                    .provider(&deployment.provider)
                    .filter(|p| p.health_check.is_none())
                else {
                    continue;
                };
                let ids: Vec<Option<Arc<str>>> = if provider.key_required {
                    keys.usable(&provider.id, &[])
                        .into_iter()
                        .map(Some)
                        .collect()
                } else {
                    vec![None]
                };
                for key in ids {
                    let id = DeploymentId::new(deployment, key);
                    if let Some(until) = table.breakers.get(&id).and_then(Breaker::open_until) {
                        candidates.push((until, s, d, id));
                    }
                }
            }
        }
        candidates.sort_by_key(|(until, ..)| *until);
        for (_, s, d, id) in candidates {
            let key = match &id.key {
                // Listed as usable above; only a concurrent removal could make this fail.
                Some(wanted) => match keys.pick_where(&id.provider, &[], |k| k == &**wanted) {
                    Some(lease) => Some(lease),
                    None => continue,
                },
                None => None,
            };
            let Ok(ticket) = self.admit(&mut table, &id, now, Breaker::force_probe) else {
                continue;
            };
            let step = &route.steps[s];
            let permit = Permit {
                health: self,
                id,
                ticket,
                track_latency: tracks_latency(step),
                deployment: d,
                key,
            };
            return Some((s, step, permit));
        }
        None
    }

    /// Admits `id` by `how` (normal admission or a forced probe), creating its breaker on
    /// first use. `Ok(None)` means the table is full and the deployment goes untracked.
    fn admit(
        &self,
        table: &mut Table,
        id: &DeploymentId,
        now: Instant,
        how: fn(&mut Breaker, Instant) -> Result<Ticket, Refusal>,
    ) -> Result<Option<Ticket>, Refusal> {
        if !table.breakers.contains_key(id) {
            if table.breakers.len() >= MAX_TRACKED {
                table.breakers.retain(|_, b| !idle(b, now));
                if table.breakers.len() >= MAX_TRACKED {
                    return Ok(None);
                }
            }
            let breaker = table.new_breaker(&self.settings, now);
            table.breakers.insert(id.clone(), breaker);
        }
        let admitted = match table.breakers.get_mut(id) {
            Some(breaker) => how(breaker, now).map(Some),
            None => Ok(None),
        };
        table.wish_lease(id, admitted);
        admitted
    }

    /// Every breaker, sorted by provider, model and key.
    pub fn report(&self, now: Instant) -> Vec<BreakerReport> {
        let table = self.lock();
        let mut reports: Vec<BreakerReport> = table
            .breakers
            .iter()
            .map(|(id, breaker)| BreakerReport {
                id: id.clone(),
                view: breaker.view(now),
                latency: table
                    .latency
                    .get(&(id.provider.clone(), id.model.clone()))
                    .map(|e| e.estimate(now)),
            })
            .collect();
        reports.sort_by(|a, b| a.id.sort_key().cmp(&b.id.sort_key()));
        reports
    }

    /// Closes the breakers (and lifts the benches) of `provider` (and `model`), or all of
    /// them; returns how many.
    pub fn reset(&self, provider: Option<&str>, model: Option<&str>) -> usize {
        let mut table = self.lock();
        let mut count = 0;
        for (id, breaker) in table.breakers.iter_mut() {
            let matches = provider.is_none_or(|p| id.provider.as_str() == p)
                && model.is_none_or(|m| id.model.as_str() == m);
            if matches {
                breaker.reset();
                count += 1;
            }
        }
        if let Some(link) = &table.link {
            link.reset(provider, model);
        }
        count
    }

    /// The breakers an active health check may probe now: open, whatever their cooldown, or
    /// half-open with no probe out.
    pub fn awaiting_health_checks(&self) -> Vec<DeploymentId> {
        let table = self.lock();
        table
            .breakers
            .iter()
            .filter(|(_, breaker)| breaker.awaits_health_check())
            .map(|(id, _)| id.clone())
            .collect()
    }

    /// Leave for an active health check to be `id`'s probe, sent with `key`; `None` unless
    /// its breaker awaits one.
    pub fn admit_health_check(
        &self,
        id: &DeploymentId,
        key: Option<KeyLease>,
    ) -> Option<Permit<'_>> {
        let mut table = self.lock();
        let ticket = table.breakers.get_mut(id)?.admit_health_check()?;
        Some(Permit {
            health: self,
            id: id.clone(),
            ticket: Some(ticket),
            track_latency: false,
            deployment: 0,
            key,
        })
    }

    /// What wakes the active health checker: a breaker here opened.
    pub fn breaker_opened(&self) -> Arc<tokio::sync::Notify> {
        Arc::clone(&self.lock().opened)
    }

    /// Each provider and model's state for `switchyard_breaker_state`: the worst of its keys'.
    pub fn states(&self) -> Vec<(ProviderId, ModelName, i64)> {
        let table = self.lock();
        let mut worst: HashMap<(&ProviderId, &ModelName), i64> = HashMap::new();
        for (id, breaker) in &table.breakers {
            let gauge = breaker.state().gauge();
            let entry = worst.entry((&id.provider, &id.model)).or_insert(gauge);
            *entry = (*entry).max(gauge);
        }
        worst
            .into_iter()
            .map(|((p, m), gauge)| (p.clone(), m.clone(), gauge))
            .collect()
    }
}

/// Which of the step's deployments have a key whose breaker admits now, and if none, why.
fn eligibility(
    table: &Table,
    step: &Step,
    config: &Config,
    keys: &KeyRing,
    tried: &Tried,
    now: Instant,
) -> (Vec<bool>, Skip) {
    let mut skip = Skip {
        class: None,
        deployment: 0,
        until: None,
    };
    let mut eligible = vec![false; step.deployments.len()];
    for (i, deployment) in step.deployments.iter().enumerate() {
        if tried.endpoints.contains(&i) {
            continue;
        }
        let Some(provider) = config.provider(&deployment.provider) else {
            continue;
        };
        // A provider without keys has one breaker to ask: asked directly, not through a
        // one-element `Vec` (an allocation on every request).
        let usable = provider.key_required.then(|| {
            let tried_keys = tried.keys_of(&provider.id);
            let usable = keys.usable(&provider.id, &tried_keys);
            if usable.is_empty() {
                // A key the provider refused comes back by itself: benched, not missing.
                match keys.benched_until(&provider.id, &tried_keys) {
                    Some(until) => skip.note(FailureClass::Benched, i, Some(until)),
                    None => skip.note(FailureClass::NoKey, i, None),
                }
            }
            usable
        });
        let checked = provider.health_check.is_some();
        let mut check = |key: Option<Arc<str>>| match table.check(
            &DeploymentId::new(deployment, key),
            now,
            checked,
        ) {
            Ok(()) => eligible[i] = true,
            Err(refusal) => skip.note(refusal.class(), i, refusal.until()),
        };
        match usable {
            None => check(None),
            Some(usable) => usable.into_iter().for_each(|key| check(Some(key))),
        }
    }
    (eligible, skip)
}

/// Whether a step's attempts feed the latency estimates: only steps balanced by latency
/// need them, and config bounds how many there are.
fn tracks_latency(step: &Step) -> bool {
    step.balance == Balance::Latency && step.deployments.len() > 1
}

/// A breaker with nothing to remember: closed, no failures, no bench.
fn idle(breaker: &Breaker, now: Instant) -> bool {
    let view = breaker.view(now);
    view.state == super::breaker::BreakerState::Closed
        && view.consecutive_failures == 0
        && view.window_failures == 0
        && view.benched_for.is_none()
}

/// Among the eligible deployments, the one the step's balance prefers.
fn pick(
    table: &mut Table,
    route: &RouteName,
    index: usize,
    step: &Step,
    eligible: &[bool],
    now: Instant,
) -> Option<usize> {
    // One eligible deployment (every single-deployment step) is the pick: found without
    // collecting the indices, an allocation on every request.
    let mut indices = (0..eligible.len()).filter(|i| eligible[*i]);
    if let (first, None) = (indices.next(), indices.clone().next()) {
        return first;
    }
    let eligible_indices: Vec<usize> = (0..eligible.len()).filter(|i| eligible[*i]).collect();
    match step.balance {
        Balance::Latency => {
            let estimates: Vec<Option<Duration>> = eligible_indices
                .iter()
                .map(|i| {
                    let d = &step.deployments[*i];
                    let endpoint = (d.provider.clone(), d.model.clone());
                    table.latency.get(&endpoint).map(|e| e.estimate(now))
                })
                .collect();
            fastest(&estimates).map(|i| eligible_indices[i])
        }
        Balance::Weighted => {
            let n = step.deployments.len();
            let current = table
                .rotations
                .entry((route.clone(), index))
                .or_insert_with(|| vec![0; n]);
            if current.len() != n {
                *current = vec![0; n];
            }
            let candidates = current
                .iter_mut()
                .zip(&step.deployments)
                .zip(eligible)
                .filter(|(_, ok)| **ok)
                .map(|((c, d), _)| (c, d.weight))
                .collect();
            smooth_pick(candidates).map(|i| eligible_indices[i])
        }
    }
}

pub mod commit_times;
pub mod link;
mod shared;
mod verdict;

use commit_times::CommitTimeTable;
use link::Link;

pub use shared::{HeldLease, SharedState};
pub use verdict::{Deferred, PendingVerdict};

#[cfg(test)]
mod tests;
