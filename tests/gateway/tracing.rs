//! Traces exported in OTLP to a receiver built on the official protobuf definitions: one
//! server span per request with a client span per attempt, the client's trace continued and
//! sent upstream, a stream's first token, no secret in any exported byte, and requests that
//! never notice a collector that refuses.

mod content;
mod outage;
mod receiver;

use futures_util::future::join_all;
use opentelemetry_proto::tonic::trace::v1::Span;
use opentelemetry_proto::tonic::trace::v1::span::SpanKind;
use opentelemetry_proto::tonic::trace::v1::status::StatusCode;
use serde_json::Value;
use switchyard::fake::{Behavior, FakeHandle};
use switchyard::server::Gateway;

use super::keyed::{keyed_config, keyed_primary, put_key, with_admin};
use super::support::*;
use super::telemetry::{parse_metrics, sample};
use receiver::{Receiver, attribute, hex};

const CLIENT_PARENT: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

/// `[otel]` sending to `receiver`, with `/metrics` readable.
fn traced(receiver: &Receiver) -> TestGateway {
    TestGateway::new()
        .with(OBSERVABILITY)
        .with("[otel]\n")
        .set("endpoint", receiver.endpoint())
}

/// Route `r` over one fake provider, traced to `receiver`.
async fn one_traced_route(receiver: &Receiver) -> (FakeHandle, Gateway) {
    let fake = scripted("p", []).await;
    let gateway = traced(receiver)
        .provider("p", &fake)
        .route("r", &[("p", "m")], "")
        .start()
        .await;
    (fake, gateway)
}

fn of_kind(spans: &[Span], kind: SpanKind) -> Vec<&Span> {
    spans.iter().filter(|s| s.kind == kind as i32).collect()
}

fn attr(span: &Span, key: &str) -> Option<String> {
    attribute(&span.attributes, key)
}

#[tokio::test]
async fn a_request_that_falls_back_is_one_server_span_with_a_client_span_per_attempt() {
    let receiver = Receiver::start().await;
    let (primary, secondary) = primary_and_secondary([Behavior::status(500)]).await;
    let gateway = traced(&receiver)
        .fallback_chain(&primary, &secondary, ["model-a", "model-b"])
        .start()
        .await;
    let mut body = chat("r");
    body["max_tokens"] = serde_json::json!(64);
    let response = post(&gateway, &body).await;
    assert_eq!(response.status(), 200);
    let request_id = header(&response, "x-switchyard-request-id").to_owned();
    receiver.wait_for(|n| *n >= 3).await;

    let spans = receiver.spans();
    let servers = of_kind(&spans, SpanKind::Server);
    let clients = of_kind(&spans, SpanKind::Client);
    assert_eq!((servers.len(), clients.len()), (1, 2), "{spans:#?}");
    let server = servers[0];
    assert_eq!(server.name, "chat r");
    assert!(server.parent_span_id.is_empty(), "a trace begun here");
    assert_eq!(
        attr(server, "gen_ai.operation.name").as_deref(),
        Some("chat")
    );
    assert_eq!(attr(server, "gen_ai.request.model").as_deref(), Some("r"));
    assert_eq!(
        attr(server, "gen_ai.request.max_tokens").as_deref(),
        Some("64")
    );
    assert_eq!(
        attr(server, "gen_ai.response.model").as_deref(),
        Some("model-b")
    );
    assert_eq!(
        attr(server, "gen_ai.provider.name").as_deref(),
        Some("openai")
    );
    assert_eq!(
        attr(server, "switchyard.outcome").as_deref(),
        Some("fallback")
    );
    assert_eq!(attr(server, "switchyard.step").as_deref(), Some("1"));
    assert_eq!(attr(server, "switchyard.route").as_deref(), Some("r"));
    assert_eq!(attr(server, "switchyard.request_id"), Some(request_id));
    assert_eq!(
        attr(server, "http.response.status_code").as_deref(),
        Some("200")
    );
    assert!(attr(server, "gen_ai.usage.output_tokens").is_some());

    for client in &clients {
        assert_eq!(client.trace_id, server.trace_id);
        assert_eq!(client.parent_span_id, server.span_id);
        assert!(client.start_time_unix_nano >= server.start_time_unix_nano);
        assert!(client.end_time_unix_nano <= server.end_time_unix_nano);
        assert_eq!(attr(client, "server.address").as_deref(), Some("127.0.0.1"));
    }
    let failed = clients
        .iter()
        .find(|c| attr(c, "switchyard.step").as_deref() == Some("0"))
        .unwrap();
    assert_eq!(failed.name, "chat model-a");
    assert_eq!(
        attr(failed, "http.response.status_code").as_deref(),
        Some("500")
    );
    assert_eq!(attr(failed, "error.type").as_deref(), Some("server_error"));
    assert_eq!(
        failed.status.as_ref().map(|s| s.code),
        Some(StatusCode::Error as i32)
    );
    let served = clients
        .iter()
        .find(|c| attr(c, "switchyard.step").as_deref() == Some("1"))
        .unwrap();
    assert_eq!(
        attr(served, "gen_ai.request.model").as_deref(),
        Some("model-b")
    );
    assert_eq!(
        attr(served, "switchyard.attempt.class").as_deref(),
        Some("success")
    );
    assert_eq!(attr(served, "error.type"), None);

    // Each attempt went upstream with its own span as the parent.
    for (fake, span) in [(&primary, failed), (&secondary, served)] {
        let sent = &fake.requests()[0].headers["traceparent"];
        let want = format!("00-{}-{}-01", hex(&span.trace_id), hex(&span.span_id));
        assert_eq!(sent, &want);
    }
    let service = attribute(&receiver.resource(), "service.name");
    assert_eq!(service.as_deref(), Some("switchyard"));
}

