//! The accept loop: at most `max_connections` clients served at once, a few more told so
//! with a 503, and a shutdown that drains within `shutdown_grace` whatever clients do. Each
//! request carries its connection's peer address for the handlers that need it.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::{TcpListener, TcpStream};
use tokio::runtime::Handle;
use tokio::sync::{Semaphore, watch};
use tokio::task::JoinSet;

use super::AppState;
use super::connection::roster::Roster;
use super::connection::{self, ClientStream, Peer, Service, Timeouts};
use super::shards::{Placed, Shards};

/// Descriptors kept for everything but client and upstream sockets: the listeners, the
/// store, the runtime, logs.
const RESERVED_DESCRIPTORS: u64 = 64;
/// The descriptor limit assumed when the system will not say.
const ASSUMED_DESCRIPTORS: u64 = 1024;
/// How long a connection over the cap waits for a slot before it is answered 503.
const OVERFLOW_WAIT: Duration = Duration::from_millis(500);
/// After the grace, how long streams get to send their closing error event.
const LAST_WORDS: Duration = Duration::from_secs(1);
/// Connections to the admin API's own address; an operator's tools, not traffic.
const ADMIN_MAX_CONNECTIONS: usize = 32;

/// How many connections a listener serves, and what happens past that.
#[derive(Clone, Copy, Debug)]
pub struct Capacity {
    /// Served at once.
    pub max: usize,
    /// Held beyond `max` to be answered 503 (or `/healthz`); past these, the listener stops
    /// accepting until one closes.
    pub overflow: usize,
    /// The most connections one address may hold (`[server] max_connections_per_ip`).
    pub per_ip: Option<usize>,
}

impl Capacity {
    /// The gateway's capacity: `[server] max_connections`, or what the descriptor limit allows.
    pub fn for_clients(configured: Option<usize>, per_ip: Option<usize>) -> Capacity {
        let capacity = match configured {
            Some(max) => Capacity {
                max,
                overflow: (max / 8).clamp(4, 1024),
                per_ip: None,
            },
            None => {
                let limit = descriptor_limit().unwrap_or(ASSUMED_DESCRIPTORS);
                default_capacity(limit)
            }
        };
        Capacity { per_ip, ..capacity }
    }

    /// The admin listener's own, small capacity.
    pub fn for_admin() -> Capacity {
        Capacity {
            max: ADMIN_MAX_CONNECTIONS,
            overflow: 4,
            per_ip: None,
        }
    }
}

/// Each client connection may hold an upstream connection too, so client sockets, served
/// or waiting, get half of what is left after the reserve.
fn default_capacity(descriptor_limit: u64) -> Capacity {
    let clients = descriptor_limit.saturating_sub(RESERVED_DESCRIPTORS) / 2;
    let clients = usize::try_from(clients).unwrap_or(usize::MAX);
    let overflow = (clients / 8).clamp(1, 1024);
    Capacity {
        max: clients.saturating_sub(overflow).max(1),
        overflow,
        per_ip: None,
    }
}

/// The soft limit on open files (RLIMIT_NOFILE), if the system says.
#[cfg(unix)]
pub fn descriptor_limit() -> Option<u64> {
    let (soft, _hard) = rlimit::Resource::NOFILE.get().ok()?;
    (soft != rlimit::INFINITY).then_some(soft)
}

#[cfg(not(unix))]
pub fn descriptor_limit() -> Option<u64> {
    None
}

