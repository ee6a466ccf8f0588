//! One client connection: HTTP/1 over it, bounded in time at every stage a client controls.
//!
//! hyper's own header timeout also runs while a kept-alive connection waits for its next
//! request, so it cannot tell `header_timeout` from `idle_timeout`; a small watchdog per
//! connection keeps both, fed by the socket (bytes arrive) and the service (a request
//! begins, its response ends). It also lets go of a client that stops reading its answer,
//! which would otherwise stall the response where no deadline is checked. The body timeout
//! rides on the request body itself.

use std::convert::Infallible;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::FromRef;
use bytes::Bytes;
use http_body_util::Full;
use hyper::body::{Frame, Incoming, SizeHint};
use hyper::server::conn::http1;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio::sync::watch;
use tokio::time::{Instant, Sleep};

pub mod roster;
mod watchdog;
mod websocket;

use self::watchdog::{Activity, BodyAwaited, InFlight};
use super::error::BodyTimeout;
use super::{AppState, ServerState, client_api};
use crate::providers::{self, ClientFormat};
use crate::telemetry::{Outcome, RecordGuard, RequestRecord, Telemetry};

/// The time bounds a connection is served under.
#[derive(Clone, Copy, Debug)]
pub struct Timeouts {
    pub header: Duration,
    pub idle: Duration,
    pub body: Duration,
    /// The longest a request may stay in flight, its answer taken whole.
    pub in_flight: Duration,
}

impl Timeouts {
    /// `[server]`'s timeouts; a request may be in flight for its body's time, then its
    /// deadline, then an idle timeout's worth for the client to take the answer.
    pub fn new(server: &crate::config::ServerConfig, request_deadline: Duration) -> Timeouts {
        Timeouts {
            header: server.header_timeout,
            idle: server.idle_timeout,
            body: server.body_timeout,
            in_flight: server.body_timeout + request_deadline + server.idle_timeout,
        }
    }
}

/// What a connection's requests are served by.
#[derive(Clone)]
pub struct Service {
    router: Router,
    /// The client API's POST endpoints, served without the router ([`client_api`]); not on
    /// the admin listener.
    client_api: Option<ServerState>,
}

impl Service {
    /// Everything through `router`.
    pub fn router(router: Router) -> Service {
        Service {
            router,
            client_api: None,
        }
    }

    /// The client API's POST endpoints served directly, the rest through `router`.
    pub fn with_client_api(router: Router, state: ServerState) -> Service {
        Service {
            router,
            client_api: Some(state),
        }
    }
}

/// Serves one connection until it closes, a timeout ends it, or shutdown drains it.
pub async fn serve(
    stream: ClientStream,
    peer: Peer,
    service: Service,
    timeouts: Timeouts,
    mut stop: watch::Receiver<bool>,
    enrolled: &roster::Enrolled,
) {
    let activity = stream.activity.clone();
    let refused_unread = Arc::new(AtomicBool::new(false));
    let upgraded = UpgradeSlot::default();
    let service = Tracked {
        inner: TowerToHyperService::new(service.router),
        client_api: service.client_api,
        activity: activity.clone(),
        body_timeout: timeouts.body,
        peer,
        refused_unread: refused_unread.clone(),
        upgraded: upgraded.clone(),
    };
    let mut connection = http1::Builder::new().serve_connection(TokioIo::new(stream), service);
    let watchdog = activity.expiry(timeouts);
    tokio::pin!(watchdog);
    let mut draining = false;
    let served = loop {
        tokio::select! {
            served = std::future::poll_fn(|cx| connection.poll_without_shutdown(cx)) => {
                break served;
            }
            // Dropping the connection closes the socket; no answer is owed to a client
            // that sent no whole request.
            () = watchdog.as_mut() => return,
            // The gateway is full and this connection has been idle longest: it closes to
            // make room, unless a request began meanwhile.
            () = enrolled.evicted() => {
                if activity.idle_since().is_some() {
                    return;
                }
            }
            _ = stop.wait_for(|stop| *stop), if !draining => {
                // A connection with no whole request (idle, or a head or body half sent)
                // holds no work: it closes at once rather than holding up the shutdown.
                if !activity.holds_work() {
                    return;
                }
                draining = true;
                Pin::new(&mut connection).graceful_shutdown();
            }
        }
    };
    if served.is_err() || draining {
        return;
    }
    let parts = connection.into_parts();
    let stream = parts.io.into_inner();
    if let Some((handoff, open)) = upgraded.take() {
        // A Responses WebSocket: hyper has sent the 101 and hands back the socket, with
        // whatever the client sent past its handshake.
        websocket::serve(stream, parts.read_buf, handoff, stop).await;
        drop(open);
        return;
    }
    if refused_unread.load(Ordering::Relaxed) {
        // A body that declared no length was refused at the cap: its client is still
        // sending, and may send without end. Nothing more of it is read; the answer is
        // followed by a FIN, then the close.
        let mut stream = stream;
        let _ = tokio::io::AsyncWriteExt::shutdown(&mut stream).await;
        return;
    }
    linger(stream, stop).await;
}

