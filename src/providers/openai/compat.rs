//! What each known OpenAI-compatible vendor or server (`compat = "..."`) takes differently
//! from OpenAI's chat completions, per its own documentation (docs/src/providers.md, on
//! OpenAI-compatible providers by name, cites each). A field it names otherwise is renamed; one it rejects and
//! whose loss changes nothing the client can see is dropped; one whose loss would change the
//! answer (log probabilities, several choices) is refused with a 400 naming it.

use serde_json::{Map, Value};

use crate::config::Compat;
use crate::providers::Rejection;

/// Adjusts an OpenAI chat request's body for `compat`.
pub fn adjust(compat: Compat, body: &mut Map<String, Value>) -> Result<(), Rejection> {
    match compat {
        Compat::Groq => {
            refuse(body, compat, &["logprobs", "top_logprobs", "logit_bias"])?;
            refuse_several_choices(body, compat)?;
            drop_message_names(body, false);
        }
        Compat::Mistral => {
            refuse(body, compat, &["logprobs", "top_logprobs", "logit_bias"])?;
            if body
                .get("temperature")
                .and_then(Value::as_f64)
                .is_some_and(|t| t > 1.5)
            {
                return Err(Rejection::new(
                    "temperature",
                    "Mistral takes a temperature from 0 to 1.5",
                ));
            }
            rename(body, "max_completion_tokens", "max_tokens");
            rename(body, "seed", "random_seed");
            for field in ["stream_options", "user", "store", "service_tier"] {
                body.remove(field);
            }
            // Mistral has no `developer` role, and takes `name` only on tool messages.
            drop_message_names(body, true);
            for message in messages(body) {
                if message.get("role").and_then(Value::as_str) == Some("developer") {
                    message.insert("role".into(), "system".into());
                }
            }
        }
        Compat::Together => {
            rename(body, "max_completion_tokens", "max_tokens");
            // Together's `logprobs` is the number of top log probabilities, not a switch.
            let top = body.remove("top_logprobs").and_then(|v| v.as_u64());
            match body.remove("logprobs") {
                Some(Value::Bool(true)) => {
                    let count = top.filter(|k| *k > 0).unwrap_or(1);
                    body.insert("logprobs".into(), count.into());
                }
                Some(Value::Bool(false)) | None => {}
                Some(other) => {
                    body.insert("logprobs".into(), other);
                }
            }
        }
        Compat::DeepSeek | Compat::Fireworks | Compat::Ollama | Compat::LmStudio => {
            // Ollama would drop `max_completion_tokens` without a word; the others document
            // `max_tokens` alone.
            rename(body, "max_completion_tokens", "max_tokens");
        }
        // Take OpenAI's fields, or ignore those they do not know.
        Compat::Xai | Compat::OpenRouter | Compat::Vllm => {}
    }
    Ok(())
}

fn rename(body: &mut Map<String, Value>, from: &str, to: &str) {
    if let Some(value) = body.remove(from) {
        body.entry(to).or_insert(value);
    }
}

fn refuse(body: &Map<String, Value>, compat: Compat, fields: &[&str]) -> Result<(), Rejection> {
    // Asked for: not absent, null, false, 0 or empty.
    let set = |field: &&&str| {
        body.get(**field).is_some_and(|v| match v {
            Value::Null | Value::Bool(false) => false,
            Value::Number(n) => n.as_f64() != Some(0.0),
            Value::Object(map) => !map.is_empty(),
            _ => true,
        })
    };
    match fields.iter().find(set) {
        Some(field) => Err(Rejection::new(
            field,
            format!("{} does not take `{field}`", name(compat)),
        )),
        None => Ok(()),
    }
}

fn refuse_several_choices(body: &Map<String, Value>, compat: Compat) -> Result<(), Rejection> {
    match body.get("n").and_then(Value::as_u64) {
        Some(n) if n > 1 => Err(Rejection::new(
            "n",
            format!("{} answers with one choice: `n` must be 1", name(compat)),
        )),
        _ => Ok(()),
    }
}

fn messages(body: &mut Map<String, Value>) -> impl Iterator<Item = &mut Map<String, Value>> {
    body.get_mut("messages")
        .and_then(Value::as_array_mut)
        .into_iter()
        .flatten()
        .filter_map(Value::as_object_mut)
}

