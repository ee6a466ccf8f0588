//! Turns a [`RawConfig`] into a [`Config`], collecting every error with its field path.

mod steps;

use std::collections::HashSet;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use super::raw::*;
use super::*;
use crate::router::retry::{Backoff, BackoffError};

/// Parses TOML, naming the path of the field at fault (`routes[2].steps[0].provider`).
pub fn parse_raw(text: &str) -> Result<RawConfig, FieldError> {
    let deserializer = toml::de::Deserializer::parse(text).map_err(|e| FieldError {
        field: "(file)".into(),
        message: e.message().to_string(),
    })?;
    serde_path_to_error::deserialize(deserializer).map_err(|e| {
        let path = e.path().to_string();
        FieldError {
            field: if path == "." { "(file)".into() } else { path },
            message: e.into_inner().message().to_string(),
        }
    })
}

/// Collects errors so one pass reports them all.
#[derive(Default)]
struct Errors(Vec<FieldError>);

impl Errors {
    fn add(&mut self, field: impl Into<String>, message: impl Into<String>) {
        self.0.push(FieldError {
            field: field.into(),
            message: message.into(),
        });
    }

    fn duration(&mut self, field: &str, value: Option<&str>, default: Duration) -> Duration {
        match value.map(parse_duration) {
            None => default,
            Some(Ok(duration)) => duration,
            Some(Err(message)) => {
                self.add(field, message);
                default
            }
        }
    }

    fn addr(&mut self, field: &str, value: &str) -> Option<SocketAddr> {
        match value.parse() {
            Ok(addr) => Some(addr),
            Err(_) => {
                self.add(
                    field,
                    format!("`{value}` is not an address like 127.0.0.1:8080"),
                );
                None
            }
        }
    }

    fn unique<'a>(&mut self, section: &str, names: impl Iterator<Item = &'a str>) {
        let mut seen = HashSet::new();
        for (i, name) in names.enumerate() {
            if name.is_empty() {
                self.add(format!("{section}[{i}].name"), "must not be empty");
            } else if !seen.insert(name) {
                self.add(
                    format!("{section}[{i}].name"),
                    format!("`{name}` is defined twice"),
                );
            }
        }
    }
}

pub fn validate(raw: RawConfig) -> Result<Config, Vec<FieldError>> {
    let mut errors = Errors::default();
    let server = server(&mut errors, raw.server);
    let limits = limits(&mut errors, raw.limits);
    errors.unique("roles", raw.roles.iter().map(|r| r.name.as_str()));
    errors.unique("providers", raw.providers.iter().map(|p| p.name.as_str()));
    errors.unique("routes", raw.routes.iter().map(|r| r.name.as_str()));
    let providers = providers(&mut errors, raw.providers);
    let routes = routes(&mut errors, raw.routes, &providers);
    let retry = retry(&mut errors, raw.retry);
    let breaker = breaker(&mut errors, raw.breaker);
    let auth = AuthConfig {
        required: raw.auth.required.unwrap_or(true),
        default_role: raw.auth.default_role.unwrap_or_else(|| "default".into()),
    };
    let roles = raw
        .roles
        .into_iter()
        .map(|r| Role {
            name: r.name,
            requests_per_minute: r.requests_per_minute,
            tokens_per_minute: r.tokens_per_minute,
            max_concurrent: r.max_concurrent,
        })
        .collect();
    if !errors.0.is_empty() {
        return Err(errors.0);
    }
    Ok(Config {
        server,
        auth,
        store: StoreConfig {
            url: raw
                .store
                .url
                .unwrap_or_else(|| "sqlite://switchyard.db".into()),
        },
        limits,
        roles,
        providers,
        routes,
        debug: DebugConfig {
            allow_force_fallback: raw.debug.allow_force_fallback.unwrap_or(false),
        },
        retry,
        breaker,
    })
}

fn server(errors: &mut Errors, raw: RawServer) -> ServerConfig {
    let fallback: SocketAddr = ([127, 0, 0, 1], 8080).into();
    let listen = raw.listen.as_deref().unwrap_or("127.0.0.1:8080");
    let max_body_bytes = raw.max_body_bytes.unwrap_or(4 * 1024 * 1024);
    if max_body_bytes == 0 {
        errors.add("server.max_body_bytes", "must be greater than 0");
    }
    ServerConfig {
        listen: errors.addr("server.listen", listen).unwrap_or(fallback),
        max_body_bytes: usize::try_from(max_body_bytes).unwrap_or(usize::MAX),
        admin_listen: raw
            .admin_listen
            .and_then(|a| errors.addr("server.admin_listen", &a)),
    }
}

