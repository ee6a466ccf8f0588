//! The lines a gateway logs once it is ready: one per concern, so an operator can tell at a
//! glance where state lives and what was loaded, before the first request.

use std::net::SocketAddr;

use super::AppState;
use crate::config::LimitBackend;

/// Logs the summary, then that the gateway listens; nothing before this may say "listening",
/// because everything that can stop a start has happened by now.
pub(super) fn announce(state: &AppState, addr: SocketAddr, admin: Option<SocketAddr>) {
    let config = state.config();
    let store = match (&state.store, config.store.url.strip_prefix("sqlite://")) {
        (crate::store::Store::Postgres(pg), _) => {
            format!("PostgreSQL at {}, shared by every instance", pg.shown())
        }
        (_, Some(path)) => format!("SQLite file {path}"),
        (_, None) => "SQLite in memory: nothing outlives this process".to_owned(),
    };
    tracing::info!("store: {store}");
    let limiter = match config.limits.backend {
        LimitBackend::Memory => "in memory (exact for this one instance)".to_owned(),
        LimitBackend::Redis => format!(
            "Redis, shared by every instance with prefix `{}`",
            config.limits.key_prefix
        ),
    };
    tracing::info!("limits: {limiter}");
    let without_key = state.providers_without_usable_key();
    if without_key.is_empty() {
        tracing::info!("provider keys: from the store; every provider that needs one has one");
    } else {
        tracing::warn!(
            "provider keys: no usable key for {}; their steps are skipped as no_key until one is put",
            without_key.join(", ")
        );
    }
    tracing::info!(
        sha256 = %state.live.stamp.sha256,
        "config: {} route(s), {} provider(s), {} role(s)",
        config.routes.len(),
        config.providers.len(),
        config.roles.len()
    );
    let admin_api = match (&state.admin_token, admin) {
        (None, _) => "off (no admin token)".to_owned(),
        (Some(_), Some(admin)) => format!("on http://{admin}"),
        (Some(_), None) => format!("on http://{addr}"),
    };
    tracing::info!("admin API: {admin_api}");
    tracing::info!(%addr, "switchyard listening on http://{addr}");
}
