//! A whole Anthropic message read as an OpenAI chat completion.
//!
//! Text blocks join into `message.content`; `tool_use` blocks become `tool_calls` (their
//! `input` serialized as `arguments`); thinking blocks are dropped. `stop_reason` maps to
//! `finish_reason` and `usage` to OpenAI's token counts.

use serde_json::{Value, json};

use super::unix_now;

/// Reads `message` as a `chat.completion`; `None` when it is not a message.
pub fn to_openai(message: &Value) -> Option<Value> {
    let blocks = message.get("content")?.as_array()?;
    let mut text = String::new();
    let mut tool_calls = Vec::new();
    for block in blocks {
        match block.get("type").and_then(Value::as_str) {
            Some("text") => text.push_str(block.get("text").and_then(Value::as_str)?),
            Some("tool_use") => tool_calls.push(json!({
                "id": block.get("id")?,
                "type": "function",
                "function": {
                    "name": block.get("name")?,
                    "arguments": block.get("input").unwrap_or(&json!({})).to_string(),
                },
            })),
            _ => {}
        }
    }
    let mut reply = json!({
        "role": "assistant",
        "content": if text.is_empty() && !tool_calls.is_empty() { Value::Null } else { json!(text) },
        "refusal": null,
    });
    if !tool_calls.is_empty() {
        reply["tool_calls"] = Value::Array(tool_calls);
    }
    let stop_reason = message.get("stop_reason").and_then(Value::as_str);
    let mut completion = json!({
        "id": message.get("id").cloned().unwrap_or(json!("")),
        "object": "chat.completion",
        "created": unix_now(),
        "model": message.get("model").cloned().unwrap_or(json!("")),
        "choices": [{
            "index": 0,
            "message": reply,
            "logprobs": null,
            "finish_reason": finish_reason(stop_reason),
        }],
    });
    if let Some(usage) = message.get("usage") {
        completion["usage"] = openai_usage(usage);
    }
    Some(completion)
}

/// Anthropic's `stop_reason` as OpenAI's `finish_reason`.
pub fn finish_reason(stop_reason: Option<&str>) -> &'static str {
    match stop_reason {
        Some("max_tokens") | Some("model_context_window_exceeded") => "length",
        Some("tool_use") => "tool_calls",
        Some("refusal") => "content_filter",
        // end_turn, stop_sequence, pause_turn, and whatever comes next.
        _ => "stop",
    }
}

/// Anthropic's `usage` as OpenAI's, cached prompt tokens included in `prompt_tokens`.
pub fn openai_usage(usage: &Value) -> Value {
    let counts = super::usage(usage);
    let cached = usage
        .get("cache_read_input_tokens")
        .and_then(Value::as_u64)
        .unwrap_or(0);
    json!({
        "prompt_tokens": counts.prompt_tokens,
        "completion_tokens": counts.completion_tokens,
        "total_tokens": counts.prompt_tokens + counts.completion_tokens,
        "prompt_tokens_details": {"cached_tokens": cached},
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn without_created(mut completion: Value) -> Value {
        completion["created"] = json!(0);
        completion
    }

    /// Anthropic's documented tool-use response, read by an OpenAI client.
    #[test]
    fn golden_tool_use_message() {
        let message = json!({
            "id": "msg_01Aq9w938a90dw8q",
            "type": "message",
            "role": "assistant",
            "model": "claude-sonnet-4-5",
            "content": [
                {"type": "text", "text": "I'll check the current weather in San Francisco for you."},
                {"type": "tool_use", "id": "toolu_01A09q90qw90lq917835lq9", "name": "get_weather",
                 "input": {"location": "San Francisco, CA", "unit": "celsius"}}
            ],
            "stop_reason": "tool_use",
            "stop_sequence": null,
            "usage": {"input_tokens": 472, "output_tokens": 89}
        });
        assert_eq!(
            without_created(to_openai(&message).unwrap()),
            json!({
                "id": "msg_01Aq9w938a90dw8q",
                "object": "chat.completion",
                "created": 0,
                "model": "claude-sonnet-4-5",
                "choices": [{
                    "index": 0,
                    "message": {
                        "role": "assistant",
                        "content": "I'll check the current weather in San Francisco for you.",
                        "refusal": null,
                        "tool_calls": [{
                            "id": "toolu_01A09q90qw90lq917835lq9",
                            "type": "function",
                            "function": {"name": "get_weather", "arguments": "{\"location\":\"San Francisco, CA\",\"unit\":\"celsius\"}"}
                        }]
                    },
                    "logprobs": null,
                    "finish_reason": "tool_calls"
                }],
                "usage": {"prompt_tokens": 472, "completion_tokens": 89, "total_tokens": 561,
                          "prompt_tokens_details": {"cached_tokens": 0}}
            })
        );
    }

    /// The basic "Hello, Claude" example from the Messages API reference.
    #[test]
    fn golden_text_message() {
        let message = json!({
            "id": "msg_013Zva2CMHLNnXjNJJKqJ2EF", "type": "message", "role": "assistant",
            "model": "claude-sonnet-4-5",
            "content": [{"type": "text", "text": "Hi! My name is Claude."}],
            "stop_reason": "end_turn", "stop_sequence": null,
            "usage": {"input_tokens": 2095, "output_tokens": 503}
        });
        let completion = to_openai(&message).unwrap();
        assert_eq!(
            completion["choices"][0]["message"]["content"],
            "Hi! My name is Claude."
        );
        assert_eq!(completion["choices"][0]["finish_reason"], "stop");
        assert!(
            completion["choices"][0]["message"]
                .get("tool_calls")
                .is_none()
        );
        assert_eq!(completion["usage"]["total_tokens"], 2598);
    }

    #[test]
    fn stop_reasons_map_to_finish_reasons() {
        assert_eq!(finish_reason(Some("end_turn")), "stop");
        assert_eq!(finish_reason(Some("stop_sequence")), "stop");
        assert_eq!(finish_reason(Some("max_tokens")), "length");
        assert_eq!(finish_reason(Some("tool_use")), "tool_calls");
        assert_eq!(finish_reason(Some("refusal")), "content_filter");
        assert_eq!(finish_reason(None), "stop");
    }
}
