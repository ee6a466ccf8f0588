//! Configuration: one TOML file, parsed strictly, then validated into [`Config`].
//!
//! Parsing and validation are separate steps (as tensorzero does it): `raw` mirrors the file
//! with `deny_unknown_fields`, and `validate` checks it whole, collecting every error with the
//! path of the field at fault, so a user fixes a bad file in one pass.

mod duration;
mod raw;
mod validate;

use std::fmt;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use crate::router::retry::Backoff;

pub use duration::{format_duration, parse_duration};

/// A configured provider's name, as steps refer to it.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ProviderId(pub Arc<str>);

/// A route's name: what clients put in `model`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct RouteName(pub Arc<str>);

/// A model name as the upstream provider knows it.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ModelName(pub Arc<str>);

macro_rules! display_as_str {
    ($($name:ident),*) => {$(
        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }
        impl $name {
            /// The name as a string slice.
            pub fn as_str(&self) -> &str {
                &self.0
            }
        }
    )*};
}
display_as_str!(ProviderId, RouteName, ModelName);

/// The whole validated configuration.
#[derive(Clone, Debug)]
pub struct Config {
    pub server: ServerConfig,
    pub auth: AuthConfig,
    pub store: StoreConfig,
    pub limits: LimitsConfig,
    pub roles: Vec<Role>,
    pub providers: Vec<Provider>,
    pub routes: Vec<Route>,
    pub debug: DebugConfig,
    pub retry: RetryConfig,
    pub breaker: BreakerConfig,
    pub keys: KeysConfig,
    pub log: LogConfig,
    pub alerts: AlertsConfig,
    /// Per-model prices, for the cost of each request.
    pub prices: Vec<Price>,
}

#[derive(Clone, Debug)]
pub struct LogConfig {
    /// Request-log rows older than this are purged.
    pub retention: Duration,
}

/// When the scorecard raises its alert flags.
#[derive(Clone, Debug, PartialEq)]
pub struct AlertsConfig {
    /// Flag availability under this (0..=1).
    pub availability_target: f64,
    /// Flag a fallback rate over this (0..=1).
    pub fallback_rate_max: f64,
}

/// What a model costs, in US dollars per million tokens.
#[derive(Clone, Debug, PartialEq)]
pub struct Price {
    pub provider: ProviderId,
    pub model: ModelName,
    pub input_per_1m: f64,
    pub output_per_1m: f64,
}

impl Price {
    /// The cost of one request's tokens, in US dollars.
    pub fn cost(&self, tokens_in: u64, tokens_out: u64) -> f64 {
        (tokens_in as f64 * self.input_per_1m + tokens_out as f64 * self.output_per_1m) / 1e6
    }
}

#[derive(Clone, Debug)]
pub struct KeysConfig {
    /// How long a rotated-out version can be rolled back to; history is purged after it.
    pub rollback_window: Duration,
}

#[derive(Clone, Debug)]
pub struct ServerConfig {
    pub listen: SocketAddr,
    pub max_body_bytes: usize,
    pub admin_listen: Option<SocketAddr>,
}

#[derive(Clone, Debug)]
pub struct AuthConfig {
    pub required: bool,
    pub default_role: String,
}

#[derive(Clone, Debug)]
pub struct StoreConfig {
    pub url: String,
}

/// Where rate-limit counters live.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LimitBackend {
    /// In this process: exact for one instance.
    Memory,
    /// In Redis, shared by every instance.
    Redis,
}

/// What to do with a request when the limit backend cannot be reached.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FailMode {
    /// Admit it, and count that in a metric.
    Open,
    /// Refuse it with a 503.
    Closed,
}

#[derive(Clone, Debug)]
pub struct LimitsConfig {
    pub backend: LimitBackend,
    pub redis_url: String,
    pub on_backend_error: FailMode,
    /// Prefixes every Redis key, so several deployments (or tests) can share one Redis.
    pub key_prefix: String,
}

/// How a per-minute limit counts.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Window {
    /// Calendar minutes: the count resets at each minute's start.
    #[default]
    Fixed,
    /// The last 60 seconds, whenever now is.
    Sliding,
}

#[derive(Clone, Debug)]
pub struct Role {
    pub name: String,
    pub requests_per_minute: Option<u64>,
    pub tokens_per_minute: Option<u64>,
    pub max_concurrent: Option<u64>,
    pub window: Window,
}

/// The wire format a provider speaks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProviderKind {
    /// OpenAI chat completions, and every server compatible with it.
    OpenAi,
    /// Anthropic's Messages API.
    Anthropic,
    /// Google's Gemini API (generateContent).
    Gemini,
    /// Azure OpenAI: OpenAI's format at deployment URLs.
    Azure,
}

