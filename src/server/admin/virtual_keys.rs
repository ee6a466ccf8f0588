//! The admin API for virtual keys: create (the key itself is in that answer only), list,
//! get, update and revoke. A change is in effect for this gateway's next request (it reloads
//! its keys before answering), and for other processes on the store within their watcher's
//! poll.
//!
//! Keys are addressed by id, never by the key itself, so a secret never ends up in a URL.
//! Revoking is idempotent: revoking a revoked key answers 200 with the key as it stands.

use std::time::Duration;

use axum::Json;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Deserializer};
use serde_json::{Value, json};

use super::Admin;
use super::keys::reload;
use crate::auth::{Invalid, KeyRequest, issue, validate};
use crate::config::parse_duration;
use crate::keys::provider_keys::MAX_EXPIRES_IN_DAYS;
use crate::server::{ApiError, AppState};
use crate::store::{LimitOverrides, StoreError, VirtualKey, now_ms};

/// `POST /admin/virtual-keys`'s body.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CreateKey {
    user: String,
    role: String,
    #[serde(default)]
    permissions: Vec<String>,
    /// Routes and `provider/model` patterns; all when absent or null.
    models: Option<Vec<String>>,
    requests_per_minute: Option<u64>,
    tokens_per_minute: Option<u64>,
    max_concurrent: Option<u64>,
    /// A duration such as `"30d"`.
    expires_in: Option<String>,
    /// Milliseconds since the epoch.
    expires_ms: Option<i64>,
}

/// `PATCH /admin/virtual-keys/{id}`'s body: what it names changes, the rest stays. A null
/// clears: `models` to all, a limit to the role's, `expires_ms` to never.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UpdateKey {
    role: Option<String>,
    permissions: Option<Vec<String>>,
    #[serde(default, deserialize_with = "present")]
    models: Option<Option<Vec<String>>>,
    #[serde(default, deserialize_with = "present")]
    requests_per_minute: Option<Option<u64>>,
    #[serde(default, deserialize_with = "present")]
    tokens_per_minute: Option<Option<u64>>,
    #[serde(default, deserialize_with = "present")]
    max_concurrent: Option<Option<u64>>,
    expires_in: Option<String>,
    #[serde(default, deserialize_with = "present")]
    expires_ms: Option<Option<i64>>,
}

/// Tells a field that is null (`Some(None)`) from one that is absent (`None`, by default).
fn present<'de, T: Deserialize<'de>, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<Option<T>>, D::Error> {
    Option::<T>::deserialize(deserializer).map(Some)
}

/// Issues a key; the answer carries it whole as `secret`, the only time it is shown.
pub async fn create(
    _: Admin,
    State(state): State<AppState>,
    body: Bytes,
) -> Result<(StatusCode, Json<Value>), ApiError> {
    let body: CreateKey = parse(&body)?;
    let now = now_ms();
    let expires_ms = expiry(body.expires_in.as_deref(), body.expires_ms, now)?;
    let request = KeyRequest {
        user: body.user,
        role: body.role,
        permissions: body.permissions,
        models: body.models,
        limits: LimitOverrides {
            requests_per_minute: body.requests_per_minute,
            tokens_per_minute: body.tokens_per_minute,
            max_concurrent: body.max_concurrent,
        },
    };
    request.validate(&state.config).map_err(refused)?;
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

/// Changes a live key's role, permissions, models, limits or expiry.
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
    let config = &state.config;
    let mut changed = false;
    if let Some(role) = body.role {
        validate::role(config, &role).map_err(refused)?;
        key.role = role;
        changed = true;
    }
    if let Some(permissions) = body.permissions {
        validate::permissions(&permissions).map_err(refused)?;
        key.permissions = permissions;
        changed = true;
    }
    if let Some(models) = body.models {
        if let Some(models) = &models {
            validate::models(config, models).map_err(refused)?;
        }
        key.models = models;
        changed = true;
    }
    let limits = [
        (
            body.requests_per_minute,
            &mut key.limits.requests_per_minute,
        ),
        (body.tokens_per_minute, &mut key.limits.tokens_per_minute),
        (body.max_concurrent, &mut key.limits.max_concurrent),
    ];
    for (new, limit) in limits {
        if let Some(new) = new {
            *limit = new;
            changed = true;
        }
    }
    validate::limits(&key.limits).map_err(refused)?;
    match (body.expires_in.as_deref(), body.expires_ms) {
        (None, None) => {}
        (None, Some(None)) => {
            key.expires_ms = None;
            changed = true;
        }
        (Some(_), Some(_)) => return Err(both_expiries()),
        (expires_in, expires_ms) => {
            key.expires_ms = expiry(expires_in, expires_ms.flatten(), now)?;
            changed = true;
        }
    }
    if !changed {
        return Err(invalid(
            None,
            "the body changes nothing: give one or more of role, permissions, models, \
             requests_per_minute, tokens_per_minute, max_concurrent, expires_in, expires_ms",
        ));
    }
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

/// When a key given `expires_in` or `expires_ms` expires: in the future, at most a hundred
/// years ahead (as provider keys).
fn expiry(
    expires_in: Option<&str>,
    expires_ms: Option<i64>,
    now: i64,
) -> Result<Option<i64>, ApiError> {
    let max = Duration::from_secs(MAX_EXPIRES_IN_DAYS * 86_400);
    // Whole milliseconds of a hundred years: far inside an i64.
    let max_ms = i64::try_from(max.as_millis()).unwrap_or(i64::MAX);
    match (expires_in, expires_ms) {
        (None, None) => Ok(None),
        (Some(_), Some(_)) => Err(both_expiries()),
        (Some(text), None) => {
            let wait = parse_duration(text).map_err(|e| invalid(Some("expires_in"), &e))?;
            if wait.is_zero() || wait > max {
                return Err(invalid(
                    Some("expires_in"),
                    &format!("must be more than 0 and at most {MAX_EXPIRES_IN_DAYS}d"),
                ));
            }
            let wait = i64::try_from(wait.as_millis()).unwrap_or(max_ms);
            Ok(Some(now.saturating_add(wait)))
        }
        (None, Some(at)) if at <= now => Err(invalid(
            Some("expires_ms"),
            &format!("{at} lies in the past (now is {now}); to stop a key now, revoke it"),
        )),
        (None, Some(at)) if at - now > max_ms => Err(invalid(
            Some("expires_ms"),
            &format!("must be at most {MAX_EXPIRES_IN_DAYS} days ahead"),
        )),
        (None, Some(at)) => Ok(Some(at)),
    }
}

/// Parses a JSON body; the error says what is wrong (unknown fields included). Bodies here
/// carry no secret, so quoting them is safe.
fn parse<T: DeserializeOwned>(body: &[u8]) -> Result<T, ApiError> {
    serde_json::from_slice(body).map_err(|e| ApiError::InvalidRequest {
        message: format!("the body is not a valid request: {e}"),
        param: None,
    })
}

fn both_expiries() -> ApiError {
    invalid(
        Some("expires_in"),
        "give expires_in or expires_ms, not both",
    )
}

fn refused(error: Invalid) -> ApiError {
    ApiError::InvalidRequest {
        message: error.to_string(),
        param: Some(error.field),
    }
}

fn invalid(param: Option<&'static str>, message: &str) -> ApiError {
    ApiError::InvalidRequest {
        message: message.to_owned(),
        param,
    }
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