fn limits(errors: &mut Errors, raw: RawLimits) -> LimitsConfig {
    let backend = match raw.backend.as_deref().unwrap_or("memory") {
        "memory" => LimitBackend::Memory,
        "redis" => LimitBackend::Redis,
        other => {
            errors.add(
                "limits.backend",
                format!("`{other}` is not one of `memory`, `redis`"),
            );
            LimitBackend::Memory
        }
    };
    let on_backend_error = match raw.on_backend_error.as_deref().unwrap_or("closed") {
        "closed" => FailMode::Closed,
        "open" => FailMode::Open,
        other => {
            errors.add(
                "limits.on_backend_error",
                format!("`{other}` is not one of `open`, `closed`"),
            );
            FailMode::Closed
        }
    };
    LimitsConfig {
        backend,
        redis_url: raw
            .redis_url
            .unwrap_or_else(|| "redis://127.0.0.1:6379".into()),
        on_backend_error,
    }
}

fn providers(errors: &mut Errors, raw: Vec<RawProvider>) -> Vec<Provider> {
    let mut providers = Vec::with_capacity(raw.len());
    for (i, p) in raw.into_iter().enumerate() {
        let kind = match p.kind.as_str() {
            "openai" => ProviderKind::OpenAi,
            "anthropic" | "gemini" | "azure" => {
                errors.add(
                    format!("providers[{i}].kind"),
                    format!("`{}` is not supported yet; use `openai`", p.kind),
                );
                continue;
            }
            other => {
                errors.add(
                    format!("providers[{i}].kind"),
                    format!("`{other}` is not one of `openai`, `anthropic`, `gemini`, `azure`"),
                );
                continue;
            }
        };
        match reqwest::Url::parse(&p.base_url) {
            Ok(url) if matches!(url.scheme(), "http" | "https") => {}
            Ok(_) => {
                errors.add(format!("providers[{i}].base_url"), "must be http or https");
                continue;
            }
            Err(e) => {
                errors.add(
                    format!("providers[{i}].base_url"),
                    format!("`{}` is not a URL: {e}", p.base_url),
                );
                continue;
            }
        }
        providers.push(Provider {
            id: ProviderId(Arc::from(p.name.as_str())),
            kind,
            base_url: p.base_url.trim_end_matches('/').to_string(),
            key_required: p.key_required.unwrap_or(true),
            api_key_env: p.api_key_env,
        });
    }
    providers
}

fn routes(errors: &mut Errors, raw: Vec<RawRoute>, providers: &[Provider]) -> Vec<Route> {
    let mut routes = Vec::with_capacity(raw.len());
    for (i, r) in raw.into_iter().enumerate() {
        if r.steps.is_empty() {
            errors.add(
                format!("routes[{i}].steps"),
                "a route needs at least one step",
            );
        }
        let steps = r
            .steps
            .into_iter()
            .enumerate()
            .map(|(j, s)| steps::step(errors, &format!("routes[{i}].steps[{j}]"), s, providers))
            .collect();
        routes.push(Route {
            name: RouteName(Arc::from(r.name.as_str())),
            steps,
            fallback_on_context_length: r.fallback_on_context_length,
            degraded: r.degraded.map(|d| d.content),
        });
    }
    routes
}

fn retry(errors: &mut Errors, raw: RawRetry) -> RetryConfig {
    let secs = Duration::from_secs;
    let retry = RetryConfig {
        attempts_per_step: raw.attempts_per_step.unwrap_or(3),
        backoff: backoff(errors, &raw),
        attempt_timeout: errors.duration(
            "retry.attempt_timeout",
            raw.attempt_timeout.as_deref(),
            secs(30),
        ),
        request_deadline: errors.duration(
            "retry.request_deadline",
            raw.request_deadline.as_deref(),
            secs(60),
        ),
        max_attempts: raw.max_attempts.unwrap_or(6),
        stream_idle_timeout: errors.duration(
            "retry.stream_idle_timeout",
            raw.stream_idle_timeout.as_deref(),
            secs(30),
        ),
    };
    if retry.attempts_per_step == 0 {
        errors.add("retry.attempts_per_step", "must be at least 1");
    }
    if retry.max_attempts == 0 {
        errors.add("retry.max_attempts", "must be at least 1");
    }
    for (field, value) in [
        ("retry.attempt_timeout", retry.attempt_timeout),
        ("retry.request_deadline", retry.request_deadline),
        ("retry.stream_idle_timeout", retry.stream_idle_timeout),
    ] {
        if value.is_zero() {
            errors.add(field, "must be greater than 0");
        }
    }
    retry
}

fn backoff(errors: &mut Errors, raw: &RawRetry) -> Backoff {
    let base = errors.duration(
        "retry.backoff_base",
        raw.backoff_base.as_deref(),
        Duration::from_secs(1),
    );
    let max = errors.duration(
        "retry.backoff_max",
        raw.backoff_max.as_deref(),
        Duration::from_secs(8),
    );
    Backoff::try_new(base, max).unwrap_or_else(|e| {
        let field = match e {
            BackoffError::ZeroBase => "retry.backoff_base",
            BackoffError::MaxBelowBase => "retry.backoff_max",
        };
        errors.add(field, e.to_string());
        Backoff::DEFAULT
    })
}

