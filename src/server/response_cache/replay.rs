//! A kept answer replayed as a stream in its own format: the same content, tool calls,
//! finish reason and usage as the whole answer, in the events a client of that format reads.

use bytes::Bytes;
use serde_json::{Map, Value, json};

/// A kept `chat.completion` as `chat.completion.chunk` events ending with `[DONE]`: per
/// choice, one chunk with the role, the content and every tool call whole, then one with the
/// finish reason; the usage chunk when the client asked for it. `None` when the answer is
/// not a completion.
pub fn completion_stream(completion: &Value, include_usage: bool) -> Option<Bytes> {
    chunk_stream(
        completion,
        include_usage,
        "chat.completion.chunk",
        |choice| {
            let message = choice["message"].as_object()?;
            let mut delta = Map::new();
            delta.insert("role".into(), json!("assistant"));
            delta.insert(
                "content".into(),
                message.get("content").cloned().unwrap_or(Value::Null),
            );
            if let Some(refusal) = message.get("refusal").filter(|r| !r.is_null()) {
                delta.insert("refusal".into(), refusal.clone());
            }
            if let Some(calls) = message.get("tool_calls").and_then(Value::as_array) {
                let calls: Vec<Value> = calls
                    .iter()
                    .enumerate()
                    .map(|(index, call)| {
                        json!({"index": index, "id": call["id"], "type": "function",
                           "function": call["function"]})
                    })
                    .collect();
                delta.insert("tool_calls".into(), Value::Array(calls));
            }
            let index = &choice["index"];
            Some([
                json!({"index": index, "delta": delta, "logprobs": null, "finish_reason": null}),
                json!({"index": index, "delta": {}, "logprobs": null,
                   "finish_reason": choice["finish_reason"]}),
            ])
        },
    )
}

/// A kept legacy `text_completion` as its stream: per choice, one chunk with the text whole,
/// then one with the finish reason; the usage chunk when asked for; `[DONE]`.
pub fn text_completion_stream(completion: &Value, include_usage: bool) -> Option<Bytes> {
    chunk_stream(completion, include_usage, "text_completion", |choice| {
        let index = &choice["index"];
        Some([
            json!({"index": index, "text": choice.get("text")?, "logprobs": null,
                   "finish_reason": null}),
            json!({"index": index, "text": "", "logprobs": null,
                   "finish_reason": choice["finish_reason"]}),
        ])
    })
}

/// An OpenAI answer as chunks of `object`, each choice's two made by `chunks_of`.
fn chunk_stream(
    completion: &Value,
    include_usage: bool,
    object: &str,
    chunks_of: impl Fn(&Value) -> Option<[Value; 2]>,
) -> Option<Bytes> {
    let choices = completion["choices"].as_array()?;
    let head = |choices: Value| {
        json!({
            "id": completion["id"],
            "object": object,
            "created": completion["created"],
            "model": completion["model"],
            "system_fingerprint": completion.get("system_fingerprint").unwrap_or(&Value::Null),
            "choices": choices,
        })
    };
    let mut out = String::new();
    let mut push = |event: Value| out.push_str(&format!("data: {event}\n\n"));
    for choice in choices {
        for chunk in chunks_of(choice)? {
            push(head(json!([chunk])));
        }
    }
    if include_usage && !completion["usage"].is_null() {
        let mut usage = head(json!([]));
        usage["usage"] = completion["usage"].clone();
        push(usage);
    }
    out.push_str("data: [DONE]\n\n");
    Some(Bytes::from(out))
}

/// A kept Anthropic message as Messages events: `message_start`, each content block whole
/// (a text block's text in one delta, a tool call's input as one JSON delta), then
/// `message_delta` with the stop reason and usage, and `message_stop`. `None` when the
/// answer is not a message.
pub fn message_stream(message: &Value) -> Option<Bytes> {
    let blocks = message["content"].as_array()?;
    let mut start = message.clone();
    start["content"] = json!([]);
    start["stop_reason"] = Value::Null;
    start["stop_sequence"] = Value::Null;
    let usage = &message["usage"];
    let mut events = vec![(
        "message_start",
        json!({"type": "message_start", "message": start}),
    )];
    for (index, block) in blocks.iter().enumerate() {
        let (empty, delta) = match block["type"].as_str() {
            Some("text") => (
                json!({"type": "text", "text": ""}),
                json!({"type": "text_delta", "text": block["text"]}),
            ),
            Some("tool_use") => (
                json!({"type": "tool_use", "id": block["id"], "name": block["name"],
                       "input": {}}),
                json!({"type": "input_json_delta",
                       "partial_json": block["input"].to_string()}),
            ),
            Some("thinking") => (
                json!({"type": "thinking", "thinking": ""}),
                json!({"type": "thinking_delta", "thinking": block["thinking"]}),
            ),
            // Blocks with no delta of their own (redacted thinking, server tool results)
            // start whole.
            _ => (block.clone(), Value::Null),
        };
        events.push((
            "content_block_start",
            json!({"type": "content_block_start", "index": index, "content_block": empty}),
        ));
        if !delta.is_null() {
            events.push((
                "content_block_delta",
                json!({"type": "content_block_delta", "index": index, "delta": delta}),
            ));
        }
        if block["type"] == "thinking" && !block["signature"].is_null() {
            events.push((
                "content_block_delta",
                json!({"type": "content_block_delta", "index": index,
                       "delta": {"type": "signature_delta", "signature": block["signature"]}}),
            ));
        }
        events.push((
            "content_block_stop",
            json!({"type": "content_block_stop", "index": index}),
        ));
    }
    events.push((
        "message_delta",
        json!({"type": "message_delta",
               "delta": {"stop_reason": message["stop_reason"],
                         "stop_sequence": message["stop_sequence"]},
               "usage": usage}),
    ));
    events.push(("message_stop", json!({"type": "message_stop"})));
    let mut out = String::new();
    for (name, data) in events {
        out.push_str(&format!("event: {name}\ndata: {data}\n\n"));
    }
    Some(Bytes::from(out))
}

