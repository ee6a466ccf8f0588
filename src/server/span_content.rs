//! What a sampled request's spans tell of its content, in the GenAI conventions' shapes
//! (v1.37): every answer's finish reasons, and with `[otel] capture_content` the system
//! instructions, the messages in and the messages out, as JSON. Texts are cut so that one
//! span carries at most `max_content_bytes` of content; the JSON around them stays whole.

use std::sync::Arc;

use serde_json::{Map, Value, json};

use super::response_cache::Assembler;
use crate::providers::{ClientFormat, ClientRequest, Operation};
use crate::telemetry::RequestRecord;
use crate::telemetry::trace::{SpanDetail, Tracing};

/// Begins a sampled request's span detail: the caller's role, and with capture on, what the
/// request holds.
pub fn begin(
    record: &mut RequestRecord,
    tracing: &Tracing,
    role: &Arc<str>,
    request: &ClientRequest,
) {
    let mut detail = SpanDetail {
        role: Some(role.clone()),
        ..SpanDetail::default()
    };
    if let Some(max) = tracing.content_bytes() {
        detail.content_room = Some(capture_input(&mut detail, request, max));
    }
    record.detail = Some(Box::new(detail));
}

/// Reads a whole answer the client got, `body` in `kind`'s format, into a sampled record.
pub fn answered(record: &mut RequestRecord, kind: (Operation, ClientFormat), body: &[u8]) {
    let Some(detail) = record.detail.as_deref_mut() else {
        return;
    };
    if let (None, Some(field)) = (detail.content_room, reason_field(kind)) {
        // Only the finish reasons: read off the bytes, not a parsed tree.
        let mut reasons = scan_reasons(body, field);
        if kind.1 == ClientFormat::Anthropic {
            // A message has one, after its content, where a tool's input (an object) may
            // hold a key of the same name.
            reasons.drain(..reasons.len().saturating_sub(1));
        }
        detail.finish_reasons = reasons;
        return;
    }
    if let Ok(answer) = serde_json::from_slice::<Value>(body) {
        let room = detail.content_room;
        capture_output(detail, kind, &answer, room);
    }
}

/// A sampled stream's answer, gathered from the events the client got, for its span: put
/// back together when its content is captured, else only its finish reasons, read off the
/// events' bytes (a parse of every event cost four times the event's own forwarding).
pub struct StreamTrace {
    assembler: Option<Assembler>,
    /// Without capture: a finder of the field that holds a finish reason (built once, not
    /// per event), and the reasons seen so far.
    reasons: Option<(memchr::memmem::Finder<'static>, Vec<String>)>,
    kind: (Operation, ClientFormat),
}

impl StreamTrace {
    /// For a request whose record has span detail; `None` for the rest.
    pub fn of(record: &RequestRecord, request: &ClientRequest) -> Option<StreamTrace> {
        let detail = record.detail.as_ref()?;
        let kind = (request.operation, request.format);
        let reasons = reason_field(kind)
            .filter(|_| detail.content_room.is_none())
            .map(|field| (memchr::memmem::Finder::new(field), Vec::new()));
        let assembler = match reasons {
            Some(_) => None,
            None => Some(Assembler::new(request.operation, request.format)),
        };
        Some(StreamTrace {
            assembler,
            reasons,
            kind,
        })
    }

    /// Reads the events of one frame the client got.
    pub fn feed(&mut self, frame: &[u8]) {
        if let Some((finder, seen)) = self.reasons.as_mut() {
            seen.extend(scan_with(frame, finder));
            return;
        }
        if let Some(assembler) = self.assembler.as_mut()
            && !assembler.feed(frame)
        {
            self.assembler = None;
        }
    }

    /// The stream ended cleanly: its answer into the record.
    pub fn finish(self, record: &mut RequestRecord) {
        if let (Some((_, seen)), Some(detail)) = (self.reasons, record.detail.as_deref_mut()) {
            detail.finish_reasons = seen;
            return;
        }
        let usage = record.tokens_in.zip(record.tokens_out);
        let (Some(assembler), Some(detail)) = (self.assembler, record.detail.as_deref_mut()) else {
            return;
        };
        if let Some(answer) = assembler.answer(usage) {
            let room = detail.content_room;
            capture_output(detail, self.kind, &answer, room);
        }
    }
}

/// The JSON field a format's answer (and its stream's events) says why a choice ended in;
/// `None` for the Responses API, whose reason is read from the whole answer.
fn reason_field((operation, format): (Operation, ClientFormat)) -> Option<&'static [u8]> {
    match (operation, format) {
        (Operation::Chat | Operation::Completions, ClientFormat::OpenAi) => {
            Some(b"\"finish_reason\"")
        }
        (Operation::Chat, ClientFormat::Anthropic) => Some(b"\"stop_reason\""),
        _ => None,
    }
}