#[tokio::test]
async fn a_clients_traceparent_is_continued_and_its_state_sent_on() {
    let receiver = Receiver::start().await;
    let (fake, gateway) = one_traced_route(&receiver).await;
    let headers = [("traceparent", CLIENT_PARENT), ("tracestate", "vendor=7")];
    let response = post_with(&gateway, &chat("r"), &headers).await;
    assert_eq!(response.status(), 200);
    receiver.wait_for(|n| *n >= 2).await;
    let spans = receiver.spans();
    let server = of_kind(&spans, SpanKind::Server)[0];
    assert_eq!(hex(&server.trace_id), "4bf92f3577b34da6a3ce929d0e0e4736");
    assert_eq!(hex(&server.parent_span_id), "00f067aa0ba902b7");
    assert_eq!(server.trace_state, "vendor=7");
    let client = of_kind(&spans, SpanKind::Client)[0];
    let sent = &fake.requests()[0].headers;
    assert_eq!(
        sent["traceparent"],
        format!(
            "00-4bf92f3577b34da6a3ce929d0e0e4736-{}-01",
            hex(&client.span_id)
        )
    );
    assert_eq!(sent["tracestate"], "vendor=7");
}

#[tokio::test]
async fn with_tracing_off_a_clients_trace_context_reaches_the_provider_unchanged() {
    let fake = scripted("p", []).await;
    let gateway = one_route("p", &fake, "r", "m").await;
    let headers = [("traceparent", CLIENT_PARENT), ("tracestate", "vendor=7")];
    assert_eq!(
        post_with(&gateway, &chat("r"), &headers).await.status(),
        200
    );
    let sent = &fake.requests()[0].headers;
    assert_eq!(sent["traceparent"], CLIENT_PARENT);
    assert_eq!(sent["tracestate"], "vendor=7");
    assert_eq!(post(&gateway, &chat("r")).await.status(), 200);
    assert!(!fake.requests()[1].headers.contains_key("traceparent"));
}

#[tokio::test]
async fn a_stream_records_its_time_to_first_token() {
    let receiver = Receiver::start().await;
    let (_fake, gateway) = one_traced_route(&receiver).await;
    let response = post(&gateway, &chat_stream("r")).await;
    let _ = response.text().await.unwrap();
    receiver.wait_for(|n| *n >= 2).await;
    let spans = receiver.spans();
    let server = of_kind(&spans, SpanKind::Server)[0];
    let first = server
        .events
        .iter()
        .find(|e| e.name == "gen_ai.first_token")
        .expect("a first-token event");
    assert!(first.time_unix_nano >= server.start_time_unix_nano);
    assert!(first.time_unix_nano <= server.end_time_unix_nano);
    assert!(attr(server, "switchyard.time_to_first_token_ms").is_some());
}

