//! What the fake answers, in the wire shape its request's path names.
//!
//! One fake speaks every shape, chosen by path: `…/chat/completions` is OpenAI's (Azure's
//! deployment URLs end the same way), `…/v1/messages` Anthropic's, `…:generateContent` and
//! `…:streamGenerateContent` Gemini's; `…/embeddings`, `…:embedContent` and
//! `…:batchEmbedContents` are embeddings; `…/model/{id}/converse` and `…/converse-stream` are
//! Bedrock's, and `…/model/{id}/invoke` its embeddings. A completion is the same text (and tool calls) whatever the shape, whole or cut
//! into `chunks` stream events.

use bytes::Bytes;
use serde_json::{Value, json};

use super::behavior::{Behavior, FakeToolCall};

/// The wire format a request's path asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Shape {
    OpenAi,
    /// OpenAI's Responses API (`…/responses`).
    Responses,
    Anthropic,
    Gemini,
    /// Bedrock's Converse API; its stream is in AWS's event stream framing.
    Bedrock,
}

/// What a request's path asks for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Route {
    /// A completion in a shape; Gemini's stream is asked for by its path.
    Chat { shape: Shape, path_stream: bool },
    /// Embeddings in a shape.
    Embeddings(Shape),
    /// Anthropic's `/v1/messages/count_tokens`.
    CountTokens,
    /// OpenAI's legacy `/completions`.
    TextCompletions,
}

/// Reads the path (without its query).
pub fn route(path: &str) -> Option<Route> {
    if path.ends_with("/v1/messages/count_tokens") {
        return Some(Route::CountTokens);
    }
    if path.ends_with("/completions") && !path.ends_with("/chat/completions") {
        return Some(Route::TextCompletions);
    }
    if path.ends_with("/chat/completions") {
        return Some(Route::Chat {
            shape: Shape::OpenAi,
            path_stream: false,
        });
    }
    if path.ends_with("/responses") {
        return Some(Route::Chat {
            shape: Shape::Responses,
            path_stream: false,
        });
    }
    if path.ends_with("/v1/messages") {
        return Some(Route::Chat {
            shape: Shape::Anthropic,
            path_stream: false,
        });
    }
    // Vertex's Anthropic models, in Anthropic's format.
    if path.ends_with(":rawPredict") || path.ends_with(":streamRawPredict") {
        return Some(Route::Chat {
            shape: Shape::Anthropic,
            path_stream: path.ends_with(":streamRawPredict"),
        });
    }
    if path.ends_with(":generateContent") || path.ends_with(":streamGenerateContent") {
        return Some(Route::Chat {
            shape: Shape::Gemini,
            path_stream: path.ends_with(":streamGenerateContent"),
        });
    }
    if path.contains("/model/")
        && (path.ends_with("/converse") || path.ends_with("/converse-stream"))
    {
        return Some(Route::Chat {
            shape: Shape::Bedrock,
            path_stream: path.ends_with("/converse-stream"),
        });
    }
    if path.contains("/model/") && path.ends_with("/invoke") {
        return Some(Route::Embeddings(Shape::Bedrock));
    }
    if path.ends_with("/embeddings") {
        return Some(Route::Embeddings(Shape::OpenAi));
    }
    if path.ends_with(":embedContent") || path.ends_with(":batchEmbedContents") {
        return Some(Route::Embeddings(Shape::Gemini));
    }
    None
}

/// Gemini names the model in the path: `/v1beta/models/{model}:method`.
pub fn path_model(path: &str) -> Option<&str> {
    let (_, rest) = path.rsplit_once("/models/")?;
    rest.split(':').next()
}

/// Bedrock names the model in the path, percent-encoded: `/model/{modelId}/converse`.
pub fn converse_model(path: &str) -> Option<String> {
    let (_, rest) = path.rsplit_once("/model/")?;
    let encoded = rest.split('/').next()?;
    Some(
        percent_encoding::percent_decode_str(encoded)
            .decode_utf8_lossy()
            .into_owned(),
    )
}

/// Anthropic's token count for a request: the fake's rough count of its messages.
pub fn count_tokens(request: &Value) -> Value {
    let prompt = request
        .get("messages")
        .map(|m| m.to_string().len() as u64 / 4);
    json!({"input_tokens": prompt.unwrap_or(0)})
}

