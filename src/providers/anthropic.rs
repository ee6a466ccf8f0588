//! Anthropic's Messages API, upstream and inbound.
//!
//! `base_url` is the API host (`https://api.anthropic.com`); requests go to
//! `{base_url}/v1/messages` with the `x-api-key` and `anthropic-version` headers. Anthropic
//! needs `max_tokens`, so a request without it gets the provider's `default_max_tokens`.
//!
//! Upstream, for OpenAI clients: `encode` writes the request, `decode` reads a whole message
//! and `events` reads the stream. Clients of `/v1/messages` served by another format are
//! `super::inbound_messages`' work.

pub mod decode;
pub mod encode;
pub mod events;

use bytes::Bytes;
use http::StatusCode;
use http::header::HeaderName;
use serde_json::{Map, Value};

use super::chat_chunks::stream::OpenAiSink;
pub use super::inbound_messages::stream_error_event;
use super::outbound::OutBody;
use super::stream::{StreamTranslator, Translating};
use super::{
    Adapter, ClientFormat, ClientRequest, Decoded, JsonKind, Operation, Rejection, RequestBody,
    Target, UpstreamRequest, Usage, translate_error,
};

/// Anthropic's Messages API.
pub struct AnthropicAdapter;

const ANTHROPIC_VERSION: HeaderName = HeaderName::from_static("anthropic-version");
/// Betas the client asks for; the gateway forwards them to Anthropic steps.
pub(crate) const ANTHROPIC_BETA: HeaderName = HeaderName::from_static("anthropic-beta");
/// Anthropic's key header, which Anthropic clients also send the gateway.
pub(crate) const X_API_KEY: HeaderName = HeaderName::from_static("x-api-key");

impl Adapter for AnthropicAdapter {
    fn request(
        &self,
        target: &Target<'_>,
        request: &ClientRequest,
        stream: bool,
    ) -> Result<UpstreamRequest, Rejection> {
        let max_tokens = target.provider.default_max_tokens;
        let (path, body) = match (request.operation, request.format) {
            (Operation::Embeddings, _) => {
                return Err(Rejection::new(
                    "model",
                    "Anthropic has no embeddings API: route embeddings to an openai, azure or gemini provider",
                ));
            }
            // Responses requests reach Anthropic as chat, through the Responses adapter.
            (Operation::Completions | Operation::Responses, _) => {
                return Err(super::only_for(request.operation));
            }
            (Operation::CountTokens, _) => {
                let model_json = Value::from(target.model).to_string();
                let body = request
                    .body
                    .with_fields(&[("model", &model_json)])
                    .unwrap_or_else(|| {
                        let mut body = request.body.tree().clone();
                        body.insert("model".into(), Value::from(target.model));
                        super::to_bytes(&body).into()
                    });
                ("v1/messages/count_tokens", body)
            }
            (Operation::Chat, ClientFormat::Anthropic) => (
                "v1/messages",
                passthrough(&request.body, target.model, max_tokens, stream),
            ),
            (Operation::Chat, ClientFormat::OpenAi) => (
                "v1/messages",
                super::to_bytes(&encode::from_openai(
                    &request.body,
                    target.model,
                    max_tokens,
                    stream,
                )?)
                .into(),
            ),
        };
        let url = super::endpoint_url(&target.provider.base_url, path);
        let mut built = UpstreamRequest::post(url, body, stream)
            .header(ANTHROPIC_VERSION, &target.provider.anthropic_version);
        // Betas change what Anthropic accepts and answers; the client asked for them.
        if let Some(beta) = &request.anthropic_beta {
            built = built.header(ANTHROPIC_BETA, beta);
        }
        if let Some(key) = target.key {
            built = built.secret_header(X_API_KEY, key.secret.expose());
        }
        Ok(built)
    }

    fn decode(&self, request: &ClientRequest, body: &Bytes) -> Option<Decoded> {
        if request.format == ClientFormat::Anthropic && request.operation != Operation::CountTokens
        {
            return probe_message(body).map(|usage| Decoded {
                body: body.clone(),
                usage,
            });
        }
        let message: Value = serde_json::from_slice(body).ok()?;
        if request.operation == Operation::CountTokens {
            message.get("input_tokens")?.as_u64()?;
            return Some(Decoded {
                body: body.clone(),
                usage: None,
            });
        }
        if message.get("type").and_then(Value::as_str) != Some("message")
            || !message.get("content").is_some_and(Value::is_array)
        {
            return None;
        }
        let usage = message.get("usage").map(usage);
        match request.format {
            ClientFormat::Anthropic => Some(Decoded {
                body: body.clone(),
                usage,
            }),
            ClientFormat::OpenAi => Some(Decoded {
                body: super::to_bytes(&decode::to_openai(&message)?),
                usage,
            }),
        }
    }

    fn error_body(
        &self,
        request: &ClientRequest,
        status: StatusCode,
        body: &[u8],
    ) -> Option<Bytes> {
        match request.format {
            ClientFormat::Anthropic => None,
            format => Some(translate_error(format, status, body)),
        }
    }

