//! Shared setup: fakes, configs, a gateway and a client.

use std::time::Duration;

use serde_json::{Value, json};
use switchyard::auth::{KeyRequest, issue};
use switchyard::config::Config;
use switchyard::fake::FakeHandle;
use switchyard::server::Gateway;
use switchyard::store::LimitOverrides;
use switchyard::telemetry::RequestRecord;

/// Issues a virtual key for `user` of `role` (limited to `models`, if given) into the
/// gateway's store and waits until the gateway has loaded it: the key and its id.
pub async fn stored_key(
    gateway: &Gateway,
    user: &str,
    role: &str,
    models: Option<Vec<String>>,
) -> (String, String) {
    let issued = issue(KeyRequest {
        user: user.into(),
        role: role.into(),
        permissions: Vec::new(),
        models,
        limits: LimitOverrides::default(),
    })
    .unwrap();
    let id = issued.record.id.clone();
    gateway
        .store()
        .insert_virtual_key(issued.record)
        .await
        .unwrap();
    gateway.keys_current().await;
    (issued.key, id)
}

/// A provider block for a fake, with no key required.
pub fn provider(name: &str, fake: &FakeHandle) -> String {
    format!(
        "[[providers]]\nname = \"{name}\"\nkind = \"openai\"\nbase_url = \"{}\"\nkey_required = false\n",
        fake.base_url()
    )
}

/// A route over `steps` of `(provider, model)`, followed by `extra` lines of its own.
pub fn route(name: &str, steps: &[(&str, &str)], extra: &str) -> String {
    let steps: Vec<String> = steps
        .iter()
        .map(|(p, m)| format!("{{ provider = \"{p}\", model = \"{m}\" }}"))
        .collect();
    format!(
        "[[routes]]\nname = \"{name}\"\nsteps = [{}]\n{extra}\n",
        steps.join(", ")
    )
}

/// Quick retries, so tests of backoff do not wait for the production defaults.
pub const FAST_RETRY: &str = "[retry]\nbackoff_base = \"10ms\"\nbackoff_max = \"50ms\"\nattempt_timeout = \"2s\"\nrequest_deadline = \"10s\"\n";

/// Parses test config text. Unless the text says otherwise, auth is optional and the store
/// lives in memory, so tests never share state.
pub fn test_config(config: &str) -> Config {
    let text = test_config_text(config);
    Config::parse(&text).unwrap_or_else(|e| panic!("bad test config: {e}\n{text}"))
}

/// [`test_config`]'s text, for a test that writes it to a file.
pub fn test_config_text(config: &str) -> String {
    let mut text = String::new();
    if !config.contains("[auth]") {
        text.push_str("[auth]\nrequired = false\n");
    }
    if !config.contains("[store]") {
        text.push_str("[store]\nurl = \"sqlite::memory:\"\n");
    }
    text.push_str(config);
    text
}

/// A test gateway's config, built a block at a time:
///
/// ```ignore
/// let gateway = TestGateway::new()
///     .provider("primary", &primary)
///     .provider("secondary", &secondary)
///     .route("r", &[("primary", "m"), ("secondary", "m")], "")
///     .fast_retry()
///     .start()
///     .await;
/// ```
///
/// Unless a block says otherwise, auth is optional and the store lives in memory (see
/// [`test_config`]).
#[derive(Clone, Debug, Default)]
pub struct TestGateway {
    toml: String,
}

impl TestGateway {
    pub fn new() -> TestGateway {
        TestGateway::default()
    }

    /// An OpenAI-kind provider for `fake`, with no key required.
    pub fn provider(self, name: &str, fake: &FakeHandle) -> TestGateway {
        self.with(&provider(name, fake))
    }

    /// A provider of `kind` for `fake`, with no key required.
    pub fn provider_of(self, kind: &str, name: &str, fake: &FakeHandle) -> TestGateway {
        self.with(&provider_of(kind, name, fake))
    }

    /// An OpenAI-kind provider at `base_url`, followed by `extra` lines of its own. Unlike
    /// [`TestGateway::provider`], it needs a key unless `extra` says otherwise.
    pub fn provider_at(self, name: &str, base_url: &str, extra: &str) -> TestGateway {
        self.with(&format!(
            "[[providers]]\nname = \"{name}\"\nkind = \"openai\"\nbase_url = \"{base_url}\"\n{extra}\n"
        ))
    }

