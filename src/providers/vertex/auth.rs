//! Access tokens for Vertex providers, made by `gcp_auth`: from a service account's key (a
//! JWT signed with RS256 and exchanged at the key's own `token_uri`), or from Application
//! Default Credentials (`GOOGLE_APPLICATION_CREDENTIALS`, gcloud's, the metadata server).
//!
//! `gcp_auth` caches a token for its lifetime but lets every caller that finds it expired
//! fetch a new one. Here one refresh runs at a time for each provider, and callers that
//! waited on it take its token: 100 requests arriving as a token expires cost one refresh.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use arc_swap::ArcSwapOption;
use gcp_auth::{CustomServiceAccount, Token, TokenProvider};

use crate::config::{GoogleCredentials, Provider, VertexSettings};
use crate::keys::KeyLease;
use crate::secret::Secret;

/// What Vertex's API needs a token for.
const SCOPES: &[&str] = &["https://www.googleapis.com/auth/cloud-platform"];

/// Every Vertex provider's token source, made at its first request.
#[derive(Default)]
pub struct GoogleTokens {
    sources: Mutex<HashMap<Arc<str>, Arc<Source>>>,
}

/// One provider's tokens.
struct Source {
    /// The settings it was made for: a reload that changes them makes a new one.
    settings: Arc<VertexSettings>,
    /// Made at the first refresh, and again after a refusal: `gcp_auth` keeps its tokens
    /// until they expire, so only a new one forgets a token the provider refused.
    provider: Mutex<Option<Arc<dyn TokenProvider>>>,
    current: ArcSwapOption<Token>,
    /// Held by the one refresh in flight.
    refreshing: tokio::sync::Mutex<()>,
    /// When the last refresh failed, and why: the callers that waited on it share its failure
    /// rather than each trying again (gcp_auth tries a refused grant five times, sleeping
    /// between tries).
    failed: Mutex<Option<(Instant, String)>>,
}

/// Why no token could be had; secret-free.
#[derive(Debug, thiserror::Error)]
#[error("no Google access token: {0}")]
pub struct TokenError(String);

impl GoogleTokens {
    /// A lease on `provider`'s current access token, refreshed first when it is about to
    /// expire.
    pub async fn lease(&self, provider: &Provider) -> Result<KeyLease, TokenError> {
        let Some(settings) = provider.vertex.clone() else {
            return Err(TokenError("the provider is not a Vertex one".into()));
        };
        let source = self.source(provider, settings);
        let token = source.token().await?;
        Ok(KeyLease {
            id: Arc::from(format!("{}:google-token", provider.id.as_str())),
            secret: Secret::new(token.as_str()),
        })
    }

    /// The provider refused `lease`'s token: it is dropped, unless a newer one replaced it.
    pub fn refused(&self, provider: &Provider, lease: &KeyLease) {
        let sources = self.sources.lock().unwrap_or_else(|e| e.into_inner());
        let Some(source) = sources.get(provider.id.as_str()).cloned() else {
            return;
        };
        drop(sources);
        let current = source.current.load_full();
        if let Some(token) = current.filter(|t| t.as_str() == lease.secret.expose()) {
            // The provider first: a refresh in between must not get the refused token back
            // from its cache.
            *source.provider.lock().unwrap_or_else(|e| e.into_inner()) = None;
            source
                .current
                .compare_and_swap(&Some(token), None::<Arc<Token>>);
        }
    }

    fn source(&self, provider: &Provider, settings: Arc<VertexSettings>) -> Arc<Source> {
        let mut sources = self.sources.lock().unwrap_or_else(|e| e.into_inner());
        let id: Arc<str> = Arc::from(provider.id.as_str());
        match sources.get(&id) {
            // Compared by value: a reload makes new settings, and an unchanged provider keeps
            // its token.
            Some(source) if same(&source.settings, &settings) => source.clone(),
            _ => {
                let source = Arc::new(Source {
                    settings,
                    provider: Mutex::new(None),
                    current: ArcSwapOption::empty(),
                    refreshing: tokio::sync::Mutex::new(()),
                    failed: Mutex::new(None),
                });
                sources.insert(id, source.clone());
                source
            }
        }
    }
}

impl Source {
    async fn token(&self) -> Result<Arc<Token>, TokenError> {
        let seen = self.current.load_full();
        if let Some(token) = seen.as_ref().filter(|t| !t.has_expired()) {
            return Ok(token.clone());
        }
        let arrived = Instant::now();
        let _refreshing = self.refreshing.lock().await;
        // A refresh that failed while this one waited fails it too.
        let failed = self
            .failed
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        if let Some((_, why)) = failed.filter(|(at, _)| *at >= arrived) {
            return Err(TokenError(why));
        }
        // A refresh that finished while this one waited serves it too.
        let now = self.current.load_full();
        let refreshed = match (&seen, &now) {
            (Some(seen), Some(now)) => !Arc::ptr_eq(seen, now),
            (None, Some(_)) => true,
            _ => false,
        };
        if let (true, Some(token)) = (refreshed, now) {
            return Ok(token);
        }
        match self.refresh().await {
            Ok(token) => {
                self.current.store(Some(token.clone()));
                Ok(token)
            }
            Err(TokenError(why)) => {
                let failed = Some((Instant::now(), why.clone()));
                *self.failed.lock().unwrap_or_else(|e| e.into_inner()) = failed;
                Err(TokenError(why))
            }
        }
    }

    /// A new token, from the provider made for these credentials (made now if need be).
    async fn refresh(&self) -> Result<Arc<Token>, TokenError> {
        let made = self
            .provider
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        let provider = match made {
            Some(provider) => provider,
            None => {
                let provider = make_provider(&self.settings.credentials).await?;
                *self.provider.lock().unwrap_or_else(|e| e.into_inner()) = Some(provider.clone());
                provider
            }
        };
        provider
            .token(SCOPES)
            .await
            .map_err(|e| TokenError(e.to_string()))
    }
}

fn same(a: &VertexSettings, b: &VertexSettings) -> bool {
    let credentials = match (&a.credentials, &b.credentials) {
        (GoogleCredentials::ServiceAccount(a), GoogleCredentials::ServiceAccount(b)) => {
            a.expose() == b.expose()
        }
        (GoogleCredentials::Default, GoogleCredentials::Default) => true,
        _ => false,
    };
    credentials && a.project == b.project && a.location == b.location
}

async fn make_provider(
    credentials: &GoogleCredentials,
) -> Result<Arc<dyn TokenProvider>, TokenError> {
    match credentials {
        GoogleCredentials::ServiceAccount(json) => CustomServiceAccount::from_json(json.expose())
            .map(|account| Arc::new(account) as Arc<dyn TokenProvider>)
            // gcp_auth's errors name what failed, never the key's contents.
            .map_err(|e| TokenError(format!("the service account key: {e}"))),
        GoogleCredentials::Default => gcp_auth::provider()
            .await
            .map_err(|e| TokenError(format!("Application Default Credentials: {e}"))),
    }
}
