//! Configuration: one TOML file, parsed strictly, then validated into [`Config`].
//!
//! Parsing and validation are separate steps (as tensorzero does it): `raw` mirrors the file
//! with `deny_unknown_fields`, and `validate` checks it whole, collecting every error with the
//! path of the field at fault, so a user fixes a bad file in one pass.

mod access;
pub mod backoff;
mod cache;
mod duration;
mod otel;
pub mod price_table;
mod raw;
mod redis_target;
pub mod retry_budget;
mod validate;

use std::fmt;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use backoff::Backoff;
use retry_budget::RetryBudget;

pub use access::{DirectModels, ModelPattern, pattern_matches};
pub use cache::{CacheBackend, CacheConfig, CacheScope, RouteCache};
pub use duration::{format_duration, parse_duration};
pub use otel::{OtelConfig, OtelProtocol, SemConv};
pub use redis_target::RedisTarget;

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
    pub admin: AdminConfig,
    pub cluster: ClusterConfig,
    /// `[budgets]`: how spend budgets price what the price table does not.
    pub budgets: BudgetsConfig,
    /// `[cache]`: where the routes that opt in keep their answers.
    pub cache: CacheConfig,
    /// `[otel]`: where traces go.
    pub otel: OtelConfig,
}

/// A secret written in the config file; its `Debug` prints `***`.
#[derive(Clone, PartialEq, Eq)]
pub struct Token(Arc<str>);

impl Token {
    /// Wraps a token.
    pub fn new(value: &str) -> Token {
        Token(Arc::from(value))
    }

    /// The token itself, to compare with what a caller offers.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Token {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("***")
    }
}

/// `[admin]`: who may read `/metrics`, `/v1/scorecard` and `/dashboard`.
#[derive(Clone, Debug)]
pub struct AdminConfig {
    /// A bearer token for the observability endpoints only (the admin token works too).
    pub metrics_token: Option<Token>,
    /// Scorecards computed at once; a request over this is answered 503.
    pub max_concurrent_scorecards: usize,
    /// A file (mode 0600) holding the admin API's bearer token; the environment wins over it.
    pub token_file: Option<std::path::PathBuf>,
}

#[derive(Clone, Debug)]
pub struct LogConfig {
    /// Request-log rows older than this are purged.
    pub retention: Duration,
    /// Records the queue to the writer holds, in-flight requests' reserved places included.
    pub queue_records: usize,
    /// The most the spill journal may hold on disk; 0 turns it off.
    pub spill_bytes: u64,
    /// Where the spill journal lives; `None` for the default beside the store file.
    pub spill_path: Option<std::path::PathBuf>,
    /// What happens to new requests when the queue and the journal are both full.
    pub when_full: WhenFull,
    /// Whether an answer waits for its record to be on disk.
    pub durability: Durability,
    /// How the process's own log lines (stderr) are written.
    pub format: LogFormat,
    /// Whether each request also gets a line in the process log (it always gets a row in
    /// the request log).
    pub access_log: bool,
}

/// How log lines are written to stderr.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum LogFormat {
    /// One readable line per event.
    #[default]
    Text,
    /// One JSON object per line, for a log collector.
    Json,
}

/// What the gateway does when neither the queue nor the spill journal has room.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WhenFull {
    /// New requests get a 503 until there is room again; nothing answered goes unlogged.
    Refuse,
    /// Requests are served; records with no room are dropped and counted.
    Drop,
}

/// When a request's record is safe from a crash of the gateway.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Durability {
    /// Records are committed in batches shortly after the answer (a crash loses those queued).
    Batched,
    /// Each answer waits until its record is written and fsynced to the spill journal.
    Fsync,
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
    /// Input read from the provider's prompt cache, and written to it, where it prices them
    /// apart (recorded; requests are costed at `input_per_1m` and `output_per_1m`).
    pub cached_input_per_1m: Option<f64>,
    pub cache_write_per_1m: Option<f64>,
    pub origin: PriceOrigin,
}

