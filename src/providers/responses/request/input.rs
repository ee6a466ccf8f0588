//! A Responses request's `input` items as chat messages.

use serde_json::{Value, json};

use crate::providers::Rejection;

/// Input items (or a string) as chat messages.
pub(super) fn input_messages(
    input: Option<&Value>,
    messages: &mut Vec<Value>,
) -> Result<(), Rejection> {
    let items = match input {
        None | Some(Value::Null) => return Ok(()),
        Some(Value::String(text)) => {
            messages.push(json!({"role": "user", "content": text}));
            return Ok(());
        }
        Some(Value::Array(items)) => items,
        Some(_) => {
            return Err(Rejection::new(
                "input",
                "`input` must be a string or an array of items",
            ));
        }
    };
    for (i, item) in items.iter().enumerate() {
        let kind = item
            .get("type")
            .and_then(Value::as_str)
            .unwrap_or("message");
        match kind {
            "message" => messages.push(message(item, i)?),
            "function_call" => push_call(item, i, messages)?,
            "function_call_output" => messages.push(call_output(item, i)?),
            // A provider's own reasoning (often encrypted): no other provider can read it,
            // and it is never replayed as visible text.
            "reasoning" => {}
            // The gateway opens the compaction items it sealed before a step is chosen; what
            // is left was sealed by a provider (OpenAI), and only it can read it.
            "compaction" => {
                return Err(Rejection::new(
                    &format!("input[{i}].encrypted_content"),
                    "this `compaction` item was not made by this gateway's `/v1/responses/compact`: only the provider that made it can read it, and this route's serving step does not speak the Responses API",
                ));
            }
            other => {
                return Err(Rejection::new(
                    &format!("input[{i}].type"),
                    format!(
                        "input items of type `{other}` cannot be carried to this route's serving step"
                    ),
                ));
            }
        }
    }
    Ok(())
}

fn message(item: &Value, i: usize) -> Result<Value, Rejection> {
    let role = match item.get("role").and_then(Value::as_str) {
        Some(role @ ("user" | "assistant" | "system" | "developer")) => role,
        _ => {
            return Err(Rejection::new(
                &format!("input[{i}].role"),
                "a message's `role` must be user, assistant, system or developer",
            ));
        }
    };
    let content = match item.get("content") {
        Some(Value::String(text)) => Value::String(text.clone()),
        Some(Value::Array(parts)) => {
            let mut out = Vec::with_capacity(parts.len());
            for (j, part) in parts.iter().enumerate() {
                out.push(content_part(part, i, j)?);
            }
            // Assistant turns are text only in chat; join their parts.
            if role == "assistant" {
                let text: String = out
                    .iter()
                    .filter_map(|p| p.get("text").and_then(Value::as_str))
                    .collect();
                Value::String(text)
            } else {
                Value::Array(out)
            }
        }
        _ => {
            return Err(Rejection::new(
                &format!("input[{i}].content"),
                "a message's `content` must be a string or an array of parts",
            ));
        }
    };
    Ok(json!({"role": role, "content": content}))
}

fn content_part(part: &Value, i: usize, j: usize) -> Result<Value, Rejection> {
    let kind = part.get("type").and_then(Value::as_str).unwrap_or("");
    let text = || part.get("text").and_then(Value::as_str).unwrap_or("");
    match kind {
        "input_text" | "output_text" => Ok(json!({"type": "text", "text": text()})),
        "refusal" => Ok(
            json!({"type": "text", "text": part.get("refusal").and_then(Value::as_str).unwrap_or("")}),
        ),
        "input_image" => match part.get("image_url").and_then(Value::as_str) {
            Some(url) => {
                let mut image = json!({"url": url});
                if let Some(detail) = part.get("detail").and_then(Value::as_str) {
                    image["detail"] = json!(detail);
                }
                Ok(json!({"type": "image_url", "image_url": image}))
            }
            None => Err(Rejection::new(
                &format!("input[{i}].content[{j}].file_id"),
                "images by `file_id` cannot be carried to this route's serving step; send `image_url`",
            )),
        },
        other => Err(Rejection::new(
            &format!("input[{i}].content[{j}].type"),
            format!(
                "content parts of type `{other}` cannot be carried to this route's serving step"
            ),
        )),
    }
}

/// A `function_call` item joins the assistant turn before it, or starts one.
fn push_call(item: &Value, i: usize, messages: &mut Vec<Value>) -> Result<(), Rejection> {
    let field = |name: &str| {
        item.get(name).and_then(Value::as_str).ok_or_else(|| {
            Rejection::new(
                &format!("input[{i}].{name}"),
                format!("a `function_call` item needs a string `{name}`"),
            )
        })
    };
    let call = json!({
        "id": field("call_id")?,
        "type": "function",
        "function": {"name": field("name")?, "arguments": field("arguments")?},
    });
    if let Some(last) = messages.last_mut()
        && last.get("role").and_then(Value::as_str) == Some("assistant")
    {
        match last.get_mut("tool_calls").and_then(Value::as_array_mut) {
            Some(calls) => calls.push(call),
            None => last["tool_calls"] = json!([call]),
        }
        return Ok(());
    }
    messages.push(json!({"role": "assistant", "content": null, "tool_calls": [call]}));
    Ok(())
}

fn call_output(item: &Value, i: usize) -> Result<Value, Rejection> {
    let call_id = item.get("call_id").and_then(Value::as_str).ok_or_else(|| {
        Rejection::new(
            &format!("input[{i}].call_id"),
            "a `function_call_output` item needs a string `call_id`",
        )
    })?;
    let output = match item.get("output") {
        Some(Value::String(text)) => text.clone(),
        Some(Value::Array(parts)) => parts
            .iter()
            .filter_map(|p| p.get("text").and_then(Value::as_str))
            .collect(),
        _ => {
            return Err(Rejection::new(
                &format!("input[{i}].output"),
                "a `function_call_output` item needs an `output`",
            ));
        }
    };
    Ok(json!({"role": "tool", "tool_call_id": call_id, "content": output}))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_compaction_item_left_sealed_is_refused_naming_its_content() {
        let input = json!([
            {"role": "user", "content": "Hi"},
            {"type": "compaction", "id": "cmp_1", "encrypted_content": "gAAAA"},
        ]);
        let refused = input_messages(Some(&input), &mut Vec::new()).unwrap_err();
        assert_eq!(refused.param.as_deref(), Some("input[1].encrypted_content"));
    }

    #[test]
    fn an_opened_compaction_is_a_developer_message_in_context() {
        let input = json!([
            {"role": "user", "content": "Hi"},
            {"type": "message", "role": "developer", "content": "Summary: Ada, Oslo."},
        ]);
        let mut messages = Vec::new();
        input_messages(Some(&input), &mut messages).unwrap();
        assert_eq!(
            messages[1],
            json!({"role": "developer", "content": "Summary: Ada, Oslo."})
        );
    }
}