/// How long a closing connection keeps taking what its client still sends.
const LINGER: Duration = Duration::from_secs(5);
/// The most a closing connection takes from its client before it gives up on it.
const LINGER_BYTES: usize = 64 * 1024 * 1024;

/// Closes a connection the server is done with in the way a client can read: the end of the
/// answer (FIN) first, then whatever the client still sends is read and dropped until it
/// closes too. Closing with unread bytes would reset the connection instead, and a client
/// still uploading a body refused on its head (a 413) would get a broken pipe, not the 413;
/// nginx does the same ("lingering close"). A client that was idle closes at once; shutdown
/// does not wait for one that is not.
async fn linger(mut stream: ClientStream, mut stop: watch::Receiver<bool>) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    if stream.shutdown().await.is_err() {
        return;
    }
    let mut scratch = vec![0; 16 * 1024];
    let drain = async {
        let mut taken = 0;
        while taken < LINGER_BYTES {
            match stream.read(&mut scratch).await {
                Ok(0) | Err(_) => return,
                Ok(read) => taken += read,
            }
        }
    };
    tokio::select! {
        _ = tokio::time::timeout(LINGER, drain) => {}
        _ = stop.wait_for(|stop| *stop) => {}
    }
}

/// Answers one request on a connection over the cap: `/healthz` still, anything else a 503
/// in the client's error shape, logged like any other refusal; then closes.
pub async fn refuse(stream: ClientStream, header_timeout: Duration, telemetry: Telemetry) {
    let service = hyper::service::service_fn(move |request: Request<Incoming>| {
        let telemetry = telemetry.clone();
        async move {
            let path = request.uri().path();
            if path == "/healthz" {
                return Ok::<_, Infallible>(Response::new(Full::new(Bytes::from_static(b"ok"))));
            }
            let id = uuid::Uuid::now_v7().to_string();
            let mut guard = RecordGuard::new(telemetry, RequestRecord::new(id.clone(), false));
            let record = guard.record();
            record.status = StatusCode::SERVICE_UNAVAILABLE.as_u16();
            record.outcome = Outcome::Rejected;
            record.error = Some(TOO_MANY_CONNECTIONS.into());
            guard.finish();
            Ok(over_capacity(path, &id))
        }
    });
    let _ = http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(header_timeout)
        .keep_alive(false)
        .serve_connection(TokioIo::new(stream), service)
        .await;
}

/// The error code of a request refused for the connection cap.
const TOO_MANY_CONNECTIONS: &str = "too_many_connections";

fn over_capacity(path: &str, id: &str) -> Response<Full<Bytes>> {
    let format = if path.starts_with("/v1/messages") {
        ClientFormat::Anthropic
    } else {
        ClientFormat::OpenAi
    };
    let status = StatusCode::SERVICE_UNAVAILABLE;
    let body = providers::error_body(
        format,
        status,
        "the gateway is at its connection limit; retry shortly",
        TOO_MANY_CONNECTIONS,
        None,
    );
    let mut response = Response::new(Full::new(body));
    *response.status_mut() = status;
    let headers = response.headers_mut();
    headers.insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static("application/json"),
    );
    headers.insert(
        hyper::header::RETRY_AFTER,
        hyper::header::HeaderValue::from_static("1"),
    );
    if let Ok(id) = hyper::header::HeaderValue::from_str(id) {
        headers.insert("x-switchyard-request-id", id);
    }
    response
}

/// The router as a hyper service, marking each request in flight and timing its body.
struct Tracked {
    inner: TowerToHyperService<Router>,
    client_api: Option<ServerState>,
    activity: Arc<Activity>,
    body_timeout: Duration,
    /// The connection's client, given to the client API's handlers.
    peer: Peer,
    /// Set when a body without a declared length was refused at `max_body_bytes` (a 413):
    /// the connection then closes without taking any more of it.
    refused_unread: Arc<AtomicBool>,
    /// Set when a Responses WebSocket upgrade was answered with a 101.
    upgraded: UpgradeSlot,
}

/// What an upgraded connection is served with, left by the service for the connection, and
/// the mark that keeps it busy for as long as the socket is open.
#[derive(Clone, Default)]
struct UpgradeSlot(Arc<std::sync::Mutex<Option<(websocket::Handoff, InFlight)>>>);

impl UpgradeSlot {
    fn put(&self, handoff: websocket::Handoff, open: InFlight) {
        *self.0.lock().unwrap_or_else(|e| e.into_inner()) = Some((handoff, open));
    }

    fn take(&self) -> Option<(websocket::Handoff, InFlight)> {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).take()
    }
}

type TrackedFuture = Pin<Box<dyn Future<Output = Result<Response<ActiveBody>, Infallible>> + Send>>;

impl hyper::service::Service<Request<Incoming>> for Tracked {
    type Response = Response<ActiveBody>;
    type Error = Infallible;
    type Future = TrackedFuture;

