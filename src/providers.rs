//! Provider adapters: how a client's request is encoded for a provider's wire format, and how
//! the answer (whole, streamed, or an error) is turned back into the client's format.
//!
//! Every kind implements [`Adapter`]. When the client's format and the provider's are the same,
//! the body passes through with only `model` rewritten, so nothing is lost; where they cross,
//! the translation goes through OpenAI's chat format as the common shape. `outbound` is the
//! HTTP request an adapter builds, `sse` parses event streams and `stream` turns them into
//! the client's events.

pub mod anthropic;
pub mod azure;
pub mod bedrock;
pub mod body;
pub mod chat_chunks;
pub mod gemini;
pub mod inbound_messages;
pub mod openai;
pub mod outbound;
pub mod refresh;
pub mod responses;
pub mod sse;
pub mod stream;
pub mod vertex;

use bytes::Bytes;
use http::StatusCode;
use serde_json::{Value, json};

use crate::config::{Provider, ProviderKind};
use crate::keys::KeyLease;
pub use body::{JsonKind, RequestBody};
pub use outbound::UpstreamRequest;
pub use stream::{StreamState, StreamTranslator, Translated};

/// The API a client speaks to the gateway.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ClientFormat {
    /// OpenAI's chat completions and embeddings.
    OpenAi,
    /// Anthropic's Messages API.
    Anthropic,
}

/// What the client asked for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Operation {
    /// A chat completion (or an Anthropic message).
    Chat,
    /// Embeddings of some input.
    Embeddings,
    /// Anthropic's `/v1/messages/count_tokens`: served by Anthropic steps only.
    CountTokens,
    /// OpenAI's legacy `/v1/completions`: served by OpenAI-family steps only.
    Completions,
    /// A Responses API request (`/v1/responses`), in OpenAI's Responses format.
    Responses,
}

/// A client's request, in its own format, as routing carries it from step to step.
#[derive(Clone, Debug)]
pub struct ClientRequest {
    pub format: ClientFormat,
    pub operation: Operation,
    /// The client's own bytes; translations read them as a tree (see [`RequestBody`]).
    pub body: RequestBody,
    /// The client's `anthropic-beta` header: forwarded to Anthropic steps; other steps carry
    /// every beta field they can translate and refuse the rest by name, so it is not needed.
    pub anthropic_beta: Option<String>,
    /// The client headers some provider's `forward_headers` names, as they came; each
    /// attempt sends on those its provider names.
    pub forwarded: Vec<(http::HeaderName, http::HeaderValue)>,
}

impl ClientRequest {
    /// A request with no forwarded headers.
    pub fn new(format: ClientFormat, operation: Operation, body: impl Into<RequestBody>) -> Self {
        ClientRequest {
            format,
            operation,
            body: body.into(),
            anthropic_beta: None,
            forwarded: Vec::new(),
        }
    }

    /// Whether an OpenAI client asked for the final usage chunk of a stream.
    pub fn asked_stream_usage(&self) -> bool {
        self.body
            .field_as::<Value>("stream_options")
            .is_some_and(|o| o.get("include_usage") == Some(&Value::Bool(true)))
    }
}

/// Where one attempt goes: the provider, its key and the step's model.
pub struct Target<'a> {
    pub provider: &'a Provider,
    pub key: Option<&'a KeyLease>,
    pub model: &'a str,
}

/// A request field the target's format cannot carry; the client gets a 400 that names it.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct Rejection {
    pub message: String,
    pub param: Option<String>,
}

impl Rejection {
    /// A rejection of `param`, with a message that says why.
    pub fn new(param: &str, message: impl Into<String>) -> Rejection {
        Rejection {
            message: message.into(),
            param: Some(param.to_owned()),
        }
    }
}

/// A whole answer in the client's format.
#[derive(Clone, Debug, PartialEq)]
pub struct Decoded {
    pub body: Bytes,
    pub usage: Option<Usage>,
}

/// One provider kind's wire format.
pub trait Adapter: Sync {
    /// Builds the HTTP request for `request` at the target's model, or refuses a field the
    /// provider's format cannot carry.
    fn request(
        &self,
        target: &Target<'_>,
        request: &ClientRequest,
        stream: bool,
    ) -> Result<UpstreamRequest, Rejection>;

    /// Turns a whole 2xx answer into the client's format; `None` when it does not parse.
    /// An answer already in the client's format comes back as `body` itself, not a copy.
    fn decode(&self, request: &ClientRequest, body: &Bytes) -> Option<Decoded>;

    /// Turns an error answer into the client's error shape; `None` keeps it as it came.
    fn error_body(&self, request: &ClientRequest, status: StatusCode, body: &[u8])
    -> Option<Bytes>;

    /// A translator from this provider's event stream into the client's.
    fn stream(&self, request: &ClientRequest) -> Box<dyn StreamTranslator>;
}

