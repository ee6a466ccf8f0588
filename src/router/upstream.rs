//! The two attempters the chain runs: one for whole JSON answers, one for streams up to
//! their commit point (a 2xx and its first event).

use std::pin::Pin;
use std::time::Duration;

use bytes::Bytes;
use futures_util::Stream;
use serde_json::{Map, Value};
use tokio::time::{Instant, timeout};

use super::chain::{Attempt, Attempter, Failure, UpstreamReply};
use super::classify::{FailureClass, classify_status, classify_transport};
use crate::config::{Deployment, Provider};
use crate::keys::KeyLease;
use crate::providers::openai::{self, ChunkKind};
use crate::providers::sse::{SseError, SseEvent, SseReader};
use crate::providers::{self, Usage};

/// An upstream body as a stream of byte chunks.
pub type ByteStream = Pin<Box<dyn Stream<Item = Result<Bytes, reqwest::Error>> + Send>>;

/// A whole answer that served.
pub struct JsonReply {
    pub reply: UpstreamReply,
    pub usage: Option<Usage>,
}

/// A stream that committed: its first event, and the reader for the rest.
pub struct CommittedStream {
    pub first: SseEvent,
    pub first_usage: Option<Usage>,
    pub reader: SseReader<ByteStream>,
    /// Whether the gateway added `include_usage`, so the usage chunk is not the client's.
    pub strip_usage: bool,
}

/// Makes non-streamed attempts.
pub struct JsonAttempter<'a> {
    pub client: &'a reqwest::Client,
    pub request: Map<String, Value>,
    pub fallback_on_context_length: bool,
    /// Reading a whole body may not run past the request's deadline.
    pub deadline: Instant,
}

impl Attempter for JsonAttempter<'_> {
    type Output = JsonReply;

    async fn attempt(
        &mut self,
        step: &Deployment,
        provider: &Provider,
        key: Option<&KeyLease>,
        attempt_timeout: Duration,
    ) -> Attempt<JsonReply> {
        let (body, _) = openai::encode_body(&mut self.request, step.model.as_str(), false);
        let request = providers::chat_request(self.client, provider, key, body, false);
        let response = match timeout(attempt_timeout, request.send()).await {
            Err(_) => return failed(FailureClass::Timeout),
            Ok(Err(e)) => return failed(classify_transport(&e)),
            Ok(Ok(response)) => response,
        };
        let status = response.status();
        let headers = response.headers().clone();
        let body_time = self.deadline.saturating_duration_since(Instant::now());
        let body = match timeout(body_time, response.bytes()).await {
            Err(_) => return failed(FailureClass::Timeout),
            Ok(Err(e)) => return failed(classify_transport(&e)),
            Ok(Ok(body)) => body,
        };
        let reply = UpstreamReply {
            status,
            content_type: headers.get(reqwest::header::CONTENT_TYPE).cloned(),
            body,
        };
        if status.is_success() {
            return match openai::probe_completion(&reply.body) {
                Some(usage) => Attempt::Served(JsonReply { reply, usage }),
                None => failed(FailureClass::Malformed),
            };
        }
        let (class, action) = classify_status(
            status,
            &headers,
            &reply.body,
            self.fallback_on_context_length,
        );
        Attempt::Failed(Failure {
            class,
            action,
            reply: Some(reply),
        })
    }
}

/// Makes streamed attempts, each up to its first event.
pub struct StreamAttempter<'a> {
    pub client: &'a reqwest::Client,
    pub request: Map<String, Value>,
    pub fallback_on_context_length: bool,
}

impl Attempter for StreamAttempter<'_> {
    type Output = CommittedStream;

    async fn attempt(
        &mut self,
        step: &Deployment,
        provider: &Provider,
        key: Option<&KeyLease>,
        attempt_timeout: Duration,
    ) -> Attempt<CommittedStream> {
        let (body, strip_usage) = openai::encode_body(&mut self.request, step.model.as_str(), true);
        let request = providers::chat_request(self.client, provider, key, body, true);
        let fallback_on_context_length = self.fallback_on_context_length;
        // The attempt timeout runs to the first event, not just to the headers.
        let commit = async move {
            let response = request
                .send()
                .await
                .map_err(|e| Failure::without_reply(classify_transport(&e)))?;
            let status = response.status();
            if !status.is_success() {
                let headers = response.headers().clone();
                let body = response.bytes().await.unwrap_or_default();
                let (class, action) =
                    classify_status(status, &headers, &body, fallback_on_context_length);
                let content_type = headers.get(reqwest::header::CONTENT_TYPE).cloned();
                return Err(Failure {
                    class,
                    action,
                    reply: Some(UpstreamReply {
                        status,
                        content_type,
                        body,
                    }),
                });
            }
            let bytes: ByteStream = Box::pin(response.bytes_stream());
            let mut reader = SseReader::new(bytes);
            let (first, first_usage) = first_event(&mut reader).await?;
            Ok(CommittedStream {
                first,
                first_usage,
                reader,
                strip_usage,
            })
        };
        match timeout(attempt_timeout, commit).await {
            Err(_) => failed(FailureClass::Timeout),
            Ok(Err(failure)) => Attempt::Failed(failure),
            Ok(Ok(stream)) => Attempt::Served(stream),
        }
    }
}

/// Reads up to the first event with content; keep-alive comments before it are dropped.
async fn first_event(
    reader: &mut SseReader<ByteStream>,
) -> Result<(SseEvent, Option<Usage>), Failure> {
    loop {
        let event = match reader.next_event().await {
            Ok(Some(event)) => event,
            Ok(None) | Err(SseError::Transport(_)) => {
                return Err(Failure::without_reply(FailureClass::Reset));
            }
            Err(_) => return Err(Failure::without_reply(FailureClass::Malformed)),
        };
        if event.data.is_empty() {
            continue;
        }
        return match openai::probe_chunk(&event.data) {
            Some((ChunkKind::Content | ChunkKind::UsageOnly(_), usage)) => Ok((event, usage)),
            // An error before any content: nothing reached the client, so another step may serve.
            Some((ChunkKind::Error, _)) => Err(Failure::without_reply(FailureClass::ServerError)),
            Some((ChunkKind::Done, _)) | None => {
                Err(Failure::without_reply(FailureClass::Malformed))
            }
        };
    }
}

fn failed<T>(class: FailureClass) -> Attempt<T> {
    Attempt::Failed(Failure::without_reply(class))
}
