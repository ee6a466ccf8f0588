//! What every Response object holds: the fields the Open Responses specification's
//! `ResponseResource` requires, the value each takes when its request did not set it, and
//! function tools in the full form of OpenAI's `FunctionTool`.
//!
//! A translated step's Response is built whole from these ([`super::object::Echo`]); one a
//! provider that speaks the Responses API made, or one the gateway stored earlier, gets what
//! it lacks ([`complete`]), and keeps every field it has.
//!
//! Two required fields are left out when there is nothing to say: `user` (no `user` sent) and
//! `usage` (not known yet, as in `response.created`). Open Responses wants them there and
//! null, but OpenAI's own schema types them as a string and an object, never null, and no
//! value satisfies both without claiming what is not so (an empty user, zero tokens). OpenAI's
//! form is kept: its SDKs read a missing field as "none", and its schema is the one the SDK
//! tests hold the gateway to.

use serde_json::{Map, Value, json};

/// The settings a Response repeats of its request.
pub const ECHOED: [&str; 21] = [
    "previous_response_id",
    "instructions",
    "tools",
    "tool_choice",
    "truncation",
    "parallel_tool_calls",
    "text",
    "top_p",
    "presence_penalty",
    "frequency_penalty",
    "top_logprobs",
    "temperature",
    "reasoning",
    "max_output_tokens",
    "max_tool_calls",
    "store",
    "background",
    "service_tier",
    "metadata",
    "safety_identifier",
    "prompt_cache_key",
];

/// The state a Response reports, null until there is one: when it completed, why it is
/// incomplete, how it failed.
pub const STATE: [&str; 3] = ["completed_at", "incomplete_details", "error"];

/// The value of an echoed setting the request did not set, as the specification's example
/// (and OpenAI) gives it.
pub fn unset(field: &str) -> Value {
    match field {
        "tools" => json!([]),
        "tool_choice" => json!("auto"),
        "truncation" => json!("disabled"),
        "parallel_tool_calls" | "store" => json!(true),
        "text" => json!({"format": {"type": "text"}}),
        "top_p" | "temperature" => json!(1.0),
        "presence_penalty" | "frequency_penalty" => json!(0.0),
        "top_logprobs" => json!(0),
        "reasoning" => json!({"effort": null, "summary": null}),
        "background" => json!(false),
        "service_tier" => json!("default"),
        "metadata" => json!({}),
        _ => Value::Null,
    }
}

/// The request's value of an echoed setting, or its [`unset`] value.
pub fn echoed(request: &Map<String, Value>, field: &str) -> Value {
    match request.get(field).filter(|v| !v.is_null()) {
        Some(value) => value.clone(),
        None => unset(field),
    }
}

/// Tools with every function tool whole: `parameters` null, and `strict` as `strict`, where
/// a tool has none; every other field, and every other tool, as it is.
pub fn whole_tools(tools: &Value, strict: &Value) -> Value {
    let Some(tools) = tools.as_array() else {
        return tools.clone();
    };
    let whole = tools
        .iter()
        .map(|tool| match tool.as_object() {
            Some(function) if function_lacks_a_field(function) => {
                let mut function = function.clone();
                function.entry("parameters").or_insert(Value::Null);
                function.entry("strict").or_insert_with(|| strict.clone());
                Value::Object(function)
            }
            _ => tool.clone(),
        })
        .collect();
    Value::Array(whole)
}

fn function_lacks_a_field(tool: &Map<String, Value>) -> bool {
    tool.get("type").and_then(Value::as_str) == Some("function")
        && !(tool.contains_key("parameters") && tool.contains_key("strict"))
}

/// Whether `response` lacks a field [`complete`] would add.
pub fn lacks_any(response: &Map<String, Value>) -> bool {
    let lacks_a_field = ECHOED
        .iter()
        .chain(&STATE)
        .any(|field| !response.contains_key(*field));
    lacks_a_field || !response.get("tools").is_none_or(all_whole)
}

