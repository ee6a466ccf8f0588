//! A Redis to connect to: its URL, and what the URL should not hold (a password from the
//! environment or a file, the CA that signed a `rediss://` server's certificate).

use std::fmt;
use std::path::PathBuf;

use crate::secret::Secret;

/// One Redis, as `[limits]` or `[cluster]` names it.
#[derive(Clone)]
pub struct RedisTarget {
    /// `redis://`, `rediss://` (TLS) or `unix://`; may carry a password itself.
    pub url: String,
    /// `redis_password_env` or `redis_password_file`, sent in place of the URL's.
    pub password: Option<Secret>,
    /// `redis_ca_file`: the CAs a `rediss://` server's chain must lead to, in place of the
    /// platform's roots.
    pub ca_file: Option<PathBuf>,
}

impl RedisTarget {
    /// A target with nothing beside its URL.
    pub fn url(url: impl Into<String>) -> RedisTarget {
        RedisTarget {
            url: url.into(),
            password: None,
            ca_file: None,
        }
    }

    /// Host and port (or socket path): what errors and logs may show, never the password.
    pub fn shown(&self) -> String {
        match url::Url::parse(&self.url) {
            Ok(url) if matches!(url.scheme(), "unix" | "redis+unix") => url.path().to_owned(),
            Ok(url) => format!(
                "{}:{}",
                url.host_str().unwrap_or("127.0.0.1"),
                url.port().unwrap_or(6379)
            ),
            Err(_) => "the configured Redis".to_owned(),
        }
    }

    /// Whether the connection is TLS.
    pub fn tls(&self) -> bool {
        self.url.starts_with("rediss://")
    }

    /// The client for it; connecting is left to the caller. The error never repeats the URL.
    pub fn client(&self) -> Result<redis::Client, String> {
        // The TLS config is built on the process's default provider.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let mut info = redis::IntoConnectionInfo::into_connection_info(self.url.as_str())
            .map_err(|e| format!("the Redis client refuses the URL: {}", e.kind_name()))?;
        if let Some(password) = &self.password {
            let settings = info
                .redis_settings()
                .clone()
                .set_password(password.expose());
            info = info.set_redis_settings(settings);
        }
        let client = match &self.ca_file {
            Some(path) if self.tls() => {
                let root_cert = std::fs::read(path)
                    .map_err(|e| format!("redis_ca_file `{}`: {e}", path.display()))?;
                let certificates = redis::TlsCertificates {
                    client_tls: None,
                    root_cert: Some(root_cert),
                };
                redis::Client::build_with_tls(info, certificates)
            }
            _ => redis::Client::open(info),
        };
        client.map_err(|e| format!("the Redis client refuses the URL: {}", e.kind_name()))
    }
}

impl RedisTarget {
    /// A connection made at its first use and remade when lost, whose commands fail after
    /// `response_timeout`, so a Redis that hangs never holds a request for longer.
    pub fn lazy_connection(
        &self,
        response_timeout: std::time::Duration,
    ) -> Result<redis::aio::ConnectionManager, String> {
        use std::time::Duration;
        let config = redis::aio::ConnectionManagerConfig::new()
            .set_connection_timeout(Some(Duration::from_millis(250)))
            .set_response_timeout(Some(response_timeout))
            .set_number_of_retries(1)
            .set_max_delay(Duration::from_millis(500));
        redis::aio::ConnectionManager::new_lazy_with_config(self.client()?, config)
            .map_err(|e| format!("the Redis client refuses its settings: {:?}", e.kind()))
    }
}

/// The kind of a Redis error, in words that never carry its detail (which can be the URL).
trait KindName {
    fn kind_name(&self) -> String;
}

impl KindName for redis::RedisError {
    fn kind_name(&self) -> String {
        format!("{:?}", self.kind())
    }
}

impl PartialEq for RedisTarget {
    fn eq(&self, other: &RedisTarget) -> bool {
        self.url == other.url
            && self.ca_file == other.ca_file
            && self.password.as_ref().map(Secret::expose)
                == other.password.as_ref().map(Secret::expose)
    }
}

impl fmt::Debug for RedisTarget {
    // The URL may carry a password: only where it leads is shown.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisTarget")
            .field("at", &self.shown())
            .field("tls", &self.tls())
            .field("password", &self.password)
            .field("ca_file", &self.ca_file)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_and_shown_never_hold_the_password() {
        let mut target = RedisTarget::url("rediss://:hunter2@cache.example.com:6380/0");
        target.password = Some(Secret::new("s3cret"));
        let debug = format!("{target:?}");
        assert!(
            !debug.contains("hunter2") && !debug.contains("s3cret"),
            "{debug}"
        );
        assert!(debug.contains("cache.example.com:6380"), "{debug}");
        assert_eq!(target.shown(), "cache.example.com:6380");
        assert!(target.tls());
    }

    #[test]
    fn a_missing_ca_file_is_named_and_the_url_is_not() {
        let mut target = RedisTarget::url("rediss://:hunter2@localhost:6380");
        target.ca_file = Some("/nonexistent/ca.pem".into());
        let error = target.client().err().unwrap();
        assert!(error.contains("/nonexistent/ca.pem"), "{error}");
        assert!(!error.contains("hunter2"), "{error}");
    }

    #[test]
    fn a_changed_password_is_a_changed_target() {
        let mut a = RedisTarget::url("redis://h:1");
        let mut b = a.clone();
        assert_eq!(a, b);
        a.password = Some(Secret::new("one"));
        b.password = Some(Secret::new("two"));
        assert_ne!(a, b);
    }
}
