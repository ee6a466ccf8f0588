//! AWS credentials for Bedrock providers, refreshed before they expire.
//!
//! A provider's credentials come from the keys it names (`access_key_id_env`, ...), from a
//! shared credentials file of its own (`credentials_file`), or from AWS's default chain:
//! the `AWS_*` environment variables, the shared files and profile, web identity through STS
//! (EKS), then the ECS and EC2 metadata endpoints. aws-config does the chain; here each
//! provider's credentials are cached, and refreshed one caller at a time a minute before
//! they expire, so a crowd arriving at expiry costs one call to STS or the metadata service.

use std::sync::{Arc, OnceLock};
use std::time::{Duration, SystemTime};

use aws_config::default_provider::credentials::DefaultCredentialsChain;
use aws_config::profile::ProfileFileCredentialsProvider;
use aws_config::provider_config::ProviderConfig;
use aws_credential_types::Credentials;
use aws_credential_types::provider::{ProvideCredentials, SharedCredentialsProvider};
use aws_runtime::env_config::file::{EnvConfigFileKind, EnvConfigFiles};
use aws_smithy_http_client::tls;
use aws_smithy_runtime_api::client::http::SharedHttpClient;

use crate::config::{AwsCredentialSource, BedrockSettings, Provider};
use crate::keys::KeyLease;
use crate::providers::refresh::{PerProvider, Refreshed};
use crate::secret::Secret;

/// How long before their expiry credentials are replaced: AWS's SDKs refresh within a
/// minute or so of it, and a signature made just before expiry may arrive after.
const REFRESH_AHEAD: Duration = Duration::from_secs(60);

/// Every Bedrock provider's credentials, made at its first request.
#[derive(Default)]
pub struct AwsCredentials {
    sources: PerProvider<Source>,
}

/// One provider's credentials.
struct Source {
    settings: Arc<BedrockSettings>,
    /// Made at the first refresh (reading profile files, finding the chain's first source).
    provider: tokio::sync::OnceCell<SharedCredentialsProvider>,
    credentials: Refreshed<Credentials>,
}

/// Why no credentials could be had; secret-free (aws-config's errors name sources, not keys).
#[derive(Debug, thiserror::Error)]
#[error("no AWS credentials: {0}")]
pub struct CredentialsError(String);

impl AwsCredentials {
    /// A lease on `provider`'s current credentials: its secret is their secret access key,
    /// and `aws` holds them whole, for signing.
    pub async fn lease(&self, provider: &Provider) -> Result<KeyLease, CredentialsError> {
        let Some(settings) = provider.bedrock.clone() else {
            return Err(CredentialsError("the provider is not a Bedrock one".into()));
        };
        let source = self.source(provider, settings);
        let credentials = match source.credentials.get(fresh, || source.refresh()).await {
            Ok(credentials) => credentials,
            // A refresh ahead of expiry that failed leaves the current credentials good
            // until they do expire.
            Err(why) => source
                .credentials
                .current()
                .filter(|c| unexpired(c))
                .ok_or(CredentialsError(why))?,
        };
        Ok(KeyLease {
            id: Arc::from(format!("{}:aws-credentials", provider.id.as_str())),
            secret: Secret::new(credentials.secret_access_key()),
            aws: Some(credentials),
        })
    }

    /// Bedrock refused `lease`'s credentials: they are dropped, unless newer ones replaced
    /// them, so the next attempt reads them again (a rotated file, a new role session).
    pub fn refused(&self, provider: &Provider, lease: &KeyLease) {
        if let (Some(source), Some(refused)) = (self.sources.get(provider.id.as_str()), &lease.aws)
        {
            source.credentials.forget_if(|c| c == refused.as_ref());
        }
    }

    fn source(&self, provider: &Provider, settings: Arc<BedrockSettings>) -> Arc<Source> {
        // Compared by value: a reload makes new settings, and an unchanged provider keeps its
        // credentials.
        self.sources.get_or_make(
            provider.id.as_str(),
            |source| same(&source.settings, &settings),
            || Source {
                settings: settings.clone(),
                provider: tokio::sync::OnceCell::new(),
                credentials: Refreshed::default(),
            },
        )
    }
}

