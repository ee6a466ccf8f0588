//! The `switchyard` binary: a thin command line over the library.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::{Parser, Subcommand};
use switchyard::auth::usd;
use switchyard::config::{Config, ConfigError, LogFormat};
use switchyard::fake::{FakeUpstream, Script};
use tracing_appender::non_blocking::WorkerGuard;

mod readiness_probe;

/// The version and the commit it was built from.
const VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (commit ",
    env!("SWITCHYARD_COMMIT"),
    ")"
);

const SERVE_ENV: &str = concat!(
    "Environment:\n",
    "  SWITCHYARD_LOG          log filter (default `info`), e.g. `debug` or `switchyard=trace`\n",
    "  SWITCHYARD_MASTER_KEY   base64 master key for provider secrets (else the 0600 file beside the database)\n",
    "  SWITCHYARD_ADMIN_TOKEN  bearer token for /admin/* (else [admin] token_file; neither: admin API off)\n",
    "  each provider's `api_key_env` (e.g. OPENAI_API_KEY) seeds its key into the store at start"
);
const CHECK_ENV: &str = concat!(
    "Environment:\n",
    "  SWITCHYARD_LOG          log filter (default `info`)\n",
    "  SWITCHYARD_MASTER_KEY   with --connect: opens provider keys in the store\n",
    "  each provider's `api_key_env`: checked, to warn about providers with no key"
);
const KEYS_ENV: &str = concat!(
    "Environment:\n",
    "  SWITCHYARD_LOG          log filter (default `info`)\n",
    "  SWITCHYARD_MASTER_KEY   base64 master key for provider secrets (else the 0600 file beside the database)"
);
const LOG_ONLY_ENV: &str = concat!(
    "Environment:\n",
    "  SWITCHYARD_LOG          log filter (default `info`), e.g. `debug` or `switchyard=trace`"
);

#[derive(Parser)]
#[command(name = "switchyard", version = VERSION, about = "A self-hosted LLM gateway")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the gateway.
    #[command(after_help = SERVE_ENV)]
    Serve {
        #[arg(long, default_value = "switchyard.toml")]
        config: PathBuf,
    },
    /// Run fake providers and a gateway with a fallback chain, printing what to curl.
    #[command(after_help = LOG_ONLY_ENV)]
    Demo {
        #[arg(long, default_value = "127.0.0.1:8080")]
        listen: SocketAddr,
    },
    /// Write a complete, commented example config and an admin token file to start from.
    #[command(after_help = LOG_ONLY_ENV)]
    Init {
        /// The directory to write switchyard.toml and admin-token into.
        #[arg(long, default_value = ".")]
        dir: PathBuf,
    },
    /// Validate a config; print each route's chain and worst-case latency budget.
    #[command(after_help = CHECK_ENV)]
    Check {
        #[arg(long, default_value = "switchyard.toml")]
        config: PathBuf,
        /// Also open the store and, when the limits use it, reach Redis.
        #[arg(long)]
        connect: bool,
    },
    /// Manage provider keys: put (reads the secret from stdin), list, rollback, rm.
    #[command(after_help = KEYS_ENV)]
    Keys {
        #[command(subcommand)]
        command: KeysCommand,
    },
    /// Manage virtual keys: create, list, revoke.
    #[command(after_help = LOG_ONLY_ENV)]
    Vkeys {
        #[command(subcommand)]
        command: VkeysCommand,
    },
    /// Read the request log: a table, or one JSON object a line with --json.
    #[command(after_help = LOG_ONLY_ENV)]
    Logs {
        #[arg(long, default_value = "switchyard.toml")]
        config: PathBuf,
        /// Only requests this recent, such as `15m`, `1h` or `7d`.
        #[arg(long)]
        since: Option<String>,
        /// Only this outcome: success, fallback, degraded, error or rejected.
        #[arg(long)]
        outcome: Option<String>,
        /// Only this route.
        #[arg(long)]
        route: Option<String>,
        /// Only this user's requests.
        #[arg(long)]
        user: Option<String>,
        /// Only the requests of this W3C trace (32 hex digits), as `[otel]` recorded it.
        #[arg(long)]
        trace_id: Option<String>,
        /// Only requests older than this, such as `10m` (with --since, a window).
        #[arg(long)]
        until: Option<String>,
        /// At most this many rows, the newest.
        #[arg(long)]
        limit: Option<usize>,
        /// Keep printing new rows as they are stored, until stopped.
        #[arg(long)]
        follow: bool,
        /// One JSON object a line instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Ask a running gateway's /readyz: exit 0 on a 2xx, 1 otherwise (a container's HEALTHCHECK).
    Health {
        #[arg(long, default_value = "http://127.0.0.1:8080/readyz")]
        url: String,
        /// Give up after this many seconds.
        #[arg(long, default_value_t = 5)]
        timeout: u64,
    },
    /// Run the scriptable fake provider used by tests, the demo and benchmarks.
    #[command(after_help = LOG_ONLY_ENV)]
    FakeUpstream {
        #[arg(long, default_value = "127.0.0.1:9001")]
        listen: SocketAddr,
        /// The name the fake greets with.
        #[arg(long, default_value = "fake")]
        name: String,
        /// A script as JSON (`{"behaviors":[{"status":500},{}],"mode":"cycle"}`), or @FILE.
        #[arg(long)]
        script: Option<String>,
        /// Answer 401 unless requests carry this key.
        #[arg(long)]
        require_key: Option<String>,
        /// Google auth, as Vertex has it: `POST /token` grants tokens for JWTs signed by the
        /// key whose public half (PKCS#1 DER, in base64) is in FILE; other requests need one.
        #[arg(long, value_name = "FILE")]
        google_public_key: Option<PathBuf>,
        /// How long the Google tokens it grants last, in seconds.
        #[arg(long, default_value_t = 3600)]
        google_token_seconds: u64,
        /// AWS auth, as Bedrock has it: Bedrock requests must be signed (SigV4) with these
        /// credentials, `ACCESS_KEY_ID:SECRET_ACCESS_KEY`, or `…:SESSION_TOKEN` for temporary
        /// ones, which requests must then carry.
        #[arg(long, value_name = "AKID:SECRET[:TOKEN]")]
        aws_credentials: Option<String>,
        /// Issue those AWS credentials as AWS does: STS `AssumeRoleWithWebIdentity` at the
        /// root (for `AWS_ENDPOINT_URL_STS`) to this web identity token only, and ECS
        /// container credentials at `/ecs-credentials`.
        #[arg(long, value_name = "TOKEN")]
        aws_web_identity_token: Option<String>,
        /// How long the AWS credentials it issues last, in seconds.
        #[arg(long, default_value_t = 3600)]
        aws_credential_seconds: u64,
    },
}

