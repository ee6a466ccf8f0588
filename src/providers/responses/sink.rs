//! Chat chunks written as the Responses API's stream events, for a translated step.
//!
//! The sequence is OpenAI's: `response.created`, `response.in_progress`, then per output
//! item `response.output_item.added`, its content part or argument deltas, and
//! `response.output_item.done`; at the end `response.completed` with the whole Response.
//! Every event carries its `sequence_number`. A break ends the stream with an `error` event.

use bytes::Bytes;
use serde_json::{Value, json};

use super::object::{self, Echo};
use crate::providers::stream::{ChunkSink, named_event};

/// A function call being streamed.
struct Call {
    id: String,
    call_id: String,
    name: String,
    arguments: String,
    output_index: usize,
}

/// Writes Responses events from chat chunks.
pub struct ResponsesSink {
    echo: Echo,
    model: String,
    sequence: u64,
    started: bool,
    /// Items finished so far, in output order.
    output: Vec<Value>,
    /// The message item being streamed: its id, output index and text so far.
    message: Option<(String, usize, String)>,
    /// A refusal being streamed, as a message item of its own with one `refusal` part.
    refusal: Option<(String, usize, String)>,
    /// Function calls by their chat index.
    calls: Vec<(u64, Call)>,
    finish_reason: Option<String>,
    usage: Value,
}

impl ResponsesSink {
    /// A sink for the request that `echo` repeats.
    pub fn new(echo: Echo) -> ResponsesSink {
        ResponsesSink {
            echo,
            model: String::new(),
            sequence: 0,
            started: false,
            output: Vec::new(),
            message: None,
            refusal: None,
            calls: Vec::new(),
            finish_reason: None,
            usage: Value::Null,
        }
    }

    fn emit(&mut self, out: &mut Vec<Bytes>, kind: &str, mut event: Value) {
        event["type"] = json!(kind);
        event["sequence_number"] = json!(self.sequence);
        self.sequence += 1;
        out.push(named_event(kind, &event));
    }

    fn snapshot(&self, status: &str) -> Value {
        self.echo
            .response(&self.model, status, self.output.clone(), self.usage.clone())
    }

    fn start(&mut self, out: &mut Vec<Bytes>) {
        if self.started {
            return;
        }
        self.started = true;
        let response = self.snapshot("in_progress");
        self.emit(out, "response.created", json!({"response": response}));
        self.emit(out, "response.in_progress", json!({"response": response}));
    }

    fn text(&mut self, delta: &str, out: &mut Vec<Bytes>) {
        if self.message.is_none() {
            let id = object::item_id("msg");
            let index = self.next_index();
            let item = json!({"id": id, "type": "message", "role": "assistant",
                              "status": "in_progress", "content": []});
            self.emit(
                out,
                "response.output_item.added",
                json!({"output_index": index, "item": item}),
            );
            self.emit(
                out,
                "response.content_part.added",
                json!({
                "item_id": id, "output_index": index, "content_index": 0,
                "part": object::output_text("")}),
            );
            self.message = Some((id, index, String::new()));
        }
        let Some((id, index, text)) = self.message.as_mut() else {
            return;
        };
        text.push_str(delta);
        let event = json!({"item_id": id.clone(), "output_index": *index, "content_index": 0,
                           "delta": delta, "logprobs": []});
        self.emit(out, "response.output_text.delta", event);
    }

    fn close_message(&mut self, status: &str, out: &mut Vec<Bytes>) {
        let Some((id, index, text)) = self.message.take() else {
            return;
        };
        self.emit(out, "response.output_text.done", json!({
            "item_id": id, "output_index": index, "content_index": 0, "text": text, "logprobs": []}));
        self.emit(
            out,
            "response.content_part.done",
            json!({
            "item_id": id, "output_index": index, "content_index": 0,
            "part": object::output_text(&text)}),
        );
        let item = object::message_item(&id, status, &text, None);
        self.emit(
            out,
            "response.output_item.done",
            json!({"output_index": index, "item": item.clone()}),
        );
        self.output.push(item);
    }

    fn next_index(&self) -> usize {
        self.output.len()
            + usize::from(self.message.is_some())
            + usize::from(self.refusal.is_some())
            + self.calls.len()
    }

    fn refusal(&mut self, delta: &str, out: &mut Vec<Bytes>) {
        if self.refusal.is_none() {
            let id = object::item_id("msg");
            let index = self.next_index();
            let item = json!({"id": id, "type": "message", "role": "assistant",
                              "status": "in_progress", "content": []});
            self.emit(
                out,
                "response.output_item.added",
                json!({"output_index": index, "item": item}),
            );
            let part = json!({"type": "refusal", "refusal": ""});
            self.emit(
                out,
                "response.content_part.added",
                json!({
                "item_id": id, "output_index": index, "content_index": 0, "part": part}),
            );
            self.refusal = Some((id, index, String::new()));
        }
        let Some((id, index, refusal)) = self.refusal.as_mut() else {
            return;
        };
        refusal.push_str(delta);
        let event = json!({"item_id": id.clone(), "output_index": *index, "content_index": 0, "delta": delta});
        self.emit(out, "response.refusal.delta", event);
    }

