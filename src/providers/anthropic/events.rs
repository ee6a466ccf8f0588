//! Anthropic's event stream: forwarded to Anthropic clients, or read as OpenAI chunks.
//!
//! A stream is `message_start`, then per content block `content_block_start`, its
//! `content_block_delta`s (`text_delta`, `input_json_delta`) and `content_block_stop`, then
//! `message_delta` (stop reason, cumulative usage) and `message_stop`. `ping`s may come at any
//! time, and `error` (say `overloaded_error`) ends a stream that failed. Unknown event types
//! are skipped, as Anthropic's versioning policy asks.
//!
//! A stream closed after its `message_delta` gave a stop reason is a whole answer, even without
//! `message_stop`: the client gets the `message_stop` the provider left out.

use std::collections::BTreeMap;

use bytes::Bytes;
use serde_json::{Value, json};

use super::decode::finish_reason;
use super::{stream_error_event, unix_now, usage};
use crate::providers::Usage;
use crate::providers::sse::SseEvent;
use crate::providers::stream::{
    ChunkSource, StreamState, StreamTranslator, Translated, named_event,
};

/// An event's `type` and its parsed data; `None` when the data is not an Anthropic event.
fn parse(event: &SseEvent) -> Option<(String, Value)> {
    let value: Value = serde_json::from_str(event.data()).ok()?;
    let kind = value.get("type")?.as_str()?.to_owned();
    Some((kind, value))
}

/// Whether a `message_delta` carries the stop reason that finishes the message.
fn stops(value: &Value) -> bool {
    value
        .pointer("/delta/stop_reason")
        .is_some_and(|r| !r.is_null())
}

fn upstream_error(value: &Value) -> StreamState {
    let error = value.get("error");
    let text = |field: &str| error.and_then(|e| e.get(field)).and_then(Value::as_str);
    StreamState::UpstreamError {
        overloaded: text("type") == Some("overloaded_error"),
        message: text("message")
            .unwrap_or("the provider failed mid-stream")
            .to_owned(),
    }
}

/// An Anthropic stream to an Anthropic client: raw bytes, watched for usage and the end.
#[derive(Default)]
pub struct Passthrough {
    usage: Usage,
    /// The stop reason came: a clean close from here on ends a whole answer.
    stopped: bool,
}

impl StreamTranslator for Passthrough {
    fn event(&mut self, event: &SseEvent) -> Translated {
        let Some((kind, value)) = parse(event) else {
            return Translated {
                frames: vec![event.raw.clone()],
                usage: None,
                state: StreamState::Malformed,
            };
        };
        let mut reported = None;
        let state = match kind.as_str() {
            "message_start" => {
                if let Some(found) = value.pointer("/message/usage") {
                    self.usage = usage(found);
                    reported = Some(self.usage);
                }
                StreamState::Open
            }
            "message_delta" => {
                if let Some(found) = value.get("usage") {
                    self.merge(found);
                    reported = Some(self.usage);
                }
                self.stopped |= stops(&value);
                StreamState::Open
            }
            "message_stop" => StreamState::Done,
            "ping" => StreamState::KeepAlive,
            "error" => upstream_error(&value),
            _ => StreamState::Open,
        };
        Translated {
            frames: vec![event.raw.clone()],
            usage: reported,
            state,
        }
    }

    fn end(&mut self) -> Translated {
        if !self.stopped {
            return Translated {
                frames: Vec::new(),
                usage: None,
                state: StreamState::Truncated,
            };
        }
        Translated {
            frames: vec![named_event(
                "message_stop",
                &json!({"type": "message_stop"}),
            )],
            usage: None,
            state: StreamState::Done,
        }
    }

    fn error_event(&self, message: &str, code: &str) -> Bytes {
        stream_error_event(message, code == "overloaded")
    }
}

impl Passthrough {
    /// `message_delta` usage is cumulative; it may restate input tokens or only give output.
    fn merge(&mut self, found: &Value) {
        let delta = usage(found);
        if delta.prompt_tokens > 0 {
            self.usage.prompt_tokens = delta.prompt_tokens;
        }
        self.usage.completion_tokens = delta.completion_tokens;
    }
}

/// Reads Anthropic's events as OpenAI chunks, for OpenAI clients.
#[derive(Default)]
pub struct AnthropicSource {
    id: String,
    model: String,
    created: u64,
    usage: Usage,
    /// Prompt tokens read from Anthropic's cache: OpenAI's `cached_tokens`.
    cached: u64,
    /// Content block index → the OpenAI tool-call index it streams into.
    tool_calls: BTreeMap<u64, usize>,
    /// The stop reason came: a clean close from here on ends a whole answer.
    stopped: bool,
}

