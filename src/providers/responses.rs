//! The Responses API (`POST /v1/responses`) at each step: passed through to a provider that
//! speaks it (`responses = true`), translated to chat completions for every other step.
//!
//! A translated step goes through the step kind's own chat adapter, so every chat
//! translation (Anthropic, Gemini, Azure) serves the Responses API too; this module only
//! turns the Responses request into a chat request, and the chat answer (whole or streamed)
//! into a Response object and the Responses stream events.

pub mod object;
pub mod passthrough;
pub mod request;
pub mod sink;
pub mod spec;

use bytes::Bytes;
use http::StatusCode;
use serde_json::{Map, Value};

use super::anthropic::events::AnthropicSource;
use super::chat_chunks::stream::OpenAiSource;
use super::gemini::decode::GeminiSource;
use super::stream::{ChunkSource, StreamState, StreamTranslator, Translating};
use super::{
    Adapter, ClientFormat, ClientRequest, Decoded, Operation, Rejection, Target, UpstreamRequest,
};
use crate::config::{Provider, ProviderKind};
use crate::providers::sse::SseEvent;
use request::Effort;

/// The adapter for a Responses request at `provider`'s `model`.
pub fn adapter_for(provider: &Provider, model: &str) -> &'static dyn Adapter {
    if provider.responses {
        return &PassthroughAdapter;
    }
    match provider.kind {
        ProviderKind::OpenAi => &OVER_OPENAI,
        ProviderKind::Anthropic => &OVER_ANTHROPIC,
        ProviderKind::Gemini => &OVER_GEMINI,
        ProviderKind::Azure => &OVER_AZURE,
        ProviderKind::Vertex => match super::vertex::publisher(model) {
            "anthropic" => &OVER_VERTEX_ANTHROPIC,
            _ => &OVER_VERTEX_GEMINI,
        },
        ProviderKind::Bedrock => &OVER_BEDROCK,
    }
}

/// A provider that speaks the Responses API: the body with only `model` rewritten.
pub struct PassthroughAdapter;

impl Adapter for PassthroughAdapter {
    fn request(
        &self,
        target: &Target<'_>,
        request: &ClientRequest,
        stream: bool,
    ) -> Result<UpstreamRequest, Rejection> {
        let mut body = request.body.tree().clone();
        body.insert("model".into(), Value::String(target.model.to_owned()));
        // The gateway rebuilt the whole input from its own store: the provider needs no
        // state of its own, and may never have seen the earlier turn.
        body.remove("previous_response_id");
        let url = super::endpoint_url(&target.provider.base_url, "responses");
        let mut built = UpstreamRequest::post(url, super::to_bytes(&body), stream);
        if let Some(key) = target.key {
            built = built.bearer(key.secret.expose());
        }
        Ok(built)
    }

    fn decode(&self, request: &ClientRequest, body: &Bytes) -> Option<Decoded> {
        passthrough::whole(body, request.body.tree()).map(|(body, usage)| Decoded { body, usage })
    }

    fn error_body(&self, _: &ClientRequest, _: StatusCode, _: &[u8]) -> Option<Bytes> {
        None
    }

    fn stream(&self, request: &ClientRequest) -> Box<dyn StreamTranslator> {
        Box::new(passthrough::Passthrough::new(request.body.raw().clone()))
    }
}

/// A step that does not speak the Responses API: its kind's chat adapter, translated.
/// `family` is the wire format that adapter speaks (a Vertex step speaks Gemini's or
/// Anthropic's).
pub struct OverChat {
    kind: ProviderKind,
    family: ProviderKind,
}

static OVER_OPENAI: OverChat = OverChat::of(ProviderKind::OpenAi, ProviderKind::OpenAi);
static OVER_ANTHROPIC: OverChat = OverChat::of(ProviderKind::Anthropic, ProviderKind::Anthropic);
static OVER_GEMINI: OverChat = OverChat::of(ProviderKind::Gemini, ProviderKind::Gemini);
static OVER_AZURE: OverChat = OverChat::of(ProviderKind::Azure, ProviderKind::Azure);
static OVER_VERTEX_GEMINI: OverChat = OverChat::of(ProviderKind::Vertex, ProviderKind::Gemini);
static OVER_VERTEX_ANTHROPIC: OverChat =
    OverChat::of(ProviderKind::Vertex, ProviderKind::Anthropic);
