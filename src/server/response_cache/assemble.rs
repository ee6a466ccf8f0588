//! A streamed answer put back together, event by event as the client got them, into the
//! whole answer of its format, so that a stream's answer can be kept and served again to
//! JSON and stream requests alike.

use serde_json::{Map, Value, json};

use super::responses::Completed;
use crate::providers::{ClientFormat, Operation};

/// Gathers a stream's client-format events into one answer.
pub enum Assembler {
    /// OpenAI `chat.completion.chunk`s into a `chat.completion`.
    Completion(Completion),
    /// Anthropic Messages events into a `message`.
    Message(Message),
    /// Responses events: the Response of the last.
    Response(Completed),
}

impl Assembler {
    pub fn new(operation: Operation, format: ClientFormat) -> Assembler {
        match (operation, format) {
            (Operation::Responses, _) => Assembler::Response(Completed::default()),
            (Operation::Completions, _) => Assembler::Completion(Completion {
                legacy: true,
                ..Completion::default()
            }),
            (_, ClientFormat::OpenAi) => Assembler::Completion(Completion::default()),
            (_, ClientFormat::Anthropic) => Assembler::Message(Message::default()),
        }
    }

    /// Reads the events in `frame` (SSE text, one or more events). Returns false once the
    /// stream cannot make a whole answer (an error event, or one it cannot read).
    pub fn feed(&mut self, frame: &[u8]) -> bool {
        let Ok(text) = std::str::from_utf8(frame) else {
            return false;
        };
        for event in text.split("\n\n") {
            let data: String = event
                .lines()
                .filter_map(|line| line.strip_prefix("data:"))
                .map(str::trim_start)
                .collect();
            if data.is_empty() || data == "[DONE]" {
                continue;
            }
            let Ok(data) = serde_json::from_str::<Value>(&data) else {
                return false;
            };
            let read = match self {
                Assembler::Completion(completion) => completion.chunk(&data),
                Assembler::Message(message) => message.event(&data),
                Assembler::Response(completed) => completed.event(&data),
            };
            if !read {
                return false;
            }
        }
        true
    }

    /// The whole answer; `usage` (the tokens the stream reported to the gateway) fills in
    /// what the client's own events left out, as when it did not ask for the usage chunk.
    pub fn answer(self, usage: Option<(u64, u64)>) -> Option<Value> {
        match self {
            Assembler::Completion(completion) => completion.whole(usage),
            Assembler::Message(message) => message.whole(),
            Assembler::Response(completed) => completed.whole(),
        }
    }
}

/// What the chunks said so far.
#[derive(Default)]
pub struct Completion {
    /// Legacy `text_completion` chunks, whose choices carry `text` in place of a `delta`.
    legacy: bool,
    head: Option<Value>,
    choices: Vec<Choice>,
    usage: Option<Value>,
}

#[derive(Default)]
struct Choice {
    content: Option<String>,
    refusal: Option<String>,
    tool_calls: Vec<Map<String, Value>>,
    finish_reason: Option<Value>,
}

impl Completion {
    fn chunk(&mut self, chunk: &Value) -> bool {
        if chunk.get("error").is_some() {
            return false;
        }
        if self.head.is_none() {
            self.head = Some(json!({
                "id": chunk["id"], "created": chunk["created"], "model": chunk["model"],
                "system_fingerprint": chunk.get("system_fingerprint").unwrap_or(&Value::Null),
            }));
        }
        if let Some(usage) = chunk.get("usage").filter(|u| !u.is_null()) {
            self.usage = Some(usage.clone());
        }
        let Some(choices) = chunk["choices"].as_array() else {
            return false;
        };
        for choice in choices {
            let Some(index) = choice["index"].as_u64().map(|i| i as usize) else {
                return false;
            };
            if index >= self.choices.len() {
                self.choices.resize_with(index + 1, Choice::default);
            }
            let into = &mut self.choices[index];
            let delta = &choice["delta"];
            let text = match self.legacy {
                true => &choice["text"],
                false => &delta["content"],
            };
            if let Some(text) = text.as_str() {
                into.content.get_or_insert_default().push_str(text);
            }
            if let Some(text) = delta["refusal"].as_str() {
                into.refusal.get_or_insert_default().push_str(text);
            }
            for call in delta["tool_calls"].as_array().into_iter().flatten() {
                if !into.tool_call(call) {
                    return false;
                }
            }
            if !choice["finish_reason"].is_null() {
                into.finish_reason = Some(choice["finish_reason"].clone());
            }
        }
        true
    }

