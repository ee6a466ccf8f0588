//! The pooled HTTP client every attempt sends through: hyper's own HTTP/1 and HTTP/2
//! connections over rustls, pooled by `pool`, rather than reqwest or hyper-util's legacy
//! client. Measured per request (docs/src/performance.md), reqwest parsed each URL three times
//! and moved large futures through its tower layers; the legacy client hashed the authority
//! and spawned a task per request to re-pool its connection.

mod connect;
mod target;

use std::cell::RefCell;
use std::pin::Pin;
use std::sync::{Arc, Weak};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::header::{CONTENT_TYPE, HOST};
use http::uri::PathAndQuery;
use http::{Request, Response, Uri};
use hyper::body::{Body, Frame, Incoming, SizeHint};
use hyper::client::conn::http1;
use hyper_rustls::{HttpsConnector, HttpsConnectorBuilder};
use hyper_util::client::legacy::connect::HttpConnector;
use tokio::runtime::{Handle, RuntimeFlavor};

use super::pool::{IDLE_TIMEOUT, OriginKey, Pool, Sender, StreamSlot};
use crate::providers::outbound::{OutBody, UpstreamRequest};
pub use crate::tls::ClientError;
use crate::tls::platform_tls;
use target::{Target, Targets};

/// An answer's head, its body still to be read.
pub type UpstreamResponse = Response<UpstreamBody>;

/// An answer's body. On HTTP/2 it holds its stream of the shared connection until it ends
/// or is dropped, so the pool knows how many streams each connection carries.
#[derive(Debug)]
pub struct UpstreamBody {
    incoming: Incoming,
    stream: Option<StreamSlot>,
}

impl UpstreamBody {
    fn new(incoming: Incoming, stream: Option<StreamSlot>) -> UpstreamBody {
        UpstreamBody { incoming, stream }
    }
}

impl Body for UpstreamBody {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        let body = self.get_mut();
        let polled = Pin::new(&mut body.incoming).poll_frame(cx);
        if matches!(polled, Poll::Ready(None | Some(Err(_)))) {
            body.stream = None;
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.incoming.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.incoming.size_hint()
    }
}

/// TCP keep-alive probes, as reqwest set them: a dead peer is found within a minute.
const TCP_KEEPALIVE: Duration = Duration::from_secs(15);
const TCP_KEEPALIVE_RETRIES: u32 = 3;

/// Sends upstream requests over pools of keep-alive connections, http or https: one pool for
/// each thread that sends, so a connection's task runs on the thread of the requests that use
/// it (a serving shard's, `server::shards`) and waking it is never a cross-thread wake.
/// It never follows a redirect: a 3xx comes back as an answer, which `router::classify`
/// counts as a failed attempt (a redirect would carry the key to whatever origin it names).
#[derive(Clone)]
pub struct UpstreamClient {
    /// What each thread's pool connects with; its address is the client's identity.
    connector: Arc<Connectors>,
    /// Vertex providers' access tokens.
    pub google: Arc<crate::providers::vertex::auth::GoogleTokens>,
    /// Bedrock providers' AWS credentials.
    pub aws: Arc<crate::providers::bedrock::credentials::AwsCredentials>,
}

type Connector = HttpsConnector<HttpConnector>;

/// Over TLS, HTTP/1.1 alone, or HTTP/2 and HTTP/1.1 for the server to choose (ALPN).
struct Connectors {
    http1: Connector,
    http2: Connector,
}
type BoxError = Box<dyn std::error::Error + Send + Sync>;

thread_local! {
    /// This thread's pools, one for each live client (a test process runs several gateways).
    static POOLS: RefCell<Vec<(Weak<Connectors>, Pool)>> = const { RefCell::new(Vec::new()) };
    /// The URIs this thread sends to, parsed. Parsing is the same for every client, so all
    /// of the thread's share them.
    static TARGETS: RefCell<Targets> = RefCell::new(Targets::default());
}

