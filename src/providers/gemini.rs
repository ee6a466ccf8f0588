//! Google's Gemini API: generateContent, streamGenerateContent and embedContent.
//!
//! `base_url` is the API host (`https://generativelanguage.googleapis.com`). Chat goes to
//! `{base_url}/v1beta/models/{model}:generateContent`, streams to
//! `...:streamGenerateContent?alt=sse`, embeddings to `...:embedContent` (one input) or
//! `...:batchEmbedContents` (several), with the `x-goog-api-key` header.
//!
//! Gemini's format never matches a client's, so every request is translated: `encode` writes
//! an OpenAI request as Gemini's (an Anthropic client's request is first read as OpenAI's),
//! `decode` reads answers and stream events as OpenAI's, and `embed` does embeddings.

pub mod decode;
pub mod embed;
pub mod encode;

use bytes::Bytes;
use http::StatusCode;
use http::header::HeaderName;

use super::inbound_messages;
use super::stream::StreamTranslator;
use super::{
    Adapter, ClientFormat, ClientRequest, Decoded, Operation, Rejection, Target, UpstreamRequest,
    translate_error,
};

/// Google Gemini.
pub struct GeminiAdapter;

const X_GOOG_API_KEY: HeaderName = HeaderName::from_static("x-goog-api-key");

impl Adapter for GeminiAdapter {
    fn request(
        &self,
        target: &Target<'_>,
        request: &ClientRequest,
        stream: bool,
    ) -> Result<UpstreamRequest, Rejection> {
        let model = target.model.strip_prefix("models/").unwrap_or(target.model);
        let (method, body) = match request.operation {
            Operation::CountTokens | Operation::Completions => {
                return Err(super::only_for(request.operation));
            }
            Operation::Embeddings => embed::request(&request.body, model)?,
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
                let method = if stream {
                    "streamGenerateContent?alt=sse"
                } else {
                    "generateContent"
                };
                (method, encode::from_openai(openai)?)
            }
        };
        let url = format!(
            "{}/v1beta/models/{}:{method}",
            target.provider.base_url,
            super::path_segment(model)
        );
        let mut built = UpstreamRequest::post(url, super::to_bytes(&body), stream);
        if let Some(key) = target.key {
            built = built.secret_header(X_GOOG_API_KEY, key.secret.expose());
        }
        Ok(built)
    }

    fn decode(&self, request: &ClientRequest, body: &Bytes) -> Option<Decoded> {
        let response: serde_json::Value = serde_json::from_slice(body).ok()?;
        if request.operation == Operation::Embeddings {
            let answer = embed::to_openai(&response, &request.body)?;
            return Some(Decoded {
                body: super::to_bytes(&answer),
                usage: None,
            });
        }
        super::chat_answer(request, &decode::to_openai(&response)?)
    }

    fn error_body(
        &self,
        request: &ClientRequest,
        status: StatusCode,
        body: &[u8],
    ) -> Option<Bytes> {
        Some(translate_error(request.format, status, body))
    }

    fn stream(&self, request: &ClientRequest) -> Box<dyn StreamTranslator> {
        super::chat_stream(decode::GeminiSource::default(), request)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;
    use crate::keys::{KeyLease, Secret};

    fn built(stream: bool, operation: Operation, body: &str) -> UpstreamRequest {
        let config = Config::parse("[[providers]]\nname = \"g\"\nkind = \"gemini\"\n").unwrap();
        let key = KeyLease {
            id: "k".into(),
            secret: Secret::new("goog-secret"),
            aws: None,
        };
        let target = Target {
            provider: &config.providers[0],
            key: Some(&key),
            model: "models/gemini-2.5-flash",
        };
        let request = ClientRequest {
            format: ClientFormat::OpenAi,
            operation,
            body: serde_json::from_str(body).unwrap(),
            anthropic_beta: None,
            forwarded: Vec::new(),
        };
        GeminiAdapter.request(&target, &request, stream).unwrap()
    }

    #[test]
    fn builds_generate_stream_and_embed_urls_with_the_goog_key() {
        let chat = r#"{"model":"smart","messages":[{"role":"user","content":"hi"}]}"#;
        let whole = built(false, Operation::Chat, chat);
        assert_eq!(
            whole.uri,
            "https://generativelanguage.googleapis.com/v1beta/models/gemini-2.5-flash:generateContent"
        );
        assert_eq!(whole.headers["x-goog-api-key"], "goog-secret");
        assert!(whole.headers.get("authorization").is_none());
        let streamed = built(true, Operation::Chat, chat);
        assert_eq!(
            streamed.uri,
            "https://generativelanguage.googleapis.com/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse"
        );
        let embed = built(
            false,
            Operation::Embeddings,
            r#"{"model":"e","input":["a","b"]}"#,
        );
        assert!(embed.uri.ends_with(":batchEmbedContents"));
    }
}
