//! The admin API's gate: a bearer token compared in constant time; and the gate of the
//! observability endpoints (`/metrics`, `/v1/scorecard`, `/dashboard`).
//!
//! Handlers take an [`Admin`] argument; the extractor answers 404 when no admin token is
//! configured (the admin API is off) and 401 for anything but the right token. Handlers
//! that take an [`Observer`] follow the rules in its documentation.

pub mod breakers;
pub mod budgets;
pub mod cache;
pub mod config_view;
pub mod keys;
pub mod requests;
pub mod spend;
pub mod virtual_keys;

use axum::extract::{FromRef, FromRequestParts};
use axum::http::header::{AUTHORIZATION, WWW_AUTHENTICATE};
use axum::http::request::Parts;
use axum::http::{HeaderMap, HeaderValue};
use axum::response::{IntoResponse, Response};
use base64::Engine;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use super::{ApiError, AppState};

/// Proof that the request carried the admin token.
pub struct Admin;

impl<S: Send + Sync> FromRequestParts<S> for Admin
where
    AppState: FromRef<S>,
{
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Admin, ApiError> {
        let state = AppState::from_ref(state);
        let Some(expected) = &state.admin_token else {
            return Err(ApiError::NotFound(parts.uri.path().to_owned()));
        };
        let offered = parts
            .headers
            .get(AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .unwrap_or("");
        if token_matches(offered, expected.expose()) {
            Ok(Admin)
        } else {
            Err(ApiError::Unauthorized("a valid admin token is required"))
        }
    }
}

/// Marks requests that came in on `[server] admin_listen`, whose address is the boundary.
#[derive(Clone, Copy, Debug)]
pub struct OnAdminListener;

/// Proof that the caller may read the observability endpoints:
/// - on the admin listener: anyone, unless `[admin] metrics_token` is set; then that token
///   or the admin token;
/// - on the client port: the metrics token or the admin token; with neither configured the
///   endpoints are off there (403), so a gateway never shows them anonymously to clients.
///
/// A token comes as `Authorization: Bearer <token>`, or as HTTP Basic with the token as the
/// password (any user name), which is how a browser opens `/dashboard`.
pub struct Observer;

impl<S: Send + Sync> FromRequestParts<S> for Observer
where
    AppState: FromRef<S>,
{
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Observer, Response> {
        let state = AppState::from_ref(state);
        let metrics_token = state
            .config()
            .admin
            .metrics_token
            .as_ref()
            .map(|t| t.expose());
        let admin_token = state.admin_token.as_ref().map(|t| t.expose());
        let on_admin_listener = parts.extensions.get::<OnAdminListener>().is_some();
        if on_admin_listener && metrics_token.is_none() {
            return Ok(Observer);
        }
        if metrics_token.is_none() && admin_token.is_none() {
            return Err(ApiError::Forbidden(
                "/metrics, /v1/scorecard and /dashboard are off on this port: set [admin] metrics_token \
                 (or SWITCHYARD_ADMIN_TOKEN) and send it as a bearer token, or serve them on [server] admin_listen",
            )
            .into_response());
        }
        let offered = offered_token(&parts.headers).unwrap_or_default();
        // Both are compared, so the time taken does not tell which one is configured.
        let matches = [metrics_token, admin_token]
            .map(|expected| expected.is_some_and(|e| token_matches(&offered, e)));
        if matches.contains(&true) {
            return Ok(Observer);
        }
        let mut response = ApiError::Unauthorized(
            "a metrics token (or the admin token) is required: send Authorization: Bearer <token>",
        )
        .into_response();
        response.headers_mut().insert(
            WWW_AUTHENTICATE,
            HeaderValue::from_static("Basic realm=\"switchyard\", charset=\"UTF-8\""),
        );
        Err(response)
    }
}

/// The token in `Authorization`: a bearer token, or the password of HTTP Basic.
fn offered_token(headers: &HeaderMap) -> Option<String> {
    let value = headers.get(AUTHORIZATION)?.to_str().ok()?;
    if let Some(token) = value.strip_prefix("Bearer ") {
        return Some(token.to_owned());
    }
    let encoded = value.strip_prefix("Basic ")?;
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(encoded.trim())
        .ok()?;
    let decoded = String::from_utf8(decoded).ok()?;
    let (_user, password) = decoded.split_once(':')?;
    Some(password.to_owned())
}

/// Compares digests, so neither the content nor the length of the token leaks through timing.
fn token_matches(offered: &str, expected: &str) -> bool {
    let offered = Sha256::digest(offered.as_bytes());
    let expected = Sha256::digest(expected.as_bytes());
    bool::from(offered.ct_eq(&expected))
}

#[cfg(test)]
mod tests {
    use super::{offered_token, token_matches};
    use axum::http::HeaderMap;

    #[test]
    fn a_token_is_offered_as_bearer_or_as_the_basic_password() {
        let offered = |value: &str| {
            let mut headers = HeaderMap::new();
            headers.insert("authorization", value.parse().unwrap());
            offered_token(&headers)
        };
        assert_eq!(offered("Bearer t0k:en").as_deref(), Some("t0k:en"));
        // "anyone:t0k:en": the password is everything after the first colon.
        assert_eq!(
            offered("Basic YW55b25lOnQwazplbg==").as_deref(),
            Some("t0k:en")
        );
        assert_eq!(offered("Basic !!!"), None);
        assert_eq!(offered("Digest t0ken"), None);
        assert_eq!(offered_token(&HeaderMap::new()), None);
    }

    #[test]
    fn only_the_exact_token_matches() {
        assert!(token_matches("s3cret-token", "s3cret-token"));
        assert!(!token_matches("s3cret-toke", "s3cret-token"));
        assert!(!token_matches("", "s3cret-token"));
    }
}
