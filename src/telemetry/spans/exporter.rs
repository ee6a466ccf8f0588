//! The export task: spans from the queue, in batches, to the OTLP endpoint over HTTP
//! (protobuf) or gRPC, with opentelemetry-otlp's exporter.

use std::collections::HashMap;

use opentelemetry::KeyValue;
use opentelemetry_otlp::{WithExportConfig, WithHttpConfig, WithTonicConfig};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::{SpanData, SpanExporter};
use prometheus_client::metrics::counter::Counter;
use tokio::sync::mpsc;

use super::BATCH;
use crate::config::{OtelConfig, OtelProtocol};

/// Sends what the queue holds until every sender is gone. A batch the endpoint refuses, or
/// that fails or times out, is dropped and counted: spans are never retried, so an outage
/// costs the spans made during it, and export resumes with the next batch once it is over.
pub async fn run(config: OtelConfig, mut spans: mpsc::Receiver<SpanData>, dropped: Counter) {
    let mut exporter = match build(&config) {
        Ok(exporter) => exporter,
        Err(error) => {
            tracing::error!(%error, "cannot build the OTLP exporter: spans are dropped");
            while let Some(_span) = spans.recv().await {
                dropped.inc();
            }
            return;
        }
    };
    exporter.set_resource(&resource(&config));
    let mut failing = false;
    let mut batch = Vec::with_capacity(BATCH);
    while spans.recv_many(&mut batch, BATCH).await > 0 {
        let count = batch.len() as u64;
        match exporter.export(std::mem::take(&mut batch)).await {
            Ok(()) if failing => {
                failing = false;
                tracing::info!("the OTLP endpoint takes spans again");
            }
            Ok(()) => {}
            Err(error) => {
                dropped.inc_by(count);
                if !failing {
                    failing = true;
                    tracing::warn!(
                        %error,
                        "the OTLP endpoint did not take spans: they are dropped and counted until it does"
                    );
                }
            }
        }
        batch.reserve(BATCH);
    }
}

fn build(config: &OtelConfig) -> Result<opentelemetry_otlp::SpanExporter, String> {
    let endpoint = config.endpoint.clone().unwrap_or_default();
    let built = match config.protocol {
        OtelProtocol::HttpProtobuf => {
            let headers: HashMap<String, String> = config
                .headers
                .iter()
                .map(|(name, value)| (name.clone(), value.expose().to_owned()))
                .collect();
            let client = crate::tls::otlp_http_client(config.timeout).map_err(|e| e.to_string())?;
            opentelemetry_otlp::SpanExporter::builder()
                .with_http()
                .with_protocol(opentelemetry_otlp::Protocol::HttpBinary)
                .with_endpoint(endpoint)
                .with_timeout(config.timeout)
                .with_headers(headers)
                .with_http_client(client)
                .build()
        }
        OtelProtocol::Grpc => {
            // Validated as header names and values at load.
            let headers: http::HeaderMap = config
                .headers
                .iter()
                .filter_map(|(name, value)| {
                    let name = http::HeaderName::try_from(name.as_str()).ok()?;
                    Some((name, http::HeaderValue::try_from(value.expose()).ok()?))
                })
                .collect();
            let metadata =
                opentelemetry_otlp::tonic_types::metadata::MetadataMap::from_headers(headers);
            opentelemetry_otlp::SpanExporter::builder()
                .with_tonic()
                .with_endpoint(endpoint)
                .with_timeout(config.timeout)
                .with_metadata(metadata)
                .build()
        }
    };
    // The builder's errors name the endpoint at most, never a header's value.
    built.map_err(|e| e.to_string())
}

/// `service.name` (the file's, else `OTEL_SERVICE_NAME`, else `switchyard`), the file's
/// resource attributes, and `OTEL_RESOURCE_ATTRIBUTES`'.
fn resource(config: &OtelConfig) -> Resource {
    let from_env = std::env::var("OTEL_SERVICE_NAME")
        .ok()
        .filter(|n| !n.is_empty());
    let name = config
        .service_name
        .clone()
        .or(from_env)
        .unwrap_or_else(|| "switchyard".to_owned());
    Resource::builder()
        .with_service_name(name)
        .with_attributes(
            config
                .resource
                .iter()
                .map(|(key, value)| KeyValue::new(key.clone(), value.clone())),
        )
        .with_attribute(KeyValue::new("service.version", env!("CARGO_PKG_VERSION")))
        .build()
}
