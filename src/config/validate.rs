//! Turns a [`RawConfig`] into a [`Config`], collecting every error with its field path.

mod access;
mod bedrock;
mod breaker;
mod budgets;
mod cache;
mod cluster;
mod forward;
mod hedge;
mod lease;
mod location;
mod otel;
mod password;
mod retry_budget;
mod server;
mod steps;
mod telemetry;
mod vertex;

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use super::backoff::{Backoff, BackoffError};
use super::raw::*;
use super::*;

/// Parses TOML, naming the path of the field at fault (`routes[2].steps[0].provider`), and
/// for a syntax or type error also the line and column, with the line and a caret under it.
pub fn parse_raw(text: &str) -> Result<RawConfig, FieldError> {
    // `toml` caps how deep a file may nest, but a tree nested that deep (table headers,
    // dotted keys and inline tables add up) is dropped recursively, past what a 2 MiB thread
    // stack holds in a debug build: tokio's workers (a reload) and `cargo test`'s threads. A
    // thread of its own, with room to spare, parses it wherever it is asked.
    const PARSER_STACK: usize = 32 * 1024 * 1024;
    let unavailable = |why: String| FieldError {
        field: "(file)".into(),
        message: format!("the config parser could not run: {why}"),
    };
    std::thread::scope(|scope| {
        std::thread::Builder::new()
            .name("config-parser".into())
            .stack_size(PARSER_STACK)
            .spawn_scoped(scope, || parse_raw_here(text))
            .map_err(|e| unavailable(e.to_string()))?
            .join()
            .map_err(|_| unavailable("it panicked".into()))?
    })
}

fn parse_raw_here(text: &str) -> Result<RawConfig, FieldError> {
    let deserializer = toml::de::Deserializer::parse(text).map_err(|e| FieldError {
        field: "(file)".into(),
        message: location::located(text, &e),
    })?;
    serde_path_to_error::deserialize(deserializer).map_err(|e| {
        let path = e.path().to_string();
        FieldError {
            // The root, or a top-level key that is itself empty (`'' = 0`), has no path to show.
            field: if path == "." || path.is_empty() {
                "(file)".into()
            } else {
                path
            },
            message: location::located(text, &e.into_inner()),
        }
    })
}

/// Collects errors so one pass reports them all.
#[derive(Default)]
struct Errors {
    found: Vec<FieldError>,
    /// Providers that are declared but invalid: a step naming one is not a second error.
    invalid_providers: BTreeSet<String>,
}

impl Errors {
    fn add(&mut self, field: impl Into<String>, message: impl Into<String>) {
        self.found.push(FieldError {
            field: field.into(),
            message: message.into(),
        });
    }

