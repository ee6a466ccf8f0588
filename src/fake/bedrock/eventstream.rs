//! AWS's event stream framing (`application/vnd.amazon.eventstream`), written by hand.
//!
//! The gateway reads these frames with `aws-smithy-eventstream`; the fake writes them from the
//! format's description alone, so a mistake shared by one library on both ends cannot hide.
//! A message is a prelude (total length, headers length, both u32 big-endian, and the CRC32 of
//! those 8 bytes), the headers, the payload, and the CRC32 of everything before it. Each header
//! is a name (u8 length, bytes), a value type (u8) and the value in that type's encoding.

use bytes::Bytes;

/// The content type of a response made of these messages.
pub const CONTENT_TYPE: &str = "application/vnd.amazon.eventstream";

/// The value type of a string header (`7`); the fake writes no other.
const STRING: u8 = 7;

/// The prelude's length: total length, headers length, prelude CRC.
const PRELUDE_LEN: usize = 12;

/// A message's headers, encoded as they go on the wire, in the order added.
#[derive(Clone, Debug, Default)]
pub struct Headers(Vec<u8>);

impl Headers {
    /// No headers yet.
    pub fn new() -> Headers {
        Headers::default()
    }

    /// Adds a string header.
    pub fn string(self, name: &str, value: &str) -> Headers {
        let value = clamp(value.as_bytes(), usize::from(u16::MAX));
        let mut encoded = Vec::with_capacity(2 + value.len());
        encoded.extend_from_slice(&(value.len() as u16).to_be_bytes());
        encoded.extend_from_slice(value);
        self.typed(name, STRING, &encoded)
    }

    /// Adds a header of value type `kind` whose value is already encoded as that type wants
    /// (a length prefix included, for the types that have one).
    fn typed(mut self, name: &str, kind: u8, value: &[u8]) -> Headers {
        let name = clamp(name.as_bytes(), usize::from(u8::MAX));
        self.0.push(name.len() as u8);
        self.0.extend_from_slice(name);
        self.0.push(kind);
        self.0.extend_from_slice(value);
        self
    }
}

/// At most `max` bytes of `bytes`. The fake's names and values are short; this only keeps a
/// scripted oddity from overflowing a length field.
fn clamp(bytes: &[u8], max: usize) -> &[u8] {
    &bytes[..bytes.len().min(max)]
}

/// One whole message: prelude, headers, payload and message CRC.
pub fn message(headers: &Headers, payload: &[u8]) -> Bytes {
    let total = PRELUDE_LEN + headers.0.len() + payload.len() + 4;
    let mut out = Vec::with_capacity(total);
    out.extend_from_slice(&prelude(length(total), length(headers.0.len())));
    out.extend_from_slice(&headers.0);
    out.extend_from_slice(payload);
    let crc = crc32fast::hash(&out);
    out.extend_from_slice(&crc.to_be_bytes());
    Bytes::from(out)
}

/// The 12 bytes that open a message of `total` bytes with `headers` bytes of headers. Alone,
/// it starts a message that never ends (the fake's answer of a given size).
pub fn prelude(total: u32, headers: u32) -> [u8; PRELUDE_LEN] {
    let mut prelude = [0; PRELUDE_LEN];
    prelude[..4].copy_from_slice(&total.to_be_bytes());
    prelude[4..8].copy_from_slice(&headers.to_be_bytes());
    let crc = crc32fast::hash(&prelude[..8]);
    prelude[8..].copy_from_slice(&crc.to_be_bytes());
    prelude
}

/// A length as the prelude holds it. The format caps a message far below 4 GiB; the fake's
/// are a few hundred bytes, so saturating never happens in practice.
fn length(len: usize) -> u32 {
    u32::try_from(len).unwrap_or(u32::MAX)
}

/// An event: `:event-type`, `:content-type` and `:message-type` headers, a JSON payload.
pub fn event(event_type: &str, payload: &[u8]) -> Bytes {
    let headers = Headers::new()
        .string(":event-type", event_type)
        .string(":content-type", "application/json")
        .string(":message-type", "event");
    message(&headers, payload)
}

