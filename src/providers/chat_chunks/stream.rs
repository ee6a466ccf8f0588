//! OpenAI chunk streams: forwarded as they are, read as chunks, or written from chunks.

use bytes::Bytes;
use serde_json::Value;

use super::{ChunkKind, probe_chunk, stream_error_event};
use crate::providers::sse::SseEvent;
use crate::providers::stream::{
    ChunkSink, ChunkSource, StreamState, StreamTranslator, Translated, data_event,
};

/// An OpenAI stream to an OpenAI client: every event's raw bytes, as they came.
pub struct Passthrough {
    /// The gateway asked for the usage chunk, not the client: read it, do not forward it.
    strip_usage: bool,
    /// A finish reason came: a clean close from here on ends a whole answer.
    finished: bool,
}

impl Passthrough {
    /// A passthrough that drops the usage chunk when `strip_usage`.
    pub fn new(strip_usage: bool) -> Passthrough {
        Passthrough {
            strip_usage,
            finished: false,
        }
    }
}

impl StreamTranslator for Passthrough {
    fn event(&mut self, event: &SseEvent) -> Translated {
        let forward = |state, usage| Translated {
            frames: vec![event.raw.clone()],
            usage,
            state,
        };
        match probe_chunk(event.data_bytes()) {
            None => forward(StreamState::Malformed, None),
            Some((ChunkKind::Done, _)) => forward(StreamState::Done, None),
            Some((ChunkKind::Error, _)) => {
                // Already in the client's format: forward it as the stream's last event.
                let (kind, message) = crate::providers::read_error(event.data_bytes());
                forward(
                    StreamState::UpstreamError {
                        overloaded: kind.as_deref() == Some("overloaded_error"),
                        message: message.unwrap_or_default(),
                    },
                    None,
                )
            }
            Some((ChunkKind::UsageOnly(usage), _)) if self.strip_usage => Translated {
                frames: Vec::new(),
                usage: Some(usage),
                state: StreamState::Open,
            },
            Some((kind, usage)) => {
                self.finished |= kind == ChunkKind::Finish;
                forward(StreamState::Open, usage)
            }
        }
    }

    fn end(&mut self) -> Translated {
        if !self.finished {
            return truncated();
        }
        // The answer was whole; the server only left out its `[DONE]`, so the client gets it.
        Translated {
            frames: vec![done_event()],
            usage: None,
            state: StreamState::Done,
        }
    }

    fn error_event(&self, message: &str, code: &str) -> Bytes {
        stream_error_event(message, code)
    }
}

fn done_event() -> Bytes {
    Bytes::from_static(b"data: [DONE]\n\n")
}

fn truncated() -> Translated {
    Translated {
        frames: Vec::new(),
        usage: None,
        state: StreamState::Truncated,
    }
}

/// Reads an OpenAI-format upstream's events as chunks, for clients of another format.
#[derive(Default)]
pub struct OpenAiSource {
    /// A finish reason came: a clean close from here on ends a whole answer.
    finished: bool,
}

impl ChunkSource for OpenAiSource {
    fn event(&mut self, event: &SseEvent, chunks: &mut Vec<Value>) -> StreamState {
        if event.data().trim() == "[DONE]" {
            return StreamState::Done;
        }
        let Ok(chunk) = serde_json::from_str::<Value>(event.data()) else {
            return StreamState::Malformed;
        };
        if chunk.get("error").is_some_and(|e| !e.is_null()) {
            let (kind, message) = crate::providers::read_error(event.data().as_bytes());
            return StreamState::UpstreamError {
                overloaded: kind.as_deref() == Some("overloaded_error"),
                message: message.unwrap_or_else(|| "the provider failed mid-stream".into()),
            };
        }
        let Some(choices) = chunk.get("choices").and_then(Value::as_array) else {
            return StreamState::Malformed;
        };
        self.finished |= choices
            .iter()
            .any(|c| c.get("finish_reason").is_some_and(|f| !f.is_null()));
        chunks.push(chunk);
        StreamState::Open
    }

