//! Scrubbing what comes back from an upstream of the secrets sent to it.
//!
//! Some providers echo a key they did not like (whole, or a part of it) in their error
//! bodies and stream events. Each attempt builds a [`Scrubber`] from the secrets it sent;
//! every upstream body, header value and event passes through it before it reaches a
//! client, a log row or a metric. Any run of the body that a window of
//! [`WINDOW`] bytes of a secret matches is replaced by [`MARKER`].

use std::borrow::Cow;
use std::collections::HashSet;

use bytes::Bytes;
use http::header::HeaderValue;

use super::ByteStream;
use crate::keys::KeyLease;
use crate::providers::sse::{SseError, SseEvent, SseReader};

/// What replaces a secret, or a part of one, in anything an upstream sent back.
pub const MARKER: &str = "[redacted]";

/// How long a part of a secret must be to count as a leak of it.
pub const WINDOW: usize = 8;

/// Finds any `WINDOW`-byte part of the secrets an attempt sent, in one pass over a body.
#[derive(Clone, Default)]
pub struct Scrubber {
    /// Every `WINDOW`-byte window of every long secret, as a little-endian `u64`.
    windows: HashSet<u64>,
    /// A bitmap of the windows' hashes, small enough to stay in L1: most body positions
    /// miss it, and so cost a multiply and a load instead of a hash-set lookup. Only
    /// allocated when there is a long secret.
    filter: Option<Box<[u64; FILTER_WORDS]>>,
    /// Secrets shorter than a window, which only count when whole.
    short: Vec<Box<[u8]>>,
}

