//! One thread's keep-alive connections to upstream origins. A connection is in its origin's
//! list while it is idle or still delivering a whole answer's body, out with a request until
//! the answer's head arrives, and with a task of its own while it carries a stream (see
//! `client::UpstreamClient::keep`). Against hyper-util's legacy pool this saves, per request,
//! its checkout, a SipHash of the authority and the task that re-pooled every connection:
//! about 8k instructions of a 4 KB request (README, "Performance").

use std::time::Duration;

use http::Uri;
use http::header::HeaderValue;
use http::uri::Authority;
use hyper::client::conn::http1::SendRequest;
use tokio::time::Instant;

use crate::providers::outbound::OutBody;

/// Connections kept per origin: enough for a thousand concurrent requests to one provider to
/// find a warm connection on their next turn.
pub(super) const MAX_PER_ORIGIN: usize = 1024;

/// How long a connection may sit unused before it is closed (reqwest's default, kept).
pub(super) const IDLE_TIMEOUT: Duration = Duration::from_secs(90);

/// What a request sends on.
pub(super) type Sender = SendRequest<OutBody>;

/// Where a connection goes: the scheme and the authority, as a URI names them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct OriginKey {
    https: bool,
    authority: Authority,
}

impl OriginKey {
    /// The origin `uri` names, with the `Host` header a request to it carries (its port only
    /// when it is not the scheme's default), or `None` for a URI without scheme or host.
    pub(super) fn of(uri: &Uri) -> Option<(OriginKey, HeaderValue)> {
        let https = match uri.scheme_str()? {
            "https" => true,
            "http" => false,
            _ => return None,
        };
        let authority = uri.authority()?.clone();
        let host = match authority.port_u16() {
            Some(port) if port != if https { 443 } else { 80 } => {
                HeaderValue::from_str(&format!("{}:{port}", authority.host()))
            }
            _ => HeaderValue::from_str(authority.host()),
        }
        .ok()?;
        Some((OriginKey { https, authority }, host))
    }
}

struct Pooled {
    sender: Sender,
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

struct Origin {
    key: OriginKey,
    connections: Vec<Pooled>,
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
        // From the end: the connections returned last sit there, and `swap_remove` is O(1).
        let mut index = origin.connections.len();
        while index > 0 {
            index -= 1;
            let pooled = &origin.connections[index];
            if pooled.is_spent(now, IDLE_TIMEOUT) {
                origin.connections.swap_remove(index);
            } else if pooled.sender.is_ready() {
                return Some(origin.connections.swap_remove(index).sender);
            }
        }
        None
    }

    /// Keeps `sender` for later requests once its answer's head arrived: it serves the next
    /// one when hyper has read the rest of this answer. Past [`MAX_PER_ORIGIN`] it is let go,
    /// and its connection closes when the answer is done.
    pub(super) fn put_back(&mut self, key: OriginKey, sender: Sender) {
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
            None => self.origins.push(Origin {
                key,
                connections: vec![pooled],
            }),
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
        }
        self.origins.retain(|origin| !origin.connections.is_empty());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(uri: &str) -> (OriginKey, HeaderValue) {
        OriginKey::of(&uri.parse().unwrap()).unwrap()
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
    }

    #[test]
    fn scheme_and_authority_tell_origins_apart() {
        assert_eq!(key("http://a:1/x").0, key("http://a:1/y?z").0);
        assert_ne!(key("http://a:1/x").0, key("https://a:1/x").0);
        assert_ne!(key("http://a:1/x").0, key("http://a:2/x").0);
        assert!(OriginKey::of(&"/v1/chat".parse().unwrap()).is_none());
        assert!(OriginKey::of(&"ftp://a/x".parse().unwrap()).is_none());
    }
}
