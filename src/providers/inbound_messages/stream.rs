//! OpenAI chunks written as Anthropic's event stream, for `/v1/messages` clients.
//!
//! The first chunk opens the message (`message_start`). Content deltas open a text block,
//! each new tool call opens a `tool_use` block fed by `input_json_delta`s, and a block closes
//! when the next one opens or the choice finishes. At the end come `message_delta` (stop
//! reason and usage, which OpenAI reports last) and `message_stop`.

use std::collections::BTreeMap;

use bytes::Bytes;
use serde_json::{Value, json};

use super::response::{anthropic_usage, stop_reason};
use super::stream_error_event;
use crate::providers::stream::{ChunkSink, chunk_usage, named_event};

/// The block being written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Open {
    Text(u64),
    Tool(u64),
}

/// Writes OpenAI chunks as Anthropic events.
#[derive(Default)]
pub struct AnthropicSink {
    started: bool,
    open: Option<Open>,
    next_block: u64,
    /// OpenAI tool-call index → its `tool_use` block's index.
    tools: BTreeMap<u64, u64>,
    stop_reason: Option<&'static str>,
    /// The last OpenAI `usage` seen (it comes last, cumulative).
    usage: Value,
    /// The model refused: the stop reason says so.
    refused: bool,
}

impl AnthropicSink {
    fn start(&mut self, chunk: &Value, out: &mut Vec<Bytes>) {
        if self.started {
            return;
        }
        self.started = true;
        let message = json!({
            "id": chunk.get("id").cloned().unwrap_or(json!("")),
            "type": "message",
            "role": "assistant",
            "model": chunk.get("model").cloned().unwrap_or(json!("")),
            "content": [],
            "stop_reason": null,
            "stop_sequence": null,
            "usage": {"input_tokens": 0, "output_tokens": 0},
        });
        out.push(named_event(
            "message_start",
            &json!({"type": "message_start", "message": message}),
        ));
    }

    fn close(&mut self, out: &mut Vec<Bytes>) {
        if let Some(Open::Text(index) | Open::Tool(index)) = self.open.take() {
            out.push(named_event(
                "content_block_stop",
                &json!({"type": "content_block_stop", "index": index}),
            ));
        }
    }

    fn open_block(&mut self, block: Value, out: &mut Vec<Bytes>) -> u64 {
        self.close(out);
        let index = self.next_block;
        self.next_block += 1;
        out.push(named_event(
            "content_block_start",
            &json!({"type": "content_block_start", "index": index, "content_block": block}),
        ));
        index
    }

    fn delta(index: u64, delta: Value, out: &mut Vec<Bytes>) {
        out.push(named_event(
            "content_block_delta",
            &json!({"type": "content_block_delta", "index": index, "delta": delta}),
        ));
    }

    fn text(&mut self, text: &str, out: &mut Vec<Bytes>) {
        let index = match self.open {
            Some(Open::Text(index)) => index,
            _ => {
                let index = self.open_block(json!({"type": "text", "text": ""}), out);
                self.open = Some(Open::Text(index));
                index
            }
        };
        Self::delta(index, json!({"type": "text_delta", "text": text}), out);
    }

    fn tool_call(&mut self, call: &Value, out: &mut Vec<Bytes>) {
        let position = call.get("index").and_then(Value::as_u64).unwrap_or(0);
        let index = match self.tools.get(&position) {
            Some(&index) => index,
            None => {
                let block = json!({
                    "type": "tool_use",
                    "id": call.get("id").cloned().unwrap_or(json!("")),
                    "name": call.pointer("/function/name").cloned().unwrap_or(json!("")),
                    "input": {},
                });
                let index = self.open_block(block, out);
                self.open = Some(Open::Tool(index));
                self.tools.insert(position, index);
                index
            }
        };
        let arguments = call
            .pointer("/function/arguments")
            .and_then(Value::as_str)
            .unwrap_or("");
        if !arguments.is_empty() {
            let delta = json!({"type": "input_json_delta", "partial_json": arguments});
            Self::delta(index, delta, out);
        }
    }
}

impl ChunkSink for AnthropicSink {
    fn chunk(&mut self, chunk: &Value, out: &mut Vec<Bytes>) {
        let usage = chunk_usage(chunk);
        let no_choices = chunk
            .get("choices")
            .and_then(Value::as_array)
            .is_none_or(Vec::is_empty);
        // Azure opens its streams with a chunk of content-filter results only, without an id
        // or model: the message starts with the first chunk that says something.
        if no_choices && usage.is_none() {
            return;
        }
        self.start(chunk, out);
        if usage.is_some() {
            self.usage = chunk.get("usage").cloned().unwrap_or_default();
        }
        // One choice: the gateway never asks for more (`n` > 1 streams do not translate).
        let Some(choice) = chunk.pointer("/choices/0") else {
            return;
        };
        let delta = choice.get("delta").unwrap_or(&Value::Null);
        if let Some(text) = delta
            .get("content")
            .and_then(Value::as_str)
            .filter(|t| !t.is_empty())
        {
            self.text(text, out);
        }
        // A refusal streams as text, and the message stops for it.
        if let Some(refusal) = delta
            .get("refusal")
            .and_then(Value::as_str)
            .filter(|t| !t.is_empty())
        {
            self.refused = true;
            self.text(refusal, out);
        }
        if let Some(calls) = delta.get("tool_calls").and_then(Value::as_array) {
            for call in calls {
                self.tool_call(call, out);
            }
        }
        if let Some(finish) = choice.get("finish_reason").and_then(Value::as_str) {
            self.stop_reason = Some(match self.refused {
                true => "refusal",
                false => stop_reason(Some(finish)),
            });
            self.close(out);
        }
    }

