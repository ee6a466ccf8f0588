//! The admin API for virtual keys: create (the key itself is in that answer only), list,
//! get, update and revoke. A change is in effect for this gateway's next request (it reloads
//! its keys before answering), and for other processes on the store within their watcher's
//! poll.
//!
//! Keys are addressed by id, never by the key itself, so a secret never ends up in a URL.
//! Revoking is idempotent: revoking a revoked key answers 200 with the key as it stands.

mod body;

use axum::Json;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use serde_json::{Value, json};

use super::Admin;
use super::keys::reload;
use crate::auth::{issue, usd};
use crate::server::{ApiError, AppState};
use crate::store::{StoreError, VirtualKey, now_ms};
use body::{CreateKey, UpdateKey, parse};

/// Issues a key; the answer carries it whole as `secret`, the only time it is shown.
pub async fn create(
    _: Admin,
    State(state): State<AppState>,
    body: Bytes,
) -> Result<(StatusCode, Json<Value>), ApiError> {
    let body: CreateKey = parse(&body)?;
    let now = now_ms();
    let (request, expires_ms) = body.into_request(state.config(), now)?;
    let mut issued = issue(request).map_err(|e| {
        tracing::error!(error = %e, "cannot draw random bytes for a virtual key");
        ApiError::Internal("cannot make a key: the system's random source failed")
    })?;
    issued.record.expires_ms = expires_ms;
    state
        .store
        .insert_virtual_key(issued.record.clone())
        .await
        .map_err(store_failed)?;
    reload(&state).await?;
    let record = &issued.record;
    tracing::info!(id = %record.id, user = %record.user, role = %record.role, "virtual key created");
    let mut answer = view(record, now);
    answer["secret"] = Value::String(issued.key);
    Ok((StatusCode::CREATED, Json(answer)))
}

/// Every key, revoked and expired ones included, masked.
pub async fn list(_: Admin, State(state): State<AppState>) -> Result<Json<Value>, ApiError> {
    let now = now_ms();
    let keys = state.store.virtual_keys().await.map_err(store_failed)?;
    let keys: Vec<Value> = keys.iter().map(|k| view(k, now)).collect();
    Ok(Json(json!({ "virtual_keys": keys })))
}

/// One key, masked.
pub async fn get(
    _: Admin,
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let key = find(&state, &id).await?;
    Ok(Json(view(&key, now_ms())))
}

/// Changes a live key's role, permissions, models, limits, budgets or expiry.
pub async fn update(
    _: Admin,
    State(state): State<AppState>,
    Path(id): Path<String>,
    body: Bytes,
) -> Result<Json<Value>, ApiError> {
    let body: UpdateKey = parse(&body)?;
    let mut key = find(&state, &id).await?;
    if key.revoked_ms.is_some() {
        return Err(revoked(&id));
    }
    let now = now_ms();
    body.apply(&mut key, state.config(), now)?;
    if !state
        .store
        .update_virtual_key(key.clone())
        .await
        .map_err(store_failed)?
    {
        // Revoked between the read and the write.
        return Err(revoked(&id));
    }
    reload(&state).await?;
    tracing::info!(id = %key.id, user = %key.user, role = %key.role, "virtual key updated");
    Ok(Json(view(&key, now)))
}

/// Revokes a key; revoking it again answers the same, with the first revocation's time.
pub async fn revoke(
    _: Admin,
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let key = find(&state, &id).await?;
    if key.revoked_ms.is_none() {
        state
            .store
            .revoke_virtual_key(&key.id)
            .await
            .map_err(store_failed)?;
        reload(&state).await?;
        tracing::info!(id = %key.id, user = %key.user, "virtual key revoked");
    }
    let key = find(&state, &id).await?;
    Ok(Json(view(&key, now_ms())))
}

/// A key as the admin API shows it: masked, never the key or its hash.
fn view(key: &VirtualKey, now: i64) -> Value {
    json!({
        "id": key.id,
        "key": key.masked(),
        "user": key.user,
        "role": key.role,
        "permissions": key.permissions,
        "models": key.models,
        "requests_per_minute": key.limits.requests_per_minute,
        "tokens_per_minute": key.limits.tokens_per_minute,
        "max_concurrent": key.limits.max_concurrent,
        "budget_per_day": key.limits.budget_per_day_micros.map(usd::to_json),
        "budget_per_month": key.limits.budget_per_month_micros.map(usd::to_json),
        "created_ms": key.created_ms,
        "expires_ms": key.expires_ms,
        "revoked_ms": key.revoked_ms,
        "state": key.state(now),
    })
}

async fn find(state: &AppState, id: &str) -> Result<VirtualKey, ApiError> {
    if id.starts_with("sy-") {
        // Said without echoing it: this is the secret itself, not an id.
        return Err(ApiError::Missing(
            "that is a key, not a key id: address keys by the id that create and list show".into(),
        ));
    }
    let keys = state.store.virtual_keys().await.map_err(store_failed)?;
    keys.into_iter()
        .find(|k| k.id == id)
        .ok_or_else(|| ApiError::Missing(format!("no virtual key has id `{id}`")))
}

fn revoked(id: &str) -> ApiError {
    ApiError::Conflict(format!(
        "virtual key `{id}` is revoked and cannot change; create a new one"
    ))
}

fn store_failed(error: StoreError) -> ApiError {
    tracing::error!(error = %error, "virtual key operation failed");
    ApiError::Internal("the key store failed; see the gateway's log")
}