impl Scrubber {
    /// A scrubber for the secrets in `secrets`; empty ones are ignored.
    pub fn new<'a>(secrets: impl IntoIterator<Item = &'a str>) -> Scrubber {
        let mut scrubber = Scrubber::default();
        for secret in secrets.into_iter().map(str::as_bytes) {
            if secret.len() >= WINDOW {
                let filter = scrubber
                    .filter
                    .get_or_insert_with(|| Box::new([0; FILTER_WORDS]));
                for value in secret.windows(WINDOW).map(window_value) {
                    let slot = filter_slot(value);
                    filter[slot / 64] |= 1 << (slot % 64);
                    scrubber.windows.insert(value);
                }
            } else if !secret.is_empty() {
                scrubber.short.push(secret.into());
            }
        }
        scrubber
    }

    /// A scrubber for the key an attempt sends, if it sends one; for AWS credentials, their
    /// session token too (the secret access key is the lease's secret).
    pub fn for_key(key: Option<&KeyLease>) -> Scrubber {
        let session_token = key
            .and_then(|k| k.aws.as_deref())
            .and_then(|aws| aws.session_token());
        Scrubber::new(
            key.map(|k| k.secret.expose())
                .into_iter()
                .chain(session_token),
        )
    }

    /// Whether there is nothing to scrub (no key was sent): every call is then free.
    pub fn is_empty(&self) -> bool {
        self.filter.is_none() && self.short.is_empty()
    }

    /// `text` with every part of a secret replaced by [`MARKER`]; borrowed when clean.
    pub fn scrub<'a>(&self, text: &'a [u8]) -> Cow<'a, [u8]> {
        let Some((start, end)) = self.find(text, 0) else {
            return Cow::Borrowed(text);
        };
        let mut out = Vec::with_capacity(text.len());
        let (mut start, mut end) = (start, end);
        let mut copied = 0;
        loop {
            out.extend_from_slice(&text[copied..start]);
            out.extend_from_slice(MARKER.as_bytes());
            copied = end;
            match self.find(text, end) {
                Some(next) => (start, end) = next,
                None => break,
            }
        }
        out.extend_from_slice(&text[copied..]);
        Cow::Owned(out)
    }

    /// A body, scrubbed; the same buffer (not a copy) when it holds no secret.
    pub fn bytes(&self, body: Bytes) -> Bytes {
        if self.is_empty() {
            return body;
        }
        match self.scrub(&body) {
            Cow::Borrowed(_) => body,
            Cow::Owned(clean) => Bytes::from(clean),
        }
    }

    /// A header value, scrubbed.
    pub fn header(&self, value: HeaderValue) -> HeaderValue {
        if self.is_empty() {
            return value;
        }
        match self.scrub(value.as_bytes()) {
            Cow::Borrowed(_) => value,
            // The marker is plain ASCII, so what was a valid value stays one.
            Cow::Owned(clean) => {
                HeaderValue::from_bytes(&clean).unwrap_or(HeaderValue::from_static(MARKER))
            }
        }
    }

    /// An event, scrubbed in its raw bytes and its data alike.
    pub fn event(&self, event: SseEvent) -> SseEvent {
        if self.is_empty() {
            return event;
        }
        // The data is the raw event's `data:` lines joined by newlines, and no key holds a
        // newline: a clean raw event has clean data, so most events are scanned once.
        let raw = match self.scrub(&event.raw) {
            Cow::Borrowed(_) => return event,
            Cow::Owned(clean) => Bytes::from(clean),
        };
        let data = match self.scrub(event.data().as_bytes()) {
            Cow::Borrowed(data) => String::from_utf8_lossy(data).into_owned(),
            Cow::Owned(clean) => String::from_utf8_lossy(&clean).into_owned(),
        };
        SseEvent::new(raw, data)
    }

    /// The first secret run at or after `from`, as a byte range. A run grows while each
    /// next window is a secret's too, so a longer echo is covered whole.
    fn find(&self, text: &[u8], from: usize) -> Option<(usize, usize)> {
        let long = self.find_window(text, from);
        let short = self.find_short(text, from);
        match (long, short) {
            (Some(a), Some(b)) => Some(if b.0 < a.0 { b } else { a }),
            (a, b) => a.or(b),
        }
    }

    fn find_window(&self, text: &[u8], from: usize) -> Option<(usize, usize)> {
        let filter = self.filter.as_deref()?;
        let is_secret = |window: &[u8]| {
            let value = window_value(window);
            let slot = filter_slot(value);
            filter[slot / 64] & (1 << (slot % 64)) != 0 && self.windows.contains(&value)
        };
        let rest = text.get(from..)?;
        let start = from + rest.windows(WINDOW).position(is_secret)?;
        let end = start
            + WINDOW
            + text[start + 1..]
                .windows(WINDOW)
                .take_while(|w| is_secret(w))
                .count();
        Some((start, end))
    }

    fn find_short(&self, text: &[u8], from: usize) -> Option<(usize, usize)> {
        self.short
            .iter()
            .filter_map(|secret| {
                let at = text[from..]
                    .windows(secret.len())
                    .position(|w| w == &secret[..])?;
                Some((from + at, from + at + secret.len()))
            })
            .min()
    }
}

impl std::fmt::Debug for Scrubber {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The windows are the secret in pieces: never print them.
        f.write_str("Scrubber(***)")
    }
}

fn window_value(window: &[u8]) -> u64 {
    let mut bytes = [0u8; WINDOW];
    bytes.copy_from_slice(window);
    u64::from_le_bytes(bytes)
}

/// Words in the prefilter: 2^16 bits, 8 KiB.
const FILTER_WORDS: usize = 1 << 10;

/// A window's bit in the prefilter: the top 16 bits of a multiplicative hash.
fn filter_slot(value: u64) -> usize {
    (value.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 48) as usize
}

/// An upstream event stream whose every event is scrubbed before anyone reads it.
pub struct ScrubbedReader {
    inner: SseReader<ByteStream>,
    scrubber: Scrubber,
}

impl ScrubbedReader {
    /// Reads `inner`'s events through `scrubber`.
    pub fn new(inner: SseReader<ByteStream>, scrubber: Scrubber) -> ScrubbedReader {
        ScrubbedReader { inner, scrubber }
    }

    /// The next event if it has already arrived whole, scrubbed; as
    /// [`SseReader::buffered_event`].
    pub fn buffered_event(&mut self) -> Option<Result<SseEvent, SseError>> {
        let read = self.inner.buffered_event()?;
        Some(read.map(|event| self.scrubber.event(event)))
    }

