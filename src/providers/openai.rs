//! The OpenAI chat completions format, spoken by OpenAI and every compatible server (Groq,
//! Together, Mistral, DeepSeek, OpenRouter, vLLM, Ollama, Cloudflare Workers AI's endpoint).
//!
//! `base_url` names the API root (`https://api.openai.com/v1`); chat goes to
//! `{base_url}/chat/completions` and embeddings to `{base_url}/embeddings`, with bearer auth.

mod compat;

use bytes::Bytes;
use http::StatusCode;
use serde::Deserialize;
use serde::de::IgnoredAny;
use serde_json::{Map, Value};

use super::chat_chunks::stream;
use super::inbound_messages;
use super::outbound::OutBody;
use super::responses;
use super::stream::{StreamTranslator, Translating};
use super::{
    Adapter, ClientFormat, ClientRequest, Decoded, Operation, Rejection, RequestBody, Target,
    UpstreamRequest, Usage, translate_error,
};

/// The OpenAI-compatible family.
pub struct OpenAiAdapter;

impl Adapter for OpenAiAdapter {
    fn request(
        &self,
        target: &Target<'_>,
        request: &ClientRequest,
        stream: bool,
    ) -> Result<UpstreamRequest, Rejection> {
        let mut body = encode(request, target.model, stream)?;
        if let (Some(compat), Operation::Chat) = (target.provider.compat, request.operation) {
            body = adjusted(compat, body)?;
        }
        let path = match request.operation {
            Operation::Chat => "chat/completions",
            Operation::Completions => "completions",
            Operation::Embeddings => "embeddings",
            Operation::Responses => "responses",
            Operation::CountTokens => return Err(super::only_for(request.operation)),
        };
        let url = super::endpoint_url(&target.provider.base_url, path);
        let mut built = UpstreamRequest::post(url, body, stream);
        if let Some(key) = target.key {
            built = built.bearer(key.secret.expose());
        }
        Ok(built)
    }

    fn decode(&self, request: &ClientRequest, body: &Bytes) -> Option<Decoded> {
        decode(request, body)
    }

    fn error_body(
        &self,
        request: &ClientRequest,
        status: StatusCode,
        body: &[u8],
    ) -> Option<Bytes> {
        error_body(request, status, body)
    }

    fn stream(&self, request: &ClientRequest) -> Box<dyn StreamTranslator> {
        translator(request)
    }
}

/// `body` as the `compat` vendor takes it: read back, adjusted, written again (only for
/// providers that name one).
fn adjusted(compat: crate::config::Compat, body: OutBody) -> Result<OutBody, Rejection> {
    let mut tree: Map<String, Value> = serde_json::from_slice(&body.to_bytes())
        .map_err(|_| Rejection::new("messages", "the request could not be re-encoded"))?;
    compat::adjust(compat, &mut tree)?;
    Ok(super::to_bytes(&tree).into())
}

/// The body an OpenAI-format upstream gets: the client's own bytes when it speaks OpenAI
/// (only `model` spliced in), else its translation.
pub(crate) fn encode(
    request: &ClientRequest,
    model: &str,
    stream: bool,
) -> Result<OutBody, Rejection> {
    match (request.operation, request.format) {
        (Operation::CountTokens, _) => Err(super::only_for(request.operation)),
        (Operation::Chat, ClientFormat::Anthropic) => {
            let mut body = inbound_messages::request::to_openai(&request.body)?;
            Ok(encode_body(&mut body, model, stream).0.into())
        }
        (Operation::Embeddings, _) => {
            let model_json = Value::from(model).to_string();
            Ok(request
                .body
                .with_fields(&[("model", &model_json)])
                .unwrap_or_else(|| {
                    let mut body = request.body.tree().clone();
                    body.insert("model".into(), Value::from(model));
                    super::to_bytes(&body).into()
                }))
        }
        // Chat and legacy completions from OpenAI clients: their own bytes.
        _ => Ok(passthrough(&request.body, model, stream)),
    }
}

/// An OpenAI client's own bytes with `model` spliced in and, for a stream, its
/// `stream_options` asking for the usage chunk; the body is never rebuilt, unless a field
/// the gateway sets is named twice in it.
fn passthrough(body: &RequestBody, model: &str, stream: bool) -> OutBody {
    // A string serializes infallibly; as a `Value` it was copied and written through `fmt`.
    let model_json = serde_json::to_string(model).unwrap_or_default();
    let options = if stream { usage_options(body) } else { None };
    let model_field = ("model", model_json.as_str());
    let spliced = match &options {
        Some(options) => body.with_fields(&[model_field, ("stream_options", options)]),
        None => body.with_fields(&[model_field]),
    };
    spliced.unwrap_or_else(|| {
        encode_body(&mut body.tree().clone(), model, stream)
            .0
            .into()
    })
}

