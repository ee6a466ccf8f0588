//! How a stream ends when the provider closes it cleanly: after a finish reason the answer is
//! whole, so the client gets its format's end marker (`[DONE]`, `message_stop`) and no error,
//! even when the provider left its own marker out, as several OpenAI-compatible servers do.
//! Without a finish reason the close is a truncation, and the client is told.

use serde_json::Value;
use switchyard::fake::Behavior;
use switchyard::server::Gateway;

use super::support::*;

const OPENAI_FINISHED: &str = concat!(
    "data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"Hello\"},\"finish_reason\":null}]}\n\n",
    "data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}],\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":1,\"total_tokens\":4}}\n\n",
);

const OPENAI_CUT: &str = "data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"Hello\"},\"finish_reason\":null}]}\n\n";

const ANTHROPIC_CUT: &str = concat!(
    "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_1\",\"type\":\"message\",\"role\":\"assistant\",\"model\":\"m\",\"content\":[],\"stop_reason\":null,\"stop_sequence\":null,\"usage\":{\"input_tokens\":3,\"output_tokens\":1}}}\n\n",
    "event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n",
    "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"Hello\"}}\n\n",
);

const ANTHROPIC_FINISHED_TAIL: &str = concat!(
    "event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\n",
    "event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\",\"stop_sequence\":null},\"usage\":{\"output_tokens\":1}}\n\n",
);

const GEMINI_FINISHED: &str = "data: {\"candidates\":[{\"content\":{\"parts\":[{\"text\":\"Hello\"}],\"role\":\"model\"},\"finishReason\":\"STOP\",\"index\":0}],\"usageMetadata\":{\"promptTokenCount\":3,\"candidatesTokenCount\":1,\"totalTokenCount\":4},\"modelVersion\":\"m\"}\n\n";

const GEMINI_CUT: &str = "data: {\"candidates\":[{\"content\":{\"parts\":[{\"text\":\"Hello\"}],\"role\":\"model\"},\"index\":0}],\"modelVersion\":\"m\"}\n\n";

/// The upstream stream of `kind`, finished (with its finish reason, without its end
/// marker) or cut before it.
fn upstream(kind: &str, finished: bool) -> String {
    match (kind, finished) {
        ("openai", true) => OPENAI_FINISHED.into(),
        ("openai", false) => OPENAI_CUT.into(),
        ("anthropic", true) => format!("{ANTHROPIC_CUT}{ANTHROPIC_FINISHED_TAIL}"),
        ("anthropic", false) => ANTHROPIC_CUT.into(),
        ("gemini", true) => GEMINI_FINISHED.into(),
        _ => GEMINI_CUT.into(),
    }
}

/// A gateway in front of one fake of `kind` that streams `body` and closes.
async fn serving(kind: &str, body: &str) -> (Gateway, switchyard::fake::FakeHandle) {
    let fake = scripted("up", [Behavior::ok().body(body)]).await;
    let gateway = TestGateway::new()
        .provider_of(kind, "up", &fake)
        .route("r", &[("up", "m")], "")
        .start()
        .await;
    (gateway, fake)
}

/// Streams from the gateway on `path` (chat completions or messages) and returns the body
/// and the request's log row.
async fn stream(gateway: &Gateway, path: &str) -> (String, switchyard::telemetry::RequestRecord) {
    let body = if path == "/v1/messages" {
        message("r", true)
    } else {
        chat_stream("r")
    };
    let response = post_to(gateway, path, &body).await;
    assert_eq!(response.status(), 200);
    let id = header(&response, "x-switchyard-request-id").to_owned();
    let text = response.text().await.unwrap();
    (text, record(gateway, &id).await)
}

#[tokio::test]
async fn a_finished_stream_without_its_end_marker_ends_cleanly_for_openai_clients() {
    for kind in ["openai", "anthropic", "gemini"] {
        let (gateway, _fake) = serving(kind, &upstream(kind, true)).await;
        let (body, row) = stream(&gateway, "/v1/chat/completions").await;
        let events = sse_data(&body);
        assert_eq!(
            events.last().map(String::as_str),
            Some("[DONE]"),
            "{kind}: {body}"
        );
        assert!(!body.contains("\"error\""), "{kind}: {body}");
        assert_eq!(streamed_text(&events), "Hello", "{kind}");
        assert_eq!(row.outcome.as_str(), "success", "{kind}");
        assert!(!row.partial, "{kind}");
        assert_eq!(row.tokens_out, Some(1), "{kind}");
    }
}

#[tokio::test]
async fn a_finished_stream_without_its_end_marker_ends_cleanly_for_anthropic_clients() {
    for kind in ["openai", "anthropic", "gemini"] {
        let (gateway, _fake) = serving(kind, &upstream(kind, true)).await;
        let (body, row) = stream(&gateway, "/v1/messages").await;
        let events = sse_events(&body);
        let names: Vec<&str> = events.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names.last(), Some(&"message_stop"), "{kind}: {body}");
        assert!(!names.contains(&"error"), "{kind}: {body}");
        let delta = events
            .iter()
            .find(|(n, _)| n == "message_delta")
            .map(|(_, d)| d.clone())
            .unwrap_or(Value::Null);
        assert_eq!(delta["delta"]["stop_reason"], "end_turn", "{kind}: {body}");
        assert_eq!(anthropic_text(&events), "Hello", "{kind}");
        assert_eq!(row.outcome.as_str(), "success", "{kind}");
        assert!(!row.partial, "{kind}");
    }
}

#[tokio::test]
async fn a_stream_cut_before_its_finish_reason_still_ends_with_a_truncated_error() {
    for kind in ["openai", "anthropic", "gemini"] {
        let (gateway, _fake) = serving(kind, &upstream(kind, false)).await;
        let (body, row) = stream(&gateway, "/v1/chat/completions").await;
        let events = sse_data(&body);
        let last: Value = serde_json::from_str(events.last().expect("events")).unwrap();
        assert_eq!(last["error"]["code"], "truncated", "{kind}: {body}");
        assert!(!body.contains("[DONE]"), "{kind}: {body}");
        assert_eq!(row.outcome.as_str(), "error", "{kind}");
        assert!(row.partial, "{kind}");

        let (gateway, _fake) = serving(kind, &upstream(kind, false)).await;
        let (body, row) = stream(&gateway, "/v1/messages").await;
        let events = sse_events(&body);
        let (name, _) = events.last().expect("events");
        assert_eq!(name, "error", "{kind}: {body}");
        assert!(!body.contains("message_stop"), "{kind}: {body}");
        assert_eq!(row.outcome.as_str(), "error", "{kind}");
    }
}
