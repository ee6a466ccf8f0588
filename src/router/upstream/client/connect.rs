//! Making a connection to an origin: TCP and, for https, TLS by the connector, then an
//! HTTP/1.1 handshake, or for a provider with `http2 = true` an HTTP/2 one (when a TLS server
//! chose `h2`, or with prior knowledge over plain http).

use std::sync::Arc;

use http::Uri;
use hyper::client::conn::{http1, http2};
use hyper_rustls::MaybeHttpsStream;
use hyper_util::client::legacy::connect::Connection;
use hyper_util::rt::TokioExecutor;
use tower_service::Service;

use super::{Connector, TransportError, UpstreamClient};
use crate::providers::outbound::OutBody;
use crate::router::upstream::pool::{Io, MAX_STREAMS_PER_CONNECTION, OriginKey, Sender, Streams};

/// An HTTP/2 stream's receive window: what a slow reader lets the server send ahead. The
/// connection's window covers every stream's, so one stream left unread cannot stall the
/// others (hyper's defaults, 2 MiB a stream, would let a thousand slow readers hold 2 GB).
const HTTP2_STREAM_WINDOW: u32 = 256 * 1024;
const HTTP2_CONNECTION_WINDOW: u32 = HTTP2_STREAM_WINDOW * MAX_STREAMS_PER_CONNECTION as u32;

impl UpstreamClient {
    /// A new connection to `uri`'s origin, its task running on this thread's runtime. To an
    /// HTTP/2 origin, one request connects at a time and the others wait for its connection,
    /// which has room for them all (up to [`MAX_STREAMS_PER_CONNECTION`]).
    ///
    /// The connecting itself is boxed: it holds the TLS stream by value, kilobytes that would
    /// otherwise enlarge every request's future, and a burst waiting for an HTTP/2 connection
    /// holds only the wait.
    pub(super) async fn connect(
        &self,
        origin: &OriginKey,
        uri: &Uri,
    ) -> Result<Sender, TransportError> {
        if !origin.http2 {
            return Box::pin(self.connect_http1(uri.clone())).await;
        }
        let connecting = self.with_pool(|pool| pool.connecting(origin));
        let _turn = connecting.lock_owned().await;
        if let Some(sender) = self.with_pool(|pool| pool.checkout(origin)) {
            return Ok(sender);
        }
        Box::pin(self.connect_http2(origin, uri.clone())).await
    }

    async fn connect_http1(&self, uri: Uri) -> Result<Sender, TransportError> {
        let io = self.dial(&self.connector.http1, uri).await?;
        Ok(Sender::Http1(handshake_http1(io).await?))
    }

    async fn connect_http2(&self, origin: &OriginKey, uri: Uri) -> Result<Sender, TransportError> {
        let io = self.dial(&self.connector.http2, uri).await?;
        // Over TLS the server chose; over plain http HTTP/2 is spoken with prior knowledge.
        let http1_chosen =
            matches!(&io, MaybeHttpsStream::Https(_)) && !io.connected().is_negotiated_h2();
        if http1_chosen {
            return Ok(Sender::Http1(handshake_http1(io).await?));
        }
        // Until the server's SETTINGS arrive, the requests waiting for this connection are
        // counted against what the origin's server last allowed.
        let allowed = self.with_pool(|pool| pool.streams_allowed(origin));
        let (sender, connection) = http2::Builder::new(TokioExecutor::new())
            .initial_stream_window_size(HTTP2_STREAM_WINDOW)
            .initial_connection_window_size(HTTP2_CONNECTION_WINDOW)
            .initial_max_send_streams(allowed)
            .handshake(io)
            .await
            .map_err(|error| TransportError::Connect(error.into()))?;
        let streams = Arc::new(Streams::new(connection));
        let driven = streams.clone();
        tokio::spawn(std::future::poll_fn(move |cx| driven.poll_connection(cx)));
        Ok(self.with_pool(|pool| pool.share(origin, sender, streams)))
    }

    /// A TCP (and, for https, TLS) connection to `uri`'s origin.
    async fn dial(&self, connector: &Connector, uri: Uri) -> Result<Io, TransportError> {
        let mut connector = connector.clone();
        std::future::poll_fn(|cx| connector.poll_ready(cx))
            .await
            .map_err(TransportError::Connect)?;
        connector.call(uri).await.map_err(TransportError::Connect)
    }
}

/// An HTTP/1.1 connection over `io`, its task running on this thread's runtime.
async fn handshake_http1(io: Io) -> Result<http1::SendRequest<OutBody>, TransportError> {
    let (sender, connection) = http1::handshake(io)
        .await
        .map_err(|error| TransportError::Connect(error.into()))?;
    // Its error, if any, reaches the request that was using it.
    tokio::spawn(async move {
        let _ = connection.await;
    });
    Ok(sender)
}

#[cfg(test)]
mod tests {
    use std::pin::Pin;
    use std::time::Duration;

    use hyper::body::Body;

    use super::*;
    use crate::fake::{Behavior, FakeUpstream};
    use crate::providers::outbound::UpstreamRequest;
    use crate::router::upstream::pool::IDLE_TIMEOUT;

    #[tokio::test]
    async fn a_shared_connection_is_idle_from_its_last_stream_not_its_first() {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let client = UpstreamClient::new(Duration::from_secs(5)).unwrap();
        let fake = FakeUpstream::new("up")
            .then(Behavior::ok().chunks(10, 0).stall_after(1))
            .start()
            .await
            .unwrap();
        let uri = format!("{}/chat/completions", fake.base_url());
        let request = UpstreamRequest::post(uri.clone(), OutBody::default(), true).over_http2(true);
        let mut stream = client.send(request).await.unwrap().into_body();
        std::future::poll_fn(|cx| Pin::new(&mut stream).poll_frame(cx))
            .await
            .expect("a first event")
            .unwrap();
        let origin = OriginKey::of(&uri.parse().unwrap(), true).unwrap().0;
        // A stream longer than the idle timeout; the pool looks at its connection meanwhile.
        tokio::time::pause();
        tokio::time::advance(IDLE_TIMEOUT * 2).await;
        client.with_pool(|pool| pool.sweep(IDLE_TIMEOUT));
        drop(stream);
        // The stream just ended: its connection was in use a moment ago, so it is kept.
        client.with_pool(|pool| pool.sweep(IDLE_TIMEOUT));
        let kept = client.with_pool(|pool| pool.checkout(&origin));
        assert!(matches!(kept, Some(Sender::Http2(..))));
        assert_eq!(fake.stats().open_connections, 1);
    }
}