    /// A provider whose port nothing listens on: every attempt fails to connect.
    pub fn dead_provider(self, name: &str) -> TestGateway {
        let closed = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port");
        self.provider_at(name, &format!("http://{closed}/v1"), "key_required = false")
    }

    /// A route over `steps` of `(provider, model)`, followed by `extra` lines of its own.
    pub fn route(self, name: &str, steps: &[(&str, &str)], extra: &str) -> TestGateway {
        self.with(&route(name, steps, extra))
    }

    /// Quick retries ([`FAST_RETRY`]), so tests of backoff do not wait for the defaults.
    pub fn fast_retry(self) -> TestGateway {
        self.with(FAST_RETRY)
    }

    /// Any other TOML, as written; a table's header must start a line.
    pub fn with(mut self, toml: &str) -> TestGateway {
        if !self.toml.is_empty() && !self.toml.ends_with('\n') {
            self.toml.push('\n');
        }
        self.toml.push_str(toml);
        self
    }

    /// The config text, with the test defaults, for a test that writes it to a file.
    pub fn text(&self) -> String {
        test_config_text(&self.toml)
    }

    pub fn config(&self) -> Config {
        test_config(&self.toml)
    }

    pub async fn start(&self) -> Gateway {
        Gateway::start(self.config()).await.expect("gateway starts")
    }
}

/// Starts a gateway from config text, with [`test_config`]'s defaults.
pub async fn gateway(config: &str) -> Gateway {
    Gateway::start(test_config(config))
        .await
        .expect("gateway starts")
}

/// The standard two-step setup: route `r` = primary → secondary.
pub async fn two_step(primary: &FakeHandle, secondary: &FakeHandle, extra: &str) -> Gateway {
    TestGateway::new()
        .provider("primary", primary)
        .provider("secondary", secondary)
        .route("r", &[("primary", "model-a"), ("secondary", "model-b")], "")
        .with(extra)
        .start()
        .await
}

pub fn client() -> reqwest::Client {
    let _ = rustls::crypto::ring::default_provider().install_default();
    reqwest::Client::builder().build().expect("client builds")
}

/// A client that opens a new connection for every request, as separate clients (or a load
/// balancer's health checks) do.
pub fn fresh_client() -> reqwest::Client {
    let _ = rustls::crypto::ring::default_provider().install_default();
    reqwest::Client::builder()
        .pool_max_idle_per_host(0)
        .build()
        .expect("client builds")
}

pub fn chat(model: &str) -> Value {
    json!({"model": model, "messages": [{"role": "user", "content": "Hello there"}]})
}

pub fn chat_stream(model: &str) -> Value {
    json!({"model": model, "stream": true, "messages": [{"role": "user", "content": "Hello there"}]})
}

pub async fn post(gateway: &Gateway, body: &Value) -> reqwest::Response {
    post_with(gateway, body, &[]).await
}

pub async fn post_with(
    gateway: &Gateway,
    body: &Value,
    headers: &[(&str, &str)],
) -> reqwest::Response {
    let mut request = client()
        .post(format!("{}/v1/chat/completions", gateway.url()))
        .json(body);
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    request.send().await.expect("gateway answers")
}

/// A response header as a string ("" when absent).
pub fn header<'a>(response: &'a reqwest::Response, name: &str) -> &'a str {
    response
        .headers()
        .get(name)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
}

/// The completion's text.
pub fn content(body: &Value) -> &str {
    body["choices"][0]["message"]["content"]
        .as_str()
        .unwrap_or("")
}

/// The request's log row, once the writer has it.
pub async fn record(gateway: &Gateway, id: &str) -> RequestRecord {
    let telemetry = gateway.telemetry();
    let wait = async {
        loop {
            if let Some(row) = telemetry.recent().into_iter().find(|r| r.id == id) {
                return row;
            }
            telemetry.wait_for_rows(telemetry.rows_written() + 1).await;
        }
    };
    tokio::time::timeout(Duration::from_secs(10), wait)
        .await
        .expect("the request is logged")
}

/// The data of each SSE event in a whole stream body.
pub fn sse_data(body: &str) -> Vec<String> {
    body.split("\n\n")
        .filter_map(|event| event.strip_prefix("data: "))
        .map(str::to_owned)
        .collect()
}

/// The concatenated content deltas of a stream.
pub fn streamed_text(events: &[String]) -> String {
    events
        .iter()
        .filter_map(|e| serde_json::from_str::<Value>(e).ok())
        .filter_map(|v| {
            v["choices"][0]["delta"]["content"]
                .as_str()
                .map(str::to_owned)
        })
        .collect()
}

