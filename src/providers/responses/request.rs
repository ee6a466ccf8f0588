//! A Responses API request: which fields it may carry, and its translation to chat
//! completions for a step that does not speak the Responses API.
//!
//! Field by field (docs/src/api/responses.md lists the same):
//! - `instructions` → a leading `system` message; `input` as a string → one `user` message;
//!   input items: messages (`input_text`, `output_text`, `input_image` parts) → chat messages,
//!   `function_call` → an assistant message's `tool_calls`, `function_call_output` → a `tool`
//!   message; `reasoning` items are the serving provider's own and are not replayed.
//! - `tools` (function tools) → chat tools; `tool_choice`; `text.format` `json_schema` and
//!   `json_object` → `response_format`; `max_output_tokens` → `max_completion_tokens`;
//!   `temperature`, `top_p`, `parallel_tool_calls`, `user`; `reasoning.effort` →
//!   `reasoning_effort` (refused for a step whose chat translation has no counterpart).
//! - Kept by the gateway, not sent: `store`, `metadata`, `previous_response_id` (the gateway
//!   rebuilds the input from its own store), `stream_options`.
//! - Refused with a 400 naming the field: everything else that is set, such as `include`,
//!   `background`, `conversation`, `prompt`, built-in tools, `truncation: "auto"`.

use serde_json::{Map, Value, json};

use crate::providers::Rejection;
use input::input_messages;

mod input;

/// Every top-level field of a Responses request the gateway knows; any other is refused.
pub const KNOWN_FIELDS: &[&str] = &[
    "model",
    "input",
    "instructions",
    "stream",
    "stream_options",
    "store",
    "metadata",
    "previous_response_id",
    "tools",
    "tool_choice",
    "parallel_tool_calls",
    "text",
    "max_output_tokens",
    "temperature",
    "top_p",
    "reasoning",
    "user",
    "include",
    "background",
    "conversation",
    "prompt",
    "truncation",
    "service_tier",
    "safety_identifier",
    "prompt_cache_key",
    "prompt_cache_retention",
    "top_logprobs",
    "max_tool_calls",
];

/// Fields a translated step carries, or the gateway keeps for itself.
const TRANSLATED: &[&str] = &[
    "model",
    "input",
    "instructions",
    "stream",
    "stream_options",
    "store",
    "metadata",
    "previous_response_id",
    "tools",
    "tool_choice",
    "parallel_tool_calls",
    "text",
    "max_output_tokens",
    "temperature",
    "top_p",
    "reasoning",
    "user",
];

/// The first top-level field the Responses API does not have, if any.
pub fn unknown_field(body: &Map<String, Value>) -> Option<&str> {
    body.keys()
        .map(String::as_str)
        .find(|field| !KNOWN_FIELDS.contains(field))
}

/// Whether the step's chat translation carries `reasoning_effort`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Effort {
    Carried,
    Refused,
}

/// Writes a Responses request as a chat completions request (OpenAI's chat format).
pub fn to_chat(body: &Map<String, Value>, effort: Effort) -> Result<Map<String, Value>, Rejection> {
    refuse_uncarried(body)?;
    let mut chat = Map::new();
    if let Some(model) = body.get("model") {
        chat.insert("model".into(), model.clone());
    }
    let mut messages = Vec::new();
    match body.get("instructions") {
        None | Some(Value::Null) => {}
        Some(Value::String(text)) => messages.push(json!({"role": "system", "content": text})),
        Some(_) => {
            return Err(Rejection::new(
                "instructions",
                "`instructions` must be a string",
            ));
        }
    }
    input_messages(body.get("input"), &mut messages)?;
    chat.insert("messages".into(), Value::Array(messages));
    if let Some(tools) = present(body, "tools") {
        chat.insert("tools".into(), chat_tools(tools)?);
    }
    if let Some(choice) = present(body, "tool_choice") {
        chat.insert("tool_choice".into(), chat_tool_choice(choice)?);
    }
    for (from, to) in [
        ("max_output_tokens", "max_completion_tokens"),
        ("temperature", "temperature"),
        ("top_p", "top_p"),
        ("parallel_tool_calls", "parallel_tool_calls"),
        ("user", "user"),
    ] {
        if let Some(value) = present(body, from) {
            chat.insert(to.into(), value.clone());
        }
    }
    if let Some(text) = present(body, "text") {
        text_config(text, &mut chat)?;
    }
    if let Some(reasoning) = present(body, "reasoning") {
        reasoning_config(reasoning, effort, &mut chat)?;
    }
    if body.get("stream") == Some(&Value::Bool(true)) {
        chat.insert("stream".into(), Value::Bool(true));
        // The gateway needs the usage for the log and for `response.completed`.
        chat.insert("stream_options".into(), json!({"include_usage": true}));
    }
    Ok(chat)
}

