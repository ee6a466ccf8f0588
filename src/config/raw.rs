//! The config file exactly as written: every section optional, unknown fields rejected.
//!
//! Nothing here is trusted yet; `super::validate` turns it into a [`super::Config`].

use serde::Deserialize;

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawConfig {
    #[serde(default)]
    pub server: RawServer,
    #[serde(default)]
    pub auth: RawAuth,
    #[serde(default)]
    pub store: RawStore,
    #[serde(default)]
    pub limits: RawLimits,
    #[serde(default)]
    pub roles: Vec<RawRole>,
    #[serde(default)]
    pub providers: Vec<RawProvider>,
    #[serde(default)]
    pub routes: Vec<RawRoute>,
    #[serde(default)]
    pub debug: RawDebug,
    #[serde(default)]
    pub retry: RawRetry,
    #[serde(default)]
    pub breaker: RawBreaker,
    #[serde(default)]
    pub keys: RawKeys,
    #[serde(default)]
    pub log: RawLog,
    #[serde(default)]
    pub alerts: RawAlerts,
    #[serde(default)]
    pub prices: Vec<RawPrice>,
    #[serde(default)]
    pub admin: RawAdmin,
    #[serde(default)]
    pub cluster: RawCluster,
    #[serde(default)]
    pub budgets: RawBudgets,
    #[serde(default)]
    pub cache: RawCache,
    #[serde(default)]
    pub otel: RawOtel,
}

/// `[otel]`: OpenTelemetry traces.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawOtel {
    pub endpoint: Option<String>,
    pub protocol: Option<String>,
    /// Header name → the environment variable holding its value.
    pub headers_env: Option<std::collections::BTreeMap<String, String>>,
    pub service_name: Option<String>,
    pub resource: Option<std::collections::BTreeMap<String, String>>,
    pub sample_ratio: Option<f64>,
    pub max_queue_spans: Option<usize>,
    pub timeout: Option<String>,
    pub capture_content: Option<bool>,
    pub max_content_bytes: Option<usize>,
    pub semconv: Option<String>,
}

/// `[cache]`: where cached answers live.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawCache {
    pub backend: Option<String>,
    pub max_bytes: Option<usize>,
    pub max_entry_bytes: Option<usize>,
    pub redis_url: Option<String>,
    pub redis_password_env: Option<String>,
    pub redis_password_file: Option<String>,
    pub redis_ca_file: Option<String>,
    pub key_prefix: Option<String>,
}

/// A route's `cache = { ttl = "1h", scope = "key" }`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawRouteCache {
    pub ttl: String,
    pub scope: Option<String>,
}

/// `[budgets]`: how spend budgets treat unpriced models and requests without `max_tokens`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawBudgets {
    pub unpriced: Option<String>,
    pub default_max_tokens: Option<u64>,
}

/// What instances of one cluster share beyond the limiter: their breakers, through Redis.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawCluster {
    pub redis_url: Option<String>,
    pub redis_password_env: Option<String>,
    pub redis_password_file: Option<String>,
    pub redis_ca_file: Option<String>,
    pub key_prefix: Option<String>,
    pub shared_breakers: Option<bool>,
}