    fn close_refusal(&mut self, status: &str, out: &mut Vec<Bytes>) {
        let Some((id, index, refusal)) = self.refusal.take() else {
            return;
        };
        self.emit(
            out,
            "response.refusal.done",
            json!({
            "item_id": id, "output_index": index, "content_index": 0, "refusal": refusal}),
        );
        let part = json!({"type": "refusal", "refusal": refusal});
        self.emit(
            out,
            "response.content_part.done",
            json!({
            "item_id": id, "output_index": index, "content_index": 0, "part": part}),
        );
        let item = json!({"id": id, "type": "message", "role": "assistant", "status": status,
                          "content": [part]});
        self.emit(
            out,
            "response.output_item.done",
            json!({"output_index": index, "item": item.clone()}),
        );
        self.output.push(item);
    }

    fn tool_call(&mut self, call: &Value, out: &mut Vec<Bytes>) {
        let index = call.get("index").and_then(Value::as_u64).unwrap_or(0);
        let function = call.get("function");
        let text = |v: Option<&Value>| v.and_then(Value::as_str).unwrap_or("").to_owned();
        if !self.calls.iter().any(|(i, _)| *i == index) {
            // A call's arguments follow its text: the message items close first.
            self.close_message("completed", out);
            self.close_refusal("completed", out);
            let started = Call {
                id: object::item_id("fc"),
                call_id: text(call.get("id")),
                name: text(function.and_then(|f| f.get("name"))),
                arguments: String::new(),
                output_index: self.next_index(),
            };
            let item = object::function_call(
                &started.id,
                &started.call_id,
                &started.name,
                "",
                "in_progress",
            );
            self.emit(
                out,
                "response.output_item.added",
                json!({"output_index": started.output_index, "item": item}),
            );
            self.calls.push((index, started));
        }
        let delta = text(function.and_then(|f| f.get("arguments")));
        if delta.is_empty() {
            return;
        }
        let Some((_, call)) = self.calls.iter_mut().find(|(i, _)| *i == index) else {
            return;
        };
        call.arguments.push_str(&delta);
        let event =
            json!({"item_id": call.id.clone(), "output_index": call.output_index, "delta": delta});
        self.emit(out, "response.function_call_arguments.delta", event);
    }

    fn close_calls(&mut self, out: &mut Vec<Bytes>) {
        for (_, call) in std::mem::take(&mut self.calls) {
            self.emit(
                out,
                "response.function_call_arguments.done",
                json!({
                "item_id": call.id, "output_index": call.output_index,
                "name": call.name, "arguments": call.arguments}),
            );
            let item = object::function_call(
                &call.id,
                &call.call_id,
                &call.name,
                &call.arguments,
                "completed",
            );
            self.emit(
                out,
                "response.output_item.done",
                json!({"output_index": call.output_index, "item": item.clone()}),
            );
            self.output.push(item);
        }
    }
}

impl ChunkSink for ResponsesSink {
    fn chunk(&mut self, chunk: &Value, out: &mut Vec<Bytes>) {
        if let Some(model) = chunk
            .get("model")
            .and_then(Value::as_str)
            .filter(|m| !m.is_empty())
        {
            self.model = model.to_owned();
        }
        self.start(out);
        if let Some(usage) = chunk.get("usage").filter(|u| u.is_object()) {
            self.usage = object::usage(Some(usage));
        }
        let Some(choice) = chunk
            .get("choices")
            .and_then(Value::as_array)
            .and_then(|c| c.first())
        else {
            return;
        };
        let delta = choice.get("delta");
        if let Some(text) = delta.and_then(|d| d.get("content")).and_then(Value::as_str)
            && !text.is_empty()
        {
            self.text(text, out);
        }
        if let Some(refusal) = delta.and_then(|d| d.get("refusal")).and_then(Value::as_str)
            && !refusal.is_empty()
        {
            self.refusal(refusal, out);
        }
        for call in delta
            .and_then(|d| d.get("tool_calls"))
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            self.tool_call(call, out);
        }
        if let Some(reason) = choice.get("finish_reason").and_then(Value::as_str) {
            self.finish_reason = Some(reason.to_owned());
        }
    }

    fn done(&mut self, out: &mut Vec<Bytes>) {
        self.start(out);
        let (status, incomplete) = object::finish(self.finish_reason.as_deref());
        let item_status = if status == "completed" {
            "completed"
        } else {
            "incomplete"
        };
        self.close_message(item_status, out);
        self.close_refusal(item_status, out);
        self.close_calls(out);
        let mut response = self.snapshot(status);
        response["incomplete_details"] = incomplete;
        let kind = if status == "completed" {
            response["completed_at"] = json!(object::unix_now());
            "response.completed"
        } else {
            "response.incomplete"
        };
        self.emit(out, kind, json!({"response": response}));
    }

    fn error_event(&self, message: &str, code: &str) -> Bytes {
        error_event(self.sequence, message, code)
    }
}