    fn end(&mut self, _chunks: &mut Vec<Value>) -> StreamState {
        if self.finished {
            StreamState::Done
        } else {
            StreamState::Truncated
        }
    }
}

/// Writes chunks for an OpenAI client.
pub struct OpenAiSink {
    /// Whether the client asked for the usage-only chunk (`stream_options.include_usage`).
    include_usage: bool,
}

impl OpenAiSink {
    /// A sink that forwards the usage chunk only when the client asked for it.
    pub fn new(include_usage: bool) -> OpenAiSink {
        OpenAiSink { include_usage }
    }
}

impl ChunkSink for OpenAiSink {
    fn chunk(&mut self, chunk: &Value, out: &mut Vec<Bytes>) {
        let usage_only = chunk
            .get("choices")
            .and_then(Value::as_array)
            .is_some_and(Vec::is_empty);
        if usage_only && !self.include_usage {
            return;
        }
        out.push(data_event(chunk));
    }

    fn done(&mut self, out: &mut Vec<Bytes>) {
        out.push(done_event());
    }

    fn error_event(&self, message: &str, code: &str) -> Bytes {
        stream_error_event(message, code)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::providers::Usage;
    use crate::providers::stream::testing::{event, run};

    #[test]
    fn the_passthrough_forwards_raw_bytes_and_strips_the_gateways_usage_chunk() {
        let events = [
            event(
                None,
                r#"{"choices":[{"index":0,"delta":{"content":"hi"}}]}"#,
            ),
            event(
                None,
                r#"{"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":1}}"#,
            ),
            event(None, "[DONE]"),
        ];
        let (frames, state, usage) = run(&mut Passthrough::new(true), &events, false);
        assert_eq!(frames, vec![events[0].raw.clone(), events[2].raw.clone()]);
        assert_eq!(state, StreamState::Done);
        assert_eq!(
            usage,
            Some(Usage {
                prompt_tokens: 3,
                completion_tokens: 1
            })
        );
        let (frames, ..) = run(&mut Passthrough::new(false), &events, false);
        assert_eq!(frames.len(), 3);
    }

    #[test]
    fn an_error_chunk_ends_the_stream_as_an_upstream_error() {
        let events = [event(
            None,
            r#"{"error":{"message":"boom","type":"server_error"}}"#,
        )];
        let (frames, state, _) = run(&mut Passthrough::new(true), &events, false);
        assert_eq!(frames.len(), 1);
        assert_eq!(
            state,
            StreamState::UpstreamError {
                overloaded: false,
                message: "boom".into()
            }
        );
        let (_, state, _) = run(&mut Passthrough::new(true), &[], true);
        assert_eq!(state, StreamState::Truncated);
    }

    /// Several OpenAI-compatible servers close after the finish chunk without `[DONE]`.
    #[test]
    fn a_close_after_the_finish_reason_is_a_whole_answer() {
        let content = event(
            None,
            r#"{"choices":[{"index":0,"delta":{"content":"hi"},"finish_reason":null}]}"#,
        );
        let finish = event(
            None,
            r#"{"choices":[{"index":0,"delta":{},"finish_reason":"stop"}],"usage":{"prompt_tokens":3,"completion_tokens":1}}"#,
        );
        let (frames, state, _) = run(
            &mut Passthrough::new(true),
            &[content.clone(), finish.clone()],
            true,
        );
        assert_eq!(state, StreamState::Done);
        assert_eq!(frames.last(), Some(&done_event()));
        let (_, state, _) = run(
            &mut Passthrough::new(true),
            std::slice::from_ref(&content),
            true,
        );
        assert_eq!(state, StreamState::Truncated);

        let mut source = OpenAiSource::default();
        let mut chunks = Vec::new();
        source.event(&content, &mut chunks);
        assert_eq!(source.end(&mut chunks), StreamState::Truncated);
        source.event(&finish, &mut chunks);
        assert_eq!(source.end(&mut chunks), StreamState::Done);
    }
}