fn breaker(errors: &mut Errors, raw: RawBreaker) -> BreakerConfig {
    let breaker = BreakerConfig {
        consecutive_failures: raw.consecutive_failures.unwrap_or(5),
        failure_rate: raw.failure_rate.unwrap_or(0.5),
        window: errors.duration(
            "breaker.window",
            raw.window.as_deref(),
            Duration::from_secs(60),
        ),
        min_requests: raw.min_requests.unwrap_or(20),
        cooldown: errors.duration(
            "breaker.cooldown",
            raw.cooldown.as_deref(),
            Duration::from_secs(60),
        ),
    };
    if !(breaker.failure_rate > 0.0 && breaker.failure_rate <= 1.0) {
        errors.add("breaker.failure_rate", "must be in (0, 1]");
    }
    if breaker.window.is_zero() {
        errors.add("breaker.window", "must be greater than 0");
    }
    if breaker.consecutive_failures == 0 {
        errors.add("breaker.consecutive_failures", "must be at least 1");
    }
    breaker
}

#[cfg(test)]
mod tests {
    use crate::config::{Config, ConfigError};

    fn errors(text: &str) -> Vec<String> {
        match Config::parse(text) {
            Err(ConfigError::Invalid(errors)) => errors.iter().map(|e| e.to_string()).collect(),
            other => panic!("expected errors, got {other:?}"),
        }
    }

    const PROVIDERS: &str = r#"
[[providers]]
name = "a"
kind = "openai"
base_url = "http://127.0.0.1:1/v1"
"#;

    #[test]
    fn unknown_field_names_its_path() {
        let text = format!(
            "{PROVIDERS}\n[[routes]]\nname = \"r\"\nsteps = [{{ provider = \"a\", model = \"m\", colour = 1 }}]\n"
        );
        let errors = errors(&text);
        assert_eq!(errors.len(), 1);
        assert!(errors[0].starts_with("routes[0].steps[0]"), "{errors:?}");
        assert!(errors[0].contains("colour"), "{errors:?}");
    }

    #[test]
    fn unknown_provider_in_step_names_its_path() {
        let text = format!(
            "{PROVIDERS}\n[[routes]]\nname = \"r\"\nsteps = [{{ provider = \"a\", model = \"m\" }}, {{ provider = \"b\", model = \"m\" }}]\n"
        );
        assert_eq!(
            errors(&text),
            vec!["routes[0].steps[1].provider: no provider is named `b`"]
        );
    }

    #[test]
    fn every_error_is_reported_at_once() {
        let text = format!(
            "{PROVIDERS}{PROVIDERS}\n[retry]\nbackoff_base = \"1x\"\n[[routes]]\nname = \"r\"\nsteps = []\n"
        );
        let errors = errors(&text);
        assert!(
            errors.iter().any(|e| e.starts_with("providers[1].name")),
            "{errors:?}"
        );
        assert!(
            errors.iter().any(|e| e.starts_with("retry.backoff_base")),
            "{errors:?}"
        );
        assert!(
            errors.iter().any(|e| e.starts_with("routes[0].steps")),
            "{errors:?}"
        );
    }

    #[test]
    fn wrong_type_names_its_path() {
        let errors = errors("[server]\nmax_body_bytes = \"big\"\n");
        assert!(errors[0].starts_with("server.max_body_bytes"), "{errors:?}");
    }

    #[test]
    fn bad_url_and_address_name_their_fields() {
        let errors = errors(
            "[server]\nlisten = \"nowhere\"\n[[providers]]\nname = \"a\"\nkind = \"openai\"\nbase_url = \"not a url\"\n",
        );
        assert!(
            errors.iter().any(|e| e.starts_with("server.listen")),
            "{errors:?}"
        );
        assert!(
            errors
                .iter()
                .any(|e| e.starts_with("providers[0].base_url")),
            "{errors:?}"
        );
    }

    #[test]
    fn defaults_match_the_design() {
        let config = Config::parse(PROVIDERS).unwrap();
        assert_eq!(config.retry.attempts_per_step, 3);
        assert_eq!(config.retry.max_attempts, 6);
        assert_eq!(config.server.max_body_bytes, 4 * 1024 * 1024);
        assert!(config.auth.required);
        assert_eq!(config.providers[0].base_url, "http://127.0.0.1:1/v1");
        assert_eq!(config.breaker.consecutive_failures, 5);
        assert_eq!(config.breaker.cooldown, std::time::Duration::from_secs(60));
    }
}