/// Each string value of `field` in `json`, in order (`null`s skipped). Finish reasons are
/// plain words, so a string with an escape is passed over rather than decoded.
fn scan_reasons(json: &[u8], field: &[u8]) -> Vec<String> {
    scan_with(json, &memchr::memmem::Finder::new(field)).collect()
}

/// [`scan_reasons`] with a finder already built (once a stream, not once an event).
fn scan_with<'a>(
    json: &'a [u8],
    finder: &'a memchr::memmem::Finder<'_>,
) -> impl Iterator<Item = String> + 'a {
    let width = finder.needle().len();
    finder.find_iter(json).filter_map(move |at| {
        let rest = &json[at + width..];
        let rest = rest
            .trim_ascii_start()
            .strip_prefix(b":")?
            .trim_ascii_start();
        let value = rest.strip_prefix(b"\"")?;
        let end = memchr::memchr2(b'"', b'\\', value)?;
        (value[end] == b'"').then(|| String::from_utf8_lossy(&value[..end]).into_owned())
    })
}

/// The bytes of content a span may still take.
struct Room(usize);

impl Room {
    /// As much of `text` as there is room for, cut at a character's edge.
    fn take(&mut self, text: &str) -> String {
        let mut end = text.len().min(self.0);
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        self.0 -= end;
        text[..end].to_owned()
    }

    /// A JSON value as text (tool arguments given as objects), cut as text is.
    fn take_value(&mut self, value: &Value) -> String {
        match value {
            Value::String(text) => self.take(text),
            other => self.take(&other.to_string()),
        }
    }
}

/// Puts the request's system instructions and messages into `detail`, at most `max` bytes
/// of their text; the answer shares what is left.
fn capture_input(detail: &mut SpanDetail, request: &ClientRequest, max: usize) -> usize {
    let body = request.body.tree();
    let mut room = Room(max);
    let (system, messages) = match (request.operation, request.format) {
        (Operation::Chat, ClientFormat::OpenAi) => (None, openai_messages(body, &mut room)),
        (Operation::Chat, ClientFormat::Anthropic) => {
            let system = body.get("system").map(|s| blocks(s, &mut room));
            (system, anthropic_messages(body, &mut room))
        }
        (Operation::Responses, _) => {
            let system = body
                .get("instructions")
                .and_then(Value::as_str)
                .map(|text| vec![text_part(text, &mut room)]);
            (system, responses_input(body.get("input"), &mut room))
        }
        (Operation::Completions, _) => {
            let prompts = match body.get("prompt") {
                Some(Value::String(text)) => vec![text.as_str()],
                Some(Value::Array(items)) => items.iter().filter_map(Value::as_str).collect(),
                _ => Vec::new(),
            };
            let parts = prompts
                .into_iter()
                .map(|p| text_part(p, &mut room))
                .collect();
            (None, Some(vec![message("user", parts)]))
        }
        _ => (None, None),
    };
    detail.system_instructions = system.map(|parts| Value::Array(parts).to_string());
    detail.input_messages = messages.map(|messages| Value::Array(messages).to_string());
    room.0
}

/// Reads the whole answer the client got (`answer`, in its format): its finish reasons,
/// and with `room` (what capture left) its messages.
fn capture_output(
    detail: &mut SpanDetail,
    (operation, format): (Operation, ClientFormat),
    answer: &Value,
    room: Option<usize>,
) {
    let capturing = room.is_some();
    let mut room = Room(room.unwrap_or(0));
    let outputs: Vec<(Option<String>, Vec<Value>)> = match (operation, format) {
        (Operation::Responses, _) => vec![responses_output(answer, &mut room)],
        (Operation::Chat | Operation::Completions, ClientFormat::OpenAi) => answer["choices"]
            .as_array()
            .map(|choices| {
                choices
                    .iter()
                    .map(|choice| openai_choice(choice, &mut room))
                    .collect()
            })
            .unwrap_or_default(),
        (Operation::Chat, ClientFormat::Anthropic) => {
            let reason = answer["stop_reason"].as_str().map(str::to_owned);
            vec![(reason, blocks(&answer["content"], &mut room))]
        }
        _ => Vec::new(),
    };
    detail.finish_reasons = outputs.iter().filter_map(|(r, _)| r.clone()).collect();
    if capturing {
        let messages: Vec<Value> = outputs
            .into_iter()
            .map(|(reason, parts)| {
                let mut message = message("assistant", parts);
                message["finish_reason"] = reason.map_or(Value::Null, Value::String);
                message
            })
            .collect();
        detail.output_messages = Some(Value::Array(messages).to_string());
    }
}

