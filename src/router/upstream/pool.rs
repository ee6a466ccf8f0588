//! One thread's keep-alive connections to upstream origins. A connection is in its origin's
//! list while it is idle or still delivering a whole answer's body, out with a request until
//! the answer's head arrives, and with a task of its own while it carries a stream (see
//! `client::UpstreamClient::keep`). Against hyper-util's legacy pool this saves, per request,
//! its checkout, a SipHash of the authority and the task that re-pooled every connection:
//! about 8k instructions of a 4 KB request (docs/src/performance.md).
//!
//! An HTTP/2 connection (a provider with `http2 = true`) never leaves its list: each request
//! takes one of its streams, up to the server's limit, and gives it back when the answer's
//! body is done or dropped (`StreamSlot`).

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use http::Uri;
use http::header::HeaderValue;
use http::uri::Authority;
use hyper::client::conn::{http1, http2};
use hyper_rustls::MaybeHttpsStream;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::net::TcpStream;
use tokio::sync::Mutex;
use tokio::time::Instant;

use crate::providers::outbound::OutBody;

/// Connections kept per origin: enough for a thousand concurrent requests to one provider to
/// find a warm connection on their next turn.
pub(super) const MAX_PER_ORIGIN: usize = 1024;

/// How long a connection may sit unused before it is closed (reqwest's default, kept).
pub(super) const IDLE_TIMEOUT: Duration = Duration::from_secs(90);

/// Streams opened on one HTTP/2 connection before another is made, unless the server allows
/// fewer: the least a server should allow (RFC 9113, 6.5.2).
pub(super) const MAX_STREAMS_PER_CONNECTION: usize = 100;

/// What a request sends on.
pub(super) enum Sender {
    /// An HTTP/1.1 connection of its own, back in the pool once the answer's head is in.
    Http1(http1::SendRequest<OutBody>),
    /// A stream of a shared HTTP/2 connection, counted until the answer's body is done.
    Http2(http2::SendRequest<OutBody>, StreamSlot),
}

/// A connection to an origin: TCP, and TLS for https.
pub(super) type Io = MaybeHttpsStream<TokioIo<TcpStream>>;

/// hyper's half of an HTTP/2 connection that its task drives.
pub(super) type Http2Connection = http2::Connection<Io, OutBody, TokioExecutor>;

/// An HTTP/2 connection's streams: how many are in use, and the connection itself, which
/// knows how many its server allows.
pub struct Streams {
    in_use: AtomicUsize,
    /// Driven by the connection's task ([`Streams::poll_connection`]), and asked for the
    /// server's limit at each checkout. A copy taken whenever the task is polled would lag:
    /// h2 applies the server's `SETTINGS` in a task of its own, and this one is polled only
    /// when a request is handed to it, so a burst checked out before that would all see the
    /// limit the connection started with and overfill it. `None` once the connection is done.
    connection: std::sync::Mutex<Option<Pin<Box<Http2Connection>>>>,
}

impl Streams {
    pub(super) fn new(connection: Http2Connection) -> Streams {
        Streams {
            in_use: AtomicUsize::new(0),
            connection: std::sync::Mutex::new(Some(Box::pin(connection))),
        }
    }

    /// Polls the connection; ready when it is closed, and then lets go of it.
    pub(super) fn poll_connection(&self, cx: &mut Context<'_>) -> Poll<()> {
        let Ok(mut connection) = self.connection.lock() else {
            return Poll::Ready(());
        };
        let Some(driven) = connection.as_mut() else {
            return Poll::Ready(());
        };
        // Its error, if any, reaches the requests that were using it.
        let polled = driven.as_mut().poll(cx).map(|_| ());
        if polled.is_ready() {
            *connection = None;
        }
        polled
    }

    /// What the server's `SETTINGS_MAX_CONCURRENT_STREAMS` allows now (before they arrive,
    /// what the connection started with); `None` once the connection is done.
    fn allowed(&self) -> Option<usize> {
        match self.connection.lock().as_deref() {
            Ok(Some(connection)) => Some(connection.current_max_send_streams()),
            _ => None,
        }
    }

    fn in_use(&self) -> usize {
        self.in_use.load(Ordering::Relaxed)
    }

    fn has_room(&self) -> bool {
        self.allowed()
            .is_some_and(|allowed| self.in_use() < allowed.min(MAX_STREAMS_PER_CONNECTION))
    }
}

impl fmt::Debug for Streams {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Streams")
            .field("in_use", &self.in_use())
            .finish_non_exhaustive()
    }
}

/// One of an HTTP/2 connection's streams in use: dropped with the answer's body.
#[derive(Debug)]
pub struct StreamSlot(Arc<Streams>);

impl StreamSlot {
    fn take(streams: &Arc<Streams>) -> StreamSlot {
        streams.in_use.fetch_add(1, Ordering::Relaxed);
        StreamSlot(streams.clone())
    }
}

