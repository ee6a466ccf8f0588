//! `switchyard demo`: two fake providers and a gateway, all on loopback, with curl lines to try.

use std::net::SocketAddr;

use crate::config::Config;
use crate::fake::{Behavior, FakeHandle, FakeUpstream};
use crate::server::{Gateway, StartError};

/// The running demo: keep it alive as long as the demo runs.
pub struct Demo {
    pub gateway: Gateway,
    pub primary: FakeHandle,
    pub secondary: FakeHandle,
    pub broken: FakeHandle,
}

/// Why the demo could not start.
#[derive(Debug, thiserror::Error)]
pub enum DemoError {
    #[error("cannot start a fake provider: {0}")]
    Fake(#[from] std::io::Error),
    #[error("{0}")]
    Config(#[from] crate::config::ConfigError),
    #[error("{0}")]
    Gateway(#[from] StartError),
}

/// Starts the demo with the gateway on `listen`, or on any free port when that is taken.
pub async fn start(listen: SocketAddr) -> Result<Demo, DemoError> {
    // Fails every other call, so a few requests show both steps serving.
    let primary = FakeUpstream::new("primary")
        .then(Behavior::ok().content("Hello from the primary provider."))
        .then(Behavior::status(500))
        .cycle()
        .start()
        .await?;
    let secondary = FakeUpstream::new("secondary")
        .then(Behavior::ok().content("Hello from the fallback provider."))
        .start()
        .await?;
    let broken = FakeUpstream::new("broken")
        .then(Behavior::status(503))
        .start()
        .await?;
    let config = Config::parse(&demo_config(&primary, &secondary, &broken))?;
    let gateway = match Gateway::start_on(config.clone(), listen).await {
        Ok(gateway) => gateway,
        Err(StartError::Listen(_)) => Gateway::start(config).await?,
        Err(e) => return Err(e.into()),
    };
    Ok(Demo {
        gateway,
        primary,
        secondary,
        broken,
    })
}

fn demo_config(primary: &FakeHandle, secondary: &FakeHandle, broken: &FakeHandle) -> String {
    format!(
        r#"
# The observability endpoints on a loopback port of their own: no token to set up, and
# nothing anonymous on the client port.
[server]
admin_listen = "127.0.0.1:0"

[auth]
required = false

[store]
url = "sqlite::memory:"

[debug]
allow_force_fallback = true

[retry]
attempt_timeout = "2s"
request_deadline = "5s"

[[providers]]
name = "primary"
kind = "anthropic"
base_url = "{}"
key_required = false

[[providers]]
name = "secondary"
kind = "openai"
base_url = "{}"
key_required = false
# The fake speaks the Responses API too, as OpenAI's own base URL does.
responses = true

[[providers]]
name = "broken"
kind = "openai"
base_url = "{}"
key_required = false

[[routes]]
name = "smart"
steps = [
  {{ provider = "primary", model = "big-model" }},
  {{ provider = "secondary", model = "small-model" }},
]

[[routes]]
name = "fragile"
steps = [{{ provider = "broken", model = "any-model" }}]
degraded = {{ content = "The assistant is temporarily unavailable. Please try again shortly." }}
"#,
        primary.root_url(),
        secondary.base_url(),
        broken.base_url()
    )
}

/// What to paste into a shell, one request a line; `admin` serves metrics and the dashboard.
pub fn instructions(gateway: &str, admin: &str) -> String {
    let url = format!("{gateway}/v1/chat/completions");
    let json = "-H 'content-type: application/json'";
    let ask = |model: &str, extra: &str| {
        format!(
            r#"-d '{{"model":"{model}",{extra}"messages":[{{"role":"user","content":"Hello!"}}]}}'"#
        )
    };
    format!(
        "Switchyard demo: gateway on {gateway}\n\
         route `smart` = primary (Anthropic-shaped, fails every other call) -> secondary (OpenAI-shaped); route `fragile` = a dead provider -> degraded tier\n\n\
         # 1. Run this twice: the x-switchyard-step and -outcome headers flip between 0/success and 1/fallback\n\
         curl -si {url} {json} {}\n\n\
         # 2. Force the fallback step (allowed in the demo by [debug] allow_force_fallback)\n\
         curl -si {url} {json} -H 'x-switchyard-force-fallback: true' {}\n\n\
         # 3. Stream the answer as server-sent events\n\
         curl -sN {url} {json} {}\n\n\
         # 4. Every step is down: the canned degraded answer, not an error\n\
         curl -si {url} {json} {}\n\n\
         # 5. The same route in Anthropic's Messages format\n\
         curl -si {gateway}/v1/messages {json} {}\n\n\
         # 6. The Responses API, served by the fallback step (forced), which speaks it natively\n\
         curl -si {gateway}/v1/responses {json} -H 'x-switchyard-force-fallback: true' -d '{{\"model\":\"smart\",\"input\":\"Hello!\"}}'\n\n\
         # 7. What operators see, on the admin listener (loopback only, so no token): metrics, the scorecard, and a dashboard to open in a browser\n\
         curl -s {admin}/metrics | grep switchyard_requests\n\
         curl -s {admin}/v1/scorecard\n\
         {admin}/dashboard\n\n\
         Each request is logged below. Ctrl-C stops the demo.\n",
        ask("smart", ""),
        ask("smart", ""),
        ask("smart", r#""stream":true,"#),
        ask("fragile", ""),
        ask("smart", r#""max_tokens":100,"#),
    )
}