/// Where a price came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PriceOrigin {
    /// `[[prices]]` in the config file.
    File,
    /// The table the gateway ships with, from a source of this date.
    Shipped { as_of: &'static str },
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
    /// A new connection's request head must arrive whole within this.
    pub header_timeout: Duration,
    /// A kept-alive connection with no request in flight is closed after this.
    pub idle_timeout: Duration,
    /// A Responses WebSocket with no response in flight and no message from its client is
    /// closed after this. Longer than `idle_timeout`: an agent's tools run between turns.
    pub websocket_idle_timeout: Duration,
    /// A request body must arrive whole within this of its head.
    pub body_timeout: Duration,
    /// Client connections served at once; `None` derives it from the file-descriptor limit.
    pub max_connections: Option<usize>,
    /// The most client connections one address may hold; `None`: no cap of its own (behind a
    /// load balancer every client has its address).
    pub max_connections_per_ip: Option<usize>,
    /// How long shutdown waits for in-flight requests (streams above all) before ending them.
    pub shutdown_grace: Duration,
    /// How long after SIGTERM the listener still accepts, with `/readyz` already 503, so a
    /// load balancer stops sending before any connection is refused.
    pub drain_delay: Duration,
    /// The most of a non-streamed upstream answer read; more is a failed attempt.
    pub max_upstream_body_bytes: usize,
    /// The longest single upstream stream event read; longer is a failed attempt.
    pub max_sse_event_bytes: usize,
    /// Threads serving client connections; `None` is one for each core the process may use.
    pub threads: Option<usize>,
    /// Client headers every provider without a list of its own is sent as they came.
    pub forward_headers: Vec<http::HeaderName>,
}

#[derive(Clone, Debug)]
pub struct AuthConfig {
    pub required: bool,
    pub default_role: String,
    /// Which direct `provider/model` names clients may use.
    pub direct_models: DirectModels,
    /// Log rows each source address's 401s get per minute; the rest are counted, then
    /// summed up in one row.
    pub unauthorized_log_rows_per_minute: u32,
}

#[derive(Clone)]
pub struct StoreConfig {
    pub url: String,
    /// `password_env` or `password_file`: PostgreSQL's password, kept out of the URL.
    pub password: Option<crate::secret::Secret>,
    /// How long one store operation may take: a request-log batch past it goes to the spill
    /// journal, and a request waiting on stored state fails with a 503.
    pub timeout: Duration,
}

impl fmt::Debug for StoreConfig {
    // A PostgreSQL URL may carry a password: its `user:password@` part is masked.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let url = match (self.url.split_once("://"), self.url.rsplit_once('@')) {
            (Some((scheme, _)), Some((_, rest))) => format!("{scheme}://***@{rest}"),
            _ => self.url.clone(),
        };
        f.debug_struct("StoreConfig")
            .field("url", &url)
            .field("password", &self.password)
            .field("timeout", &self.timeout)
            .finish()
    }
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

/// `[limits] lease` unless the file says otherwise.
pub const DEFAULT_LEASE: Duration = Duration::from_secs(30);

/// `[cluster]`: where instances share their breakers.
#[derive(Clone)]
pub struct ClusterConfig {
    /// The Redis that carries breaker state between instances; `None` keeps every breaker
    /// local, as a single node needs.
    pub redis: Option<RedisTarget>,
    /// Prefixes every key and channel, so several clusters (or tests) can share one Redis.
    pub key_prefix: String,
}

impl std::fmt::Debug for ClusterConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClusterConfig")
            .field("redis", &self.redis)
            .field("key_prefix", &self.key_prefix)
            .finish()
    }
}

#[derive(Clone, Debug)]
pub struct LimitsConfig {
    pub backend: LimitBackend,
    pub redis: RedisTarget,
    pub on_backend_error: FailMode,
    /// Prefixes every Redis key, so several deployments (or tests) can share one Redis.
    pub key_prefix: String,
    /// How long a Redis concurrency slot outlives an instance that stopped renewing it.
    pub lease: Duration,
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
    /// The routes and `provider/model` patterns the role may use; all when `None`.
    pub models: Option<Vec<ModelPattern>>,
    /// Spend budget per UTC day, in millionths of a US dollar.
    pub budget_per_day_micros: Option<u64>,
    /// Spend budget per UTC calendar month, in millionths of a US dollar.
    pub budget_per_month_micros: Option<u64>,
}

/// `[budgets]`: the rules every spend budget shares.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BudgetsConfig {
    /// What a caller with a budget gets when a model its route may use has no price.
    pub unpriced: Unpriced,
    /// Output tokens reserved for a request that names no `max_tokens` (or its kin).
    pub default_max_tokens: u64,
}

/// `[budgets] default_max_tokens` unless the file says otherwise.
pub const DEFAULT_BUDGET_MAX_TOKENS: u64 = 4096;