    fn call(&self, request: Request<Incoming>) -> TrackedFuture {
        let in_flight = self.activity.begin();
        let deadline = Instant::now() + self.body_timeout;
        let activity = &self.activity;
        let request = request.map(|body| TimedBody {
            awaited: (!hyper::body::Body::is_end_stream(&body)).then(|| activity.body_awaited()),
            inner: body,
            deadline,
            timer: None,
        });
        if let Some(server) = &self.client_api
            && websocket::is_upgrade(&request)
        {
            let state = AppState::from_ref(server);
            let peer = self.peer.0.ip();
            let (headers, upgraded) = (request.headers().clone(), self.upgraded.clone());
            // Busy from before the 101 leaves: a socket is never the idle connection the
            // roster closes to make room, not even before its session has begun.
            let open = self.activity.begin();
            return Box::pin(async move {
                let (response, handoff) = websocket::answer(state, peer, &headers).await;
                if let Some(handoff) = handoff {
                    upgraded.put(handoff, open);
                }
                Ok(response.map(|body| ActiveBody {
                    inner: body,
                    _in_flight: in_flight,
                }))
            });
        }
        let direct = match &self.client_api {
            Some(server) if request.method() == Method::POST => {
                client_api::endpoint(request.uri().path()).map(|endpoint| (server, endpoint))
            }
            _ => None,
        };
        if let Some((server, endpoint)) = direct {
            let state = AppState::from_ref(server);
            let peer = self.peer.0.ip();
            let declared = request
                .headers()
                .contains_key(hyper::header::CONTENT_LENGTH);
            let refused_unread = self.refused_unread.clone();
            return Box::pin(async move {
                let response = client_api::serve(state, peer, request, endpoint).await;
                if !declared && response.status() == StatusCode::PAYLOAD_TOO_LARGE {
                    refused_unread.store(true, Ordering::Relaxed);
                }
                Ok(response.map(|body| ActiveBody {
                    inner: body,
                    _in_flight: in_flight,
                }))
            });
        }
        let response = hyper::service::Service::call(&self.inner, request);
        Box::pin(async move {
            let response = response.await?;
            Ok(response.map(|body| ActiveBody {
                inner: body,
                _in_flight: in_flight,
            }))
        })
    }
}

/// A response body that keeps its request in flight until it is sent.
pub struct ActiveBody {
    inner: Body,
    _in_flight: InFlight,
}

impl hyper::body::Body for ActiveBody {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        Pin::new(&mut self.inner).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// A connection's peer, recorded by the server for each request on it.
#[derive(Clone, Copy, Debug)]
pub struct Peer(pub std::net::SocketAddr);

/// A request body that fails with [`BodyTimeout`] once its deadline passes.
pub struct TimedBody {
    inner: Incoming,
    deadline: Instant,
    /// Made on the first wait, so a body that is already here costs no timer.
    timer: Option<Pin<Box<Sleep>>>,
    /// Held until the body's end has arrived: till then its request holds no work.
    awaited: Option<BodyAwaited>,
}

impl hyper::body::Body for TimedBody {
    type Data = Bytes;
    type Error = Box<dyn std::error::Error + Send + Sync>;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        let this = &mut *self;
        match Pin::new(&mut this.inner).poll_frame(cx) {
            Poll::Ready(frame) => {
                if frame.is_none() || this.inner.is_end_stream() {
                    this.awaited = None;
                }
                Poll::Ready(frame.map(|f| f.map_err(Into::into)))
            }
            Poll::Pending => {
                let deadline = this.deadline;
                let timer = this
                    .timer
                    .get_or_insert_with(|| Box::pin(tokio::time::sleep_until(deadline)));
                match timer.as_mut().poll(cx) {
                    Poll::Ready(()) => Poll::Ready(Some(Err(Box::new(BodyTimeout)))),
                    Poll::Pending => Poll::Pending,
                }
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// A client socket: counted while open, and telling its connection's watchdog when bytes
/// arrive.
pub struct ClientStream {
    stream: TcpStream,
    open: Arc<watch::Sender<usize>>,
    activity: Arc<Activity>,
}

impl ClientStream {
    /// Takes an accepted socket, counting it into `open` until it is dropped.
    pub fn new(stream: TcpStream, open: Arc<watch::Sender<usize>>) -> ClientStream {
        // Without it, a small response can sit out the peer's delayed ACK.
        let _ = stream.set_nodelay(true);
        open.send_modify(|n| *n += 1);
        ClientStream {
            stream,
            open,
            activity: Activity::new(),
        }
    }
}

impl Drop for ClientStream {
    fn drop(&mut self) {
        self.open.send_modify(|n| *n = n.saturating_sub(1));
    }
}

impl AsyncRead for ClientStream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        let result = Pin::new(&mut this.stream).poll_read(cx, buf);
        if buf.filled().len() > before {
            this.activity.bytes_arrived();
        }
        result
    }
}

impl AsyncWrite for ClientStream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().stream).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().stream).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_shutdown(cx)
    }
}