#[derive(Subcommand)]
enum KeysCommand {
    /// Store a provider key read from stdin; an existing id is rotated, the old version kept.
    Put {
        #[arg(long, default_value = "switchyard.toml")]
        config: PathBuf,
        provider: String,
        #[arg(long, default_value = "default")]
        id: String,
        #[arg(long, default_value_t = 1)]
        weight: u32,
        /// Expire the key after this long, such as `30d`.
        #[arg(long)]
        expires: Option<String>,
    },
    /// List keys, secrets masked.
    List {
        #[arg(long, default_value = "switchyard.toml")]
        config: PathBuf,
    },
    /// Restore the version the last rotation replaced, within the rollback window.
    Rollback {
        #[arg(long, default_value = "switchyard.toml")]
        config: PathBuf,
        provider: String,
        #[arg(long)]
        id: Option<String>,
    },
    /// Remove a key and its history.
    Rm {
        #[arg(long, default_value = "switchyard.toml")]
        config: PathBuf,
        provider: String,
        #[arg(long)]
        id: Option<String>,
    },
}

#[derive(Subcommand)]
enum VkeysCommand {
    /// Create a key and print it once; only its hash is stored.
    Create {
        #[arg(long, default_value = "switchyard.toml")]
        config: PathBuf,
        #[arg(long)]
        user: String,
        #[arg(long)]
        role: String,
        /// A permission such as `debug` (repeatable).
        #[arg(long = "permission")]
        permissions: Vec<String>,
        /// The routes and provider/model patterns (`openai/*`) it may use, comma-separated; all if unset.
        #[arg(long, value_delimiter = ',')]
        models: Option<Vec<String>>,
        /// Overrides the role's requests per minute.
        #[arg(long)]
        requests_per_minute: Option<u64>,
        /// Overrides the role's tokens per minute.
        #[arg(long)]
        tokens_per_minute: Option<u64>,
        /// Overrides the role's concurrent requests.
        #[arg(long)]
        max_concurrent: Option<u64>,
        /// Overrides the role's spend budget per UTC day, in US dollars (`5`, `12.50`).
        #[arg(long, value_name = "USD", value_parser = usd::parse, allow_negative_numbers = true)]
        budget_per_day: Option<u64>,
        /// Overrides the role's spend budget per calendar month, in US dollars.
        #[arg(long, value_name = "USD", value_parser = usd::parse, allow_negative_numbers = true)]
        budget_per_month: Option<u64>,
    },
    /// List keys, masked.
    List {
        #[arg(long, default_value = "switchyard.toml")]
        config: PathBuf,
    },
    /// Revoke a key, given whole or by its id; a running gateway stops accepting it within 1 s.
    Revoke {
        #[arg(long, default_value = "switchyard.toml")]
        config: PathBuf,
        key: String,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    // `serve` logs as its config says; an unreadable config is reported by `serve` itself.
    let log = match &cli.command {
        Command::Serve { config } => Config::load(config).ok().map(|c| c.log),
        _ => None,
    };
    let (format, access_log) = log.map_or((LogFormat::Text, true), |l| (l.format, l.access_log));
    // Dropped when `main` returns: flushes the log lines still queued.
    let _log_lines = init_tracing(format, access_log);
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("error: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(dispatch(cli.command)) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {}", chain(&e));
            ExitCode::FAILURE
        }
    }
}