    /// Reports a reference to a provider that is not defined; one that is defined but
    /// invalid has its own error already, so the reference is not reported again.
    fn unknown_provider(&mut self, field: String, name: &str, providers: &[Provider]) {
        if !providers.iter().any(|p| p.id.as_str() == name)
            && !self.invalid_providers.contains(name)
        {
            self.add(field, format!("no provider is named `{name}`"));
        }
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
        let mut seen = BTreeSet::new();
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
    let server = server::server(&mut errors, raw.server);
    let limits = limits(&mut errors, raw.limits);
    let cluster = cluster::cluster(&mut errors, raw.cluster, &limits);
    errors.unique("roles", raw.roles.iter().map(|r| r.name.as_str()));
    errors.unique("providers", raw.providers.iter().map(|p| p.name.as_str()));
    errors.unique("routes", raw.routes.iter().map(|r| r.name.as_str()));
    let providers = providers(&mut errors, raw.providers, &server.forward_headers);
    let routes = routes(&mut errors, raw.routes, &providers);
    let retry = retry(&mut errors, raw.retry);
    let breaker = breaker::breaker(&mut errors, raw.breaker);
    let keys = KeysConfig {
        rollback_window: errors.duration(
            "keys.rollback_window",
            raw.keys.rollback_window.as_deref(),
            Duration::from_secs(24 * 3600),
        ),
    };
    let log = telemetry::log(&mut errors, raw.log);
    let alerts = telemetry::alerts(&mut errors, raw.alerts);
    let prices = telemetry::prices(&mut errors, raw.prices, &providers);
    let prices = crate::config::price_table::with_shipped(prices, &providers, &routes);
    let admin = telemetry::admin(&mut errors, raw.admin);
    let budgets = budgets::budgets(&mut errors, raw.budgets);
    let cache = cache::cache(&mut errors, raw.cache, &cluster, &limits);
    let otel = otel::otel(&mut errors, raw.otel, &|name| std::env::var(name).ok());
    let auth = AuthConfig {
        required: raw.auth.required.unwrap_or(true),
        default_role: raw.auth.default_role.unwrap_or_else(|| "default".into()),
        direct_models: access::direct_models(&mut errors, raw.auth.direct_models),
        unauthorized_log_rows_per_minute: raw.auth.unauthorized_log_rows_per_minute.unwrap_or(10),
    };
    let store_url = raw
        .store
        .url
        .unwrap_or_else(|| "sqlite://switchyard.db".into());
    let store_timeout = errors.duration(
        "store.timeout",
        raw.store.timeout.as_deref(),
        DEFAULT_STORE_TIMEOUT,
    );
    if store_timeout.is_zero() {
        errors.add("store.timeout", "must be greater than 0");
    }
    let sqlite_file = store_url.strip_prefix("sqlite://");
    let store_password = password::password(
        &mut errors,
        "store.password",
        raw.store.password_env,
        raw.store.password_file,
    );
    if crate::store::postgres::is_postgres_url(&store_url) {
        match crate::store::postgres::Target::parse(&store_url) {
            Ok(target) if store_password.is_some() && target.config.get_password().is_some() => {
                errors.add(
                    "store.password_env",
                    "the URL carries a password too: keep one of them",
                );
            }
            Ok(_) => {}
            Err(problem) => errors.add("store.url", problem),
        }
    } else if store_password.is_some() {
        errors.add(
            "store.password_env",
            "only a PostgreSQL store takes a password",
        );
    } else if store_url != "sqlite::memory:" && sqlite_file.is_none_or(str::is_empty) {
        errors.add(
            "store.url",
            format!(
                "`{store_url}` is not a store: use sqlite://PATH, sqlite::memory: or \
                 postgres://USER@HOST:PORT/DB"
            ),
        );
    }
    let roles = raw
        .roles
        .into_iter()
        .enumerate()
        .map(|(i, r)| Role {
            window: match r.window.as_deref() {
                None | Some("fixed") => Window::Fixed,
                Some("sliding") => Window::Sliding,
                Some(other) => {
                    errors.add(
                        format!("roles[{i}].window"),
                        format!("`{other}` is not one of `fixed`, `sliding`"),
                    );
                    Window::Fixed
                }
            },
            models: access::role_models(&mut errors, i, r.models),
            budget_per_day_micros: budgets::dollars(
                &mut errors,
                &format!("roles[{i}].budget_per_day"),
                r.budget_per_day,
            ),
            budget_per_month_micros: budgets::dollars(
                &mut errors,
                &format!("roles[{i}].budget_per_month"),
                r.budget_per_month,
            ),
            name: r.name,
            requests_per_minute: r.requests_per_minute,
            tokens_per_minute: r.tokens_per_minute,
            max_concurrent: r.max_concurrent,
        })
        .collect();
    if !errors.found.is_empty() {
        return Err(errors.found);
    }
    Ok(Config {
        server,
        auth,
        store: StoreConfig {
            url: store_url,
            password: store_password,
            timeout: store_timeout,
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
        keys,
        log,
        alerts,
        prices,
        admin,
        cluster,
        budgets,
        cache,
        otel,
    })
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
    let redis = cluster::redis_target(
        errors,
        "limits",
        raw.redis_url
            .unwrap_or_else(|| "redis://127.0.0.1:6379".into()),
        raw.redis_password_env,
        raw.redis_password_file,
        raw.redis_ca_file,
    );
    LimitsConfig {
        backend,
        redis,
        on_backend_error,
        key_prefix: raw.key_prefix.unwrap_or_else(|| "switchyard".into()),
        lease: lease::validate(errors, raw.lease.as_deref()),
    }
}

/// A store operation takes milliseconds; a store silent for this long is hung (a stopped
/// server, a network that drops packets), and waiting on it would hold every request-log row
/// behind that batch, or a client's request, with it.
pub const DEFAULT_STORE_TIMEOUT: Duration = Duration::from_secs(2);
/// `max_tokens` for Anthropic requests that leave it out, unless the provider says otherwise.
pub const DEFAULT_MAX_TOKENS: u32 = 4096;
/// The shortest `health_check.every`: a probe a second is already more than any outage needs.
pub const MIN_HEALTH_CHECK_EVERY: Duration = Duration::from_secs(1);
/// The `anthropic-version` header sent unless the provider says otherwise.
pub const DEFAULT_ANTHROPIC_VERSION: &str = "2023-06-01";
/// Azure's latest generally available data-plane `api-version` when this was written.
pub const DEFAULT_AZURE_API_VERSION: &str = "2024-10-21";

fn providers(
    errors: &mut Errors,
    raw: Vec<RawProvider>,
    forward_by_default: &[http::HeaderName],
) -> Vec<Provider> {
    let mut providers = Vec::with_capacity(raw.len());
    for (i, p) in raw.into_iter().enumerate() {
        let kind = match p.kind.as_str() {
            "openai" => ProviderKind::OpenAi,
            "anthropic" => ProviderKind::Anthropic,
            "gemini" => ProviderKind::Gemini,
            "azure" => ProviderKind::Azure,
            "vertex" => ProviderKind::Vertex,
            "bedrock" => ProviderKind::Bedrock,
            other => {
                errors.add(
                    format!("providers[{i}].kind"),
                    format!(
                        "`{other}` is not one of `openai`, `anthropic`, `gemini`, `azure`, `vertex`, `bedrock`"
                    ),
                );
                errors.invalid_providers.insert(p.name);
                continue;
            }
        };
        // Kind-specific settings are errors on other kinds, so a typo'd kind is caught.
        let only_for = |errors: &mut Errors, field: &str, set: bool, wanted: ProviderKind| {
            if set && kind != wanted {
                errors.add(
                    format!("providers[{i}].{field}"),
                    format!("only applies to kind = \"{}\"", wanted.as_str()),
                );
            }
        };
        only_for(
            errors,
            "default_max_tokens",
            p.default_max_tokens.is_some(),
            ProviderKind::Anthropic,
        );
        only_for(
            errors,
            "anthropic_version",
            p.anthropic_version.is_some(),
            ProviderKind::Anthropic,
        );
        only_for(
            errors,
            "api_version",
            p.api_version.is_some(),
            ProviderKind::Azure,
        );
        let vertex_fields = [
            ("project", p.project.is_some()),
            ("location", p.location.is_some()),
            ("credentials_env", p.credentials_env.is_some()),
        ];
        for (field, set) in vertex_fields {
            only_for(errors, field, set, ProviderKind::Vertex);
        }
        if p.credentials_file.is_some()
            && !matches!(kind, ProviderKind::Vertex | ProviderKind::Bedrock)
        {
            errors.add(
                format!("providers[{i}].credentials_file"),
                "only applies to kind = \"vertex\" or \"bedrock\"",
            );
        }
        let bedrock_fields = [
            ("region", p.region.is_some()),
            ("access_key_id_env", p.access_key_id_env.is_some()),
            ("secret_access_key_env", p.secret_access_key_env.is_some()),
            ("session_token_env", p.session_token_env.is_some()),
            ("profile", p.profile.is_some()),
        ];
        for (field, set) in bedrock_fields {
            only_for(errors, field, set, ProviderKind::Bedrock);
        }
        let compat = match p.compat.as_deref() {
            None => None,
            Some(_) if kind != ProviderKind::OpenAi => {
                only_for(errors, "compat", true, ProviderKind::OpenAi);
                None
            }
            Some(name) => match Compat::ALL.into_iter().find(|c| c.as_str() == name) {
                Some(compat) => Some(compat),
                None => {
                    let names: Vec<&str> = Compat::ALL.iter().map(|c| c.as_str()).collect();
                    errors.add(
                        format!("providers[{i}].compat"),
                        format!("`{name}` is not one of `{}`", names.join("`, `")),
                    );
                    None
                }
            },
        };
        let vertex = match kind {
            ProviderKind::Vertex => {
                let env = |name: &str| std::env::var(name).ok();
                let Some(settings) = vertex::settings(errors, i, &p, &env) else {
                    errors.invalid_providers.insert(p.name);
                    continue;
                };
                Some(settings)
            }
            _ => None,
        };
        let bedrock = match kind {
            ProviderKind::Bedrock => {
                let env = |name: &str| std::env::var(name).ok();
                let Some(settings) = bedrock::settings(errors, i, &p, &env) else {
                    errors.invalid_providers.insert(p.name);
                    continue;
                };
                Some(settings)
            }
            _ => None,
        };
        if p.default_max_tokens == Some(0) {
            errors.add(
                format!("providers[{i}].default_max_tokens"),
                "must be at least 1",
            );
        }
        for (field, value) in [
            ("anthropic_version", &p.anthropic_version),
            ("api_version", &p.api_version),
        ] {
            if value.as_deref().is_some_and(|v| v.trim().is_empty()) {
                errors.add(format!("providers[{i}].{field}"), "must not be empty");
            }
        }
        let kind_default = match (&vertex, &bedrock, compat) {
            (Some(settings), _, _) => Some(vertex::default_base_url(&settings.location)),
            (_, Some(settings), _) => Some(bedrock::default_base_url(&settings.region)),
            (None, None, Some(compat)) => Some(compat.base_url().to_owned()),
            (None, None, None) => default_base_url(kind).map(str::to_owned),
        };
        let base_url = match (p.base_url, kind_default) {
            (Some(url), _) => url,
            (None, Some(url)) => url,
            (None, None) => {
                errors.add(
                    format!("providers[{i}].base_url"),
                    "is required for azure: https://{resource}.openai.azure.com",
                );
                errors.invalid_providers.insert(p.name);
                continue;
            }
        };
        match url::Url::parse(&base_url) {
            // The upstream client sends to an `http::Uri`, stricter than a URL (no spaces,
            // no non-ASCII host): refused here rather than on every request.
            Ok(url) if matches!(url.scheme(), "http" | "https") => {
                if base_url.parse::<http::Uri>().is_err() {
                    errors.add(
                        format!("providers[{i}].base_url"),
                        format!("`{base_url}` is not a URI the HTTP client can send to"),
                    );
                    errors.invalid_providers.insert(p.name);
                    continue;
                }
            }
            Ok(_) => {
                errors.add(format!("providers[{i}].base_url"), "must be http or https");
                errors.invalid_providers.insert(p.name);
                continue;
            }
            Err(e) => {
                errors.add(
                    format!("providers[{i}].base_url"),
                    format!("`{base_url}` is not a URL: {e}"),
                );
                errors.invalid_providers.insert(p.name);
                continue;
            }
        }
        let responses = match (p.responses, kind) {
            (Some(true), ProviderKind::OpenAi) | (Some(false), _) => p.responses == Some(true),
            (Some(true), _) => {
                errors.add(
                    format!("providers[{i}].responses"),
                    "only a kind = \"openai\" provider can speak the Responses API",
                );
                false
            }
            (None, kind) => kind == ProviderKind::OpenAi && speaks_responses(&base_url),
        };
        let health_check = p.health_check.map(|check| {
            let field = format!("providers[{i}].health_check.every");
            let every = errors.duration(&field, Some(&check.every), MIN_HEALTH_CHECK_EVERY);
            if every < MIN_HEALTH_CHECK_EVERY {
                errors.add(field, "must be at least 1s");
            }
            HealthCheck { every }
        });
        providers.push(Provider {
            id: ProviderId(Arc::from(p.name.as_str())),
            kind,
            base_url: base_url.trim_end_matches('/').to_string(),
            // Vertex proves who it is with Google's access tokens and Bedrock with AWS
            // signatures, not a stored key; a local server takes no key unless it was started
            // with one.
            key_required: p.key_required.unwrap_or(
                !matches!(kind, ProviderKind::Vertex | ProviderKind::Bedrock)
                    && !compat.is_some_and(Compat::local),
            ),
            api_key_env: p.api_key_env,
            default_max_tokens: p.default_max_tokens.unwrap_or(DEFAULT_MAX_TOKENS),
            anthropic_version: p
                .anthropic_version
                .unwrap_or_else(|| DEFAULT_ANTHROPIC_VERSION.into()),
            api_version: p
                .api_version
                .unwrap_or_else(|| DEFAULT_AZURE_API_VERSION.into()),
            responses,
            http2: p.http2.unwrap_or(false),
            health_check,
            forward_headers: match p.forward_headers {
                Some(names) => {
                    let field = format!("providers[{i}].forward_headers");
                    forward::header_names(errors, &field, names)
                }
                None => forward_by_default.to_vec(),
            },
            vertex,
            bedrock,
            compat,
        });
    }
    providers
}

/// Whether an OpenAI-family base URL is OpenAI's own, the one server known to speak the
/// Responses API; other compatible servers say so with `responses = true`.
fn speaks_responses(base_url: &str) -> bool {
    url::Url::parse(base_url).is_ok_and(|url| url.host_str() == Some("api.openai.com"))
}

/// Each kind's public endpoint, so `base_url` may be left out; Azure's names a resource.
fn default_base_url(kind: ProviderKind) -> Option<&'static str> {
    match kind {
        ProviderKind::OpenAi => Some("https://api.openai.com/v1"),
        ProviderKind::Anthropic => Some("https://api.anthropic.com"),
        ProviderKind::Gemini => Some("https://generativelanguage.googleapis.com"),
        ProviderKind::Azure | ProviderKind::Vertex | ProviderKind::Bedrock => None,
    }
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
        let step_count = r.steps.len();
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
            hedge: r
                .hedge
                .map(|h| hedge::hedge(errors, &format!("routes[{i}]"), h, step_count)),
            cache: r
                .cache
                .map(|c| cache::route_cache(errors, &format!("routes[{i}]"), c)),
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
        budget: retry_budget::retry_budget(errors, &raw),
        hedge_budget_percent: hedge::budget_percent(errors, raw.hedge_budget_percent),
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

/// Every error `text` gives, as `field: message` lines; panics when it is valid. For the
/// tests of each part of validation.
#[cfg(test)]
pub(crate) fn errors_of(text: &str) -> Vec<String> {
    match Config::parse(text) {
        Err(ConfigError::Invalid(errors)) => errors.iter().map(|e| e.to_string()).collect(),
        other => panic!("expected errors, got {other:?}"),
    }
}

#[cfg(test)]
mod tests {
    use crate::config::Config;

    #[test]
    fn a_config_nested_to_the_parsers_limit_parses_on_a_small_stack() {
        // Found by fuzzing: this overflowed a 2 MiB stack (a tokio worker's, in a reload)
        // while `toml` dropped the tables it had nested.
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/fuzz/regressions/config/stack-overflow-nested-tables"
        );
        let text = String::from_utf8_lossy(&std::fs::read(path).unwrap()).into_owned();
        let parsed = std::thread::Builder::new()
            .stack_size(2 * 1024 * 1024)
            .spawn(move || Config::parse(&text).is_err())
            .unwrap()
            .join();
        assert_eq!(parsed.ok(), Some(true), "refused with errors, not a crash");
    }

    use crate::config::validate::errors_of as errors;

    const PROVIDERS: &str = r#"
[[providers]]
name = "a"
kind = "openai"
base_url = "http://127.0.0.1:1/v1"
"#;

    #[test]
    fn a_redis_url_the_client_refuses_is_refused_here_without_showing_it() {
        let url = "redis://:hunter2@127.0.0.1:6379/not-a-db";
        let errors = errors(&format!("[limits]\nredis_url = \"{url}\"\n"));
        assert_eq!(errors.len(), 1, "{errors:?}");
        assert!(
            errors[0].starts_with("limits.redis_url: the Redis client refuses the URL: "),
            "{errors:?}"
        );
        assert!(!errors[0].contains("hunter2"), "{errors:?}");
    }

    #[test]
    fn rediss_is_taken_and_its_ca_file_must_exist() {
        let config = Config::parse("[limits]\nredis_url = \"rediss://cache.example.com:6380\"\n");
        assert!(config.unwrap().limits.redis.tls());
        let found = errors(
            "[limits]\nredis_url = \"rediss://cache.example.com:6380\"\n\
             redis_ca_file = \"/nonexistent/ca.pem\"\n",
        );
        assert_eq!(
            found,
            ["limits.redis_ca_file: `/nonexistent/ca.pem` is not a file"]
        );
        let found =
            errors("[cluster]\nredis_url = \"redis://h:1\"\nredis_ca_file = \"/etc/hostname\"\n");
        assert_eq!(
            found,
            ["cluster.redis_ca_file: applies to rediss:// URLs only: use rediss:// for TLS"]
        );
    }

    #[test]
    fn passwords_come_from_the_environment_or_a_file_and_are_never_shown() {
        let file = std::env::temp_dir().join(format!("sy-pw-{}", std::process::id()));
        std::fs::write(&file, "from-file\n").unwrap();
        // A variable every process has: setting one of the test's own would need `unsafe`.
        let from_env = std::env::var("PATH").unwrap();
        let config = Config::parse(&format!(
            "[store]\nurl = \"postgres://sy@db:5432/gw\"\npassword_file = \"{}\"\n\
             [limits]\nredis_url = \"redis://h:1\"\nredis_password_env = \"PATH\"\n",
            file.display()
        ))
        .unwrap();
        assert_eq!(
            config.store.password.as_ref().map(|p| p.expose()),
            Some("from-file")
        );
        assert_eq!(
            config.limits.redis.password.as_ref().map(|p| p.expose()),
            Some(from_env.as_str())
        );
        let debug = format!("{config:?}");
        assert!(
            !debug.contains("from-file") && !debug.contains(&from_env),
            "{debug}"
        );
        let found = errors(
            "[store]\nurl = \"postgres://sy:inline@db:5432/gw\"\npassword_env = \"PATH\"\n\
             [cluster]\nredis_url = \"redis://h:1\"\nredis_password_env = \"SY_TEST_UNSET_VARIABLE\"\n",
        );
        assert_eq!(
            found,
            [
                "cluster.redis_password_env: the environment variable `SY_TEST_UNSET_VARIABLE` is not set",
                "store.password_env: the URL carries a password too: keep one of them",
            ]
        );
        let _ = std::fs::remove_file(file);
    }

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
    fn an_unknown_empty_key_still_names_a_place() {
        // Found by fuzzing (fuzz/regressions/config): the path of a top-level `''` key is
        // the empty string, so the error named no field at all.
        assert_eq!(
            errors("'' = 0")[0].split(':').next(),
            Some("(file)"),
            "{:?}",
            errors("'' = 0")
        );
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
    fn kind_settings_belong_to_their_kind() {
        let errors = errors(
            "[[providers]]\nname = \"a\"\nkind = \"openai\"\napi_version = \"x\"\ndefault_max_tokens = 5\n[[providers]]\nname = \"z\"\nkind = \"azure\"\n",
        );
        assert!(
            errors.contains(&"providers[0].api_version: only applies to kind = \"azure\"".into()),
            "{errors:?}"
        );
        assert!(
            errors.contains(
                &"providers[0].default_max_tokens: only applies to kind = \"anthropic\"".into()
            ),
            "{errors:?}"
        );
        assert!(
            errors
                .iter()
                .any(|e| e.starts_with("providers[1].base_url")),
            "{errors:?}"
        );
    }

    #[test]
    fn every_kind_is_accepted_with_its_defaults() {
        let config = Config::parse(
            "[[providers]]\nname = \"c\"\nkind = \"anthropic\"\ndefault_max_tokens = 1024\n[[providers]]\nname = \"g\"\nkind = \"gemini\"\n[[providers]]\nname = \"z\"\nkind = \"azure\"\nbase_url = \"https://r.openai.azure.com/\"\n",
        )
        .unwrap();
        let [c, g, z] = &config.providers[..] else {
            panic!("three providers")
        };
        assert_eq!(c.base_url, "https://api.anthropic.com");
        assert_eq!(c.default_max_tokens, 1024);
        assert_eq!(c.anthropic_version, "2023-06-01");
        assert_eq!(g.base_url, "https://generativelanguage.googleapis.com");
        assert_eq!(z.base_url, "https://r.openai.azure.com");
        assert_eq!(z.api_version, "2024-10-21");
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
        assert_eq!(config.breaker.cooldown, std::time::Duration::from_secs(20));
        assert_eq!(config.store.timeout, std::time::Duration::from_secs(2));
    }

    #[test]
    fn a_store_timeout_of_zero_is_refused() {
        let text = format!("{PROVIDERS}[store]\ntimeout = \"0s\"\n");
        let error = Config::parse(&text).unwrap_err().to_string();
        assert!(error.contains("store.timeout"), "{error}");
    }

    #[test]
    fn a_base_url_the_http_client_cannot_send_to_is_refused_at_load() {
        for url in ["http://ex\u{e4}mple.com/v1", "http://127.0.0.1:1/a b"] {
            let text =
                format!("[[providers]]\nname = \"p\"\nkind = \"openai\"\nbase_url = \"{url}\"\n");
            let error = Config::parse(&text).unwrap_err().to_string();
            assert!(error.contains("providers[0].base_url"), "{url}: {error}");
        }
    }
}
