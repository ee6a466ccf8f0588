//! A TCP proxy a test puts between the gateway and Redis (or PostgreSQL), to cut its
//! connections, lose a reply, or stop answering on demand.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// Which reply to lose: the one that answers a request containing `request`, recognised by
/// containing `reply`.
#[derive(Clone, Copy)]
struct LoseReply {
    request: &'static [u8],
    reply: &'static [u8],
}

struct Shared {
    upstream: SocketAddr,
    /// Bumped by every cut; each connection ends when it changes.
    cuts: watch::Sender<u64>,
    lose: Mutex<Option<LoseReply>>,
    /// While true, nothing is forwarded either way and new connections are left waiting: a
    /// server that hangs with its sockets open.
    frozen: watch::Sender<bool>,
    /// How late each reply is passed on: a server that answers, slowly.
    delay: watch::Sender<std::time::Duration>,
    /// Connections accepted so far, frozen or not.
    accepted: watch::Sender<u64>,
}

impl Shared {
    fn cut(&self) {
        self.cuts.send_modify(|n| *n += 1);
    }
}

/// Forwards every connection to `upstream` until told otherwise.
pub struct Proxy {
    addr: SocketAddr,
    shared: Arc<Shared>,
    accept: JoinHandle<()>,
}

impl Proxy {
    /// Listens on an ephemeral loopback port.
    pub async fn start(upstream: SocketAddr) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let shared = Arc::new(Shared {
            upstream,
            cuts: watch::Sender::new(0),
            lose: Mutex::new(None),
            frozen: watch::Sender::new(false),
            delay: watch::Sender::new(std::time::Duration::ZERO),
            accepted: watch::Sender::new(0),
        });
        let accepting = shared.clone();
        let accept = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                accepting.accepted.send_modify(|n| *n += 1);
                let shared = accepting.clone();
                let cut = shared.cuts.subscribe();
                tokio::spawn(async move {
                    let _ = shared.frozen.subscribe().wait_for(|frozen| !frozen).await;
                    if let Ok(server) = TcpStream::connect(shared.upstream).await {
                        pump(client, server, shared, cut).await;
                    }
                });
            }
        });
        Proxy {
            addr,
            shared,
            accept,
        }
    }

    /// `redis://` at the proxy.
    pub fn url(&self) -> String {
        format!("redis://{}", self.addr)
    }

    /// Closes every open connection; new ones are forwarded as before.
    pub fn cut(&self) {
        self.shared.cut();
    }

    /// The proxy's own address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Stops forwarding (`true`) or resumes (`false`), keeping every connection open.
    pub fn freeze(&self, frozen: bool) {
        self.shared.frozen.send_replace(frozen);
    }

    /// Passes each reply on `delay` late (zero: at once), keeping every connection open.
    pub fn delay(&self, delay: std::time::Duration) {
        self.shared.delay.send_replace(delay);
    }

    /// How many connections it has accepted.
    pub fn accepted(&self) -> u64 {
        *self.shared.accepted.borrow()
    }

    /// Resolves once it has accepted more than `count` connections.
    pub async fn accepted_more_than(&self, count: u64) {
        let _ = self
            .shared
            .accepted
            .subscribe()
            .wait_for(|n| *n > count)
            .await;
    }

    /// How many cuts there have been.
    pub fn cuts(&self) -> u64 {
        *self.shared.cuts.borrow()
    }

    /// Forwards the next request containing `request`, swallows what the server sends back on
    /// that connection until a chunk containing `reply`, then cuts every connection: the
    /// command ran, and its client never hears how.
    pub fn lose_reply(&self, request: &'static [u8], reply: &'static [u8]) {
        *self.shared.lose.lock().unwrap() = Some(LoseReply { request, reply });
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.accept.abort();
        self.shared.cut();
    }
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

async fn pump(
    mut client: TcpStream,
    mut server: TcpStream,
    shared: Arc<Shared>,
    mut cut: watch::Receiver<u64>,
) {
    let (mut client_read, mut client_write) = client.split();
    let (mut server_read, mut server_write) = server.split();
    let (mut up, mut down) = (vec![0u8; 64 * 1024], vec![0u8; 64 * 1024]);
    // The reply this connection is to lose, once its request went through.
    let mut losing: Option<LoseReply> = None;
    let mut frozen = shared.frozen.subscribe();
    loop {
        if *frozen.borrow_and_update() {
            tokio::select! {
                _ = cut.changed() => return,
                _ = frozen.wait_for(|frozen| !frozen) => continue,
            }
        }
        tokio::select! {
            _ = cut.changed() => return,
            _ = frozen.changed() => continue,
            read = client_read.read(&mut up) => {
                let Ok(n @ 1..) = read else { return };
                if losing.is_none() {
                    let mut lose = shared.lose.lock().unwrap();
                    if lose.is_some_and(|l| contains(&up[..n], l.request)) {
                        losing = lose.take();
                    }
                }
                if server_write.write_all(&up[..n]).await.is_err() {
                    return;
                }
            }
            read = server_read.read(&mut down) => {
                let Ok(n @ 1..) = read else { return };
                if let Some(lose) = losing {
                    if contains(&down[..n], lose.reply) {
                        shared.cut();
                        return;
                    }
                    continue;
                }
                let delay = *shared.delay.borrow();
                if !delay.is_zero() {
                    tokio::time::sleep(delay).await;
                }
                if client_write.write_all(&down[..n]).await.is_err() {
                    return;
                }
            }
        }
    }
}