#[tokio::test]
async fn no_exported_byte_holds_a_secret_in_play() {
    const TOKEN: &str = "admin-token-for-tracing-tests";
    const PROVIDER_KEY: &str = "sk-provider-secret-for-tracing-0123456789";
    let receiver = Receiver::start().await;
    let primary = keyed_primary(PROVIDER_KEY).await;
    let secondary = scripted("secondary", []).await;
    let config = keyed_config(&primary, &secondary)
        .with(OBSERVABILITY)
        .with("[otel]\n")
        .set("endpoint", receiver.endpoint())
        .with("[auth]\nrequired = true\n");
    let gateway = with_admin(config, TOKEN).await;
    put_key(&gateway, TOKEN, PROVIDER_KEY).await;
    let created = admin_request(
        &gateway,
        Some(TOKEN),
        reqwest::Method::POST,
        "/admin/virtual-keys",
        Some(&serde_json::json!({"user": "tracer", "role": "default"})),
    )
    .await
    .json::<Value>()
    .await
    .unwrap();
    let virtual_key = created["secret"].as_str().unwrap().to_owned();
    let auth = format!("Bearer {virtual_key}");
    for _ in 0..3 {
        let response = post_with(&gateway, &chat("r"), &[("authorization", &auth)]).await;
        assert_eq!(response.status(), 200);
    }
    receiver.wait_for(|n| *n >= 6).await;
    let raw = receiver.raw();
    for secret in [PROVIDER_KEY, virtual_key.as_str(), TOKEN] {
        assert!(
            !raw.windows(secret.len()).any(|w| w == secret.as_bytes()),
            "a secret was exported"
        );
    }
    let spans = receiver.spans();
    let server = of_kind(&spans, SpanKind::Server)[0];
    assert!(
        attr(server, "switchyard.key_id").is_some(),
        "the key's id, never the key"
    );
}

#[tokio::test]
async fn a_collector_that_refuses_fails_no_request_and_export_resumes_after() {
    let receiver = Receiver::start().await;
    let (_fake, gateway) = one_traced_route(&receiver).await;
    receiver.refuse(true);
    let body = chat("r");
    let answers = join_all((0..50).map(|_| post(&gateway, &body))).await;
    assert!(answers.iter().all(|a| a.status() == 200));
    wait_for_dropped(&gateway, 100.0).await;
    assert!(receiver.spans().is_empty());

    receiver.refuse(false);
    assert_eq!(post(&gateway, &chat("r")).await.status(), 200);
    receiver.wait_for(|n| *n >= 2).await;
    assert_eq!(of_kind(&receiver.spans(), SpanKind::Server).len(), 1);
}

/// Resolves once at least `count` spans are counted dropped (within 30 s, or fails).
async fn wait_for_dropped(gateway: &Gateway, count: f64) {
    let dropped = async {
        while dropped_spans(gateway).await < count {
            tokio::task::yield_now().await;
        }
    };
    tokio::time::timeout(std::time::Duration::from_secs(30), dropped)
        .await
        .expect("the lost spans are counted");
}

async fn dropped_spans(gateway: &Gateway) -> f64 {
    let text = observe(gateway, "/metrics").await.text().await.unwrap();
    sample(
        &parse_metrics(&text),
        "switchyard_otel_spans_dropped_total",
        &[],
    )
}

#[tokio::test]
async fn a_traced_requests_log_row_holds_its_trace_id_and_the_logs_filter_by_it() {
    let receiver = Receiver::start().await;
    let fake = scripted("p", []).await;
    let db = std::env::temp_dir().join(format!("switchyard-trace-{}.db", uuid::Uuid::now_v7()));
    let config = traced(&receiver)
        .with("[store]\n")
        .set("url", format!("sqlite://{}", db.display()))
        .provider("p", &fake)
        .route("r", &[("p", "m")], "");
    let gateway = config.start().await;
    let continued = post_with(&gateway, &chat("r"), &[("traceparent", CLIENT_PARENT)]).await;
    let begun = post(&gateway, &chat("r")).await;
    let id = |response: &reqwest::Response| header(response, "x-switchyard-request-id").to_owned();
    let (continued, begun) = (id(&continued), id(&begun));
    let row = record(&gateway, &continued).await;
    let trace = row.trace.as_ref().map(|t| t.trace_id.to_string());
    assert_eq!(trace.as_deref(), Some("4bf92f3577b34da6a3ce929d0e0e4736"));
    record(&gateway, &begun).await;
    gateway.shutdown().await.unwrap();

    let path = db.with_extension("toml");
    std::fs::write(&path, config.text()).unwrap();
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_switchyard"))
        .args([
            "logs",
            "--json",
            "--trace-id",
            "4BF92F3577B34DA6A3CE929D0E0E4736",
            "--config",
        ])
        .arg(&path)
        .output()
        .unwrap();
    assert!(output.status.success(), "{output:?}");
    let rows: Vec<Value> = String::from_utf8(output.stdout)
        .unwrap()
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert_eq!(rows[0]["id"], continued.as_str());
    assert_eq!(rows[0]["trace_id"], "4bf92f3577b34da6a3ce929d0e0e4736");
    for suffix in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{}{suffix}", db.display()));
    }
    let _ = std::fs::remove_file(&path);
}

