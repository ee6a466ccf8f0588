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

use std::collections::HashMap;

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
    let value: Value = serde_json::from_str(&event.data).ok()?;
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
    tool_calls: HashMap<u64, usize>,
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
mod tests {
    use super::*;
    use crate::providers::openai::stream::OpenAiSink;
    use crate::providers::stream::Translating;
    use crate::providers::stream::testing::{event, names, payloads, run};

    /// The event sequence of Anthropic's streaming guide for a tool call, abridged.
    fn tool_stream() -> Vec<SseEvent> {
        [
            ("message_start", r#"{"type":"message_start","message":{"id":"msg_014p7gG3wDgGV9EUtLvnow3U","type":"message","role":"assistant","model":"claude-sonnet-4-5","stop_sequence":null,"usage":{"input_tokens":472,"output_tokens":2},"content":[],"stop_reason":null}}"#),
            ("content_block_start", r#"{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}"#),
            ("ping", r#"{"type": "ping"}"#),
            ("content_block_delta", r#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Okay"}}"#),
            ("content_block_stop", r#"{"type":"content_block_stop","index":0}"#),
            ("content_block_start", r#"{"type":"content_block_start","index":1,"content_block":{"type":"tool_use","id":"toolu_01T1x1fJ34qAmk2tNTrN7Up6","name":"get_weather","input":{}}}"#),
            ("content_block_delta", r#"{"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":""}}"#),
            ("content_block_delta", r#"{"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"{\"location\":"}}"#),
            ("content_block_delta", r#"{"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":" \"San Francisco, CA\"}"}}"#),
            ("content_block_stop", r#"{"type":"content_block_stop","index":1}"#),
            ("message_delta", r#"{"type":"message_delta","delta":{"stop_reason":"tool_use","stop_sequence":null},"usage":{"output_tokens":89}}"#),
            ("message_stop", r#"{"type":"message_stop"}"#),
        ]
        .iter()
        .map(|(name, data)| event(Some(name), data))
        .collect()
    }

    #[test]
    fn golden_tool_stream_as_openai_chunks() {
        let mut translator = Translating::new(AnthropicSource::default(), OpenAiSink::new(true));
        let (frames, state, usage) = run(&mut translator, &tool_stream(), false);
        assert_eq!(state, StreamState::Done);
        assert_eq!(
            usage,
            Some(Usage {
                prompt_tokens: 472,
                completion_tokens: 89
            })
        );
        let deltas: Vec<Value> = payloads(&frames)
            .into_iter()
            .map(|p| match p.get("choices").and_then(|c| c.get(0)) {
                Some(choice) => json!([choice["delta"], choice["finish_reason"]]),
                None => p.get("usage").cloned().unwrap_or(p),
            })
            .collect();
        assert_eq!(
            deltas,
            vec![
                json!([{"role": "assistant", "content": ""}, null]),
                json!([{"content": "Okay"}, null]),
                json!([{"tool_calls": [{"index": 0, "id": "toolu_01T1x1fJ34qAmk2tNTrN7Up6", "type": "function", "function": {"name": "get_weather", "arguments": ""}}]}, null]),
                json!([{"tool_calls": [{"index": 0, "function": {"arguments": ""}}]}, null]),
                json!([{"tool_calls": [{"index": 0, "function": {"arguments": "{\"location\":"}}]}, null]),
                json!([{"tool_calls": [{"index": 0, "function": {"arguments": " \"San Francisco, CA\"}"}}]}, null]),
                json!([{}, "tool_calls"]),
                json!({"prompt_tokens": 472, "completion_tokens": 89, "total_tokens": 561,
                       "prompt_tokens_details": {"cached_tokens": 0}}),
                json!("[DONE]"),
            ]
        );
        // The ping came through as a comment, which OpenAI's SDK skips.
        assert!(frames.iter().any(|f| f.starts_with(b": ping")));
    }

    #[test]
    fn streamed_cache_reads_are_openais_cached_tokens() {
        let mut events = tool_stream();
        events[0] = event(
            Some("message_start"),
            r#"{"type":"message_start","message":{"id":"msg_1","type":"message","role":"assistant","model":"claude-sonnet-4-5","usage":{"input_tokens":10,"cache_creation_input_tokens":200,"cache_read_input_tokens":1800,"output_tokens":1},"content":[],"stop_reason":null}}"#,
        );
        let mut translator = Translating::new(AnthropicSource::default(), OpenAiSink::new(true));
        let (frames, _, usage) = run(&mut translator, &events, false);
        assert_eq!(usage.map(|u| u.prompt_tokens), Some(2010));
        let last_usage = payloads(&frames)
            .into_iter()
            .filter_map(|p| p.get("usage").filter(|u| u.is_object()).cloned())
            .next_back()
            .unwrap();
        assert_eq!(last_usage["prompt_tokens"], 2010);
        assert_eq!(last_usage["prompt_tokens_details"]["cached_tokens"], 1800);
    }

    #[test]
    fn thinking_and_signatures_pass_unchanged_to_anthropic_clients() {
        let events: Vec<SseEvent> = [
            ("message_start", r#"{"type":"message_start","message":{"id":"msg_1","type":"message","role":"assistant","model":"claude-sonnet-4-5","usage":{"input_tokens":10,"output_tokens":1},"content":[],"stop_reason":null}}"#),
            ("content_block_start", r#"{"type":"content_block_start","index":0,"content_block":{"type":"thinking","thinking":"","signature":""}}"#),
            ("content_block_delta", r#"{"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":"Let me think."}}"#),
            ("content_block_delta", r#"{"type":"content_block_delta","index":0,"delta":{"type":"signature_delta","signature":"EqQBCgIYAhIM1gbcDa9GJwZA2b3hGgxBdjrkzLoky3dl1pkiMOYds"}}"#),
            ("content_block_stop", r#"{"type":"content_block_stop","index":0}"#),
            ("message_delta", r#"{"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},"usage":{"output_tokens":9}}"#),
            ("message_stop", r#"{"type":"message_stop"}"#),
        ]
        .iter()
        .map(|(name, data)| event(Some(name), data))
        .collect();
        let (frames, state, _) = run(&mut Passthrough::default(), &events, false);
        assert_eq!(state, StreamState::Done);
        let raw: Vec<_> = events.iter().map(|e| e.raw.clone()).collect();
        assert_eq!(frames, raw);
        // To an OpenAI client the thinking is not content.
        let mut translator = Translating::new(AnthropicSource::default(), OpenAiSink::new(false));
        let (frames, _, _) = run(&mut translator, &events, false);
        let text: String = frames
            .iter()
            .map(|f| String::from_utf8_lossy(f).into_owned())
            .collect();
        assert!(!text.contains("Let me think."), "{text}");
        assert!(!text.contains("EqQBCgIYAhIM"), "{text}");
    }

    #[test]
    fn an_error_event_is_a_mid_stream_failure() {
        let events = [
            tool_stream()[0].clone(),
            event(
                Some("error"),
                r#"{"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}"#,
            ),
        ];
        let mut translator = Translating::new(AnthropicSource::default(), OpenAiSink::new(false));
        let (frames, state, _) = run(&mut translator, &events, false);
        assert_eq!(
            state,
            StreamState::UpstreamError {
                overloaded: true,
                message: "Overloaded".into()
            }
        );
        let last = payloads(&frames).pop().unwrap();
        assert_eq!(last["error"]["message"], "Overloaded");
        let (_, state, _) = run(&mut Passthrough::default(), &events, false);
        assert!(matches!(state, StreamState::UpstreamError { .. }));
    }

    #[test]
    fn a_close_after_the_stop_reason_is_a_whole_answer() {
        // Everything up to `message_delta`, without `message_stop`.
        let events = &tool_stream()[..11];
        let (frames, state, _) = run(&mut Passthrough::default(), events, true);
        assert_eq!(state, StreamState::Done);
        assert_eq!(
            names(&frames).last().map(String::as_str),
            Some("message_stop")
        );
        let mut translator = Translating::new(AnthropicSource::default(), OpenAiSink::new(true));
        let (frames, state, usage) = run(&mut translator, events, true);
        assert_eq!(state, StreamState::Done);
        assert_eq!(payloads(&frames).last(), Some(&json!("[DONE]")));
        assert_eq!(usage.map(|u| u.completion_tokens), Some(89));
        // Cut before the stop reason, it is a truncation.
        let (_, state, _) = run(&mut Passthrough::default(), &tool_stream()[..10], true);
        assert_eq!(state, StreamState::Truncated);
        let mut translator = Translating::new(AnthropicSource::default(), OpenAiSink::new(true));
        let (_, state, _) = run(&mut translator, &tool_stream()[..10], true);
        assert_eq!(state, StreamState::Truncated);
    }

    #[test]
    fn the_passthrough_forwards_raw_events_and_reads_usage() {
        let events = tool_stream();
        let (frames, state, usage) = run(&mut Passthrough::default(), &events, false);
        assert_eq!(state, StreamState::Done);
        assert_eq!(frames.len(), events.len());
        assert_eq!(frames[0], events[0].raw);
        assert_eq!(
            usage,
            Some(Usage {
                prompt_tokens: 472,
                completion_tokens: 89
            })
        );
    }
}