    fn whole(self, usage: Option<(u64, u64)>) -> Option<Value> {
        let mut answer = self.head?;
        let legacy = self.legacy;
        let choices: Vec<Value> = self
            .choices
            .into_iter()
            .enumerate()
            .map(|(index, choice)| {
                if legacy {
                    return json!({"index": index, "text": choice.content.unwrap_or_default(),
                                  "logprobs": null, "finish_reason": choice.finish_reason});
                }
                let mut message = json!({"role": "assistant", "content": choice.content,
                                         "refusal": choice.refusal});
                if !choice.tool_calls.is_empty() {
                    message["tool_calls"] =
                        Value::Array(choice.tool_calls.into_iter().map(Value::Object).collect());
                }
                json!({"index": index, "message": message, "logprobs": null,
                       "finish_reason": choice.finish_reason})
            })
            .collect();
        answer["object"] = json!(if legacy {
            "text_completion"
        } else {
            "chat.completion"
        });
        answer["choices"] = Value::Array(choices);
        answer["usage"] = match (self.usage, usage) {
            (Some(usage), _) => usage,
            (None, Some((prompt, completion))) => json!({"prompt_tokens": prompt,
                "completion_tokens": completion, "total_tokens": prompt + completion}),
            (None, None) => Value::Null,
        };
        Some(answer)
    }
}

impl Choice {
    /// A tool call's piece: the first names it, the rest add to its arguments.
    fn tool_call(&mut self, piece: &Value) -> bool {
        let Some(index) = piece["index"].as_u64().map(|i| i as usize) else {
            return false;
        };
        if index >= self.tool_calls.len() {
            self.tool_calls.resize_with(index + 1, || {
                let mut call = Map::new();
                call.insert("type".into(), json!("function"));
                call.insert("function".into(), json!({"name": "", "arguments": ""}));
                call
            });
        }
        let call = &mut self.tool_calls[index];
        if let Some(id) = piece.get("id").filter(|id| !id.is_null()) {
            call.insert("id".into(), id.clone());
        }
        let Some(function) = call.get_mut("function") else {
            return false;
        };
        for field in ["name", "arguments"] {
            if let Some(text) = piece["function"][field].as_str() {
                let so_far = function[field].as_str().unwrap_or("").to_owned();
                function[field] = json!(so_far + text);
            }
        }
        true
    }
}

/// What the Messages events said so far.
#[derive(Default)]
pub struct Message {
    message: Option<Value>,
    blocks: Vec<Value>,
    /// Each tool call's input as its JSON pieces came, by block.
    inputs: Vec<String>,
    stopped: bool,
}

impl Message {
    fn event(&mut self, event: &Value) -> bool {
        match event["type"].as_str() {
            Some("message_start") => self.message = Some(event["message"].clone()),
            Some("content_block_start") => {
                let Some(index) = event["index"].as_u64().map(|i| i as usize) else {
                    return false;
                };
                if index != self.blocks.len() {
                    return false;
                }
                self.blocks.push(event["content_block"].clone());
                self.inputs.push(String::new());
            }
            Some("content_block_delta") => return self.delta(event),
            Some("content_block_stop") => {
                let Some(index) = event["index"].as_u64().map(|i| i as usize) else {
                    return false;
                };
                let (Some(block), Some(input)) =
                    (self.blocks.get_mut(index), self.inputs.get(index))
                else {
                    return false;
                };
                if block["type"] == "tool_use" && !input.is_empty() {
                    let Ok(input) = serde_json::from_str::<Value>(input) else {
                        return false;
                    };
                    block["input"] = input;
                }
            }
            Some("message_delta") => {
                let Some(message) = self.message.as_mut() else {
                    return false;
                };
                for field in ["stop_reason", "stop_sequence"] {
                    if let Some(value) = event["delta"].get(field) {
                        message[field] = value.clone();
                    }
                }
                if let (Some(usage), Some(into)) =
                    (event["usage"].as_object(), message["usage"].as_object_mut())
                {
                    for (name, value) in usage {
                        into.insert(name.clone(), value.clone());
                    }
                }
            }
            Some("message_stop") => self.stopped = true,
            Some("ping") => {}
            _ => return false,
        }
        true
    }