impl Drop for StreamSlot {
    fn drop(&mut self) {
        self.0.in_use.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Where a connection goes: the scheme, the authority as a URI names them, and whether it
/// speaks HTTP/2.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct OriginKey {
    https: bool,
    authority: Authority,
    pub(super) http2: bool,
}

impl OriginKey {
    /// The origin `uri` names, with the `Host` header a request to it carries (its port only
    /// when it is not the scheme's default), or `None` for a URI without scheme or host.
    pub(super) fn of(uri: &Uri, http2: bool) -> Option<(OriginKey, HeaderValue)> {
        let https = match uri.scheme_str()? {
            "https" => true,
            "http" => false,
            _ => return None,
        };
        let authority = uri.authority()?.clone();
        let host = match authority.port_u16() {
            Some(port) if port != if https { 443 } else { 80 } => {
                // The authority as written is that `host:port`, unless it holds user
                // information or a port spelt with leading zeros; then it is written anew
                // (`format!` cost more than the rest of this function).
                let written = authority.as_str();
                let plain = !written.contains('@')
                    && authority
                        .port()
                        .is_some_and(|port| !port.as_str().starts_with('0'));
                if plain {
                    HeaderValue::from_str(written)
                } else {
                    HeaderValue::from_str(&format!("{}:{port}", authority.host()))
                }
            }
            _ => HeaderValue::from_str(authority.host()),
        }
        .ok()?;
        Some((
            OriginKey {
                https,
                authority,
                http2,
            },
            host,
        ))
    }
}

struct Pooled {
    sender: http1::SendRequest<OutBody>,
    /// When it last carried a request; the idle clock starts here.
    last_used: Instant,
}

impl Pooled {
    /// Closed by the peer or by an error, or unused for longer than `idle_timeout`.
    fn is_spent(&self, now: Instant, idle_timeout: Duration) -> bool {
        self.sender.is_closed()
            || (self.sender.is_ready() && now.duration_since(self.last_used) > idle_timeout)
    }
}

/// An HTTP/2 connection, with the count of its streams in use.
struct Shared {
    sender: http2::SendRequest<OutBody>,
    streams: Arc<Streams>,
    last_used: Instant,
}

impl Shared {
    /// Neither closed nor carrying no stream for longer than `idle_timeout`. A connection
    /// seen busy counts as used now, so one whose long stream just ended is not idle since
    /// the stream began (at worst, since the last look: a checkout or the sweep).
    fn is_kept(&mut self, now: Instant, idle_timeout: Duration) -> bool {
        if self.streams.in_use() > 0 {
            self.last_used = now;
        }
        !self.sender.is_closed() && now.duration_since(self.last_used) <= idle_timeout
    }

    /// Whether it may open another stream now.
    fn has_room(&self) -> bool {
        self.sender.is_ready() && self.streams.has_room()
    }
}

struct Origin {
    key: OriginKey,
    connections: Vec<Pooled>,
    /// HTTP/2 connections; an origin with `http2` also keeps HTTP/1.1 ones, when a TLS
    /// server chose HTTP/1.1.
    shared: Vec<Shared>,
    /// Held while an HTTP/2 connection is being made, so that a burst of requests waits for
    /// it rather than each opening one.
    connecting: Arc<Mutex<()>>,
    /// The streams this origin's server allowed its newest connection, as of the last new
    /// one: a new connection starts with it, since the requests waiting for it are sent
    /// before its own `SETTINGS` arrive.
    streams_allowed: usize,
}

impl Origin {
    fn new(key: OriginKey) -> Origin {
        Origin {
            key,
            connections: Vec::new(),
            shared: Vec::new(),
            connecting: Arc::default(),
            streams_allowed: MAX_STREAMS_PER_CONNECTION,
        }
    }
}

/// The connections of one client on one thread. Origins are the configured providers' base
/// URLs, so their list stays short and is searched in order.
#[derive(Default)]
pub(super) struct Pool {
    origins: Vec<Origin>,
}

impl Pool {
    /// Takes a connection to `key` that is ready for a request, dropping spent ones met on
    /// the way; `None` when a new connection is needed.
    pub(super) fn checkout(&mut self, key: &OriginKey) -> Option<Sender> {
        let origin = self.origins.iter_mut().find(|origin| origin.key == *key)?;
        let now = Instant::now();
        if key.http2 {
            origin
                .shared
                .retain_mut(|shared| shared.is_kept(now, IDLE_TIMEOUT));
            if let Some(shared) = origin.shared.iter_mut().find(|shared| shared.has_room()) {
                shared.last_used = now;
                let slot = StreamSlot::take(&shared.streams);
                return Some(Sender::Http2(shared.sender.clone(), slot));
            }
        }
        // From the end: the connections returned last sit there, and `swap_remove` is O(1).
        let mut index = origin.connections.len();
        while index > 0 {
            index -= 1;
            let pooled = &origin.connections[index];
            if pooled.is_spent(now, IDLE_TIMEOUT) {
                origin.connections.swap_remove(index);
            } else if pooled.sender.is_ready() {
                return Some(Sender::Http1(origin.connections.swap_remove(index).sender));
            }
        }
        None
    }