impl Default for BudgetsConfig {
    fn default() -> BudgetsConfig {
        BudgetsConfig {
            unpriced: Unpriced::Refuse,
            default_max_tokens: DEFAULT_BUDGET_MAX_TOKENS,
        }
    }
}

/// How a budget treats a model missing from `[[prices]]`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Unpriced {
    /// Refuse the request: its cost could not be bounded.
    #[default]
    Refuse,
    /// Admit it, and count it as costing nothing.
    Free,
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
    /// Google Cloud's Vertex AI: Gemini models in Gemini's format, Anthropic's in Anthropic's,
    /// with Google auth.
    Vertex,
    /// AWS Bedrock's Converse API, signed with SigV4.
    Bedrock,
}

impl ProviderKind {
    /// The name config files use for this kind.
    pub fn as_str(self) -> &'static str {
        match self {
            ProviderKind::OpenAi => "openai",
            ProviderKind::Anthropic => "anthropic",
            ProviderKind::Gemini => "gemini",
            ProviderKind::Azure => "azure",
            ProviderKind::Vertex => "vertex",
            ProviderKind::Bedrock => "bedrock",
        }
    }
}

/// Where a `kind = "vertex"` provider's models live, and how it proves who it is.
#[derive(Clone, Debug)]
pub struct VertexSettings {
    pub project: String,
    /// A region (`us-east5`) or `global`.
    pub location: String,
    pub credentials: GoogleCredentials,
}

/// The Google identity a Vertex provider's access tokens are made for.
#[derive(Clone, Debug)]
pub enum GoogleCredentials {
    /// A service account's JSON key (from `credentials_file` or `credentials_env`), read at
    /// load: a secret.
    ServiceAccount(crate::secret::Secret),
    /// Application Default Credentials: `GOOGLE_APPLICATION_CREDENTIALS`, gcloud's, then the
    /// metadata server (workload identity).
    Default,
}

/// Where a `kind = "bedrock"` provider's models live, and whose AWS credentials sign for it.
#[derive(Clone, Debug)]
pub struct BedrockSettings {
    /// The AWS region (`us-east-1`): the endpoint's, and the signature's.
    pub region: String,
    pub credentials: AwsCredentialSource,
}

/// Where a Bedrock provider's AWS credentials come from.
#[derive(Clone, Debug)]
pub enum AwsCredentialSource {
    /// The provider's own `access_key_id_env`, `secret_access_key_env` and
    /// `session_token_env`, read at load: secrets.
    Keys {
        access_key_id: crate::secret::Secret,
        secret_access_key: crate::secret::Secret,
        session_token: Option<crate::secret::Secret>,
    },
    /// A shared credentials file of the provider's own (`credentials_file`), at `profile`
    /// (else `default`): keys, or a role to assume with them.
    File {
        path: std::path::PathBuf,
        profile: Option<String>,
    },
    /// AWS's default chain: the `AWS_*` environment variables, the shared credentials and
    /// config files (`profile`, else `AWS_PROFILE`, else `default`), web identity (EKS),
    /// then the ECS and EC2 metadata endpoints.
    Chain { profile: Option<String> },
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
    /// openai: `/v1/responses` passes through to `{base_url}/responses`; otherwise it is
    /// translated to chat completions.
    pub responses: bool,
    /// Requests to it go over HTTP/2, many streams to a connection: negotiated by ALPN over
    /// TLS (HTTP/1.1 when the server offers only that), with prior knowledge over plain http.
    pub http2: bool,
    /// Active health checks: while one of its breakers is open, the gateway probes it with
    /// the smallest real request, and no user's request is ever the probe.
    pub health_check: Option<HealthCheck>,
    /// Client headers sent on to it as they came: its own list, else the server's.
    pub forward_headers: Vec<http::HeaderName>,
    /// vertex: its project, location and credentials.
    pub vertex: Option<Arc<VertexSettings>>,
    /// bedrock: its region and credentials.
    pub bedrock: Option<Arc<BedrockSettings>>,
    /// openai: the OpenAI-compatible vendor or server it is, whose base URL it defaults to
    /// and whose quirks its requests are adjusted for.
    pub compat: Option<Compat>,
}

/// The OpenAI-compatible providers and local servers known by name (`compat = "groq"`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Compat {
    Groq,
    Mistral,
    DeepSeek,
    Together,
    Fireworks,
    Xai,
    OpenRouter,
    Ollama,
    Vllm,
    LmStudio,
}