#[tokio::test]
async fn the_sampling_ratio_holds_and_an_unsampled_trace_is_still_sent_on() {
    const REQUESTS: usize = 400;
    let receiver = Receiver::start().await;
    let fake = scripted("p", []).await;
    let gateway = traced(&receiver)
        .set("sample_ratio", 0.5)
        .provider("p", &fake)
        .route("r", &[("p", "m")], "")
        .start()
        .await;
    let body = chat("r");
    for chunk in (0..REQUESTS).collect::<Vec<_>>().chunks(20) {
        let answers = join_all(chunk.iter().map(|_| post(&gateway, &body))).await;
        assert!(answers.iter().all(|a| a.status() == 200));
    }
    // Every request reached the fake with a traceparent; those sampled say so in its flags.
    let sent: Vec<String> = fake
        .requests()
        .iter()
        .map(|r| r.headers["traceparent"].clone())
        .collect();
    assert_eq!(sent.len(), REQUESTS);
    let sampled = sent.iter().filter(|p| p.ends_with("-01")).count();
    assert_eq!(
        sent.iter().filter(|p| p.ends_with("-00")).count(),
        REQUESTS - sampled
    );
    // Binomial(400, 0.5): a standard deviation of 10, and these bounds are 5 of them.
    assert!(
        (150..=250).contains(&sampled),
        "{sampled} of {REQUESTS} sampled"
    );
    receiver.wait_for(|n| *n >= 2 * sampled).await;
    let servers = of_kind(&receiver.spans(), SpanKind::Server).len();
    assert_eq!(
        servers, sampled,
        "exactly the sampled requests are exported"
    );
}

#[tokio::test]
async fn each_hedge_racer_is_a_client_span_the_cancelled_one_included() {
    let receiver = Receiver::start().await;
    let primary = scripted("primary", [Behavior::ok().delay_ms(2_000)]).await;
    let secondary = scripted("secondary", [Behavior::ok().delay_ms(50)]).await;
    let gateway = traced(&receiver)
        .provider("primary", &primary)
        .provider("secondary", &secondary)
        .route(
            "r",
            &[("primary", "model-a"), ("secondary", "model-b")],
            "hedge = { after = \"200ms\" }",
        )
        .start()
        .await;
    let response = post(&gateway, &chat("r")).await;
    assert_eq!(header(&response, "x-switchyard-hedged"), "true");
    receiver.wait_for(|n| *n >= 3).await;
    let spans = receiver.spans();
    let server = of_kind(&spans, SpanKind::Server)[0];
    assert_eq!(attr(server, "switchyard.hedged").as_deref(), Some("true"));
    let clients = of_kind(&spans, SpanKind::Client);
    assert_eq!(clients.len(), 2);
    let class = |step: &str| {
        let span = clients
            .iter()
            .find(|c| attr(c, "switchyard.step").as_deref() == Some(step))
            .unwrap();
        (
            attr(span, "switchyard.attempt.class"),
            attr(span, "switchyard.hedged"),
            hex(&span.span_id),
        )
    };
    let (lost, won) = (class("0"), class("1"));
    assert_eq!(
        (lost.0.as_deref(), lost.1.as_deref()),
        (Some("hedge_lost"), Some("false"))
    );
    assert_eq!(
        (won.0.as_deref(), won.1.as_deref()),
        (Some("success"), Some("true"))
    );
    for (fake, span_id) in [(&primary, &lost.2), (&secondary, &won.2)] {
        let sent = &fake.requests()[0].headers["traceparent"];
        assert!(sent.contains(span_id.as_str()), "{sent} names {span_id}");
    }
}
