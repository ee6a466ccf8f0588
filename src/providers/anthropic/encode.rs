//! An OpenAI chat request written as an Anthropic Messages request.
//!
//! Field by field (docs/src/providers/translation.md lists the same):
//! - `system` / `developer` messages → `system`; `tool` messages → `tool_result` blocks in a
//!   user turn; assistant `tool_calls` → `tool_use` blocks; consecutive turns of one role merge.
//! - `image_url` parts → `image` blocks: `data:` URLs as base64 sources, http(s) as url sources.
//! - `max_completion_tokens` / `max_tokens` → `max_tokens` (the provider's default when unset);
//!   `stop` → `stop_sequences`; `temperature` (clamped to Anthropic's 0–1) and `top_p` as they
//!   are; `user` (or else `safety_identifier`) → `metadata.user_id`; `tools`, `tool_choice`,
//!   `parallel_tool_calls`.
//! - Dropped, by design (hints with no counterpart, whose absence changes no answer's shape):
//!   `frequency_penalty`, `presence_penalty`, `seed`, `logit_bias`, `store`, `metadata`,
//!   `service_tier`, `stream_options`, `prediction`, `reasoning_effort`, `verbosity`,
//!   `prompt_cache_key`, `prompt_cache_retention`, message `name`s.
//! - `response_format` `json_schema` → `output_config.format` `json_schema` (Anthropic's
//!   structured outputs); `text` is the default and needs nothing.
//! - Rejected with a 400: `n` > 1, `logprobs`, `top_logprobs`, audio, `response_format`
//!   `json_object` (Anthropic constrains output only to a schema), legacy `functions` /
//!   `function_call`, non-function tools, audio and file parts, and every other top-level
//!   field by name (`web_search_options`, and fields added later).

use serde_json::{Map, Value, json};

use crate::providers::Rejection;

/// Writes `request` (OpenAI's format) as Anthropic's, for `model`.
pub fn from_openai(
    request: &Map<String, Value>,
    model: &str,
    default_max_tokens: u32,
    stream: bool,
) -> Result<Map<String, Value>, Rejection> {
    refuse_untranslatable(request)?;
    let mut out = Map::new();
    out.insert("model".into(), json!(model));
    let (system, messages) = messages(request)?;
    if !system.is_empty() {
        out.insert("system".into(), json!(system.join("\n\n")));
    }
    out.insert("messages".into(), Value::Array(messages));
    let max_tokens = request
        .get("max_completion_tokens")
        .or_else(|| request.get("max_tokens"))
        .and_then(Value::as_u64)
        .unwrap_or(u64::from(default_max_tokens));
    out.insert("max_tokens".into(), json!(max_tokens));
    if let Some(stops) = stop_sequences(request) {
        out.insert("stop_sequences".into(), stops);
    }
    if let Some(temperature) = request.get("temperature").and_then(Value::as_f64) {
        out.insert("temperature".into(), json!(temperature.clamp(0.0, 1.0)));
    }
    if let Some(top_p) = request.get("top_p").filter(|v| v.is_number()) {
        out.insert("top_p".into(), top_p.clone());
    }
    let user = request
        .get("user")
        .or_else(|| request.get("safety_identifier"));
    if let Some(user) = user.and_then(Value::as_str) {
        out.insert("metadata".into(), json!({"user_id": user}));
    }
    tools(request, &mut out)?;
    if let Some(schema) = json_schema(request)? {
        out.insert(
            "output_config".into(),
            json!({"format": {"type": "json_schema", "schema": schema}}),
        );
    }
    if stream {
        out.insert("stream".into(), json!(true));
    }
    Ok(out)
}

/// The schema of a `response_format` of type `json_schema`, when the request has one.
fn json_schema(request: &Map<String, Value>) -> Result<Option<Value>, Rejection> {
    let Some(format) = request.get("response_format") else {
        return Ok(None);
    };
    if format.get("type").and_then(Value::as_str) != Some("json_schema") {
        return Ok(None);
    }
    match format.pointer("/json_schema/schema") {
        Some(schema) if schema.is_object() => Ok(Some(schema.clone())),
        _ => Err(Rejection::new(
            "response_format.json_schema.schema",
            "a `json_schema` response format needs its schema (an object)",
        )),
    }
}

