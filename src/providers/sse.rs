//! A small server-sent-events reader: splits a byte stream into whole events.
//!
//! Each event keeps its raw bytes, so the gateway forwards exactly what the upstream sent.

use std::ops::Range;

use bytes::{Bytes, BytesMut};
use futures_util::{Stream, StreamExt};

/// The longest event accepted unless the caller says otherwise (`[server] max_sse_event_bytes`).
pub const MAX_EVENT_BYTES: usize = 4 * 1024 * 1024;

/// One whole event.
#[derive(Clone, Debug)]
pub struct SseEvent {
    /// The event as it arrived, ending with its blank line.
    pub raw: Bytes,
    data: Data,
}

/// Where an event's data is: most events have a single `data:` line, read in place rather
/// than copied into a string of its own.
#[derive(Clone, Debug)]
enum Data {
    /// The one `data:` value (or none: an empty range), as a range of the raw event.
    InPlace(Range<usize>),
    /// Several `data:` lines, joined.
    Joined(String),
}

impl SseEvent {
    /// An event from its raw bytes and its data (what [`SseEvent::data`] returns).
    pub fn new(raw: Bytes, data: String) -> SseEvent {
        SseEvent {
            raw,
            data: Data::Joined(data),
        }
    }

    /// Its `data:` lines joined with `\n`; empty for a comment-only event (a keep-alive).
    pub fn data(&self) -> &str {
        match &self.data {
            // The whole event was checked as UTF-8 and the range ends on line boundaries, so
            // this check passes; it costs a pass over the data, not an allocation.
            Data::InPlace(range) => self
                .raw
                .get(range.clone())
                .and_then(|data| std::str::from_utf8(data).ok())
                .unwrap_or_default(),
            Data::Joined(data) => data,
        }
    }

    /// [`SseEvent::data`] as bytes, not checked as UTF-8 again: the per-event path reads
    /// these, so a stream's data is checked once, when its event is read.
    pub fn data_bytes(&self) -> &[u8] {
        match &self.data {
            Data::InPlace(range) => self.raw.get(range.clone()).unwrap_or_default(),
            Data::Joined(data) => data.as_bytes(),
        }
    }
}

impl PartialEq for SseEvent {
    fn eq(&self, other: &SseEvent) -> bool {
        self.raw == other.raw && self.data() == other.data()
    }
}

impl Eq for SseEvent {}

/// Why a stream of events broke.
#[derive(Debug, thiserror::Error)]
pub enum SseError {
    #[error("the upstream connection broke: {0}")]
    Transport(String),
    #[error("an event was longer than the limit")]
    TooLong,
    #[error("an event was not valid UTF-8")]
    NotUtf8,
}

/// Reads events from a byte stream.
pub struct SseReader<S> {
    bytes: S,
    buffer: BytesMut,
    scan: Scan,
    finished: bool,
    max_event_bytes: usize,
    /// Bytes examined looking for event ends, so a test can check the work is linear.
    #[cfg(test)]
    scanned: usize,
}