/// An error and its causes on one line, each cause once: a cause that only repeats what is
/// already said (as `#[error("…: {0}")]` quotes its source, or SQLite's "Error code 14:
/// unable to open database file" under rusqlite's own message) is not printed again.
fn chain(error: &anyhow::Error) -> String {
    let mut text = error.to_string();
    for cause in error.chain().skip(1) {
        let cause = cause.to_string();
        let gist = cause.rsplit(": ").next().unwrap_or(&cause);
        if !text.contains(gist) {
            text.push_str(": ");
            text.push_str(&cause);
        }
    }
    text
}

async fn dispatch(command: Command) -> anyhow::Result<ExitCode> {
    match command {
        Command::Serve { config: path } => {
            let config = load(&path)?;
            // The same check as `check` and a reload: what one accepts, the others do.
            let mut options = switchyard::check::preflight(&config)
                .map_err(ConfigError::Invalid)
                .with_context(|| format!("invalid config {}", path.display()))?;
            options.config_path = Some(path);
            let listener = tokio::net::TcpListener::bind(config.server.listen)
                .await
                .with_context(|| format!("cannot listen on {}", config.server.listen))?;
            // `run` says "listening" itself, once nothing can stop the start any more.
            switchyard::server::run(listener, config, options, shutdown_signal()).await?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Demo { listen } => {
            let demo = switchyard::demo::start(listen).await?;
            let gateway = &demo.gateway;
            let instructions = switchyard::demo::instructions(&gateway.url(), &gateway.admin_url());
            println!("{instructions}");
            shutdown_signal().await;
            demo.gateway.shutdown().await?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Init { dir } => {
            let written = switchyard::init::write(&dir)?;
            println!("wrote {}", written.config.display());
            if written.token_created {
                println!(
                    "wrote {} (mode 0600): the admin API's token",
                    written.token.display()
                );
            } else {
                println!("kept {}", written.token.display());
            }
            println!(
                "next:\n  switchyard check --config {0}\n  ANTHROPIC_API_KEY=... OPENAI_API_KEY=... switchyard serve --config {0}\n  switchyard vkeys create --config {0} --user you --role default",
                written.config.display()
            );
            Ok(ExitCode::SUCCESS)
        }
        Command::Check {
            config: path,
            connect,
        } => match Config::load(&path) {
            Ok(config) => {
                // What `serve` (and a reload) checks besides the file, checked the same way.
                if let Err(errors) = switchyard::check::preflight(&config) {
                    eprintln!("{} has {} error(s):", path.display(), errors.len());
                    for error in errors {
                        eprintln!("  {error}");
                    }
                    return Ok(ExitCode::FAILURE);
                }
                print!("{}", switchyard::check::report(&config));
                for warning in switchyard::check::warnings(&config) {
                    eprintln!("warning: {warning}");
                }
                if connect {
                    switchyard::check::connect(&config).await?;
                    println!("\nconnected: the store and the limit backend answer");
                }
                Ok(ExitCode::SUCCESS)
            }
            Err(ConfigError::Invalid(errors)) => {
                eprintln!("{} has {} error(s):", path.display(), errors.len());
                for error in errors {
                    eprintln!("  {error}");
                }
                Ok(ExitCode::FAILURE)
            }
            Err(e) => Err(e.into()),
        },
        Command::Vkeys { command } => vkeys(command).await,
        Command::Keys { command } => keys(command).await,
        Command::Logs {
            config,
            since,
            outcome,
            route,
            user,
            trace_id,
            until,
            limit,
            follow,
            json,
        } => {
            use switchyard::store::{now_ms, request_log::LogQuery};
            use switchyard::telemetry::logs::{OUTCOMES, print};
            if let Some(outcome) = &outcome
                && !OUTCOMES.contains(&outcome.as_str())
            {
                anyhow::bail!(
                    "--outcome: `{outcome}` is not one of {}",
                    OUTCOMES.join(", ")
                );
            }
            let ago = |flag: &str, text: Option<String>| {
                text.map(|s| {
                    switchyard::config::parse_duration(&s)
                        .map(|d| now_ms() - d.as_millis() as i64)
                        .map_err(|m| anyhow::anyhow!("{flag}: {m}"))
                })
                .transpose()
            };
            let query = LogQuery {
                since_ms: ago("--since", since)?,
                until_ms: ago("--until", until)?,
                outcome,
                route,
                user,
                trace_id: trace_id.map(|id| id.to_ascii_lowercase()),
                limit,
                ..LogQuery::default()
            };
            let store = open_store(&load(&config)?).await?;
            print(&store, query, json, follow, &mut std::io::stdout()).await?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Health { url, timeout } => {
            readiness_probe::check(&url, std::time::Duration::from_secs(timeout)).await?;
            Ok(ExitCode::SUCCESS)
        }
        Command::FakeUpstream {
            listen,
            name,
            script,
            require_key,
            google_public_key,
            google_token_seconds,
            aws_credentials,
            aws_web_identity_token,
            aws_credential_seconds,
        } => {
            let script = match script {
                Some(script) => parse_script(&script)?,
                None => Script::default(),
            };
            let mut fake = FakeUpstream::new(&name).script(script);
            if let Some(key) = require_key {
                fake = fake.require_key(&key);
            }
            if let Some(path) = google_public_key {
                use base64::Engine;
                let text = std::fs::read_to_string(&path)
                    .with_context(|| format!("reading {}", path.display()))?;
                let der = base64::engine::general_purpose::STANDARD
                    .decode(text.trim())
                    .context("the Google public key is not base64")?;
                let lifetime = std::time::Duration::from_secs(google_token_seconds);
                fake = fake.google_auth(der, lifetime);
            }
            if let Some(credentials) = aws_credentials {
                // Secret keys and session tokens are base64 and never hold a `:`.
                let mut parts = credentials.splitn(3, ':');
                let mut part = || parts.next().filter(|part| !part.is_empty());
                let (Some(key), Some(secret)) = (part(), part()) else {
                    anyhow::bail!(
                        "--aws-credentials takes ACCESS_KEY_ID:SECRET_ACCESS_KEY[:TOKEN]"
                    );
                };
                fake = fake.aws_credentials(key, secret, part());
            }
            if let Some(token) = aws_web_identity_token {
                let lifetime = std::time::Duration::from_secs(aws_credential_seconds);
                fake = fake.aws_credential_issuer(&token, lifetime);
            }
            let fake = fake.start_on(listen).await?;
            println!("fake upstream `{name}` on {}", fake.base_url());
            shutdown_signal().await;
            Ok(ExitCode::SUCCESS)
        }
    }
}

async fn keys(command: KeysCommand) -> anyhow::Result<ExitCode> {
    use switchyard::keys::provider_keys::{ProviderKeys, table};
    let open = |path: PathBuf| async move {
        let config = load(&path)?;
        let store = open_store(&config).await?;
        let master_key = std::env::var(switchyard::keys::vault::MASTER_KEY_ENV).ok();
        let keys = ProviderKeys::open(store, &config, master_key.as_deref()).await?;
        anyhow::Ok(keys)
    };
    match command {
        KeysCommand::Put {
            config,
            provider,
            id,
            weight,
            expires,
        } => {
            let expires_in = expires
                .map(|e| {
                    switchyard::config::parse_duration(&e)
                        .map_err(|m| anyhow::anyhow!("--expires: {m}"))
                })
                .transpose()?;
            let keys = open(config).await?;
            let mut secret = String::new();
            std::io::Read::read_to_string(&mut std::io::stdin(), &mut secret)
                .context("cannot read the secret from stdin")?;
            let version = keys
                .put(&provider, &id, &secret, weight, expires_in)
                .await?;
            eprintln!("stored {provider} key `{id}` as version {version}");
        }
        KeysCommand::List { config } => {
            let keys = open(config).await?;
            keys.purge().await?;
            print!("{}", table(&keys.list().await?));
        }
        KeysCommand::Rollback {
            config,
            provider,
            id,
        } => {
            let version = open(config)
                .await?
                .rollback(&provider, id.as_deref())
                .await?;
            eprintln!("{provider} is back on version {version}");
        }
        KeysCommand::Rm {
            config,
            provider,
            id,
        } => {
            open(config).await?.remove(&provider, id.as_deref()).await?;
            eprintln!("removed");
        }
    }
    Ok(ExitCode::SUCCESS)
}

async fn vkeys(command: VkeysCommand) -> anyhow::Result<ExitCode> {
    use switchyard::auth::{KeyRequest, issue, table};
    use switchyard::store::LimitOverrides;
    match command {
        VkeysCommand::Create {
            config,
            user,
            role,
            permissions,
            models,
            requests_per_minute,
            tokens_per_minute,
            max_concurrent,
            budget_per_day,
            budget_per_month,
        } => {
            let config = load(&config)?;
            let request = KeyRequest {
                user,
                role,
                permissions,
                models,
                limits: LimitOverrides {
                    requests_per_minute,
                    tokens_per_minute,
                    max_concurrent,
                    budget_per_day_micros: budget_per_day,
                    budget_per_month_micros: budget_per_month,
                },
            };
            // The admin API's checks, so the CLI and HTTP refuse the same keys.
            request.validate(&config)?;
            let store = open_store(&config).await?;
            let issued = issue(request)?;
            store.insert_virtual_key(issued.record.clone()).await?;
            eprintln!(
                "created key {} for user {}; it is shown only this once:",
                issued.record.id, issued.record.user
            );
            println!("{}", issued.key);
        }
        VkeysCommand::List { config } => {
            let store = open_store(&load(&config)?).await?;
            print!("{}", table(&store.virtual_keys().await?));
        }
        VkeysCommand::Revoke { config, key } => {
            let store = open_store(&load(&config)?).await?;
            if !store.revoke_virtual_key(&key).await? {
                anyhow::bail!("no live key matches");
            }
            eprintln!("revoked");
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn load(path: &std::path::Path) -> anyhow::Result<Config> {
    Config::load(path).with_context(|| format!("invalid config {}", path.display()))
}

fn parse_script(text: &str) -> anyhow::Result<Script> {
    let json = match text.strip_prefix('@') {
        Some(path) => {
            std::fs::read_to_string(path).with_context(|| format!("cannot read {path}"))?
        }
        None => text.to_owned(),
    };
    serde_json::from_str(&json).context("invalid --script")
}

/// Log lines go to stderr from a thread of their own (tracing-appender's non-blocking
/// writer, see [`console`]), so a slow or stuck stderr never holds up the request log's
/// writer or a runtime thread. The guard, dropped at exit, waits about a second for the
/// queued lines to be written.
fn init_tracing(format: LogFormat, access_log: bool) -> WorkerGuard {
    let mut filter = tracing_subscriber::EnvFilter::try_from_env("SWITCHYARD_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    if !access_log {
        // The request log in the store keeps every request; this only quiets stderr.
        if let Ok(off) = "switchyard::requests=off".parse() {
            filter = filter.add_directive(off);
        }
    }
    let (lines, guard) = console::spawn();
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_target(false)
        .with_writer(lines);
    match format {
        LogFormat::Json => builder.json().with_current_span(false).init(),
        LogFormat::Text => builder
            .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
            .event_format(switchyard::telemetry::access_line::AccessLine::new())
            .init(),
    }
    guard
}

/// stderr for log lines, through tracing-appender's writer thread: lines are queued in
/// order, a full queue (stderr stuck, say a pipe nobody reads) drops new ones rather than
/// block the thread that logs, and the thread writes through a buffer it flushes whenever
/// the queue runs dry.
mod console {
    use std::io::BufWriter;

    use tracing_appender::non_blocking::{NonBlocking, NonBlockingBuilder, WorkerGuard};

    /// Lines queued for the writer thread before new ones are dropped.
    const QUEUED_LINES: usize = 16_384;

    /// Starts the writer thread.
    pub fn spawn() -> (NonBlocking, WorkerGuard) {
        NonBlockingBuilder::default()
            .lossy(true)
            .buffered_lines_limit(QUEUED_LINES)
            .thread_name("switchyard-log")
            .finish(BufWriter::with_capacity(64 * 1024, std::io::stderr()))
    }
}

/// Resolves on Ctrl-C or SIGTERM.
async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let terminate = std::future::pending::<()>();
    tokio::select! {
        _ = ctrl_c => {}
        _ = terminate => {}
    }
}

/// The store `config` names, with its password.
async fn open_store(
    config: &switchyard::config::Config,
) -> Result<switchyard::store::Store, switchyard::store::StoreError> {
    switchyard::store::Store::connect(&config.store.url, config.store.password.as_ref()).await
}
