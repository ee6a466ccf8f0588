//! The canned answer of a route's last tier, as a well-formed completion or stream.

use bytes::Bytes;
use serde_json::json;

/// A whole `chat.completion` holding the canned content.
pub fn completion(id: &str, route: &str, content: &str) -> Bytes {
    let body = json!({
        "id": format!("chatcmpl-{id}"),
        "object": "chat.completion",
        "created": unix_now(),
        "model": route,
        "choices": [{
            "index": 0,
            // `refusal` is required (nullable) by OpenAI's schema; strict clients check it.
            "message": {"role": "assistant", "content": content, "refusal": null},
            "logprobs": null,
            "finish_reason": "stop",
        }],
        "usage": {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0},
    });
    Bytes::from(body.to_string())
}

/// The same answer as SSE chunks, ending with `[DONE]`.
pub fn stream(id: &str, route: &str, content: &str, include_usage: bool) -> Bytes {
    let created = unix_now();
    let chunk = |delta: serde_json::Value, finish: Option<&str>| {
        json!({
            "id": format!("chatcmpl-{id}"),
            "object": "chat.completion.chunk",
            "created": created,
            "model": route,
            "choices": [{"index": 0, "delta": delta, "logprobs": null, "finish_reason": finish}],
        })
    };
    let mut out = String::new();
    let mut push = |event: serde_json::Value| out.push_str(&format!("data: {event}\n\n"));
    push(chunk(
        json!({"role": "assistant", "content": content}),
        None,
    ));
    push(chunk(json!({}), Some("stop")));
    if include_usage {
        push(json!({
            "id": format!("chatcmpl-{id}"),
            "object": "chat.completion.chunk",
            "created": created,
            "model": route,
            "choices": [],
            "usage": {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0},
        }));
    }
    out.push_str("data: [DONE]\n\n");
    Bytes::from(out)
}

/// The canned answer as an Anthropic message, for `/v1/messages` clients.
pub fn message(id: &str, route: &str, content: &str) -> Bytes {
    let body = json!({
        "id": format!("msg_{id}"),
        "type": "message",
        "role": "assistant",
        "model": route,
        "content": [{"type": "text", "text": content}],
        "stop_reason": "end_turn",
        "stop_sequence": null,
        "usage": {"input_tokens": 0, "output_tokens": 0},
    });
    Bytes::from(body.to_string())
}

/// The canned answer as Anthropic's event stream.
pub fn message_stream(id: &str, route: &str, content: &str) -> Bytes {
    let message = json!({
        "id": format!("msg_{id}"), "type": "message", "role": "assistant", "model": route,
        "content": [], "stop_reason": null, "stop_sequence": null,
        "usage": {"input_tokens": 0, "output_tokens": 0},
    });
    let events = [
        (
            "message_start",
            json!({"type": "message_start", "message": message}),
        ),
        (
            "content_block_start",
            json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
        ),
        (
            "content_block_delta",
            json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": content}}),
        ),
        (
            "content_block_stop",
            json!({"type": "content_block_stop", "index": 0}),
        ),
        (
            "message_delta",
            json!({"type": "message_delta", "delta": {"stop_reason": "end_turn", "stop_sequence": null}, "usage": {"output_tokens": 0}}),
        ),
        ("message_stop", json!({"type": "message_stop"})),
    ];
    let mut out = String::new();
    for (name, data) in events {
        out.push_str(&format!("event: {name}\ndata: {data}\n\n"));
    }
    Bytes::from(out)
}

fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}