    fn delta(&mut self, event: &Value) -> bool {
        let Some(index) = event["index"].as_u64().map(|i| i as usize) else {
            return false;
        };
        let (Some(block), Some(input)) = (self.blocks.get_mut(index), self.inputs.get_mut(index))
        else {
            return false;
        };
        let delta = &event["delta"];
        let append = |block: &mut Value, field: &str, text: &Value| {
            let so_far = block[field].as_str().unwrap_or("").to_owned();
            block[field] = json!(so_far + text.as_str().unwrap_or(""));
        };
        match delta["type"].as_str() {
            Some("text_delta") => append(block, "text", &delta["text"]),
            Some("thinking_delta") => append(block, "thinking", &delta["thinking"]),
            Some("signature_delta") => block["signature"] = delta["signature"].clone(),
            Some("input_json_delta") => {
                input.push_str(delta["partial_json"].as_str().unwrap_or(""))
            }
            _ => return false,
        }
        true
    }

    fn whole(self) -> Option<Value> {
        let mut message = self.message.filter(|_| self.stopped)?;
        message["content"] = Value::Array(self.blocks);
        Some(message)
    }
}

#[cfg(test)]
mod tests {
    use super::super::replay::{self, fixtures};
    use super::*;

    #[test]
    fn a_replayed_completion_assembles_back_into_itself() {
        let completion = fixtures::tool_completion();
        let mut assembler = Assembler::new(Operation::Chat, ClientFormat::OpenAi);
        assert!(assembler.feed(&replay::completion_stream(&completion, true).unwrap()));
        assert_eq!(assembler.answer(None), Some(completion));
    }

    #[test]
    fn a_replayed_text_completion_assembles_back_into_itself() {
        let completion = fixtures::text_completion();
        let mut assembler = Assembler::new(Operation::Completions, ClientFormat::OpenAi);
        let stream = replay::text_completion_stream(&completion, false).unwrap();
        assert!(assembler.feed(&stream));
        assert_eq!(assembler.answer(Some((3, 2))), Some(completion));
    }

    #[test]
    fn pieces_of_content_and_arguments_are_joined_and_usage_filled_in() {
        let mut assembler = Assembler::new(Operation::Chat, ClientFormat::OpenAi);
        for chunk in [
            json!({"id": "c", "created": 1, "model": "m", "choices": [{"index": 0,
                "delta": {"role": "assistant", "content": "Hel"}, "finish_reason": null}]}),
            json!({"id": "c", "created": 1, "model": "m", "choices": [{"index": 0,
                "delta": {"content": "lo", "tool_calls": [{"index": 0, "id": "t",
                    "function": {"name": "f", "arguments": "{\"a\""}}]}, "finish_reason": null}]}),
            json!({"id": "c", "created": 1, "model": "m", "choices": [{"index": 0,
                "delta": {"tool_calls": [{"index": 0, "function": {"arguments": ":1}"}}]},
                "finish_reason": "stop"}]}),
        ] {
            assert!(assembler.feed(format!("data: {chunk}\n\n").as_bytes()));
        }
        assert!(assembler.feed(b"data: [DONE]\n\n"));
        let answer = assembler.answer(Some((3, 2))).unwrap();
        let message = &answer["choices"][0]["message"];
        assert_eq!(message["content"], "Hello");
        assert_eq!(
            message["tool_calls"][0]["function"]["arguments"],
            "{\"a\":1}"
        );
        assert_eq!(answer["choices"][0]["finish_reason"], "stop");
        assert_eq!(answer["usage"]["total_tokens"], 5);
    }

    #[test]
    fn a_replayed_message_assembles_back_into_itself() {
        let message = fixtures::tool_message();
        let mut assembler = Assembler::new(Operation::Chat, ClientFormat::Anthropic);
        assert!(assembler.feed(&replay::message_stream(&message).unwrap()));
        assert_eq!(assembler.answer(None), Some(message));
    }

    #[test]
    fn an_error_event_or_a_stream_without_its_end_makes_no_answer() {
        let mut openai = Assembler::new(Operation::Chat, ClientFormat::OpenAi);
        assert!(!openai.feed(b"data: {\"error\":{\"message\":\"x\"}}\n\n"));
        let mut anthropic = Assembler::new(Operation::Chat, ClientFormat::Anthropic);
        assert!(!anthropic.feed(b"event: error\ndata: {\"type\":\"error\"}\n\n"));
        let mut unfinished = Assembler::new(Operation::Chat, ClientFormat::Anthropic);
        let start = json!({"type": "message_start", "message": {"id": "m", "content": []}});
        assert!(unfinished.feed(format!("data: {start}\n\n").as_bytes()));
        assert_eq!(unfinished.answer(None), None, "no message_stop");
    }
}
