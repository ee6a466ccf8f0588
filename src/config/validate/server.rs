//! `[server]`: where the gateway listens and the bounds on what a client or upstream may cost.

use std::net::SocketAddr;
use std::time::Duration;

use super::Errors;
use crate::config::ServerConfig;
use crate::config::raw::RawServer;

/// A whole request head in this long, or the connection is closed.
pub const DEFAULT_HEADER_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a kept-alive connection may sit between requests.
pub const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(60);
/// How long a Responses WebSocket may sit with nothing in flight: an agent runs its tools
/// between turns.
pub const DEFAULT_WEBSOCKET_IDLE_TIMEOUT: Duration = Duration::from_secs(600);
/// A whole request body in this long of its head.
pub const DEFAULT_BODY_TIMEOUT: Duration = Duration::from_secs(30);
/// Shutdown waits this long for in-flight requests: reasoning models stream for minutes, and
/// a rolling deploy should not cut them.
pub const DEFAULT_SHUTDOWN_GRACE: Duration = Duration::from_secs(600);
/// After SIGTERM, `/readyz` is 503 while connections are still accepted for this long: about
/// two health-check intervals of a typical load balancer.
pub const DEFAULT_DRAIN_DELAY: Duration = Duration::from_secs(5);
/// Far above any real completion, far below what would strain memory.
pub const DEFAULT_MAX_UPSTREAM_BODY_BYTES: u64 = 32 * 1024 * 1024;
/// Larger than any real event; a longer one means the upstream is not speaking SSE.
pub const DEFAULT_MAX_SSE_EVENT_BYTES: u64 = 4 * 1024 * 1024;
/// More serving threads than any machine's cores is a typo, not a tuning.
const MAX_THREADS: usize = 1024;

pub fn server(errors: &mut Errors, raw: RawServer) -> ServerConfig {
    let fallback: SocketAddr = ([127, 0, 0, 1], 8080).into();
    let listen = raw.listen.as_deref().unwrap_or("127.0.0.1:8080");
    let mut bytes = |field: &str, value: Option<u64>, default: u64| {
        let value = value.unwrap_or(default);
        if value == 0 {
            errors.add(field, "must be greater than 0");
        }
        usize::try_from(value).unwrap_or(usize::MAX)
    };
    let max_body_bytes = bytes("server.max_body_bytes", raw.max_body_bytes, 4 * 1024 * 1024);
    let max_upstream_body_bytes = bytes(
        "server.max_upstream_body_bytes",
        raw.max_upstream_body_bytes,
        DEFAULT_MAX_UPSTREAM_BODY_BYTES,
    );
    let max_sse_event_bytes = bytes(
        "server.max_sse_event_bytes",
        raw.max_sse_event_bytes,
        DEFAULT_MAX_SSE_EVENT_BYTES,
    );
    if raw.max_connections == Some(0) {
        errors.add("server.max_connections", "must be greater than 0");
    }
    if raw.max_connections_per_ip == Some(0) {
        errors.add("server.max_connections_per_ip", "must be greater than 0");
    }
    let threads = raw.threads.and_then(|n| match usize::try_from(n) {
        Ok(n @ 1..=MAX_THREADS) => Some(n),
        _ => {
            errors.add(
                "server.threads",
                format!("must be between 1 and {MAX_THREADS}"),
            );
            None
        }
    });
    let mut duration = |field: &str, value: Option<String>, default: Duration| {
        let value = errors.duration(field, value.as_deref(), default);
        if value.is_zero() {
            errors.add(field, "must be greater than 0");
        }
        value
    };
    let header_timeout = duration(
        "server.header_timeout",
        raw.header_timeout,
        DEFAULT_HEADER_TIMEOUT,
    );
    let idle_timeout = duration(
        "server.idle_timeout",
        raw.idle_timeout,
        DEFAULT_IDLE_TIMEOUT,
    );
    let websocket_idle_timeout = duration(
        "server.websocket_idle_timeout",
        raw.websocket_idle_timeout,
        DEFAULT_WEBSOCKET_IDLE_TIMEOUT,
    );
    let body_timeout = duration(
        "server.body_timeout",
        raw.body_timeout,
        DEFAULT_BODY_TIMEOUT,
    );
    let shutdown_grace = duration(
        "server.shutdown_grace",
        raw.shutdown_grace,
        DEFAULT_SHUTDOWN_GRACE,
    );
    // Zero is allowed: no drain, for a gateway no load balancer checks.
    let drain_delay = errors.duration(
        "server.drain_delay",
        raw.drain_delay.as_deref(),
        DEFAULT_DRAIN_DELAY,
    );
    ServerConfig {
        listen: errors.addr("server.listen", listen).unwrap_or(fallback),
        max_body_bytes,
        admin_listen: raw
            .admin_listen
            .and_then(|a| errors.addr("server.admin_listen", &a)),
        header_timeout,
        idle_timeout,
        websocket_idle_timeout,
        body_timeout,
        max_connections: raw
            .max_connections
            .map(|n| usize::try_from(n).unwrap_or(usize::MAX)),
        max_connections_per_ip: raw
            .max_connections_per_ip
            .map(|n| usize::try_from(n).unwrap_or(usize::MAX)),
        shutdown_grace,
        drain_delay,
        max_upstream_body_bytes,
        max_sse_event_bytes,
        threads,
        forward_headers: super::forward::header_names(
            errors,
            "server.forward_headers",
            raw.forward_headers.unwrap_or_default(),
        ),
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use crate::config::Config;

    #[test]
    fn bounds_default_as_documented() {
        let server = Config::parse("").unwrap().server;
        assert_eq!(server.header_timeout, Duration::from_secs(10));
        assert_eq!(server.idle_timeout, Duration::from_secs(60));
        assert_eq!(server.websocket_idle_timeout, Duration::from_secs(600));
        assert_eq!(server.body_timeout, Duration::from_secs(30));
        assert_eq!(server.shutdown_grace, Duration::from_secs(600));
        assert_eq!(server.drain_delay, Duration::from_secs(5));
        assert_eq!(server.max_connections, None);
        assert_eq!(server.max_upstream_body_bytes, 32 * 1024 * 1024);
        assert_eq!(server.max_sse_event_bytes, 4 * 1024 * 1024);
        assert_eq!(server.threads, None);
    }

    #[test]
    fn threads_are_counted_from_one() {
        let server = Config::parse("[server]\nthreads = 3\n").unwrap().server;
        assert_eq!(server.threads, Some(3));
        for threads in ["0", "100000"] {
            let text = format!("[server]\nthreads = {threads}\n");
            let Err(crate::config::ConfigError::Invalid(errors)) = Config::parse(&text) else {
                panic!("threads = {threads} is accepted");
            };
            assert_eq!(errors[0].field, "server.threads");
        }
    }

    #[test]
    fn zero_bounds_name_their_fields() {
        let text = "[server]\nheader_timeout = \"0s\"\nmax_connections = 0\nmax_upstream_body_bytes = 0\nidle_timeout = \"soon\"\n";
        let Err(crate::config::ConfigError::Invalid(errors)) = Config::parse(text) else {
            panic!("zero bounds are accepted");
        };
        let fields: Vec<&str> = errors.iter().map(|e| e.field.as_str()).collect();
        for field in [
            "server.header_timeout",
            "server.max_connections",
            "server.max_upstream_body_bytes",
            "server.idle_timeout",
        ] {
            assert!(fields.contains(&field), "{field} not in {fields:?}");
        }
    }
}