/// A field that is there and not null.
fn present<'a>(body: &'a Map<String, Value>, field: &str) -> Option<&'a Value> {
    body.get(field).filter(|v| !v.is_null())
}

fn refuse_uncarried(body: &Map<String, Value>) -> Result<(), Rejection> {
    for (field, value) in body {
        if TRANSLATED.contains(&field.as_str()) || value.is_null() {
            continue;
        }
        let harmless = match field.as_str() {
            "include" => value.as_array().is_some_and(Vec::is_empty),
            "background" => value == &Value::Bool(false),
            "truncation" => value == "disabled",
            _ => false,
        };
        if !harmless {
            return Err(Rejection::new(
                field,
                format!(
                    "`{field}` cannot be carried to this route's serving step, which does not speak the Responses API"
                ),
            ));
        }
    }
    Ok(())
}

fn chat_tools(tools: &Value) -> Result<Value, Rejection> {
    let Some(tools) = tools.as_array() else {
        return Err(Rejection::new("tools", "`tools` must be an array"));
    };
    let mut out = Vec::with_capacity(tools.len());
    for (i, tool) in tools.iter().enumerate() {
        let kind = tool.get("type").and_then(Value::as_str).unwrap_or("");
        if kind != "function" {
            return Err(Rejection::new(
                &format!("tools[{i}].type"),
                format!(
                    "tools of type `{kind}` cannot be carried to this route's serving step; only function tools can"
                ),
            ));
        }
        let mut function = Map::new();
        for field in ["name", "description", "parameters", "strict"] {
            if let Some(value) = tool.get(field).filter(|v| !v.is_null()) {
                function.insert(field.into(), value.clone());
            }
        }
        out.push(json!({"type": "function", "function": function}));
    }
    Ok(Value::Array(out))
}

fn chat_tool_choice(choice: &Value) -> Result<Value, Rejection> {
    match choice {
        Value::String(mode) if matches!(mode.as_str(), "auto" | "none" | "required") => {
            Ok(choice.clone())
        }
        Value::Object(object) if object.get("type") == Some(&json!("function")) => {
            match object.get("name").and_then(Value::as_str) {
                Some(name) => Ok(json!({"type": "function", "function": {"name": name}})),
                None => Err(Rejection::new(
                    "tool_choice.name",
                    "a function `tool_choice` needs a `name`",
                )),
            }
        }
        _ => Err(Rejection::new(
            "tool_choice",
            "only `auto`, `none`, `required` or a function `tool_choice` can be carried to this route's serving step",
        )),
    }
}

/// `text.format` as `response_format`; `text.verbosity` has no chat counterpart.
fn text_config(text: &Value, chat: &mut Map<String, Value>) -> Result<(), Rejection> {
    let Some(text) = text.as_object() else {
        return Err(Rejection::new("text", "`text` must be an object"));
    };
    for (field, value) in text {
        if field != "format" && !value.is_null() {
            return Err(Rejection::new(
                &format!("text.{field}"),
                format!("`text.{field}` cannot be carried to this route's serving step"),
            ));
        }
    }
    let Some(format) = text.get("format").filter(|f| !f.is_null()) else {
        return Ok(());
    };
    match format.get("type").and_then(Value::as_str) {
        Some("text") => {}
        Some("json_object") => {
            chat.insert("response_format".into(), json!({"type": "json_object"}));
        }
        Some("json_schema") => {
            let mut schema = Map::new();
            for field in ["name", "schema", "strict", "description"] {
                if let Some(value) = format.get(field).filter(|v| !v.is_null()) {
                    schema.insert(field.into(), value.clone());
                }
            }
            chat.insert(
                "response_format".into(),
                json!({"type": "json_schema", "json_schema": schema}),
            );
        }
        _ => {
            return Err(Rejection::new(
                "text.format.type",
                "`text.format.type` must be text, json_object or json_schema",
            ));
        }
    }
    Ok(())
}

fn reasoning_config(
    reasoning: &Value,
    effort: Effort,
    chat: &mut Map<String, Value>,
) -> Result<(), Rejection> {
    let Some(reasoning) = reasoning.as_object() else {
        return Err(Rejection::new("reasoning", "`reasoning` must be an object"));
    };
    for (field, value) in reasoning {
        if value.is_null() {
            continue;
        }
        match (field.as_str(), effort) {
            ("effort", Effort::Carried) => {
                chat.insert("reasoning_effort".into(), value.clone());
            }
            _ => {
                return Err(Rejection::new(
                    &format!("reasoning.{field}"),
                    format!("`reasoning.{field}` cannot be carried to this route's serving step"),
                ));
            }
        }
    }
    Ok(())
}

