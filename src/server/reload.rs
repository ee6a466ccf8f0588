//! Live config reload: `SIGHUP` and `POST /admin/reload` read the config file again.
//!
//! The file is validated exactly as `switchyard check` and `serve` validate it
//! ([`super::preflight`]); a file with any error changes nothing. A valid one is
//! swapped in whole with one atomic store: a request takes the [`Live`] config once, when it
//! begins, and keeps it to its end, so requests in flight finish on the config they started
//! with and the next one takes the new config. What lives outside [`Live`] is kept: every
//! breaker, latency estimate and round robin (in [`crate::router::Health`], keyed by
//! deployment and route), and every limit count (the limiter's backend, keyed by user).
//! Settings that only a restart can apply (the listen addresses, the store, the limit
//! backend...) keep their running value and are named in the answer and the log.

mod restart;

use std::path::PathBuf;
use std::sync::{Arc, Weak};

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::json;
use sha2::{Digest, Sha256};

use super::admin::Admin;
use super::{AppState, Shared};
use crate::budgets::Budgets;
use crate::config::{Config, ConfigError, FieldError, Route};
use crate::limits::Limits;
use crate::store::now_ms;
use crate::telemetry::metrics::ConfigStamp;

/// What the config file decides: swapped whole by a reload.
pub struct Live {
    pub config: Config,
    /// The config's routes, each shared with the requests that resolved it.
    pub routes: Vec<Arc<Route>>,
    /// The config's roles and fail mode over the limiter's one backend.
    pub limits: Limits,
    /// The config's budgets over the one spend backend.
    pub budgets: Budgets,
    /// Which config this is, for the admin answer and the metrics.
    pub stamp: ConfigStamp,
}

impl Live {
    /// A config made live now.
    pub fn new(config: Config, limits: Limits, budgets: Budgets) -> Live {
        let stamp = ConfigStamp {
            sha256: digest(&config),
            loaded_at_ms: now_ms(),
        };
        Live {
            routes: config.routes.iter().cloned().map(Arc::new).collect(),
            config,
            limits,
            budgets,
            stamp,
        }
    }
}

/// The config's digest: its `Debug` form shows every setting and masks every secret, so
/// the digest says which config runs without being a way to guess a token.
fn digest(config: &Config) -> String {
    let hash = Sha256::digest(format!("{config:?}").as_bytes());
    hash.iter().take(8).map(|b| format!("{b:02x}")).collect()
}

/// The file a reload reads, and the lock that keeps two reloads from interleaving.
pub struct Reloads {
    path: Option<PathBuf>,
    one_at_a_time: tokio::sync::Mutex<()>,
}

impl Reloads {
    pub fn new(path: Option<PathBuf>) -> Reloads {
        Reloads {
            path,
            one_at_a_time: tokio::sync::Mutex::new(()),
        }
    }
}

/// A reload that was applied.
#[derive(Clone, Debug)]
pub struct Reloaded {
    /// The config live now.
    pub stamp: ConfigStamp,
    /// Settings the file changes that only a restart applies; their running values stay.
    pub needs_restart: Vec<FieldError>,
}

/// Why a reload changed nothing.
#[derive(Debug, thiserror::Error)]
pub enum ReloadError {
    #[error("this gateway was not started from a config file, so there is nothing to reload")]
    NoFile,
    #[error("{0}")]
    Unreadable(String),
    #[error("the config has {} error(s), nothing was changed: {}", .0.len(), join(.0))]
    Invalid(Vec<FieldError>),
}

fn join(errors: &[FieldError]) -> String {
    let all: Vec<String> = errors.iter().map(FieldError::to_string).collect();
    all.join("; ")
}

impl Shared {
    /// Reads the config file again and, if it is valid, makes it live; logs and counts
    /// the result either way.
    pub async fn reload_config(&self) -> Result<Reloaded, ReloadError> {
        let _one = self.reloads.one_at_a_time.lock().await;
        let result = self.load_and_apply().await;
        self.telemetry.metrics.reload.reloaded(result.is_ok());
        match &result {
            Ok(reloaded) => {
                tracing::info!(sha256 = %reloaded.stamp.sha256, "config reloaded");
                for field in &reloaded.needs_restart {
                    tracing::warn!(field = %field.field, "config reload: {field}");
                }
            }
            Err(ReloadError::Invalid(errors)) => {
                for error in errors {
                    tracing::error!(field = %error.field, "config reload refused: {error}");
                }
            }
            Err(e) => tracing::error!("config reload refused: {e}"),
        }
        result
    }

