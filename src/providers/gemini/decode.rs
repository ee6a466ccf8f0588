//! Gemini's `GenerateContentResponse` read as OpenAI's completion, whole or as stream chunks.
//!
//! The first candidate's text parts join into the content (thought parts are dropped) and
//! its `functionCall` parts become `tool_calls`. `finishReason` maps to `finish_reason`
//! (`tool_calls` when the model called a function), `usageMetadata` to `usage`. With
//! `alt=sse` every event is a whole partial response and the stream just ends: no marker.

use serde_json::{Value, json};

use crate::providers::anthropic::unix_now;
use crate::providers::sse::SseEvent;
use crate::providers::stream::{ChunkSource, StreamState};

/// Reads a whole response as a `chat.completion`; `None` when it is not one.
pub fn to_openai(response: &Value) -> Option<Value> {
    let candidate = response.pointer("/candidates/0");
    if candidate.is_none() && response.get("promptFeedback").is_none() {
        return None;
    }
    let parts = Parts::read(candidate, 0);
    let mut message = json!({
        "role": "assistant",
        "content": if parts.text.is_empty() && !parts.calls.is_empty() { Value::Null } else { json!(parts.text) },
        "refusal": null,
    });
    if !parts.calls.is_empty() {
        message["tool_calls"] = Value::Array(parts.calls.clone());
    }
    let mut completion = json!({
        "id": completion_id(response),
        "object": "chat.completion",
        "created": unix_now(),
        "model": response.get("modelVersion").cloned().unwrap_or(json!("")),
        "choices": [{
            "index": 0,
            "message": message,
            "logprobs": null,
            "finish_reason": finish_reason(candidate, !parts.calls.is_empty())
                .unwrap_or("stop"),
        }],
    });
    if let Some(usage) = response.get("usageMetadata") {
        completion["usage"] = openai_usage(usage);
    }
    Some(completion)
}

/// What a candidate's parts say.
struct Parts {
    text: String,
    calls: Vec<Value>,
}

impl Parts {
    /// Reads the parts; tool calls are numbered from `first_call` (their OpenAI index).
    fn read(candidate: Option<&Value>, first_call: usize) -> Parts {
        let mut text = String::new();
        let mut calls = Vec::new();
        let parts = candidate
            .and_then(|c| c.pointer("/content/parts"))
            .and_then(Value::as_array)
            .map(Vec::as_slice)
            .unwrap_or_default();
        for part in parts {
            if part.get("thought") == Some(&json!(true)) {
                continue;
            }
            if let Some(piece) = part.get("text").and_then(Value::as_str) {
                text.push_str(piece);
            }
            if let Some(call) = part.get("functionCall") {
                let index = first_call + calls.len();
                // Gemini ids its calls only sometimes; OpenAI clients need one to answer.
                let id = call
                    .get("id")
                    .and_then(Value::as_str)
                    .map(str::to_owned)
                    .unwrap_or_else(|| format!("call_{index}"));
                calls.push(json!({
                    "id": id,
                    "type": "function",
                    "function": {
                        "name": call.get("name").cloned().unwrap_or(json!("")),
                        "arguments": call.get("args").unwrap_or(&json!({})).to_string(),
                    },
                }));
            }
        }
        Parts { text, calls }
    }
}

fn completion_id(response: &Value) -> String {
    match response.get("responseId").and_then(Value::as_str) {
        Some(id) => format!("chatcmpl-{id}"),
        None => "chatcmpl-gemini".into(),
    }
}

/// The candidate's `finishReason` as OpenAI's; `None` while the candidate goes on.
fn finish_reason(candidate: Option<&Value>, called: bool) -> Option<&'static str> {
    let Some(candidate) = candidate else {
        // No candidate at all: the prompt itself was blocked.
        return Some("content_filter");
    };
    let reason = candidate.get("finishReason")?.as_str()?;
    Some(match reason {
        "STOP" if called => "tool_calls",
        "MAX_TOKENS" => "length",
        "SAFETY" | "RECITATION" | "BLOCKLIST" | "PROHIBITED_CONTENT" | "SPII" | "IMAGE_SAFETY" => {
            "content_filter"
        }
        _ => "stop",
    })
}

/// `usageMetadata` as OpenAI's `usage`; thinking tokens count as completion tokens, as
/// OpenAI counts reasoning tokens, and context-cache hits are OpenAI's cached tokens.
pub fn openai_usage(usage: &Value) -> Value {
    let count = |field: &str| usage.get(field).and_then(Value::as_u64).unwrap_or(0);
    let prompt = count("promptTokenCount");
    let completion = count("candidatesTokenCount") + count("thoughtsTokenCount");
    let mut usage = json!({
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
    });
    let cached = count("cachedContentTokenCount");
    if cached > 0 {
        usage["prompt_tokens_details"] = json!({"cached_tokens": cached});
    }
    usage
}

