//! The Response object the gateway writes for a translated step: the request's settings
//! echoed as OpenAI echoes them, the chat answer as output items, and the usage.

use serde_json::{Map, Value, json};

use crate::providers::Usage;

/// What a Response object repeats of its request, and its identity.
#[derive(Clone, Debug)]
pub struct Echo {
    pub id: String,
    pub created_at: u64,
    fields: Map<String, Value>,
}

impl Echo {
    /// The echo of `request`, with a fresh response id.
    pub fn of(request: &Map<String, Value>) -> Echo {
        let field = |name: &str, default: Value| {
            request
                .get(name)
                .filter(|v| !v.is_null())
                .cloned()
                .unwrap_or(default)
        };
        let mut fields = Map::new();
        fields.insert("instructions".into(), field("instructions", Value::Null));
        fields.insert(
            "max_output_tokens".into(),
            field("max_output_tokens", Value::Null),
        );
        fields.insert("metadata".into(), field("metadata", json!({})));
        fields.insert(
            "parallel_tool_calls".into(),
            field("parallel_tool_calls", json!(true)),
        );
        fields.insert(
            "previous_response_id".into(),
            field("previous_response_id", Value::Null),
        );
        fields.insert(
            "reasoning".into(),
            field("reasoning", json!({"effort": null, "summary": null})),
        );
        fields.insert("store".into(), field("store", json!(true)));
        fields.insert("temperature".into(), field("temperature", json!(1.0)));
        fields.insert(
            "text".into(),
            field("text", json!({"format": {"type": "text"}})),
        );
        fields.insert("tool_choice".into(), field("tool_choice", json!("auto")));
        fields.insert("tools".into(), field("tools", json!([])));
        fields.insert("top_p".into(), field("top_p", json!(1.0)));
        fields.insert("truncation".into(), json!("disabled"));
        fields.insert("user".into(), field("user", Value::Null));
        Echo {
            id: format!("resp_{}", uuid::Uuid::now_v7().simple()),
            created_at: unix_now(),
            fields,
        }
    }

    /// The Response object in a state, with its output and usage so far.
    pub fn response(&self, model: &str, status: &str, output: Vec<Value>, usage: Value) -> Value {
        let mut response = Map::new();
        response.insert("id".into(), json!(self.id));
        response.insert("object".into(), json!("response"));
        response.insert("created_at".into(), json!(self.created_at));
        response.insert("status".into(), json!(status));
        response.insert("error".into(), Value::Null);
        response.insert("incomplete_details".into(), Value::Null);
        response.insert("model".into(), json!(model));
        response.insert("output".into(), Value::Array(output));
        response.insert("usage".into(), usage);
        for (name, value) in &self.fields {
            response.insert(name.clone(), value.clone());
        }
        Value::Object(response)
    }
}

pub fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// A chat `usage` object as a Responses `usage`.
pub fn usage(chat: Option<&Value>) -> Value {
    let Some(chat) = chat.filter(|u| u.is_object()) else {
        return Value::Null;
    };
    let count = |pointer: &str| chat.pointer(pointer).and_then(Value::as_u64).unwrap_or(0);
    let (input, output) = (count("/prompt_tokens"), count("/completion_tokens"));
    json!({
        "input_tokens": input,
        "input_tokens_details": {
            "cached_tokens": count("/prompt_tokens_details/cached_tokens"),
            "cache_write_tokens": 0,
        },
        "output_tokens": output,
        "output_tokens_details": {
            "reasoning_tokens": count("/completion_tokens_details/reasoning_tokens"),
        },
        "total_tokens": input + output,
    })
}

/// A Responses `usage` as the gateway counts tokens.
pub fn usage_counts(usage: &Value) -> Option<Usage> {
    let input = usage.get("input_tokens")?.as_u64()?;
    let output = usage.get("output_tokens")?.as_u64()?;
    Some(Usage {
        prompt_tokens: input,
        completion_tokens: output,
    })
}

/// An assistant message item holding `text` (and a refusal, if any).
pub fn message_item(id: &str, status: &str, text: &str, refusal: Option<&str>) -> Value {
    let mut content = Vec::new();
    if !text.is_empty() || refusal.is_none() {
        content.push(output_text(text));
    }
    if let Some(refusal) = refusal {
        content.push(json!({"type": "refusal", "refusal": refusal}));
    }
    json!({"id": id, "type": "message", "role": "assistant", "status": status, "content": content})
}

