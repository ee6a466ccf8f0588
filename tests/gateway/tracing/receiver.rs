//! An OTLP receiver for the tests, over HTTP (`POST /v1/traces`) or gRPC (the collector's
//! `TraceService`, served by tonic): each export is decoded with the official protobuf
//! definitions (`opentelemetry-proto`), and both the spans and the raw bytes are kept, so a
//! test can search everything exported for a secret. It can refuse on demand (HTTP 503, gRPC
//! `UNAVAILABLE`); over HTTP it can also stall (take exports and never answer) and stop (close
//! its port and every connection), then listen again on the same port.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use axum::body::Bytes;
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::post;
use hyper_util::rt::{TokioExecutor, TokioIo};
use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{
    TraceService, TraceServiceServer,
};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::{AnyValue, KeyValue, any_value};
use opentelemetry_proto::tonic::trace::v1::Span;
use prost::Message;
use tokio::sync::watch;
use tokio::task::AbortHandle;

#[derive(Default)]
struct Received {
    spans: Mutex<Vec<Span>>,
    raw: Mutex<Vec<u8>>,
    resource: Mutex<Vec<KeyValue>>,
    refusing: AtomicBool,
    stalling: AtomicBool,
    count: watch::Sender<usize>,
}

pub struct Receiver {
    addr: SocketAddr,
    received: Arc<Received>,
    /// The HTTP receiver's accept loop, which owns its connections.
    serving: Mutex<Option<AbortHandle>>,
}

impl Receiver {
    pub async fn start() -> Receiver {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let receiver = Receiver {
            addr: listener.local_addr().unwrap(),
            received: Arc::new(Received::default()),
            serving: Mutex::new(None),
        };
        receiver.serve(listener);
        receiver
    }

    fn serve(&self, listener: tokio::net::TcpListener) {
        let app = axum::Router::new()
            .route("/v1/traces", post(take))
            .with_state(self.received.clone());
        let task = tokio::spawn(accept(listener, app));
        *self.serving.lock().unwrap() = Some(task.abort_handle());
    }

    /// Closes the port and every connection: an export is refused at connect.
    pub fn stop(&self) {
        if let Some(serving) = self.serving.lock().unwrap().take() {
            serving.abort();
        }
    }

    /// Listens again, on the same port.
    pub async fn restart(&self) {
        let listener = tokio::net::TcpListener::bind(self.addr).await.unwrap();
        self.serve(listener);
    }

    /// Takes exports and never answers them (`true`), or answers again.
    pub fn stall(&self, stalling: bool) {
        self.received.stalling.store(stalling, Ordering::SeqCst);
    }

    /// A receiver over OTLP/gRPC.
    pub async fn start_grpc() -> Receiver {
        let received = Arc::new(Received::default());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let service = TraceServiceServer::new(Grpc(received.clone()));
        let incoming = tokio_stream_of(listener);
        tokio::spawn(
            tonic::transport::Server::builder()
                .add_service(service)
                .serve_with_incoming(incoming),
        );
        let serving = Mutex::new(None);
        Receiver {
            addr,
            received,
            serving,
        }
    }

    /// The base endpoint, as `[otel] endpoint` takes it.
    pub fn endpoint(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Answers every export with a 503 (`true`), or takes them again.
    pub fn refuse(&self, refusing: bool) {
        self.received.refusing.store(refusing, Ordering::SeqCst);
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

/// Serves `app` on each connection; aborted, it drops them all, and the port with them.
async fn accept(listener: tokio::net::TcpListener, app: axum::Router) {
    let mut connections = tokio::task::JoinSet::new();
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            continue;
        };
        let service = hyper_util::service::TowerToHyperService::new(app.clone());
        connections.spawn(async move {
            let builder = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
            let _ = builder
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
        while connections.try_join_next().is_some() {}
    }
}

async fn take(State(received): State<Arc<Received>>, body: Bytes) -> StatusCode {
    if received.stalling.load(Ordering::SeqCst) {
        std::future::pending::<()>().await;
    }
    if received.refusing.load(Ordering::SeqCst) {
        return StatusCode::SERVICE_UNAVAILABLE;
    }
    let Ok(request) = ExportTraceServiceRequest::decode(body.as_ref()) else {
        return StatusCode::BAD_REQUEST;
    };
    received.keep(request, &body);
    StatusCode::OK
}

struct Grpc(Arc<Received>);

#[tonic::async_trait]
impl TraceService for Grpc {
    async fn export(
        &self,
        request: tonic::Request<ExportTraceServiceRequest>,
    ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
        if self.0.refusing.load(Ordering::SeqCst) {
            return Err(tonic::Status::unavailable("refusing"));
        }
        let request = request.into_inner();
        // What came over the wire, less gRPC's framing.
        let raw = request.encode_to_vec();
        self.0.keep(request, &raw);
        Ok(tonic::Response::new(ExportTraceServiceResponse::default()))
    }
}

/// The listener's connections, as tonic's server takes them.
fn tokio_stream_of(
    listener: tokio::net::TcpListener,
) -> impl futures_util::Stream<Item = std::io::Result<tokio::net::TcpStream>> {
    futures_util::stream::unfold(listener, |listener| async move {
        let accepted = listener.accept().await.map(|(stream, _)| stream);
        Some((accepted, listener))
    })
}

impl Received {
    fn keep(&self, request: ExportTraceServiceRequest, raw: &[u8]) {
        self.raw.lock().unwrap().extend_from_slice(raw);
        let mut taken = 0;
        for resource_spans in request.resource_spans {
            if let Some(resource) = resource_spans.resource {
                *self.resource.lock().unwrap() = resource.attributes;
            }
            for scope in resource_spans.scope_spans {
                taken += scope.spans.len();
                self.spans.lock().unwrap().extend(scope.spans);
            }
        }
        self.count.send_modify(|count| *count += taken);
    }
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
