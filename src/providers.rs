//! Provider adapters: how a request is encoded for a provider's wire format and sent.
//!
//! Each kind has its module; `sse` parses the event streams they answer with.

pub mod openai;
pub mod sse;

use bytes::Bytes;

use crate::config::{Provider, ProviderKind};
use crate::keys::KeyLease;

/// Builds the upstream chat request for a provider, ready to send.
pub fn chat_request(
    client: &reqwest::Client,
    provider: &Provider,
    key: Option<&KeyLease>,
    body: Bytes,
    stream: bool,
) -> reqwest::RequestBuilder {
    match provider.kind {
        ProviderKind::OpenAi => openai::chat_request(client, provider, key, body, stream),
    }
}

/// The token counts an answer reported.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Deserialize)]
pub struct Usage {
    #[serde(default)]
    pub prompt_tokens: u64,
    #[serde(default)]
    pub completion_tokens: u64,
}
