//! The two attempters the chain runs: one for whole JSON answers, one for streams up to
//! their commit point (a 2xx and its first event). Each step's provider adapter encodes the
//! client's request and turns the answer back into the client's format.

mod client;
mod pool;
pub mod scrub;

use std::pin::Pin;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use futures_util::Stream;
use http::StatusCode;
use http::header::{HeaderName, HeaderValue};
use http_body_util::BodyExt;
use hyper::body::Body as _;
use tokio::time::{Instant, timeout};

use super::chain::{Attempt, Attempter, Failure, UpstreamReply};
use super::classify::{Action, FailureClass, classify_status};
use crate::config::{Deployment, Provider, ProviderKind};
use crate::keys::KeyLease;
use crate::providers::sse::{SseError, SseReader};
use crate::providers::{
    self, Adapter, ClientRequest, Rejection, StreamState, StreamTranslator, Target, Usage,
};
use crate::telemetry::trace::Propagation;
use opentelemetry::trace::SpanId;
use scrub::{ScrubbedReader, Scrubber};

/// An upstream body as a stream of byte chunks.
pub type ByteStream = Pin<Box<dyn Stream<Item = Result<Bytes, hyper::Error>> + Send>>;

pub use client::{
    ClientError, TransportError, UpstreamBody, UpstreamClient, UpstreamResponse,
    drop_this_threads_pools,
};

/// A whole answer that served, in the client's format.
pub struct JsonReply {
    pub reply: UpstreamReply,
    pub usage: Option<Usage>,
}

/// A stream that committed: the client's events for its first upstream event, and the
/// reader and translator for the rest. The reader scrubs the attempt's key from every event.
pub struct CommittedStream {
    /// The provider's own id of the request, for `x-switchyard-upstream-request-id`.
    pub upstream_request_id: Option<HeaderValue>,
    pub first: Vec<Bytes>,
    pub first_usage: Option<Usage>,
    pub reader: ScrubbedReader,
    pub translator: Box<dyn StreamTranslator>,
}

/// Makes non-streamed attempts.
pub struct JsonAttempter<'a> {
    pub client: &'a UpstreamClient,
    pub request: ClientRequest,
    pub fallback_on_context_length: bool,
    /// Reading a whole body may not run past the request's deadline.
    pub deadline: Instant,
    /// The most of an answer read (`[server] max_upstream_body_bytes`).
    pub max_body_bytes: usize,
    /// The request's trace context, sent with each attempt.
    pub propagation: Propagation,
}

impl Attempter for JsonAttempter<'_> {
    type Output = JsonReply;

    async fn attempt(
        &self,
        step: &Deployment,
        provider: &Provider,
        key: Option<&KeyLease>,
        attempt_timeout: Duration,
        span: SpanId,
    ) -> Attempt<JsonReply> {
        let key = AttemptKey { key, span };
        keyed(self, self.client, step, provider, key, attempt_timeout).await
    }
}

impl Sends for JsonAttempter<'_> {
    type Output = JsonReply;

    async fn send(
        &self,
        step: &Deployment,
        provider: &Provider,
        key: Option<&KeyLease>,
        attempt_timeout: Duration,
        span: SpanId,
    ) -> Attempt<JsonReply> {
        let adapter = providers::adapter_for(provider, step.model.as_str(), self.request.operation);
        let target = Target {
            provider,
            key,
            model: step.model.as_str(),
        };
        let built = adapter.request(&target, &self.request, false);
        // Asked after building: only a translation reads the tree, and it read an empty one.
        if let Some(why) = self.request.body.unreadable() {
            return rejected(&self.request, unreadable(why));
        }
        let mut request = match built {
            Ok(request) => request.over_http2(provider.http2),
            Err(rejection) => return rejected(&self.request, rejection),
        };
        self.propagation.inject(&mut request.headers, span);
        forward(&mut request.headers, &self.request, provider);
        let scrubber = Scrubber::for_key(key);
        let response = match timeout(attempt_timeout, self.client.send(request)).await {
            Err(_) => return failed(FailureClass::Timeout),
            Ok(Err(e)) => return failed(classify_transport(&e)),
            Ok(Ok(response)) => response,
        };
        let (head, incoming) = response.into_parts();
        let (status, headers) = (head.status, head.headers);
        let body_time = self.deadline.saturating_duration_since(Instant::now());
        let body = match timeout(body_time, read_capped(incoming, self.max_body_bytes)).await {
            Err(_) => return failed(FailureClass::Timeout),
            Ok(Err(class)) => return failed(class),
            Ok(Ok(body)) => scrubber.bytes(body),
        };
        if status.is_success() {
            return match adapter.decode(&self.request, &body) {
                Some(decoded) => Attempt::Served(JsonReply {
                    reply: UpstreamReply {
                        status,
                        content_type: Some(HeaderValue::from_static("application/json")),
                        body: decoded.body,
                        upstream_request_id: upstream_request_id(&headers, &scrubber),
                    },
                    usage: decoded.usage,
                }),
                None => failed(FailureClass::Malformed),
            };
        }
        let (class, action) =
            classify_status(status, &headers, &body, self.fallback_on_context_length);
        Attempt::Failed(Failure {
            class,
            action,
            reply: Some(error_reply(
                adapter,
                &self.request,
                status,
                &headers,
                body,
                &scrubber,
            )),
        })
    }
}