/// Renames a chat translator's rejected field to the Responses field it came from.
pub fn responses_param(param: &str) -> String {
    let renamed = match param {
        "response_format" => "text.format",
        "max_completion_tokens" | "max_tokens" => "max_output_tokens",
        "reasoning_effort" => "reasoning.effort",
        "messages" => "input",
        other => other,
    };
    renamed.to_owned()
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
    fn translates_instructions_items_tools_and_format() {
        let body = map(json!({
            "model": "smart",
            "instructions": "Be brief.",
            "input": [
                {"role": "user", "content": [{"type": "input_text", "text": "Weather?"}]},
                {"type": "function_call", "call_id": "c1", "name": "weather", "arguments": "{}"},
                {"type": "function_call_output", "call_id": "c1", "output": "sunny"},
                {"type": "reasoning", "id": "rs_1", "summary": []},
            ],
            "tools": [{"type": "function", "name": "weather", "parameters": {"type": "object"}, "strict": null}],
            "tool_choice": {"type": "function", "name": "weather"},
            "text": {"format": {"type": "json_schema", "name": "w", "schema": {"type": "object"}, "strict": true}},
            "max_output_tokens": 50,
            "temperature": 0.5,
            "reasoning": {"effort": "low"},
            "store": true,
            "stream": true,
        }));
        let chat = Value::Object(to_chat(&body, Effort::Carried).unwrap());
        assert_eq!(
            chat["messages"],
            json!([
                {"role": "system", "content": "Be brief."},
                {"role": "user", "content": [{"type": "text", "text": "Weather?"}]},
                {"role": "assistant", "content": null, "tool_calls": [
                    {"id": "c1", "type": "function", "function": {"name": "weather", "arguments": "{}"}}]},
                {"role": "tool", "tool_call_id": "c1", "content": "sunny"},
            ])
        );
        assert_eq!(
            chat["tools"],
            json!([{"type": "function", "function": {"name": "weather", "parameters": {"type": "object"}}}])
        );
        assert_eq!(
            chat["tool_choice"],
            json!({"type": "function", "function": {"name": "weather"}})
        );
        assert_eq!(chat["response_format"]["json_schema"]["name"], "w");
        assert_eq!(chat["max_completion_tokens"], 50);
        assert_eq!(chat["reasoning_effort"], "low");
        assert_eq!(chat["stream_options"]["include_usage"], true);
        assert!(chat.get("store").is_none());
    }

    #[test]
    fn a_chat_translators_refusal_names_the_responses_field() {
        assert_eq!(responses_param("response_format"), "text.format");
        assert_eq!(
            responses_param("max_completion_tokens"),
            "max_output_tokens"
        );
        assert_eq!(responses_param("reasoning_effort"), "reasoning.effort");
        assert_eq!(responses_param("tools[0].type"), "tools[0].type");
    }

    #[test]
    fn refuses_what_cannot_be_carried_naming_the_field() {
        let refused = |body: Value, effort| to_chat(&map(body), effort).unwrap_err().param;
        assert_eq!(
            refused(
                json!({"input": "x", "include": ["file_search_call.results"]}),
                Effort::Carried
            ),
            Some("include".into())
        );
        assert_eq!(
            refused(
                json!({"input": "x", "tools": [{"type": "web_search"}]}),
                Effort::Carried
            ),
            Some("tools[0].type".into())
        );
        assert_eq!(
            refused(
                json!({"input": "x", "reasoning": {"effort": "high"}}),
                Effort::Refused
            ),
            Some("reasoning.effort".into())
        );
        assert_eq!(
            refused(
                json!({"input": "x", "text": {"verbosity": "low"}}),
                Effort::Carried
            ),
            Some("text.verbosity".into())
        );
        assert_eq!(
            refused(
                json!({"input": [{"type": "item_reference", "id": "x"}]}),
                Effort::Carried
            ),
            Some("input[0].type".into())
        );
        assert!(
            to_chat(
                &map(json!({"input": "x", "include": [], "truncation": "disabled"})),
                Effort::Carried
            )
            .is_ok()
        );
        assert_eq!(
            unknown_field(&map(json!({"model": "m", "frobnicate": 1}))),
            Some("frobnicate")
        );
    }
}