/// Adds what `response` lacks: each echoed setting as `request` set it (or its [`unset`]
/// value), each state field null, and the fields a function tool lacks (`strict` null: the
/// gateway cannot know what the provider applied). Nothing it holds is changed.
pub fn complete(response: &mut Map<String, Value>, request: &Map<String, Value>) {
    name_previous(response, request);
    for field in ECHOED {
        if !response.contains_key(field) {
            response.insert(field.into(), echoed(request, field));
        }
    }
    for field in STATE {
        response.entry(field).or_insert(Value::Null);
    }
    if let Some(tools) = response.get_mut("tools").filter(|tools| !all_whole(tools)) {
        *tools = whole_tools(tools, &Value::Null);
    }
}

/// The turn the request continued, where `response` names none: the gateway sends a
/// provider the whole conversation in place of `previous_response_id`, so a provider that
/// speaks the Responses API answers with it null.
pub fn name_previous(response: &mut Map<String, Value>, request: &Map<String, Value>) {
    let Some(previous @ Value::String(_)) = request.get("previous_response_id") else {
        return;
    };
    if response
        .get("previous_response_id")
        .is_none_or(Value::is_null)
    {
        response.insert("previous_response_id".into(), previous.clone());
    }
}

/// Whether the request continued a turn (named by `previous_response_id`).
pub fn continues(request: &Map<String, Value>) -> bool {
    matches!(request.get("previous_response_id"), Some(Value::String(_)))
}

/// Whether every function tool among `tools` is whole.
fn all_whole(tools: &Value) -> bool {
    let tools = tools.as_array().map_or(&[][..], Vec::as_slice);
    !tools
        .iter()
        .filter_map(Value::as_object)
        .any(function_lacks_a_field)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(value: Value) -> Map<String, Value> {
        match value {
            Value::Object(map) => map,
            _ => Map::new(),
        }
    }

    #[test]
    fn a_function_tool_is_made_whole_and_nothing_sent_is_changed() {
        let tools = json!([
            {"type": "function", "name": "f", "description": "d"},
            {"type": "function", "name": "g", "parameters": {"type": "object"}, "strict": true},
            {"type": "web_search"},
        ]);
        assert_eq!(
            whole_tools(&tools, &json!(false)),
            json!([
                {"type": "function", "name": "f", "description": "d", "parameters": null, "strict": false},
                {"type": "function", "name": "g", "parameters": {"type": "object"}, "strict": true},
                {"type": "web_search"},
            ])
        );
    }

    #[test]
    fn a_response_lacking_fields_gets_the_requests_values_or_the_defaults() {
        let mut response = map(json!({
            "id": "resp_1", "object": "response", "temperature": 0.2, "error": {"code": "x"},
            "tools": [{"type": "function", "name": "f"}],
        }));
        assert!(lacks_any(&response));
        let request = map(json!({"temperature": 0.9, "max_tool_calls": 3, "top_p": null}));
        complete(&mut response, &request);
        assert!(!lacks_any(&response));
        assert_eq!(
            response["temperature"], 0.2,
            "what the provider said is kept"
        );
        assert_eq!(response["error"], json!({"code": "x"}));
        assert_eq!(response["max_tool_calls"], 3, "the request's setting");
        assert_eq!(response["top_p"], 1.0, "a null setting is unset");
        assert_eq!(response["presence_penalty"], 0.0);
        assert_eq!(response["top_logprobs"], 0);
        assert_eq!(response["background"], false);
        assert_eq!(response["service_tier"], "default");
        assert_eq!(response["prompt_cache_key"], Value::Null);
        assert_eq!(response["completed_at"], Value::Null);
        assert_eq!(
            response["tools"],
            json!([{"type": "function", "name": "f", "parameters": null, "strict": null}])
        );
        assert!(!response.contains_key("user") && !response.contains_key("usage"));
    }
}