    /// The lock a request holds while it makes an HTTP/2 connection to `key`.
    pub(super) fn connecting(&mut self, key: &OriginKey) -> Arc<Mutex<()>> {
        self.origin(key).connecting.clone()
    }

    /// The streams a new HTTP/2 connection to `key` starts with: what the origin's server
    /// allowed its newest connection.
    pub(super) fn streams_allowed(&mut self, key: &OriginKey) -> usize {
        let origin = self.origin(key);
        if let Some(allowed) = origin
            .shared
            .last()
            .and_then(|newest| newest.streams.allowed())
        {
            origin.streams_allowed = allowed;
        }
        origin.streams_allowed
    }

    /// Adds a new HTTP/2 connection to `key`, and takes its first stream.
    pub(super) fn share(
        &mut self,
        key: &OriginKey,
        sender: http2::SendRequest<OutBody>,
        streams: Arc<Streams>,
    ) -> Sender {
        let slot = StreamSlot::take(&streams);
        self.origin(key).shared.push(Shared {
            sender: sender.clone(),
            streams,
            last_used: Instant::now(),
        });
        Sender::Http2(sender, slot)
    }

    fn origin(&mut self, key: &OriginKey) -> &mut Origin {
        match self.origins.iter().position(|origin| origin.key == *key) {
            Some(index) => &mut self.origins[index],
            None => {
                self.origins.push(Origin::new(key.clone()));
                let last = self.origins.len() - 1;
                &mut self.origins[last]
            }
        }
    }

    /// Keeps `sender` for later requests once its answer's head arrived: it serves the next
    /// one when hyper has read the rest of this answer. Past [`MAX_PER_ORIGIN`] it is let go,
    /// and its connection closes when the answer is done.
    pub(super) fn put_back(&mut self, key: OriginKey, sender: http1::SendRequest<OutBody>) {
        if sender.is_closed() {
            return;
        }
        let pooled = Pooled {
            sender,
            last_used: Instant::now(),
        };
        match self.origins.iter_mut().find(|origin| origin.key == key) {
            Some(origin) if origin.connections.len() >= MAX_PER_ORIGIN => {}
            Some(origin) => origin.connections.push(pooled),
            None => {
                let mut origin = Origin::new(key);
                origin.connections.push(pooled);
                self.origins.push(origin);
            }
        }
    }

    /// Closes the connections that are closed or unused for longer than `idle_timeout`, so
    /// an idle gateway does not hold them open.
    pub(super) fn sweep(&mut self, idle_timeout: Duration) {
        let now = Instant::now();
        for origin in &mut self.origins {
            origin
                .connections
                .retain(|pooled| !pooled.is_spent(now, idle_timeout));
            origin
                .shared
                .retain_mut(|shared| shared.is_kept(now, idle_timeout));
        }
        self.origins
            .retain(|origin| !origin.connections.is_empty() || !origin.shared.is_empty());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(uri: &str) -> (OriginKey, HeaderValue) {
        OriginKey::of(&uri.parse().unwrap(), false).unwrap()
    }

    #[test]
    fn the_host_header_names_a_port_only_when_it_is_not_the_default() {
        assert_eq!(key("https://api.example.com/v1").1, "api.example.com");
        assert_eq!(key("https://api.example.com:443/v1").1, "api.example.com");
        assert_eq!(
            key("https://api.example.com:8443/v1").1,
            "api.example.com:8443"
        );
        assert_eq!(key("http://127.0.0.1:80/v1").1, "127.0.0.1");
        assert_eq!(key("http://127.0.0.1:443/v1").1, "127.0.0.1:443");
        assert_eq!(key("http://[::1]:8080/v1").1, "[::1]:8080");
        assert_eq!(key("http://u:p@a.example:8080/v1").1, "a.example:8080");
        assert_eq!(key("http://a.example:08080/v1").1, "a.example:8080");
    }

    #[test]
    fn scheme_and_authority_tell_origins_apart() {
        assert_eq!(key("http://a:1/x").0, key("http://a:1/y?z").0);
        assert_ne!(key("http://a:1/x").0, key("https://a:1/x").0);
        assert_ne!(key("http://a:1/x").0, key("http://a:2/x").0);
        assert!(OriginKey::of(&"/v1/chat".parse().unwrap(), false).is_none());
        assert!(OriginKey::of(&"ftp://a/x".parse().unwrap(), false).is_none());
        let http2 = OriginKey::of(&"http://a:1/x".parse().unwrap(), true).unwrap();
        assert_ne!(key("http://a:1/x").0, http2.0);
    }
}
