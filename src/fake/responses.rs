//! The fake's Responses API shape (`…/responses`), as OpenAI answers it: a whole Response
//! object, or its stream of named events, each with its `sequence_number`.

use bytes::Bytes;
use serde_json::{Value, json};

use super::answer::Completion;

/// Events sent before the first text delta: created, in progress, item and part added.
const OPENING_EVENTS: u64 = 4;

fn named(name: &str, mut value: Value, sequence: u64) -> Bytes {
    value["type"] = json!(name);
    value["sequence_number"] = json!(sequence);
    Bytes::from(format!("event: {name}\ndata: {value}\n\n"))
}

impl Completion {
    fn message_id(&self) -> String {
        format!("msg_{}", self.id)
    }

    fn responses_usage(&self) -> Value {
        let output = self.content.split_whitespace().count() as u64;
        json!({
            "input_tokens": self.prompt_tokens,
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": output,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": self.prompt_tokens + output,
        })
    }

    fn responses_output(&self) -> Vec<Value> {
        let mut output = vec![json!({
            "id": self.message_id(), "type": "message", "role": "assistant", "status": "completed",
            "content": [{"type": "output_text", "text": self.content, "annotations": [], "logprobs": []}],
        })];
        for (i, call) in self.tool_calls.iter().enumerate() {
            output.push(json!({
                "id": format!("fc_{}_{i}", self.id), "type": "function_call", "status": "completed",
                "call_id": format!("call_fake_{i}"), "name": call.name,
                "arguments": call.arguments.to_string(),
            }));
        }
        output
    }

    /// The Response object, in `status`, with `output` and `usage`.
    fn response_object(&self, status: &str, output: Vec<Value>, usage: Value) -> Value {
        json!({
            "id": self.id, "object": "response", "created_at": 1_700_000_000, "status": status,
            "error": null, "incomplete_details": null, "instructions": null,
            "max_output_tokens": null, "model": self.model, "output": output,
            "parallel_tool_calls": true, "previous_response_id": null,
            "reasoning": {"effort": null, "summary": null}, "store": true, "temperature": 1.0,
            "text": {"format": {"type": "text"}}, "tool_choice": "auto", "tools": [],
            "top_p": 1.0, "truncation": "disabled", "usage": usage, "user": null, "metadata": {},
        })
    }

    /// The whole Response.
    pub fn responses_whole(&self) -> Value {
        self.response_object("completed", self.responses_output(), self.responses_usage())
    }

    /// The events for content piece `i`; the first also opens the response and its message.
    pub fn responses_content_frames(&self, i: usize, piece: &str) -> Vec<Bytes> {
        let mut frames = Vec::new();
        let id = self.message_id();
        if i == 0 {
            let response = self.response_object("in_progress", vec![], Value::Null);
            frames.push(named("response.created", json!({"response": response}), 0));
            frames.push(named(
                "response.in_progress",
                json!({"response": response}),
                1,
            ));
            let item = json!({"id": id, "type": "message", "role": "assistant", "status": "in_progress", "content": []});
            frames.push(named(
                "response.output_item.added",
                json!({"output_index": 0, "item": item}),
                2,
            ));
            let part =
                json!({"type": "output_text", "text": "", "annotations": [], "logprobs": []});
            frames.push(named(
                "response.content_part.added",
                json!({"item_id": id, "output_index": 0, "content_index": 0, "part": part}),
                3,
            ));
        }
        frames.push(named(
            "response.output_text.delta",
            json!({"item_id": id, "output_index": 0, "content_index": 0, "delta": piece, "logprobs": []}),
            OPENING_EVENTS + i as u64,
        ));
        frames
    }

    /// The events after the content: the items closed, the calls, and `response.completed`.
    pub fn responses_tail_frames(&self) -> Vec<Bytes> {
        let mut sequence = OPENING_EVENTS + self.chunks as u64;
        let mut next = || {
            sequence += 1;
            sequence - 1
        };
        let output = self.responses_output();
        let id = self.message_id();
        let mut frames = vec![
            named(
                "response.output_text.done",
                json!({"item_id": id, "output_index": 0, "content_index": 0, "text": self.content, "logprobs": []}),
                next(),
            ),
            named(
                "response.content_part.done",
                json!({"item_id": id, "output_index": 0, "content_index": 0, "part": output[0]["content"][0]}),
                next(),
            ),
            named(
                "response.output_item.done",
                json!({"output_index": 0, "item": output[0]}),
                next(),
            ),
        ];
        for (index, item) in output.iter().enumerate().skip(1) {
            let mut added = item.clone();
            added["arguments"] = json!("");
            added["status"] = json!("in_progress");
            frames.push(named(
                "response.output_item.added",
                json!({"output_index": index, "item": added}),
                next(),
            ));
            frames.push(named(
                "response.function_call_arguments.delta",
                json!({"item_id": item["id"], "output_index": index, "delta": item["arguments"]}),
                next(),
            ));
            frames.push(named(
                "response.function_call_arguments.done",
                json!({"item_id": item["id"], "output_index": index, "name": item["name"], "arguments": item["arguments"]}),
                next(),
            ));
            frames.push(named(
                "response.output_item.done",
                json!({"output_index": index, "item": item}),
                next(),
            ));
        }
        let response = self.responses_whole();
        frames.push(named(
            "response.completed",
            json!({"response": response}),
            next(),
        ));
        frames
    }

    /// A failure mid-stream, as OpenAI reports one: `response.failed`.
    pub fn responses_stream_error(&self, message: Option<&str>) -> Bytes {
        let mut response = self.response_object("failed", vec![], Value::Null);
        response["error"] = json!({"code": "server_error",
            "message": message.unwrap_or("fake upstream failed mid-stream")});
        named("response.failed", json!({"response": response}), 1_000)
    }
}
