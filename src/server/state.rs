//! The state every request reads: what outlives a reload ([`Shared`]) and the config
//! snapshot live when the request began ([`AppState`]).

use super::{Live, StartError, StartOptions};
use super::{flood, health_checks, readiness, reload, watch};
use crate::auth::Directory;
use crate::budgets::Budgets;
use crate::config::{Config, Route};
use crate::keys::Secret;
use crate::keys::provider_keys::ProviderKeys;
use crate::limits::Limits;
use crate::router::Health;
use crate::router::upstream::UpstreamClient;
use crate::store::{Store, StoreError};
use crate::telemetry::{Telemetry, TelemetryWriter};
use axum::extract::FromRef;
use std::ops::Deref;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;

/// Everything a request needs; cheap to clone. It holds the config snapshot that was live
/// when the request began ([`Live`]), so a reload never changes a request half way through.
#[derive(Clone)]
pub struct AppState {
    pub(super) shared: Arc<Shared>,
    pub(super) live: Arc<Live>,
}

/// The routers' state: what every request's [`AppState`] is taken from, with one atomic
/// load of the live config.
#[derive(Clone)]
pub struct ServerState(Arc<Shared>);

impl FromRef<ServerState> for AppState {
    fn from_ref(server: &ServerState) -> AppState {
        AppState::of(server.0.clone())
    }
}

/// The state behind [`AppState`]: what outlives a config reload.
pub struct Shared {
    /// What the config file decides, swapped whole by a reload (see [`reload`]).
    pub(super) live: arc_swap::ArcSwap<Live>,
    /// The file a reload reads, and the lock that makes reloads one at a time.
    pub reloads: reload::Reloads,
    pub client: UpstreamClient,
    /// Provider keys: the store's, sealed, and the ring requests pick from.
    pub keys: ProviderKeys,
    pub store: Store,
    /// Every live virtual key, kept current from the store.
    pub directory: Arc<Directory>,
    /// Every deployment's breaker and latency, shared by all requests.
    pub health: Arc<Health>,
    pub telemetry: Telemetry,
    /// The admin API's bearer token; `None` turns the admin API off.
    pub admin_token: Option<Secret>,
    /// Client connections open now.
    pub open_connections: Arc<tokio::sync::watch::Sender<usize>>,
    /// Set once shutdown begins, so `/readyz` tells load balancers to stop sending.
    pub draining: AtomicBool,
    /// What the background check last found of the store.
    pub readiness: readiness::Readiness,
    /// Turns true when shutdown's grace runs out: streams still open end with an error event.
    pub grace_over: tokio::sync::watch::Sender<bool>,
    /// One permit per scorecard being computed (`[admin] max_concurrent_scorecards`).
    pub scorecards: Arc<tokio::sync::Semaphore>,
    /// How many 401s from each address still get a log row this minute.
    pub unauthorized_rows: flood::UnauthorizedRows,
    /// The answers kept for routes that opt in; sized by `[cache]` at start.
    pub cache: Arc<crate::cache::Cache>,
    /// Starts each request's trace, when `[otel]` names an endpoint.
    pub tracing: Option<crate::telemetry::trace::Tracing>,
    /// Store reloads run one at a time. Two at once (an admin change's and the watcher's)
    /// could each read the store and install what they read in the other order, leaving
    /// the older keys in place until the next change: an admin change not in effect when
    /// its answer said it was.
    store_reloads: tokio::sync::Mutex<()>,
    /// When the last look in the store for an unknown virtual key began; held while one runs
    /// (see [`Shared::look_up_unknown_key`]).
    key_catch_up: tokio::sync::Mutex<Option<tokio::time::Instant>>,
}

impl Deref for AppState {
    type Target = Shared;

    fn deref(&self) -> &Shared {
        &self.shared
    }
}

impl AppState {
    /// The state with the config live now.
    fn of(shared: Arc<Shared>) -> AppState {
        let live = shared.live();
        AppState { shared, live }
    }

    /// The config this request runs on.
    pub fn config(&self) -> &Config {
        &self.live.config
    }

    /// The config's routes, shared with the requests that resolved them.
    pub fn routes(&self) -> &[Arc<Route>] {
        &self.live.routes
    }