/// Whole answers with a tool call, for the tests of replaying and assembling.
#[cfg(test)]
pub(super) mod fixtures {
    use serde_json::{Value, json};

    pub fn tool_completion() -> Value {
        json!({
            "id": "chatcmpl-1", "object": "chat.completion", "created": 7, "model": "m",
            "system_fingerprint": null,
            "choices": [{"index": 0, "logprobs": null, "finish_reason": "tool_calls",
                "message": {"role": "assistant", "content": "Looking.", "refusal": null,
                    "tool_calls": [{"id": "call_1", "type": "function",
                        "function": {"name": "weather", "arguments": "{\"city\":\"Oslo\"}"}}]}}],
            "usage": {"prompt_tokens": 3, "completion_tokens": 5, "total_tokens": 8}
        })
    }

    pub fn text_completion() -> Value {
        json!({
            "id": "cmpl-1", "object": "text_completion", "created": 7, "model": "m",
            "system_fingerprint": null,
            "choices": [{"index": 0, "text": "Once upon", "logprobs": null,
                         "finish_reason": "length"}],
            "usage": {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}
        })
    }

    pub fn tool_message() -> Value {
        json!({
            "id": "msg_1", "type": "message", "role": "assistant", "model": "m",
            "content": [{"type": "text", "text": "Looking."},
                        {"type": "tool_use", "id": "tu_1", "name": "weather",
                         "input": {"city": "Oslo"}}],
            "stop_reason": "tool_use", "stop_sequence": null,
            "usage": {"input_tokens": 3, "output_tokens": 5}
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::providers::stream::testing::{names, payloads};

    /// Every event's data but the `[DONE]` marker.
    fn events(stream: &Bytes) -> Vec<Value> {
        let mut events = payloads(std::slice::from_ref(stream));
        events.retain(|event| event != "[DONE]");
        events
    }

    #[test]
    fn a_completion_replays_as_chunks_with_its_tool_calls_finish_and_usage() {
        let completion = fixtures::tool_completion();
        let stream = completion_stream(&completion, true).unwrap();
        assert!(stream.ends_with(b"data: [DONE]\n\n"));
        let chunks = events(&stream);
        assert_eq!(chunks.len(), 3);
        let delta = &chunks[0]["choices"][0]["delta"];
        assert_eq!(delta["content"], "Looking.");
        assert_eq!(delta["tool_calls"][0]["function"]["name"], "weather");
        assert_eq!(delta["tool_calls"][0]["index"], 0);
        assert_eq!(chunks[1]["choices"][0]["finish_reason"], "tool_calls");
        assert_eq!(chunks[2]["usage"]["completion_tokens"], 5);
        assert!(
            chunks
                .iter()
                .all(|c| c["object"] == "chat.completion.chunk")
        );
        let without_usage = events(&completion_stream(&completion, false).unwrap());
        assert_eq!(without_usage.len(), 2);
    }

    #[test]
    fn a_text_completion_replays_as_its_chunks_with_usage_when_asked() {
        let completion = fixtures::text_completion();
        let chunks = events(&text_completion_stream(&completion, true).unwrap());
        assert_eq!(chunks.len(), 3);
        assert!(chunks.iter().all(|c| c["object"] == "text_completion"));
        assert_eq!(chunks[0]["choices"][0]["text"], "Once upon");
        assert_eq!(chunks[1]["choices"][0]["finish_reason"], "length");
        assert_eq!(chunks[2]["usage"]["total_tokens"], 5);
        assert_eq!(
            text_completion_stream(&fixtures::tool_completion(), false),
            None
        );
    }

    #[test]
    fn a_message_replays_as_events_with_its_blocks_stop_reason_and_usage() {
        let message = fixtures::tool_message();
        let stream = message_stream(&message).unwrap();
        assert_eq!(
            names(std::slice::from_ref(&stream)),
            [
                "message_start",
                "content_block_start",
                "content_block_delta",
                "content_block_stop",
                "content_block_start",
                "content_block_delta",
                "content_block_stop",
                "message_delta",
                "message_stop"
            ]
        );
        let events = events(&stream);
        assert_eq!(events[0]["message"]["content"], json!([]));
        assert_eq!(events[2]["delta"]["text"], "Looking.");
        let input: Value =
            serde_json::from_str(events[5]["delta"]["partial_json"].as_str().unwrap()).unwrap();
        assert_eq!(input, json!({"city": "Oslo"}));
        assert_eq!(events[7]["delta"]["stop_reason"], "tool_use");
        assert_eq!(events[7]["usage"]["output_tokens"], 5);
    }
}