    /// The next whole event, scrubbed; as [`SseReader::next_event`].
    pub async fn next_event(&mut self) -> Result<Option<SseEvent>, SseError> {
        match self.inner.next_event().await {
            Ok(Some(event)) => Ok(Some(self.scrubber.event(event))),
            Err(SseError::Transport(message)) => Err(SseError::Transport(
                String::from_utf8_lossy(&self.scrubber.scrub(message.as_bytes())).into_owned(),
            )),
            other => other,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY: &str = "sk-live-ABCDEFGHIJKLMNOP-0123456789";

    fn clean(scrubber: &Scrubber, text: &str) -> String {
        String::from_utf8(scrubber.scrub(text.as_bytes()).into_owned()).unwrap()
    }

    #[test]
    fn replaces_the_whole_key_and_any_long_part_of_it() {
        let s = Scrubber::new([KEY]);
        assert_eq!(clean(&s, &format!("bad key {KEY}.")), "bad key [redacted].");
        assert_eq!(
            clean(&s, "key ending ...IJKLMNOP-0123 and sk-live-A"),
            "key ending ...[redacted] and [redacted]"
        );
        assert_eq!(
            clean(&s, &format!("{KEY}{KEY}")),
            "[redacted][redacted]",
            "each echo is replaced"
        );
        assert_eq!(
            clean(&s, &format!("a{KEY}b{KEY}c")),
            "a[redacted]b[redacted]c"
        );
    }

    #[test]
    fn leaves_short_parts_and_clean_bodies_alone_without_copying() {
        let s = Scrubber::new([KEY]);
        let text = b"sk-live is seven bytes of it, and so is ABCDEFG";
        assert!(matches!(s.scrub(text), Cow::Borrowed(_)));
        let body = Bytes::from_static(b"{\"ok\":true}");
        let pointer = body.as_ptr();
        assert_eq!(s.bytes(body).as_ptr(), pointer);
        assert!(Scrubber::new([]).is_empty());
        assert!(Scrubber::for_key(None).is_empty());
    }

    #[test]
    fn short_secrets_count_only_whole() {
        let s = Scrubber::new(["abc123", ""]);
        assert_eq!(clean(&s, "x abc123 abc12"), "x [redacted] abc12");
    }

    #[test]
    fn scrubs_header_values_and_events() {
        let s = Scrubber::new([KEY]);
        let value = HeaderValue::from_str(&format!("application/json; k={KEY}")).unwrap();
        assert_eq!(s.header(value), "application/json; k=[redacted]");
        let event = SseEvent::new(
            Bytes::from(format!("data: {{\"m\":\"{KEY}\"}}\n\n")),
            format!("{{\"m\":\"{KEY}\"}}"),
        );
        let event = s.event(event);
        assert_eq!(event.data(), "{\"m\":\"[redacted]\"}");
        assert_eq!(&event.raw[..], b"data: {\"m\":\"[redacted]\"}\n\n");
    }

    proptest::proptest! {
        /// Whatever surrounds them, echoes of 8+ bytes of the key never survive, and a body
        /// with none comes back as it was.
        #[test]
        fn no_window_of_the_key_survives(
            pieces in proptest::collection::vec(("[ -~]{0,12}", 0..KEY.len(), 8..KEY.len()), 0..6),
        ) {
            let s = Scrubber::new([KEY]);
            let mut body = String::new();
            for (filler, start, len) in &pieces {
                body.push_str(filler);
                let end = (start + len).min(KEY.len());
                body.push_str(&KEY[(*start).min(end.saturating_sub(8))..end]);
            }
            let clean = clean(&s, &body);
            for window in KEY.as_bytes().windows(WINDOW) {
                let window = std::str::from_utf8(window).unwrap();
                proptest::prop_assert!(!clean.contains(window), "{body} -> {clean}");
            }
            let has_window = KEY.as_bytes().windows(WINDOW).any(|w| {
                body.as_bytes().windows(WINDOW).any(|b| b == w)
            });
            proptest::prop_assert_eq!(has_window, clean != body);
        }
    }

    #[test]
    fn its_debug_shows_nothing_of_the_key() {
        let s = Scrubber::new([KEY]);
        assert_eq!(format!("{s:?}"), "Scrubber(***)");
    }
}