    fn stream(&self, request: &ClientRequest) -> Box<dyn StreamTranslator> {
        match request.format {
            ClientFormat::Anthropic => Box::new(events::Passthrough::default()),
            ClientFormat::OpenAi => Box::new(Translating::new(
                events::AnthropicSource::default(),
                OpenAiSink::new(request.asked_stream_usage()),
            )),
        }
    }
}

/// An Anthropic client's own bytes: only `model` spliced in, and `max_tokens` filled in when
/// absent; the body is never rebuilt, unless a field set here is named twice in it.
fn passthrough(body: &RequestBody, model: &str, default_max_tokens: u32, stream: bool) -> OutBody {
    let model_json = Value::from(model).to_string();
    let max_tokens = default_max_tokens.to_string();
    let mut set = vec![("model", model_json.as_str())];
    if body.raw_field("max_tokens").is_none() {
        set.push(("max_tokens", &max_tokens));
    }
    if stream && body.raw_field("stream") != Some("true") {
        set.push(("stream", "true"));
    }
    body.with_fields(&set).unwrap_or_else(|| {
        super::to_bytes(&rebuilt(body.tree(), model, default_max_tokens, stream)).into()
    })
}

/// [`passthrough`] on the tree, for bodies that name a field twice.
fn rebuilt(
    body: &Map<String, Value>,
    model: &str,
    default_max_tokens: u32,
    stream: bool,
) -> Map<String, Value> {
    let mut body = body.clone();
    body.insert("model".into(), Value::String(model.to_owned()));
    body.entry("max_tokens")
        .or_insert_with(|| Value::from(default_max_tokens));
    if stream {
        body.insert("stream".into(), Value::Bool(true));
    }
    body
}

/// Anthropic's error `type` for a status, as its API and SDKs name them.
pub fn error_type(status: StatusCode) -> &'static str {
    match status.as_u16() {
        401 => "authentication_error",
        402 => "billing_error",
        403 => "permission_error",
        404 => "not_found_error",
        413 => "request_too_large",
        429 => "rate_limit_error",
        400..=499 => "invalid_request_error",
        529 => "overloaded_error",
        _ => "api_error",
    }
}

/// Checks an answer passed through to an Anthropic client as a message and reads its usage;
/// `None` when it is not a message.
///
/// The answer is checked by the request body's check (see [`RequestBody`]) and only `type`,
/// `content`'s first byte and `usage` are read: building the whole message as a tree cost a
/// 600-byte answer 19k instructions, this 9k. As with every passthrough, a number past `f64`
/// is passed on, as JSON allows. (An OpenAI completion's probe stays with serde_json's
/// `IgnoredAny`, which skips a small answer for less than this check costs.)
fn probe_message(body: &Bytes) -> Option<Option<Usage>> {
    let answer = RequestBody::parse(body.clone()).ok()?;
    let kind: String = answer.field_as("type")?;
    if kind != "message" || answer.field_kind("content") != Some(JsonKind::Array) {
        return None;
    }
    match answer.raw_field("usage") {
        Some(raw) => Some(Some(usage(&serde_json::from_str(raw).ok()?))),
        None => Some(None),
    }
}

/// Reads Anthropic's `usage`; cached prompt tokens count as prompt tokens, as OpenAI counts them.
pub fn usage(usage: &Value) -> Usage {
    let count = |field: &str| usage.get(field).and_then(Value::as_u64).unwrap_or(0);
    Usage {
        prompt_tokens: count("input_tokens")
            + count("cache_creation_input_tokens")
            + count("cache_read_input_tokens"),
        completion_tokens: count("output_tokens"),
    }
}

