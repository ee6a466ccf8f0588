//! An OTLP/HTTP receiver for the tests: it takes `POST /v1/traces`, decodes each body with
//! the official protobuf definitions (`opentelemetry-proto`), and keeps both the spans and
//! the raw bytes, so a test can search everything exported for a secret. It can refuse
//! (503) on demand, as a collector that is down.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use axum::body::Bytes;
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::post;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::{AnyValue, KeyValue, any_value};
use opentelemetry_proto::tonic::trace::v1::Span;
use prost::Message;
use tokio::sync::watch;

#[derive(Default)]
struct Received {
    spans: Mutex<Vec<Span>>,
    raw: Mutex<Vec<u8>>,
    resource: Mutex<Vec<KeyValue>>,
    refusing: std::sync::atomic::AtomicBool,
    count: watch::Sender<usize>,
}

pub struct Receiver {
    addr: SocketAddr,
    received: Arc<Received>,
}

impl Receiver {
    pub async fn start() -> Receiver {
        let received = Arc::new(Received::default());
        let app = axum::Router::new()
            .route("/v1/traces", post(take))
            .with_state(received.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await });
        Receiver { addr, received }
    }

    /// The base endpoint, as `[otel] endpoint` takes it.
    pub fn endpoint(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Answers every export with a 503 (`true`), or takes them again.
    pub fn refuse(&self, refusing: bool) {
        self.received
            .refusing
            .store(refusing, std::sync::atomic::Ordering::SeqCst);
    }

    /// Resolves once `ready` holds for the count of spans taken.
    pub async fn wait_for(&self, ready: impl FnMut(&usize) -> bool) {
        let _ = self.received.count.subscribe().wait_for(ready).await;
    }

    pub fn spans(&self) -> Vec<Span> {
        self.received.spans.lock().unwrap().clone()
    }

    /// Every byte exported so far.
    pub fn raw(&self) -> Vec<u8> {
        self.received.raw.lock().unwrap().clone()
    }

    pub fn resource(&self) -> Vec<KeyValue> {
        self.received.resource.lock().unwrap().clone()
    }
}

async fn take(State(received): State<Arc<Received>>, body: Bytes) -> StatusCode {
    if received.refusing.load(std::sync::atomic::Ordering::SeqCst) {
        return StatusCode::SERVICE_UNAVAILABLE;
    }
    let Ok(request) = ExportTraceServiceRequest::decode(body.as_ref()) else {
        return StatusCode::BAD_REQUEST;
    };
    received.raw.lock().unwrap().extend_from_slice(&body);
    let mut taken = 0;
    for resource_spans in request.resource_spans {
        if let Some(resource) = resource_spans.resource {
            *received.resource.lock().unwrap() = resource.attributes;
        }
        for scope in resource_spans.scope_spans {
            taken += scope.spans.len();
            received.spans.lock().unwrap().extend(scope.spans);
        }
    }
    received.count.send_modify(|count| *count += taken);
    StatusCode::OK
}

/// An attribute's value as text (strings, integers and booleans), if the span has it.
pub fn attribute(attributes: &[KeyValue], key: &str) -> Option<String> {
    let value = attributes.iter().find(|kv| kv.key == key)?.value.as_ref()?;
    Some(text(value))
}

fn text(value: &AnyValue) -> String {
    match &value.value {
        Some(any_value::Value::StringValue(s)) => s.clone(),
        Some(any_value::Value::IntValue(i)) => i.to_string(),
        Some(any_value::Value::BoolValue(b)) => b.to_string(),
        Some(any_value::Value::DoubleValue(d)) => d.to_string(),
        other => format!("{other:?}"),
    }
}

pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
