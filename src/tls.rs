//! TLS for the gateway's own outgoing connections (upstream providers, the OTLP endpoint):
//! rustls, trusting what the platform trusts, through the crypto provider installed at
//! start, and hyper's HTTPS connector over it.

use std::sync::Arc;
use std::time::Duration;

use hyper_rustls::{HttpsConnector, HttpsConnectorBuilder};
use hyper_util::client::legacy::connect::HttpConnector;

/// Why an outgoing client could not be built.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("no rustls crypto provider is installed")]
    NoCryptoProvider,
    #[error("the platform certificate verifier: {0}")]
    Verifier(#[from] rustls::Error),
}

/// TLS that trusts what the platform trusts (rustls-platform-verifier).
pub fn platform_tls() -> Result<rustls::ClientConfig, ClientError> {
    let provider = rustls::crypto::CryptoProvider::get_default()
        .cloned()
        .ok_or(ClientError::NoCryptoProvider)?;
    let verifier = rustls_platform_verifier::Verifier::new(provider.clone())?;
    Ok(rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(verifier))
        .with_no_client_auth())
}

/// The OTLP/HTTP exporter's client: hyper's, over the same TLS as upstream requests, each
/// export given up after `timeout`.
pub fn otlp_http_client(
    timeout: Duration,
) -> Result<opentelemetry_http::hyper::HyperClient<HttpsConnector<HttpConnector>>, ClientError> {
    let mut http = HttpConnector::new();
    // The TLS layer above handles `https`; this one must accept it to pass it on.
    http.enforce_http(false);
    http.set_connect_timeout(Some(timeout));
    let connector = HttpsConnectorBuilder::new()
        .with_tls_config(platform_tls()?)
        .https_or_http()
        .enable_http1()
        .wrap_connector(http);
    Ok(opentelemetry_http::hyper::HyperClient::new(
        connector, timeout, None,
    ))
}