fn message(role: &str, parts: Vec<Value>) -> Value {
    json!({"role": role, "parts": parts})
}

fn text_part(text: &str, room: &mut Room) -> Value {
    json!({"type": "text", "content": room.take(text)})
}

fn tool_call(id: &Value, name: &Value, arguments: &Value, room: &mut Room) -> Value {
    json!({"type": "tool_call", "id": id, "name": name, "arguments": room.take_value(arguments)})
}

fn tool_response(id: &Value, response: &Value, room: &mut Room) -> Value {
    let response = match response {
        Value::Array(_) => Value::Array(blocks(response, room)),
        other => Value::String(room.take_value(other)),
    };
    json!({"type": "tool_call_response", "id": id, "response": response})
}

/// OpenAI chat messages: content as text or parts, the assistant's tool calls, and a tool's
/// answers.
fn openai_messages(body: &Map<String, Value>, room: &mut Room) -> Option<Vec<Value>> {
    let messages = body.get("messages")?.as_array()?;
    let read = messages.iter().map(|m| {
        let role = m["role"].as_str().unwrap_or("user");
        if role == "tool" {
            let part = tool_response(&m["tool_call_id"], &m["content"], room);
            return message("tool", vec![part]);
        }
        message(role, openai_parts(m, room))
    });
    Some(read.collect())
}

/// Anthropic messages, whose content is a string or blocks.
fn anthropic_messages(body: &Map<String, Value>, room: &mut Room) -> Option<Vec<Value>> {
    let messages = body.get("messages")?.as_array()?;
    let read = messages.iter().map(|m| {
        let role = m["role"].as_str().unwrap_or("user");
        message(role, blocks(&m["content"], room))
    });
    Some(read.collect())
}

/// Content as a string or an array of blocks (OpenAI's parts, Anthropic's blocks and the
/// Responses API's content items), as the conventions' parts. A part that is not text, a
/// tool call, a tool's answer or reasoning is named by its type, without its data.
fn blocks(content: &Value, room: &mut Room) -> Vec<Value> {
    let items = match content {
        Value::String(text) => return vec![text_part(text, room)],
        Value::Array(items) => items,
        _ => return Vec::new(),
    };
    let read = items.iter().map(|block| {
        let kind = block["type"].as_str().unwrap_or("");
        match kind {
            "text" | "input_text" | "output_text" => {
                text_part(block["text"].as_str().unwrap_or(""), room)
            }
            "tool_use" => tool_call(&block["id"], &block["name"], &block["input"], room),
            "tool_result" => tool_response(&block["tool_use_id"], &block["content"], room),
            "thinking" => {
                json!({"type": "reasoning", "content": room.take(block["thinking"].as_str().unwrap_or(""))})
            }
            other => json!({"type": other}),
        }
    });
    read.collect()
}

/// The Responses API's `input`: a string, or items (messages, function calls and their
/// outputs).
fn responses_input(input: Option<&Value>, room: &mut Room) -> Option<Vec<Value>> {
    match input? {
        Value::String(text) => Some(vec![message("user", vec![text_part(text, room)])]),
        Value::Array(items) => Some(items.iter().map(|item| response_item(item, room)).collect()),
        _ => None,
    }
}

fn response_item(item: &Value, room: &mut Room) -> Value {
    match item["type"].as_str() {
        Some("function_call") => {
            let call = tool_call(&item["call_id"], &item["name"], &item["arguments"], room);
            message("assistant", vec![call])
        }
        Some("function_call_output") => message(
            "tool",
            vec![tool_response(&item["call_id"], &item["output"], room)],
        ),
        Some("reasoning") => message("assistant", reasoning(item, room)),
        _ => message(
            item["role"].as_str().unwrap_or("user"),
            blocks(&item["content"], room),
        ),
    }
}

