//! A Responses stream from a provider that speaks the Responses API: every event's bytes as
//! they came, watched for the usage, the terminal event and in-stream failures.

use bytes::Bytes;
use serde::Deserialize;
use serde_json::Value;

use super::object::usage_counts;
use super::sink::error_event;
use crate::providers::Usage;
use crate::providers::sse::SseEvent;
use crate::providers::stream::{StreamState, StreamTranslator, Translated};

#[derive(Deserialize)]
struct EventProbe {
    #[serde(rename = "type")]
    kind: String,
    sequence_number: Option<u64>,
    response: Option<ResponseProbe>,
    message: Option<String>,
    error: Option<Value>,
}

#[derive(Deserialize)]
struct ResponseProbe {
    usage: Option<Value>,
    error: Option<Value>,
}

/// Forwards a Responses stream.
#[derive(Default)]
pub struct Passthrough {
    /// The next sequence number, for an error event the gateway adds.
    next_sequence: u64,
}

impl StreamTranslator for Passthrough {
    fn event(&mut self, event: &SseEvent) -> Translated {
        let Ok(probe) = serde_json::from_str::<EventProbe>(event.data()) else {
            return state(Vec::new(), None, StreamState::Malformed);
        };
        let usage = probe
            .response
            .as_ref()
            .and_then(|r| r.usage.as_ref())
            .and_then(usage_counts);
        let forward = vec![event.raw.clone()];
        let failed = matches!(probe.kind.as_str(), "response.failed" | "error");
        // The gateway's `error` event takes a failure's place, right after the last event
        // the client got.
        if let Some(sequence) = probe.sequence_number.filter(|_| !failed) {
            self.next_sequence = sequence + 1;
        }
        match probe.kind.as_str() {
            "response.completed" | "response.incomplete" => {
                state(forward, usage, StreamState::Done)
            }
            // The provider's failure: the client gets the gateway's `error` event, which
            // every official SDK raises as its own error.
            "response.failed" | "error" => {
                let message = failure_message(&probe);
                let frame = error_event(self.next_sequence, &message, "upstream_error");
                state(
                    vec![frame],
                    usage,
                    StreamState::UpstreamError {
                        overloaded: false,
                        message,
                    },
                )
            }
            _ => state(forward, usage, StreamState::Open),
        }
    }

    fn end(&mut self) -> Translated {
        state(Vec::new(), None, StreamState::Truncated)
    }

    fn error_event(&self, message: &str, code: &str) -> Bytes {
        error_event(self.next_sequence, message, code)
    }
}

fn state(frames: Vec<Bytes>, usage: Option<Usage>, state: StreamState) -> Translated {
    Translated {
        frames,
        usage,
        state,
    }
}

fn failure_message(probe: &EventProbe) -> String {
    let nested = |error: Option<&Value>| {
        error
            .and_then(|e| e.get("message"))
            .and_then(Value::as_str)
            .map(str::to_owned)
    };
    probe
        .message
        .clone()
        .or_else(|| nested(probe.error.as_ref()))
        .or_else(|| nested(probe.response.as_ref().and_then(|r| r.error.as_ref())))
        .unwrap_or_else(|| "the provider failed mid-stream".into())
}

/// Checks a whole Response object and reads its usage; `None` when it is not one.
pub fn probe_response(body: &[u8]) -> Option<Option<Usage>> {
    let response: Value = serde_json::from_slice(body).ok()?;
    if response.get("object").and_then(Value::as_str) != Some("response") {
        return None;
    }
    Some(response.get("usage").and_then(usage_counts))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::providers::stream::testing::{event, payloads, run};

    #[test]
    fn forwards_events_and_turns_a_failure_into_an_error_event() {
        let created = event(
            Some("response.created"),
            r#"{"type":"response.created","sequence_number":0,"response":{"usage":null}}"#,
        );
        let completed = event(
            Some("response.completed"),
            r#"{"type":"response.completed","sequence_number":1,"response":{"usage":{"input_tokens":4,"output_tokens":2}}}"#,
        );
        let (frames, state, usage) = run(
            &mut Passthrough::default(),
            &[created.clone(), completed.clone()],
            false,
        );
        assert_eq!(frames, vec![created.raw.clone(), completed.raw]);
        assert_eq!(state, StreamState::Done);
        assert_eq!(usage.map(|u| u.completion_tokens), Some(2));

        let failed = event(
            Some("response.failed"),
            r#"{"type":"response.failed","sequence_number":1,"response":{"error":{"code":"server_error","message":"boom"}}}"#,
        );
        let mut passthrough = Passthrough::default();
        let (_, state, _) = run(&mut passthrough, &[created, failed], false);
        assert_eq!(
            state,
            StreamState::UpstreamError {
                overloaded: false,
                message: "boom".into()
            }
        );
        let error = payloads(&[passthrough.error_event("boom", "upstream_error")]);
        assert_eq!(error[0]["sequence_number"], 1, "in place of the failure");
        assert_eq!(
            run(&mut Passthrough::default(), &[], true).1,
            StreamState::Truncated
        );
    }
}
