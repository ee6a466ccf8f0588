//! An OpenAI chat request written as a Bedrock Converse request, the one shape every model
//! family on Bedrock takes.
//!
//! Field by field (docs/src/providers/bedrock.md lists the same):
//! - `system` / `developer` messages → `system` text blocks; `user` → role `user`;
//!   `assistant` → role `assistant`, its `tool_calls` → `toolUse` blocks; `tool` messages →
//!   `toolResult` blocks in a user turn (a JSON object result as `json`, else `text`);
//!   consecutive turns of one role merge, as Converse wants roles to alternate.
//! - `image_url` parts with `data:` URLs → `image` blocks (png, jpeg, gif, webp) with base64
//!   `bytes`.
//! - `inferenceConfig`: `max_completion_tokens` / `max_tokens` → `maxTokens`, `temperature`,
//!   `top_p` → `topP`, `stop` → `stopSequences`.
//! - `tools` → `toolConfig.tools[].toolSpec` (`inputSchema.json`, `strict`); `tool_choice`
//!   `auto` / `required` / a function → `auto` / `any` / `tool`; `none` sends no tools, which
//!   only a conversation with no tool turns can do.
//! - `response_format` `json_schema` → `outputConfig.textFormat` (Bedrock's structured
//!   output, the schema as a JSON string).
//! - Dropped, as for Anthropic (hints with no counterpart, whose absence changes no answer's
//!   shape): `frequency_penalty`, `presence_penalty`, `seed`, `logit_bias`, `store`,
//!   `metadata`, `service_tier`, `stream_options`, `prediction`, `reasoning_effort`,
//!   `verbosity`, `prompt_cache_key`, `prompt_cache_retention`, `user`, `safety_identifier`,
//!   `parallel_tool_calls`, message `name`s.
//! - Rejected with a 400 naming the field: `n` > 1, `logprobs`, audio, `response_format`
//!   `json_object` (Bedrock constrains output only to a schema), legacy `functions`, non-function
//!   tools, http(s) image URLs (Converse takes images inline or from S3), other part types,
//!   and every other top-level field.

use serde_json::{Map, Value, json};

use crate::providers::Rejection;
use crate::providers::anthropic::encode::{
    declare_functions, parameters_or_empty, read_turns, refuse_one_answer_fields, split_data_url,
    stop_sequences, text_of,
};

/// Writes `request` (OpenAI's format) as a Converse request.
pub fn from_openai(request: &Map<String, Value>) -> Result<Map<String, Value>, Rejection> {
    refuse_one_answer_fields(request, "Bedrock")?;
    let mut out = Map::new();
    let (system, messages, used_tools) = messages(request)?;
    out.insert("messages".into(), Value::Array(messages));
    if !system.is_empty() {
        let blocks = system
            .into_iter()
            .map(|text| json!({"text": text}))
            .collect();
        out.insert("system".into(), Value::Array(blocks));
    }
    let config = inference_config(request);
    if !config.is_empty() {
        out.insert("inferenceConfig".into(), Value::Object(config));
    }
    if let Some(tools) = tool_config(request, used_tools)? {
        out.insert("toolConfig".into(), tools);
    }
    if let Some(format) = output_config(request)? {
        out.insert("outputConfig".into(), format);
    }
    Ok(out)
}

/// The system prompt's parts, the turns in Converse's shape, and whether any turn holds a
/// tool call or result (Converse then needs the tools declared).
fn messages(request: &Map<String, Value>) -> Result<(Vec<String>, Vec<Value>, bool), Rejection> {
    let (system, turns) = read_turns(request, "a Bedrock model", |i, role, message| {
        let content = message.get("content").unwrap_or(&Value::Null);
        Ok(Some(match role {
            "user" => ("user", user_blocks(content, i)?),
            "assistant" => ("assistant", assistant_blocks(message, i)?),
            "tool" => ("user", vec![tool_result(message, i)?]),
            _ => return Ok(None),
        }))
    })?;
    let used_tools = turns
        .iter()
        .flat_map(|(_, blocks)| blocks)
        .any(|block| block.get("toolUse").is_some() || block.get("toolResult").is_some());
    let turns = turns
        .into_iter()
        .map(|(role, content)| json!({"role": role, "content": content}))
        .collect();
    Ok((system, turns, used_tools))
}

