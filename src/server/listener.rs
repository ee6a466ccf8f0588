//! The gateway's listener: TCP_NODELAY on every connection (a small answer must not wait on
//! Nagle's algorithm), a count of open connections that operators and tests can watch, and
//! each connection's peer address for the handlers that need it.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use axum::extract::FromRequestParts;
use axum::extract::connect_info::{ConnectInfo, Connected};
use axum::http::request::Parts;
use axum::serve::{IncomingStream, Listener};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

/// Accepts connections and counts the open ones.
pub struct CountingListener {
    inner: TcpListener,
    open: Arc<watch::Sender<usize>>,
}

impl CountingListener {
    /// Wraps `inner`, counting into `open`.
    pub fn new(inner: TcpListener, open: Arc<watch::Sender<usize>>) -> CountingListener {
        CountingListener { inner, open }
    }
}

impl Listener for CountingListener {
    type Io = CountedStream;
    type Addr = std::net::SocketAddr;

    async fn accept(&mut self) -> (CountedStream, std::net::SocketAddr) {
        let (stream, addr) = Listener::accept(&mut self.inner).await;
        // Without it, a small response can sit out the peer's delayed ACK.
        let _ = stream.set_nodelay(true);
        self.open.send_modify(|n| *n += 1);
        let stream = CountedStream {
            stream,
            open: self.open.clone(),
        };
        (stream, addr)
    }

    fn local_addr(&self) -> io::Result<std::net::SocketAddr> {
        self.inner.local_addr()
    }
}

/// A connection that uncounts itself when the server lets go of it.
pub struct CountedStream {
    stream: TcpStream,
    open: Arc<watch::Sender<usize>>,
}

impl Drop for CountedStream {
    fn drop(&mut self) {
        self.open.send_modify(|n| *n = n.saturating_sub(1));
    }
}

impl AsyncRead for CountedStream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_read(cx, buf)
    }
}

impl AsyncWrite for CountedStream {
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

/// A connection's peer, recorded by the server for each request on it.
#[derive(Clone, Copy, Debug)]
pub struct Peer(pub std::net::SocketAddr);

impl Connected<IncomingStream<'_, CountingListener>> for Peer {
    fn connect_info(stream: IncomingStream<'_, CountingListener>) -> Peer {
        Peer(*stream.remote_addr())
    }
}

/// The client's address, when the server recorded it (a router driven directly, as some
/// tests do, has none); extracting it never fails.
#[derive(Clone, Copy, Debug)]
pub struct ClientAddr(pub Option<std::net::IpAddr>);

impl<S: Send + Sync> FromRequestParts<S> for ClientAddr {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<ClientAddr, Self::Rejection> {
        let peer = parts.extensions.get::<ConnectInfo<Peer>>();
        Ok(ClientAddr(peer.map(|ConnectInfo(Peer(addr))| addr.ip())))
    }
}
