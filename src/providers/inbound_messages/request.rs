//! An Anthropic Messages request (from a `/v1/messages` client) written as an OpenAI chat
//! request, for steps served by the OpenAI family, Azure or Gemini.
//!
//! Field by field:
//! - `system` (a string or text blocks) → a leading `system` message.
//! - User turns: text → text parts, `image` blocks → `image_url` parts (base64 as `data:`
//!   URLs), `tool_result` blocks → `tool` messages placed before the turn's other content.
//! - Assistant turns: text → `content`, `tool_use` → `tool_calls` (input serialized).
//! - `max_tokens`, `temperature`, `top_p`, `stream` as they are; `stop_sequences` → `stop`;
//!   `metadata.user_id` → `user`; `tools` → function tools (`strict` kept); `tool_choice`
//!   (`auto`, `any`, `tool`, `none`) and `disable_parallel_tool_use` → `tool_choice`,
//!   `parallel_tool_calls`.
//! - Structured output: `output_config.format` (and the older beta `output_format`) of type
//!   `json_schema` → `response_format` `json_schema` (strict, as Anthropic's always is);
//!   `output_config.effort` → `reasoning_effort`.
//! - Dropped, by design: `top_k` and `service_tier` (sampling and billing hints OpenAI has no
//!   counterpart for), `thinking` and thinking blocks (the model's own scratchpad: another
//!   model must not read it as text), `cache_control` (OpenAI caches prompts by itself), and
//!   `is_error` on tool results.
//! - Rejected with a 400 naming the field: every other top-level field (`mcp_servers`,
//!   `container`, `context_management`, and any field added later), server tools (a `type`
//!   other than `custom`) and tool fields without a counterpart, `document` and other
//!   non-text, non-image blocks, images inside tool results, and assistant blocks other than
//!   text, tool use and thinking.

use serde_json::{Map, Value, json};

use crate::providers::Rejection;

/// Writes an Anthropic request as an OpenAI chat request (its `model` is set later).
pub fn to_openai(request: &Map<String, Value>) -> Result<Map<String, Value>, Rejection> {
    if let Some(field) = request.keys().find(|f| !CARRIED.contains(&f.as_str())) {
        return Err(Rejection::new(
            field,
            format!(
                "`{field}` is served by Anthropic only, and this route's step is another provider"
            ),
        ));
    }
    let mut out = Map::new();
    out.insert(
        "model".into(),
        request.get("model").cloned().unwrap_or(json!("")),
    );
    let mut messages = Vec::new();
    match request.get("system") {
        Some(Value::String(system)) => messages.push(json!({"role": "system", "content": system})),
        Some(Value::Array(blocks)) => {
            let text: String = blocks
                .iter()
                .filter_map(|b| b.get("text").and_then(Value::as_str))
                .collect::<Vec<_>>()
                .join("\n\n");
            messages.push(json!({"role": "system", "content": text}));
        }
        _ => {}
    }
    let Some(Value::Array(turns)) = request.get("messages") else {
        return Err(Rejection::new("messages", "`messages` must be an array"));
    };
    for (i, turn) in turns.iter().enumerate() {
        match turn.get("role").and_then(Value::as_str) {
            Some("user") => user_turn(turn, i, &mut messages)?,
            Some("assistant") => messages.push(assistant_turn(turn, i)?),
            _ => {
                return Err(Rejection::new(
                    &format!("messages.{i}.role"),
                    "must be `user` or `assistant`",
                ));
            }
        }
    }
    out.insert("messages".into(), Value::Array(messages));
    for field in ["max_tokens", "temperature", "top_p", "stream"] {
        if let Some(value) = request.get(field) {
            out.insert(field.into(), value.clone());
        }
    }
    if let Some(stops) = request.get("stop_sequences").and_then(Value::as_array)
        && !stops.is_empty()
    {
        out.insert("stop".into(), Value::Array(stops.clone()));
    }
    if let Some(user) = request
        .get("metadata")
        .and_then(|m| m.get("user_id"))
        .and_then(Value::as_str)
    {
        out.insert("user".into(), json!(user));
    }
    tools(request, &mut out)?;
    output(request, &mut out)?;
    Ok(out)
}

/// The top-level fields this translation carries, or drops by design (see the module doc).
const CARRIED: &[&str] = &[
    "model",
    "messages",
    "system",
    "max_tokens",
    "temperature",
    "top_p",
    "stream",
    "stop_sequences",
    "metadata",
    "tools",
    "tool_choice",
    "output_config",
    "output_format",
    "top_k",
    "service_tier",
    "thinking",
];