/// A modelled error inside the stream: `:exception-type` names it, the payload says why.
pub fn exception(exception_type: &str, payload: &[u8]) -> Bytes {
    let headers = Headers::new()
        .string(":exception-type", exception_type)
        .string(":content-type", "application/json")
        .string(":message-type", "exception");
    message(&headers, payload)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// AWS's example messages (tests/fixtures/eventstream, from smithy-rs).
    fn fixture(name: &str) -> Vec<u8> {
        let path = format!(
            "{}/tests/fixtures/eventstream/{name}",
            env!("CARGO_MANIFEST_DIR")
        );
        std::fs::read(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
    }

    /// Checks both CRCs of a message with crc32fast alone, reading no other field than the
    /// lengths: what a reader must do before it trusts anything else.
    fn crcs_hold(message: &[u8]) -> bool {
        let total = u32::from_be_bytes(message[..4].try_into().unwrap()) as usize;
        let prelude_crc = u32::from_be_bytes(message[8..12].try_into().unwrap());
        let message_crc = u32::from_be_bytes(message[total - 4..total].try_into().unwrap());
        total == message.len()
            && crc32fast::hash(&message[..8]) == prelude_crc
            && crc32fast::hash(&message[..total - 4]) == message_crc
    }

    #[test]
    fn writes_aws_message_without_headers_byte_for_byte() {
        let expected = fixture("valid_no_headers");
        let written = message(&Headers::new(), b"another test payload");
        assert_eq!(written.as_ref(), expected.as_slice());
        assert!(crcs_hold(&expected));
    }

    #[test]
    fn writes_aws_message_with_empty_payload_byte_for_byte() {
        // Its one header is an int16 (type 3): 500.
        let headers = Headers::new().typed("some-header", 3, &500_i16.to_be_bytes());
        let written = message(&headers, b"");
        assert_eq!(written.as_ref(), fixture("valid_empty_payload").as_slice());
    }

    #[test]
    fn writes_aws_message_with_every_header_type_byte_for_byte() {
        // Only `str` goes through `string`; the other types are encoded here, as the format
        // describes them, to show the framing and CRCs around them are right.
        let mut bytes = (b"some bytes".len() as u16).to_be_bytes().to_vec();
        bytes.extend_from_slice(b"some bytes");
        let uuid = 0xb79b_c914_de21_4e13_b8b2_bc47_e85b_7f0b_u128.to_be_bytes();
        let headers = Headers::new()
            .typed("true", 0, &[])
            .typed("false", 1, &[])
            .typed("byte", 2, &[0x32])
            .typed("short", 3, &20_000_i16.to_be_bytes())
            .typed("int", 4, &500_000_i32.to_be_bytes())
            .typed("long", 5, &50_000_000_000_i64.to_be_bytes())
            .typed("bytes", 6, &bytes)
            .string("str", "some str")
            .typed("time", 8, &5_000_000_000_i64.to_be_bytes())
            .typed("uuid", 9, &uuid);
        let expected = fixture("valid_with_all_headers_and_payload");
        assert_eq!(
            message(&headers, b"some payload").as_ref(),
            expected.as_slice()
        );
        assert!(crcs_hold(&expected));
    }

    #[test]
    fn an_independent_reader_takes_events_and_exceptions() {
        let event = event("contentBlockDelta", br#"{"contentBlockIndex":0}"#);
        assert!(crcs_hold(&event));
        let read = aws_smithy_eventstream::frame::read_message_from(event.clone()).unwrap();
        let headers: Vec<(String, String)> = read
            .headers()
            .iter()
            .map(|h| {
                let value = h.value().as_string().unwrap().as_str().to_owned();
                (h.name().as_str().to_owned(), value)
            })
            .collect();
        assert_eq!(
            headers,
            [
                (":event-type".into(), "contentBlockDelta".into()),
                (":content-type".into(), "application/json".into()),
                (":message-type".into(), "event".into()),
            ]
        );
        assert_eq!(read.payload().as_ref(), br#"{"contentBlockIndex":0}"#);

        let exception = exception("throttlingException", br#"{"message":"slow down"}"#);
        let read = aws_smithy_eventstream::frame::read_message_from(exception).unwrap();
        let kind = read.headers()[0].value().as_string().unwrap().as_str();
        assert_eq!(kind, "throttlingException");
    }

    #[test]
    fn a_prelude_alone_announces_its_length() {
        let prelude = prelude(1_000_000, 0);
        assert_eq!(&prelude[..4], &1_000_000_u32.to_be_bytes());
        assert_eq!(
            u32::from_be_bytes(prelude[8..].try_into().unwrap()),
            crc32fast::hash(&prelude[..8])
        );
    }
}
