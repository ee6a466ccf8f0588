//! Bedrock's Converse answers read as OpenAI's completion, whole or as stream chunks.
//!
//! The message's `text` blocks join into the content, `toolUse` blocks become `tool_calls`
//! and reasoning blocks are dropped; `stopReason` maps to `finish_reason` and `usage` to
//! OpenAI's, prompt-cache reads and writes counted in `prompt_tokens` as OpenAI counts its
//! cached tokens. A stream arrives as `{"eventName": payload}` events (see `frames`):
//! `messageStart`, content block starts, deltas and stops, `messageStop`, then `metadata`
//! with the usage, which ends it.

use std::collections::BTreeMap;

use serde_json::{Value, json};

use super::frames::INVALID_FRAME;
use crate::providers::anthropic::unix_now;
use crate::providers::sse::SseEvent;
use crate::providers::stream::{ChunkSource, StreamState};

/// The completion id Converse does not give: its answers carry none in the body.
const COMPLETION_ID: &str = "chatcmpl-bedrock";

/// Reads a whole Converse response as a `chat.completion`; `None` when it is not one.
pub fn to_openai(response: &Value, model: &str) -> Option<Value> {
    let content = response.pointer("/output/message/content")?.as_array()?;
    let mut text = String::new();
    let mut calls = Vec::new();
    for block in content {
        if let Some(piece) = block.get("text").and_then(Value::as_str) {
            text.push_str(piece);
        }
        if let Some(call) = block.get("toolUse") {
            calls.push(json!({
                "id": call.get("toolUseId").cloned().unwrap_or(json!("")),
                "type": "function",
                "function": {
                    "name": call.get("name").cloned().unwrap_or(json!("")),
                    "arguments": call.get("input").unwrap_or(&json!({})).to_string(),
                },
            }));
        }
    }
    let mut message = json!({
        "role": "assistant",
        "content": if text.is_empty() && !calls.is_empty() { Value::Null } else { json!(text) },
        "refusal": null,
    });
    if !calls.is_empty() {
        message["tool_calls"] = Value::Array(calls);
    }
    let stop_reason = response.get("stopReason").and_then(Value::as_str);
    let mut completion = json!({
        "id": COMPLETION_ID,
        "object": "chat.completion",
        "created": unix_now(),
        "model": model,
        "choices": [{
            "index": 0,
            "message": message,
            "logprobs": null,
            "finish_reason": finish_reason(stop_reason),
        }],
    });
    if let Some(usage) = response.get("usage") {
        completion["usage"] = openai_usage(usage);
    }
    Some(completion)
}

/// Converse's `stopReason` as OpenAI's `finish_reason`.
pub fn finish_reason(stop_reason: Option<&str>) -> &'static str {
    match stop_reason {
        Some("tool_use") => "tool_calls",
        Some("max_tokens" | "model_context_window_exceeded") => "length",
        Some("guardrail_intervened" | "content_filtered") => "content_filter",
        // end_turn, stop_sequence, and whatever comes next.
        _ => "stop",
    }
}

/// Converse's `usage` as OpenAI's. `inputTokens` leaves out what the prompt cache read and
/// wrote, which OpenAI's `prompt_tokens` includes; the reads are its `cached_tokens`.
pub fn openai_usage(usage: &Value) -> Value {
    let count = |field: &str| usage.get(field).and_then(Value::as_u64).unwrap_or(0);
    let cached = count("cacheReadInputTokens");
    let prompt = count("inputTokens") + cached + count("cacheWriteInputTokens");
    let completion = count("outputTokens");
    json!({
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
        "prompt_tokens_details": {"cached_tokens": cached},
    })
}

/// Reads ConverseStream's events as OpenAI chunks.
pub struct BedrockSource {
    model: String,
    created: u64,
    /// Content block index → the OpenAI tool-call index it streams into.
    tool_calls: BTreeMap<u64, usize>,
    /// `messageStop` came: a clean close from here on ends a whole answer.
    stopped: bool,
}

impl BedrockSource {
    /// A reader for a stream from `model` (Converse's events do not name it).
    pub fn new(model: &str) -> BedrockSource {
        BedrockSource {
            model: model.to_owned(),
            created: unix_now(),
            tool_calls: BTreeMap::new(),
            stopped: false,
        }
    }

    fn chunk(&self, delta: Value, finish_reason: Option<&str>) -> Value {
        json!({
            "id": COMPLETION_ID,
            "object": "chat.completion.chunk",
            "created": self.created,
            "model": self.model,
            "choices": [{"index": 0, "delta": delta, "logprobs": null, "finish_reason": finish_reason}],
        })
    }