/// A legacy text completion of `completion`'s content, whole or as its event stream.
pub fn text_completion(completion: &Completion, stream: bool) -> Bytes {
    let choice = |text: &str, finish: Option<&str>| json!([{"text": text, "index": 0, "logprobs": null, "finish_reason": finish}]);
    let object = |choices: Value| {
        json!({"id": format!("cmpl-{}", completion.id), "object": "text_completion",
               "created": 1_700_000_000, "model": completion.model, "choices": choices})
    };
    if !stream {
        let mut whole = object(choice(&completion.content, Some("stop")));
        whole["usage"] = completion.openai_usage();
        return Bytes::from(whole.to_string());
    }
    let mut body = String::new();
    for i in 0..completion.chunks {
        body.push_str(&format!(
            "data: {}\n\n",
            object(choice(&completion.piece(i), None))
        ));
    }
    body.push_str(&format!("data: {}\n\n", object(choice("", Some("stop")))));
    if completion.include_usage {
        let mut usage = object(json!([]));
        usage["usage"] = completion.openai_usage();
        body.push_str(&format!("data: {usage}\n\n"));
    }
    body.push_str("data: [DONE]\n\n");
    Bytes::from(body)
}

/// The completion a request gets, in all its forms.
pub struct Completion {
    pub shape: Shape,
    pub id: String,
    pub model: String,
    pub content: String,
    pub tool_calls: Vec<FakeToolCall>,
    pub stream: bool,
    pub include_usage: bool,
    pub chunks: usize,
    pub prompt_tokens: u64,
}

impl Completion {
    /// The completion for the `call`-th request.
    pub fn new(
        name: &str,
        call: usize,
        shape: Shape,
        path: &str,
        request: &Value,
        behavior: &Behavior,
    ) -> Completion {
        let prompt = request
            .get("messages")
            .or_else(|| request.get("contents"))
            .or_else(|| request.get("input"));
        let prompt_tokens = prompt.map(|m| m.to_string().len() as u64 / 4).unwrap_or(0);
        let model = match shape {
            Shape::Gemini => path_model(path).map(str::to_owned),
            // Vertex names an Anthropic model in the path, not the body.
            Shape::Anthropic if path.ends_with("Predict") => path_model(path).map(str::to_owned),
            Shape::Bedrock => converse_model(path),
            _ => request
                .get("model")
                .and_then(Value::as_str)
                .map(str::to_owned),
        };
        let stream = match shape {
            Shape::Gemini => path.ends_with(":streamGenerateContent"),
            Shape::Bedrock => path.ends_with("/converse-stream"),
            _ => request.get("stream").and_then(Value::as_bool) == Some(true),
        };
        let id = match shape {
            Shape::OpenAi => format!("chatcmpl-{name}-{call}"),
            Shape::Responses => format!("resp_{name}_{call}"),
            Shape::Anthropic => format!("msg_{name}_{call}"),
            Shape::Gemini | Shape::Bedrock => format!("{name}-{call}"),
        };
        Completion {
            shape,
            id,
            model: model.unwrap_or_else(|| "fake".into()),
            content: behavior
                .content
                .clone()
                .unwrap_or_else(|| format!("Hello from {name}!")),
            tool_calls: behavior.tool_calls.clone(),
            stream,
            include_usage: request
                .pointer("/stream_options/include_usage")
                .and_then(Value::as_bool)
                == Some(true),
            chunks: behavior.chunks.unwrap_or(3).max(1),
            prompt_tokens,
        }
    }

    pub(super) fn completion_tokens(&self) -> u64 {
        self.content.split_whitespace().count() as u64
    }

    fn openai_usage(&self) -> Value {
        let completion_tokens = self.completion_tokens();
        json!({
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": self.prompt_tokens + completion_tokens,
        })
    }

    fn gemini_usage(&self, finished: bool) -> Value {
        let candidates = if finished {
            self.completion_tokens()
        } else {
            0
        };
        json!({
            "promptTokenCount": self.prompt_tokens,
            "candidatesTokenCount": candidates,
            "totalTokenCount": self.prompt_tokens + candidates,
        })
    }