/// Who may read the observability endpoints, and how many scorecards run at once.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawAdmin {
    pub metrics_token: Option<String>,
    pub max_concurrent_scorecards: Option<u32>,
    pub token_file: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawLog {
    pub retention: Option<String>,
    pub queue_records: Option<u64>,
    pub spill_bytes: Option<u64>,
    pub spill_path: Option<String>,
    pub when_full: Option<String>,
    pub durability: Option<String>,
    pub format: Option<String>,
    pub access_log: Option<bool>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawAlerts {
    pub availability_target: Option<f64>,
    pub fallback_rate_max: Option<f64>,
}

/// One model's price, in US dollars per million tokens.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawPrice {
    pub provider: String,
    pub model: String,
    pub input_per_1m: f64,
    pub output_per_1m: f64,
    pub cached_input_per_1m: Option<f64>,
    pub cache_write_per_1m: Option<f64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawKeys {
    pub rollback_window: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawServer {
    pub listen: Option<String>,
    pub max_body_bytes: Option<u64>,
    pub admin_listen: Option<String>,
    pub header_timeout: Option<String>,
    pub idle_timeout: Option<String>,
    pub websocket_idle_timeout: Option<String>,
    pub body_timeout: Option<String>,
    pub max_connections: Option<u64>,
    pub max_connections_per_ip: Option<u64>,
    pub shutdown_grace: Option<String>,
    pub drain_delay: Option<String>,
    pub max_upstream_body_bytes: Option<u64>,
    pub max_sse_event_bytes: Option<u64>,
    pub threads: Option<u64>,
    pub forward_headers: Option<Vec<String>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawAuth {
    pub required: Option<bool>,
    pub default_role: Option<String>,
    pub direct_models: Option<RawDirectModels>,
    pub unauthorized_log_rows_per_minute: Option<u32>,
}

/// `direct_models = false | true | ["provider/*", ...]`.
#[derive(Debug, Deserialize)]
#[serde(
    untagged,
    expecting = "must be false, true, or a list of provider/model patterns"
)]
pub enum RawDirectModels {
    Flag(bool),
    Patterns(Vec<String>),
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawStore {
    pub url: Option<String>,
    pub password_env: Option<String>,
    pub password_file: Option<String>,
    pub timeout: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawLimits {
    pub backend: Option<String>,
    pub redis_url: Option<String>,
    pub redis_password_env: Option<String>,
    pub redis_password_file: Option<String>,
    pub redis_ca_file: Option<String>,
    pub on_backend_error: Option<String>,
    pub key_prefix: Option<String>,
    pub lease: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawRole {
    pub name: String,
    pub requests_per_minute: Option<u64>,
    pub tokens_per_minute: Option<u64>,
    pub max_concurrent: Option<u64>,
    pub window: Option<String>,
    /// The routes and `provider/model` patterns the role may use; all when unset.
    pub models: Option<Vec<String>>,
    /// Spend budgets in US dollars.
    pub budget_per_day: Option<f64>,
    pub budget_per_month: Option<f64>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawProvider {
    pub name: String,
    pub kind: String,
    pub base_url: Option<String>,
    pub key_required: Option<bool>,
    pub api_key_env: Option<String>,
    /// anthropic: `max_tokens` for requests that leave it out.
    pub default_max_tokens: Option<u32>,
    /// anthropic: the `anthropic-version` header.
    pub anthropic_version: Option<String>,
    /// azure: the `api-version` query parameter.
    pub api_version: Option<String>,
    /// openai: whether it speaks the Responses API (default: only OpenAI's own base URL).
    pub responses: Option<bool>,
    /// Whether to speak HTTP/2 to it (default: HTTP/1.1 only).
    pub http2: Option<bool>,
    /// `health_check = { every = "10s" }`: probe its open breakers with a request of our own.
    pub health_check: Option<RawHealthCheck>,
    /// Client headers sent on to it as they came (default: `[server] forward_headers`).
    pub forward_headers: Option<Vec<String>>,
    /// vertex: the Google Cloud project and location (a region, or `global`).
    pub project: Option<String>,
    pub location: Option<String>,
    /// vertex: a service account's JSON key, in a file or in an environment variable
    /// (default: Application Default Credentials). bedrock: a shared credentials file.
    pub credentials_file: Option<String>,
    pub credentials_env: Option<String>,
    /// openai: a known OpenAI-compatible vendor or server (`groq`, `ollama`, ...).
    pub compat: Option<String>,
    /// bedrock: the AWS region, and where its credentials come from: the environment
    /// variables named here, else AWS's default chain (with `profile`, if set).
    pub region: Option<String>,
    pub access_key_id_env: Option<String>,
    pub secret_access_key_env: Option<String>,
    pub session_token_env: Option<String>,
    pub profile: Option<String>,
}

/// `health_check = { every = "10s" }`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawHealthCheck {
    pub every: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawRoute {
    pub name: String,
    pub steps: Vec<RawStep>,
    #[serde(default)]
    pub fallback_on_context_length: bool,
    pub degraded: Option<RawDegraded>,
    pub hedge: Option<RawHedge>,
    pub cache: Option<RawRouteCache>,
}

/// `hedge = { after = "800ms" | "p95", max = 1 }`: when step 0 is slow to commit, race the
/// next step against it.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawHedge {
    pub after: String,
    pub max: Option<u32>,
}

/// Either the short form `{ provider, model }` or `{ deployments = [...], balance }`;
/// `validate` checks that exactly one form is used, so its errors can name the field.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawStep {
    pub provider: Option<String>,
    pub model: Option<String>,
    pub deployments: Option<Vec<RawDeployment>>,
    pub balance: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawDeployment {
    pub provider: String,
    pub model: String,
    pub weight: Option<u32>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawDegraded {
    pub content: String,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawDebug {
    pub allow_force_fallback: Option<bool>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawRetry {
    pub attempts_per_step: Option<u32>,
    pub backoff_base: Option<String>,
    pub backoff_max: Option<String>,
    pub attempt_timeout: Option<String>,
    pub request_deadline: Option<String>,
    pub max_attempts: Option<u32>,
    pub stream_idle_timeout: Option<String>,
    pub budget_percent: Option<f64>,
    pub min_retries_per_second: Option<u32>,
    pub hedge_budget_percent: Option<f64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawBreaker {
    pub consecutive_failures: Option<u32>,
    pub failure_rate: Option<f64>,
    pub window: Option<String>,
    pub min_requests: Option<u32>,
    pub cooldown: Option<String>,
    pub cooldown_min: Option<String>,
    pub min_callers: Option<u32>,
}