impl ProviderKind {
    /// The name config files use for this kind.
    pub fn as_str(self) -> &'static str {
        match self {
            ProviderKind::OpenAi => "openai",
            ProviderKind::Anthropic => "anthropic",
            ProviderKind::Gemini => "gemini",
            ProviderKind::Azure => "azure",
        }
    }
}

#[derive(Clone, Debug)]
pub struct Provider {
    pub id: ProviderId,
    pub kind: ProviderKind,
    /// Always ends without a slash, so paths append cleanly.
    pub base_url: String,
    pub key_required: bool,
    pub api_key_env: Option<String>,
    /// anthropic: `max_tokens` sent when the client left it out.
    pub default_max_tokens: u32,
    /// anthropic: the `anthropic-version` header.
    pub anthropic_version: String,
    /// azure: the `api-version` query parameter.
    pub api_version: String,
}

/// One place a step can send a request: a model at a provider. With the provider's key,
/// it is what a circuit breaker watches.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Deployment {
    pub provider: ProviderId,
    pub model: ModelName,
    /// Its share of the step's traffic, relative to the others' weights; at least 1.
    pub weight: u32,
}

/// How a step with several deployments chooses among the healthy ones.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Balance {
    /// In proportion to their weights (smooth weighted round robin).
    #[default]
    Weighted,
    /// The one with the lowest recent latency (an EWMA) first.
    Latency,
}

/// One step of a chain: one deployment, or several balanced as one.
#[derive(Clone, Debug)]
pub struct Step {
    /// Never empty: validation guarantees at least one.
    pub deployments: Vec<Deployment>,
    pub balance: Balance,
}

impl Step {
    /// A step of one deployment: `{ provider = "a", model = "m" }`.
    pub fn single(provider: ProviderId, model: ModelName) -> Step {
        Step {
            deployments: vec![Deployment {
                provider,
                model,
                weight: 1,
            }],
            balance: Balance::Weighted,
        }
    }
}

#[derive(Clone, Debug)]
pub struct Route {
    pub name: RouteName,
    pub steps: Vec<Step>,
    pub fallback_on_context_length: bool,
    /// The canned answer served when every step failed.
    pub degraded: Option<String>,
}

#[derive(Clone, Debug)]
pub struct DebugConfig {
    pub allow_force_fallback: bool,
}

#[derive(Clone, Debug, PartialEq)]
pub struct RetryConfig {
    pub attempts_per_step: u32,
    pub backoff: Backoff,
    pub attempt_timeout: Duration,
    pub request_deadline: Duration,
    pub max_attempts: u32,
    pub stream_idle_timeout: Duration,
}

#[derive(Clone, Debug)]
pub struct BreakerConfig {
    pub consecutive_failures: u32,
    pub failure_rate: f64,
    pub window: Duration,
    pub min_requests: u32,
    pub cooldown: Duration,
}

/// One problem in a config file, with the path of the field at fault.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FieldError {
    pub field: String,
    pub message: String,
}

impl fmt::Display for FieldError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.field, self.message)
    }
}

/// Why a config could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("{}", join_errors(.0))]
    Invalid(Vec<FieldError>),
}

fn join_errors(errors: &[FieldError]) -> String {
    errors
        .iter()
        .map(|e| e.to_string())
        .collect::<Vec<_>>()
        .join("\n")
}

impl Config {
    /// Reads and validates a config file.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.display().to_string(),
            source,
        })?;
        Config::parse(&text)
    }

    /// Parses and validates config text, reporting every error with its field path.
    pub fn parse(text: &str) -> Result<Config, ConfigError> {
        let raw = validate::parse_raw(text).map_err(|e| ConfigError::Invalid(vec![e]))?;
        validate::validate(raw).map_err(ConfigError::Invalid)
    }

    /// The provider a step names; validation guarantees it exists.
    pub fn provider(&self, id: &ProviderId) -> Option<&Provider> {
        self.providers.iter().find(|p| &p.id == id)
    }
}

impl RetryConfig {
    /// The longest a request can take, whatever the upstreams do: every attempt times out and
    /// every retry waits the longest backoff, but the request deadline caps it all.
    pub fn worst_case(&self, steps: usize) -> Duration {
        let per_step = self.attempts_per_step.max(1) as u64;
        let attempts = (per_step * steps as u64).min(self.max_attempts as u64);
        // Retries, not step changes, wait; the most waits come from the fewest steps used.
        let steps_used = attempts.div_ceil(per_step);
        let waits = attempts - steps_used;
        let unbounded = self
            .attempt_timeout
            .saturating_mul(attempts as u32)
            .saturating_add(self.backoff.max().saturating_mul(waits as u32));
        unbounded.min(self.request_deadline)
    }
}