/// The top-level fields of an OpenAI chat request that this translation (and Gemini's)
/// carries, checks, or drops by design; any other is refused by name.
pub(crate) const KNOWN: &[&str] = &[
    "model",
    "messages",
    "max_tokens",
    "max_completion_tokens",
    "stop",
    "temperature",
    "top_p",
    "user",
    "safety_identifier",
    "tools",
    "tool_choice",
    "parallel_tool_calls",
    "response_format",
    "stream",
    "n",
    "logprobs",
    "top_logprobs",
    "audio",
    "modalities",
    "functions",
    "function_call",
    "frequency_penalty",
    "presence_penalty",
    "seed",
    "logit_bias",
    "store",
    "metadata",
    "service_tier",
    "stream_options",
    "prediction",
    "reasoning_effort",
    "verbosity",
    "prompt_cache_key",
    "prompt_cache_retention",
];

/// A top-level field outside [`KNOWN`], refused by name for `provider`'s API.
pub(crate) fn refuse_unknown(
    request: &Map<String, Value>,
    provider: &str,
) -> Result<(), Rejection> {
    match request.keys().find(|f| !KNOWN.contains(&f.as_str())) {
        Some(field) => Err(Rejection::new(
            field,
            format!("`{field}` has no counterpart in {provider}'s API, which serves this step"),
        )),
        None => Ok(()),
    }
}

fn refuse_untranslatable(request: &Map<String, Value>) -> Result<(), Rejection> {
    refuse_one_answer_fields(request, "Anthropic")?;
    if let Some(format) = request
        .get("response_format")
        .and_then(|f| f.get("type"))
        .and_then(Value::as_str)
        .filter(|t| !matches!(*t, "text" | "json_schema"))
    {
        return Err(Rejection::new(
            "response_format",
            format!(
                "`response_format` {format} cannot be sent to an Anthropic model: use `json_schema` with a schema"
            ),
        ));
    }
    Ok(())
}

/// What every translation from OpenAI's chat refuses by name: fields it has no counterpart
/// for (top-level), more than one choice, log probabilities, audio, and the legacy function
/// fields. Shared by the Anthropic, Gemini and Bedrock encoders.
pub(crate) fn refuse_one_answer_fields(
    request: &Map<String, Value>,
    provider: &str,
) -> Result<(), Rejection> {
    refuse_unknown(request, provider)?;
    if request.get("n").and_then(Value::as_u64).unwrap_or(1) > 1 {
        return Err(Rejection::new(
            "n",
            format!("{provider} returns one choice: `n` must be 1"),
        ));
    }
    if request.get("logprobs") == Some(&json!(true)) || request.contains_key("top_logprobs") {
        return Err(Rejection::new(
            "logprobs",
            format!("log probabilities are not returned through {provider}"),
        ));
    }
    let audio = request.get("audio").is_some_and(|a| !a.is_null())
        || request
            .get("modalities")
            .and_then(Value::as_array)
            .is_some_and(|m| m.iter().any(|m| m == "audio"));
    if audio {
        return Err(Rejection::new(
            "modalities",
            format!("audio output is not translated for {provider}"),
        ));
    }
    for legacy in ["functions", "function_call"] {
        if request.contains_key(legacy) {
            return Err(Rejection::new(
                legacy,
                format!("`{legacy}` is deprecated: use `tools` and `tool_choice`"),
            ));
        }
    }
    Ok(())
}

/// Each of `tools`' function tools declared as `name` and `description`, to which `extend`
/// adds the provider's own fields from the function; any other tool type is refused for
/// `target` ("a Gemini model").
pub(crate) fn declare_functions(
    tools: &[Value],
    target: &str,
    extend: impl Fn(&Value, &mut Map<String, Value>),
) -> Result<Vec<Map<String, Value>>, Rejection> {
    let mut declared = Vec::with_capacity(tools.len());
    for (i, tool) in tools.iter().enumerate() {
        if tool.get("type").and_then(Value::as_str) != Some("function") {
            return Err(Rejection::new(
                &format!("tools[{i}].type"),
                format!("only function tools can be sent to {target}"),
            ));
        }
        let function = tool.get("function").unwrap_or(&Value::Null);
        let mut declaration = Map::new();
        declaration.insert(
            "name".into(),
            function.get("name").cloned().unwrap_or(json!("")),
        );
        if let Some(description) = function.get("description") {
            declaration.insert("description".into(), description.clone());
        }
        extend(function, &mut declaration);
        declared.push(declaration);
    }
    Ok(declared)
}

/// A function's `parameters`, or the empty object schema a provider that requires one takes.
pub(crate) fn parameters_or_empty(function: &Value) -> Value {
    function
        .get("parameters")
        .cloned()
        .unwrap_or_else(|| json!({"type": "object", "properties": {}}))
}

