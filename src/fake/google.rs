//! The fake's Google auth, for Vertex steps: a token endpoint (`POST /token`) that takes a
//! service account's JWT assertion only when its RS256 signature verifies with the public key
//! it was given, and issues short-lived access tokens; and the check every Vertex request
//! must pass, that it carries one of those tokens, unexpired.

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use base64::Engine;
use base64::engine::general_purpose::{URL_SAFE, URL_SAFE_NO_PAD};
use ring::signature::{RSA_PKCS1_2048_8192_SHA256, UnparsedPublicKey};
use serde_json::{Value, json};

const JWT_BEARER: &str = "urn:ietf:params:oauth:grant-type:jwt-bearer";

/// Issues and checks access tokens.
pub struct GoogleIssuer {
    /// The service account's public key, as PKCS#1 `RSAPublicKey` DER.
    public_key: Vec<u8>,
    /// The `expires_in` of each token issued.
    lifetime: Duration,
    issued: Mutex<HashMap<String, Instant>>,
    requests: AtomicUsize,
}

impl GoogleIssuer {
    pub fn new(public_key: Vec<u8>, lifetime: Duration) -> GoogleIssuer {
        GoogleIssuer {
            public_key,
            lifetime,
            issued: Mutex::new(HashMap::new()),
            requests: AtomicUsize::new(0),
        }
    }

    /// Token requests received, granted or not.
    pub fn requests(&self) -> usize {
        self.requests.load(Ordering::SeqCst)
    }

    /// Answers a token request (a form body): the status and the JSON body.
    pub fn token(&self, body: &[u8]) -> (u16, String) {
        let number = self.requests.fetch_add(1, Ordering::SeqCst) + 1;
        if let Err(why) = self.verify(body) {
            let refusal = json!({"error": "invalid_grant", "error_description": why});
            return (400, refusal.to_string());
        }
        let token = format!("ya29.fake-token-{number}-{}", fastrand::u64(..));
        let expires = Instant::now() + self.lifetime;
        self.issued
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(token.clone(), expires);
        let granted = json!({"access_token": token, "expires_in": self.lifetime.as_secs(),
                             "token_type": "Bearer"});
        (200, granted.to_string())
    }

    /// Forgets every token issued: each is refused from now on, as a revoked one is.
    pub fn revoke(&self) {
        self.issued
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clear();
    }

    /// Whether `authorization` names a token this issued that has not expired.
    pub fn authorized(&self, authorization: Option<&str>) -> bool {
        let Some(token) = authorization.and_then(|v| v.strip_prefix("Bearer ")) else {
            return false;
        };
        let issued = self.issued.lock().unwrap_or_else(|e| e.into_inner());
        issued
            .get(token)
            .is_some_and(|expires| Instant::now() < *expires)
    }

    fn verify(&self, body: &[u8]) -> Result<(), String> {
        let form: HashMap<String, String> =
            url::form_urlencoded::parse(body).into_owned().collect();
        if form.get("grant_type").map(String::as_str) != Some(JWT_BEARER) {
            return Err("grant_type must be the JWT bearer grant".into());
        }
        let assertion = form.get("assertion").ok_or("no assertion")?;
        let parts: Vec<&str> = assertion.split('.').collect();
        let [header, claims, signature] = parts[..] else {
            return Err("the assertion is not a JWT".into());
        };
        let header: Value = serde_json::from_slice(&decode(header)?).map_err(|e| e.to_string())?;
        if header["alg"] != "RS256" {
            return Err("the JWT is not RS256".into());
        }
        let signed = &assertion[..header_and_claims_len(assertion)];
        UnparsedPublicKey::new(&RSA_PKCS1_2048_8192_SHA256, &self.public_key)
            .verify(signed.as_bytes(), &decode(signature)?)
            .map_err(|_| "the JWT's signature does not verify".to_owned())?;
        let claims: Value = serde_json::from_slice(&decode(claims)?).map_err(|e| e.to_string())?;
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs() as i64);
        let (iat, exp) = (claims["iat"].as_i64(), claims["exp"].as_i64());
        if !matches!((iat, exp), (Some(iat), Some(exp)) if iat <= now + 60 && now < exp && exp - iat <= 3600)
        {
            return Err("the JWT is not valid now, or for more than an hour".into());
        }
        let scope = claims["scope"].as_str().unwrap_or("");
        if !scope.contains("https://www.googleapis.com/auth/cloud-platform") {
            return Err("the JWT does not ask for the cloud-platform scope".into());
        }
        if !claims["aud"]
            .as_str()
            .is_some_and(|aud| aud.ends_with("/token"))
        {
            return Err("the JWT's audience is not this token endpoint".into());
        }
        if !claims["iss"].is_string() {
            return Err("the JWT names no issuer".into());
        }
        Ok(())
    }
}

/// The signed part of a JWT: everything before its last `.`.
fn header_and_claims_len(jwt: &str) -> usize {
    jwt.rfind('.').unwrap_or(0)
}

/// Base64url, padded or not (Google takes both).
fn decode(part: &str) -> Result<Vec<u8>, String> {
    URL_SAFE_NO_PAD
        .decode(part.trim_end_matches('='))
        .or_else(|_| URL_SAFE.decode(part))
        .map_err(|_| "a JWT part is not base64url".to_owned())
}