/// `output_config` and the older `output_format`: a JSON schema the answer must follow, and
/// how much effort the model spends.
fn output(request: &Map<String, Value>, out: &mut Map<String, Value>) -> Result<(), Rejection> {
    let mut format = request.get("output_format").map(|f| (f, "output_format"));
    if let Some(config) = request.get("output_config") {
        let Some(config) = config.as_object() else {
            return Err(Rejection::new("output_config", "must be an object"));
        };
        for (key, value) in config {
            match key.as_str() {
                "format" => format = Some((value, "output_config.format")),
                "effort" => {
                    // OpenAI's highest effort is `xhigh`; Anthropic's `max` goes above it.
                    let effort = match value.as_str() {
                        Some("max") => json!("xhigh"),
                        _ => value.clone(),
                    };
                    if !effort.is_null() {
                        out.insert("reasoning_effort".into(), effort);
                    }
                }
                other => {
                    return Err(Rejection::new(
                        &format!("output_config.{other}"),
                        "has no counterpart at this route's step, which is another provider",
                    ));
                }
            }
        }
    }
    let Some((format, field)) = format.filter(|(f, _)| !f.is_null()) else {
        return Ok(());
    };
    match (
        format.get("type").and_then(Value::as_str),
        format.get("schema"),
    ) {
        (Some("json_schema"), Some(schema)) => {
            out.insert(
                "response_format".into(),
                json!({"type": "json_schema", "json_schema": {"name": "output", "schema": schema, "strict": true}}),
            );
            Ok(())
        }
        _ => Err(Rejection::new(
            &format!("{field}.type"),
            "only a `json_schema` format with a `schema` can be sent to this route's step",
        )),
    }
}

/// The blocks of a turn's `content`: a string is one text block.
fn blocks(turn: &Value, i: usize) -> Result<Vec<Value>, Rejection> {
    match turn.get("content") {
        Some(Value::String(text)) => Ok(vec![json!({"type": "text", "text": text})]),
        Some(Value::Array(blocks)) => Ok(blocks.clone()),
        _ => Err(Rejection::new(
            &format!("messages.{i}.content"),
            "must be a string or an array of content blocks",
        )),
    }
}

fn user_turn(turn: &Value, i: usize, messages: &mut Vec<Value>) -> Result<(), Rejection> {
    let mut parts = Vec::new();
    for (j, block) in blocks(turn, i)?.iter().enumerate() {
        let field = format!("messages.{i}.content.{j}");
        match block.get("type").and_then(Value::as_str) {
            Some("text") => parts.push(
                json!({"type": "text", "text": block.get("text").cloned().unwrap_or(json!(""))}),
            ),
            Some("image") => parts.push(image_part(block, &field)?),
            // OpenAI wants each tool result as its own message, right after the call.
            Some("tool_result") => messages.push(json!({
                "role": "tool",
                "tool_call_id": block.get("tool_use_id").cloned().unwrap_or(json!("")),
                "content": tool_result_text(block, &field)?,
            })),
            other => {
                return Err(Rejection::new(
                    &format!("{field}.type"),
                    format!(
                        "`{}` blocks can only be sent to an Anthropic model",
                        other.unwrap_or("?")
                    ),
                ));
            }
        }
    }
    if parts.is_empty() {
        return Ok(());
    }
    let content = match parts.as_slice() {
        [only] if only["type"] == "text" => only["text"].clone(),
        _ => Value::Array(parts),
    };
    messages.push(json!({"role": "user", "content": content}));
    Ok(())
}

fn image_part(block: &Value, field: &str) -> Result<Value, Rejection> {
    let source = block.get("source").unwrap_or(&Value::Null);
    let text = |name: &str| source.get(name).and_then(Value::as_str);
    let url = match text("type") {
        Some("base64") => format!(
            "data:{};base64,{}",
            text("media_type").unwrap_or("image/png"),
            text("data").unwrap_or("")
        ),
        Some("url") => text("url").unwrap_or("").to_owned(),
        _ => {
            return Err(Rejection::new(
                &format!("{field}.source.type"),
                "only base64 and url image sources can be sent to this model",
            ));
        }
    };
    Ok(json!({"type": "image_url", "image_url": {"url": url}}))
}

