//! Secrets stay in the gateway: an upstream that echoes the key it was sent (whole, or 8+
//! characters of it) in any answer never gets it to the client, the log row or `/metrics`;
//! redirects are never followed; model names cannot steer the upstream URL; and a key or
//! role reaches only the models it is allowed.

use serde_json::Value;
use switchyard::fake::{Behavior, FakeHandle, Script};
use switchyard::server::Gateway;

use super::support::*;

/// The provider key every test here puts in the store.
const KEY: &str = "sk-live-ECHOSECRET-4f2a9c7b1d";
/// Eight or more characters of it, as a provider that echoes a partial key sends.
const PART: &str = "ECHOSECRET-4f2a";

/// Every 8-byte part of the key that occurs in `text`, if any.
fn leak(text: &str) -> Option<&'static str> {
    (0..=KEY.len() - 8)
        .map(|i| &KEY[i..i + 8])
        .find(|window| text.contains(window))
}

fn assert_clean(what: &str, text: &str) {
    if let Some(window) = leak(text) {
        panic!("{what} leaks `{window}` of the provider key:\n{text}");
    }
}

/// Notes a leak in `text`, so one run names every path that leaks.
fn check(leaks: &mut Vec<String>, what: String, text: &str) {
    if let Some(window) = leak(text) {
        leaks.push(format!("{what} leaks `{window}`"));
    }
}

/// The header a provider kind sends its key in, as the fake records it.
fn key_header(kind: &str) -> &'static str {
    match kind {
        "openai" => "authorization",
        "anthropic" => "x-api-key",
        "gemini" => "x-goog-api-key",
        _ => "api-key",
    }
}

/// A provider of `kind` at `fake` that needs a key.
fn keyed_provider(kind: &str, name: &str, fake: &FakeHandle) -> String {
    provider_of(kind, name, fake).replace("key_required = false\n", "")
}

/// Route `r` = the keyed provider `up`, with breakers that never open, and the key stored.
async fn keyed_gateway(kind: &str, fake: &FakeHandle) -> Gateway {
    let gateway = TestGateway::new()
        .with(&keyed_provider(kind, "up", fake))
        .route("r", &[("up", "m-1")], "")
        .fast_retry()
        .with(OBSERVABILITY)
        .with("[breaker]\nconsecutive_failures = 1000\nmin_requests = 1000\n")
        .start()
        .await;
    gateway.put_provider_key("up", "main", KEY).await.unwrap();
    gateway
}

/// An error body that echoes `echo`, in OpenAI's shape (read by every translator).
fn echo_body(echo: &str) -> String {
    serde_json::json!({"error": {"message": format!("Incorrect API key provided: {echo}"),
        "type": "invalid_request_error", "param": null, "code": "invalid_api_key"}})
    .to_string()
}

/// One request on one answer path: what the fake does, and what the client should see.
struct Case {
    name: &'static str,
    behavior: Behavior,
    stream: bool,
    status: u16,
    /// Whether the echo reaches the client's body (scrubbed), so the marker must show.
    marked: bool,
}

fn cases(location: &FakeHandle) -> Vec<Case> {
    let case = |name, behavior, stream, status, marked| Case {
        name,
        behavior,
        stream,
        status,
        marked,
    };
    let json = "application/json; charset=utf-8; echo=";
    vec![
        case(
            "400 echoing the whole key, returned as is",
            Behavior::status(400)
                .body(&echo_body(KEY))
                .header("content-type", &format!("{json}{KEY}")),
            false,
            400,
            true,
        ),
        case(
            "422 echoing a part of the key",
            Behavior::status(422)
                .body(&echo_body(PART))
                .header("content-type", &format!("{json}{PART}")),
            false,
            422,
            true,
        ),
        case(
            "400 echoing the key to a stream request",
            Behavior::status(400).body(&echo_body(KEY)),
            true,
            400,
            true,
        ),
        case(
            "200 whose content echoes the key",
            Behavior::ok().content(&format!("your key is {KEY}")),
            false,
            200,
            true,
        ),
        case(
            "stream whose content echoes part of the key",
            Behavior::ok().content(&format!("your key is {PART}")),
            true,
            200,
            false,
        ),
        case(
            "stream that fails mid-way with an error event echoing the key",
            Behavior::ok()
                .error_after(1)
                .error_message(&format!("bad key {KEY}")),
            true,
            200,
            false,
        ),
        case(
            "500 echoing the key",
            Behavior::status(500).body(&echo_body(KEY)),
            false,
            503,
            false,
        ),
        case(
            "redirect to another origin",
            Behavior::status(307)
                .header(
                    "location",
                    &format!("{}/chat/completions", location.base_url()),
                )
                .body(&echo_body(KEY)),
            false,
            503,
            false,
        ),
        // Last: a 401 benches the only key.
        case(
            "401 echoing the key",
            Behavior::status(401).body(&echo_body(PART)),
            true,
            503,
            false,
        ),
    ]
}

