//! An OpenAI chat request written as a Gemini `generateContent` request.
//!
//! Field by field (docs/src/providers/translation.md lists the same):
//! - `system` / `developer` messages → `systemInstruction`; `user` → role `user`;
//!   `assistant` → role `model`, its `tool_calls` → `functionCall` parts; `tool` messages →
//!   `functionResponse` parts (named after the call they answer; a JSON object result is the
//!   `response`, anything else is wrapped as `{"output": ...}`); consecutive turns of one role
//!   merge.
//! - `image_url` parts with `data:` URLs → `inlineData`.
//! - `generationConfig`: `max_completion_tokens` / `max_tokens` → `maxOutputTokens`,
//!   `temperature`, `top_p` → `topP`, `stop` → `stopSequences`, `seed`, `presence_penalty`,
//!   `frequency_penalty`; `response_format` `json_object` → `responseMimeType`, `json_schema`
//!   → `responseMimeType` and `responseJsonSchema`.
//! - `tools` → `functionDeclarations` (with `parametersJsonSchema`, which takes JSON Schema as
//!   OpenAI's tools write it); `tool_choice` → `toolConfig.functionCallingConfig`.
//! - Dropped: `user`, `safety_identifier`, `logit_bias`, `store`, `metadata`, `service_tier`,
//!   `stream_options`, `prediction`, `verbosity`, `prompt_cache_key`,
//!   `prompt_cache_retention`, `parallel_tool_calls`, message `name`s, and `reasoning_effort` (Gemini 2.5 takes a
//!   `thinkingBudget`, Gemini 3 a `thinkingLevel`, and either one refuses the other, so no
//!   one translation fits every Gemini model; each thinks by default).
//! - Rejected with a 400: `n` > 1, `logprobs`, audio, legacy `functions`, non-function tools,
//!   http(s) image URLs (Gemini reads images inline or from its File API), audio and file parts,
//!   and every other top-level field by name (`web_search_options`, fields added later).

use std::collections::BTreeMap;

use serde_json::{Map, Value, json};

use crate::providers::Rejection;
use crate::providers::anthropic::encode::{
    declare_functions, read_turns, refuse_one_answer_fields, split_data_url, stop_sequences,
    text_of,
};

/// Writes `request` (OpenAI's format) as Gemini's.
pub fn from_openai(request: &Map<String, Value>) -> Result<Map<String, Value>, Rejection> {
    refuse_one_answer_fields(request, "Gemini")?;
    let mut out = Map::new();
    let (system, contents) = contents(request)?;
    if !system.is_empty() {
        out.insert(
            "systemInstruction".into(),
            json!({"parts": [{"text": system.join("\n\n")}]}),
        );
    }
    out.insert("contents".into(), Value::Array(contents));
    let config = generation_config(request)?;
    if !config.is_empty() {
        out.insert("generationConfig".into(), Value::Object(config));
    }
    tools(request, &mut out)?;
    Ok(out)
}

fn contents(request: &Map<String, Value>) -> Result<(Vec<String>, Vec<Value>), Rejection> {
    // Gemini names a function response by the function, OpenAI by the call's id.
    let mut call_names: BTreeMap<String, String> = BTreeMap::new();
    let (system, turns) = read_turns(request, "a Gemini model", |i, role, message| {
        let content = message.get("content").unwrap_or(&Value::Null);
        Ok(Some(match role {
            "user" => ("user", user_parts(content, i)?),
            "assistant" => ("model", model_parts(message, i, &mut call_names)?),
            "tool" => ("user", vec![function_response(message, i, &call_names)?]),
            _ => return Ok(None),
        }))
    })?;
    let contents = turns
        .into_iter()
        .map(|(role, parts)| json!({"role": role, "parts": parts}))
        .collect();
    Ok((system, contents))
}

fn user_parts(content: &Value, i: usize) -> Result<Vec<Value>, Rejection> {
    let parts = match content {
        Value::Array(parts) => parts,
        other => return Ok(vec![json!({"text": text_of(other, i)?})]),
    };
    let mut out = Vec::with_capacity(parts.len());
    for (j, part) in parts.iter().enumerate() {
        match part.get("type").and_then(Value::as_str).unwrap_or("") {
            "text" => out.push(json!({"text": part.get("text").cloned().unwrap_or(json!(""))})),
            "image_url" => {
                let url = part
                    .pointer("/image_url/url")
                    .and_then(Value::as_str)
                    .unwrap_or("");
                let (mime_type, data) = split_data_url(url).ok_or_else(|| {
                    Rejection::new(
                        &format!("messages[{i}].content[{j}].image_url.url"),
                        "Gemini takes images inline: send a data: URL with base64 data",
                    )
                })?;
                out.push(json!({"inlineData": {"mimeType": mime_type, "data": data}}));
            }
            other => {
                return Err(Rejection::new(
                    &format!("messages[{i}].content[{j}].type"),
                    format!("`{other}` parts cannot be sent to a Gemini model"),
                ));
            }
        }
    }
    Ok(out)
}

