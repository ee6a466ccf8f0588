//! A gateway's life: start, serve, drain, stop; in this process for tests and the demo.

use super::shards::Shards;
use super::{AppState, ReloadError, Reloaded, StartError, StartOptions, admin_app, app};
use super::{connection, listener, reload, startup};
use crate::config::Config;
use crate::keys::provider_keys::ProviderKeys;
use crate::router::Health;
use crate::store::{LimitOverrides, Store};
use crate::telemetry::{Telemetry, TelemetryWriter};
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

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

    /// Resolves once the limit backend's health satisfies `ready`: `None` while it answers,
    /// else why not, as `/readyz` shows it. Admissions and the once-a-second check both set it.
    pub async fn wait_limits(&self, ready: impl FnMut(&Option<&'static str>) -> bool) {
        let mut health = self.state.limits().health_changes();
        // The sender is shared by every reload's limits, which the state we hold keeps.
        let _ = health.wait_for(ready).await;
    }

    /// Resolves once the count of concurrency-slot releases kept for replay (see
    /// [`crate::limits::Limits::pending_releases`]) satisfies `ready`. Limits in memory keep
    /// none, so there it resolves only if `ready(&0)`, and otherwise never.
    pub async fn wait_pending_releases(&self, ready: impl FnMut(&usize) -> bool) {
        let mut pending = self.state.limits().pending_release_changes();
        if pending.wait_for(ready).await.is_err() {
            // Closed: the count can no longer change, and it did not satisfy `ready`.
            std::future::pending::<()>().await;
        }
    }

    /// The response cache, to wait on its coalesced misses.
    pub fn cache(&self) -> &crate::cache::Cache {
        &self.state.cache
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
