//! What a span says of the answer and the caller: finish reasons (JSON and stream), role and
//! budget; content only with `capture_content`, cut to `max_content_bytes`; the older
//! conventions' names by `semconv`; and providers a reload adds.

use opentelemetry_proto::tonic::common::v1::any_value;
use serde_json::{Value, json};
use switchyard::fake::Behavior;

use super::super::reload::{FromFile, one_route};
use super::super::support::*;
use super::receiver::Receiver;
use super::{attr, of_kind, traced};
use opentelemetry_proto::tonic::trace::v1::Span;
use opentelemetry_proto::tonic::trace::v1::span::SpanKind;

/// An array attribute's strings.
fn strings(span: &Span, key: &str) -> Vec<String> {
    let value = span.attributes.iter().find(|kv| kv.key == key);
    let Some(any_value::Value::ArrayValue(array)) =
        value.and_then(|kv| kv.value.as_ref()?.value.clone())
    else {
        return Vec::new();
    };
    array
        .values
        .iter()
        .filter_map(|v| match &v.value {
            Some(any_value::Value::StringValue(s)) => Some(s.clone()),
            _ => None,
        })
        .collect()
}

fn json_attr(span: &Span, key: &str) -> Value {
    let text = attr(span, key).unwrap_or_else(|| panic!("{key} is on the span"));
    serde_json::from_str(&text).expect("whole JSON")
}

const PROMPT: &str = "a prompt that only capture_content exports";
const ANSWER: &str = "an answer that only capture_content exports";