fn model_parts(
    message: &Value,
    i: usize,
    call_names: &mut BTreeMap<String, String>,
) -> Result<Vec<Value>, Rejection> {
    let mut parts = Vec::new();
    let text = text_of(message.get("content").unwrap_or(&Value::Null), i)?;
    if !text.is_empty() {
        parts.push(json!({"text": text}));
    }
    let calls = message
        .get("tool_calls")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default();
    for (j, call) in calls.iter().enumerate() {
        let name = call
            .pointer("/function/name")
            .and_then(Value::as_str)
            .unwrap_or("");
        if let Some(id) = call.get("id").and_then(Value::as_str) {
            call_names.insert(id.to_owned(), name.to_owned());
        }
        let arguments = call
            .pointer("/function/arguments")
            .and_then(Value::as_str)
            .unwrap_or("");
        let args: Value = if arguments.trim().is_empty() {
            json!({})
        } else {
            serde_json::from_str(arguments).map_err(|_| {
                Rejection::new(
                    &format!("messages[{i}].tool_calls[{j}].function.arguments"),
                    "must be a JSON object to be sent to a Gemini model",
                )
            })?
        };
        parts.push(json!({"functionCall": {"name": name, "args": args}}));
    }
    Ok(parts)
}

fn function_response(
    message: &Value,
    i: usize,
    call_names: &BTreeMap<String, String>,
) -> Result<Value, Rejection> {
    let id = message
        .get("tool_call_id")
        .and_then(Value::as_str)
        .unwrap_or("");
    let name = call_names.get(id).ok_or_else(|| {
        Rejection::new(
            &format!("messages[{i}].tool_call_id"),
            format!("`{id}` answers no earlier tool call, and Gemini needs the function's name"),
        )
    })?;
    let text = text_of(message.get("content").unwrap_or(&Value::Null), i)?;
    // Gemini's response is a JSON object; its docs name the key for plain output "output".
    let response = match serde_json::from_str::<Value>(&text) {
        Ok(Value::Object(object)) => Value::Object(object),
        _ => json!({"output": text}),
    };
    Ok(json!({"functionResponse": {"name": name, "response": response}}))
}

fn generation_config(request: &Map<String, Value>) -> Result<Map<String, Value>, Rejection> {
    let mut config = Map::new();
    if let Some(max) = request
        .get("max_completion_tokens")
        .or_else(|| request.get("max_tokens"))
        .filter(|v| v.is_u64())
    {
        config.insert("maxOutputTokens".into(), max.clone());
    }
    for (from, to) in [
        ("temperature", "temperature"),
        ("top_p", "topP"),
        ("seed", "seed"),
        ("presence_penalty", "presencePenalty"),
        ("frequency_penalty", "frequencyPenalty"),
    ] {
        if let Some(value) = request.get(from).filter(|v| v.is_number()) {
            config.insert(to.into(), value.clone());
        }
    }
    if let Some(stops) = stop_sequences(request) {
        config.insert("stopSequences".into(), stops);
    }
    let format = request.get("response_format");
    match format.and_then(|f| f.get("type")).and_then(Value::as_str) {
        None | Some("text") => {}
        Some("json_object") => {
            config.insert("responseMimeType".into(), json!("application/json"));
        }
        Some("json_schema") => {
            let schema = format
                .and_then(|f| f.pointer("/json_schema/schema"))
                .cloned()
                .unwrap_or_else(|| json!({}));
            config.insert("responseMimeType".into(), json!("application/json"));
            config.insert("responseJsonSchema".into(), schema);
        }
        Some(other) => {
            return Err(Rejection::new(
                "response_format",
                format!("`response_format` {other} cannot be sent to a Gemini model"),
            ));
        }
    }
    Ok(config)
}