/// Reads a whole upstream body, failing as `Oversized` past `limit` bytes. A declared length
/// over it is refused on the headers; an undeclared one is read chunk by chunk and dropped
/// at the cap, so an answer too large is never held whole.
async fn read_capped(mut incoming: UpstreamBody, limit: usize) -> Result<Bytes, FailureClass> {
    // Hyper's exact size hint is the `content-length` it framed the body by.
    let declared = incoming.size_hint().exact();
    if declared.is_some_and(|length| length > limit as u64) {
        return Err(FailureClass::Oversized);
    }
    let mut body = BytesMut::with_capacity(declared.map_or(0, |length| length as usize));
    while let Some(frame) = incoming.frame().await {
        let frame = frame.map_err(|e| classify_transport(&TransportError::Body(e)))?;
        // Trailers carry nothing the gateway reads.
        let Ok(chunk) = frame.into_data() else {
            continue;
        };
        if body.len() + chunk.len() > limit {
            return Err(FailureClass::Oversized);
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body.freeze())
}

/// An upstream error answer, its body in the client's shape when the formats differ. The
/// body comes scrubbed; the one header passed on is scrubbed here.
fn error_reply(
    adapter: &dyn Adapter,
    request: &ClientRequest,
    status: StatusCode,
    headers: &http::header::HeaderMap,
    body: Bytes,
    scrubber: &Scrubber,
) -> UpstreamReply {
    match adapter.error_body(request, status, &body) {
        Some(translated) => UpstreamReply {
            status,
            content_type: Some(HeaderValue::from_static("application/json")),
            body: translated,
            upstream_request_id: upstream_request_id(headers, scrubber),
        },
        None => UpstreamReply {
            status,
            content_type: headers
                .get(http::header::CONTENT_TYPE)
                .map(|value| scrubber.header(value.clone())),
            body,
            upstream_request_id: upstream_request_id(headers, scrubber),
        },
    }
}

/// The provider's id of the request: `request-id` (Anthropic), `x-request-id` (OpenAI and
/// most compatible servers), `apim-request-id` (Azure), scrubbed like any header passed on.
fn upstream_request_id(
    headers: &http::header::HeaderMap,
    scrubber: &Scrubber,
) -> Option<HeaderValue> {
    // Names, not `&str`s: looking a `&str` up parses it into a name each time.
    const NAMES: [HeaderName; 3] = [
        HeaderName::from_static("request-id"),
        HeaderName::from_static("x-request-id"),
        HeaderName::from_static("apim-request-id"),
    ];
    NAMES
        .iter()
        .find_map(|name| headers.get(name))
        .map(|value| scrubber.header(value.clone()))
}

/// A field the step's provider cannot carry: the client's 400, no other step tried, since
/// the same request would fare no better elsewhere in a chain meant to be interchangeable.
/// A body a translation could not read as a tree (valid JSON all the same, so only an
/// attempt that translates finds out): refused, as any field the step cannot carry.
fn unreadable(why: &str) -> Rejection {
    Rejection {
        message: format!("the request body cannot be translated for this step: {why}"),
        param: None,
    }
}

fn rejected<T>(request: &ClientRequest, rejection: Rejection) -> Attempt<T> {
    let status = StatusCode::BAD_REQUEST;
    let body = providers::error_body(
        request.format,
        status,
        &rejection.message,
        "untranslatable_field",
        rejection.param.as_deref(),
    );
    Attempt::Failed(Failure {
        class: FailureClass::BadRequest,
        action: Action::ReturnToClient,
        reply: Some(UpstreamReply {
            status,
            content_type: Some(HeaderValue::from_static("application/json")),
            body,
            upstream_request_id: None,
        }),
    })
}

/// Sends on the client headers `provider`'s `forward_headers` names; a header the adapter
/// set itself is kept.
fn forward(headers: &mut http::HeaderMap, request: &ClientRequest, provider: &Provider) {
    for (name, value) in &request.forwarded {
        if provider.forward_headers.contains(name) && !headers.contains_key(name) {
            headers.insert(name.clone(), value.clone());
        }
    }
}

/// Makes streamed attempts, each up to its first event.
pub struct StreamAttempter<'a> {
    pub client: &'a UpstreamClient,
    pub request: ClientRequest,
    pub fallback_on_context_length: bool,
    /// The most of an error answer read (`[server] max_upstream_body_bytes`).
    pub max_body_bytes: usize,
    /// The longest event read (`[server] max_sse_event_bytes`).
    pub max_event_bytes: usize,
    /// The request's trace context, sent with each attempt.
    pub propagation: Propagation,
}