fn reasoning(item: &Value, room: &mut Room) -> Vec<Value> {
    let summary = item["summary"].as_array().into_iter().flatten();
    summary
        .filter_map(|s| s["text"].as_str())
        .map(|text| json!({"type": "reasoning", "content": room.take(text)}))
        .collect()
}

/// A Responses answer is one message out, of every output item's parts; it ended `stop`
/// when complete, else with the reason it is incomplete.
fn responses_output(answer: &Value, room: &mut Room) -> (Option<String>, Vec<Value>) {
    let mut parts = Vec::new();
    for item in answer["output"].as_array().into_iter().flatten() {
        match item["type"].as_str() {
            Some("message") => parts.extend(blocks(&item["content"], room)),
            Some("function_call") => parts.push(tool_call(
                &item["call_id"],
                &item["name"],
                &item["arguments"],
                room,
            )),
            Some("reasoning") => parts.extend(reasoning(item, room)),
            Some(other) => parts.push(json!({"type": other})),
            None => {}
        }
    }
    let reason = match answer["status"].as_str() {
        Some("completed") => Some("stop".to_owned()),
        Some(_) => answer["incomplete_details"]["reason"]
            .as_str()
            .or(answer["status"].as_str())
            .map(str::to_owned),
        None => None,
    };
    (reason, parts)
}

/// An OpenAI choice: a chat completion's message, or a legacy completion's text.
fn openai_choice(choice: &Value, room: &mut Room) -> (Option<String>, Vec<Value>) {
    let reason = choice["finish_reason"].as_str().map(str::to_owned);
    if let Some(text) = choice["text"].as_str() {
        return (reason, vec![text_part(text, room)]);
    }
    (reason, openai_parts(&choice["message"], room))
}

