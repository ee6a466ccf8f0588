//! The admin API's gate: a bearer token compared in constant time.
//!
//! Handlers take an [`Admin`] argument; the extractor answers 404 when no admin token is
//! configured (the admin API is off) and 401 for anything but the right token.

pub mod breakers;
pub mod keys;

use axum::extract::FromRequestParts;
use axum::http::header::AUTHORIZATION;
use axum::http::request::Parts;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use super::{ApiError, AppState};

/// Proof that the request carried the admin token.
pub struct Admin;

impl FromRequestParts<AppState> for Admin {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Admin, ApiError> {
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

/// Compares digests, so neither the content nor the length of the token leaks through timing.
fn token_matches(offered: &str, expected: &str) -> bool {
    let offered = Sha256::digest(offered.as_bytes());
    let expected = Sha256::digest(expected.as_bytes());
    bool::from(offered.ct_eq(&expected))
}

#[cfg(test)]
mod tests {
    use super::token_matches;

    #[test]
    fn only_the_exact_token_matches() {
        assert!(token_matches("s3cret-token", "s3cret-token"));
        assert!(!token_matches("s3cret-toke", "s3cret-token"));
        assert!(!token_matches("", "s3cret-token"));
    }
}