/// Asserts the body is an OpenAI-shaped error and returns its message.
pub fn error_message(body: &Value) -> String {
    let error = &body["error"];
    assert!(error.is_object(), "not an OpenAI error: {body}");
    for field in ["message", "type", "param", "code"] {
        assert!(error.get(field).is_some(), "error lacks `{field}`: {body}");
    }
    error["message"].as_str().unwrap_or("").to_owned()
}

/// A provider block of any kind for a fake, with no key required. Kinds other than the
/// OpenAI family take the fake's root URL, as their real base URLs are hosts.
pub fn provider_of(kind: &str, name: &str, fake: &FakeHandle) -> String {
    let base_url = match kind {
        "openai" => fake.base_url(),
        _ => fake.root_url(),
    };
    format!(
        "[[providers]]\nname = \"{name}\"\nkind = \"{kind}\"\nbase_url = \"{base_url}\"\nkey_required = false\n"
    )
}

/// Posts `body` to `path` on the gateway.
pub async fn post_to(gateway: &Gateway, path: &str, body: &Value) -> reqwest::Response {
    client()
        .post(format!("{}{path}", gateway.url()))
        .json(body)
        .send()
        .await
        .expect("gateway answers")
}

/// A minimal Anthropic Messages request.
pub fn message(model: &str, stream: bool) -> Value {
    json!({"model": model, "max_tokens": 256, "stream": stream,
           "messages": [{"role": "user", "content": "Hello there"}]})
}

/// The `(event name, data)` pairs of a whole SSE body.
pub fn sse_events(body: &str) -> Vec<(String, Value)> {
    body.split("\n\n")
        .filter_map(|event| {
            let mut name = String::new();
            let mut data = None;
            for line in event.lines() {
                if let Some(n) = line.strip_prefix("event: ") {
                    name = n.to_owned();
                } else if let Some(d) = line.strip_prefix("data: ") {
                    data = Some(serde_json::from_str(d).unwrap_or(Value::String(d.to_owned())));
                }
            }
            data.map(|d| (name, d))
        })
        .collect()
}

/// The text an Anthropic event stream delivered.
pub fn anthropic_text(events: &[(String, Value)]) -> String {
    events
        .iter()
        .filter(|(name, _)| name == "content_block_delta")
        .filter_map(|(_, data)| data["delta"]["text"].as_str().map(str::to_owned))
        .collect()
}

/// The observability token that [`OBSERVABILITY`] configures.
pub const METRICS_TOKEN: &str = "test-metrics-token";

/// An `[admin]` section that lets tests read `/metrics`, `/v1/scorecard` and `/dashboard`.
pub const OBSERVABILITY: &str = "[admin]\nmetrics_token = \"test-metrics-token\"\n";

/// GETs an observability endpoint on the client port with [`METRICS_TOKEN`].
pub async fn observe(gateway: &Gateway, path: &str) -> reqwest::Response {
    client()
        .get(format!("{}{path}", gateway.url()))
        .bearer_auth(METRICS_TOKEN)
        .send()
        .await
        .expect("gateway answers")
}

/// `/metrics` from `base` (a gateway's URL), read with `token`.
pub async fn metrics_text(base: &str, token: &str) -> String {
    client()
        .get(format!("{base}/metrics"))
        .bearer_auth(token)
        .send()
        .await
        .expect("gateway answers")
        .text()
        .await
        .expect("a text body")
}

/// Calls the admin API of `gateway` with `token` (none: no `Authorization` header).
pub async fn admin_request(
    gateway: &Gateway,
    token: Option<&str>,
    method: reqwest::Method,
    path: &str,
    body: Option<&Value>,
) -> reqwest::Response {
    let mut request = client().request(method, format!("{}{path}", gateway.admin_url()));
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    if let Some(body) = body {
        request = request.json(body);
    }
    request.send().await.expect("gateway answers")
}

impl TestGateway {
    /// One `key = value` line, for the table whose header came last; `value` is written as
    /// TOML (a string quoted and escaped), so a varying value needs no hand-made TOML.
    ///
    /// ```ignore
    /// TestGateway::new().with("[store]\n").set("url", format!("sqlite://{}", path.display()))
    /// ```
    pub fn set(self, key: &str, value: impl Into<toml::Value>) -> TestGateway {
        let line = format!("{key} = {}\n", value.into());
        self.with(&line)
    }
}

