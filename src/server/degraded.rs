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
            "message": {"role": "assistant", "content": content},
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

fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}
