//! A small server-sent-events reader: splits a byte stream into whole events.
//!
//! Each event keeps its raw bytes, so the gateway forwards exactly what the upstream sent.

use bytes::{Bytes, BytesMut};
use futures_util::{Stream, StreamExt};

/// The longest event accepted; a longer one means the upstream is not speaking SSE.
const MAX_EVENT_BYTES: usize = 4 * 1024 * 1024;

/// One whole event.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SseEvent {
    /// The event as it arrived, ending with its blank line.
    pub raw: Bytes,
    /// Its `data:` lines joined with `\n`; empty for a comment-only event (a keep-alive).
    pub data: String,
}

/// Why a stream of events broke.
#[derive(Debug, thiserror::Error)]
pub enum SseError {
    #[error("the upstream connection broke: {0}")]
    Transport(String),
    #[error("an event was longer than {MAX_EVENT_BYTES} bytes")]
    TooLong,
    #[error("an event was not valid UTF-8")]
    NotUtf8,
}

/// Reads events from a byte stream.
pub struct SseReader<S> {
    bytes: S,
    buffer: BytesMut,
    finished: bool,
}

impl<S, E> SseReader<S>
where
    S: Stream<Item = Result<Bytes, E>> + Unpin,
    E: std::fmt::Display,
{
    /// Wraps an upstream body.
    pub fn new(bytes: S) -> SseReader<S> {
        SseReader {
            bytes,
            buffer: BytesMut::new(),
            finished: false,
        }
    }

    /// The next whole event; `Ok(None)` at a clean end of stream. Bytes left over after the
    /// last blank line are an unfinished event, which the caller sees as the end without
    /// a terminal marker.
    pub async fn next_event(&mut self) -> Result<Option<SseEvent>, SseError> {
        loop {
            if let Some(end) = event_end(&self.buffer, self.finished) {
                let raw = self.buffer.split_to(end).freeze();
                return parse_event(raw).map(Some);
            }
            if self.buffer.len() > MAX_EVENT_BYTES {
                return Err(SseError::TooLong);
            }
            if self.finished {
                return Ok(None);
            }
            match self.bytes.next().await {
                Some(Ok(chunk)) => self.buffer.extend_from_slice(&chunk),
                Some(Err(e)) => return Err(SseError::Transport(e.to_string())),
                None => self.finished = true,
            }
        }
    }
}

/// Where the first event in `buffer` ends (just past its blank line), if it is whole.
///
/// A `\r` as the buffer's last byte may be half of a `\r\n` still on its way, so it ends
/// nothing until the stream has `finished`: else the chunking would move event boundaries.
fn event_end(buffer: &[u8], finished: bool) -> Option<usize> {
    let mut previous_newline: Option<usize> = None;
    let mut i = 0;
    while i < buffer.len() {
        let newline_len = match buffer[i] {
            b'\n' => 1,
            b'\r' if buffer.get(i + 1) == Some(&b'\n') => 2,
            b'\r' if i + 1 == buffer.len() && !finished => return None,
            b'\r' => 1,
            _ => {
                previous_newline = None;
                i += 1;
                continue;
            }
        };
        if previous_newline == Some(i) {
            return Some(i + newline_len);
        }
        i += newline_len;
        previous_newline = Some(i);
    }
    None
}

fn parse_event(raw: Bytes) -> Result<SseEvent, SseError> {
    let text = std::str::from_utf8(&raw).map_err(|_| SseError::NotUtf8)?;
    let mut data = String::new();
    for line in text.lines() {
        let value = match line.strip_prefix("data") {
            Some("") => "",
            Some(rest) => match rest.strip_prefix(':') {
                Some(value) => value.strip_prefix(' ').unwrap_or(value),
                None => continue,
            },
            None => continue,
        };
        if !data.is_empty() {
            data.push('\n');
        }
        data.push_str(value);
    }
    Ok(SseEvent { raw, data })
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures_util::stream;

    async fn events(chunks: &[&str]) -> (Vec<SseEvent>, Option<String>) {
        let parts: Vec<Result<Bytes, std::io::Error>> = chunks
            .iter()
            .map(|c| Ok(Bytes::copy_from_slice(c.as_bytes())))
            .collect();
        let mut reader = SseReader::new(stream::iter(parts));
        let mut out = Vec::new();
        loop {
            match reader.next_event().await {
                Ok(Some(event)) => out.push(event),
                Ok(None) => return (out, None),
                Err(e) => return (out, Some(e.to_string())),
            }
        }
    }

    #[tokio::test]
    async fn splits_events_across_chunk_boundaries() {
        let (events, error) = events(&["data: {\"a\"", ":1}\n", "\ndata: [DONE]\n\n"]).await;
        assert_eq!(error, None);
        assert_eq!(events.len(), 2);
        assert_eq!(events[0].data, "{\"a\":1}");
        assert_eq!(events[0].raw, Bytes::from_static(b"data: {\"a\":1}\n\n"));
        assert_eq!(events[1].data, "[DONE]");
    }

    #[tokio::test]
    async fn handles_crlf_comments_and_multiline_data() {
        let (events, _) =
            events(&[": ping\r\n\r\n", "event: x\r\ndata: a\r\ndata:b\r\n\r\n"]).await;
        assert_eq!(events[0].data, "");
        assert_eq!(events[1].data, "a\nb");
    }

    #[tokio::test]
    async fn a_crlf_split_across_chunks_ends_the_event_where_it_would_whole() {
        // Found by fuzzing (fuzz/corpus/sse): a chunk ending between `\r` and `\n` cut the
        // event short and began the next one with a stray `\n`.
        let whole = events(&[": ping\r\n\r\ndata: a\r\n\r\n"]).await;
        let split = events(&[": ping\r\n\r", "\ndata: a\r\n\r", "\n"]).await;
        assert_eq!(split, whole);
        assert_eq!(whole.0[1].raw, Bytes::from_static(b"data: a\r\n\r\n"));
        // At the very end, a lone `\r` still ends the line.
        let (events, _) = events(&["data: b\r\r"]).await;
        assert_eq!(events.len(), 1);
    }

    #[tokio::test]
    async fn an_unfinished_event_is_not_returned() {
        let (events, error) = events(&["data: 1\n\ndata: 2"]).await;
        assert_eq!(events.len(), 1);
        assert_eq!(error, None);
    }
}
