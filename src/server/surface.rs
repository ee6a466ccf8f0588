//! The HTTP surface besides the client API's POST endpoints: the admin API, health,
//! metrics, and the answers to unknown paths and methods.

use super::{ApiError, AppState, ServerState};
use super::{admin, client_api, console, models, refusal, reload, responses, scorecard};
use crate::config::FailMode;
use axum::Json;
use axum::Router;
use axum::extract::{DefaultBodyLimit, FromRef, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde_json::json;
use std::sync::atomic::Ordering;

/// The HTTP surface beside the client API's POST endpoints, which the connection serves
/// before the router ([`client_api`]). The admin API is part of it unless `[server]
/// admin_listen` gives it an address of its own.
pub fn app(state: AppState) -> Router {
    let mut routes = Router::new();
    // Their POSTs never reach the router; the routes are here so that other methods get its
    // 405 rather than a 404, with an `Allow` that names POST (RFC 9110).
    for (path, _) in client_api::ENDPOINTS {
        routes = routes.route(path, post(served_before_the_router));
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
            .merge(console::routes())
    } else {
        routes
    };
    finish_router(routes, state)
}

/// The admin API and the observability endpoints, for `[server] admin_listen`.
pub fn admin_app(state: AppState) -> Router {
    let routes = admin_routes(&state)
        .merge(observability_routes())
        .merge(console::routes())
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
        .route("/admin/budgets", get(admin::budgets::show))
        .route("/admin/config", get(admin::config_view::show))
        .route("/admin/requests", get(admin::requests::list))
        .route("/admin/requests/{id}", get(admin::requests::one))
        .route("/admin/spend", get(admin::spend::report))
        .route(
            "/admin/cache",
            get(admin::cache::stats).delete(admin::cache::purge),
        )
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
        axum::middleware::from_fn_with_state(server.clone(), refusal::refuse_declared_oversize);
    routes
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(DefaultBodyLimit::max(limit))
        .layer(declared_length)
        .with_state(server)
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
    let cache = state.cache.by_route();
    state.telemetry.metrics.set_cache(
        cache
            .iter()
            .map(|(route, usage)| (route.as_str(), usage.bytes, usage.evictions)),
    );
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

/// A client API POST that reached the router: the connection serves them all before it
/// ([`client_api`]), so this is the gateway's own fault.
async fn served_before_the_router(uri: axum::http::Uri) -> ApiError {
    tracing::error!(path = uri.path(), "a client API POST reached the router");
    ApiError::Internal("the gateway could not serve this request")
}

async fn method_not_allowed() -> ApiError {
    ApiError::MethodNotAllowed
}
