//! The pooled HTTP client every attempt sends through: hyper-util's own `Client` over
//! rustls, rather than reqwest on top of it. Measured per request (README, "Performance"),
//! reqwest parsed each URL three times and moved large futures through its tower layers
//! for redirect and retry policies the gateway turns off anyway.

use std::cell::RefCell;
use std::sync::{Arc, Weak};
use std::time::Duration;

use http::{Request, Response, Uri};
use hyper::body::Incoming;
use hyper_rustls::{HttpsConnector, HttpsConnectorBuilder};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioTimer};

use crate::providers::outbound::{OutBody, UpstreamRequest};

/// An answer's head, its body still to be read.
pub type UpstreamResponse = Response<Incoming>;

/// Idle connections kept per upstream host: enough for a thousand concurrent requests to
/// one provider to find a warm connection on their next turn.
const MAX_IDLE_PER_HOST: usize = 1024;

/// How long an idle pooled connection is kept (reqwest's default, kept as it was).
const POOL_IDLE_TIMEOUT: Duration = Duration::from_secs(90);

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
    connector: Arc<Connector>,
}

type Connector = HttpsConnector<HttpConnector>;
type Pool = Client<Connector, OutBody>;

thread_local! {
    /// This thread's pools, one for each live client (a test process runs several gateways).
    static POOLS: RefCell<Vec<(Weak<Connector>, Pool)>> = const { RefCell::new(Vec::new()) };
}

/// Why the client could not be built.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("no rustls crypto provider is installed")]
    NoCryptoProvider,
    #[error("the platform certificate verifier: {0}")]
    Verifier(#[from] rustls::Error),
}

/// Why an attempt got no whole answer. None of these carries a header value or a body, so
/// none can show a key.
#[derive(Debug, thiserror::Error)]
pub enum TransportError {
    /// The request could not be sent as built (a bad URI or header value).
    #[error("the request could not be built: {0}")]
    Invalid(String),
    /// Connecting, sending, or reading the head failed.
    #[error(transparent)]
    Send(#[from] hyper_util::client::legacy::Error),
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
        matches!(self, TransportError::Send(error) if error.is_connect())
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
        let provider = rustls::crypto::CryptoProvider::get_default()
            .cloned()
            .ok_or(ClientError::NoCryptoProvider)?;
        let verifier = rustls_platform_verifier::Verifier::new(provider.clone())?;
        let tls = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()?
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(verifier))
            .with_no_client_auth();
        let mut http = HttpConnector::new();
        // The TLS layer above handles `https`; this one must accept it to pass it on.
        http.enforce_http(false);
        http.set_nodelay(true);
        http.set_connect_timeout(Some(connect_timeout));
        http.set_keepalive(Some(TCP_KEEPALIVE));
        http.set_keepalive_interval(Some(TCP_KEEPALIVE));
        http.set_keepalive_retries(Some(TCP_KEEPALIVE_RETRIES));
        let connector = HttpsConnectorBuilder::new()
            .with_tls_config(tls)
            .https_or_http()
            .enable_http1()
            .wrap_connector(http);
        Ok(UpstreamClient {
            connector: Arc::new(connector),
        })
    }

    /// Runs `use_pool` with this thread's pool of this client's connections, made on first use.
    fn with_pool<R>(&self, use_pool: impl FnOnce(&Pool) -> R) -> R {
        let identity = Arc::as_ptr(&self.connector);
        POOLS.with_borrow_mut(|pools| {
            // A `Weak` keeps its allocation, so a live entry's address is never reused.
            let mine = |(connector, _): &&(Weak<Connector>, Pool)| {
                std::ptr::eq(connector.as_ptr(), identity)
            };
            if let Some((_, pool)) = pools.iter().find(mine) {
                return use_pool(pool);
            }
            pools.retain(|(connector, _)| connector.strong_count() > 0);
            let pool = self.new_pool();
            let used = use_pool(&pool);
            pools.push((Arc::downgrade(&self.connector), pool));
            used
        })
    }

    fn new_pool(&self) -> Pool {
        Client::builder(TokioExecutor::new())
            .timer(TokioTimer::new())
            .pool_timer(TokioTimer::new())
            .pool_idle_timeout(POOL_IDLE_TIMEOUT)
            .pool_max_idle_per_host(MAX_IDLE_PER_HOST)
            .build(Connector::clone(&self.connector))
    }

    /// Sends `request`, resolving when the answer's head has arrived.
    pub async fn send(&self, request: UpstreamRequest) -> Result<UpstreamResponse, TransportError> {
        if let Some(name) = request.invalid() {
            return Err(TransportError::Invalid(format!(
                "the {name} header is not valid"
            )));
        }
        let uri = Uri::try_from(request.uri)
            .map_err(|_| TransportError::Invalid("the URI is not valid".into()))?;
        let mut outgoing = Request::new(request.body);
        *outgoing.method_mut() = request.method;
        *outgoing.uri_mut() = uri;
        *outgoing.headers_mut() = request.headers;
        // The future owns what it needs: the pool is not borrowed across the await.
        let answer = self.with_pool(|pool| pool.request(outgoing));
        Ok(answer.await?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::router::classify::{FailureClass, classify_transport};

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
}