    /// The router's entry, under this config.
    pub fn router(&self) -> crate::router::Router<'_> {
        crate::router::Router {
            config: &self.live.config,
            routes: &self.live.routes,
            keys: &self.keys.ring,
            health: &self.health,
            client: &self.client,
        }
    }

    /// Every caller's limits under this config; the counts outlive reloads.
    pub fn limits(&self) -> &Limits {
        &self.live.limits
    }

    /// Every caller's spend budgets under this config; the spend outlives reloads.
    pub fn budgets(&self) -> &Budgets {
        &self.live.budgets
    }

    /// The router state for this gateway.
    pub(super) fn server(&self) -> ServerState {
        ServerState(self.shared.clone())
    }
}

impl AppState {
    /// Builds the state, starting the request-log writer.
    pub async fn new(
        config: Config,
        options: StartOptions,
    ) -> Result<(AppState, TelemetryWriter), StartError> {
        // Installing twice (several gateways in one test process) is harmless; ignore that.
        let _ = rustls::crypto::ring::default_provider().install_default();
        // It never follows a redirect, which would carry the provider key (and the prompt)
        // to whatever origin it names; a 3xx is a failed attempt (see `router::classify`).
        let client = UpstreamClient::new(config.retry.attempt_timeout)?;
        let store = Store::connect(&config.store.url, config.store.password.as_ref()).await?;
        let generation = store.generation().await?;
        let keys = ProviderKeys::open(
            store.clone(),
            &config,
            options.master_key.as_ref().map(|k| k.expose()),
        )
        .await?;
        keys.announce();
        keys.seed_from_env(&config).await?;
        keys.reload().await?;
        let directory = Directory::load(
            store.clone(),
            config.auth.required,
            &config.auth.default_role,
        )
        .await?;
        let (telemetry, writer) = Telemetry::start(store.clone(), &config);
        let limits = Limits::new(&config, telemetry.metrics.clone()).map_err(StartError::Redis)?;
        let health = shared_breakers(&config, &telemetry)?;
        let scorecards = Arc::new(tokio::sync::Semaphore::new(
            config.admin.max_concurrent_scorecards,
        ));
        let unauthorized_rows = config.auth.unauthorized_log_rows_per_minute;
        let budgets = Budgets::new(&config, &limits, telemetry.metrics.clone());
        let cache_errors = telemetry.metrics.cache_backend_errors.clone();
        let cache = crate::cache::Cache::new(&config.cache, cache_errors)
            .map_err(StartError::CacheRedis)?;
        let cache = Arc::new(cache);
        let config_tracing = config
            .otel
            .endpoint
            .is_some()
            .then(|| crate::telemetry::trace::Tracing::from_config(&config.otel));
        let live = Live::new(config, limits, budgets);
        telemetry.metrics.reload.loaded(&live.stamp);
        let shared = Shared {
            live: arc_swap::ArcSwap::from_pointee(live),
            reloads: reload::Reloads::new(options.config_path),
            client,
            keys,
            store,
            directory,
            health,
            telemetry,
            admin_token: options.admin_token,
            open_connections: Arc::new(tokio::sync::watch::Sender::new(0)),
            draining: AtomicBool::new(false),
            readiness: readiness::Readiness::default(),
            grace_over: tokio::sync::watch::Sender::new(false),
            scorecards,
            unauthorized_rows: flood::UnauthorizedRows::new(unauthorized_rows),
            cache,
            tracing: config_tracing,
            store_reloads: tokio::sync::Mutex::new(()),
            key_catch_up: tokio::sync::Mutex::new(None),
        };
        let shared = Arc::new(shared);
        // Seeding may have moved the generation; the watcher's first poll catches up.
        tokio::spawn(watch::watch_store(Arc::downgrade(&shared), generation));
        tokio::spawn(readiness::check_backends(Arc::downgrade(&shared)));
        tokio::spawn(health_checks::run(Arc::downgrade(&shared)));
        Ok((AppState::of(shared), writer))
    }
}

impl Shared {
    /// The config live now; a request keeps the one it started with.
    pub fn live(&self) -> Arc<Live> {
        self.live.load_full()
    }

