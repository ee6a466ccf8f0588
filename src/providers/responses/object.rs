//! The Response object the gateway writes for a translated step: the request's settings
//! echoed as OpenAI echoes them, the chat answer as output items, and the usage.

use serde_json::{Map, Value, json};

use super::spec;
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
        let mut fields = Map::new();
        for field in spec::ECHOED {
            let value = match field {
                // The chat translation sends no `strict` for a tool that has none, and chat's
                // default is non-strict: `false` is what the step applied (OpenAI's Responses
                // default, true, would claim a guarantee no translated step gives).
                "tools" => match request.get("tools").filter(|v| !v.is_null()) {
                    Some(tools) => spec::whole_tools(tools, &json!(false)),
                    None => spec::unset(field),
                },
                // Any other truncation is refused on a translated step.
                "truncation" => spec::unset(field),
                _ => spec::echoed(request, field),
            };
            fields.insert(field.into(), value);
        }
        // A string, never null, in OpenAI's schema: echoed only when sent (see `spec`).
        if let Some(user) = request.get("user").filter(|v| !v.is_null()) {
            fields.insert("user".into(), user.clone());
        }
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
        for field in spec::STATE {
            response.insert(field.into(), Value::Null);
        }
        response.insert("model".into(), json!(model));
        response.insert("output".into(), Value::Array(output));
        // An object, never null, in OpenAI's schema: left out until it is known (as in
        // `response.created`), which the SDKs read as "no usage" (see `spec`).
        if !usage.is_null() {
            response.insert("usage".into(), usage);
        }
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

    #[test]
    fn a_response_holds_every_field_the_specification_requires() {
        let request = json!({"tools": [{"type": "function", "name": "f"}], "metadata": {"k": "v"}});
        let echo = Echo::of(request.as_object().unwrap());
        let started = echo.response("m", "in_progress", vec![], Value::Null);
        let started = started.as_object().unwrap();
        for field in ["id", "object", "created_at", "status", "model", "output"]
            .into_iter()
            .chain(spec::ECHOED)
            .chain(spec::STATE)
        {
            assert!(started.contains_key(field), "{field}");
        }
        assert!(!spec::lacks_any(started));
        assert_eq!(started["presence_penalty"], 0.0);
        assert_eq!(started["top_logprobs"], 0);
        assert_eq!(started["background"], false);
        assert_eq!(started["service_tier"], "default");
        assert_eq!(started["metadata"], json!({"k": "v"}));
        assert_eq!(started["completed_at"], Value::Null);
        assert_eq!(
            started["tools"],
            json!([{"type": "function", "name": "f", "parameters": null, "strict": false}])
        );
        let done = json!({"model": "m", "choices": [{"finish_reason": "stop", "message": {"content": "Hi"}}]});
        assert!(from_chat(&echo, &done).unwrap()["completed_at"].is_u64());
    }

    #[test]
    fn unknown_usage_and_an_unsent_user_are_left_out_not_null() {
        let started = Echo::of(&Map::new()).response("m", "in_progress", vec![], Value::Null);
        assert!(started.get("usage").is_none());
        assert!(started.get("user").is_none());
        let request = json!({"user": "u-1"});
        let echo = Echo::of(request.as_object().unwrap());
        assert_eq!(
            echo.response("m", "completed", vec![], Value::Null)["user"],
            "u-1"
        );
    }
}
