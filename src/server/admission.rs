//! Who may send a request, and whether their limits let it in: the checks every API
//! endpoint makes before routing.

use axum::http::{HeaderMap, HeaderName};

use super::AppState;
use super::error::ApiError;
use crate::auth::{AuthFailure, Caller, Denied};
use crate::limits::{Decision, Permit};
use crate::telemetry::RecordGuard;

/// The request header that skips step 0, for operators demoing degraded paths.
pub const FORCE_FALLBACK: &str = "x-switchyard-force-fallback";
/// The same, as a name: looking a `&str` up parses it into one on every request.
const FORCE_FALLBACK_HEADER: HeaderName = HeaderName::from_static(FORCE_FALLBACK);

/// Recognises the caller and notes them in the request's record.
pub async fn authenticate(
    state: &AppState,
    headers: &HeaderMap,
    guard: &mut RecordGuard,
) -> Result<Caller, ApiError> {
    // A key made a moment ago may be in the store before the watcher loads it: it is looked
    // for there before it is refused (or, without required auth, taken as anonymous).
    let caller = state
        .authenticate(headers)
        .await
        .map_err(|failure| match failure {
            AuthFailure::Missing => {
                ApiError::Unauthorized("a virtual key is required: send Authorization: Bearer sy-…")
            }
            AuthFailure::Invalid => ApiError::Unauthorized("the virtual key is unknown or revoked"),
            AuthFailure::Expired(key) => {
                // The row names whose key it was, so an operator sees why a user is refused.
                let record = guard.record();
                record.user = Some(key.user.clone());
                record.key_id = Some(key.id.clone());
                ApiError::Unauthorized("the virtual key has expired")
            }
        })?;
    let record = guard.record();
    record.user = Some(String::from(&*caller.user));
    record.key_id = caller.key.as_ref().map(|k| k.id.clone());
    Ok(caller)
}

/// Whether the caller may use `model` and, if asked, skip step 0. Returns the first step.
pub fn authorize(
    state: &AppState,
    caller: &Caller,
    model: &str,
    headers: &HeaderMap,
) -> Result<usize, ApiError> {
    caller
        .may_use(state.config(), model)
        .map_err(|denied| match denied {
            Denied::DirectName => ApiError::Forbidden(
                "direct provider/model names other than a route's steps are not enabled: use a route, or see [auth] direct_models",
            ),
            Denied::Role => ApiError::Forbidden("this caller's role may not use that model"),
            Denied::Key => ApiError::Forbidden("this virtual key may not use that model"),
        })?;
    let forced = headers
        .get(FORCE_FALLBACK_HEADER)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.eq_ignore_ascii_case("true"));
    if forced && !state.config().debug.allow_force_fallback && !caller.has_permission("debug") {
        return Err(ApiError::Forbidden(
            "x-switchyard-force-fallback needs a key with the debug permission, or [debug] allow_force_fallback = true",
        ));
    }
    Ok(usize::from(forced))
}

/// Takes the caller's limits: a permit to hold for the request's whole life, or a refusal.
pub async fn admit(
    state: &AppState,
    caller: &Caller,
    request_id: &str,
) -> Result<Permit, ApiError> {
    match state.limits().admit(caller, request_id).await {
        Ok(Decision::Admit(permit)) => Ok(permit),
        Ok(Decision::Refuse(refusal)) => Err(ApiError::RateLimited(refusal)),
        Err(_) => Err(ApiError::LimitsUnavailable),
    }
}

// Rate headers are part of the answer's shape, so `error` owns them; admission only uses them.
pub use super::error::add_rate_headers;