fn user_blocks(content: &Value, i: usize) -> Result<Vec<Value>, Rejection> {
    let parts = match content {
        Value::Array(parts) => parts,
        other => return Ok(vec![json!({"text": text_of(other, i)?})]),
    };
    let mut blocks = Vec::with_capacity(parts.len());
    for (j, part) in parts.iter().enumerate() {
        match part.get("type").and_then(Value::as_str).unwrap_or("") {
            "text" => blocks.push(json!({"text": part.get("text").cloned().unwrap_or(json!(""))})),
            "image_url" => {
                let url = part
                    .pointer("/image_url/url")
                    .and_then(Value::as_str)
                    .unwrap_or("");
                blocks.push(image_block(url).ok_or_else(|| {
                    Rejection::new(
                        &format!("messages[{i}].content[{j}].image_url.url"),
                        "Bedrock takes images inline: send a data: URL with base64 PNG, JPEG, GIF or WebP data",
                    )
                })?);
            }
            other => {
                return Err(Rejection::new(
                    &format!("messages[{i}].content[{j}].type"),
                    format!("`{other}` parts cannot be sent to a Bedrock model"),
                ));
            }
        }
    }
    Ok(blocks)
}

/// A `data:image/...;base64,` URL as an `image` block; Converse names the format, not the
/// media type, and carries the bytes as base64 in JSON.
fn image_block(url: &str) -> Option<Value> {
    let (media_type, data) = split_data_url(url)?;
    let format = match media_type {
        "image/png" => "png",
        "image/jpeg" | "image/jpg" => "jpeg",
        "image/gif" => "gif",
        "image/webp" => "webp",
        _ => return None,
    };
    Some(json!({"image": {"format": format, "source": {"bytes": data}}}))
}

fn assistant_blocks(message: &Value, i: usize) -> Result<Vec<Value>, Rejection> {
    let mut blocks = Vec::new();
    let text = text_of(message.get("content").unwrap_or(&Value::Null), i)?;
    if !text.is_empty() {
        blocks.push(json!({"text": text}));
    }
    let calls = message
        .get("tool_calls")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default();
    for (j, call) in calls.iter().enumerate() {
        let arguments = call
            .pointer("/function/arguments")
            .and_then(Value::as_str)
            .unwrap_or("");
        let input: Value = if arguments.trim().is_empty() {
            json!({})
        } else {
            match serde_json::from_str(arguments) {
                Ok(Value::Object(input)) => Value::Object(input),
                _ => {
                    return Err(Rejection::new(
                        &format!("messages[{i}].tool_calls[{j}].function.arguments"),
                        "must be a JSON object to be sent to a Bedrock model",
                    ));
                }
            }
        };
        blocks.push(json!({"toolUse": {
            "toolUseId": call.get("id").cloned().unwrap_or(json!("")),
            "name": call.pointer("/function/name").cloned().unwrap_or(json!("")),
            "input": input,
        }}));
    }
    Ok(blocks)
}

fn tool_result(message: &Value, i: usize) -> Result<Value, Rejection> {
    let id = message
        .get("tool_call_id")
        .and_then(Value::as_str)
        .unwrap_or("");
    let text = text_of(message.get("content").unwrap_or(&Value::Null), i)?;
    let content = match serde_json::from_str::<Value>(&text) {
        Ok(Value::Object(object)) => json!({"json": object}),
        _ => json!({"text": text}),
    };
    Ok(json!({"toolResult": {"toolUseId": id, "content": [content]}}))
}

fn inference_config(request: &Map<String, Value>) -> Map<String, Value> {
    let mut config = Map::new();
    if let Some(max) = request
        .get("max_completion_tokens")
        .or_else(|| request.get("max_tokens"))
        .filter(|v| v.is_u64())
    {
        config.insert("maxTokens".into(), max.clone());
    }
    for (from, to) in [("temperature", "temperature"), ("top_p", "topP")] {
        if let Some(value) = request.get(from).filter(|v| v.is_number()) {
            config.insert(to.into(), value.clone());
        }
    }
    if let Some(stops) = stop_sequences(request) {
        config.insert("stopSequences".into(), stops);
    }
    config
}