    /// The providers that need a key and have none usable now (none stored, all expired, or
    /// all benched after a 401/403), in config order.
    pub fn providers_without_usable_key(&self) -> Vec<String> {
        let live = self.live();
        live.config
            .providers
            .iter()
            .filter(|p| p.key_required && self.keys.ring.usable(&p.id, &[]).is_empty())
            .map(|p| p.id.to_string())
            .collect()
    }

    /// Loads keys changed in the store (by the admin API, the CLI or another instance).
    pub async fn reload(&self, generation: i64) -> Result<(), StartError> {
        let _one_at_a_time = self.store_reloads.lock().await;
        // Bounded, so a store that stops answering cannot hold the reload lock (and every
        // admin change behind it) for ever; what was loaded before keeps serving.
        let limit = self.live().config.store.timeout * 2;
        let reloading = async {
            self.keys.reload().await?;
            // The directory marks the generation loaded, so it goes last: a waiter on it
            // sees provider keys and virtual keys both current.
            self.directory.reload(&self.store, generation).await?;
            Ok(())
        };
        match tokio::time::timeout(limit, reloading).await {
            Ok(reloaded) => reloaded,
            Err(_) => Err(StartError::Store(StoreError::Timeout(limit))),
        }
    }

    /// Recognises the caller, as the directory does; but a virtual key the directory does
    /// not know is first looked for in the store, which may have it already (see
    /// [`Shared::look_up_unknown_key`]). A known key costs nothing more.
    pub async fn authenticate(
        &self,
        headers: &axum::http::HeaderMap,
    ) -> Result<crate::auth::Caller, crate::auth::AuthFailure> {
        let first = self.directory.authenticate(headers);
        let unsure = match &first {
            Err(crate::auth::AuthFailure::Invalid) => true,
            // Anonymous, without required auth: perhaps for a key made a moment ago.
            Ok(caller) => caller.key.is_none(),
            Err(_) => false,
        };
        if unsure && self.look_up_unknown_key(headers).await {
            return self.directory.authenticate(headers);
        }
        first
    }

    /// When `headers` offer a virtual key unknown here, looks in the store for keys made
    /// since the last load (by `vkeys create` a moment ago, say); true when a look begun
    /// after the request arrived has run, so the directory is worth asking again. Looks are
    /// one at a time, and a request that waited for one begun after it arrived takes that
    /// one's answer: a flood of unknown keys keeps at most one cheap query in flight (the
    /// store's generation).
    async fn look_up_unknown_key(&self, headers: &axum::http::HeaderMap) -> bool {
        if !self.directory.offers_unknown_key(headers) {
            return false;
        }
        let arrived = tokio::time::Instant::now();
        let mut last_begun = self.key_catch_up.lock().await;
        if last_begun.is_some_and(|begun| begun >= arrived) {
            return true;
        }
        *last_begun = Some(tokio::time::Instant::now());
        let timeout = self.live().config.store.timeout;
        let loaded = self.directory.loaded_generation();
        let generation = match tokio::time::timeout(timeout, self.store.generation()).await {
            Ok(Ok(generation)) if generation > loaded => generation,
            _ => return false,
        };
        match tokio::time::timeout(timeout, self.reload(generation)).await {
            Ok(Ok(())) => true,
            Ok(Err(e)) => {
                tracing::warn!(error = %e, "cannot load the store's new keys");
                false
            }
            Err(_) => {
                tracing::warn!("loading the store's new keys timed out");
                false
            }
        }
    }

    /// Reloads now, after a change this gateway made itself.
    pub async fn reload_now(&self) -> Result<(), StartError> {
        let generation = self.store.generation().await?;
        self.reload(generation).await
    }
}

/// The health table: its breakers shared through the cluster's Redis when `[cluster]` (or
/// Redis limits) name one, local otherwise.
fn shared_breakers(config: &Config, telemetry: &Telemetry) -> Result<Arc<Health>, StartError> {
    let Some(target) = config.cluster.redis.as_ref() else {
        return Ok(Arc::new(Health::new(config.breaker.clone())));
    };
    let (link, inbox) = crate::cluster::Link::new();
    let link = Arc::new(link);
    let health = Arc::new(Health::clustered(config.breaker.clone(), link.clone()));
    let metrics = telemetry.metrics.clone();
    crate::cluster::member::Member::spawn(&config.cluster, target, &health, link, inbox, metrics)
        .map_err(StartError::ClusterRedis)?;
    Ok(health)
}