impl<S, E> SseReader<S>
where
    S: Stream<Item = Result<Bytes, E>> + Unpin,
    E: std::fmt::Display,
{
    /// Wraps an upstream body whose events may be at most `max_event_bytes` long.
    pub fn new(bytes: S, max_event_bytes: usize) -> SseReader<S> {
        SseReader {
            bytes,
            buffer: BytesMut::new(),
            scan: Scan::default(),
            finished: false,
            max_event_bytes,
            #[cfg(test)]
            scanned: 0,
        }
    }

    /// The next whole event; `Ok(None)` at a clean end of stream. Bytes left over after the
    /// last blank line are an unfinished event, which the caller sees as the end without
    /// a terminal marker.
    pub async fn next_event(&mut self) -> Result<Option<SseEvent>, SseError> {
        loop {
            if let Some(event) = self.buffered_event() {
                return event.map(Some);
            }
            if self.buffer.len() > self.max_event_bytes {
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

    /// The next event if it has already arrived whole: never waits, never reads the stream.
    /// A burst of events that came in one read can so be handled, and forwarded, at once.
    pub fn buffered_event(&mut self) -> Option<Result<SseEvent, SseError>> {
        #[cfg(test)]
        let from = self.scan.next;
        let found = self.scan.advance(&self.buffer, self.finished);
        #[cfg(test)]
        {
            self.scanned += found.unwrap_or(self.scan.next).saturating_sub(from);
        }
        let end = found?;
        Some(parse_event(self.buffer.split_to(end).freeze()))
    }
}

/// How far the search for an event's end has got, so each byte is examined once however
/// finely the event arrives (rescanning from the start made a long event quadratic).
#[derive(Clone, Copy, Debug, Default)]
struct Scan {
    /// The next byte to examine.
    next: usize,
    /// Whether the byte before `next` ended a line.
    after_newline: bool,
}

impl Scan {
    /// Continues the search through `buffer`; where the first event ends (just past its
    /// blank line), if it is whole. A `\r` at the very end waits for the next byte, since
    /// it may be half of a `\r\n`, unless the stream has `ended`.
    fn advance(&mut self, buffer: &[u8], ended: bool) -> Option<usize> {
        let mut i = self.next;
        while i < buffer.len() {
            let newline_len = match buffer[i] {
                b'\n' => 1,
                b'\r' => match buffer.get(i + 1) {
                    Some(b'\n') => 2,
                    Some(_) => 1,
                    None if ended => 1,
                    None => break,
                },
                _ => {
                    // Skip to the next line end at once: events are mostly line content.
                    self.after_newline = false;
                    i = memchr::memchr2(b'\n', b'\r', &buffer[i..])
                        .map_or(buffer.len(), |at| i + at);
                    continue;
                }
            };
            if self.after_newline {
                *self = Scan::default();
                return Some(i + newline_len);
            }
            i += newline_len;
            self.after_newline = true;
        }
        self.next = i;
        None
    }
}

fn parse_event(raw: Bytes) -> Result<SseEvent, SseError> {
    let text = std::str::from_utf8(&raw).map_err(|_| SseError::NotUtf8)?;
    let mut data = Data::InPlace(0..0);
    for line in lines(text) {
        let value = match line.strip_prefix("data") {
            Some("") => "",
            Some(rest) => match rest.strip_prefix(':') {
                Some(value) => value.strip_prefix(' ').unwrap_or(value),
                None => continue,
            },
            None => continue,
        };
        // Lines join with `\n`, but only after data: an empty line adds nothing to none.
        if value.is_empty() && matches!(&data, Data::InPlace(range) if range.is_empty()) {
            continue;
        }
        data = match data {
            Data::InPlace(range) if range.is_empty() => {
                // `value` lies within `text`: its offset is where it starts in the event.
                let start = value.as_ptr() as usize - text.as_ptr() as usize;
                Data::InPlace(start..start + value.len())
            }
            Data::InPlace(range) => {
                let mut joined = String::with_capacity(range.len() + 1 + value.len());
                joined.push_str(text.get(range).unwrap_or_default());
                joined.push('\n');
                joined.push_str(value);
                Data::Joined(joined)
            }
            Data::Joined(mut joined) => {
                if !joined.is_empty() {
                    joined.push('\n');
                }
                joined.push_str(value);
                Data::Joined(joined)
            }
        };
    }
    Ok(SseEvent { raw, data })
}

/// `str::lines`, finding line ends with `memchr` on bytes: the generic char search cost
/// more per event than the rest of reading it. Lines end at `\n`, with a `\r` before it
/// dropped; a last line without `\n` keeps its `\r`, as `str::lines` does.
fn lines(text: &str) -> impl Iterator<Item = &str> {
    let mut rest = text;
    std::iter::from_fn(move || {
        if rest.is_empty() {
            return None;
        }
        let Some(end) = memchr::memchr(b'\n', rest.as_bytes()) else {
            return Some(std::mem::take(&mut rest));
        };
        // `\n` is one byte, so both slices lie on char boundaries.
        let (line, after) = (rest.get(..end)?, rest.get(end + 1..)?);
        rest = after;
        Some(line.strip_suffix('\r').unwrap_or(line))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures_util::stream;

    proptest::proptest! {
        /// The byte-level line split gives what `str::lines` gives, `\r` and all.
        #[test]
        fn lines_split_as_str_lines_does(
            parts in proptest::collection::vec(proptest::sample::select(vec![
                "data", ": ", "\n", "\r", "\r\n", "é", "x", "",
            ]), 0..16),
        ) {
            let text = parts.concat();
            proptest::prop_assert_eq!(lines(&text).collect::<Vec<_>>(), text.lines().collect::<Vec<_>>());
        }
    }

    async fn events(chunks: &[&str]) -> (Vec<SseEvent>, Option<String>) {
        let parts: Vec<Result<Bytes, std::io::Error>> = chunks
            .iter()
            .map(|c| Ok(Bytes::copy_from_slice(c.as_bytes())))
            .collect();
        let mut reader = SseReader::new(stream::iter(parts), MAX_EVENT_BYTES);
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
        assert_eq!(events[0].data(), "{\"a\":1}");
        assert_eq!(events[0].raw, Bytes::from_static(b"data: {\"a\":1}\n\n"));
        assert_eq!(events[1].data(), "[DONE]");
    }

    #[tokio::test]
    async fn handles_crlf_comments_and_multiline_data() {
        let (events, _) =
            events(&[": ping\r\n\r\n", "event: x\r\ndata: a\r\ndata:b\r\n\r\n"]).await;
        assert_eq!(events[0].data(), "");
        assert_eq!(events[1].data(), "a\nb");
    }

    /// Reads one `size`-byte event arriving in `chunk`-byte pieces; the bytes scanned.
    async fn scanned_for_one_event(size: usize, chunk: usize) -> usize {
        let mut event = b"data: ".to_vec();
        event.resize(size - 2, b'x');
        event.extend_from_slice(b"\n\n");
        let parts: Vec<Result<Bytes, std::io::Error>> = event
            .chunks(chunk)
            .map(|c| Ok(Bytes::copy_from_slice(c)))
            .collect();
        let mut reader = SseReader::new(stream::iter(parts), size);
        let read = reader.next_event().await.unwrap().unwrap();
        assert_eq!(read.raw.len(), size);
        reader.scanned
    }

    #[tokio::test]
    async fn one_byte_chunks_are_scanned_in_linear_work() {
        let size = 32 * 1024;
        let scanned = scanned_for_one_event(size, 1).await;
        assert!(scanned <= 2 * size, "{scanned} bytes scanned for {size}");
    }

    #[tokio::test]
    async fn a_five_megabyte_event_is_scanned_in_linear_work() {
        let size = 5 * 1024 * 1024;
        let scanned = scanned_for_one_event(size, 64 * 1024).await;
        assert!(scanned <= 2 * size, "{scanned} bytes scanned for {size}");
    }

    #[tokio::test]
    async fn an_event_over_the_limit_is_refused_before_it_is_whole() {
        let parts: Vec<Result<Bytes, std::io::Error>> = (0..4)
            .map(|_| Ok(Bytes::from_static(b"data: 0123456789abcdef")))
            .collect();
        let mut reader = SseReader::new(stream::iter(parts), 32);
        assert!(matches!(reader.next_event().await, Err(SseError::TooLong)));
    }

    #[tokio::test]
    async fn a_crlf_split_across_chunks_is_one_newline() {
        let (events, error) = events(&["data: a\r", "\ndata: b\r", "\n\r", "\n"]).await;
        assert_eq!(error, None);
        assert_eq!(events.len(), 1);
        assert_eq!(events[0].data(), "a\nb");
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