static OVER_BEDROCK: OverChat = OverChat::of(ProviderKind::Bedrock, ProviderKind::Bedrock);

impl OverChat {
    const fn of(kind: ProviderKind, family: ProviderKind) -> OverChat {
        OverChat { kind, family }
    }

    /// The kind's chat adapter for this family (a Vertex step's depends on its model's
    /// publisher, which a model name of the family picks).
    fn chat_adapter(&self) -> &'static dyn Adapter {
        let model = match self.family {
            ProviderKind::Anthropic => "claude",
            _ => "",
        };
        super::adapter(self.kind, model)
    }
}

impl OverChat {
    fn effort(&self) -> Effort {
        match self.family {
            ProviderKind::OpenAi | ProviderKind::Azure => Effort::Carried,
            // Their chat translations have no counterpart for `reasoning_effort`.
            ProviderKind::Anthropic
            | ProviderKind::Gemini
            | ProviderKind::Vertex
            | ProviderKind::Bedrock => Effort::Refused,
        }
    }

    fn chat(&self, request: &ClientRequest) -> Result<ClientRequest, Rejection> {
        Ok(ClientRequest::new(
            ClientFormat::OpenAi,
            Operation::Chat,
            request::to_chat(&request.body, self.effort())?,
        ))
    }

    /// The chat request for decoding: a request that cannot translate never got sent.
    fn chat_or_empty(&self, request: &ClientRequest) -> ClientRequest {
        self.chat(request).unwrap_or(ClientRequest::new(
            ClientFormat::OpenAi,
            Operation::Chat,
            Map::new(),
        ))
    }

    fn source(&self) -> Box<dyn ChunkSource> {
        match self.family {
            ProviderKind::OpenAi | ProviderKind::Azure => Box::new(OpenAiSource::default()),
            ProviderKind::Anthropic => Box::new(AnthropicSource::default()),
            ProviderKind::Gemini | ProviderKind::Vertex => Box::new(GeminiSource::default()),
            ProviderKind::Bedrock => Box::new(super::bedrock::decode::BedrockSource::new("")),
        }
    }
}

impl Adapter for OverChat {
    fn request(
        &self,
        target: &Target<'_>,
        request: &ClientRequest,
        stream: bool,
    ) -> Result<UpstreamRequest, Rejection> {
        let chat = self.chat(request)?;
        self.chat_adapter()
            .request(target, &chat, stream)
            .map_err(|rejection| Rejection {
                message: rejection.message,
                param: rejection.param.as_deref().map(request::responses_param),
            })
    }

    fn decode(&self, request: &ClientRequest, body: &Bytes) -> Option<Decoded> {
        let chat = self.chat_or_empty(request);
        let decoded = self.chat_adapter().decode(&chat, body)?;
        let completion: Value = serde_json::from_slice(&decoded.body).ok()?;
        let response = object::from_chat(&object::Echo::of(&request.body), &completion)?;
        Some(Decoded {
            body: super::to_bytes(&response),
            usage: decoded.usage,
        })
    }

    fn error_body(
        &self,
        request: &ClientRequest,
        status: StatusCode,
        body: &[u8],
    ) -> Option<Bytes> {
        self.chat_adapter()
            .error_body(&self.chat_or_empty(request), status, body)
    }

    fn stream(&self, request: &ClientRequest) -> Box<dyn StreamTranslator> {
        Box::new(Translating::new(
            BoxedSource(self.source()),
            sink::ResponsesSink::new(object::Echo::of(&request.body)),
        ))
    }
}

/// A chunk source chosen at run time.
struct BoxedSource(Box<dyn ChunkSource>);

impl ChunkSource for BoxedSource {
    fn event(&mut self, event: &SseEvent, chunks: &mut Vec<Value>) -> StreamState {
        self.0.event(event, chunks)
    }

    fn end(&mut self, chunks: &mut Vec<Value>) -> StreamState {
        self.0.end(chunks)
    }
}