fn tool_result_text(block: &Value, field: &str) -> Result<String, Rejection> {
    match block.get("content") {
        None | Some(Value::Null) => Ok(String::new()),
        Some(Value::String(text)) => Ok(text.clone()),
        Some(Value::Array(parts)) => {
            let mut text = Vec::new();
            for part in parts {
                match part.get("text").and_then(Value::as_str) {
                    Some(piece) => text.push(piece),
                    None => {
                        return Err(Rejection::new(
                            &format!("{field}.content"),
                            "tool results sent to this model may hold text only",
                        ));
                    }
                }
            }
            Ok(text.join("\n"))
        }
        Some(_) => Err(Rejection::new(
            &format!("{field}.content"),
            "must be a string or text blocks",
        )),
    }
}

fn assistant_turn(turn: &Value, i: usize) -> Result<Value, Rejection> {
    let mut text = String::new();
    let mut calls = Vec::new();
    for block in blocks(turn, i)? {
        match block.get("type").and_then(Value::as_str) {
            Some("text") => text.push_str(block.get("text").and_then(Value::as_str).unwrap_or("")),
            Some("tool_use") => calls.push(json!({
                "id": block.get("id").cloned().unwrap_or(json!("")),
                "type": "function",
                "function": {
                    "name": block.get("name").cloned().unwrap_or(json!("")),
                    "arguments": block.get("input").unwrap_or(&json!({})).to_string(),
                },
            })),
            // Thinking is the model's own scratchpad: another model must not read it as text.
            Some("thinking" | "redacted_thinking") => {}
            other => {
                return Err(Rejection::new(
                    &format!("messages.{i}.content.type"),
                    format!(
                        "`{}` blocks can only be sent to an Anthropic model",
                        other.unwrap_or("?")
                    ),
                ));
            }
        }
    }
    let mut message = json!({"role": "assistant", "content": if text.is_empty() && !calls.is_empty() { Value::Null } else { json!(text) }});
    if !calls.is_empty() {
        message["tool_calls"] = Value::Array(calls);
    }
    Ok(message)
}

fn tools(request: &Map<String, Value>, out: &mut Map<String, Value>) -> Result<(), Rejection> {
    let Some(Value::Array(tools)) = request.get("tools") else {
        return Ok(());
    };
    let mut functions = Vec::with_capacity(tools.len());
    for (i, tool) in tools.iter().enumerate() {
        if let Some(kind) = tool
            .get("type")
            .and_then(Value::as_str)
            .filter(|t| *t != "custom")
        {
            return Err(Rejection::new(
                &format!("tools.{i}.type"),
                format!("the server tool `{kind}` can only be used with an Anthropic model"),
            ));
        }
        let known = [
            "type",
            "name",
            "description",
            "input_schema",
            "strict",
            "cache_control",
        ];
        if let Some(key) = tool
            .as_object()
            .and_then(|t| t.keys().find(|k| !known.contains(&k.as_str())))
        {
            return Err(Rejection::new(
                &format!("tools.{i}.{key}"),
                "has no counterpart at this route's step, which is another provider",
            ));
        }
        let mut function = Map::new();
        function.insert(
            "name".into(),
            tool.get("name").cloned().unwrap_or(json!("")),
        );
        if let Some(description) = tool.get("description") {
            function.insert("description".into(), description.clone());
        }
        function.insert(
            "parameters".into(),
            tool.get("input_schema")
                .cloned()
                .unwrap_or_else(|| json!({"type": "object", "properties": {}})),
        );
        // Strict tool use: OpenAI's structured outputs for function arguments.
        if let Some(strict) = tool.get("strict").filter(|s| s.is_boolean()) {
            function.insert("strict".into(), strict.clone());
        }
        functions.push(json!({"type": "function", "function": function}));
    }
    if functions.is_empty() {
        return Ok(());
    }
    out.insert("tools".into(), Value::Array(functions));
    if let Some(choice) = request.get("tool_choice") {
        let mapped = match choice.get("type").and_then(Value::as_str) {
            Some("any") => json!("required"),
            Some("none") => json!("none"),
            Some("tool") => {
                json!({"type": "function", "function": {"name": choice.get("name").cloned().unwrap_or(json!(""))}})
            }
            _ => json!("auto"),
        };
        out.insert("tool_choice".into(), mapped);
        if choice.get("disable_parallel_tool_use") == Some(&json!(true)) {
            out.insert("parallel_tool_calls".into(), json!(false));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests;