/// An OpenAI message's content and the tool calls it makes, as parts.
fn openai_parts(message: &Value, room: &mut Room) -> Vec<Value> {
    let mut parts = blocks(&message["content"], room);
    for call in message["tool_calls"].as_array().into_iter().flatten() {
        let function = &call["function"];
        parts.push(tool_call(
            &call["id"],
            &function["name"],
            &function["arguments"],
            room,
        ));
    }
    parts
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(format: ClientFormat, operation: Operation, body: Value) -> ClientRequest {
        let Value::Object(body) = body else {
            unreachable!("a request body is an object")
        };
        ClientRequest::new(format, operation, body)
    }

    fn parsed(text: &Option<String>) -> Value {
        serde_json::from_str(text.as_deref().expect("captured")).expect("whole JSON")
    }

    #[test]
    fn an_openai_chat_is_messages_with_parts_and_its_answer_the_finish_reasons() {
        let mut detail = SpanDetail::default();
        let chat = request(
            ClientFormat::OpenAi,
            Operation::Chat,
            json!({"model": "m", "messages": [
                {"role": "system", "content": "be brief"},
                {"role": "user", "content": [{"type": "text", "text": "hi"},
                                             {"type": "image_url", "image_url": {"url": "data:x"}}]},
                {"role": "assistant", "content": null, "tool_calls": [
                    {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{\"a\":1}"}}]},
                {"role": "tool", "tool_call_id": "c1", "content": "42"}]}),
        );
        let left = capture_input(&mut detail, &chat, 1000);
        assert_eq!(
            parsed(&detail.input_messages),
            json!([
                {"role": "system", "parts": [{"type": "text", "content": "be brief"}]},
                {"role": "user", "parts": [{"type": "text", "content": "hi"}, {"type": "image_url"}]},
                {"role": "assistant", "parts": [
                    {"type": "tool_call", "id": "c1", "name": "f", "arguments": "{\"a\":1}"}]},
                {"role": "tool", "parts": [{"type": "tool_call_response", "id": "c1", "response": "42"}]}
            ])
        );
        assert_eq!(left, 1000 - "be brief".len() - "hi".len() - 7 - 2);
        let answer = json!({"choices": [
            {"index": 0, "message": {"role": "assistant", "content": "hello"}, "finish_reason": "stop"},
            {"index": 1, "message": {"role": "assistant", "content": "hey"}, "finish_reason": "length"}]});
        let kind = (Operation::Chat, ClientFormat::OpenAi);
        capture_output(&mut detail, kind, &answer, Some(left));
        assert_eq!(detail.finish_reasons, ["stop", "length"]);
        assert_eq!(
            parsed(&detail.output_messages)[1],
            json!({"role": "assistant", "parts": [{"type": "text", "content": "hey"}], "finish_reason": "length"})
        );
    }

    #[test]
    fn finish_reasons_are_read_off_the_bytes_of_answers_and_events() {
        let chunk = br#"data: {"choices":[{"index":0,"delta":{},"finish_reason": "stop"},{"index":1,"delta":{},"finish_reason":null}]}

data: {"choices":[{"index":1,"delta":{},"finish_reason":"length"}]}

"#;
        let reasons = scan_reasons(chunk, b"\"finish_reason\"");
        assert_eq!(reasons, ["stop", "length"]);
        let message = br#"{"type":"message_start","message":{"stop_reason":null}} {"delta":{"stop_reason":"end_turn"}}"#;
        let reasons = scan_reasons(message, b"\"stop_reason\"");
        assert_eq!(reasons, ["end_turn"]);
        let escaped = br#"{"finish_reason":"st\"op"}"#;
        assert!(scan_reasons(escaped, b"\"finish_reason\"").is_empty());
    }

    #[test]
    fn a_messages_own_stop_reason_is_read_not_a_tool_inputs_key_of_that_name() {
        let mut record = RequestRecord::new("r".into(), false);
        record.detail = Some(Box::default());
        let message = br#"{"type":"message","content":[{"type":"tool_use","id":"t","name":"f",
            "input":{"stop_reason":"user_cancelled"}}],"stop_reason":"tool_use"}"#;
        answered(
            &mut record,
            (Operation::Chat, ClientFormat::Anthropic),
            message,
        );
        let reasons = &record.detail.as_ref().unwrap().finish_reasons;
        assert_eq!(reasons, &["tool_use"]);
    }

    #[test]
    fn without_capture_only_the_finish_reasons_are_read() {
        let mut detail = SpanDetail::default();
        let answer = json!({"type": "message", "content": [{"type": "text", "text": "secret answer"}],
                            "stop_reason": "end_turn"});
        capture_output(
            &mut detail,
            (Operation::Chat, ClientFormat::Anthropic),
            &answer,
            None,
        );
        assert_eq!(detail.finish_reasons, ["end_turn"]);
        assert_eq!(detail.output_messages, None);
    }

    #[test]
    fn texts_are_cut_to_the_room_at_a_characters_edge_and_the_json_stays_whole() {
        let mut detail = SpanDetail::default();
        let message = request(
            ClientFormat::Anthropic,
            Operation::Chat,
            json!({"model": "m", "system": "ééééé", "messages": [
                {"role": "user", "content": [{"type": "text", "text": "abcdef"},
                                             {"type": "tool_result", "tool_use_id": "t", "content": "xyz"}]}]}),
        );
        let left = capture_input(&mut detail, &message, 7);
        assert_eq!(left, 0);
        assert_eq!(
            parsed(&detail.system_instructions),
            json!([{"type": "text", "content": "ééé"}])
        );
        assert_eq!(
            parsed(&detail.input_messages),
            json!([{"role": "user", "parts": [
                {"type": "text", "content": "a"},
                {"type": "tool_call_response", "id": "t", "response": ""}]}])
        );
    }

    #[test]
    fn a_responses_turn_reads_instructions_items_and_an_incomplete_answer() {
        let mut detail = SpanDetail::default();
        let turn = request(
            ClientFormat::OpenAi,
            Operation::Responses,
            json!({"model": "m", "instructions": "be kind", "input": [
                {"role": "user", "content": [{"type": "input_text", "text": "q"}]},
                {"type": "function_call", "call_id": "c", "name": "f", "arguments": "{}"},
                {"type": "function_call_output", "call_id": "c", "output": "ok"}]}),
        );
        let left = capture_input(&mut detail, &turn, 100);
        assert_eq!(
            parsed(&detail.input_messages)[2],
            json!({"role": "tool", "parts": [{"type": "tool_call_response", "id": "c", "response": "ok"}]})
        );
        let answer = json!({"status": "incomplete", "incomplete_details": {"reason": "max_output_tokens"},
            "output": [{"type": "message", "content": [{"type": "output_text", "text": "par"}]}]});
        capture_output(
            &mut detail,
            (Operation::Responses, ClientFormat::OpenAi),
            &answer,
            Some(left),
        );
        assert_eq!(detail.finish_reasons, ["max_output_tokens"]);
        assert_eq!(
            parsed(&detail.output_messages)[0]["parts"][0]["content"],
            "par"
        );
    }
}