/// The refusal of an operation only one family serves, sent to a step of another.
pub(crate) fn only_for(operation: Operation) -> Rejection {
    let message = match operation {
        Operation::CountTokens => {
            "count_tokens is answered by Anthropic steps only, and this route's step is another provider: route it to a route whose first step is kind = \"anthropic\""
        }
        Operation::Completions => {
            "the legacy /v1/completions is served by OpenAI-family steps only (kind = \"openai\" or \"azure\"), and this route's step is another provider: use /v1/chat/completions"
        }
        Operation::Embeddings => "this provider has no embeddings API",
        Operation::Responses => "this provider has no Responses API",
        Operation::Chat => "this provider cannot serve this request",
    };
    Rejection::new("model", message)
}

/// The adapter for a provider kind at `model`: a Vertex provider's depends on the model's
/// publisher.
pub fn adapter(kind: ProviderKind, model: &str) -> &'static dyn Adapter {
    match kind {
        ProviderKind::OpenAi => &openai::OpenAiAdapter,
        ProviderKind::Anthropic => &anthropic::AnthropicAdapter,
        ProviderKind::Gemini => &gemini::GeminiAdapter,
        ProviderKind::Azure => &azure::AzureAdapter,
        ProviderKind::Vertex => vertex::adapter_for(model),
        ProviderKind::Bedrock => &bedrock::BedrockAdapter,
    }
}

/// The adapter for `request` at `provider`'s `model`: a Responses request has its own, which
/// speaks the Responses API or translates through the kind's chat adapter.
pub fn adapter_for(provider: &Provider, model: &str, operation: Operation) -> &'static dyn Adapter {
    match operation {
        Operation::Responses => responses::adapter_for(provider, model),
        Operation::Chat
        | Operation::Embeddings
        | Operation::CountTokens
        | Operation::Completions => adapter(provider.kind, model),
    }
}

/// Why a model name a client chose cannot go to a provider of `kind`, if it cannot.
///
/// Gemini and Azure put the model into the URL path, where `/`, `..`, `?` or `#` would
/// steer the request (and the operator's key) to another endpoint; the others carry it in
/// the JSON body, where `vendor/model` names are normal. Bedrock's path holds the model
/// percent-encoded whole, `/` and all (an inference profile's ARN has one), so only a name
/// that is a dot segment could steer it. No kind takes control characters.
pub fn check_model_name(kind: ProviderKind, model: &str) -> Result<(), &'static str> {
    if model.chars().any(char::is_control) {
        return Err("the model name may not contain control characters");
    }
    let in_path = match kind {
        ProviderKind::OpenAi | ProviderKind::Anthropic => return Ok(()),
        ProviderKind::Bedrock if matches!(model, "." | "..") => {
            return Err("the model name may not be `.` or `..` for this provider");
        }
        ProviderKind::Bedrock => return Ok(()),
        ProviderKind::Gemini => model.strip_prefix("models/").unwrap_or(model),
        ProviderKind::Azure | ProviderKind::Vertex => model,
    };
    if in_path.contains(['/', '\\', '?', '#']) {
        return Err("the model name may not contain `/`, `\\`, `?` or `#` for this provider");
    }
    if in_path == "." || in_path.contains("..") {
        return Err("the model name may not contain `..` or be `.` for this provider");
    }
    Ok(())
}

/// `{base_url}/{path}`, in one allocation: `format!` cost about 950 instructions a request.
pub(crate) fn endpoint_url(base_url: &str, path: &str) -> String {
    let mut url = String::with_capacity(base_url.len() + 1 + path.len());
    url.push_str(base_url);
    url.push('/');
    url.push_str(path);
    url
}