/// Reads Gemini's stream events as OpenAI chunks.
#[derive(Default)]
pub struct GeminiSource {
    started: bool,
    id: String,
    model: String,
    created: u64,
    calls: usize,
    finished: bool,
    usage: Option<Value>,
}

impl GeminiSource {
    fn chunk(&self, delta: Value, finish_reason: Option<&str>) -> Value {
        json!({
            "id": self.id,
            "object": "chat.completion.chunk",
            "created": self.created,
            "model": self.model,
            "choices": [{"index": 0, "delta": delta, "logprobs": null, "finish_reason": finish_reason}],
        })
    }
}

impl ChunkSource for GeminiSource {
    fn event(&mut self, event: &SseEvent, chunks: &mut Vec<Value>) -> StreamState {
        let Ok(response) = serde_json::from_str::<Value>(event.data()) else {
            return StreamState::Malformed;
        };
        if let Some(error) = response.get("error") {
            let status = error.get("status").and_then(Value::as_str);
            return StreamState::UpstreamError {
                overloaded: matches!(status, Some("UNAVAILABLE" | "RESOURCE_EXHAUSTED")),
                message: error
                    .get("message")
                    .and_then(Value::as_str)
                    .unwrap_or("the provider failed mid-stream")
                    .to_owned(),
            };
        }
        let candidate = response.pointer("/candidates/0");
        if candidate.is_none()
            && response.get("usageMetadata").is_none()
            && response.get("promptFeedback").is_none()
        {
            return StreamState::Malformed;
        }
        if !self.started {
            self.started = true;
            self.id = completion_id(&response);
            self.model = response
                .get("modelVersion")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_owned();
            self.created = unix_now();
            chunks.push(self.chunk(json!({"role": "assistant", "content": ""}), None));
        }
        if let Some(usage) = response.get("usageMetadata") {
            self.usage = Some(openai_usage(usage));
        }
        let parts = Parts::read(candidate, self.calls);
        if !parts.text.is_empty() {
            chunks.push(self.chunk(json!({"content": parts.text}), None));
        }
        for (offset, mut call) in parts.calls.iter().cloned().enumerate() {
            call["index"] = json!(self.calls + offset);
            chunks.push(self.chunk(json!({"tool_calls": [call]}), None));
        }
        self.calls += parts.calls.len();
        let blocked = candidate.is_none() && response.get("promptFeedback").is_some();
        if (candidate.is_some() || blocked)
            && let Some(finish) = finish_reason(candidate, self.calls > 0)
            && !self.finished
        {
            self.finished = true;
            chunks.push(self.chunk(json!({}), Some(finish)));
        }
        StreamState::Open
    }