fn tool_config(request: &Map<String, Value>, used_tools: bool) -> Result<Option<Value>, Rejection> {
    let tools = match request.get("tools") {
        Some(Value::Array(tools)) if !tools.is_empty() => tools,
        _ => return Ok(None),
    };
    let choice = match request.get("tool_choice") {
        None => None,
        Some(Value::String(choice)) => match choice.as_str() {
            "auto" => Some(json!({"auto": {}})),
            "required" => Some(json!({"any": {}})),
            "none" if used_tools => {
                return Err(Rejection::new(
                    "tool_choice",
                    "Bedrock cannot be told not to call tools in a conversation that already used them: leave `tool_choice` out or use `auto`",
                ));
            }
            // No tools sent: the model cannot call one.
            "none" => return Ok(None),
            other => {
                return Err(Rejection::new(
                    "tool_choice",
                    format!("`{other}` is not one of `auto`, `required`, `none`"),
                ));
            }
        },
        Some(choice) => match choice.pointer("/function/name") {
            Some(name) => Some(json!({"tool": {"name": name}})),
            None => {
                return Err(Rejection::new(
                    "tool_choice",
                    "must name a function: {\"type\": \"function\", \"function\": {\"name\": ...}}",
                ));
            }
        },
    };
    let specs: Vec<Value> = declare_functions(tools, "a Bedrock model", |function, spec| {
        spec.insert(
            "inputSchema".into(),
            json!({"json": parameters_or_empty(function)}),
        );
        if function.get("strict") == Some(&json!(true)) {
            spec.insert("strict".into(), json!(true));
        }
    })?
    .into_iter()
    .map(|spec| json!({"toolSpec": spec}))
    .collect();
    let mut config = json!({"tools": specs});
    if let Some(choice) = choice {
        config["toolChoice"] = choice;
    }
    Ok(Some(config))
}