fn tools(request: &Map<String, Value>, out: &mut Map<String, Value>) -> Result<(), Rejection> {
    let Some(Value::Array(tools)) = request.get("tools") else {
        return Ok(());
    };
    let declarations: Vec<Value> =
        declare_functions(tools, "a Gemini model", |function, declaration| {
            if let Some(parameters) = function.get("parameters") {
                declaration.insert("parametersJsonSchema".into(), parameters.clone());
            }
        })?
        .into_iter()
        .map(Value::Object)
        .collect();
    if declarations.is_empty() {
        return Ok(());
    }
    out.insert(
        "tools".into(),
        json!([{"functionDeclarations": declarations}]),
    );
    let config = match request.get("tool_choice") {
        Some(Value::String(choice)) if choice == "none" => json!({"mode": "NONE"}),
        Some(Value::String(choice)) if choice == "required" => json!({"mode": "ANY"}),
        Some(Value::Object(choice)) => match choice.get("function").and_then(|f| f.get("name")) {
            Some(name) => json!({"mode": "ANY", "allowedFunctionNames": [name]}),
            None => json!({"mode": "AUTO"}),
        },
        Some(_) => json!({"mode": "AUTO"}),
        None => return Ok(()),
    };
    out.insert(
        "toolConfig".into(),
        json!({"functionCallingConfig": config}),
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn encode(request: Value) -> Result<Value, Rejection> {
        from_openai(request.as_object().unwrap()).map(Value::Object)
    }

    /// OpenAI's documented function-calling conversation, as Gemini's function-calling guide
    /// writes the same turns.
    #[test]
    fn golden_function_calling_round_trip() {
        let request = json!({
            "model": "smart",
            "messages": [
                {"role": "system", "content": "You are a helpful assistant."},
                {"role": "user", "content": "What's the weather like in Boston today?"},
                {"role": "assistant", "content": null, "tool_calls": [{
                    "id": "call_abc123", "type": "function",
                    "function": {"name": "get_current_weather", "arguments": "{\"location\":\"Boston, MA\"}"}
                }]},
                {"role": "tool", "tool_call_id": "call_abc123", "content": "{\"temperature\":72,\"unit\":\"F\"}"}
            ],
            "tools": [{"type": "function", "function": {
                "name": "get_current_weather",
                "description": "Get the current weather in a given location",
                "parameters": {"type": "object", "properties": {"location": {"type": "string"}}, "required": ["location"]}
            }}],
            "tool_choice": {"type": "function", "function": {"name": "get_current_weather"}},
            "temperature": 0.2,
            "top_p": 0.8,
            "max_tokens": 100,
            "stop": ["END"],
            "user": "dropped"
        });
        assert_eq!(
            encode(request).unwrap(),
            json!({
                "systemInstruction": {"parts": [{"text": "You are a helpful assistant."}]},
                "contents": [
                    {"role": "user", "parts": [{"text": "What's the weather like in Boston today?"}]},
                    {"role": "model", "parts": [{"functionCall": {"name": "get_current_weather", "args": {"location": "Boston, MA"}}}]},
                    {"role": "user", "parts": [{"functionResponse": {"name": "get_current_weather", "response": {"temperature": 72, "unit": "F"}}}]}
                ],
                "generationConfig": {"maxOutputTokens": 100, "temperature": 0.2, "topP": 0.8, "stopSequences": ["END"]},
                "tools": [{"functionDeclarations": [{
                    "name": "get_current_weather",
                    "description": "Get the current weather in a given location",
                    "parametersJsonSchema": {"type": "object", "properties": {"location": {"type": "string"}}, "required": ["location"]}
                }]}],
                "toolConfig": {"functionCallingConfig": {"mode": "ANY", "allowedFunctionNames": ["get_current_weather"]}}
            })
        );
    }

    #[test]
    fn golden_inline_image_and_json_mode() {
        let request = json!({"model": "m", "response_format": {"type": "json_object"}, "messages": [
            {"role": "user", "content": [
                {"type": "text", "text": "Caption this image."},
                {"type": "image_url", "image_url": {"url": "data:image/jpeg;base64,/9j/4AAQ"}}
            ]},
            {"role": "user", "content": "As JSON."}
        ]});
        let sent = encode(request).unwrap();
        assert_eq!(
            sent["contents"],
            json!([{"role": "user", "parts": [
                {"text": "Caption this image."},
                {"inlineData": {"mimeType": "image/jpeg", "data": "/9j/4AAQ"}},
                {"text": "As JSON."}
            ]}])
        );
        assert_eq!(
            sent["generationConfig"],
            json!({"responseMimeType": "application/json"})
        );
    }

    #[test]
    fn untranslatable_fields_are_rejected_by_name() {
        let url_image = json!({"model": "m", "messages": [{"role": "user", "content": [
            {"type": "image_url", "image_url": {"url": "https://example.com/a.png"}}]}]});
        assert_eq!(
            encode(url_image).unwrap_err().param,
            Some("messages[0].content[0].image_url.url".into())
        );
        let orphan = json!({"model": "m", "messages": [{"role": "tool", "tool_call_id": "x", "content": "1"}]});
        assert_eq!(
            encode(orphan).unwrap_err().param,
            Some("messages[0].tool_call_id".into())
        );
        let n = json!({"model": "m", "n": 3, "messages": []});
        assert_eq!(encode(n).unwrap_err().param, Some("n".into()));
        let search = json!({"model": "m", "web_search_options": {}, "messages": []});
        assert_eq!(
            encode(search).unwrap_err().param,
            Some("web_search_options".into())
        );
    }
}
