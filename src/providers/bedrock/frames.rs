//! ConverseStream's `application/vnd.amazon.eventstream` framing, read into the server-sent
//! events every other stream arrives as, so one reader, scrubber and translator path serves
//! them all.
//!
//! Each binary message is decoded by `aws-smithy-eventstream`, which verifies its prelude and
//! message checksums, and becomes one event whose data is the JSON AWS's SDKs show for it:
//! `{"contentBlockDelta": {...payload}}`, `{"throttlingException": {"message": ...}}`. A
//! message that does not decode ends the stream with `{"invalidFrame": {...}}`, which the
//! translator reads as a malformed stream.

use bytes::{Bytes, BytesMut};
use futures_util::{Stream, StreamExt};

use aws_smithy_eventstream::frame::{DecodedFrame, MessageFrameDecoder};
use aws_smithy_types::event_stream::{HeaderValue, Message};

/// The member a message that did not decode is named by.
pub const INVALID_FRAME: &str = "invalidFrame";

/// `bytes`, an eventstream body, as server-sent events.
pub fn as_sse<S, E>(bytes: S) -> impl Stream<Item = Result<Bytes, E>> + Send
where
    S: Stream<Item = Result<Bytes, E>> + Send + Unpin,
    E: Send,
{
    let state = Frames {
        bytes,
        buffer: BytesMut::new(),
        decoder: MessageFrameDecoder::new(),
        done: false,
    };
    futures_util::stream::unfold(state, |mut state| async move {
        let item = state.next().await?;
        Some((item, state))
    })
}

struct Frames<S> {
    bytes: S,
    buffer: BytesMut,
    decoder: MessageFrameDecoder,
    done: bool,
}

impl<S, E> Frames<S>
where
    S: Stream<Item = Result<Bytes, E>> + Unpin,
{
    /// The next event; `None` at the end of the body, or after a message that did not decode.
    async fn next(&mut self) -> Option<Result<Bytes, E>> {
        loop {
            if self.done {
                return None;
            }
            match self.decoder.decode_frame(&mut self.buffer) {
                Ok(DecodedFrame::Complete(message)) => return Some(Ok(event(&message))),
                Ok(DecodedFrame::Incomplete) => {}
                Err(error) => {
                    self.done = true;
                    let why = serde_json::json!({ "message": error.to_string() });
                    return Some(Ok(sse(INVALID_FRAME, why.to_string().as_bytes())));
                }
            }
            match self.bytes.next().await {
                Some(Ok(chunk)) => self.buffer.extend_from_slice(&chunk),
                Some(Err(error)) => {
                    self.done = true;
                    return Some(Err(error));
                }
                // A part of a message left over is a cut stream: the reader sees the end
                // before the stream's last event.
                None => return None,
            }
        }
    }
}

/// One decoded message as an event.
fn event(message: &Message) -> Bytes {
    let header = |name: &str| {
        message
            .headers()
            .iter()
            .find(|h| h.name().as_str() == name)
            .and_then(|h| match h.value() {
                HeaderValue::String(text) => Some(text.as_str()),
                _ => None,
            })
    };
    match header(":message-type") {
        Some("event") => sse(
            header(":event-type").unwrap_or("unknown"),
            message.payload(),
        ),
        Some("exception") => sse(
            header(":exception-type").unwrap_or("exception"),
            message.payload(),
        ),
        // `:message-type: error`: the code and message are headers, with no payload.
        _ => {
            let error = serde_json::json!({
                "code": header(":error-code"),
                "message": header(":error-message"),
            });
            sse("error", error.to_string().as_bytes())
        }
    }
}

/// `data: {"name": payload}`, the payload's lines each a `data:` line of their own, as
/// server-sent events carry data with line breaks. An empty payload is `{}`.
fn sse(name: &str, payload: &[u8]) -> Bytes {
    let payload = if payload.iter().all(u8::is_ascii_whitespace) {
        &b"{}"[..]
    } else {
        payload
    };
    let mut out = BytesMut::with_capacity(payload.len() + name.len() + 16);
    out.extend_from_slice(b"data: {\"");
    out.extend_from_slice(name.as_bytes());
    out.extend_from_slice(b"\":");
    let mut lines = payload.split(|&b| b == b'\n');
    if let Some(first) = lines.next() {
        out.extend_from_slice(first.strip_suffix(b"\r").unwrap_or(first));
    }
    for line in lines {
        out.extend_from_slice(b"\ndata: ");
        out.extend_from_slice(line.strip_suffix(b"\r").unwrap_or(line));
    }
    out.extend_from_slice(b"}\n\n");
    out.freeze()
}

#[cfg(test)]
mod tests {
    use super::*;
    use aws_smithy_eventstream::frame::write_message_to;
    use aws_smithy_types::event_stream::Header;

    fn message(kind: &str, name: &str, payload: &str) -> Vec<u8> {
        let name_header = if kind == "event" {
            ":event-type"
        } else {
            ":exception-type"
        };
        let message = Message::new(payload.to_owned().into_bytes())
            .add_header(Header::new(
                ":message-type",
                HeaderValue::String(kind.to_owned().into()),
            ))
            .add_header(Header::new(
                name_header,
                HeaderValue::String(name.to_owned().into()),
            ))
            .add_header(Header::new(
                ":content-type",
                HeaderValue::String("application/json".into()),
            ));
        let mut out = Vec::new();
        write_message_to(&message, &mut out).unwrap();
        out
    }

    async fn read(chunks: Vec<Vec<u8>>) -> Vec<String> {
        let body = futures_util::stream::iter(
            chunks
                .into_iter()
                .map(|c| Ok::<_, std::io::Error>(Bytes::from(c))),
        );
        as_sse(body)
            .map(|e| String::from_utf8(e.unwrap().to_vec()).unwrap())
            .collect()
            .await
    }

    #[tokio::test]
    async fn messages_split_anywhere_become_whole_events() {
        let mut body = message("event", "messageStart", r#"{"role":"assistant"}"#);
        body.extend(message(
            "event",
            "contentBlockDelta",
            "{\"contentBlockIndex\":0,\n\"delta\":{\"text\":\"Hi\"}}",
        ));
        body.extend(message(
            "exception",
            "throttlingException",
            r#"{"message":"slow down"}"#,
        ));
        // One byte at a time: every message arrives in pieces.
        let events = read(body.iter().map(|b| vec![*b]).collect()).await;
        assert_eq!(
            events,
            [
                "data: {\"messageStart\":{\"role\":\"assistant\"}}\n\n",
                "data: {\"contentBlockDelta\":{\"contentBlockIndex\":0,\ndata: \"delta\":{\"text\":\"Hi\"}}}\n\n",
                "data: {\"throttlingException\":{\"message\":\"slow down\"}}\n\n",
            ]
        );
    }

    #[tokio::test]
    async fn a_corrupt_message_ends_the_stream_as_invalid() {
        let mut body = message("event", "messageStart", r#"{"role":"assistant"}"#);
        let last = body.len() - 1;
        body[last] ^= 0xff;
        body.extend(message(
            "event",
            "messageStop",
            r#"{"stopReason":"end_turn"}"#,
        ));
        let events = read(vec![body]).await;
        assert_eq!(events.len(), 1, "{events:?}");
        assert!(
            events[0].starts_with("data: {\"invalidFrame\":"),
            "{events:?}"
        );
    }

    #[tokio::test]
    async fn a_cut_message_is_the_end_of_the_body() {
        let mut body = message("event", "messageStart", r#"{"role":"assistant"}"#);
        body.truncate(body.len() - 3);
        assert!(read(vec![body]).await.is_empty());
    }
}