/// An `output_text` content part.
pub fn output_text(text: &str) -> Value {
    json!({"type": "output_text", "text": text, "annotations": [], "logprobs": []})
}

/// A `function_call` output item.
pub fn function_call(id: &str, call_id: &str, name: &str, arguments: &str, status: &str) -> Value {
    json!({"id": id, "type": "function_call", "status": status, "call_id": call_id,
           "name": name, "arguments": arguments})
}

/// An output item id with the prefix OpenAI uses for its kind.
pub fn item_id(prefix: &str) -> String {
    format!("{prefix}_{}", uuid::Uuid::now_v7().simple())
}

/// Why a chat answer stopped, as a Response's status and `incomplete_details`.
pub fn finish(reason: Option<&str>) -> (&'static str, Value) {
    match reason {
        Some("length") => ("incomplete", json!({"reason": "max_output_tokens"})),
        Some("content_filter") => ("incomplete", json!({"reason": "content_filter"})),
        _ => ("completed", Value::Null),
    }
}

/// A whole chat completion as a Response object.
pub fn from_chat(echo: &Echo, completion: &Value) -> Option<Value> {
    let choice = completion.get("choices")?.as_array()?.first()?;
    let message = choice.get("message")?;
    let text = message.get("content").and_then(Value::as_str).unwrap_or("");
    let refusal = message.get("refusal").and_then(Value::as_str);
    let (status, incomplete) = finish(choice.get("finish_reason").and_then(Value::as_str));
    let item_status = if status == "completed" {
        "completed"
    } else {
        "incomplete"
    };
    let mut output = Vec::new();
    if !text.is_empty() || refusal.is_some() {
        output.push(message_item(&item_id("msg"), item_status, text, refusal));
    }
    for call in message
        .get("tool_calls")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let function = call.get("function")?;
        let text = |v: Option<&Value>| v.and_then(Value::as_str).unwrap_or("").to_owned();
        output.push(function_call(
            &item_id("fc"),
            &text(call.get("id")),
            &text(function.get("name")),
            &text(function.get("arguments")),
            "completed",
        ));
    }
    if output.is_empty() {
        output.push(message_item(&item_id("msg"), item_status, "", None));
    }
    let model = completion
        .get("model")
        .and_then(Value::as_str)
        .unwrap_or("");
    let mut response = echo.response(model, status, output, usage(completion.get("usage")));
    response["incomplete_details"] = incomplete;
    if status == "completed" {
        response["completed_at"] = json!(unix_now());
    }
    Some(response)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_chat_completion_becomes_output_items_and_usage() {
        let echo = Echo::of(&Map::new());
        let completion = json!({
            "model": "m1",
            "choices": [{"index": 0, "finish_reason": "tool_calls", "message": {
                "role": "assistant", "content": "Let me look.",
                "tool_calls": [{"id": "call_1", "type": "function", "function": {"name": "f", "arguments": "{\"a\":1}"}}]}}],
            "usage": {"prompt_tokens": 7, "completion_tokens": 3,
                      "prompt_tokens_details": {"cached_tokens": 4},
                      "completion_tokens_details": {"reasoning_tokens": 2}},
        });
        let response = from_chat(&echo, &completion).unwrap();
        assert_eq!(response["object"], "response");
        assert_eq!(response["status"], "completed");
        assert_eq!(response["model"], "m1");
        assert_eq!(response["output"][0]["content"][0]["text"], "Let me look.");
        assert_eq!(response["output"][1]["type"], "function_call");
        assert_eq!(response["output"][1]["call_id"], "call_1");
        assert_eq!(response["output"][1]["arguments"], "{\"a\":1}");
        assert_eq!(response["usage"]["input_tokens"], 7);
        assert_eq!(
            response["usage"]["input_tokens_details"]["cached_tokens"],
            4
        );
        assert_eq!(
            response["usage"]["output_tokens_details"]["reasoning_tokens"],
            2
        );
        assert_eq!(response["usage"]["total_tokens"], 10);
        let cut = json!({"model": "m", "choices": [{"finish_reason": "length", "message": {"content": "ab"}}]});
        let cut = from_chat(&echo, &cut).unwrap();
        assert_eq!(cut["status"], "incomplete");
        assert_eq!(cut["incomplete_details"]["reason"], "max_output_tokens");
    }
}