impl Compat {
    pub const ALL: [Compat; 10] = [
        Compat::Groq,
        Compat::Mistral,
        Compat::DeepSeek,
        Compat::Together,
        Compat::Fireworks,
        Compat::Xai,
        Compat::OpenRouter,
        Compat::Ollama,
        Compat::Vllm,
        Compat::LmStudio,
    ];

    /// Its name in config files.
    pub fn as_str(self) -> &'static str {
        match self {
            Compat::Groq => "groq",
            Compat::Mistral => "mistral",
            Compat::DeepSeek => "deepseek",
            Compat::Together => "together",
            Compat::Fireworks => "fireworks",
            Compat::Xai => "xai",
            Compat::OpenRouter => "openrouter",
            Compat::Ollama => "ollama",
            Compat::Vllm => "vllm",
            Compat::LmStudio => "lmstudio",
        }
    }

    /// Its OpenAI-compatible API root, as its documentation gives it (a local server's
    /// default address).
    pub fn base_url(self) -> &'static str {
        match self {
            Compat::Groq => "https://api.groq.com/openai/v1",
            Compat::Mistral => "https://api.mistral.ai/v1",
            Compat::DeepSeek => "https://api.deepseek.com/v1",
            Compat::Together => "https://api.together.ai/v1",
            Compat::Fireworks => "https://api.fireworks.ai/inference/v1",
            Compat::Xai => "https://api.x.ai/v1",
            Compat::OpenRouter => "https://openrouter.ai/api/v1",
            Compat::Ollama => "http://localhost:11434/v1",
            Compat::Vllm => "http://localhost:8000/v1",
            Compat::LmStudio => "http://localhost:1234/v1",
        }
    }

    /// A local server, which takes no key unless it was started with one.
    pub fn local(self) -> bool {
        matches!(self, Compat::Ollama | Compat::Vllm | Compat::LmStudio)
    }
}

/// `health_check = { every }` on a provider.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HealthCheck {
    /// How often an open breaker of the provider is probed.
    pub every: Duration,
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
    /// When step 0 is slow to commit, race the next step against it.
    pub hedge: Option<Hedge>,
    /// `cache = { ttl, scope }`: answers kept and served again; `None` caches nothing.
    pub cache: Option<RouteCache>,
}

/// A route's hedge: how long step 0 may go without committing before the next step is
/// started beside it, and how many extra attempts may race it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Hedge {
    pub after: HedgeDelay,
    /// Extra attempts that may run beside step 0's, each on the next step; at least 1.
    pub max: u32,
}

/// How long step 0 may go without committing before a hedge starts.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum HedgeDelay {
    /// A fixed wait: `after = "800ms"`.
    Fixed(Duration),
    /// The step-0 deployment's own observed time to commit at this percentile (50 to 99):
    /// `after = "p95"`.
    Percentile(u8),
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
    /// How many retries each deployment's failures may cause (`budget_percent`,
    /// `min_retries_per_second`).
    pub budget: RetryBudget,
    /// The most of a route's requests of the last 10 s that may be hedged, in percent.
    pub hedge_budget_percent: f64,
}

#[derive(Clone, Debug)]
pub struct BreakerConfig {
    pub consecutive_failures: u32,
    pub failure_rate: f64,
    pub window: Duration,
    pub min_requests: u32,
    /// The longest an open breaker waits before a probe: failed probes double the wait up
    /// to this.
    pub cooldown: Duration,
    /// How long a breaker first stays open, and again after a probe succeeded.
    pub cooldown_min: Duration,
    /// Distinct callers whose failures it takes to open, unless no other caller has been
    /// served within the window.
    pub min_callers: u32,
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
        let mut config = Config::parse(&text)?;
        // A relative path means "beside the config", wherever the process was started from:
        // resolving it against the current directory would silently open a new, empty store.
        let dir = std::path::absolute(path)
            .ok()
            .and_then(|p| p.parent().map(Path::to_path_buf))
            .unwrap_or_default();
        config.resolve_paths(&dir);
        Ok(config)
    }

    /// Makes every relative path in the config relative to `dir` (the config file's own).
    pub fn resolve_paths(&mut self, dir: &Path) {
        if let Some(file) = self.store.url.strip_prefix("sqlite://")
            && !file.is_empty()
            && Path::new(file).is_relative()
        {
            self.store.url = format!("sqlite://{}", dir.join(file).display());
        }
        for file in [&mut self.admin.token_file, &mut self.log.spill_path]
            .into_iter()
            .flatten()
        {
            if file.is_relative() {
                *file = dir.join(&*file);
            }
        }
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