fn prompt() -> Value {
    json!({"model": "r", "max_tokens": 10, "messages": [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": PROMPT}]})
}

#[tokio::test]
async fn the_answers_finish_reasons_the_role_and_the_budget_are_on_the_spans_and_no_content() {
    let receiver = Receiver::start().await;
    let fake = scripted("p", [Behavior::ok().content(ANSWER)]).await;
    let gateway = traced(&receiver)
        .provider("p", &fake)
        .route("r", &[("p", "m")], "")
        .with("[[prices]]\nprovider = \"p\"\nmodel = \"m\"\ninput_per_1m = 0.0\noutput_per_1m = 1000.0\n")
        .with("[[roles]]\nname = \"default\"\n")
        .set("budget_per_day", 1.0)
        .start()
        .await;
    assert_eq!(post(&gateway, &prompt()).await.status(), 200);
    receiver.wait_for(|n| *n >= 2).await;
    let spans = receiver.spans();
    let server = of_kind(&spans, SpanKind::Server)[0];
    let client = of_kind(&spans, SpanKind::Client)[0];
    for span in [server, client] {
        assert_eq!(strings(span, "gen_ai.response.finish_reasons"), ["stop"]);
    }
    assert!(attr(client, "gen_ai.usage.output_tokens").is_some());
    assert_eq!(attr(server, "switchyard.role").as_deref(), Some("default"));
    // 10 tokens at $0.001 reserved, of the day's $1.
    assert_eq!(
        attr(server, "switchyard.budget.reserved_usd").as_deref(),
        Some("0.01")
    );
    assert_eq!(
        attr(server, "switchyard.budget.remaining_usd").as_deref(),
        Some("0.99")
    );
    for key in ["gen_ai.input.messages", "gen_ai.output.messages"] {
        assert_eq!(attr(server, key), None, "no content by default");
    }
    let raw = receiver.raw();
    for text in [PROMPT, ANSWER] {
        assert!(!raw.windows(text.len()).any(|w| w == text.as_bytes()));
    }
}

#[tokio::test]
async fn with_capture_content_the_messages_are_exported_and_cut_to_the_limit() {
    let receiver = Receiver::start().await;
    let fake = scripted("p", [Behavior::ok().content(ANSWER)]).await;
    let room = "be brief".len() + PROMPT.len() + 9;
    let gateway = traced(&receiver)
        .set("capture_content", true)
        .set("max_content_bytes", room as i64)
        .provider("p", &fake)
        .route("r", &[("p", "m")], "")
        .start()
        .await;
    assert_eq!(post(&gateway, &prompt()).await.status(), 200);
    receiver.wait_for(|n| *n >= 2).await;
    let spans = receiver.spans();
    let server = of_kind(&spans, SpanKind::Server)[0];
    assert_eq!(
        json_attr(server, "gen_ai.input.messages"),
        json!([{"role": "system", "parts": [{"type": "text", "content": "be brief"}]},
               {"role": "user", "parts": [{"type": "text", "content": PROMPT}]}])
    );
    // What the prompt left: the answer's first nine bytes.
    assert_eq!(
        json_attr(server, "gen_ai.output.messages"),
        json!([{"role": "assistant", "finish_reason": "stop",
                "parts": [{"type": "text", "content": &ANSWER[..9]}]}])
    );
}

#[tokio::test]
async fn a_streams_finish_reason_and_content_come_from_its_events() {
    let receiver = Receiver::start().await;
    let fake = scripted("p", [Behavior::ok().content(ANSWER).chunks(4, 0)]).await;
    let gateway = traced(&receiver)
        .set("capture_content", true)
        .provider("p", &fake)
        .route("r", &[("p", "m")], "")
        .start()
        .await;
    let mut body = prompt();
    body["stream"] = json!(true);
    let response = post(&gateway, &body).await;
    let _ = response.text().await.unwrap();
    receiver.wait_for(|n| *n >= 2).await;
    let spans = receiver.spans();
    let server = of_kind(&spans, SpanKind::Server)[0];
    assert_eq!(strings(server, "gen_ai.response.finish_reasons"), ["stop"]);
    let output = json_attr(server, "gen_ai.output.messages");
    assert_eq!(output[0]["parts"][0]["content"], ANSWER);
}

#[tokio::test]
async fn semconv_1_36_names_the_provider_gen_ai_system() {
    let receiver = Receiver::start().await;
    let fake = scripted("p", []).await;
    let gateway = traced(&receiver)
        .set("semconv", "1.36")
        .provider("p", &fake)
        .route("r", &[("p", "m")], "")
        .start()
        .await;
    assert_eq!(post(&gateway, &chat("r")).await.status(), 200);
    receiver.wait_for(|n| *n >= 2).await;
    for span in receiver.spans() {
        assert_eq!(attr(&span, "gen_ai.system").as_deref(), Some("openai"));
        assert_eq!(attr(&span, "gen_ai.provider.name"), None);
    }
}

#[tokio::test]
async fn a_provider_a_reload_adds_is_named_on_its_spans() {
    let receiver = Receiver::start().await;
    let (up, added) = (scripted("up", []).await, scripted("added", []).await);
    let tracing = format!("[otel]\nendpoint = \"{}\"\n", receiver.endpoint());
    let running = FromFile::start(&one_route(&up).with(&tracing)).await;
    let reloaded = TestGateway::new()
        .provider("added", &added)
        .route("r", &[("added", "m")], "")
        .with(&tracing);
    running.rewrite(&reloaded);
    assert_eq!(running.reload().await.0, 200);
    assert_eq!(post(&running.gateway, &chat("r")).await.status(), 200);
    assert_eq!(added.requests().len(), 1);
    receiver.wait_for(|n| *n >= 2).await;
    let spans = receiver.spans();
    let client = of_kind(&spans, SpanKind::Client)[0];
    assert_eq!(
        attr(client, "switchyard.provider").as_deref(),
        Some("added")
    );
    assert_eq!(
        attr(client, "gen_ai.provider.name").as_deref(),
        Some("openai")
    );
    assert_eq!(attr(client, "server.address").as_deref(), Some("127.0.0.1"));
}

#[tokio::test]
async fn spans_go_over_grpc_when_the_protocol_says() {
    let receiver = Receiver::start_grpc().await;
    let fake = scripted("p", []).await;
    let gateway = TestGateway::new()
        .with("[otel]\nprotocol = \"grpc\"\n")
        .set("endpoint", receiver.endpoint())
        .provider("p", &fake)
        .route("r", &[("p", "m")], "")
        .start()
        .await;
    assert_eq!(post(&gateway, &chat("r")).await.status(), 200);
    receiver.wait_for(|n| *n >= 2).await;
    let spans = receiver.spans();
    let server = of_kind(&spans, SpanKind::Server)[0];
    let client = of_kind(&spans, SpanKind::Client)[0];
    assert_eq!(client.parent_span_id, server.span_id);
    assert_eq!(
        attr(server, "gen_ai.operation.name").as_deref(),
        Some("chat")
    );
}