    /// The whole answer.
    pub fn whole(&self) -> Value {
        match self.shape {
            Shape::Responses => self.responses_whole(),
            Shape::Bedrock => self.bedrock_whole(),
            Shape::OpenAi => {
                let mut message = json!({"role": "assistant", "content": self.content});
                let finish = if self.tool_calls.is_empty() {
                    "stop"
                } else {
                    message["tool_calls"] = json!(self.openai_calls());
                    "tool_calls"
                };
                json!({
                    "id": self.id, "object": "chat.completion", "created": 1_700_000_000,
                    "model": self.model,
                    "choices": [{"index": 0, "message": message, "logprobs": null, "finish_reason": finish}],
                    "usage": self.openai_usage(),
                })
            }
            Shape::Anthropic => {
                let mut content = vec![json!({"type": "text", "text": self.content})];
                content.extend(self.tool_calls.iter().enumerate().map(|(i, call)| {
                    json!({"type": "tool_use", "id": self.call_id(i), "name": call.name, "input": call.arguments})
                }));
                json!({
                    "id": self.id, "type": "message", "role": "assistant", "model": self.model,
                    "content": content, "stop_reason": self.anthropic_stop(), "stop_sequence": null,
                    "usage": {"input_tokens": self.prompt_tokens, "output_tokens": self.completion_tokens()},
                })
            }
            Shape::Gemini => {
                let mut parts = vec![json!({"text": self.content})];
                parts.extend(self.gemini_calls());
                json!({
                    "candidates": [{"content": {"parts": parts, "role": "model"}, "finishReason": "STOP", "index": 0}],
                    "usageMetadata": self.gemini_usage(true),
                    "modelVersion": self.model,
                    "responseId": self.id,
                })
            }
        }
    }

    pub(super) fn call_id(&self, i: usize) -> String {
        match self.shape {
            Shape::Anthropic => format!("toolu_fake_{i}"),
            Shape::Bedrock => format!("tooluse_fake_{i}"),
            _ => format!("call_fake_{i}"),
        }
    }

    fn openai_calls(&self) -> Vec<Value> {
        self.tool_calls
            .iter()
            .enumerate()
            .map(|(i, call)| {
                json!({"id": self.call_id(i), "type": "function",
                       "function": {"name": call.name, "arguments": call.arguments.to_string()}})
            })
            .collect()
    }

    fn gemini_calls(&self) -> Vec<Value> {
        self.tool_calls
            .iter()
            .map(|call| json!({"functionCall": {"name": call.name, "args": call.arguments}}))
            .collect()
    }

