//! OpenAI embeddings requests as Bedrock's InvokeModel bodies for Amazon Titan and Cohere
//! embedding models, and their answers as OpenAI's list.
//!
//! - Titan (`amazon.titan-embed-text-v2:0`, `-v1`): one text a request, `{"inputText"}`,
//!   `dimensions` as it is; the answer's `embedding` and `inputTextTokenCount`. An array of
//!   more than one input is refused with a 400 naming `input` (Titan embeds one text a call).
//! - Cohere (`cohere.embed-english-v3`, `-multilingual-v3`, `embed-v4`): `{"texts": [...],
//!   "input_type": "search_document"}`, `dimensions` as `output_dimension`; the answer's
//!   `embeddings` (a list, or `{"float": [...]}` by type). Cohere's answers carry no token
//!   counts in the body, so usage is 0.
//!
//! Floats come back as they are, or as base64 of little-endian f32s when the client asks
//! (`encoding_format: "base64"`, the OpenAI SDK's default).

use serde_json::{Map, Value, json};

use crate::providers::Rejection;
use crate::providers::gemini::embed::openai_list;

/// The embedding model families Bedrock serves through InvokeModel.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Family {
    Titan,
    Cohere,
}

fn family(model: &str) -> Option<Family> {
    if model.contains("amazon.titan-embed") {
        Some(Family::Titan)
    } else if model.contains("cohere.embed") {
        Some(Family::Cohere)
    } else {
        None
    }
}

/// The InvokeModel body for an OpenAI embeddings request at `model`.
pub fn request(body: &Map<String, Value>, model: &str) -> Result<Map<String, Value>, Rejection> {
    let texts: Vec<&Value> = match body.get("input") {
        Some(text @ Value::String(_)) => vec![text],
        Some(Value::Array(inputs)) if !inputs.is_empty() && inputs.iter().all(Value::is_string) => {
            inputs.iter().collect()
        }
        _ => {
            return Err(Rejection::new(
                "input",
                "Bedrock embeds text: `input` must be a string or a non-empty array of strings",
            ));
        }
    };
    let dimensions = body.get("dimensions").filter(|d| d.is_u64()).cloned();
    let mut out = Map::new();
    match family(model) {
        Some(Family::Titan) => {
            let [text] = texts.as_slice() else {
                return Err(Rejection::new(
                    "input",
                    "Titan embeds one text a request: send one string, or use a Cohere model for batches",
                ));
            };
            out.insert("inputText".into(), (*text).clone());
            if let Some(dimensions) = dimensions {
                out.insert("dimensions".into(), dimensions);
            }
        }
        Some(Family::Cohere) => {
            out.insert("texts".into(), texts.into_iter().cloned().collect());
            // Cohere's v3 models require it; a stored document is the common case, as the
            // embeddings endpoint does not say which side of a search it is.
            out.insert("input_type".into(), json!("search_document"));
            if let Some(dimensions) = dimensions {
                out.insert("output_dimension".into(), dimensions);
            }
        }
        None => {
            return Err(Rejection::new(
                "model",
                "Bedrock embeddings are served for Amazon Titan and Cohere embedding models (amazon.titan-embed-*, cohere.embed-*)",
            ));
        }
    }
    Ok(out)
}

/// Reads a Titan or Cohere answer as OpenAI's embeddings list.
pub fn to_openai(response: &Value, request: &Map<String, Value>) -> Option<Value> {
    let (vectors, tokens): (Vec<&Vec<Value>>, u64) = match response.get("embeddings") {
        // Cohere: a list of vectors, or vectors by type when `embedding_types` was given.
        Some(Value::Array(all)) => (all.iter().map(Value::as_array).collect::<Option<_>>()?, 0),
        Some(Value::Object(by_type)) => (
            by_type
                .get("float")?
                .as_array()?
                .iter()
                .map(Value::as_array)
                .collect::<Option<_>>()?,
            0,
        ),
        _ => {
            let tokens = response
                .get("inputTextTokenCount")
                .and_then(Value::as_u64)
                .unwrap_or(0);
            (vec![response.get("embedding")?.as_array()?], tokens)
        }
    };
    Some(openai_list(vectors, request, tokens))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(value: Value) -> Map<String, Value> {
        value.as_object().unwrap().clone()
    }

    /// Titan Text Embeddings V2's request and response, as Bedrock's user guide shows them.
    #[test]
    fn golden_titan() {
        let body = map(json!({"model": "emb", "input": "Hello", "dimensions": 256}));
        let sent = request(&body, "amazon.titan-embed-text-v2:0").unwrap();
        assert_eq!(
            Value::Object(sent),
            json!({"inputText": "Hello", "dimensions": 256})
        );
        let answer = to_openai(
            &json!({"embedding": [0.5, -0.25], "inputTextTokenCount": 2}),
            &body,
        )
        .unwrap();
        assert_eq!(
            answer,
            json!({"object": "list", "data": [{"object": "embedding", "index": 0, "embedding": [0.5, -0.25]}],
                   "model": "emb", "usage": {"prompt_tokens": 2, "total_tokens": 2}})
        );
        let batch = map(json!({"model": "emb", "input": ["a", "b"]}));
        let refused = request(&batch, "amazon.titan-embed-text-v2:0").unwrap_err();
        assert_eq!(refused.param.as_deref(), Some("input"));
    }

    /// Cohere Embed's request and both answer shapes, as base64 for the OpenAI SDK's default.
    #[test]
    fn golden_cohere() {
        let body = map(json!({"model": "emb", "input": ["a", "b"], "encoding_format": "base64"}));
        let sent = request(&body, "cohere.embed-english-v3").unwrap();
        assert_eq!(
            Value::Object(sent),
            json!({"texts": ["a", "b"], "input_type": "search_document"})
        );
        let listed = json!({"id": "x", "response_type": "embeddings_floats", "texts": ["a", "b"],
            "embeddings": [[1.0], [0.0, -2.0]]});
        let answer = to_openai(&listed, &body).unwrap();
        assert_eq!(answer["data"][0]["embedding"], "AACAPw==");
        assert_eq!(answer["data"][1]["embedding"], "AAAAAAAAAMA=");
        let typed =
            json!({"embeddings": {"float": [[1.0]]}, "response_type": "embeddings_by_type"});
        assert_eq!(
            to_openai(&typed, &body).unwrap()["data"][0]["embedding"],
            "AACAPw=="
        );
        let other = request(&body, "meta.llama3-3-70b-instruct-v1:0").unwrap_err();
        assert_eq!(other.param.as_deref(), Some("model"));
    }
}