/// OpenAI's `stop` (a string or a list) as a list of stop sequences; `None` when unset or
/// empty.
pub(crate) fn stop_sequences(request: &Map<String, Value>) -> Option<Value> {
    match request.get("stop") {
        Some(Value::String(stop)) => Some(json!([stop])),
        Some(Value::Array(stops)) if !stops.is_empty() => Some(Value::Array(stops.clone())),
        _ => None,
    }
}

/// The system prompt's parts, and the turns in Anthropic's shape.
fn messages(request: &Map<String, Value>) -> Result<(Vec<String>, Vec<Value>), Rejection> {
    let (system, turns) = read_turns(request, "an Anthropic model", |i, role, message| {
        let content = message.get("content").unwrap_or(&Value::Null);
        Ok(Some(match role {
            "user" => ("user", content_blocks(content, i)?),
            "assistant" => ("assistant", assistant_blocks(message, i)?),
            // Anthropic wants the results of parallel tool calls in one user turn: merged.
            "tool" => ("user", vec![tool_result(message, i)?]),
            _ => return Ok(None),
        }))
    })?;
    let turns = turns
        .into_iter()
        .map(|(role, content)| json!({"role": role, "content": content}))
        .collect();
    Ok((system, turns))
}

/// A provider's role for one turn, and the turn's blocks.
pub(crate) type Turn = (&'static str, Vec<Value>);

/// An OpenAI chat's messages as a provider's turns: `system` and `developer` messages' text
/// apart, every other message read by `read` (its index, role and itself) into a turn, or
/// `None` for a role `target` ("a Gemini model") does not take. Consecutive turns of one
/// role merge, as the Anthropic, Gemini and Bedrock APIs want roles to alternate.
pub(crate) fn read_turns(
    request: &Map<String, Value>,
    target: &str,
    mut read: impl FnMut(usize, &str, &Value) -> Result<Option<Turn>, Rejection>,
) -> Result<(Vec<String>, Vec<Turn>), Rejection> {
    let Some(Value::Array(messages)) = request.get("messages") else {
        return Err(Rejection::new("messages", "`messages` must be an array"));
    };
    let mut system = Vec::new();
    let mut turns: Vec<Turn> = Vec::new();
    for (i, message) in messages.iter().enumerate() {
        let role = message.get("role").and_then(Value::as_str).unwrap_or("");
        if matches!(role, "system" | "developer") {
            system.push(text_of(message.get("content").unwrap_or(&Value::Null), i)?);
            continue;
        }
        let Some((role, blocks)) = read(i, role, message)? else {
            return Err(Rejection::new(
                &format!("messages[{i}].role"),
                format!("role `{role}` cannot be sent to {target}"),
            ));
        };
        if blocks.is_empty() {
            continue;
        }
        match turns.last_mut() {
            Some((last, previous)) if *last == role => previous.extend(blocks),
            _ => turns.push((role, blocks)),
        }
    }
    Ok((system, turns))
}

/// An OpenAI message's text: a string, or its text (or refusal) parts joined. Shared with
/// the Gemini encoder, which reads the same OpenAI content.
pub(crate) fn text_of(content: &Value, i: usize) -> Result<String, Rejection> {
    match content {
        Value::String(text) => Ok(text.clone()),
        Value::Null => Ok(String::new()),
        Value::Array(parts) => parts
            .iter()
            .map(|p| {
                p.get("text")
                    .or_else(|| p.get("refusal"))
                    .and_then(Value::as_str)
                    .ok_or_else(|| {
                        Rejection::new(
                            &format!("messages[{i}].content"),
                            "only text parts can be sent here",
                        )
                    })
            })
            .collect(),
        _ => Err(Rejection::new(
            &format!("messages[{i}].content"),
            "must be a string or an array of parts",
        )),
    }
}

/// A user message's content as Anthropic blocks.
fn content_blocks(content: &Value, i: usize) -> Result<Vec<Value>, Rejection> {
    let parts = match content {
        Value::String(text) => return Ok(vec![json!({"type": "text", "text": text})]),
        Value::Array(parts) => parts,
        _ => {
            return Err(Rejection::new(
                &format!("messages[{i}].content"),
                "must be a string or an array of parts",
            ));
        }
    };
    let mut blocks = Vec::with_capacity(parts.len());
    for (j, part) in parts.iter().enumerate() {
        let kind = part.get("type").and_then(Value::as_str).unwrap_or("");
        let block = match kind {
            "text" => {
                json!({"type": "text", "text": part.get("text").cloned().unwrap_or(json!(""))})
            }
            "image_url" => {
                let url = part
                    .pointer("/image_url/url")
                    .and_then(Value::as_str)
                    .unwrap_or("");
                image_block(url).ok_or_else(|| {
                    Rejection::new(
                        &format!("messages[{i}].content[{j}].image_url.url"),
                        "an image must be a data: URL (base64) or an http(s) URL",
                    )
                })?
            }
            other => {
                return Err(Rejection::new(
                    &format!("messages[{i}].content[{j}].type"),
                    format!("`{other}` parts cannot be sent to an Anthropic model"),
                ));
            }
        };
        blocks.push(block);
    }
    Ok(blocks)
}

/// An image URL as an Anthropic image block.
fn image_block(url: &str) -> Option<Value> {
    if let Some((media_type, data)) = split_data_url(url) {
        return Some(json!({
            "type": "image",
            "source": {"type": "base64", "media_type": media_type, "data": data},
        }));
    }
    if url.starts_with("https://") || url.starts_with("http://") {
        return Some(json!({"type": "image", "source": {"type": "url", "url": url}}));
    }
    None
}

/// `data:image/png;base64,AAAA` → (`image/png`, `AAAA`).
pub fn split_data_url(url: &str) -> Option<(&str, &str)> {
    let rest = url.strip_prefix("data:")?;
    let (meta, data) = rest.split_once(',')?;
    let media_type = meta.strip_suffix(";base64")?;
    Some((media_type, data))
}

/// An assistant turn: its text, then a `tool_use` block per tool call.
fn assistant_blocks(message: &Value, i: usize) -> Result<Vec<Value>, Rejection> {
    let mut blocks = Vec::new();
    let text = match message.get("content") {
        Some(Value::Array(parts)) => parts
            .iter()
            .filter_map(|p| p.get("text").or_else(|| p.get("refusal")))
            .filter_map(Value::as_str)
            .collect::<String>(),
        Some(content) => text_of(content, i)?,
        None => String::new(),
    };
    if !text.is_empty() {
        blocks.push(json!({"type": "text", "text": text}));
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
            serde_json::from_str(arguments).map_err(|_| {
                Rejection::new(
                    &format!("messages[{i}].tool_calls[{j}].function.arguments"),
                    "must be a JSON object to be sent to an Anthropic model",
                )
            })?
        };
        blocks.push(json!({
            "type": "tool_use",
            "id": call.get("id").cloned().unwrap_or(json!("")),
            "name": call.pointer("/function/name").cloned().unwrap_or(json!("")),
            "input": input,
        }));
    }
    Ok(blocks)
}

