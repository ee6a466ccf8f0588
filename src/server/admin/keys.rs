//! The admin API for provider keys: put (and rotate), list, roll back, remove. A change is
//! used by the next request: the gateway reloads its ring before answering.

use std::time::Duration;

use axum::Json;
use axum::body::Bytes;
use axum::extract::{Path, State};
use serde::Deserialize;
use serde_json::{Value, json};

use super::Admin;
use crate::config::parse_duration;
use crate::keys::provider_keys::{KeyError, MAX_EXPIRES_IN_DAYS};
use crate::server::{ApiError, AppState};

/// `PUT /admin/keys/{provider}`'s body. Its `Debug` never shows the secret.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PutKey {
    secret: String,
    id: Option<String>,
    weight: Option<u32>,
    /// A duration such as `"30d"`.
    expires_in: Option<String>,
}

/// `POST /admin/keys/{provider}/rollback`'s optional body.
#[derive(Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RollbackKey {
    id: Option<String>,
}

/// Stores a key, rotating an existing id.
pub async fn put(
    _: Admin,
    State(state): State<AppState>,
    Path(provider): Path<String>,
    body: Bytes,
) -> Result<Json<Value>, ApiError> {
    // Read as JSON whatever its content-type (`curl -d` says form-urlencoded). serde's error
    // could quote the body, secret included; say only what is wrong.
    let body: PutKey = serde_json::from_slice(&body)
        .map_err(|_| invalid("the body must be JSON: {secret, id?, weight?, expires_in?}"))?;
    let expires_in: Option<Duration> = body
        .expires_in
        .as_deref()
        .map(parse_duration)
        .transpose()
        .map_err(|message| ApiError::InvalidRequest {
        message,
        param: Some("expires_in"),
    })?;
    let id = body.id.unwrap_or_else(|| "default".into());
    let weight = body.weight.unwrap_or(1);
    let version = state
        .keys
        .put(&provider, &id, &body.secret, weight, expires_in)
        .await
        .map_err(key_error)?;
    reload(&state).await?;
    Ok(Json(
        json!({"provider": provider, "id": id, "version": version}),
    ))
}

/// Every key, secrets masked.
pub async fn list(_: Admin, State(state): State<AppState>) -> Result<Json<Value>, ApiError> {
    let keys = state.keys.list().await.map_err(key_error)?;
    Ok(Json(json!({ "keys": keys })))
}

/// Restores the version the last rotation replaced.
pub async fn rollback(
    _: Admin,
    State(state): State<AppState>,
    Path(provider): Path<String>,
    body: Bytes,
) -> Result<Json<Value>, ApiError> {
    // Optional, and JSON whatever its content-type.
    let body: RollbackKey = if body.iter().all(u8::is_ascii_whitespace) {
        RollbackKey::default()
    } else {
        serde_json::from_slice(&body).map_err(|_| invalid("the body must be JSON: {id?}"))?
    };
    let version = state
        .keys
        .rollback(&provider, body.id.as_deref())
        .await
        .map_err(key_error)?;
    reload(&state).await?;
    Ok(Json(json!({"provider": provider, "version": version})))
}

/// Removes a key and its history.
pub async fn remove(
    _: Admin,
    State(state): State<AppState>,
    Path((provider, id)): Path<(String, String)>,
) -> Result<Json<Value>, ApiError> {
    state
        .keys
        .remove(&provider, Some(&id))
        .await
        .map_err(key_error)?;
    reload(&state).await?;
    Ok(Json(
        json!({"provider": provider, "id": id, "removed": true}),
    ))
}

/// Loads the change this gateway just made, so its next request uses it.
pub(super) async fn reload(state: &AppState) -> Result<(), ApiError> {
    state.reload_now().await.map_err(|e| {
        tracing::error!(error = %e, "cannot reload keys after an admin change");
        ApiError::Internal("the change is stored, but this gateway could not reload it")
    })
}

fn invalid(message: &str) -> ApiError {
    ApiError::InvalidRequest {
        message: message.to_owned(),
        param: None,
    }
}

fn key_error(error: KeyError) -> ApiError {
    match error {
        KeyError::UnknownProvider(_) | KeyError::NoSuchKey { .. } => {
            ApiError::Missing(error.to_string())
        }
        KeyError::Store(_) | KeyError::Vault(_) => {
            tracing::error!(error = %error, "provider key operation failed");
            ApiError::Internal("the key store failed; see the gateway's log")
        }
        // The store's own message names the CLI's `--id`; over HTTP the id goes in the body.
        KeyError::AmbiguousKey(provider) => ApiError::InvalidRequest {
            message: format!(
                "`{provider}` has several keys: name one in the body, {{\"id\": \"…\"}}"
            ),
            param: Some("id"),
        },
        KeyError::BadExpiry => ApiError::InvalidRequest {
            message: format!("expires_in must be more than 0 and at most {MAX_EXPIRES_IN_DAYS}d"),
            param: Some("expires_in"),
        },
        _ => invalid(&error.to_string()),
    }
}