    fn tool_delta(&self, index: usize, mut call: Value) -> Value {
        call["index"] = json!(index);
        self.chunk(json!({"tool_calls": [call]}), None)
    }
}

impl ChunkSource for BedrockSource {
    fn event(&mut self, event: &SseEvent, chunks: &mut Vec<Value>) -> StreamState {
        let Ok(Value::Object(wrapped)) = serde_json::from_slice::<Value>(event.data_bytes()) else {
            return StreamState::Malformed;
        };
        let Some((kind, value)) = wrapped.into_iter().next() else {
            return StreamState::Malformed;
        };
        let block_index = value
            .get("contentBlockIndex")
            .and_then(Value::as_u64)
            .unwrap_or(0);
        match kind.as_str() {
            "messageStart" => {
                chunks.push(self.chunk(json!({"role": "assistant", "content": ""}), None));
            }
            "contentBlockStart" => {
                if let Some(tool) = value.pointer("/start/toolUse") {
                    let index = self.tool_calls.len();
                    self.tool_calls.insert(block_index, index);
                    let call = json!({
                        "id": tool.get("toolUseId").cloned().unwrap_or(json!("")),
                        "type": "function",
                        "function": {"name": tool.get("name").cloned().unwrap_or(json!("")), "arguments": ""},
                    });
                    chunks.push(self.tool_delta(index, call));
                }
            }
            "contentBlockDelta" => {
                let delta = value.get("delta").unwrap_or(&Value::Null);
                if let Some(text) = delta.get("text").and_then(Value::as_str) {
                    chunks.push(self.chunk(json!({"content": text}), None));
                } else if let (Some(input), Some(&index)) = (
                    delta.pointer("/toolUse/input"),
                    self.tool_calls.get(&block_index),
                ) {
                    let call = json!({"function": {"arguments": input}});
                    chunks.push(self.tool_delta(index, call));
                }
                // Reasoning and citations have no OpenAI counterpart.
            }
            "messageStop" => {
                self.stopped = true;
                let stop_reason = value.get("stopReason").and_then(Value::as_str);
                chunks.push(self.chunk(json!({}), Some(finish_reason(stop_reason))));
            }
            "metadata" => {
                let mut chunk = self.chunk(json!({}), None);
                chunk["choices"] = json!([]);
                chunk["usage"] = openai_usage(value.get("usage").unwrap_or(&Value::Null));
                chunks.push(chunk);
                return if self.stopped {
                    StreamState::Done
                } else {
                    StreamState::Malformed
                };
            }
            INVALID_FRAME => return StreamState::Malformed,
            name if name.ends_with("Exception") || name == "error" => {
                return StreamState::UpstreamError {
                    // Throttling and unavailability are Bedrock saying it is overloaded.
                    overloaded: matches!(
                        name,
                        "throttlingException" | "serviceUnavailableException"
                    ),
                    message: value
                        .get("message")
                        .and_then(Value::as_str)
                        .unwrap_or("the provider failed mid-stream")
                        .to_owned(),
                };
            }
            // contentBlockStop, and events added later.
            _ => {}
        }
        StreamState::Open
    }

