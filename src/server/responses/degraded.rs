//! A route's canned answer as a Response object, or as the Responses stream events, written
//! by the same code that writes a translated step's answer.

use bytes::Bytes;
use serde_json::{Map, Value, json};

use crate::providers::responses::object::{Echo, from_chat};
use crate::providers::responses::sink::ResponsesSink;
use crate::providers::stream::ChunkSink;

/// The canned answer as the chat completion a translated step would have given.
fn completion(route: &str, content: &str) -> Value {
    json!({
        "model": route,
        "choices": [{"index": 0, "finish_reason": "stop",
                     "message": {"role": "assistant", "content": content, "refusal": null}}],
        "usage": {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0},
    })
}

/// A whole Response object holding the canned content.
pub fn response(request: &Map<String, Value>, route: &str, content: &str) -> Bytes {
    let response = from_chat(&Echo::of(request), &completion(route, content)).unwrap_or_default();
    Bytes::from(response.to_string())
}

/// The same answer as Responses stream events, ending with `response.completed`.
pub fn stream(request: &Map<String, Value>, route: &str, content: &str) -> Bytes {
    let mut sink = ResponsesSink::new(Echo::of(request));
    let mut frames = Vec::new();
    let chunk = |delta: Value, finish: Value| json!({"model": route, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]});
    sink.chunk(
        &chunk(
            json!({"role": "assistant", "content": content}),
            Value::Null,
        ),
        &mut frames,
    );
    sink.chunk(&chunk(json!({}), json!("stop")), &mut frames);
    sink.chunk(
        &json!({"model": route, "choices": [], "usage": {"prompt_tokens": 0, "completion_tokens": 0}}),
        &mut frames,
    );
    sink.done(&mut frames);
    Bytes::from(frames.concat())
}