/// Why an attempt got no whole answer. None of these carries a header value or a body, so
/// none can show a key.
#[derive(Debug, thiserror::Error)]
pub enum TransportError {
    /// The request could not be sent as built (a bad URI or header value).
    #[error("the request could not be built: {0}")]
    Invalid(String),
    /// No connection could be made: refused, unreachable, DNS, a connect timeout, or TLS.
    #[error("connecting upstream failed: {0}")]
    Connect(#[source] BoxError),
    /// Sending the request or reading the answer's head failed.
    #[error("the upstream connection failed: {0}")]
    Send(#[source] hyper::Error),
    /// Reading the body failed part way.
    #[error(transparent)]
    Body(#[from] hyper::Error),
}

impl TransportError {
    /// A timeout anywhere in the chain of causes (connecting, most often).
    pub fn is_timeout(&self) -> bool {
        let mut source: Option<&(dyn std::error::Error + 'static)> = Some(self);
        while let Some(error) = source {
            let timed_out = error
                .downcast_ref::<hyper::Error>()
                .is_some_and(hyper::Error::is_timeout)
                || error
                    .downcast_ref::<std::io::Error>()
                    .is_some_and(|io| io.kind() == std::io::ErrorKind::TimedOut);
            if timed_out {
                return true;
            }
            source = error.source();
        }
        false
    }

    /// No connection was made: refused, unreachable, DNS, or the TLS handshake.
    pub fn is_connect(&self) -> bool {
        matches!(self, TransportError::Connect(_))
    }
}

/// Drops this thread's pools: their idle connections close, and the tasks that served them end.
pub fn drop_this_threads_pools() {
    // Taken out first, so no pool's drop runs while the thread-local is borrowed.
    let pools = POOLS.with_borrow_mut(std::mem::take);
    drop(pools);
}

impl UpstreamClient {
    /// A client whose connects give up after `connect_timeout`. TLS trusts what the platform
    /// trusts (rustls-platform-verifier), through the crypto provider installed at start.
    pub fn new(connect_timeout: Duration) -> Result<UpstreamClient, ClientError> {
        let tls = platform_tls()?;
        let mut http = HttpConnector::new();
        // The TLS layer above handles `https`; this one must accept it to pass it on.
        http.enforce_http(false);
        http.set_nodelay(true);
        http.set_connect_timeout(Some(connect_timeout));
        http.set_keepalive(Some(TCP_KEEPALIVE));
        http.set_keepalive_interval(Some(TCP_KEEPALIVE));
        http.set_keepalive_retries(Some(TCP_KEEPALIVE_RETRIES));
        let connectors = Connectors {
            http1: HttpsConnectorBuilder::new()
                .with_tls_config(tls.clone())
                .https_or_http()
                .enable_http1()
                .wrap_connector(http.clone()),
            http2: HttpsConnectorBuilder::new()
                .with_tls_config(tls)
                .https_or_http()
                .enable_all_versions()
                .wrap_connector(http),
        };
        Ok(UpstreamClient {
            connector: Arc::new(connectors),
            google: Default::default(),
            aws: Default::default(),
        })
    }

    /// Runs `use_pool` with this thread's pool of this client's connections, made on first use.
    fn with_pool<R>(&self, use_pool: impl FnOnce(&mut Pool) -> R) -> R {
        let identity = Arc::as_ptr(&self.connector);
        POOLS.with_borrow_mut(|pools| {
            // A `Weak` keeps its allocation, so a live entry's address is never reused.
            let mine = |(connector, _): &&mut (Weak<Connectors>, Pool)| {
                std::ptr::eq(connector.as_ptr(), identity)
            };
            if let Some((_, pool)) = pools.iter_mut().find(mine) {
                return use_pool(pool);
            }
            pools.retain(|(connector, _)| connector.strong_count() > 0);
            self.sweep_this_threads_pool();
            let mut pool = Pool::default();
            let used = use_pool(&mut pool);
            pools.push((Arc::downgrade(&self.connector), pool));
            used
        })
    }

    /// Closes this thread's idle connections past [`IDLE_TIMEOUT`] even when no request comes
    /// to find them, until the client is dropped. Only on a current-thread runtime (the
    /// serving shards, tests), where the task is sure to run on the pool's own thread.
    fn sweep_this_threads_pool(&self) {
        let on_this_thread = Handle::try_current()
            .is_ok_and(|runtime| runtime.runtime_flavor() == RuntimeFlavor::CurrentThread);
        if !on_this_thread {
            return;
        }
        let client = Arc::downgrade(&self.connector);
        tokio::spawn(async move {
            let mut every = tokio::time::interval(IDLE_TIMEOUT / 3);
            every.tick().await;
            loop {
                every.tick().await;
                if client.strong_count() == 0 {
                    return;
                }
                POOLS.with_borrow_mut(|pools| {
                    let mine = pools
                        .iter_mut()
                        .find(|(connector, _)| connector.ptr_eq(&client));
                    if let Some((_, pool)) = mine {
                        pool.sweep(IDLE_TIMEOUT);
                    }
                });
            }
        });
    }

    /// Sends `request`, resolving when the answer's head has arrived.
    pub async fn send(&self, request: UpstreamRequest) -> Result<UpstreamResponse, TransportError> {
        if let Some(name) = request.invalid() {
            return Err(TransportError::Invalid(format!(
                "the {name} header is not valid"
            )));
        }
        let invalid_uri = || TransportError::Invalid("the URI is not valid".into());
        let Target { uri, origin, host } = TARGETS
            .with_borrow_mut(|targets| targets.get(&request.uri, request.http2))
            .ok_or_else(invalid_uri)?;
        let mut outgoing = Request::new(request.body);
        *outgoing.method_mut() = request.method;
        *outgoing.headers_mut() = request.headers;
        origin_form(&mut outgoing, &uri, host);
        // `Host`, while the request is in HTTP/2's form (which names the origin itself).
        let mut lent_host = None;
        loop {
            // The pool is never borrowed across an await.
            let (sender, reused) = match self.with_pool(|pool| pool.checkout(&origin)) {
                Some(sender) => (sender, true),
                None => (self.connect(&origin, &uri).await?, false),
            };
            let mut error = match sender {
                Sender::Http1(mut sender) => {
                    if let Some(host) = lent_host.take() {
                        origin_form(&mut outgoing, &uri, host);
                    }
                    match sender.try_send_request(outgoing).await {
                        Ok(answer) => {
                            self.keep(origin, sender, &answer);
                            return Ok(answer.map(|incoming| UpstreamBody::new(incoming, None)));
                        }
                        Err(error) => error,
                    }
                }
                Sender::Http2(mut sender, slot) => {
                    // HTTP/2 names the origin in the request's own pseudo-headers.
                    if outgoing.uri().scheme().is_none() {
                        *outgoing.uri_mut() = uri.clone();
                        lent_host = outgoing.headers_mut().remove(HOST);
                    }
                    match sender.try_send_request(outgoing).await {
                        Ok(answer) => {
                            return Ok(
                                answer.map(|incoming| UpstreamBody::new(incoming, Some(slot)))
                            );
                        }
                        Err(error) => error,
                    }
                }
            };
            match error.take_message() {
                // A kept connection the peer closed before the request went out: nothing
                // was sent, so it goes again on another one.
                Some(unsent) if reused => outgoing = unsent,
                _ => return Err(TransportError::Send(error.into_error())),
            }
        }
    }

    /// Returns `sender` to the pool once `answer`'s head is in. A whole answer is read at
    /// once, so its connection goes straight back and is ready a moment later. A stream's stays
    /// busy for as long as the stream lasts: a task waits for it to be ready, so thousands of
    /// open streams are not scanned past by every checkout.
    fn keep(
        &self,
        origin: OriginKey,
        mut sender: http1::SendRequest<OutBody>,
        answer: &Response<Incoming>,
    ) {
        let streaming = answer
            .headers()
            .get(CONTENT_TYPE)
            .is_some_and(|value| value.as_bytes().starts_with(b"text/event-stream"));
        if !streaming {
            self.with_pool(|pool| pool.put_back(origin, sender));
            return;
        }
        let client = self.clone();
        tokio::spawn(async move {
            // An error here means the connection closed: it is simply not kept.
            if std::future::poll_fn(|cx| sender.poll_ready(cx))
                .await
                .is_ok()
            {
                client.with_pool(|pool| pool.put_back(origin, sender));
            }
        });
    }
}

/// On its own HTTP/1.1 connection to the origin, a request names only the path (origin-form)
/// and the origin in `Host`.
fn origin_form(request: &mut Request<OutBody>, uri: &Uri, host: http::HeaderValue) {
    let path = uri
        .path_and_query()
        .cloned()
        .unwrap_or_else(|| PathAndQuery::from_static("/"));
    *request.uri_mut() = path.into();
    request.headers_mut().entry(HOST).or_insert(host);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::providers::outbound::OutBody;
    use crate::router::classify::FailureClass;
    use crate::router::upstream::classify_transport;
    use http_body_util::BodyExt;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    fn client() -> UpstreamClient {
        let _ = rustls::crypto::ring::default_provider().install_default();
        UpstreamClient::new(Duration::from_secs(5)).unwrap()
    }

    #[tokio::test]
    async fn a_refused_connection_is_a_connect_failure() {
        // Bind, learn the port, and close it again: nothing listens there.
        let closed = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap();
        let request =
            UpstreamRequest::post(format!("http://{closed}/v1"), OutBody::default(), false);
        let error = client().send(request).await.unwrap_err();
        assert!(error.is_connect() && !error.is_timeout(), "{error:?}");
        assert_eq!(classify_transport(&error), FailureClass::Connect);
    }

    #[tokio::test]
    async fn a_request_with_a_bad_header_is_never_sent() {
        let request =
            UpstreamRequest::post("http://127.0.0.1:9/v1".into(), OutBody::default(), false)
                .secret_header(http::HeaderName::from_static("x-api-key"), "sk-\nsecret");
        let error = client().send(request).await.unwrap_err();
        assert!(matches!(error, TransportError::Invalid(_)), "{error:?}");
        assert!(!error.to_string().contains("secret"), "{error}");
        assert_eq!(classify_transport(&error), FailureClass::Reset);
    }

    #[tokio::test]
    async fn an_idle_connection_is_closed_by_the_sweep() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let uri = format!("http://{}/v1", listener.local_addr().unwrap());
        let client = client();
        let send = || {
            client.send(UpstreamRequest::post(
                uri.clone(),
                OutBody::default(),
                false,
            ))
        };
        let (answered, served) = tokio::join!(
            async { send().await.unwrap().into_body().collect().await.unwrap() },
            async {
                let (mut upstream, _) = listener.accept().await.unwrap();
                let mut head = vec![0; 1024];
                let _ = upstream.read(&mut head).await.unwrap();
                let answer = "HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n{}";
                upstream.write_all(answer.as_bytes()).await.unwrap();
                upstream
            }
        );
        assert_eq!(answered.to_bytes(), "{}");
        let mut upstream = served;
        // Kept: the connection stays open.
        client.with_pool(|pool| pool.sweep(IDLE_TIMEOUT));
        // Past its idle time: swept, and the upstream reads the close.
        client.with_pool(|pool| pool.sweep(Duration::ZERO));
        let mut rest = Vec::new();
        let closed = tokio::time::timeout(Duration::from_secs(10), upstream.read_to_end(&mut rest));
        assert!(closed.await.is_ok(), "the swept connection is still open");
        assert!(rest.is_empty(), "{rest:?}");
        assert!(
            client
                .with_pool(
                    |pool| pool.checkout(&OriginKey::of(&uri.parse().unwrap(), false).unwrap().0)
                )
                .is_none()
        );
    }
}