    fn anthropic_stop(&self) -> &'static str {
        if self.tool_calls.is_empty() {
            "end_turn"
        } else {
            "tool_use"
        }
    }

    /// The `i`-th of `chunks` pieces of the content.
    fn piece(&self, i: usize) -> String {
        let chars: Vec<char> = self.content.chars().collect();
        let start = i * chars.len() / self.chunks;
        let end = (i + 1) * chars.len() / self.chunks;
        chars[start..end].iter().collect()
    }

    fn openai_chunk(&self, delta: Value, finish_reason: Option<&str>) -> Bytes {
        data(&json!({
            "id": self.id, "object": "chat.completion.chunk", "created": 1_700_000_000,
            "model": self.model,
            "choices": [{"index": 0, "delta": delta, "logprobs": null, "finish_reason": finish_reason}],
        }))
    }

    /// The events for content piece `i`; the first also opens the message.
    pub fn content_frames(&self, i: usize) -> Vec<Bytes> {
        let piece = self.piece(i);
        match self.shape {
            Shape::Responses => self.responses_content_frames(i, &piece),
            Shape::Bedrock => self.bedrock_content_frames(i, &piece),
            Shape::OpenAi => {
                let delta = if i == 0 {
                    json!({"role": "assistant", "content": piece})
                } else {
                    json!({"content": piece})
                };
                vec![self.openai_chunk(delta, None)]
            }
            Shape::Anthropic => {
                let mut frames = Vec::new();
                if i == 0 {
                    let message = json!({
                        "id": self.id, "type": "message", "role": "assistant", "model": self.model,
                        "content": [], "stop_reason": null, "stop_sequence": null,
                        "usage": {"input_tokens": self.prompt_tokens, "output_tokens": 1},
                    });
                    frames.push(named(
                        "message_start",
                        &json!({"type": "message_start", "message": message}),
                    ));
                    frames.push(named("content_block_start", &json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}})));
                    frames.push(named("ping", &json!({"type": "ping"})));
                }
                frames.push(named("content_block_delta", &json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": piece}})));
                frames
            }
            Shape::Gemini => vec![gemini_data(&json!({
                "candidates": [{"content": {"parts": [{"text": piece}], "role": "model"}, "index": 0}],
                "usageMetadata": self.gemini_usage(false),
                "modelVersion": self.model,
                "responseId": self.id,
            }))],
        }
    }

    /// The events after the content: tool calls, the finish, usage and the end marker.
    pub fn tail_frames(&self) -> Vec<Bytes> {
        match self.shape {
            Shape::Responses => self.responses_tail_frames(),
            Shape::Bedrock => self.bedrock_tail_frames(),
            Shape::OpenAi => {
                let mut frames: Vec<Bytes> = self
                    .openai_calls()
                    .into_iter()
                    .enumerate()
                    .map(|(i, mut call)| {
                        call["index"] = json!(i);
                        self.openai_chunk(json!({"tool_calls": [call]}), None)
                    })
                    .collect();
                let finish = if self.tool_calls.is_empty() {
                    "stop"
                } else {
                    "tool_calls"
                };
                frames.push(self.openai_chunk(json!({}), Some(finish)));
                if self.include_usage {
                    frames.push(data(&json!({
                        "id": self.id, "object": "chat.completion.chunk", "created": 1_700_000_000,
                        "model": self.model, "choices": [], "usage": self.openai_usage(),
                    })));
                }
                frames.push(Bytes::from_static(b"data: [DONE]\n\n"));
                frames
            }
            Shape::Anthropic => {
                let mut frames = vec![named(
                    "content_block_stop",
                    &json!({"type": "content_block_stop", "index": 0}),
                )];
                for (i, call) in self.tool_calls.iter().enumerate() {
                    let index = i + 1;
                    let block = json!({"type": "tool_use", "id": self.call_id(i), "name": call.name, "input": {}});
                    frames.push(named("content_block_start", &json!({"type": "content_block_start", "index": index, "content_block": block})));
                    let partial = json!({"type": "input_json_delta", "partial_json": call.arguments.to_string()});
                    frames.push(named(
                        "content_block_delta",
                        &json!({"type": "content_block_delta", "index": index, "delta": partial}),
                    ));
                    frames.push(named(
                        "content_block_stop",
                        &json!({"type": "content_block_stop", "index": index}),
                    ));
                }
                frames.push(named(
                    "message_delta",
                    &json!({
                        "type": "message_delta",
                        "delta": {"stop_reason": self.anthropic_stop(), "stop_sequence": null},
                        "usage": {"output_tokens": self.completion_tokens()},
                    }),
                ));
                frames.push(named("message_stop", &json!({"type": "message_stop"})));
                frames
            }
            // Gemini's stream has no end marker: the last event carries the finish and usage,
            // and the connection closes.
            Shape::Gemini => {
                let mut parts = self.gemini_calls();
                if parts.is_empty() {
                    parts.push(json!({"text": ""}));
                }
                vec![gemini_data(&json!({
                    "candidates": [{"content": {"parts": parts, "role": "model"}, "finishReason": "STOP", "index": 0}],
                    "usageMetadata": self.gemini_usage(true),
                    "modelVersion": self.model,
                    "responseId": self.id,
                }))]
            }
        }
    }

    /// The provider's own error event inside a stream, saying `message` if given.
    pub fn stream_error(&self, message: Option<&str>) -> Bytes {
        match self.shape {
            Shape::Responses => self.responses_stream_error(message),
            Shape::Bedrock => self.bedrock_stream_error(message),
            Shape::OpenAi => data(&json!({"error": {
                "message": message.unwrap_or("fake upstream failed mid-stream"),
                "type": "server_error", "param": null, "code": "server_error"}})),
            Shape::Anthropic => named(
                "error",
                &json!({"type": "error", "error": {"type": "overloaded_error",
                    "message": message.unwrap_or("Overloaded")}}),
            ),
            Shape::Gemini => gemini_data(&json!({"error": {
                "code": 503, "message": message.unwrap_or("The model is overloaded."),
                "status": "UNAVAILABLE"}})),
        }
    }
}

