//! The HTTP server: state, routes, and a graceful lifecycle.
//!
//! `run` takes its listener and its shutdown signal, so tests bind `127.0.0.1:0` and stop
//! it when they like; `serve` is the binary's entry, with SIGTERM and Ctrl-C.

pub mod admin;
mod admission;
mod chat;
mod client_api;
mod completions;
mod connection;
mod degraded;
mod embeddings;
mod endpoint;
mod error;
mod flood;
mod header_values;
mod health_checks;
mod listener;
mod messages;
mod models;
mod preflight;
mod readiness;
pub mod reload;
mod responses;
mod scorecard;
mod shards;
mod spend;
mod startup;
mod stream;
mod watch;

pub use admission::FORCE_FALLBACK;
pub use error::ApiError;
pub use preflight::{preflight, store_path_problem};

use std::future::Future;
use std::net::SocketAddr;
use std::ops::Deref;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use axum::Json;
use axum::Router;
use axum::extract::{DefaultBodyLimit, FromRef, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde_json::json;
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use crate::auth::Directory;
use crate::budgets::Budgets;
use crate::config::{Config, FailMode, Route};
use crate::keys::Secret;
use crate::keys::provider_keys::{KeyError, ProviderKeys};
use crate::keys::vault::MASTER_KEY_ENV;
use crate::limits::Limits;
use crate::router::Health;
use crate::router::upstream::{ClientError, UpstreamClient};
use crate::store::{LimitOverrides, Store, StoreError};
use crate::telemetry::{Telemetry, TelemetryWriter};
pub use reload::{Live, ReloadError, Reloaded};
use shards::Shards;

/// Everything a request needs; cheap to clone. It holds the config snapshot that was live
/// when the request began ([`Live`]), so a reload never changes a request half way through.
#[derive(Clone)]
pub struct AppState {
    shared: Arc<Shared>,
    live: Arc<Live>,
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
    live: arc_swap::ArcSwap<Live>,
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

    /// Every caller's limits under this config; the counts outlive reloads.
    pub fn limits(&self) -> &Limits {
        &self.live.limits
    }

    /// Every caller's spend budgets under this config; the spend outlives reloads.
    pub fn budgets(&self) -> &Budgets {
        &self.live.budgets
    }

    /// The router state for this gateway.
    fn server(&self) -> ServerState {
        ServerState(self.shared.clone())
    }
}

/// Why the gateway could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("cannot build the HTTP client: {0}")]
    Client(#[from] ClientError),
    #[error("cannot listen: {0}")]
    Listen(#[from] std::io::Error),
    #[error("cannot start the serving threads: {0}")]
    Threads(std::io::Error),
    #[error("cannot open the store: {0}")]
    Store(#[from] StoreError),
    #[error("[limits] redis_url: {0}")]
    Redis(String),
    #[error("provider keys: {0}")]
    Keys(#[from] KeyError),
    #[error("[admin] token_file {0}")]
    AdminTokenFile(String),
    /// Never the URL, which may carry a password.
    #[error("[cluster] redis_url: {0}")]
    ClusterRedis(String),
}

/// What a gateway takes besides its config: things that come from the environment.
#[derive(Clone, Debug, Default)]
pub struct StartOptions {
    /// The admin API's bearer token (`SWITCHYARD_ADMIN_TOKEN`); `None` turns it off.
    pub admin_token: Option<Secret>,
    /// The master key for provider secrets (`SWITCHYARD_MASTER_KEY`, base64).
    pub master_key: Option<Secret>,
    /// The file the config came from, which `SIGHUP` and `POST /admin/reload` read again;
    /// `None` (a config built in memory) answers a reload with 409.
    pub config_path: Option<PathBuf>,
}

impl StartOptions {
    /// The environment's options, with the admin token from `[admin] token_file` when the
    /// environment gives none. A token file others can read is refused, as ssh refuses keys.
    pub fn for_config(config: &Config) -> Result<StartOptions, StartError> {
        let mut options = StartOptions::from_env();
        if options.admin_token.is_none()
            && let Some(path) = &config.admin.token_file
        {
            options.admin_token = Some(read_token_file(path)?);
        }
        Ok(options)
    }

    /// Reads the options from the process environment, as `switchyard serve` does.
    pub fn from_env() -> StartOptions {
        StartOptions {
            admin_token: std::env::var("SWITCHYARD_ADMIN_TOKEN")
                .ok()
                .filter(|t| !t.is_empty())
                .map(Secret::new),
            master_key: std::env::var(MASTER_KEY_ENV)
                .ok()
                .filter(|k| !k.is_empty())
                .map(Secret::new),
            config_path: None,
        }
    }
}

fn read_token_file(path: &std::path::Path) -> Result<Secret, StartError> {
    let shown = path.display();
    let fail = |why: String| StartError::AdminTokenFile(format!("{shown}: {why}"));
    let metadata = std::fs::metadata(path).map_err(|e| fail(e.to_string()))?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = metadata.permissions().mode() & 0o777;
        if mode & 0o077 != 0 {
            return Err(fail(format!(
                "is mode {mode:04o}; make it readable by its owner only (chmod 600)"
            )));
        }
    }
    let text = std::fs::read_to_string(path).map_err(|e| fail(e.to_string()))?;
    let token = text.trim();
    if token.is_empty() {
        return Err(fail("is empty".into()));
    }
    Ok(Secret::new(token.to_owned()))
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

/// The HTTP surface beside the client API's POST endpoints, which the connection serves
/// before the router ([`client_api`]). The admin API is part of it unless `[server]
/// admin_listen` gives it an address of its own.
pub fn app(state: AppState) -> Router {
    let mut routes = Router::new();
    // Their POSTs never reach the router; the routes are here so that other methods get its
    // 405 rather than a 404.
    for (path, _) in client_api::ENDPOINTS {
        routes = routes.route(path, axum::routing::MethodRouter::new());
    }
    let routes = routes
        .route(
            "/v1/responses/{id}",
            get(responses::retrieve).delete(responses::delete),
        )
        .route("/v1/models", get(models::list))
        .route("/v1/models/{*id}", get(models::one))
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz));
    let routes = if state.config().server.admin_listen.is_none() {
        routes
            .merge(admin_routes(&state))
            .merge(observability_routes())
    } else {
        routes
    };
    finish_router(routes, state)
}

/// The admin API and the observability endpoints, for `[server] admin_listen`.
pub fn admin_app(state: AppState) -> Router {
    let routes = admin_routes(&state)
        .merge(observability_routes())
        .layer(axum::Extension(admin::OnAdminListener));
    finish_router(routes, state)
}

/// What operators watch; [`admin::Observer`] decides who may.
fn observability_routes() -> Router<ServerState> {
    Router::new()
        .route("/metrics", get(metrics))
        .route("/v1/scorecard", get(scorecard::scorecard))
        .route("/dashboard", get(scorecard::dashboard))
}

/// The admin API, each call bounded by [`admin_deadline`].
fn admin_routes(state: &AppState) -> Router<ServerState> {
    let deadline = axum::middleware::from_fn_with_state(state.server(), admin_deadline);
    admin_calls().route_layer(deadline)
}

/// An admin call waits on the store (its change, then the reload that makes it live): one
/// whose store stops answering ends with a 503 after a few of the store's timeouts, rather
/// than holding the operator's tool, and the reload lock, for ever.
async fn admin_deadline(
    State(server): State<ServerState>,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    let limit = AppState::from_ref(&server).config().store.timeout * 3;
    match tokio::time::timeout(limit, next.run(request)).await {
        Ok(response) => response,
        Err(_) => ApiError::Busy(
            "the store did not answer in time: the change may or may not have been made; \
             check with a GET before you retry",
        )
        .into_response(),
    }
}

fn admin_calls() -> Router<ServerState> {
    Router::new()
        .route("/admin/reload", post(reload::answer))
        .route("/admin/breakers", get(admin::breakers::list))
        .route("/admin/breakers/reset", post(admin::breakers::reset))
        .route("/admin/keys", get(admin::keys::list))
        .route(
            "/admin/keys/{provider}",
            axum::routing::put(admin::keys::put),
        )
        .route(
            "/admin/keys/{provider}/rollback",
            post(admin::keys::rollback),
        )
        .route(
            "/admin/keys/{provider}/{id}",
            axum::routing::delete(admin::keys::remove),
        )
        .route(
            "/admin/virtual-keys",
            get(admin::virtual_keys::list).post(admin::virtual_keys::create),
        )
        .route(
            "/admin/virtual-keys/{id}",
            get(admin::virtual_keys::get)
                .patch(admin::virtual_keys::update)
                .delete(admin::virtual_keys::revoke),
        )
}

fn finish_router(routes: Router<ServerState>, state: AppState) -> Router {
    let limit = state.config().server.max_body_bytes;
    let server = state.server();
    let declared_length =
        axum::middleware::from_fn_with_state(server.clone(), chat::refuse_declared_oversize);
    routes
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(DefaultBodyLimit::max(limit))
        .layer(declared_length)
        .with_state(server)
}

/// Serves until `shutdown` resolves, then drains in-flight requests (streams included) and
/// flushes the request log.
pub async fn run(
    listener: TcpListener,
    config: Config,
    options: StartOptions,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), StartError> {
    // First, so a SIGHUP during start is held for later rather than ending the process.
    let hangups = reload::hangups();
    let admin = bind_admin(&config).await?;
    let (state, writer) = AppState::new(config, options).await?;
    let admin_addr = admin.as_ref().map(|a| a.local_addr()).transpose()?;
    startup::announce(&state, listener.local_addr()?, admin_addr);
    reload::on_hangup(hangups, Arc::downgrade(&state.shared));
    // On a worker, not the thread that blocks on `run`: a connection task spawned from a
    // worker starts on that same worker, where one spawned from outside the pool first
    // wakes a parked worker (a futex and a thread switch per new connection).
    let drain = state.config().server.drain_delay;
    let serving = serve_state(listener, admin, state, writer, shutdown, drain);
    match tokio::spawn(serving).await {
        Ok(served) => served,
        Err(failed) if failed.is_panic() => std::panic::resume_unwind(failed.into_panic()),
        // Cancelled: only the runtime shutting down does that, and then there is no one
        // left to serve.
        Err(_) => Ok(()),
    }
}

async fn bind_admin(config: &Config) -> Result<Option<TcpListener>, StartError> {
    match config.server.admin_listen {
        Some(addr) => Ok(Some(TcpListener::bind(addr).await?)),
        None => Ok(None),
    }
}

async fn serve_state(
    listener: TcpListener,
    admin: Option<TcpListener>,
    state: AppState,
    writer: TelemetryWriter,
    shutdown: impl Future<Output = ()> + Send + 'static,
    drain: Duration,
) -> Result<(), StartError> {
    // One signal stops both servers.
    let (stopping, stopped) = tokio::sync::watch::channel(false);
    let draining_state = state.clone();
    tokio::spawn(async move {
        shutdown.await;
        // `/readyz` answers 503 from now on; the listener still accepts for `drain`, so a
        // load balancer sees the 503 and stops sending before any connection is refused.
        draining_state.draining.store(true, Ordering::SeqCst);
        if !drain.is_zero() {
            tracing::info!(
                ?drain,
                "shutting down: /readyz is 503, still accepting for drain_delay"
            );
            tokio::time::sleep(drain).await;
        }
        drop(draining_state);
        tracing::info!("shutting down: no new connections; draining in-flight requests");
        let _ = stopping.send(true);
    });
    let admin_server = admin.map(|admin| {
        tokio::spawn(listener::serve(
            admin,
            connection::Service::router(admin_app(state.clone())),
            listener::Capacity::for_admin(),
            Arc::new(tokio::sync::watch::Sender::new(0)),
            state.clone(),
            None,
            stopped.clone(),
        ))
    });
    let server = &state.config().server;
    let capacity =
        listener::Capacity::for_clients(server.max_connections, server.max_connections_per_ip);
    tracing::info!(
        max_connections = capacity.max,
        overflow = capacity.overflow,
        max_connections_per_ip = capacity.per_ip,
        open_files_limit = listener::descriptor_limit(),
        "serving at most this many client connections at once; when full, the one idle longest \
         closes to make room"
    );
    let open = state.open_connections.clone();
    let threads = state.config().server.threads;
    let shards = Shards::start_or_per_core(threads).map_err(StartError::Threads)?;
    let service = connection::Service::with_client_api(app(state.clone()), state.server());
    listener::serve(
        listener,
        service,
        capacity,
        open,
        state,
        Some(&shards),
        stopped,
    )
    .await;
    shards.stop().await;
    if let Some(admin_server) = admin_server {
        let _ = admin_server.await;
    }
    // Every connection is closed and the routers dropped: the log's senders are gone.
    writer.finish().await;
    Ok(())
}

/// A gateway running in this process, as tests and the demo use it.
pub struct Gateway {
    addr: SocketAddr,
    /// Where the admin API listens, when `[server] admin_listen` moves it off `addr`.
    admin_addr: Option<SocketAddr>,
    state: AppState,
    stop: Option<oneshot::Sender<()>>,
    task: JoinHandle<Result<(), StartError>>,
}

impl Gateway {
    /// Starts a gateway on `addr` (port 0 for any free port).
    pub async fn start_on(config: Config, addr: SocketAddr) -> Result<Gateway, StartError> {
        Gateway::start_with(config, addr, StartOptions::default()).await
    }

    /// Starts a gateway on `addr` with options such as an admin token.
    pub async fn start_with(
        config: Config,
        addr: SocketAddr,
        options: StartOptions,
    ) -> Result<Gateway, StartError> {
        let listener = TcpListener::bind(addr).await?;
        let addr = listener.local_addr()?;
        let admin = bind_admin(&config).await?;
        let admin_addr = admin.as_ref().map(|a| a.local_addr()).transpose()?;
        let (stop, stopped) = oneshot::channel::<()>();
        let (state, writer) = AppState::new(config, options).await?;
        // Tests read recent records and wait for idle; `run` (production) never turns it on.
        state.telemetry.observe();
        let shutdown = async move {
            let _ = stopped.await;
        };
        // No drain delay: a program that stops its own gateway has no load balancer to tell.
        let task = tokio::spawn(serve_state(
            listener,
            admin,
            state.clone(),
            writer,
            shutdown,
            Duration::ZERO,
        ));
        Ok(Gateway {
            addr,
            admin_addr,
            state,
            stop: Some(stop),
            task,
        })
    }

    /// Starts a gateway on an ephemeral loopback port.
    pub async fn start(config: Config) -> Result<Gateway, StartError> {
        Gateway::start_on(config, SocketAddr::from(([127, 0, 0, 1], 0))).await
    }

    /// Where it listens.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The admin API's base url: its own address if it has one, else the gateway's.
    pub fn admin_url(&self) -> String {
        format!("http://{}", self.admin_addr.unwrap_or(self.addr))
    }

    /// `http://addr`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The provider keys it uses, to add or bench keys from a test or an embedding program.
    pub fn keys(&self) -> &ProviderKeys {
        &self.state.keys
    }

    /// Puts a provider key through the store, as the admin API does; used by the next request.
    pub async fn put_provider_key(
        &self,
        provider: &str,
        id: &str,
        secret: &str,
    ) -> Result<i64, StartError> {
        let version = self.state.keys.put(provider, id, secret, 1, None).await?;
        self.state.reload_now().await?;
        Ok(version)
    }

    /// The store it reads virtual keys (and more) from.
    pub fn store(&self) -> &Store {
        &self.state.store
    }

    /// Resolves once the gateway has loaded the store's current virtual keys.
    pub async fn keys_current(&self) {
        if let Ok(generation) = self.state.store.generation().await {
            self.state.directory.wait_for_generation(generation).await;
        }
    }

    /// The limits (budgets included) this gateway holds for the virtual key `key` (whole,
    /// `sy-…`), as its next request would apply them; `None` for a key it does not admit.
    pub fn key_limits(&self, key: &str) -> Option<LimitOverrides> {
        let mut headers = axum::http::HeaderMap::new();
        let bearer = axum::http::HeaderValue::from_str(&format!("Bearer {key}")).ok()?;
        headers.insert(axum::http::header::AUTHORIZATION, bearer);
        let caller = self.state.directory.authenticate(&headers).ok()?;
        caller.key.map(|k| k.limits.clone())
    }

    /// Reads the config file again and applies it, as `SIGHUP` and `POST /admin/reload` do.
    pub async fn reload(&self) -> Result<Reloaded, ReloadError> {
        self.state.reload_config().await
    }

    /// Every deployment's breaker, as the admin API shows them.
    pub fn health(&self) -> &Health {
        &self.state.health
    }

    /// Resolves once the count of open client connections satisfies `ready`.
    pub async fn wait_connections(&self, ready: impl FnMut(&usize) -> bool) {
        let mut open = self.state.open_connections.subscribe();
        // The sender lives in the state we hold, so the channel cannot close while we wait.
        let _ = open.wait_for(ready).await;
    }

    /// The request log's sending side, to read recent records.
    pub fn telemetry(&self) -> &Telemetry {
        &self.state.telemetry
    }

    /// Begins a graceful shutdown and waits for it: in-flight requests finish first.
    pub async fn shutdown(self) -> Result<(), StartError> {
        let Gateway {
            state, stop, task, ..
        } = self;
        // Our handle on the state holds a sender of the request log; the writer only
        // finishes its flush once every sender is gone.
        drop(state);
        if let Some(stop) = stop {
            let _ = stop.send(());
        }
        match task.await {
            Ok(result) => result,
            Err(join) => Err(StartError::Listen(std::io::Error::other(join))),
        }
    }
}

/// `/metrics` in the Prometheus text format.
async fn metrics(_: admin::Observer, State(state): State<AppState>) -> Response {
    admin::breakers::export(&state);
    let unreadable = i64::try_from(state.keys.unreadable_rows()).unwrap_or(i64::MAX);
    state
        .telemetry
        .metrics
        .provider_keys_unreadable
        .set(unreadable);
    let body = state.telemetry.metrics.render();
    (
        [(
            axum::http::header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        body,
    )
        .into_response()
}

async fn healthz() -> &'static str {
    "ok"
}

async fn readyz(State(state): State<AppState>) -> Response {
    let limits = state.limits();
    let limits_healthy = limits.healthy();
    let failing_closed = !limits_healthy && limits.fail_mode() == FailMode::Closed;
    let store_problem = state.readiness.store_problem();
    let log = state.telemetry.health();
    let log_refusing = state.telemetry.refusing();
    let status = if state.draining.load(Ordering::SeqCst) {
        "draining"
    } else if !limits_healthy || store_problem.is_some() || log_refusing {
        "degraded"
    } else {
        "ready"
    };
    let body = Json(json!({
        "status": status,
        "limits": {
            "backend": limits.backend_name(),
            "healthy": limits_healthy,
            "error": limits.problem(),
            "on_backend_error": match limits.fail_mode() {
                FailMode::Open => "open",
                FailMode::Closed => "closed",
            },
            // Releases that failed while Redis was away, sent again once it answers.
            "pending_releases": limits.pending_releases(),
        },
        // Requests are still served from cached keys while the store is down, so this
        // degrades readiness without taking the instance out of rotation.
        "store": {
            "healthy": store_problem.is_none(),
            "error": store_problem,
        },
        "log": log,
        // Provider-key rows that do not decrypt are skipped; the rest keep reloading. A
        // provider with no usable key leaves the instance ready (its steps are skipped and
        // the chain falls back, on every instance alike), but it is named here.
        "keys": {
            "unreadable_rows": state.keys.unreadable_rows(),
            "providers_without_usable_key": state.providers_without_usable_key(),
        },
        // Breakers that cannot be shared still protect this instance, so this is detail
        // only: the instance stays in rotation.
        "breakers": breakers_readiness(&state),
    }));
    // Fail-closed limits (or a full log that refuses) refuse every request, so a load
    // balancer should look elsewhere.
    let code = if status == "draining" || failing_closed || log_refusing {
        StatusCode::SERVICE_UNAVAILABLE
    } else {
        StatusCode::OK
    };
    (code, body).into_response()
}

/// Whether breakers are shared with the cluster, and if they should be but are not, why.
fn breakers_readiness(state: &AppState) -> serde_json::Value {
    match state.health.link() {
        None => json!({ "mode": "local", "shared": false, "error": null }),
        Some(link) => json!({
            "mode": "cluster",
            "shared": link.shared(),
            "error": link.problem(),
        }),
    }
}

async fn not_found(uri: axum::http::Uri) -> Response {
    let path = uri.path();
    // An Anthropic client that mistypes a path still gets an error its SDK can read.
    let format = if path.starts_with("/v1/messages") {
        crate::providers::ClientFormat::Anthropic
    } else {
        crate::providers::ClientFormat::OpenAi
    };
    ApiError::NotFound(path.to_owned()).into_response_for(format)
}

async fn method_not_allowed() -> ApiError {
    ApiError::MethodNotAllowed
}