impl Attempter for StreamAttempter<'_> {
    type Output = CommittedStream;

    /// A committed stream can still break mid-answer; its forwarder gives the verdict.
    fn judged_when_served(&self) -> bool {
        false
    }

    async fn attempt(
        &self,
        step: &Deployment,
        provider: &Provider,
        key: Option<&KeyLease>,
        attempt_timeout: Duration,
        span: SpanId,
    ) -> Attempt<CommittedStream> {
        let key = AttemptKey { key, span };
        keyed(self, self.client, step, provider, key, attempt_timeout).await
    }
}

impl Sends for StreamAttempter<'_> {
    type Output = CommittedStream;

    async fn send(
        &self,
        step: &Deployment,
        provider: &Provider,
        key: Option<&KeyLease>,
        attempt_timeout: Duration,
        span: SpanId,
    ) -> Attempt<CommittedStream> {
        let adapter = providers::adapter_for(provider, step.model.as_str(), self.request.operation);
        let target = Target {
            provider,
            key,
            model: step.model.as_str(),
        };
        let built = adapter.request(&target, &self.request, true);
        // Asked after building: only a translation reads the tree, and it read an empty one.
        if let Some(why) = self.request.body.unreadable() {
            return rejected(&self.request, unreadable(why));
        }
        let mut request = match built {
            Ok(request) => request.over_http2(provider.http2),
            Err(rejection) => return rejected(&self.request, rejection),
        };
        self.propagation.inject(&mut request.headers, span);
        forward(&mut request.headers, &self.request, provider);
        let scrubber = Scrubber::for_key(key);
        let mut translator = adapter.stream(&self.request);
        let client_request = &self.request;
        let fallback_on_context_length = self.fallback_on_context_length;
        let (max_body_bytes, max_event_bytes) = (self.max_body_bytes, self.max_event_bytes);
        // The attempt timeout runs to the first event, not just to the headers.
        let client = self.client;
        let commit = async move {
            let response = client
                .send(request)
                .await
                .map_err(|e| Failure::without_reply(classify_transport(&e)))?;
            let (head, incoming) = response.into_parts();
            let status = head.status;
            if !status.is_success() {
                let headers = head.headers;
                let body = scrubber.bytes(
                    read_capped(incoming, max_body_bytes)
                        .await
                        .unwrap_or_default(),
                );
                let (class, action) =
                    classify_status(status, &headers, &body, fallback_on_context_length);
                let reply = error_reply(adapter, client_request, status, &headers, body, &scrubber);
                return Err(Failure {
                    class,
                    action,
                    reply: Some(reply),
                });
            }
            let upstream_request_id = upstream_request_id(&head.headers, &scrubber);
            let mut bytes: ByteStream = Box::pin(incoming.into_data_stream());
            if provider.kind == ProviderKind::Bedrock {
                bytes = Box::pin(providers::bedrock::frames::as_sse(bytes));
            }
            let mut reader = ScrubbedReader::new(SseReader::new(bytes, max_event_bytes), scrubber);
            let (first, first_usage) = first_event(&mut reader, translator.as_mut()).await?;
            Ok(CommittedStream {
                upstream_request_id,
                first,
                first_usage,
                reader,
                translator,
            })
        };
        match timeout(attempt_timeout, commit).await {
            Err(_) => failed(FailureClass::Timeout),
            Ok(Err(failure)) => Attempt::Failed(failure),
            Ok(Ok(stream)) => Attempt::Served(stream),
        }
    }
}

