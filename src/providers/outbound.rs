//! The HTTP request an adapter builds for one attempt, as the upstream client sends it.
//!
//! A plain value rather than a client library's builder: the URI is written once by the
//! adapter and parsed once when sent, and nothing stands between the adapter and the wire.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::fmt;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::{Bytes, BytesMut};
use http::header::{ACCEPT, AUTHORIZATION, CONTENT_TYPE, HeaderName, HeaderValue};
use http::{HeaderMap, Method};
use hyper::body::{Body, Frame, SizeHint};

/// One request to a provider.
pub struct UpstreamRequest {
    pub method: Method,
    /// The absolute URI, from the provider's `base_url`; parsed when the request is sent.
    pub uri: String,
    pub headers: HeaderMap,
    pub body: OutBody,
    /// Sent over HTTP/2 (the provider's `http2`).
    pub http2: bool,
    /// The name of a header whose value is not valid in HTTP. Such a request is never sent:
    /// the attempt fails as a transport error would, as it did with reqwest's builder.
    invalid_header: Option<HeaderName>,
}

impl UpstreamRequest {
    /// A JSON POST to `uri`, asking for an event stream when streaming.
    pub fn post(uri: String, body: impl Into<OutBody>, stream: bool) -> UpstreamRequest {
        let mut headers = HeaderMap::with_capacity(4);
        headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        if stream {
            headers.insert(ACCEPT, HeaderValue::from_static("text/event-stream"));
        }
        UpstreamRequest {
            method: Method::POST,
            uri,
            headers,
            body: body.into(),
            http2: false,
            invalid_header: None,
        }
    }

    /// Sent over HTTP/2 when `http2` (the provider's setting).
    pub fn over_http2(mut self, http2: bool) -> UpstreamRequest {
        self.http2 = http2;
        self
    }

    /// Adds a header from configuration or the client's request. Names are constants
    /// (`HeaderName::from_static` in a `const`), so a bad name fails the build, not a request.
    pub fn header(self, name: HeaderName, value: &str) -> UpstreamRequest {
        self.with(name, HeaderValue::from_str(value), false)
    }

    /// Adds a header that carries a key: marked sensitive, so `Debug` never shows it.
    pub fn secret_header(self, name: HeaderName, secret: &str) -> UpstreamRequest {
        self.with(name, HeaderValue::from_str(secret), true)
    }

    /// Adds `authorization: Bearer {secret}`, marked sensitive. Written without `format!`,
    /// whose machinery cost more than the header itself.
    pub fn bearer(self, secret: &str) -> UpstreamRequest {
        let mut text = String::with_capacity(7 + secret.len());
        text.push_str("Bearer ");
        text.push_str(secret);
        let value = HeaderValue::from_str(&text);
        self.with(AUTHORIZATION, value, true)
    }

    /// Why the request cannot be sent, if it cannot.
    pub fn invalid(&self) -> Option<&HeaderName> {
        self.invalid_header.as_ref()
    }

    fn with(
        mut self,
        name: HeaderName,
        value: Result<HeaderValue, http::header::InvalidHeaderValue>,
        sensitive: bool,
    ) -> UpstreamRequest {
        match value {
            Ok(mut value) => {
                value.set_sensitive(sensitive);
                self.headers.insert(name, value);
            }
            Err(_) => self.invalid_header = Some(name),
        }
        self
    }
}

/// A request body as the parts it goes out in. A passthrough body is the client's own bytes
/// with `model` spliced in: parts that share the client's buffer, sent with one vectored
/// write, where joining them copied the whole body (131k instructions at 128 KB).
#[derive(Clone, Default)]
pub struct OutBody {
    parts: VecDeque<Bytes>,
}

impl OutBody {
    /// Room for `parts` parts before it grows.
    pub fn with_capacity(parts: usize) -> OutBody {
        OutBody {
            parts: VecDeque::with_capacity(parts),
        }
    }

    /// Adds `part` at the end, unless it is empty.
    pub fn push(&mut self, part: Bytes) {
        if !part.is_empty() {
            self.parts.push_back(part);
        }
    }

    /// Its length in bytes.
    pub fn len(&self) -> usize {
        self.parts.iter().map(Bytes::len).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.parts.is_empty()
    }

    /// The body in one buffer, for those who read it whole (tests, the fuzzer).
    pub fn to_bytes(&self) -> Bytes {
        match self.parts.len() {
            0 => Bytes::new(),
            1 => self.parts[0].clone(),
            _ => {
                let mut joined = BytesMut::with_capacity(self.len());
                self.parts
                    .iter()
                    .for_each(|part| joined.extend_from_slice(part));
                joined.freeze()
            }
        }
    }
}

impl From<Bytes> for OutBody {
    fn from(bytes: Bytes) -> OutBody {
        let mut body = OutBody::with_capacity(1);
        body.push(bytes);
        body
    }
}

/// The parts' lengths only, as [`UpstreamRequest`]'s `Debug` shows no body.
impl fmt::Debug for OutBody {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list()
            .entries(self.parts.iter().map(Bytes::len))
            .finish()
    }
}

/// Each part is one frame; the length is exact, so the request carries `content-length`.
impl Body for OutBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        _: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        Poll::Ready(self.parts.pop_front().map(|part| Ok(Frame::data(part))))
    }

    fn is_end_stream(&self) -> bool {
        self.parts.is_empty()
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::with_exact(self.len() as u64)
    }
}

/// Header names and the URI only: values may carry a key.
impl fmt::Debug for UpstreamRequest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("UpstreamRequest")
            .field("method", &self.method)
            .field("uri", &self.uri)
            .field("headers", &self.headers.keys().collect::<Vec<_>>())
            .field("body_bytes", &self.body.len())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_never_shows_a_header_value() {
        let request = UpstreamRequest::post("http://x/v1".into(), Bytes::new(), true)
            .bearer("sk-secret-one")
            .secret_header(HeaderName::from_static("x-api-key"), "sk-secret-two")
            .header(HeaderName::from_static("anthropic-version"), "2023-06-01");
        let shown = format!("{request:?}");
        assert!(!shown.contains("secret"), "{shown}");
        assert!(!shown.contains("2023"), "{shown}");
        assert!(shown.contains("x-api-key"), "{shown}");
        assert!(request.headers[AUTHORIZATION].is_sensitive());
        assert_eq!(request.headers[ACCEPT], "text/event-stream");
    }

    #[test]
    fn an_invalid_value_marks_the_request_unsendable() {
        let request = UpstreamRequest::post("http://x".into(), Bytes::new(), false)
            .header(HeaderName::from_static("anthropic-beta"), "a\nb");
        assert_eq!(
            request.invalid().map(HeaderName::as_str),
            Some("anthropic-beta")
        );
        assert!(request.headers.get("anthropic-beta").is_none());
    }
}
