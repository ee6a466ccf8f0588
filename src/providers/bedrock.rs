//! AWS Bedrock's Converse API: one request shape for every model family on Bedrock.
//!
//! Chat goes to `{base_url}/model/{modelId}/converse`, streams to `.../converse-stream`,
//! whose answer is framed as `application/vnd.amazon.eventstream` (`frames` reads it as
//! events); embeddings to `.../invoke` in the model's own body (`embed`: Titan, Cohere). `base_url` is `https://bedrock-runtime.{region}.amazonaws.com` unless set. The
//! model id, or an inference profile's id or ARN, is one percent-encoded path segment.
//!
//! Requests are signed with SigV4 (`sign`) with the provider's AWS credentials
//! (`credentials`), which the attempt holds as its key lease; a stored key instead is a
//! Bedrock API key, sent as a bearer token. `encode` writes an OpenAI request as Converse's
//! (an Anthropic client's request is read as OpenAI's first), `decode` reads answers and
//! stream events as OpenAI's.

pub mod credentials;
pub mod decode;
pub mod embed;
pub mod encode;
pub mod frames;
pub mod sign;

use std::time::SystemTime;

use bytes::Bytes;
use http::StatusCode;
use http::header::{ACCEPT, HeaderValue};
use serde_json::Value;

use super::inbound_messages;
use super::stream::StreamTranslator;
use super::{
    Adapter, ClientFormat, ClientRequest, Decoded, Operation, Rejection, Target, UpstreamRequest,
};
use decode::BedrockSource;

/// What ConverseStream answers in.
pub const EVENTSTREAM: &str = "application/vnd.amazon.eventstream";

/// AWS Bedrock.
pub struct BedrockAdapter;

impl Adapter for BedrockAdapter {
    fn request(
        &self,
        target: &Target<'_>,
        request: &ClientRequest,
        stream: bool,
    ) -> Result<UpstreamRequest, Rejection> {
        let body = match request.operation {
            // A Responses request arrives here already translated to chat (`responses`).
            Operation::Chat | Operation::Responses => {
                let translated;
                let openai = match request.format {
                    ClientFormat::OpenAi => &request.body,
                    ClientFormat::Anthropic => {
                        translated = inbound_messages::request::to_openai(&request.body)?;
                        &translated
                    }
                };
                encode::from_openai(openai)?
            }
            Operation::Embeddings => {
                let body = embed::request(&request.body, target.model)?;
                let url = format!(
                    "{}/model/{}/invoke",
                    target.provider.base_url,
                    super::path_segment(target.model)
                );
                let built = UpstreamRequest::post(url, super::to_bytes(&body), false);
                return authorize(built, target);
            }
            Operation::CountTokens | Operation::Completions => {
                return Err(super::only_for(request.operation));
            }
        };
        let method = if stream {
            "converse-stream"
        } else {
            "converse"
        };
        let url = format!(
            "{}/model/{}/{method}",
            target.provider.base_url,
            super::path_segment(target.model)
        );
        let mut built = UpstreamRequest::post(url, super::to_bytes(&body), false);
        if stream {
            built
                .headers
                .insert(ACCEPT, HeaderValue::from_static(EVENTSTREAM));
        }
        authorize(built, target)
    }

    fn decode(&self, request: &ClientRequest, body: &Bytes) -> Option<Decoded> {
        let response: Value = serde_json::from_slice(body).ok()?;
        if request.operation == Operation::Embeddings {
            let answer = embed::to_openai(&response, &request.body)?;
            let usage = super::stream::chunk_usage(&answer);
            return Some(Decoded {
                body: super::to_bytes(&answer),
                usage,
            });
        }
        super::chat_answer(
            request,
            &decode::to_openai(&response, &client_model(request))?,
        )
    }