/// The `error` event that ends a broken stream. It carries the fields of the documented
/// `error` event and, as OpenAI's own API does, the same under `error`: the official SDKs
/// raise their `APIError` on an event whose data has an `error` object.
pub fn error_event(sequence: u64, message: &str, code: &str) -> Bytes {
    named_event(
        "error",
        &json!({
            "type": "error",
            "sequence_number": sequence,
            "code": code,
            "message": message,
            "param": null,
            "error": {"type": "server_error", "code": code, "message": message, "param": null},
        }),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::providers::responses::spec;
    use crate::providers::stream::testing::{names, payloads};
    use serde_json::Map;

    #[test]
    fn text_then_a_call_then_usage_is_the_documented_sequence() {
        let mut sink = ResponsesSink::new(Echo::of(&Map::new()));
        let mut out = Vec::new();
        let chunk = |delta: Value, finish: Value| json!({"model": "m", "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]});
        sink.chunk(
            &chunk(json!({"role": "assistant", "content": "Hi"}), Value::Null),
            &mut out,
        );
        sink.chunk(&chunk(json!({"content": " there"}), Value::Null), &mut out);
        sink.chunk(&chunk(json!({"tool_calls": [{"index": 0, "id": "c1", "function": {"name": "f", "arguments": "{\"a\""}}]}), Value::Null), &mut out);
        sink.chunk(
            &chunk(
                json!({"tool_calls": [{"index": 0, "function": {"arguments": ":1}"}}]}),
                json!("tool_calls"),
            ),
            &mut out,
        );
        sink.chunk(&json!({"model": "m", "choices": [], "usage": {"prompt_tokens": 2, "completion_tokens": 3}}), &mut out);
        sink.done(&mut out);
        assert_eq!(
            names(&out),
            [
                "response.created",
                "response.in_progress",
                "response.output_item.added",
                "response.content_part.added",
                "response.output_text.delta",
                "response.output_text.delta",
                "response.output_text.done",
                "response.content_part.done",
                "response.output_item.done",
                "response.output_item.added",
                "response.function_call_arguments.delta",
                "response.function_call_arguments.delta",
                "response.function_call_arguments.done",
                "response.output_item.done",
                "response.completed",
            ]
        );
        let events = payloads(&out);
        for (i, event) in events.iter().enumerate() {
            assert_eq!(event["sequence_number"], i as u64);
        }
        for event in [&events[0], &events[1], &events[14]] {
            let response = event["response"].as_object().unwrap();
            assert!(!spec::lacks_any(response), "{event}");
        }
        assert_eq!(events[0]["response"]["completed_at"], Value::Null);
        let completed = &events[14]["response"];
        assert!(completed["completed_at"].is_u64());
        assert_eq!(completed["status"], "completed");
        assert_eq!(completed["output"][0]["content"][0]["text"], "Hi there");
        assert_eq!(completed["output"][1]["arguments"], "{\"a\":1}");
        assert_eq!(completed["output"][1]["call_id"], "c1");
        assert_eq!(completed["usage"]["output_tokens"], 3);
        let error = payloads(&[sink.error_event("boom", "reset")]);
        assert_eq!(error[0]["sequence_number"], 15);
        assert_eq!(error[0]["type"], "error");
        assert_eq!(error[0]["error"]["message"], "boom");
    }

    #[test]
    fn a_streamed_refusal_is_a_refusal_part() {
        let mut sink = ResponsesSink::new(Echo::of(&Map::new()));
        let mut out = Vec::new();
        let chunk = |delta: Value, finish: Value| json!({"model": "m", "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]});
        sink.chunk(
            &chunk(
                json!({"role": "assistant", "refusal": "I can't"}),
                Value::Null,
            ),
            &mut out,
        );
        sink.chunk(
            &chunk(json!({"refusal": " help."}), json!("stop")),
            &mut out,
        );
        sink.done(&mut out);
        let events = payloads(&out);
        let deltas: String = events
            .iter()
            .filter(|e| e["type"] == "response.refusal.delta")
            .filter_map(|e| e["delta"].as_str())
            .collect();
        assert_eq!(deltas, "I can't help.");
        let completed = &events.last().unwrap()["response"];
        assert_eq!(
            completed["output"][0]["content"][0],
            json!({"type": "refusal", "refusal": "I can't help."})
        );
    }
}