/// Whether credentials are good for more than [`REFRESH_AHEAD`]; keys with no expiry are.
fn fresh(credentials: &Credentials) -> bool {
    credentials
        .expiry()
        .is_none_or(|expiry| expiry > SystemTime::now() + REFRESH_AHEAD)
}

/// Whether credentials may still sign at all.
fn unexpired(credentials: &Credentials) -> bool {
    credentials
        .expiry()
        .is_none_or(|expiry| expiry > SystemTime::now())
}

impl Source {
    async fn refresh(&self) -> Result<Arc<Credentials>, String> {
        let provider = self
            .provider
            .get_or_init(|| make_provider(&self.settings))
            .await;
        provider
            .provide_credentials()
            .await
            .map(Arc::new)
            .map_err(|e| aws_error(&e))
    }
}

/// An aws-config error with its sources: its own message is often only "an error occurred".
fn aws_error(error: &(dyn std::error::Error + 'static)) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

async fn make_provider(settings: &BedrockSettings) -> SharedCredentialsProvider {
    let config = || {
        ProviderConfig::default()
            .with_http_client(http_client())
            .with_region(Some(aws_config::Region::new(settings.region.clone())))
    };
    match &settings.credentials {
        AwsCredentialSource::Keys {
            access_key_id,
            secret_access_key,
            session_token,
        } => SharedCredentialsProvider::new(Credentials::new(
            access_key_id.expose(),
            secret_access_key.expose(),
            session_token.as_ref().map(|t| t.expose().to_owned()),
            None,
            "switchyard-config",
        )),
        AwsCredentialSource::File { path, profile } => {
            let files = EnvConfigFiles::builder()
                .with_file(EnvConfigFileKind::Credentials, path)
                .build();
            let mut builder = ProfileFileCredentialsProvider::builder()
                .configure(&config())
                .profile_files(files);
            if let Some(profile) = profile {
                builder = builder.profile_name(profile);
            }
            SharedCredentialsProvider::new(builder.build())
        }
        AwsCredentialSource::Chain { profile } => {
            // The chain takes its region (STS's, for web identity) from a region chain of its
            // own unless told, and would refuse without `AWS_REGION`: the provider's region.
            let mut builder = DefaultCredentialsChain::builder()
                .configure(config())
                .region(aws_config::Region::new(settings.region.clone()));
            if let Some(profile) = profile {
                builder = builder.profile_name(profile);
            }
            SharedCredentialsProvider::new(builder.build().await)
        }
    }
}

/// The client aws-config calls STS and the metadata endpoints with: hyper over rustls on
/// ring, as the gateway's own, with no aws-lc build.
fn http_client() -> SharedHttpClient {
    static CLIENT: OnceLock<SharedHttpClient> = OnceLock::new();
    CLIENT
        .get_or_init(|| {
            aws_smithy_http_client::Builder::new()
                .tls_provider(tls::Provider::Rustls(
                    tls::rustls_provider::CryptoMode::Ring,
                ))
                .build_https()
        })
        .clone()
}

fn same(a: &BedrockSettings, b: &BedrockSettings) -> bool {
    let credentials = match (&a.credentials, &b.credentials) {
        (
            AwsCredentialSource::Keys {
                access_key_id: a_id,
                secret_access_key: a_secret,
                session_token: a_token,
            },
            AwsCredentialSource::Keys {
                access_key_id: b_id,
                secret_access_key: b_secret,
                session_token: b_token,
            },
        ) => {
            a_id.expose() == b_id.expose()
                && a_secret.expose() == b_secret.expose()
                && a_token.as_ref().map(Secret::expose) == b_token.as_ref().map(Secret::expose)
        }
        (
            AwsCredentialSource::File { path, profile },
            AwsCredentialSource::File {
                path: b_path,
                profile: b_profile,
            },
        ) => path == b_path && profile == b_profile,
        (AwsCredentialSource::Chain { profile }, AwsCredentialSource::Chain { profile: b }) => {
            profile == b
        }
        _ => false,
    };
    credentials && a.region == b.region
}
