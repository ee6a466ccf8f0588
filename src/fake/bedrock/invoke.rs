//! Bedrock's InvokeModel for embedding models (`POST /model/{modelId}/invoke`), in each
//! family's own body, the family read from the model id as Bedrock reads it:
//!
//! - Amazon Titan (`amazon.titan-embed…`): `{"inputText", "dimensions"?}` is answered with
//!   `{"embedding", "inputTextTokenCount"}`.
//! - Cohere (`cohere.embed…`): `{"texts", "input_type", "output_dimension"?}` is answered with
//!   `{"id", "response_type": "embeddings_floats", "texts", "embeddings"}`.
//!
//! The vectors are the fake's usual ones (the same for the same text), stretched to the
//! dimensions asked for. A body the model cannot take is refused as Bedrock refuses it: 400
//! `ValidationException`, "Malformed input request".

use serde_json::{Value, json};

use super::{ErrorAnswer, error_type_header};
use crate::fake::answer;

/// The embedding model families the fake serves through InvokeModel.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Family {
    Titan,
    Cohere,
}

/// The answer to an InvokeModel request at `path`, the fake's `call`-th request.
pub fn embeddings(path: &str, request: &Value, call: usize) -> Result<Value, ErrorAnswer> {
    let model = answer::converse_model(path).unwrap_or_default();
    let family = if model.starts_with("amazon.titan-embed") {
        Family::Titan
    } else if model.starts_with("cohere.embed") {
        Family::Cohere
    } else {
        return Err(refusal(format!(
            "The fake serves InvokeModel for Titan and Cohere embedding models only, not `{model}`."
        )));
    };
    match family {
        Family::Titan => {
            let text = required(request, "inputText")?
                .as_str()
                .ok_or_else(|| malformed("#/inputText: expected type: String"))?;
            let dimensions = dimensions(request, "dimensions")?;
            Ok(json!({
                "embedding": vector(text, dimensions),
                "inputTextTokenCount": tokens(text),
            }))
        }
        Family::Cohere => {
            let texts: Vec<&str> = required(request, "texts")?
                .as_array()
                .and_then(|texts| texts.iter().map(Value::as_str).collect())
                .ok_or_else(|| malformed("#/texts: expected type: JSONArray of String"))?;
            // Cohere's v3 models refuse a request that does not say which side of a search
            // its texts are on.
            required(request, "input_type")?;
            let dimensions = dimensions(request, "output_dimension")?;
            let vectors: Vec<Vec<f32>> = texts.iter().map(|t| vector(t, dimensions)).collect();
            Ok(json!({
                // UUID-shaped, as Cohere's, and different for every call.
                "id": format!("00000000-0000-4000-8000-{call:012}"),
                "response_type": "embeddings_floats",
                "texts": texts,
                "embeddings": vectors,
            }))
        }
    }
}

/// The fake's vector for `text`, repeated to `dimensions` values when given.
fn vector(text: &str, dimensions: Option<usize>) -> Vec<f32> {
    let base = answer::embedding(text);
    match dimensions {
        Some(n) => base.iter().copied().cycle().take(n).collect(),
        None => base,
    }
}

/// The fake's rough token count, as its other embeddings answers count: one per 4 bytes.
fn tokens(text: &str) -> u64 {
    text.len() as u64 / 4
}

fn required<'a>(request: &'a Value, field: &str) -> Result<&'a Value, ErrorAnswer> {
    request
        .get(field)
        .ok_or_else(|| malformed(&format!("#: required key [{field}] not found")))
}

/// `field` as a count of dimensions, when the request has it.
fn dimensions(request: &Value, field: &str) -> Result<Option<usize>, ErrorAnswer> {
    let Some(value) = request.get(field) else {
        return Ok(None);
    };
    match value.as_u64().and_then(|n| usize::try_from(n).ok()) {
        Some(n @ 1..=8192) => Ok(Some(n)),
        _ => Err(malformed(&format!(
            "#/{field}: {value} is not a number of dimensions"
        ))),
    }
}

fn malformed(why: &str) -> ErrorAnswer {
    refusal(format!(
        "Malformed input request: {why}, please reformat your input and try again."
    ))
}

fn refusal(message: String) -> ErrorAnswer {
    ErrorAnswer {
        status: 400,
        error_type: error_type_header(400),
        body: json!({ "message": message }).to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TITAN: &str = "/model/amazon.titan-embed-text-v2%3A0/invoke";
    const COHERE: &str = "/model/cohere.embed-english-v3/invoke";

    #[test]
    fn titan_embeds_one_text_at_the_dimensions_asked() {
        let answer = embeddings(TITAN, &json!({"inputText": "Hello there"}), 0).unwrap();
        assert_eq!(
            answer,
            json!({"embedding": [11.0, 0.5, -0.25], "inputTextTokenCount": 2})
        );
        let sized = embeddings(TITAN, &json!({"inputText": "Hi", "dimensions": 256}), 0).unwrap();
        let values = sized["embedding"].as_array().unwrap();
        assert_eq!(values.len(), 256);
        assert_eq!(values[3], json!(2.0), "the base vector repeats");
    }

    #[test]
    fn cohere_embeds_a_batch_with_its_texts_echoed() {
        let request = json!({"texts": ["a", "bcd"], "input_type": "search_document"});
        let answer = embeddings(COHERE, &request, 7).unwrap();
        assert_eq!(answer["response_type"], "embeddings_floats");
        assert_eq!(answer["texts"], json!(["a", "bcd"]));
        assert_eq!(
            answer["embeddings"],
            json!([[1.0, 0.5, -0.25], [3.0, 0.5, -0.25]])
        );
        assert_eq!(answer["id"], "00000000-0000-4000-8000-000000000007");
    }

    #[test]
    fn a_body_the_model_cannot_take_is_a_validation_exception() {
        let cases = [
            (TITAN, json!({"texts": ["a"]}), "required key [inputText]"),
            (COHERE, json!({"texts": ["a"]}), "required key [input_type]"),
            (COHERE, json!({"texts": "a", "input_type": "x"}), "#/texts"),
            (
                TITAN,
                json!({"inputText": "a", "dimensions": 0}),
                "#/dimensions",
            ),
            (
                "/model/meta.llama3-70b-instruct-v1%3A0/invoke",
                json!({"inputText": "a"}),
                "Titan and Cohere",
            ),
        ];
        for (path, request, said) in cases {
            let refused = embeddings(path, &request, 0).unwrap_err();
            assert_eq!(refused.status, 400);
            assert!(
                refused.error_type.starts_with("ValidationException:"),
                "{}",
                refused.error_type
            );
            assert!(refused.body.contains(said), "{path}: {}", refused.body);
        }
    }
}