impl TestGateway {
    /// The config text exactly as built, without [`test_config`]'s defaults: for a process
    /// or a command that must read only what the test wrote (no `[auth]` or `[store]` added).
    pub fn raw_text(&self) -> String {
        self.toml.clone()
    }
}

// Helpers for the fallback, breaker, streaming and reload tests.

/// A started fake upstream named `name` that answers its first calls with `script`, in order.
pub async fn scripted(
    name: &str,
    script: impl IntoIterator<Item = switchyard::fake::Behavior>,
) -> FakeHandle {
    script
        .into_iter()
        .fold(
            switchyard::fake::FakeUpstream::new(name),
            switchyard::fake::FakeUpstream::then,
        )
        .start()
        .await
        .expect("fake starts")
}

/// The usual pair for a chain: a `primary` scripted with `script`, and a `secondary` that
/// always answers.
pub async fn primary_and_secondary(
    script: impl IntoIterator<Item = switchyard::fake::Behavior>,
) -> (FakeHandle, FakeHandle) {
    (
        scripted("primary", script).await,
        scripted("secondary", []).await,
    )
}

/// The log row of the request that `response` answered.
pub async fn record_of(gateway: &Gateway, response: &reqwest::Response) -> RequestRecord {
    record(gateway, header(response, "x-switchyard-request-id")).await
}

/// Starts `config` with the admin API on, behind `token`.
pub async fn start_with_admin(config: &TestGateway, token: &str) -> Gateway {
    let options = switchyard::server::StartOptions {
        admin_token: Some(switchyard::keys::Secret::new(token)),
        ..Default::default()
    };
    let addr = std::net::SocketAddr::from(([127, 0, 0, 1], 0));
    Gateway::start_with(config.config(), addr, options)
        .await
        .expect("gateway starts")
}

/// GETs `url` with `token` as the bearer and reads the JSON body.
pub async fn get_json(url: &str, token: &str) -> Value {
    send_for_json(client().get(url).bearer_auth(token)).await
}

impl TestGateway {
    /// Route `r` = primary → secondary at `models`, with quick retries.
    pub fn fallback_chain(
        self,
        primary: &FakeHandle,
        secondary: &FakeHandle,
        models: [&str; 2],
    ) -> TestGateway {
        self.provider("primary", primary)
            .provider("secondary", secondary)
            .route("r", &[("primary", models[0]), ("secondary", models[1])], "")
            .fast_retry()
    }
}

// Helpers for the limits, keys, endpoints and other gateway tests.

/// A gateway whose one route `route` goes to `model` on the provider `name` for `fake`.
pub async fn one_route(name: &str, fake: &FakeHandle, route: &str, model: &str) -> Gateway {
    TestGateway::new()
        .provider(name, fake)
        .route(route, &[(name, model)], "")
        .start()
        .await
}

/// An address nothing listens on: every connection to it is refused.
pub fn closed_addr() -> std::net::SocketAddr {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
}

/// Posts `body`, sent as it is and labelled JSON, to `path` on the gateway.
pub async fn post_raw_json(gateway: &Gateway, path: &str, body: &'static str) -> reqwest::Response {
    client()
        .post(format!("{}{path}", gateway.url()))
        .header("content-type", "application/json")
        .body(body)
        .send()
        .await
        .expect("gateway answers")
}

/// Runs the `switchyard` binary in `cwd` with `args` and without the secrets a developer's
/// environment may hold, so that only the test's files count.
pub fn run_switchyard(cwd: &std::path::Path, args: &[&str]) -> std::process::Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_switchyard"))
        .current_dir(cwd)
        .args(args)
        .env_remove("SWITCHYARD_MASTER_KEY")
        .env_remove("SWITCHYARD_ADMIN_TOKEN")
        .output()
        .expect("the binary runs")
}

/// `GET /readyz` on the client port: its status and body.
pub async fn readiness(gateway: &Gateway) -> (u16, Value) {
    let response = client()
        .get(format!("{}/readyz", gateway.url()))
        .send()
        .await
        .expect("gateway answers");
    let status = response.status().as_u16();
    (status, response.json().await.expect("a JSON body"))
}

/// Sends `request` and reads the answer's JSON body, whatever its status.
pub async fn send_for_json(request: reqwest::RequestBuilder) -> Value {
    request
        .send()
        .await
        .expect("gateway answers")
        .json()
        .await
        .expect("a JSON body")
}
