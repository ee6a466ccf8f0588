//! The OpenAI chat-completion chunk: the stream format every translation reads or writes,
//! whichever provider answers and whichever format the client speaks.
//!
//! It lives apart from the OpenAI adapter because the Anthropic, Gemini and Responses
//! translations all build on it, and the adapter builds on them.

mod scan;
pub mod stream;

use bytes::Bytes;
use serde::Deserialize;
use serde::de::IgnoredAny;

use super::Usage;

/// What one streamed chunk says, as far as the gateway cares.
#[derive(Debug, PartialEq, Eq)]
pub enum ChunkKind {
    /// Content (or role): forward it.
    Content,
    /// A chunk whose choice carries a finish reason: the answer is whole from here on, even
    /// if the server then closes without `[DONE]`, as several compatible servers do.
    Finish,
    /// The final usage-only chunk (`choices: []`).
    UsageOnly(Usage),
    /// The terminal `[DONE]` marker.
    Done,
    /// An error the upstream reported inside the stream.
    Error,
}

#[derive(Deserialize)]
struct ChunkProbe {
    choices: Option<Vec<ChoiceProbe>>,
    usage: Option<Usage>,
    error: Option<IgnoredAny>,
}

#[derive(Deserialize)]
struct ChoiceProbe {
    #[serde(default)]
    finish_reason: Option<IgnoredAny>,
}

/// Reads one streamed event's data; `None` when it is not a valid chunk.
pub fn probe_chunk(data: &[u8]) -> Option<(ChunkKind, Option<Usage>)> {
    // Content chunks, nearly all of a stream, are told apart in one pass; the rest (usage,
    // errors, `[DONE]`, anything odd) are parsed in full.
    match scan::scan_chunk(data) {
        Some(scan::Scanned::Content) => Some((ChunkKind::Content, None)),
        Some(scan::Scanned::Finish) => Some((ChunkKind::Finish, None)),
        None => probe_chunk_in_full(data),
    }
}

/// [`probe_chunk`] by a full parse.
fn probe_chunk_in_full(data: &[u8]) -> Option<(ChunkKind, Option<Usage>)> {
    if std::str::from_utf8(data).map(str::trim) == Ok("[DONE]") {
        return Some((ChunkKind::Done, None));
    }
    let chunk: ChunkProbe = serde_json::from_slice(data).ok()?;
    if chunk.error.is_some() {
        return Some((ChunkKind::Error, None));
    }
    match (chunk.choices, chunk.usage) {
        (Some(choices), Some(usage)) if choices.is_empty() => {
            Some((ChunkKind::UsageOnly(usage), Some(usage)))
        }
        (Some(choices), usage) if choices.iter().any(|c| c.finish_reason.is_some()) => {
            Some((ChunkKind::Finish, usage))
        }
        (Some(_), usage) => Some((ChunkKind::Content, usage)),
        (None, _) => None,
    }
}

/// The error event a client of the OpenAI format understands (the SDK raises `APIError`).
pub fn stream_error_event(message: &str, code: &str) -> Bytes {
    let event = serde_json::json!({
        "error": {"message": message, "type": "upstream_error", "param": null, "code": code}
    });
    Bytes::from(format!("data: {event}\n\n"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn probes_chunks() {
        let usage = Usage {
            prompt_tokens: 3,
            completion_tokens: 5,
        };
        assert_eq!(probe_chunk(b"[DONE]"), Some((ChunkKind::Done, None)));
        assert_eq!(
            probe_chunk(br#"{"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":5}}"#),
            Some((ChunkKind::UsageOnly(usage), Some(usage)))
        );
        assert_eq!(
            probe_chunk(br#"{"choices":[{"delta":{"content":"hi"}}],"usage":null}"#),
            Some((ChunkKind::Content, None))
        );
        assert_eq!(
            probe_chunk(br#"{"error":{"message":"x"}}"#),
            Some((ChunkKind::Error, None))
        );
        assert_eq!(probe_chunk(b"{not json"), None);
        assert_eq!(
            probe_chunk(br#"{"choices":[{"delta":{},"finish_reason":"stop"}]}"#),
            Some((ChunkKind::Finish, None))
        );
        assert_eq!(
            probe_chunk(br#"{"choices":[{"delta":{"content":"hi"},"finish_reason":null}]}"#),
            Some((ChunkKind::Content, None))
        );
    }
}
