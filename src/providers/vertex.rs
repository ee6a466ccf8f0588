//! Google Cloud's Vertex AI: Gemini models and Anthropic's, each in its own family's format,
//! at `{base_url}/v1/projects/{project}/locations/{location}/publishers/{publisher}/models/`.
//!
//! - A Gemini model (`gemini-2.5-flash`) goes to `{model}:generateContent`, or
//!   `:streamGenerateContent?alt=sse`, in Gemini's format: the Gemini adapter's request,
//!   answers and events, at Vertex's URL.
//! - A Claude model (`claude-sonnet-4@20250514`) goes to `{model}:rawPredict`, or
//!   `:streamRawPredict`, in Anthropic's format with `anthropic_version = "vertex-2023-10-16"`
//!   in the body in place of the `model` field: the Anthropic adapter's request, answers and
//!   events.
//!
//! Every request carries `authorization: Bearer {access token}`; the token is the attempt's
//! key lease (`auth`), so it is scrubbed from whatever comes back, as a key is.

pub mod auth;

use bytes::Bytes;
use http::StatusCode;
use http::header::HeaderName;
use serde_json::{Map, Value};

use super::anthropic::AnthropicAdapter;
use super::gemini::GeminiAdapter;
use super::stream::StreamTranslator;
use super::{Adapter, ClientRequest, Decoded, Operation, Rejection, Target, UpstreamRequest};

/// What Vertex's Anthropic models take in the body, in place of the `anthropic-version` header.
pub const ANTHROPIC_VERSION: &str = "vertex-2023-10-16";

/// A model family at Vertex: its own adapter, the methods Vertex names for it (whole,
/// streamed), and what its request changes there.
pub struct OnVertex {
    family: &'static dyn Adapter,
    methods: (&'static str, &'static str),
    rewrite: fn(&mut UpstreamRequest) -> Result<(), Rejection>,
}

static GEMINI: OnVertex = OnVertex {
    family: &GeminiAdapter,
    methods: ("generateContent", "streamGenerateContent?alt=sse"),
    // Gemini's body as it is.
    rewrite: |_| Ok(()),
};

static ANTHROPIC: OnVertex = OnVertex {
    family: &AnthropicAdapter,
    methods: ("rawPredict", "streamRawPredict"),
    rewrite: anthropic_on_vertex,
};

/// The adapter for a Vertex model: Anthropic's for Claude models, Gemini's for the rest.
pub fn adapter_for(model: &str) -> &'static dyn Adapter {
    match publisher(model) {
        "anthropic" => &ANTHROPIC,
        _ => &GEMINI,
    }
}

/// The publisher of a model name, as Vertex's path names it.
pub fn publisher(model: &str) -> &'static str {
    if model.starts_with("claude") {
        "anthropic"
    } else {
        "google"
    }
}

/// `{base_url}/v1/projects/{project}/locations/{location}/publishers/{publisher}/models/
/// {model}:{method}`.
fn url(target: &Target<'_>, method: &str) -> Result<String, Rejection> {
    let Some(vertex) = target.provider.vertex.as_deref() else {
        return Err(Rejection::new(
            "model",
            "this provider has no Vertex project and location",
        ));
    };
    Ok(format!(
        "{}/v1/projects/{}/locations/{}/publishers/{}/models/{}:{method}",
        target.provider.base_url,
        vertex.project,
        vertex.location,
        publisher(target.model),
        // `@` names a model's version (`claude-sonnet-4@20250514`) and is a path character.
        super::path_segment(target.model).replace("%40", "@"),
    ))
}

/// `target` with no key: the family's adapter must not add its own key header.
fn keyless<'a>(target: &Target<'a>) -> Target<'a> {
    Target {
        provider: target.provider,
        key: None,
        model: target.model,
    }
}

fn with_token(built: UpstreamRequest, target: &Target<'_>) -> UpstreamRequest {
    match target.key {
        Some(token) => built.bearer(token.secret.expose()),
        None => built,
    }
}

fn refused(operation: Operation) -> Result<UpstreamRequest, Rejection> {
    let message = match operation {
        Operation::Embeddings => {
            "Vertex steps serve chat only: route embeddings to an openai, azure or gemini provider"
        }
        _ => return Err(super::only_for(operation)),
    };
    Err(Rejection::new("model", message))
}

/// Anthropic's Messages body as Vertex takes it: the model named by the path, not the body,
/// and the API version in the body, not a header.
fn anthropic_on_vertex(built: &mut UpstreamRequest) -> Result<(), Rejection> {
    let mut body: Map<String, Value> = serde_json::from_slice(&built.body.to_bytes())
        .map_err(|_| Rejection::new("messages", "the request could not be re-encoded"))?;
    body.remove("model");
    body.insert("anthropic_version".into(), ANTHROPIC_VERSION.into());
    built.body = super::to_bytes(&body).into();
    built
        .headers
        .remove(HeaderName::from_static("anthropic-version"));
    Ok(())
}

impl Adapter for OnVertex {
    fn request(
        &self,
        target: &Target<'_>,
        request: &ClientRequest,
        stream: bool,
    ) -> Result<UpstreamRequest, Rejection> {
        if !matches!(request.operation, Operation::Chat | Operation::Responses) {
            return refused(request.operation);
        }
        let mut built = self.family.request(&keyless(target), request, stream)?;
        (self.rewrite)(&mut built)?;
        let method = if stream {
            self.methods.1
        } else {
            self.methods.0
        };
        built.uri = url(target, method)?;
        Ok(with_token(built, target))
    }

    fn decode(&self, request: &ClientRequest, body: &Bytes) -> Option<Decoded> {
        self.family.decode(request, body)
    }

    fn error_body(
        &self,
        request: &ClientRequest,
        status: StatusCode,
        body: &[u8],
    ) -> Option<Bytes> {
        self.family.error_body(request, status, body)
    }

    fn stream(&self, request: &ClientRequest) -> Box<dyn StreamTranslator> {
        self.family.stream(request)
    }
}