/// The `stream_options` a stream is sent with when the client's do not ask for the usage
/// chunk already; `None` keeps the client's (as also when they are not an object).
fn usage_options(body: &RequestBody) -> Option<String> {
    let Some(raw) = body.raw_field("stream_options") else {
        return Some(r#"{"include_usage":true}"#.to_owned());
    };
    let Ok(Value::Object(mut options)) = serde_json::from_str::<Value>(raw) else {
        return None;
    };
    if options.get("include_usage").and_then(Value::as_bool) == Some(true) {
        return None;
    }
    options.insert("include_usage".into(), Value::Bool(true));
    Some(Value::Object(options).to_string())
}

/// An OpenAI-format answer in the client's format.
pub(crate) fn decode(request: &ClientRequest, body: &Bytes) -> Option<Decoded> {
    match (request.operation, request.format) {
        (Operation::Embeddings, _) => probe_embeddings(body).map(|usage| Decoded {
            body: body.clone(),
            usage,
        }),
        (Operation::CountTokens, _) => None,
        (Operation::Responses, _) => {
            responses::passthrough::probe_response(body).map(|usage| Decoded {
                body: body.clone(),
                usage,
            })
        }
        (Operation::Chat | Operation::Completions, ClientFormat::OpenAi) => probe_completion(body)
            .map(|usage| Decoded {
                body: body.clone(),
                usage,
            }),
        (Operation::Chat | Operation::Completions, ClientFormat::Anthropic) => {
            let completion: Value = serde_json::from_slice(body).ok()?;
            let message = inbound_messages::response::from_openai(&completion)?;
            Some(Decoded {
                body: super::to_bytes(&message),
                usage: super::stream::chunk_usage(&completion),
            })
        }
    }
}

/// An OpenAI-format error in the client's shape.
pub(crate) fn error_body(
    request: &ClientRequest,
    status: StatusCode,
    body: &[u8],
) -> Option<Bytes> {
    match request.format {
        ClientFormat::OpenAi => None,
        format => Some(translate_error(format, status, body)),
    }
}

/// An OpenAI-format stream in the client's format.
pub(crate) fn translator(request: &ClientRequest) -> Box<dyn StreamTranslator> {
    match request.format {
        ClientFormat::OpenAi => Box::new(stream::Passthrough::new(!request.asked_stream_usage())),
        ClientFormat::Anthropic => Box::new(Translating::new(
            stream::OpenAiSource::default(),
            inbound_messages::stream::AnthropicSink::default(),
        )),
    }
}

#[derive(Deserialize)]
struct EmbeddingsProbe {
    #[allow(dead_code)]
    data: Vec<IgnoredAny>,
    usage: Option<Usage>,
}

/// Checks an embeddings answer and reads its usage; `None` when it is not one.
pub fn probe_embeddings(body: &[u8]) -> Option<Option<Usage>> {
    // From a `str`: serde_json checks no UTF-8 in the fields a probe skips.
    serde_json::from_str::<EmbeddingsProbe>(simdutf8::basic::from_utf8(body).ok()?)
        .ok()
        .map(|e| e.usage)
}

/// Writes the client's request with only `model` replaced, asking a stream for its usage.
///
/// Returns whether the client did not ask for the usage chunk itself, so the stream
/// forwarder knows to strip it.
pub fn encode_body(request: &mut Map<String, Value>, model: &str, stream: bool) -> (Bytes, bool) {
    request.insert("model".into(), Value::String(model.to_owned()));
    let mut strip_usage = false;
    if stream {
        let options = request
            .entry("stream_options")
            .or_insert_with(|| Value::Object(Map::new()));
        if let Value::Object(options) = options {
            let asked = options.get("include_usage").and_then(Value::as_bool) == Some(true);
            if !asked {
                options.insert("include_usage".into(), Value::Bool(true));
                strip_usage = true;
            }
        }
    }
    // Serializing a `Value` map cannot fail: every key is a string.
    let body = serde_json::to_vec(request).unwrap_or_default();
    (Bytes::from(body), strip_usage)
}

/// Just enough of a completion to check it parses and to read its usage.
#[derive(Deserialize)]
struct CompletionProbe {
    #[allow(dead_code)]
    choices: IgnoredAny,
    usage: Option<Usage>,
}

/// Checks a non-streamed completion and reads its usage; `None` when it is not a completion.
pub fn probe_completion(body: &[u8]) -> Option<Option<Usage>> {
    // From a `str`: serde_json checks no UTF-8 in the fields a probe skips. (simdutf8's
    // check of a 600-byte answer costs a third of std's.)
    serde_json::from_str::<CompletionProbe>(simdutf8::basic::from_utf8(body).ok()?)
        .ok()
        .map(|c| c.usage)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_passed_through_answer_is_the_answer_s_own_bytes() {
        let answer = Bytes::from_static(br#"{"choices":[],"usage":{"prompt_tokens":2}}"#);
        let request = ClientRequest::new(ClientFormat::OpenAi, Operation::Chat, Map::new());
        let decoded = decode(&request, &answer).unwrap();
        assert_eq!(decoded.body.as_ptr(), answer.as_ptr(), "not copied");
        assert_eq!(decoded.usage.map(|u| u.prompt_tokens), Some(2));
    }

    #[test]
    fn an_answer_that_is_not_utf8_is_not_a_success() {
        // Found by fuzzing (fuzz/regressions/response): serde_json does not check UTF-8 in
        // fields it skips, so such a body passed the probe and went to the client as a 200.
        let completion = b"{\"id\":\"\xfc\",\"choices\":[],\"usage\":null}";
        let embeddings = b"{\"object\":\"l\xfcist\",\"data\":[]}";
        assert_eq!(probe_completion(completion), None);
        assert_eq!(probe_embeddings(embeddings), None);
        assert!(probe_completion(br#"{"id":"x","choices":[]}"#).is_some());
    }

    #[test]
    fn rewrites_only_the_model() {
        let mut request: Map<String, Value> = serde_json::from_str(
            r#"{"model":"smart","messages":[{"role":"user","content":"hi"}],"temperature":0.2,"x_custom":{"a":1}}"#,
        )
        .unwrap();
        let (body, strip) = encode_body(&mut request, "gpt-4o", false);
        let sent: Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(sent["model"], "gpt-4o");
        assert_eq!(sent["temperature"], 0.2);
        assert_eq!(sent["x_custom"]["a"], 1);
        assert!(sent.get("stream_options").is_none());
        assert!(!strip);
    }

    #[test]
    fn streams_ask_for_usage_and_remember_to_strip_it() {
        let mut request: Map<String, Value> =
            serde_json::from_str(r#"{"model":"m","stream":true,"messages":[]}"#).unwrap();
        let (body, strip) = encode_body(&mut request, "m", true);
        let sent: Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(sent["stream_options"]["include_usage"], true);
        assert!(strip);

        let mut asked: Map<String, Value> = serde_json::from_str(
            r#"{"model":"m","stream":true,"stream_options":{"include_usage":true}}"#,
        )
        .unwrap();
        assert!(!encode_body(&mut asked, "m", true).1);
    }

    fn spliced(body: &str, stream: bool) -> String {
        let body = RequestBody::parse(Bytes::copy_from_slice(body.as_bytes())).unwrap();
        String::from_utf8(passthrough(&body, "m", stream).to_bytes().to_vec()).unwrap()
    }

    #[test]
    fn the_passthrough_splices_the_clients_bytes() {
        assert_eq!(
            spliced(r#"{"model":"r","messages":[], "n": 1.50}"#, false),
            r#"{"model":"m","messages":[], "n": 1.50}"#
        );
        // A stream's options ask for usage: added, completed, or left when already asked.
        assert_eq!(
            spliced(r#"{"model":"r","stream":true}"#, true),
            r#"{"stream_options":{"include_usage":true},"model":"m","stream":true}"#
        );
        assert_eq!(
            spliced(
                r#"{"model":"r","stream_options":{"include_usage":false}}"#,
                true
            ),
            r#"{"model":"m","stream_options":{"include_usage":true}}"#
        );
        let asked = r#"{"stream_options":{"include_usage":true} ,"model":"m"}"#;
        assert_eq!(spliced(asked, true), asked);
        // Not an object: left as it came, as the tree's encoding does.
        assert_eq!(
            spliced(r#"{"model":"r","stream_options":null}"#, true),
            r#"{"model":"m","stream_options":null}"#
        );
        // A name given twice: the tree's encoding, which takes the last.
        let twice: Value =
            serde_json::from_str(&spliced(r#"{"model":"a","stream":true,"model":"b"}"#, true))
                .unwrap();
        assert_eq!(
            twice,
            serde_json::json!({"model":"m","stream":true,"stream_options":{"include_usage":true}})
        );
    }
}