/// Drops `name` from messages (but a tool message's, when `keep_tools`).
fn drop_message_names(body: &mut Map<String, Value>, keep_tools: bool) {
    for message in messages(body) {
        let tool = message.get("role").and_then(Value::as_str) == Some("tool");
        if !(keep_tools && tool) {
            message.remove("name");
        }
    }
}

fn name(compat: Compat) -> &'static str {
    match compat {
        Compat::Groq => "Groq",
        Compat::Mistral => "Mistral",
        Compat::DeepSeek => "DeepSeek",
        Compat::Together => "Together",
        Compat::Fireworks => "Fireworks",
        Compat::Xai => "xAI",
        Compat::OpenRouter => "OpenRouter",
        Compat::Ollama => "Ollama",
        Compat::Vllm => "vLLM",
        Compat::LmStudio => "LM Studio",
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn adjusted(compat: Compat, body: Value) -> Result<Value, Rejection> {
        let Value::Object(mut body) = body else {
            unreachable!("a body is an object")
        };
        adjust(compat, &mut body).map(|()| Value::Object(body))
    }

    #[test]
    fn mistral_gets_its_own_names_and_none_of_what_it_refuses() {
        let body = json!({"model": "m", "max_completion_tokens": 9, "seed": 3, "user": "u",
            "stream_options": {"include_usage": true}, "store": false,
            "messages": [{"role": "developer", "content": "d", "name": "x"},
                         {"role": "tool", "content": "r", "name": "f", "tool_call_id": "c"}]});
        let out = adjusted(Compat::Mistral, body).unwrap();
        assert_eq!(
            out,
            json!({"model": "m", "max_tokens": 9, "random_seed": 3,
            "messages": [{"role": "system", "content": "d"},
                         {"role": "tool", "content": "r", "name": "f", "tool_call_id": "c"}]})
        );
        let hot = adjusted(Compat::Mistral, json!({"temperature": 1.8})).unwrap_err();
        assert_eq!(hot.param.as_deref(), Some("temperature"));
        let logprobs = adjusted(Compat::Mistral, json!({"logprobs": true})).unwrap_err();
        assert_eq!(logprobs.param.as_deref(), Some("logprobs"));
        assert!(adjusted(Compat::Mistral, json!({"logprobs": false})).is_ok());
    }

    #[test]
    fn groq_refuses_what_it_cannot_answer_and_loses_message_names() {
        let several = adjusted(Compat::Groq, json!({"n": 2})).unwrap_err();
        assert_eq!(
            several.message,
            "Groq answers with one choice: `n` must be 1"
        );
        let bias = adjusted(Compat::Groq, json!({"logit_bias": {"1": 2}})).unwrap_err();
        assert_eq!(bias.param.as_deref(), Some("logit_bias"));
        let unasked = json!({"top_logprobs": 0, "logit_bias": {}, "logprobs": false});
        assert!(
            adjusted(Compat::Groq, unasked).is_ok(),
            "empty or zero is not asked for"
        );
        let named = json!({"n": 1, "messages": [{"role": "user", "content": "hi", "name": "ann"}]});
        assert_eq!(
            adjusted(Compat::Groq, named).unwrap(),
            json!({"n": 1, "messages": [{"role": "user", "content": "hi"}]})
        );
    }

    #[test]
    fn together_counts_log_probabilities_and_the_rest_take_max_tokens() {
        let asked = json!({"logprobs": true, "top_logprobs": 3, "max_completion_tokens": 5});
        assert_eq!(
            adjusted(Compat::Together, asked).unwrap(),
            json!({"logprobs": 3, "max_tokens": 5})
        );
        for compat in [
            Compat::DeepSeek,
            Compat::Fireworks,
            Compat::Ollama,
            Compat::LmStudio,
        ] {
            let out = adjusted(compat, json!({"max_completion_tokens": 5})).unwrap();
            assert_eq!(out, json!({"max_tokens": 5}), "{compat:?}");
        }
        let untouched =
            json!({"max_completion_tokens": 5, "stream_options": {"include_usage": true}});
        for compat in [Compat::Xai, Compat::OpenRouter, Compat::Vllm] {
            assert_eq!(adjusted(compat, untouched.clone()).unwrap(), untouched);
        }
    }
}
