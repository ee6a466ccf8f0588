//! Turning an upstream event stream into the client's, one event at a time.
//!
//! When the formats match, a passthrough forwards each event's raw bytes and only watches for
//! usage, the end marker and in-stream errors. When they cross, a [`ChunkSource`] reads the
//! provider's events into OpenAI chunks and a [`ChunkSink`] writes those chunks as the client's
//! events, so every pair of formats needs one reader and one writer, not a translator each.

use bytes::Bytes;
use serde_json::Value;

use super::Usage;
use super::sse::SseEvent;

/// What one upstream event meant for the stream.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StreamState {
    /// The stream goes on.
    Open,
    /// A keep-alive (Anthropic's `ping`): forwarded, but not a first event to commit on.
    KeepAlive,
    /// The stream ended properly.
    Done,
    /// The provider reported an error inside the stream.
    UpstreamError { overloaded: bool, message: String },
    /// The event did not parse.
    Malformed,
    /// The upstream closed before its end marker.
    Truncated,
}

/// The client's events for one upstream event.
#[derive(Clone, Debug, PartialEq)]
pub struct Translated {
    /// Whole SSE events, ready to send.
    pub frames: Vec<Bytes>,
    /// The usage reported so far, when this event carried it.
    pub usage: Option<Usage>,
    pub state: StreamState,
}

/// Turns one provider's stream into one client's, event by event.
pub trait StreamTranslator: Send {
    /// Reads one upstream event that carries data (comment-only keep-alives never get here).
    fn event(&mut self, event: &SseEvent) -> Translated;

    /// The upstream closed the stream. For Gemini, whose stream has no end marker, that is
    /// the end; for the others it is a truncation.
    fn end(&mut self) -> Translated;

    /// The event that ends a broken stream, in the client's format.
    fn error_event(&self, message: &str, code: &str) -> Bytes;
}

/// Reads a provider's events as OpenAI chunks.
pub trait ChunkSource: Send {
    /// Appends the chunks one upstream event stands for.
    fn event(&mut self, event: &SseEvent, chunks: &mut Vec<Value>) -> StreamState;

    /// Appends what the end of the upstream stream stands for.
    fn end(&mut self, chunks: &mut Vec<Value>) -> StreamState;
}

/// Writes OpenAI chunks as a client's events.
pub trait ChunkSink: Send {
    /// Appends the events for one chunk.
    fn chunk(&mut self, chunk: &Value, out: &mut Vec<Bytes>);

    /// Appends the events that end a whole stream.
    fn done(&mut self, out: &mut Vec<Bytes>);

    /// The event that ends a broken stream.
    fn error_event(&self, message: &str, code: &str) -> Bytes;
}

/// A source and a sink: a translation between two formats.
pub struct Translating<S, K> {
    source: S,
    sink: K,
}

impl<S: ChunkSource, K: ChunkSink> Translating<S, K> {
    /// Joins a reader of the provider's events to a writer of the client's.
    pub fn new(source: S, sink: K) -> Translating<S, K> {
        Translating { source, sink }
    }

    fn write(&mut self, chunks: Vec<Value>, state: StreamState) -> Translated {
        let mut frames = Vec::new();
        let mut usage = None;
        for chunk in &chunks {
            if let Some(found) = chunk_usage(chunk) {
                usage = Some(found);
            }
            self.sink.chunk(chunk, &mut frames);
        }
        match &state {
            StreamState::Done => self.sink.done(&mut frames),
            StreamState::UpstreamError {
                overloaded,
                message,
            } => {
                let code = if *overloaded {
                    "overloaded"
                } else {
                    "upstream_error"
                };
                frames.push(self.sink.error_event(message, code));
            }
            StreamState::KeepAlive if frames.is_empty() => frames.push(keep_alive()),
            _ => {}
        }
        Translated {
            frames,
            usage,
            state,
        }
    }
}

impl<S: ChunkSource, K: ChunkSink> StreamTranslator for Translating<S, K> {
    fn event(&mut self, event: &SseEvent) -> Translated {
        let mut chunks = Vec::new();
        let state = self.source.event(event, &mut chunks);
        self.write(chunks, state)
    }

    fn end(&mut self) -> Translated {
        let mut chunks = Vec::new();
        let state = self.source.end(&mut chunks);
        self.write(chunks, state)
    }

    fn error_event(&self, message: &str, code: &str) -> Bytes {
        self.sink.error_event(message, code)
    }
}

/// An SSE comment: every client's parser skips it, and it keeps the connection warm.
pub fn keep_alive() -> Bytes {
    Bytes::from_static(b": ping\n\n")
}

/// The usage an OpenAI chunk carries, if any.
pub fn chunk_usage(chunk: &Value) -> Option<Usage> {
    chunk
        .get("usage")
        .filter(|u| u.is_object())
        .and_then(|u| serde_json::from_value(u.clone()).ok())
}

/// `data: {json}` as one SSE event.
pub fn data_event(value: &Value) -> Bytes {
    Bytes::from(format!("data: {value}\n\n"))
}

/// `event: {name}` with `data: {json}`, as Anthropic's streams (and its SDK) need them.
pub fn named_event(name: &str, value: &Value) -> Bytes {
    Bytes::from(format!("event: {name}\ndata: {value}\n\n"))
}

#[cfg(test)]
pub(crate) mod testing {
    //! Helpers for translation tests: feed whole events, read back what came out.

    use super::*;

    /// An event as the SSE reader would hand it over.
    pub fn event(name: Option<&str>, data: &str) -> SseEvent {
        let raw = match name {
            Some(name) => format!("event: {name}\ndata: {data}\n\n"),
            None => format!("data: {data}\n\n"),
        };
        SseEvent::new(Bytes::from(raw), data.to_owned())
    }

    /// Every data payload of the frames, parsed (`[DONE]` kept as a string).
    pub fn payloads(frames: &[Bytes]) -> Vec<Value> {
        frames
            .iter()
            .filter_map(|f| std::str::from_utf8(f).ok())
            .flat_map(|f| f.lines().map(str::to_owned).collect::<Vec<_>>())
            .filter_map(|line| line.strip_prefix("data: ").map(str::to_owned))
            .map(|data| serde_json::from_str(&data).unwrap_or(Value::String(data)))
            .collect()
    }

    /// The `event:` names of the frames, in order.
    pub fn names(frames: &[Bytes]) -> Vec<String> {
        frames
            .iter()
            .filter_map(|f| std::str::from_utf8(f).ok())
            .flat_map(|f| f.lines().map(str::to_owned).collect::<Vec<_>>())
            .filter_map(|line| line.strip_prefix("event: ").map(str::to_owned))
            .collect()
    }

    /// Runs every event through a translator, then its end, collecting all frames and the
    /// last state.
    pub fn run(
        translator: &mut dyn StreamTranslator,
        events: &[SseEvent],
        end: bool,
    ) -> (Vec<Bytes>, StreamState, Option<Usage>) {
        let mut frames = Vec::new();
        let mut state = StreamState::Open;
        let mut usage = None;
        for event in events {
            let out = translator.event(event);
            frames.extend(out.frames);
            usage = out.usage.or(usage);
            state = out.state;
        }
        if end {
            let out = translator.end();
            frames.extend(out.frames);
            usage = out.usage.or(usage);
            state = out.state;
        }
        (frames, state, usage)
    }
}
