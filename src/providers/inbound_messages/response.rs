//! An OpenAI chat completion read as an Anthropic message, for `/v1/messages` clients.
//!
//! The first choice's text becomes a `text` block and its `tool_calls` become `tool_use`
//! blocks (arguments parsed back into `input`); a `refusal` becomes a text block with the
//! stop reason `refusal`; `finish_reason` maps to `stop_reason`, and `usage` to Anthropic's
//! (see [`anthropic_usage`]).

use serde_json::{Value, json};

/// Reads `completion` as an Anthropic `message`; `None` when it is not a completion.
pub fn from_openai(completion: &Value) -> Option<Value> {
    let choice = completion.get("choices")?.as_array()?.first()?;
    let message = choice.get("message")?;
    let mut content = Vec::new();
    if let Some(text) = message
        .get("content")
        .and_then(Value::as_str)
        .filter(|t| !t.is_empty())
    {
        content.push(json!({"type": "text", "text": text}));
    }
    let refusal = message
        .get("refusal")
        .and_then(Value::as_str)
        .filter(|t| !t.is_empty());
    if let Some(refusal) = refusal {
        content.push(json!({"type": "text", "text": refusal}));
    }
    let calls = message
        .get("tool_calls")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default();
    for call in calls {
        content.push(tool_use(
            call.get("id").and_then(Value::as_str).unwrap_or(""),
            call.pointer("/function/name")
                .and_then(Value::as_str)
                .unwrap_or(""),
            call.pointer("/function/arguments")
                .and_then(Value::as_str)
                .unwrap_or(""),
        ));
    }
    let stop = match refusal {
        Some(_) => "refusal",
        None => stop_reason(choice.get("finish_reason").and_then(Value::as_str)),
    };
    let usage = completion.get("usage").unwrap_or(&Value::Null);
    Some(json!({
        "id": completion.get("id").cloned().unwrap_or(json!("")),
        "type": "message",
        "role": "assistant",
        "model": completion.get("model").cloned().unwrap_or(json!("")),
        "content": content,
        "stop_reason": stop,
        "stop_sequence": null,
        "usage": anthropic_usage(usage),
    }))
}

/// OpenAI's `usage` as Anthropic's. OpenAI's `prompt_tokens` include the cached ones, which
/// Anthropic reports apart: `input_tokens` are the uncached rest, `cache_read_input_tokens`
/// the `prompt_tokens_details.cached_tokens`. OpenAI reports no cache writes.
pub fn anthropic_usage(usage: &Value) -> Value {
    let count = |pointer: &str| usage.pointer(pointer).and_then(Value::as_u64).unwrap_or(0);
    let cached = count("/prompt_tokens_details/cached_tokens");
    json!({
        "input_tokens": count("/prompt_tokens").saturating_sub(cached),
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": cached,
        "output_tokens": count("/completion_tokens"),
    })
}

/// A `tool_use` block; arguments that are not a JSON object still reach the client, wrapped.
pub fn tool_use(id: &str, name: &str, arguments: &str) -> Value {
    let input = match serde_json::from_str::<Value>(arguments) {
        Ok(Value::Object(input)) => Value::Object(input),
        _ if arguments.trim().is_empty() => json!({}),
        _ => json!({"arguments": arguments}),
    };
    json!({"type": "tool_use", "id": id, "name": name, "input": input})
}

/// OpenAI's `finish_reason` as Anthropic's `stop_reason`.
pub fn stop_reason(finish_reason: Option<&str>) -> &'static str {
    match finish_reason {
        Some("length") => "max_tokens",
        Some("tool_calls") | Some("function_call") => "tool_use",
        Some("content_filter") => "refusal",
        _ => "end_turn",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// OpenAI's documented function-calling response, read by an Anthropic client.
    #[test]
    fn golden_tool_call_completion() {
        let completion = json!({
            "id": "chatcmpl-abc123",
            "object": "chat.completion",
            "created": 1699896916,
            "model": "gpt-4o-mini",
            "choices": [{
                "index": 0,
                "message": {
                    "role": "assistant",
                    "content": null,
                    "tool_calls": [{
                        "id": "call_abc123",
                        "type": "function",
                        "function": {"name": "get_current_weather", "arguments": "{\n\"location\": \"Boston, MA\"\n}"}
                    }]
                },
                "logprobs": null,
                "finish_reason": "tool_calls"
            }],
            "usage": {"prompt_tokens": 82, "completion_tokens": 17, "total_tokens": 99}
        });
        assert_eq!(
            from_openai(&completion).unwrap(),
            json!({
                "id": "chatcmpl-abc123",
                "type": "message",
                "role": "assistant",
                "model": "gpt-4o-mini",
                "content": [{"type": "tool_use", "id": "call_abc123", "name": "get_current_weather",
                             "input": {"location": "Boston, MA"}}],
                "stop_reason": "tool_use",
                "stop_sequence": null,
                "usage": {"input_tokens": 82, "cache_creation_input_tokens": 0,
                          "cache_read_input_tokens": 0, "output_tokens": 17}
            })
        );
    }

    #[test]
    fn golden_text_completion() {
        let completion = json!({
            "id": "chatcmpl-123", "object": "chat.completion", "created": 1677652288,
            "model": "gpt-4o", "system_fingerprint": "fp_44709d6fcb",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": "\n\nHello there, how may I assist you today?"},
                         "logprobs": null, "finish_reason": "length"}],
            "usage": {"prompt_tokens": 9, "completion_tokens": 12, "total_tokens": 21}
        });
        let message = from_openai(&completion).unwrap();
        assert_eq!(
            message["content"],
            json!([{"type": "text", "text": "\n\nHello there, how may I assist you today?"}])
        );
        assert_eq!(message["stop_reason"], "max_tokens");
        assert_eq!(message["usage"]["input_tokens"], 9);
        assert_eq!(message["usage"]["output_tokens"], 12);
    }

    #[test]
    fn cached_prompt_tokens_are_anthropics_cache_reads() {
        let usage = json!({"prompt_tokens": 2006, "completion_tokens": 300, "total_tokens": 2306,
                           "prompt_tokens_details": {"cached_tokens": 1920}});
        assert_eq!(
            anthropic_usage(&usage),
            json!({"input_tokens": 86, "cache_creation_input_tokens": 0,
                   "cache_read_input_tokens": 1920, "output_tokens": 300})
        );
    }

    #[test]
    fn a_refusal_is_a_text_block_with_the_refusal_stop_reason() {
        let completion = json!({"id": "c", "model": "m", "choices": [{"index": 0,
            "message": {"role": "assistant", "content": null, "refusal": "I can't help with that."},
            "finish_reason": "stop"}]});
        let message = from_openai(&completion).unwrap();
        assert_eq!(
            message["content"],
            json!([{"type": "text", "text": "I can't help with that."}])
        );
        assert_eq!(message["stop_reason"], "refusal");
    }
}