    fn end(&mut self, _chunks: &mut Vec<Value>) -> StreamState {
        // `metadata` ends a whole stream; a close before it is a cut one.
        StreamState::Truncated
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

    /// The Converse response of Bedrock's tool-use example.
    #[test]
    fn golden_tool_use_response() {
        let response = json!({
            "output": {"message": {"role": "assistant", "content": [
                {"text": "I'll look that up."},
                {"toolUse": {"toolUseId": "tooluse_kZJMlvQmRJ6eAyJE5GIl7Q", "name": "top_song", "input": {"sign": "WZPZ"}}}
            ]}},
            "stopReason": "tool_use",
            "usage": {"inputTokens": 375, "outputTokens": 58, "totalTokens": 433, "cacheReadInputTokens": 100, "cacheWriteInputTokens": 20},
            "metrics": {"latencyMs": 1306}
        });
        let mut completion = to_openai(&response, "anthropic.claude-3-haiku").unwrap();
        completion["created"] = json!(0);
        assert_eq!(
            completion,
            json!({
                "id": "chatcmpl-bedrock",
                "object": "chat.completion",
                "created": 0,
                "model": "anthropic.claude-3-haiku",
                "choices": [{
                    "index": 0,
                    "message": {
                        "role": "assistant",
                        "content": "I'll look that up.",
                        "refusal": null,
                        "tool_calls": [{"id": "tooluse_kZJMlvQmRJ6eAyJE5GIl7Q", "type": "function",
                            "function": {"name": "top_song", "arguments": "{\"sign\":\"WZPZ\"}"}}]
                    },
                    "logprobs": null,
                    "finish_reason": "tool_calls"
                }],
                "usage": {"prompt_tokens": 495, "completion_tokens": 58, "total_tokens": 553,
                    "prompt_tokens_details": {"cached_tokens": 100}}
            })
        );
        assert!(to_openai(&json!({"message": "x"}), "m").is_none());
    }

    fn stream() -> Vec<SseEvent> {
        [
            r#"{"messageStart":{"role":"assistant"}}"#,
            r#"{"contentBlockDelta":{"contentBlockIndex":0,"delta":{"text":"Hel"},"p":"abcd"}}"#,
            r#"{"contentBlockDelta":{"contentBlockIndex":0,"delta":{"text":"lo"}}}"#,
            r#"{"contentBlockStop":{"contentBlockIndex":0}}"#,
            r#"{"contentBlockStart":{"contentBlockIndex":1,"start":{"toolUse":{"toolUseId":"t1","name":"f"}}}}"#,
            r#"{"contentBlockDelta":{"contentBlockIndex":1,"delta":{"toolUse":{"input":"{\"a\":"}}}}"#,
            r#"{"contentBlockDelta":{"contentBlockIndex":1,"delta":{"toolUse":{"input":"1}"}}}}"#,
            r#"{"contentBlockStop":{"contentBlockIndex":1}}"#,
            r#"{"messageStop":{"stopReason":"tool_use"}}"#,
            r#"{"metadata":{"usage":{"inputTokens":10,"outputTokens":5,"totalTokens":15},"metrics":{"latencyMs":9}}}"#,
        ]
        .iter()
        .map(|data| event(None, data))
        .collect()
    }

    #[test]
    fn a_stream_reads_as_openai_chunks_with_usage_from_metadata() {
        let mut translator = Translating::new(BedrockSource::new("m"), OpenAiSink::new(true));
        let (frames, state, usage) = run(&mut translator, &stream(), false);
        assert_eq!(state, StreamState::Done);
        assert_eq!(
            usage,
            Some(Usage {
                prompt_tokens: 10,
                completion_tokens: 5
            })
        );
        let chunks = payloads(&frames);
        let text: String = chunks
            .iter()
            .filter_map(|c| {
                c.pointer("/choices/0/delta/content")
                    .and_then(Value::as_str)
            })
            .collect();
        assert_eq!(text, "Hello");
        let arguments: String = chunks
            .iter()
            .filter_map(|c| c.pointer("/choices/0/delta/tool_calls/0/function/arguments"))
            .filter_map(Value::as_str)
            .collect();
        assert_eq!(arguments, "{\"a\":1}");
        assert!(
            chunks
                .iter()
                .any(|c| c.pointer("/choices/0/finish_reason") == Some(&json!("tool_calls")))
        );
        assert_eq!(chunks.last(), Some(&json!("[DONE]")));
    }

    #[test]
    fn a_stream_reads_as_anthropic_events() {
        let mut translator = Translating::new(BedrockSource::new("m"), AnthropicSink::default());
        let (frames, state, _) = run(&mut translator, &stream(), false);
        assert_eq!(state, StreamState::Done);
        let names = names(&frames);
        assert_eq!(names.first().map(String::as_str), Some("message_start"));
        assert_eq!(names.last().map(String::as_str), Some("message_stop"));
    }

    #[test]
    fn exceptions_cuts_and_bad_frames() {
        let mut source = BedrockSource::new("m");
        let mut chunks = Vec::new();
        let throttled = event(
            None,
            r#"{"throttlingException":{"message":"Too many requests"}}"#,
        );
        assert_eq!(
            source.event(&throttled, &mut chunks),
            StreamState::UpstreamError {
                overloaded: true,
                message: "Too many requests".into()
            }
        );
        let failed = event(None, r#"{"modelStreamErrorException":{"message":"boom"}}"#);
        assert!(matches!(
            source.event(&failed, &mut chunks),
            StreamState::UpstreamError {
                overloaded: false,
                ..
            }
        ));
        let invalid = event(None, r#"{"invalidFrame":{"message":"crc"}}"#);
        assert_eq!(source.event(&invalid, &mut chunks), StreamState::Malformed);
        assert_eq!(source.end(&mut chunks), StreamState::Truncated);
    }
}
