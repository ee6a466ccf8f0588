//! OpenAI embeddings requests as Gemini's `embedContent` / `batchEmbedContents`, and back.
//!
//! One string input → `embedContent` `{"content":{"parts":[{"text"}]}}`; an array of strings →
//! `batchEmbedContents` with one request each. `dimensions` → `outputDimensionality`. Token-id
//! inputs are rejected (Gemini takes text). The answer's `values` come back as OpenAI's
//! `data[].embedding`, as floats or, when asked (the official SDK's default), base64 of
//! little-endian f32s.

use serde_json::{Map, Value, json};

use crate::providers::Rejection;

/// The method and body for an embeddings request.
pub fn request(
    body: &Map<String, Value>,
    model: &str,
) -> Result<(&'static str, Map<String, Value>), Rejection> {
    let dimensions = body.get("dimensions").filter(|d| d.is_u64()).cloned();
    let content = |text: &Value| {
        let mut request = Map::new();
        request.insert("content".into(), json!({"parts": [{"text": text}]}));
        if let Some(dimensions) = &dimensions {
            request.insert("outputDimensionality".into(), dimensions.clone());
        }
        request
    };
    match body.get("input") {
        Some(text @ Value::String(_)) => Ok(("embedContent", content(text))),
        Some(Value::Array(inputs)) if !inputs.is_empty() && inputs.iter().all(Value::is_string) => {
            let requests: Vec<Value> = inputs
                .iter()
                .map(|text| {
                    let mut request = content(text);
                    request.insert("model".into(), json!(format!("models/{model}")));
                    Value::Object(request)
                })
                .collect();
            let mut batch = Map::new();
            batch.insert("requests".into(), Value::Array(requests));
            Ok(("batchEmbedContents", batch))
        }
        _ => Err(Rejection::new(
            "input",
            "Gemini embeds text: `input` must be a string or a non-empty array of strings",
        )),
    }
}

/// Reads `embedContent` or `batchEmbedContents` as OpenAI's embeddings list.
pub fn to_openai(response: &Value, request: &Map<String, Value>) -> Option<Value> {
    let vectors: Vec<&Vec<Value>> = match response.get("embeddings") {
        Some(Value::Array(all)) => all
            .iter()
            .map(|e| e.get("values").and_then(Value::as_array))
            .collect::<Option<_>>()?,
        _ => vec![response.pointer("/embedding/values")?.as_array()?],
    };
    // Gemini's embedding answers carry no token counts.
    Some(openai_list(vectors, request, 0))
}

/// OpenAI's embeddings list of `vectors`, as floats or, when the client asked, base64;
/// shared with Bedrock's embeddings.
pub(crate) fn openai_list(
    vectors: Vec<&Vec<Value>>,
    request: &Map<String, Value>,
    prompt_tokens: u64,
) -> Value {
    let base64 = request.get("encoding_format").and_then(Value::as_str) == Some("base64");
    let data: Vec<Value> = vectors
        .into_iter()
        .enumerate()
        .map(|(index, values)| {
            let embedding = if base64 {
                json!(encode_f32_base64(values))
            } else {
                Value::Array(values.clone())
            };
            json!({"object": "embedding", "index": index, "embedding": embedding})
        })
        .collect();
    json!({
        "object": "list",
        "data": data,
        "model": request.get("model").cloned().unwrap_or(json!("")),
        "usage": {"prompt_tokens": prompt_tokens, "total_tokens": prompt_tokens},
    })
}

/// Little-endian f32s, base64-encoded: what OpenAI sends for `encoding_format: "base64"`.
fn encode_f32_base64(values: &[Value]) -> String {
    let bytes: Vec<u8> = values
        .iter()
        .flat_map(|v| (v.as_f64().unwrap_or(0.0) as f32).to_le_bytes())
        .collect();
    base64(&bytes)
}

/// Standard base64 with padding, as OpenAI's `encoding_format: "base64"` is.
pub(crate) fn base64(bytes: &[u8]) -> String {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(value: Value) -> Map<String, Value> {
        value.as_object().unwrap().clone()
    }

    /// The request and response of Gemini's embeddings guide.
    #[test]
    fn golden_single_input() {
        let body = map(
            json!({"model": "emb", "input": "What is the meaning of life?", "dimensions": 768}),
        );
        let (method, sent) = request(&body, "gemini-embedding-001").unwrap();
        assert_eq!(method, "embedContent");
        assert_eq!(
            Value::Object(sent),
            json!({"content": {"parts": [{"text": "What is the meaning of life?"}]}, "outputDimensionality": 768})
        );
        let answer = to_openai(&json!({"embedding": {"values": [0.5, -0.25]}}), &body).unwrap();
        assert_eq!(
            answer,
            json!({"object": "list", "data": [{"object": "embedding", "index": 0, "embedding": [0.5, -0.25]}],
                   "model": "emb", "usage": {"prompt_tokens": 0, "total_tokens": 0}})
        );
    }

    #[test]
    fn golden_batch_input_as_base64() {
        let body = map(json!({"model": "emb", "input": ["a", "b"], "encoding_format": "base64"}));
        let (method, sent) = request(&body, "gemini-embedding-001").unwrap();
        assert_eq!(method, "batchEmbedContents");
        assert_eq!(
            sent["requests"][1],
            json!({"content": {"parts": [{"text": "b"}]}, "model": "models/gemini-embedding-001"})
        );
        let response = json!({"embeddings": [{"values": [1.0]}, {"values": [0.0, -2.0]}]});
        let answer = to_openai(&response, &body).unwrap();
        // 1.0f32 = 00 00 80 3f; -2.0f32 = 00 00 00 c0.
        assert_eq!(answer["data"][0]["embedding"], "AACAPw==");
        assert_eq!(answer["data"][1]["embedding"], "AAAAAAAAAMA=");
        assert_eq!(answer["data"][1]["index"], 1);
    }

    #[test]
    fn token_inputs_are_rejected() {
        let body = map(json!({"model": "emb", "input": [[1, 2, 3]]}));
        assert_eq!(request(&body, "m").unwrap_err().param, Some("input".into()));
        assert_eq!(base64(b"Man"), "TWFu");
        assert_eq!(base64(b"Ma"), "TWE=");
    }
}