    async fn load_and_apply(&self) -> Result<Reloaded, ReloadError> {
        let path = self.reloads.path.clone().ok_or(ReloadError::NoFile)?;
        // Reading files (the config, the token file) blocks; keep it off the runtime.
        let loaded = tokio::task::spawn_blocking(move || {
            let config = Config::load(&path)?;
            super::preflight(&config).map_err(ConfigError::Invalid)?;
            Ok::<Config, ConfigError>(config)
        })
        .await
        .map_err(|e| ReloadError::Unreadable(format!("the reload stopped: {e}")))?;
        let config = match loaded {
            Ok(config) => config,
            Err(ConfigError::Invalid(errors)) => return Err(ReloadError::Invalid(errors)),
            Err(e) => return Err(ReloadError::Unreadable(e.to_string())),
        };
        let running = self.live();
        let (config, needs_restart) = restart::keep_running(&running.config, config);
        self.keys.set_providers(&config);
        self.seed_added_providers(&running.config, &config).await;
        let limits = running.limits.reconfigured(&config);
        let budgets = running.budgets.reconfigured(&config);
        let metrics = &self.telemetry.metrics;
        self.telemetry.reconfigure(&config);
        let live = Live::new(config, limits, budgets);
        let stamp = live.stamp.clone();
        self.live.store(Arc::new(live));
        metrics.reload.loaded(&stamp);
        Ok(Reloaded {
            stamp,
            needs_restart,
        })
    }
}

impl Shared {
    /// Stores the `api_key_env` keys of the providers `new` adds, and loads them before the
    /// new config goes live, so its first request finds them.
    async fn seed_added_providers(&self, running: &Config, new: &Config) {
        let mut added = new.clone();
        added
            .providers
            .retain(|p| running.provider(&p.id).is_none());
        if added.providers.is_empty() {
            return;
        }
        let seeded = async {
            self.keys
                .seed_from_env(&added)
                .await
                .map_err(|e| e.to_string())?;
            self.reload_now().await.map_err(|e| e.to_string())?;
            Ok::<(), String>(())
        };
        if let Err(e) = seeded.await {
            tracing::warn!(error = %e, "config reload: cannot store the new providers' keys");
        }
    }
}

/// `POST /admin/reload`: 200 with the config now live and what needs a restart; 422 in the
/// API's error shape, naming every field at fault, when the file is invalid.
pub async fn answer(_: Admin, State(state): State<AppState>) -> Response {
    match state.reload_config().await {
        Ok(reloaded) => Json(json!({
            "status": "reloaded",
            "config": {
                "sha256": reloaded.stamp.sha256,
                "loaded_at_ms": reloaded.stamp.loaded_at_ms,
            },
            "needs_restart": fields(&reloaded.needs_restart),
        }))
        .into_response(),
        Err(error) => {
            let (status, code, errors) = match &error {
                ReloadError::NoFile => (StatusCode::CONFLICT, "no_config_file", &[][..]),
                ReloadError::Unreadable(_) => (
                    StatusCode::UNPROCESSABLE_ENTITY,
                    "config_unreadable",
                    &[][..],
                ),
                ReloadError::Invalid(errors) => (
                    StatusCode::UNPROCESSABLE_ENTITY,
                    "config_invalid",
                    errors.as_slice(),
                ),
            };
            let body = json!({
                "error": {
                    "message": error.to_string(),
                    "type": "invalid_request_error",
                    "param": errors.first().map(|e| e.field.as_str()),
                    "code": code,
                    "fields": fields(errors),
                }
            });
            (status, Json(body)).into_response()
        }
    }
}

fn fields(errors: &[FieldError]) -> Vec<serde_json::Value> {
    errors
        .iter()
        .map(|e| json!({ "field": e.field, "message": e.message }))
        .collect()
}

/// Starts listening for `SIGHUP` now, so one that arrives while the gateway starts waits
/// for it instead of ending the process (the signal's default).
#[cfg(unix)]
pub fn hangups() -> Option<tokio::signal::unix::Signal> {
    use tokio::signal::unix::{SignalKind, signal};
    signal(SignalKind::hangup())
        .inspect_err(|e| tracing::warn!(error = %e, "cannot listen for SIGHUP: reload with POST /admin/reload"))
        .ok()
}

#[cfg(not(unix))]
pub fn hangups() -> Option<()> {
    None
}

/// Reloads on every `SIGHUP` for as long as the gateway lives. It holds the state only
/// while reloading, so it never keeps a stopping gateway (and its request log) open.
#[cfg(unix)]
pub fn on_hangup(hangups: Option<tokio::signal::unix::Signal>, state: Weak<Shared>) {
    let Some(mut hangups) = hangups else {
        return;
    };
    tokio::spawn(async move {
        while hangups.recv().await.is_some() {
            let Some(shared) = state.upgrade() else {
                return;
            };
            tracing::info!("SIGHUP: reloading the config");
            // The result is logged and counted by the reload itself.
            let _ = shared.reload_config().await;
        }
    });
}

#[cfg(not(unix))]
pub fn on_hangup(_: Option<()>, _: Weak<Shared>) {}