/// The seconds since the epoch, for the `created` field of translated completions.
pub(crate) fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn passed(body: &str, stream: bool) -> Value {
        let body = RequestBody::parse(Bytes::copy_from_slice(body.as_bytes())).unwrap();
        serde_json::from_slice(&passthrough(&body, "claude-x", 1024, stream).to_bytes()).unwrap()
    }

    #[test]
    fn the_passthrough_rewrites_the_model_and_fills_in_max_tokens() {
        let sent = passed(
            r#"{"model": "smart", "messages": [], "x_future_field": {"a": 1}}"#,
            false,
        );
        assert_eq!(
            sent,
            json!({"model": "claude-x", "messages": [], "x_future_field": {"a": 1}, "max_tokens": 1024})
        );
        let sent = passed(r#"{"model":"smart","max_tokens":5,"messages":[]}"#, true);
        assert_eq!(sent["max_tokens"], 5);
        assert_eq!(sent["stream"], true);
        // A name given twice: the body is rebuilt, and the model is the step's either way.
        let sent = passed(r#"{"model":"a","messages":[],"model":"smart"}"#, false);
        assert_eq!(
            sent,
            json!({"model": "claude-x", "messages": [], "max_tokens": 1024})
        );
    }

    #[test]
    fn the_passthrough_sends_the_clients_own_bytes() {
        let text = "{\"model\" : \"smart\",\n \"messages\":[{\"role\":\"user\",\"content\":\"caf\u{e9} \\u00e9\"}],\"max_tokens\":9}";
        let body = RequestBody::parse(Bytes::copy_from_slice(text.as_bytes())).unwrap();
        let sent = passthrough(&body, "claude-x", 1024, false).to_bytes();
        assert_eq!(sent, text.replace("\"smart\"", "\"claude-x\""));
    }

    #[test]
    fn requests_go_to_v1_messages_with_x_api_key_and_version() {
        let config = crate::config::Config::parse(
            "[[providers]]\nname = \"c\"\nkind = \"anthropic\"\nanthropic_version = \"2023-06-01\"\n",
        )
        .unwrap();
        let key = crate::keys::KeyLease {
            id: "k".into(),
            secret: crate::keys::Secret::new("sk-ant-secret"),
            aws: None,
        };
        let target = Target {
            provider: &config.providers[0],
            key: Some(&key),
            model: "claude-sonnet-4-5",
        };
        let request = ClientRequest {
            format: ClientFormat::OpenAi,
            operation: Operation::Chat,
            body: serde_json::from_str(r#"{"model":"smart","messages":[]}"#).unwrap(),
            anthropic_beta: None,
            forwarded: Vec::new(),
        };
        let built = AnthropicAdapter.request(&target, &request, true).unwrap();
        assert_eq!(built.uri, "https://api.anthropic.com/v1/messages");
        assert_eq!(built.headers["x-api-key"], "sk-ant-secret");
        assert_eq!(built.headers["anthropic-version"], "2023-06-01");
        assert_eq!(built.headers["accept"], "text/event-stream");
        assert!(built.headers.get("authorization").is_none());
    }

    /// What the passthrough probe read before it read fields: the whole message as a tree.
    fn probe_message_by_tree(body: &[u8]) -> Option<Option<Usage>> {
        let message: Value = serde_json::from_slice(body).ok()?;
        if message.get("type").and_then(Value::as_str) != Some("message")
            || !message.get("content").is_some_and(Value::is_array)
        {
            return None;
        }
        Some(message.get("usage").map(usage))
    }

    #[test]
    fn the_message_probe_says_what_the_tree_says() {
        let counts = |prompt_tokens, completion_tokens| {
            Some(Some(Usage {
                prompt_tokens,
                completion_tokens,
            }))
        };
        let cases: &[(&str, Option<Option<Usage>>)] = &[
            (
                r#"{"type":"message","content":[{"type":"text","text":"hi"}],"usage":{"input_tokens":3,"output_tokens":4}}"#,
                counts(3, 4),
            ),
            (r#"{"content" : [ ], "type" : "mess\u0061ge"}"#, Some(None)),
            (
                r#"{"type":"message","content":[],"usage":null}"#,
                counts(0, 0),
            ),
            (
                r#"{"type":"message","content":[],"usage":"x"}"#,
                counts(0, 0),
            ),
            // The last of a repeated name counts, as in a tree.
            (
                r#"{"type":"error","content":[],"type":"message"}"#,
                Some(None),
            ),
            (r#"{"type":"message","content":[],"type":"error"}"#, None),
            (r#"{"type":"message","content":"text"}"#, None),
            (r#"{"type":"message"}"#, None),
            (r#"{"type":1,"content":[]}"#, None),
            (r#"{"type":"message","content":["\ud800"]}"#, None),
            (r#"{"type":"message","content":[]"#, None),
            (r#"[{"type":"message","content":[]}]"#, None),
            ("", None),
        ];
        for (body, expected) in cases {
            let body = Bytes::copy_from_slice(body.as_bytes());
            assert_eq!(&probe_message(&body), expected, "{body:?}");
            assert_eq!(&probe_message_by_tree(&body), expected, "tree: {body:?}");
        }
        // Where they part: a number past `f64`, which JSON allows and a tree refuses.
        let far = Bytes::from_static(br#"{"type":"message","content":[],"n":1e400}"#);
        assert_eq!(probe_message(&far), Some(None));
        assert_eq!(probe_message_by_tree(&far), None);
    }

    #[test]
    fn a_passed_through_message_is_the_answer_s_own_bytes() {
        let answer = Bytes::from_static(
            br#"{"type":"message","content":[],"usage":{"input_tokens":2,"cache_read_input_tokens":1}}"#,
        );
        let request = ClientRequest::new(ClientFormat::Anthropic, Operation::Chat, Map::new());
        let decoded = AnthropicAdapter.decode(&request, &answer).unwrap();
        assert_eq!(decoded.body.as_ptr(), answer.as_ptr(), "not copied");
        assert_eq!(decoded.usage.map(|u| u.prompt_tokens), Some(3));
    }

    #[test]
    fn cached_tokens_count_as_prompt_tokens() {
        let reported =
            json!({"input_tokens": 10, "cache_read_input_tokens": 5, "output_tokens": 7});
        assert_eq!(
            usage(&reported),
            Usage {
                prompt_tokens: 15,
                completion_tokens: 7
            }
        );
    }
}