impl AnthropicSource {
    fn chunk(&self, delta: Value, finish_reason: Option<&str>) -> Value {
        json!({
            "id": self.id,
            "object": "chat.completion.chunk",
            "created": self.created,
            "model": self.model,
            "choices": [{"index": 0, "delta": delta, "logprobs": null, "finish_reason": finish_reason}],
        })
    }

    /// The usage-only chunk that ends the answer, as OpenAI sends it last.
    fn usage_chunk(&self) -> Value {
        let Usage {
            prompt_tokens,
            completion_tokens,
        } = self.usage;
        let mut chunk = self.chunk(json!({}), None);
        chunk["choices"] = json!([]);
        chunk["usage"] = json!({
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
            "prompt_tokens_details": {"cached_tokens": self.cached},
        });
        chunk
    }

    fn read_cached(&mut self, usage: &Value) {
        if let Some(cached) = usage.get("cache_read_input_tokens").and_then(Value::as_u64) {
            self.cached = cached;
        }
    }

    fn tool_delta(&self, index: usize, call: Value) -> Value {
        let mut call = call;
        call["index"] = json!(index);
        self.chunk(json!({"tool_calls": [call]}), None)
    }
}

impl ChunkSource for AnthropicSource {
    fn event(&mut self, event: &SseEvent, chunks: &mut Vec<Value>) -> StreamState {
        let Some((kind, value)) = parse(event) else {
            return StreamState::Malformed;
        };
        let block_index = value.get("index").and_then(Value::as_u64).unwrap_or(0);
        match kind.as_str() {
            "message_start" => {
                let message = value.get("message").unwrap_or(&Value::Null);
                let text = |field: &str| message.get(field).and_then(Value::as_str).unwrap_or("");
                self.id = text("id").to_owned();
                self.model = text("model").to_owned();
                self.created = unix_now();
                if let Some(found) = message.get("usage") {
                    self.usage = usage(found);
                    self.read_cached(found);
                }
                chunks.push(self.chunk(json!({"role": "assistant", "content": ""}), None));
            }
            "content_block_start" => {
                let block = value.get("content_block").unwrap_or(&Value::Null);
                match block.get("type").and_then(Value::as_str) {
                    Some("text") => {
                        let text = block.get("text").and_then(Value::as_str).unwrap_or("");
                        if !text.is_empty() {
                            chunks.push(self.chunk(json!({"content": text}), None));
                        }
                    }
                    Some("tool_use") => {
                        let index = self.tool_calls.len();
                        self.tool_calls.insert(block_index, index);
                        let call = json!({
                            "id": block.get("id").cloned().unwrap_or(json!("")),
                            "type": "function",
                            "function": {"name": block.get("name").cloned().unwrap_or(json!("")), "arguments": ""},
                        });
                        chunks.push(self.tool_delta(index, call));
                    }
                    _ => {}
                }
            }
            "content_block_delta" => {
                let delta = value.get("delta").unwrap_or(&Value::Null);
                match delta.get("type").and_then(Value::as_str) {
                    Some("text_delta") => {
                        let text = delta.get("text").and_then(Value::as_str).unwrap_or("");
                        chunks.push(self.chunk(json!({"content": text}), None));
                    }
                    Some("input_json_delta") => {
                        if let Some(&index) = self.tool_calls.get(&block_index) {
                            let partial = delta.get("partial_json").cloned().unwrap_or(json!(""));
                            let call = json!({"function": {"arguments": partial}});
                            chunks.push(self.tool_delta(index, call));
                        }
                    }
                    // Thinking, signatures and citations have no OpenAI counterpart.
                    _ => {}
                }
            }
            "message_delta" => {
                if let Some(found) = value.get("usage") {
                    self.read_cached(found);
                    let delta = usage(found);
                    if delta.prompt_tokens > 0 {
                        self.usage.prompt_tokens = delta.prompt_tokens;
                    }
                    self.usage.completion_tokens = delta.completion_tokens;
                }
                self.stopped |= stops(&value);
                let stop_reason = value.pointer("/delta/stop_reason").and_then(Value::as_str);
                if stop_reason.is_some() {
                    let finish = finish_reason(stop_reason);
                    chunks.push(self.chunk(json!({}), Some(finish)));
                }
            }
            "message_stop" => {
                chunks.push(self.usage_chunk());
                return StreamState::Done;
            }
            "ping" => return StreamState::KeepAlive,
            "error" => return upstream_error(&value),
            _ => {}
        }
        StreamState::Open
    }

    fn end(&mut self, chunks: &mut Vec<Value>) -> StreamState {
        if !self.stopped {
            return StreamState::Truncated;
        }
        chunks.push(self.usage_chunk());
        StreamState::Done
    }
}

#[cfg(test)]
mod tests;