    fn error_body(
        &self,
        request: &ClientRequest,
        status: StatusCode,
        body: &[u8],
    ) -> Option<Bytes> {
        // Bedrock's errors are `{"message": ...}`, their type in a header; some also carry it
        // as `__type`.
        let error: Value = serde_json::from_slice(body).unwrap_or(Value::Null);
        let text = |field: &str| error.get(field).and_then(Value::as_str);
        let message = text("message")
            .or_else(|| text("Message"))
            .map_or_else(|| format!("the provider answered {status}"), str::to_owned);
        let code = text("__type")
            .map(|t| t.rsplit('#').next().unwrap_or(t))
            .unwrap_or("upstream_error");
        Some(super::error_body(
            request.format,
            status,
            &message,
            code,
            None,
        ))
    }

    fn stream(&self, request: &ClientRequest) -> Box<dyn StreamTranslator> {
        super::chat_stream(BedrockSource::new(&client_model(request)), request)
    }
}

/// Signs with the attempt's AWS credentials, or sends its Bedrock API key as a bearer token.
fn authorize(built: UpstreamRequest, target: &Target<'_>) -> Result<UpstreamRequest, Rejection> {
    let Some(key) = target.key else {
        return Ok(built);
    };
    let (Some(credentials), Some(settings)) = (&key.aws, &target.provider.bedrock) else {
        return Ok(built.bearer(key.secret.expose()));
    };
    let mut built = built;
    sign::sign_request(&mut built, credentials, &settings.region, SystemTime::now())
        .map_err(|e| Rejection::new("model", e.to_string()))?;
    Ok(built)
}

/// The model the client asked for: Converse's answers do not name one.
fn client_model(request: &ClientRequest) -> String {
    request.body.field_as::<String>("model").unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::config::Config;
    use crate::keys::{KeyLease, Secret};

    fn built(stream: bool, key: Option<KeyLease>) -> UpstreamRequest {
        let config = Config::parse(
            "[[providers]]\nname = \"b\"\nkind = \"bedrock\"\nregion = \"eu-west-3\"\n",
        )
        .unwrap();
        let target = Target {
            provider: &config.providers[0],
            key: key.as_ref(),
            model: "us.anthropic.claude-3-5-haiku-20241022-v1:0",
        };
        let request = ClientRequest::new(
            ClientFormat::OpenAi,
            Operation::Chat,
            serde_json::from_str::<serde_json::Map<String, Value>>(
                r#"{"model":"smart","messages":[{"role":"user","content":"hi"}]}"#,
            )
            .unwrap(),
        );
        BedrockAdapter.request(&target, &request, stream).unwrap()
    }

    #[test]
    fn converse_urls_signed_with_the_leased_credentials() {
        let credentials = aws_credential_types::Credentials::new(
            "AKIDEXAMPLE",
            "wJalrXUtnFEMI",
            Some("session-token".into()),
            None,
            "test",
        );
        let lease = KeyLease {
            id: "b:aws-credentials".into(),
            secret: Secret::new("wJalrXUtnFEMI"),
            aws: Some(Arc::new(credentials)),
        };
        let whole = built(false, Some(lease.clone()));
        assert_eq!(
            whole.uri,
            "https://bedrock-runtime.eu-west-3.amazonaws.com/model/us.anthropic.claude-3-5-haiku-20241022-v1%3A0/converse"
        );
        let authorization = whole.headers["authorization"].to_str().unwrap();
        assert!(
            authorization.contains("Credential=AKIDEXAMPLE/")
                && authorization.contains("/eu-west-3/bedrock/aws4_request"),
            "{authorization}"
        );
        assert_eq!(whole.headers["x-amz-security-token"], "session-token");
        let shown = format!("{:?}", whole.headers);
        assert!(
            !shown.contains("session-token") && !shown.contains("Signature="),
            "{shown}"
        );
        let streamed = built(true, Some(lease));
        assert!(streamed.uri.ends_with("/converse-stream"));
        assert_eq!(streamed.headers["accept"], EVENTSTREAM);
    }

    #[test]
    fn a_stored_key_is_a_bedrock_api_key() {
        let lease = KeyLease {
            id: "k".into(),
            secret: Secret::new("bedrock-api-key"),
            aws: None,
        };
        let whole = built(false, Some(lease));
        assert_eq!(whole.headers["authorization"], "Bearer bedrock-api-key");
    }
}