/// Percent-encodes `text` as one URL path segment (or query value): everything but
/// unreserved characters, so nothing in it can end the segment or start a query.
pub(crate) fn path_segment(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for byte in text.bytes() {
        if byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'_' | b'.' | b'~') {
            out.push(byte as char);
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

/// The token counts an answer reported.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Deserialize)]
pub struct Usage {
    #[serde(default)]
    pub prompt_tokens: u64,
    #[serde(default)]
    pub completion_tokens: u64,
}

/// An error body in the client's own shape: what its SDK parses into an exception.
pub fn error_body(
    format: ClientFormat,
    status: StatusCode,
    message: &str,
    code: &str,
    param: Option<&str>,
) -> Bytes {
    let body = match format {
        ClientFormat::OpenAi => json!({
            "error": {
                "message": message,
                "type": openai_error_type(status),
                "param": param,
                "code": code,
            }
        }),
        ClientFormat::Anthropic => json!({
            "type": "error",
            "error": {"type": anthropic::error_type(status), "message": message},
        }),
    };
    Bytes::from(body.to_string())
}

fn openai_error_type(status: StatusCode) -> &'static str {
    match status.as_u16() {
        401 => "authentication_error",
        403 => "permission_error",
        404 => "not_found_error",
        429 => "rate_limit_error",
        400..=499 => "invalid_request_error",
        _ => "server_error",
    }
}

/// Reads any provider's error body: OpenAI's `{"error":{"message","type"}}`, Anthropic's
/// `{"type":"error","error":{"type","message"}}` or Gemini's `{"error":{"message","status"}}`.
/// Returns the error's own type (or status) and its message.
pub fn read_error(body: &[u8]) -> (Option<String>, Option<String>) {
    let Ok(value) = serde_json::from_slice::<Value>(body) else {
        return (None, None);
    };
    // Gemini's streaming endpoint answers errors as a one-element array.
    let value = match value {
        Value::Array(mut items) if !items.is_empty() => items.swap_remove(0),
        other => other,
    };
    let error = value.get("error");
    let text = |field: &str| {
        error
            .and_then(|e| e.get(field))
            .and_then(Value::as_str)
            .map(str::to_owned)
    };
    (text("type").or_else(|| text("status")), text("message"))
}

/// Re-renders an upstream error body in the client's shape, keeping its message.
pub fn translate_error(format: ClientFormat, status: StatusCode, body: &[u8]) -> Bytes {
    let (kind, message) = read_error(body);
    let message = message.unwrap_or_else(|| format!("the provider answered {status}"));
    let code = kind.unwrap_or_else(|| "upstream_error".into());
    error_body(format, status, &message, &code, None)
}

/// A translated chat completion (OpenAI's shape) as the client's answer, with its usage.
pub(crate) fn chat_answer(request: &ClientRequest, completion: &Value) -> Option<Decoded> {
    let usage = stream::chunk_usage(completion);
    let body = match request.format {
        ClientFormat::OpenAi => to_bytes(completion),
        ClientFormat::Anthropic => to_bytes(&inbound_messages::response::from_openai(completion)?),
    };
    Some(Decoded { body, usage })
}

/// A translator from a provider's events, read by `source`, into the client's stream.
pub(crate) fn chat_stream<S: stream::ChunkSource + 'static>(
    source: S,
    request: &ClientRequest,
) -> Box<dyn StreamTranslator> {
    match request.format {
        ClientFormat::OpenAi => Box::new(stream::Translating::new(
            source,
            chat_chunks::stream::OpenAiSink::new(request.asked_stream_usage()),
        )),
        ClientFormat::Anthropic => Box::new(stream::Translating::new(
            source,
            inbound_messages::stream::AnthropicSink::default(),
        )),
    }
}

/// Serializes a JSON map; a `Value` map always serializes, so the fallback never shows.
pub(crate) fn to_bytes(value: &impl serde::Serialize) -> Bytes {
    Bytes::from(serde_json::to_vec(value).unwrap_or_default())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn model_names_in_urls_are_one_plain_segment() {
        for kind in [ProviderKind::Gemini, ProviderKind::Azure] {
            for bad in ["a/b", "../x", "..", ".", "x?k=1", "x#f", "a\\b", "a\u{7f}b"] {
                assert!(check_model_name(kind, bad).is_err(), "{kind:?} {bad}");
            }
            assert_eq!(check_model_name(kind, "gpt-4o.mini_2:x"), Ok(()));
        }
        assert_eq!(
            check_model_name(ProviderKind::Gemini, "models/gemini-2.5-flash"),
            Ok(())
        );
        assert_eq!(
            check_model_name(ProviderKind::OpenAi, "meta-llama/Llama-3?#"),
            Ok(())
        );
        assert!(check_model_name(ProviderKind::Anthropic, "claude\n").is_err());
        assert_eq!(path_segment("a/b %2F.~"), "a%2Fb%20%252F.~");
    }

    #[test]
    fn reads_every_providers_error_shape() {
        let openai = br#"{"error":{"message":"bad","type":"invalid_request_error"}}"#;
        let anthropic =
            br#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#;
        let gemini = br#"{"error":{"code":429,"message":"quota","status":"RESOURCE_EXHAUSTED"}}"#;
        assert_eq!(
            read_error(openai),
            (Some("invalid_request_error".into()), Some("bad".into()))
        );
        assert_eq!(
            read_error(anthropic),
            (Some("overloaded_error".into()), Some("Overloaded".into()))
        );
        assert_eq!(
            read_error(gemini),
            (Some("RESOURCE_EXHAUSTED".into()), Some("quota".into()))
        );
    }

    #[test]
    fn renders_errors_in_the_clients_shape() {
        let anthropic = translate_error(
            ClientFormat::Anthropic,
            StatusCode::BAD_REQUEST,
            br#"{"error":{"message":"bad","type":"invalid_request_error"}}"#,
        );
        let anthropic: Value = serde_json::from_slice(&anthropic).unwrap();
        assert_eq!(
            anthropic,
            json!({"type":"error","error":{"type":"invalid_request_error","message":"bad"}})
        );
        let openai = translate_error(
            ClientFormat::OpenAi,
            StatusCode::from_u16(529).unwrap(),
            br#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#,
        );
        let openai: Value = serde_json::from_slice(&openai).unwrap();
        assert_eq!(
            openai,
            json!({"error":{"message":"Overloaded","type":"server_error","param":null,"code":"overloaded_error"}})
        );
    }
}