fn output_config(request: &Map<String, Value>) -> Result<Option<Value>, Rejection> {
    let Some(format) = request.get("response_format") else {
        return Ok(None);
    };
    match format.get("type").and_then(Value::as_str) {
        None | Some("text") => Ok(None),
        Some("json_schema") => {
            let spec = format.get("json_schema").unwrap_or(&Value::Null);
            let schema = spec.get("schema").cloned().unwrap_or_else(|| json!({}));
            let mut json_schema = json!({
                // Converse takes the schema as a JSON string.
                "schema": schema.to_string(),
                "name": spec.get("name").cloned().unwrap_or(json!("response")),
            });
            if let Some(description) = spec.get("description") {
                json_schema["description"] = description.clone();
            }
            Ok(Some(json!({"textFormat": {
                "type": "json_schema",
                "structure": {"jsonSchema": json_schema},
            }})))
        }
        Some(other) => Err(Rejection::new(
            "response_format",
            format!(
                "`response_format` {other} cannot be sent to a Bedrock model: use `json_schema` with a schema"
            ),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn encode(request: Value) -> Result<Value, Rejection> {
        from_openai(request.as_object().unwrap()).map(Value::Object)
    }

    /// OpenAI's documented function-calling conversation, as Bedrock's tool-use guide writes
    /// the same turns in Converse.
    #[test]
    fn golden_function_calling_round_trip() {
        let request = json!({
            "model": "smart",
            "messages": [
                {"role": "system", "content": "You are a helpful assistant."},
                {"role": "user", "content": "What's the weather like in Boston today?"},
                {"role": "assistant", "content": null, "tool_calls": [{
                    "id": "tooluse_abc123", "type": "function",
                    "function": {"name": "get_current_weather", "arguments": "{\"location\":\"Boston, MA\"}"}
                }]},
                {"role": "tool", "tool_call_id": "tooluse_abc123", "content": "{\"temperature\":72}"},
                {"role": "user", "content": "And tomorrow?"}
            ],
            "tools": [{"type": "function", "function": {
                "name": "get_current_weather",
                "description": "Get the current weather",
                "parameters": {"type": "object", "properties": {"location": {"type": "string"}}, "required": ["location"]},
                "strict": true
            }}],
            "tool_choice": {"type": "function", "function": {"name": "get_current_weather"}},
            "temperature": 0.2,
            "top_p": 0.8,
            "max_tokens": 100,
            "stop": "END",
            "user": "dropped",
            "seed": 7
        });
        assert_eq!(
            encode(request).unwrap(),
            json!({
                "system": [{"text": "You are a helpful assistant."}],
                "messages": [
                    {"role": "user", "content": [{"text": "What's the weather like in Boston today?"}]},
                    {"role": "assistant", "content": [{"toolUse": {"toolUseId": "tooluse_abc123", "name": "get_current_weather", "input": {"location": "Boston, MA"}}}]},
                    {"role": "user", "content": [
                        {"toolResult": {"toolUseId": "tooluse_abc123", "content": [{"json": {"temperature": 72}}]}},
                        {"text": "And tomorrow?"}
                    ]}
                ],
                "inferenceConfig": {"maxTokens": 100, "temperature": 0.2, "topP": 0.8, "stopSequences": ["END"]},
                "toolConfig": {
                    "tools": [{"toolSpec": {
                        "name": "get_current_weather",
                        "description": "Get the current weather",
                        "inputSchema": {"json": {"type": "object", "properties": {"location": {"type": "string"}}, "required": ["location"]}},
                        "strict": true
                    }}],
                    "toolChoice": {"tool": {"name": "get_current_weather"}}
                }
            })
        );
    }

    #[test]
    fn golden_image_and_structured_output() {
        let request = json!({"model": "m", "messages": [{"role": "user", "content": [
            {"type": "text", "text": "Who is this?"},
            {"type": "image_url", "image_url": {"url": "data:image/jpeg;base64,/9j/4AAQ"}}
        ]}], "response_format": {"type": "json_schema", "json_schema": {
            "name": "person", "schema": {"type": "object", "properties": {"name": {"type": "string"}}}
        }}});
        let sent = encode(request).unwrap();
        assert_eq!(
            sent["messages"][0]["content"][1],
            json!({"image": {"format": "jpeg", "source": {"bytes": "/9j/4AAQ"}}})
        );
        assert_eq!(
            sent["outputConfig"],
            json!({"textFormat": {"type": "json_schema", "structure": {"jsonSchema": {
                "schema": "{\"properties\":{\"name\":{\"type\":\"string\"}},\"type\":\"object\"}",
                "name": "person"
            }}}})
        );
    }

    #[test]
    fn tool_choice_none_and_required() {
        let tools = json!([{"type": "function", "function": {"name": "f"}}]);
        let none = json!({"model": "m", "messages": [{"role": "user", "content": "hi"}], "tools": tools, "tool_choice": "none"});
        assert!(encode(none).unwrap().get("toolConfig").is_none());
        let required = json!({"model": "m", "messages": [{"role": "user", "content": "hi"}], "tools": tools, "tool_choice": "required"});
        assert_eq!(
            encode(required).unwrap()["toolConfig"]["toolChoice"],
            json!({"any": {}})
        );
    }

    #[test]
    fn untranslatable_fields_are_rejected_by_name() {
        let cases = [
            (
                json!({"model": "m", "messages": [{"role": "user", "content": [
                {"type": "image_url", "image_url": {"url": "https://example.com/a.png"}}]}]}),
                "messages[0].content[0].image_url.url",
            ),
            (json!({"model": "m", "n": 2, "messages": []}), "n"),
            (
                json!({"model": "m", "web_search_options": {}, "messages": []}),
                "web_search_options",
            ),
            (
                json!({"model": "m", "response_format": {"type": "json_object"}, "messages": []}),
                "response_format",
            ),
            (
                json!({"model": "m", "messages": [{"role": "user", "content": [{"type": "input_audio"}]}]}),
                "messages[0].content[0].type",
            ),
        ];
        for (request, param) in cases {
            assert_eq!(encode(request).unwrap_err().param.as_deref(), Some(param));
        }
    }
}
