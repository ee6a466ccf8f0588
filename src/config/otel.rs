//! `[otel]`: where the gateway's traces go, in OTLP, and what they may hold.

use std::time::Duration;

use crate::secret::Secret;

/// `[otel]`, resolved with the standard `OTEL_*` environment variables.
#[derive(Clone, Debug)]
pub struct OtelConfig {
    /// The OTLP endpoint spans are sent to (for HTTP, the whole URL, `/v1/traces` included);
    /// `None` turns tracing off.
    pub endpoint: Option<String>,
    pub protocol: OtelProtocol,
    /// Headers sent with every export, such as a vendor's API key, read from the environment.
    pub headers: Vec<(String, Secret)>,
    /// `service.name`; `None` leaves it to `OTEL_SERVICE_NAME`, else `switchyard`.
    pub service_name: Option<String>,
    /// Resource attributes besides `service.name` (and those of `OTEL_RESOURCE_ATTRIBUTES`).
    pub resource: Vec<(String, String)>,
    /// The share of traces the gateway starts that are kept; a trace a client started
    /// follows the client's choice.
    pub sample_ratio: f64,
    /// The most spans waiting for export; past it, new ones are dropped and counted.
    pub max_queue_spans: usize,
    /// How long one export may take.
    pub timeout: Duration,
    /// Whether spans carry the prompt and the answer (`gen_ai.input.messages` and the like);
    /// never by default.
    pub capture_content: bool,
    /// The most bytes of content one span carries; longer texts are cut.
    pub max_content_bytes: usize,
    /// The GenAI conventions' version the attributes follow.
    pub semconv: SemConv,
}

/// The version of the GenAI semantic conventions (still marked Development) spans follow,
/// for dashboards built on an older one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SemConv {
    /// v1.37: the provider is `gen_ai.provider.name`.
    V1_37,
    /// v1.36: the provider is `gen_ai.system`, with that version's values.
    V1_36,
}

/// How spans travel to the endpoint.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OtelProtocol {
    /// OTLP/HTTP with protobuf bodies (`http/protobuf`).
    HttpProtobuf,
    /// OTLP/gRPC (`grpc`).
    Grpc,
}

impl Default for OtelConfig {
    fn default() -> OtelConfig {
        OtelConfig {
            endpoint: None,
            protocol: OtelProtocol::HttpProtobuf,
            headers: Vec::new(),
            service_name: None,
            resource: Vec::new(),
            sample_ratio: 1.0,
            max_queue_spans: 8192,
            timeout: Duration::from_secs(10),
            capture_content: false,
            max_content_bytes: 16 * 1024,
            semconv: SemConv::V1_37,
        }
    }
}