    fn done(&mut self, out: &mut Vec<Bytes>) {
        self.start(&Value::Null, out);
        self.close(out);
        let delta = json!({
            "type": "message_delta",
            "delta": {"stop_reason": self.stop_reason.unwrap_or("end_turn"), "stop_sequence": null},
            "usage": anthropic_usage(&self.usage),
        });
        out.push(named_event("message_delta", &delta));
        out.push(named_event(
            "message_stop",
            &json!({"type": "message_stop"}),
        ));
    }

    fn error_event(&self, message: &str, code: &str) -> Bytes {
        stream_error_event(message, code == "overloaded")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::providers::chat_chunks::stream::OpenAiSource;
    use crate::providers::stream::testing::{event, names, payloads, run};
    use crate::providers::stream::{StreamState, Translating};

    /// OpenAI's documented streamed function call, as an Anthropic client receives it (after
    /// the content-filter chunk Azure sends first).
    #[test]
    fn golden_tool_call_stream_as_anthropic_events() {
        let chunks = [
            r#"{"choices":[],"created":0,"id":"","model":"","object":"","prompt_filter_results":[{"prompt_index":0,"content_filter_results":{}}]}"#,
            r#"{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"gpt-4o","choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]}"#,
            r#"{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"gpt-4o","choices":[{"index":0,"delta":{"content":"Let me check."},"finish_reason":null}]}"#,
            r#"{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"gpt-4o","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"call_DdmO9pD3xa9XTPNJ32zg2hcA","type":"function","function":{"name":"get_weather","arguments":""}}]},"finish_reason":null}]}"#,
            r#"{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"gpt-4o","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{\"location\":\""}}]},"finish_reason":null}]}"#,
            r#"{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"gpt-4o","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"Paris\"}"}}]},"finish_reason":null}]}"#,
            r#"{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"gpt-4o","choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}"#,
            r#"{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"gpt-4o","choices":[],"usage":{"prompt_tokens":20,"completion_tokens":9,"total_tokens":29}}"#,
            "[DONE]",
        ];
        let events: Vec<_> = chunks.iter().map(|c| event(None, c)).collect();
        let mut translator = Translating::new(OpenAiSource::default(), AnthropicSink::default());
        let (frames, state, _) = run(&mut translator, &events, false);
        assert_eq!(state, StreamState::Done);
        assert_eq!(
            names(&frames),
            [
                "message_start",
                "content_block_start",
                "content_block_delta",
                "content_block_stop",
                "content_block_start",
                "content_block_delta",
                "content_block_delta",
                "content_block_stop",
                "message_delta",
                "message_stop"
            ]
        );
        let data = payloads(&frames);
        assert_eq!(data[0]["message"]["id"], "chatcmpl-1");
        assert_eq!(data[0]["message"]["content"], json!([]));
        assert_eq!(
            data[1],
            json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}})
        );
        assert_eq!(
            data[2],
            json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Let me check."}})
        );
        assert_eq!(
            data[4],
            json!({"type": "content_block_start", "index": 1, "content_block": {
                "type": "tool_use", "id": "call_DdmO9pD3xa9XTPNJ32zg2hcA", "name": "get_weather", "input": {}}})
        );
        assert_eq!(
            data[5]["delta"],
            json!({"type": "input_json_delta", "partial_json": "{\"location\":\""})
        );
        assert_eq!(
            data[8],
            json!({"type": "message_delta", "delta": {"stop_reason": "tool_use", "stop_sequence": null},
                   "usage": {"input_tokens": 20, "cache_creation_input_tokens": 0,
                             "cache_read_input_tokens": 0, "output_tokens": 9}})
        );
        assert_eq!(data[9], json!({"type": "message_stop"}));
    }

    #[test]
    fn streamed_cached_tokens_are_cache_reads() {
        let chunks = [
            r#"{"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":"Hi"},"finish_reason":"stop"}]}"#,
            r#"{"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[],"usage":{"prompt_tokens":2006,"completion_tokens":3,"total_tokens":2009,"prompt_tokens_details":{"cached_tokens":1920}}}"#,
            "[DONE]",
        ];
        let events: Vec<_> = chunks.iter().map(|c| event(None, c)).collect();
        let mut translator = Translating::new(OpenAiSource::default(), AnthropicSink::default());
        let (frames, _, _) = run(&mut translator, &events, false);
        let data = payloads(&frames);
        let delta = data.iter().find(|d| d["type"] == "message_delta").unwrap();
        assert_eq!(
            delta["usage"],
            json!({"input_tokens": 86, "cache_creation_input_tokens": 0,
                   "cache_read_input_tokens": 1920, "output_tokens": 3})
        );
    }

    #[test]
    fn a_failure_is_an_anthropic_error_event() {
        let sink = AnthropicSink::default();
        let frame = sink.error_event("the upstream connection broke mid-stream", "reset");
        assert_eq!(names(std::slice::from_ref(&frame)), ["error"]);
        assert_eq!(
            payloads(&[frame])[0],
            json!({"type": "error", "error": {"type": "api_error", "message": "the upstream connection broke mid-stream"}})
        );
    }
}