/// Serves `listener` until `stop` turns true, then drains: idle connections close, requests
/// in flight get `shutdown_grace`, then streams are told to end, then whatever is left is
/// dropped. Connections are served on `shards` when given, else on this runtime.
pub async fn serve(
    listener: TcpListener,
    service: Service,
    capacity: Capacity,
    open: Arc<watch::Sender<usize>>,
    state: AppState,
    shards: Option<&Shards>,
    mut stop: watch::Receiver<bool>,
) {
    let timeouts = Timeouts::new(
        &state.config().server,
        state.config().retry.request_deadline,
    );
    let roster = Roster::new(capacity.per_ip);
    let slots = Arc::new(Semaphore::new(capacity.max));
    let overflow = Arc::new(Semaphore::new(capacity.overflow));
    let mut connections = JoinSet::new();
    // Leave to accept one more socket. Without it the listener stops accepting, and new
    // clients wait in the kernel's backlog rather than being closed unanswered.
    let mut room = None;
    loop {
        let Some(waiting) = room.take() else {
            room = tokio::select! {
                biased;
                _ = stop.wait_for(|stop| *stop) => break,
                Some(_) = connections.join_next(), if !connections.is_empty() => continue,
                room = overflow.clone().acquire_owned() => room.ok(),
            };
            continue;
        };
        let accepted = tokio::select! {
            biased;
            _ = stop.wait_for(|stop| *stop) => break,
            Some(_) = connections.join_next(), if !connections.is_empty() => {
                room = Some(waiting);
                continue;
            }
            accepted = listener.accept() => accepted,
        };
        let (stream, peer) = match accepted {
            Ok((stream, peer)) => (stream, Peer(peer)),
            Err(error) => {
                // Out of descriptors, most likely: waiting lets connections close, where
                // retrying at once would spin.
                tracing::warn!(%error, "cannot accept a connection");
                room = Some(waiting);
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let Some(stream) = Accepted::new(stream, shards) else {
            room = Some(waiting);
            continue;
        };
        let (service, stop, open) = (service.clone(), stop.clone(), open.clone());
        let ip = peer.0.ip();
        // An address at its own cap makes room from its own idle connections, or is refused.
        let over_ip_cap = roster.ip_is_full(ip) && !roster.evict_idlest(Some(ip));
        let roster = roster.clone();
        if !over_ip_cap && let Ok(slot) = slots.clone().try_acquire_owned() {
            drop(waiting);
            stream.spawn(&mut connections, move |stream| async move {
                let stream = ClientStream::new(stream, open);
                let enrolled = roster.enrol(ip, &stream);
                connection::serve(stream, peer, service, timeouts, stop, &enrolled).await;
                drop(slot);
            });
            continue;
        }
        // Full: the connection idle longest closes to make room for this one.
        if !over_ip_cap {
            roster.evict_idlest(None);
        }
        let (slots, telemetry) = (slots.clone(), state.telemetry.clone());
        stream.spawn(&mut connections, move |stream| async move {
            let stream = ClientStream::new(stream, open);
            let slot = match over_ip_cap {
                true => None,
                false => tokio::time::timeout(OVERFLOW_WAIT, slots.acquire_owned())
                    .await
                    .ok()
                    .and_then(Result::ok),
            };
            match slot {
                Some(slot) => {
                    drop(waiting);
                    let enrolled = roster.enrol(ip, &stream);
                    connection::serve(stream, peer, service, timeouts, stop, &enrolled).await;
                    drop(slot);
                }
                None => {
                    connection::refuse(stream, timeouts.header, telemetry).await;
                    drop(waiting);
                }
            }
        });
    }
    drop(listener);
    drain(connections, &state).await;
}

/// An accepted socket, and where it will be served.
enum Accepted<'a> {
    Here(TcpStream),
    /// Taken off this runtime's reactor, to join the shard's.
    OnShard(std::net::TcpStream, &'a Handle, Placed),
}

impl<'a> Accepted<'a> {
    fn new(stream: TcpStream, shards: Option<&'a Shards>) -> Option<Accepted<'a>> {
        let Some(shards) = shards else {
            return Some(Accepted::Here(stream));
        };
        match stream.into_std() {
            Ok(stream) => {
                let (shard, placed) = shards.place();
                Some(Accepted::OnShard(stream, shard, placed))
            }
            Err(error) => {
                tracing::warn!(%error, "cannot hand a connection to a serving thread");
                None
            }
        }
    }

    /// Runs `serve` with the socket, on the runtime chosen for it.
    fn spawn<F>(
        self,
        connections: &mut JoinSet<()>,
        serve: impl FnOnce(TcpStream) -> F + Send + 'static,
    ) where
        F: Future<Output = ()> + Send + 'static,
    {
        match self {
            Accepted::Here(stream) => {
                connections.spawn(serve(stream));
            }
            Accepted::OnShard(stream, shard, placed) => {
                let task = async move {
                    // Registers the socket with the shard's reactor: this runs there.
                    match TcpStream::from_std(stream) {
                        Ok(stream) => serve(stream).await,
                        Err(error) => tracing::warn!(%error, "cannot serve a connection"),
                    }
                    drop(placed);
                };
                connections.spawn_on(task, shard);
            }
        }
    }
}

async fn all_closed(connections: &mut JoinSet<()>) {
    while connections.join_next().await.is_some() {}
}

async fn drain(mut connections: JoinSet<()>, state: &AppState) {
    let grace = state.config().server.shutdown_grace;
    if tokio::time::timeout(grace, all_closed(&mut connections))
        .await
        .is_ok()
    {
        return;
    }
    tracing::warn!(
        connections = connections.len(),
        "shutdown grace is over: ending the requests still in flight"
    );
    state.grace_over.send_replace(true);
    if tokio::time::timeout(LAST_WORDS, all_closed(&mut connections))
        .await
        .is_err()
    {
        connections.shutdown().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_leaves_room_for_upstream_sockets_and_the_reserve() {
        for limit in [256, 1024, 65536] {
            let capacity = default_capacity(limit);
            let clients = (capacity.max + capacity.overflow) as u64;
            // Every client socket, and an upstream socket for each served one.
            assert!(clients + capacity.max as u64 + RESERVED_DESCRIPTORS <= limit);
        }
        assert_eq!(default_capacity(256).max, 84);
        assert_eq!(default_capacity(10).max, 1);
    }

    #[test]
    fn a_configured_cap_wins() {
        assert_eq!(Capacity::for_clients(Some(7), None).max, 7);
        assert!(Capacity::for_clients(None, None).max >= 1);
        assert_eq!(Capacity::for_clients(None, Some(3)).per_ip, Some(3));
    }
}