/// A `tool` message as a `tool_result` block.
fn tool_result(message: &Value, i: usize) -> Result<Value, Rejection> {
    let content = text_of(message.get("content").unwrap_or(&Value::Null), i)?;
    Ok(json!({
        "type": "tool_result",
        "tool_use_id": message.get("tool_call_id").cloned().unwrap_or(json!("")),
        "content": content,
    }))
}

/// `tools`, `tool_choice` and `parallel_tool_calls`.
fn tools(request: &Map<String, Value>, out: &mut Map<String, Value>) -> Result<(), Rejection> {
    let Some(Value::Array(tools)) = request.get("tools") else {
        return Ok(());
    };
    let declared: Vec<Value> =
        declare_functions(tools, "an Anthropic model", |function, declaration| {
            declaration.insert("input_schema".into(), parameters_or_empty(function));
            // Strict tool use: Anthropic's structured outputs for tool inputs.
            if let Some(strict) = function.get("strict").filter(|s| s.is_boolean()) {
                declaration.insert("strict".into(), strict.clone());
            }
        })?
        .into_iter()
        .map(Value::Object)
        .collect();
    if declared.is_empty() {
        return Ok(());
    }
    out.insert("tools".into(), Value::Array(declared));
    let mut choice = match request.get("tool_choice") {
        Some(Value::String(choice)) if choice == "none" => json!({"type": "none"}),
        Some(Value::String(choice)) if choice == "required" => json!({"type": "any"}),
        Some(Value::Object(choice)) => match choice.get("function").and_then(|f| f.get("name")) {
            Some(name) => json!({"type": "tool", "name": name}),
            None => json!({"type": "auto"}),
        },
        _ => json!({"type": "auto"}),
    };
    let parallel_off = request.get("parallel_tool_calls") == Some(&json!(false));
    if parallel_off && choice["type"] != "none" {
        choice["disable_parallel_tool_use"] = json!(true);
    }
    if request.contains_key("tool_choice") || parallel_off {
        out.insert("tool_choice".into(), choice);
    }
    Ok(())
}

#[cfg(test)]
mod tests;