fn data(value: &Value) -> Bytes {
    Bytes::from(format!("data: {value}\n\n"))
}

/// Gemini's SSE lines end in CRLF.
fn gemini_data(value: &Value) -> Bytes {
    Bytes::from(format!("data: {value}\r\n\r\n"))
}

fn named(name: &str, value: &Value) -> Bytes {
    Bytes::from(format!("event: {name}\ndata: {value}\n\n"))
}

/// The error body a provider of `shape` answers `status` with.
pub fn error_body(shape: Shape, status: u16) -> String {
    let message = format!("fake upstream answered {status}");
    match shape {
        Shape::OpenAi | Shape::Responses => {
            let (kind, code) = match status {
                401 => ("authentication_error", "invalid_api_key"),
                404 => ("invalid_request_error", "model_not_found"),
                429 => ("rate_limit_error", "rate_limit_exceeded"),
                400..=499 => ("invalid_request_error", "invalid_request"),
                _ => ("server_error", "server_error"),
            };
            json!({"error": {"message": message, "type": kind, "param": null, "code": code}})
        }
        Shape::Anthropic => {
            let status = http::StatusCode::from_u16(status)
                .unwrap_or(http::StatusCode::INTERNAL_SERVER_ERROR);
            let kind = crate::providers::anthropic::error_type(status);
            json!({"type": "error", "error": {"type": kind, "message": message}})
        }
        Shape::Gemini => {
            let kind = match status {
                400 => "INVALID_ARGUMENT",
                401 => "UNAUTHENTICATED",
                403 => "PERMISSION_DENIED",
                404 => "NOT_FOUND",
                429 => "RESOURCE_EXHAUSTED",
                503 => "UNAVAILABLE",
                504 => "DEADLINE_EXCEEDED",
                _ => "INTERNAL",
            };
            json!({"error": {"code": status, "message": message, "status": kind}})
        }
        // Its type goes in the `x-amzn-ErrorType` header.
        Shape::Bedrock => json!({ "message": message }),
    }
    .to_string()
}

/// An embeddings answer: one small vector per input, the same for the same text.
pub fn embeddings(shape: Shape, request: &Value) -> Value {
    let inputs: Vec<String> = match request.get("input") {
        Some(Value::String(text)) => vec![text.clone()],
        Some(Value::Array(items)) => items.iter().map(|i| i.to_string()).collect(),
        // Gemini: one `content`, or a batch of `requests`.
        _ => match request.get("requests").and_then(Value::as_array) {
            Some(requests) => requests
                .iter()
                .map(|r| gemini_text(r.get("content")))
                .collect(),
            None => vec![gemini_text(request.get("content"))],
        },
    };
    match shape {
        Shape::Gemini => {
            let all: Vec<Value> = inputs
                .iter()
                .map(|t| json!({"values": embedding(t)}))
                .collect();
            if request.get("requests").is_some() {
                json!({"embeddings": all})
            } else {
                json!({"embedding": all.first().cloned().unwrap_or(json!({"values": []}))})
            }
        }
        _ => {
            let base64 = request.get("encoding_format").and_then(Value::as_str) == Some("base64");
            let data: Vec<Value> = inputs
                .iter()
                .enumerate()
                .map(|(index, text)| {
                    let values = embedding(text);
                    let embedding = if base64 {
                        let bytes: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
                        json!(crate::providers::gemini::embed::base64(&bytes))
                    } else {
                        json!(values)
                    };
                    json!({"object": "embedding", "index": index, "embedding": embedding})
                })
                .collect();
            let tokens = inputs.iter().map(|t| t.len() as u64 / 4).sum::<u64>();
            json!({
                "object": "list", "data": data,
                "model": request.get("model").cloned().unwrap_or(json!("fake")),
                "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
            })
        }
    }
}

/// The fake's embedding of `text`: three values, the first its length, so the same text
/// always gets the same vector and different lengths tell inputs apart.
pub fn embedding(text: &str) -> Vec<f32> {
    vec![text.len() as f32, 0.5, -0.25]
}

fn gemini_text(content: Option<&Value>) -> String {
    content
        .and_then(|c| c.pointer("/parts/0/text"))
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_owned()
}