/// Reads up to the first event with content; keep-alives before it are dropped.
async fn first_event(
    reader: &mut ScrubbedReader,
    translator: &mut dyn StreamTranslator,
) -> Result<(Vec<Bytes>, Option<Usage>), Failure> {
    loop {
        let event = match reader.next_event().await {
            Ok(Some(event)) => event,
            Ok(None) | Err(SseError::Transport(_)) => {
                return Err(Failure::without_reply(FailureClass::Reset));
            }
            Err(SseError::TooLong) => {
                return Err(Failure::without_reply(FailureClass::Oversized));
            }
            Err(_) => return Err(Failure::without_reply(FailureClass::Malformed)),
        };
        if event.data_bytes().is_empty() {
            continue;
        }
        let translated = translator.event(&event);
        return match translated.state {
            StreamState::KeepAlive => continue,
            StreamState::Open => Ok((translated.frames, translated.usage)),
            // An error before any content: nothing reached the client, so another step may
            // serve. Anthropic's `overloaded_error` is its 529, said inside a stream.
            StreamState::UpstreamError { overloaded, .. } => {
                let class = if overloaded {
                    FailureClass::Overloaded
                } else {
                    FailureClass::ServerError
                };
                Err(Failure::without_reply(class))
            }
            StreamState::Done | StreamState::Malformed | StreamState::Truncated => {
                Err(Failure::without_reply(FailureClass::Malformed))
            }
        };
    }
}

/// One attempt with a given key: what each attempter does, and a Vertex step does with its
/// access token as the key.
trait Sends {
    type Output;

    fn send(
        &self,
        step: &Deployment,
        provider: &Provider,
        key: Option<&KeyLease>,
        attempt_timeout: Duration,
        span: SpanId,
    ) -> impl std::future::Future<Output = Attempt<Self::Output>> + Send;
}

/// The key an attempt was given, and its span.
struct AttemptKey<'k> {
    key: Option<&'k KeyLease>,
    span: SpanId,
}

/// An attempt with the key it was given; a Vertex step's, with the provider's access token,
/// and a Bedrock step's with no stored key, with its AWS credentials.
async fn keyed<A: Sends + Sync>(
    attempter: &A,
    client: &UpstreamClient,
    step: &Deployment,
    provider: &Provider,
    AttemptKey { key, span }: AttemptKey<'_>,
    attempt_timeout: Duration,
) -> Attempt<A::Output> {
    if provider.vertex.is_some() || (provider.bedrock.is_some() && key.is_none()) {
        // Boxed: only these steps wait for credentials, and inline it made every attempt's
        // future larger.
        let sent = with_cloud_credentials(attempter, client, step, provider, attempt_timeout, span);
        return Box::pin(sent).await;
    }
    attempter
        .send(step, provider, key, attempt_timeout, span)
        .await
}

/// A Vertex or Bedrock attempt: the provider's access token or AWS credentials as its key,
/// within the attempt's time, or the step has no usable key. Credentials the provider refuses
/// are dropped, so the next attempt gets fresh ones rather than the same refusal until they
/// expire.
async fn with_cloud_credentials<A: Sends + Sync>(
    attempter: &A,
    client: &UpstreamClient,
    step: &Deployment,
    provider: &Provider,
    attempt_timeout: Duration,
    span: SpanId,
) -> Attempt<A::Output> {
    let started = Instant::now();
    let leased = async {
        if provider.bedrock.is_some() {
            client.aws.lease(provider).await.map_err(|e| e.to_string())
        } else {
            client
                .google
                .lease(provider)
                .await
                .map_err(|e| e.to_string())
        }
    };
    let lease = match timeout(attempt_timeout, leased).await {
        Ok(Ok(lease)) => lease,
        Ok(Err(error)) => {
            tracing::warn!(provider = %provider.id.as_str(), %error, "step skipped: no credentials");
            return failed(FailureClass::NoKey);
        }
        // No credentials in time says nothing of the provider itself: no key, not a timeout
        // its breaker would count.
        Err(_) => return failed(FailureClass::NoKey),
    };
    // The attempt's time covers the credentials and the answer together.
    let left = attempt_timeout.saturating_sub(started.elapsed());
    let attempt = attempter
        .send(step, provider, Some(&lease), left, span)
        .await;
    if let Attempt::Failed(Failure {
        class: FailureClass::Auth,
        reply: Some(reply),
        ..
    }) = &attempt
    {
        if provider.bedrock.is_some() {
            // Bedrock refuses unknown, expired and wrongly signed credentials alike with 403.
            client.aws.refused(provider, &lease);
        } else if reply.status == http::StatusCode::UNAUTHORIZED {
            // For Vertex a 401 is a token refused; a 403 is a permission (a role, the API,
            // billing) that a new token would not change.
            client.google.refused(provider, &lease);
        }
    }
    attempt
}

fn failed<T>(class: FailureClass) -> Attempt<T> {
    Attempt::Failed(Failure::without_reply(class))
}

/// Classifies a transport error from the HTTP client: a connect that timed out is a
/// timeout, as any other; a body cut part way, or a request that could not be sent as
/// built, is a reset.
pub fn classify_transport(error: &TransportError) -> FailureClass {
    if error.is_timeout() {
        FailureClass::Timeout
    } else if error.is_connect() {
        FailureClass::Connect
    } else {
        FailureClass::Reset
    }
}