    fn end(&mut self, chunks: &mut Vec<Value>) -> StreamState {
        if !self.finished {
            return StreamState::Truncated;
        }
        let mut chunk = self.chunk(json!({}), None);
        chunk["choices"] = json!([]);
        chunk["usage"] = self.usage.clone().unwrap_or_else(
            || json!({"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0}),
        );
        chunks.push(chunk);
        StreamState::Done
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::providers::Usage;
    use crate::providers::chat_chunks::stream::OpenAiSink;
    use crate::providers::inbound_messages::stream::AnthropicSink;
    use crate::providers::stream::Translating;
    use crate::providers::stream::testing::{event, names, payloads, run};

    fn without_created(mut completion: Value) -> Value {
        completion["created"] = json!(0);
        completion
    }

    /// The response of Gemini's text-generation quickstart.
    #[test]
    fn golden_text_response() {
        let response = json!({
            "candidates": [{
                "content": {"parts": [{"text": "AI learns patterns from data."}], "role": "model"},
                "finishReason": "STOP",
                "index": 0
            }],
            "usageMetadata": {"promptTokenCount": 8, "candidatesTokenCount": 7, "totalTokenCount": 15},
            "modelVersion": "gemini-2.5-flash",
            "responseId": "abc"
        });
        assert_eq!(
            without_created(to_openai(&response).unwrap()),
            json!({
                "id": "chatcmpl-abc",
                "object": "chat.completion",
                "created": 0,
                "model": "gemini-2.5-flash",
                "choices": [{"index": 0, "message": {"role": "assistant", "content": "AI learns patterns from data.", "refusal": null},
                             "logprobs": null, "finish_reason": "stop"}],
                "usage": {"prompt_tokens": 8, "completion_tokens": 7, "total_tokens": 15}
            })
        );
    }

    /// The function-call response of Gemini's function-calling guide.
    #[test]
    fn golden_function_call_response() {
        let response = json!({
            "candidates": [{
                "content": {"role": "model", "parts": [{"functionCall": {"name": "set_light_values", "args": {"brightness": 25, "color_temp": "warm"}}}]},
                "finishReason": "STOP"
            }]
        });
        let completion = to_openai(&response).unwrap();
        let choice = &completion["choices"][0];
        assert_eq!(choice["finish_reason"], "tool_calls");
        assert_eq!(choice["message"]["content"], Value::Null);
        assert_eq!(
            choice["message"]["tool_calls"],
            json!([{"id": "call_0", "type": "function", "function": {
                "name": "set_light_values", "arguments": "{\"brightness\":25,\"color_temp\":\"warm\"}"}}])
        );
    }

    #[test]
    fn context_cache_hits_are_openais_cached_tokens() {
        let usage = json!({"promptTokenCount": 2006, "cachedContentTokenCount": 1920,
                           "candidatesTokenCount": 5, "totalTokenCount": 2011});
        assert_eq!(
            openai_usage(&usage),
            json!({"prompt_tokens": 2006, "completion_tokens": 5, "total_tokens": 2011,
                   "prompt_tokens_details": {"cached_tokens": 1920}})
        );
    }

    #[test]
    fn a_blocked_prompt_is_a_content_filter_finish() {
        let response = json!({"promptFeedback": {"blockReason": "SAFETY"}});
        assert_eq!(
            to_openai(&response).unwrap()["choices"][0]["finish_reason"],
            "content_filter"
        );
        assert!(to_openai(&json!({"nope": 1})).is_none());
    }

    fn stream_events() -> Vec<SseEvent> {
        [
            r#"{"candidates": [{"content": {"parts": [{"text": "The"}],"role": "model"},"index": 0}],"usageMetadata": {"promptTokenCount": 4,"totalTokenCount": 4},"modelVersion": "gemini-2.5-flash"}"#,
            r#"{"candidates": [{"content": {"parts": [{"text": " sky is blue."}],"role": "model"},"finishReason": "STOP","index": 0}],"usageMetadata": {"promptTokenCount": 4,"candidatesTokenCount": 5,"totalTokenCount": 9},"modelVersion": "gemini-2.5-flash"}"#,
        ]
        .iter()
        .map(|d| event(None, d))
        .collect()
    }

    #[test]
    fn golden_stream_as_openai_chunks_ends_when_the_upstream_closes() {
        let mut translator = Translating::new(GeminiSource::default(), OpenAiSink::new(true));
        let (frames, state, usage) = run(&mut translator, &stream_events(), true);
        assert_eq!(state, StreamState::Done);
        assert_eq!(
            usage,
            Some(Usage {
                prompt_tokens: 4,
                completion_tokens: 5
            })
        );
        let data = payloads(&frames);
        let deltas: Vec<Value> = data
            .iter()
            .map(|p| match p.pointer("/choices/0") {
                Some(c) => json!([c["delta"], c["finish_reason"]]),
                None => p.get("usage").cloned().unwrap_or(p.clone()),
            })
            .collect();
        assert_eq!(
            deltas,
            vec![
                json!([{"role": "assistant", "content": ""}, null]),
                json!([{"content": "The"}, null]),
                json!([{"content": " sky is blue."}, null]),
                json!([{}, "stop"]),
                json!({"prompt_tokens": 4, "completion_tokens": 5, "total_tokens": 9}),
                json!("[DONE]"),
            ]
        );
        // Without a finish reason, the end of the connection is a truncation.
        let mut translator = Translating::new(GeminiSource::default(), OpenAiSink::new(false));
        let (_, state, _) = run(&mut translator, &stream_events()[..1], true);
        assert_eq!(state, StreamState::Truncated);
    }

    #[test]
    fn golden_stream_as_anthropic_events() {
        let mut translator = Translating::new(GeminiSource::default(), AnthropicSink::default());
        let (frames, state, _) = run(&mut translator, &stream_events(), true);
        assert_eq!(state, StreamState::Done);
        assert_eq!(
            names(&frames),
            [
                "message_start",
                "content_block_start",
                "content_block_delta",
                "content_block_delta",
                "content_block_stop",
                "message_delta",
                "message_stop"
            ]
        );
        assert_eq!(
            payloads(&frames)[5]["usage"],
            json!({"input_tokens": 4, "cache_creation_input_tokens": 0,
                   "cache_read_input_tokens": 0, "output_tokens": 5})
        );
    }
}
