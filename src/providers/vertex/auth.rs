//! Access tokens for Vertex providers, made by `gcp_auth`: from a service account's key (a
//! JWT signed with RS256 and exchanged at the key's own `token_uri`), or from Application
//! Default Credentials (`GOOGLE_APPLICATION_CREDENTIALS`, gcloud's, the metadata server).
//!
//! `gcp_auth` caches a token for its lifetime but lets every caller that finds it expired
//! fetch a new one. Here one refresh runs at a time for each provider, and callers that
//! waited on it take its token: 100 requests arriving as a token expires cost one refresh.

use std::sync::{Arc, Mutex};

use gcp_auth::{CustomServiceAccount, Token, TokenProvider};

use crate::config::{GoogleCredentials, Provider, VertexSettings};
use crate::keys::KeyLease;
use crate::providers::refresh::{PerProvider, Refreshed};
use crate::secret::Secret;

/// What Vertex's API needs a token for.
const SCOPES: &[&str] = &["https://www.googleapis.com/auth/cloud-platform"];

/// Every Vertex provider's token source, made at its first request.
#[derive(Default)]
pub struct GoogleTokens {
    sources: PerProvider<Source>,
}

/// One provider's tokens.
struct Source {
    /// The settings it was made for: a reload that changes them makes a new one.
    settings: Arc<VertexSettings>,
    /// Made at the first refresh, and again after a refusal: `gcp_auth` keeps its tokens
    /// until they expire, so only a new one forgets a token the provider refused.
    provider: Mutex<Option<Arc<dyn TokenProvider>>>,
    /// One refresh at a time; callers that waited on a failed one share its failure (gcp_auth
    /// tries a refused grant five times, sleeping between tries).
    tokens: Refreshed<Token>,
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
            aws: None,
        })
    }

    /// The provider refused `lease`'s token: it is dropped, unless a newer one replaced it.
    pub fn refused(&self, provider: &Provider, lease: &KeyLease) {
        let Some(source) = self.sources.get(provider.id.as_str()) else {
            return;
        };
        // The provider first: a refresh in between must not get the refused token back
        // from its cache.
        let refused = |token: &Token| token.as_str() == lease.secret.expose();
        if source.tokens.current_is(refused) {
            *source.provider.lock().unwrap_or_else(|e| e.into_inner()) = None;
            source.tokens.forget_if(refused);
        }
    }

    fn source(&self, provider: &Provider, settings: Arc<VertexSettings>) -> Arc<Source> {
        // Compared by value: a reload makes new settings, and an unchanged provider keeps its
        // token.
        self.sources.get_or_make(
            provider.id.as_str(),
            |source| same(&source.settings, &settings),
            || Source {
                settings: settings.clone(),
                provider: Mutex::new(None),
                tokens: Refreshed::default(),
            },
        )
    }
}

impl Source {
    async fn token(&self) -> Result<Arc<Token>, TokenError> {
        self.tokens
            .get(|token| !token.has_expired(), || self.refresh())
            .await
            .map_err(TokenError)
    }

    /// A new token, from the provider made for these credentials (made now if need be).
    async fn refresh(&self) -> Result<Arc<Token>, String> {
        let made = self
            .provider
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        let provider = match made {
            Some(provider) => provider,
            None => {
                let provider = make_provider(&self.settings.credentials)
                    .await
                    .map_err(|TokenError(why)| why)?;
                *self.provider.lock().unwrap_or_else(|e| e.into_inner()) = Some(provider.clone());
                provider
            }
        };
        provider.token(SCOPES).await.map_err(|e| e.to_string())
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