/// Runs every case from both client formats against a provider of `kind`.
async fn no_leak_through(kind: &str) {
    let upstream = scripted("up", []).await;
    let location = scripted("elsewhere", []).await;
    let gateway = keyed_gateway(kind, &upstream).await;
    let mut seen_marker = false;
    let mut leaks = Vec::new();
    for case in cases(&location) {
        for path in ["/v1/chat/completions", "/v1/messages"] {
            upstream.set_script(Script {
                behaviors: vec![case.behavior.clone()],
                ..Script::default()
            });
            let body = if path == "/v1/messages" {
                message("r", case.stream)
            } else if case.stream {
                chat_stream("r")
            } else {
                chat("r")
            };
            let what = format!("{kind} via {path}, {}", case.name);
            let response = post_to(&gateway, path, &body).await;
            if response.status() != case.status {
                leaks.push(format!("{what}: status {}", response.status()));
            }
            let id = header(&response, "x-switchyard-request-id").to_owned();
            let mut text = String::new();
            for (name, value) in response.headers() {
                text.push_str(&format!(
                    "{name}: {}\n",
                    String::from_utf8_lossy(value.as_bytes())
                ));
            }
            let body = response.text().await.unwrap();
            text.push_str(&body);
            check(&mut leaks, format!("the answer to {what}"), &text);
            if case.marked && !body.contains("[redacted]") {
                leaks.push(format!("{what}: the echo was not marked"));
            }
            seen_marker |= body.contains("[redacted]");
            let row = record(&gateway, &id).await;
            check(
                &mut leaks,
                format!("the log row of {what}"),
                &format!("{row:?}"),
            );
        }
    }
    if location.calls() > 0 {
        leaks.push(format!(
            "the redirect's location got {} calls",
            location.calls()
        ));
    }
    assert!(leaks.is_empty(), "leaks:\n{}", leaks.join("\n"));
    assert!(seen_marker);
    let sent = upstream.requests();
    assert!(
        sent.iter().all(|r| r
            .headers
            .get(key_header(kind))
            .is_some_and(|v| v.contains(KEY))),
        "the key really went upstream in `{}`",
        key_header(kind)
    );
    assert_eq!(
        location.calls(),
        0,
        "a redirect's location is never contacted"
    );
    let metrics = metrics_text(&gateway.url(), METRICS_TOKEN).await;
    assert!(metrics.contains("result=\"redirect\""), "{metrics}");
    assert_clean("/metrics", &metrics);
}

#[tokio::test]
async fn an_openai_key_echoed_back_never_leaves_the_gateway() {
    no_leak_through("openai").await;
}

#[tokio::test]
async fn an_anthropic_key_echoed_back_never_leaves_the_gateway() {
    no_leak_through("anthropic").await;
}

#[tokio::test]
async fn a_gemini_key_echoed_back_never_leaves_the_gateway() {
    no_leak_through("gemini").await;
}

#[tokio::test]
async fn an_azure_key_echoed_back_never_leaves_the_gateway() {
    no_leak_through("azure").await;
}

#[tokio::test]
async fn a_redirect_is_a_failed_attempt_and_the_next_step_serves() {
    let location = scripted("elsewhere", []).await;
    let primary = scripted(
        "primary",
        [Behavior::status(302).header(
            "location",
            &format!("{}/v1/chat/completions", location.base_url()),
        )],
    )
    .await;
    let secondary = scripted("secondary", []).await;
    let gateway = two_step(&primary, &secondary, FAST_RETRY).await;
    let response = post(&gateway, &chat("r")).await;
    assert_eq!(response.status(), 200);
    assert_eq!(header(&response, "x-switchyard-step"), "1");
    let id = header(&response, "x-switchyard-request-id").to_owned();
    let row = record(&gateway, &id).await;
    let first = &row.attempts[0];
    assert_eq!(first.failure.map(|f| f.kind()), Some("redirect"));
    assert_eq!(first.status, Some(302));
    assert_eq!(location.calls(), 0);
    let _: Value = response.json().await.unwrap();
}

/// A gateway with a gemini provider `gem` and an azure provider `az`, keyless, at `fake`,
/// whose direct names any caller may use.
async fn url_gateway(fake: &FakeHandle) -> Gateway {
    TestGateway::new()
        .with("[auth]\nrequired = false\ndirect_models = true\n")
        .provider_of("gemini", "gem", fake)
        .provider_of("azure", "az", fake)
        .route("r", &[("gem", "gemini-2.5-flash"), ("az", "gpt-4o")], "")
        .fast_retry()
        .start()
        .await
}

#[tokio::test]
async fn a_model_name_that_would_change_the_upstream_url_is_refused() {
    let fake = scripted("up", []).await;
    let gateway = url_gateway(&fake).await;
    let names = [
        "gem/../../../v1beta/tunedModels?x=",
        "gem/a/b",
        "gem/x?key=1",
        "gem/x#frag",
        "gem/..",
        "gem/x\u{1}y",
        "az/../../other",
        "az/.",
        "az/dep?api-version=1",
        "az/dep\nx",
        "az/a\\b",
    ];
    let mut wrong = Vec::new();
    for name in names {
        for path in ["/v1/chat/completions", "/v1/messages"] {
            let body = if path == "/v1/messages" {
                message(name, false)
            } else {
                chat(name)
            };
            let response = post_to(&gateway, path, &body).await;
            let status = response.status();
            let body: Value = response.json().await.unwrap_or(Value::Null);
            let shaped = if path == "/v1/messages" {
                body["type"] == "error" && body["error"]["type"] == "invalid_request_error"
            } else {
                body["error"]["param"] == "model"
            };
            if status != 400 || !shaped {
                wrong.push(format!("{name:?} via {path}: {status} {body}"));
            }
        }
    }
    assert!(wrong.is_empty(), "not refused:\n{}", wrong.join("\n"));
    assert!(fake.requests().is_empty(), "{:?}", fake.requests());
}

#[tokio::test]
async fn a_model_name_goes_into_the_url_as_one_encoded_segment() {
    let fake = scripted("up", []).await;
    let gateway = url_gateway(&fake).await;
    for name in ["gem/tuned%2Fx", "az/my%2Fdeployment"] {
        let _ = post(&gateway, &chat(name)).await.text().await;
    }
    let paths: Vec<String> = fake.requests().into_iter().map(|r| r.path).collect();
    assert_eq!(
        paths,
        [
            "/v1beta/models/tuned%252Fx:generateContent",
            "/openai/deployments/my%252Fdeployment/chat/completions?api-version=2024-10-21",
        ]
    );
}
