//! A Responses stream from a provider that speaks the Responses API: every event's bytes as
//! they came, watched for the usage, the terminal event and in-stream failures; an event whose
//! Response lacks a field every Response holds is completed first (see [`spec`]).

mod probe;

use bytes::Bytes;
use serde_json::{Map, Value};

use super::object::usage_counts;
use super::sink::error_event;
use super::spec;
use crate::providers::sse::SseEvent;
use crate::providers::stream::{StreamState, StreamTranslator, Translated, named_event};
use crate::providers::{RequestBody, Usage};
use probe::EventProbe;

/// Forwards a Responses stream.
pub struct Passthrough {
    /// The next sequence number, for an error event the gateway adds.
    next_sequence: u64,
    /// The client's request, whose settings complete a Response that lacks them.
    request: Bytes,
    /// Those settings, read from `request` when a Response first lacks one.
    settings: Option<Map<String, Value>>,
}

impl Passthrough {
    /// Forwards the stream that answers `request` (the client's body).
    pub fn new(request: Bytes) -> Passthrough {
        Passthrough {
            next_sequence: 0,
            request,
            settings: None,
        }
    }

    /// Whether the client continued a turn: its body is read whole only if it names one.
    fn continues(&mut self) -> bool {
        if memchr::memmem::find(&self.request, b"\"previous_response_id\"").is_none() {
            return false;
        }
        let settings = self
            .settings
            .get_or_insert_with(|| request_settings(&self.request));
        spec::continues(settings)
    }

    /// The event with its Response completed; as it came if that cannot be done.
    fn completed(&mut self, event: &SseEvent, kind: &str) -> Bytes {
        let Ok(mut data) = serde_json::from_str::<Value>(event.data()) else {
            return event.raw.clone();
        };
        let Some(Value::Object(response)) = data.get_mut("response") else {
            return event.raw.clone();
        };
        let settings = self
            .settings
            .get_or_insert_with(|| request_settings(&self.request));
        spec::complete(response, settings);
        named_event(kind, &data)
    }
}

/// The settings a Response echoes, as `request` (a client's body) set them.
fn request_settings(request: &Bytes) -> Map<String, Value> {
    let Ok(body) = RequestBody::parse(request.clone()) else {
        return Map::new();
    };
    spec::ECHOED
        .iter()
        .filter_map(|field| Some(((*field).to_owned(), body.field_as::<Value>(field)?)))
        .collect()
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
        let failed = matches!(probe.kind.as_str(), "response.failed" | "error");
        // A Response naming no previous turn is built again only when the client named one.
        let unnamed = probe.response.as_ref().is_some_and(|r| r.no_previous) && self.continues();
        let lacking = !failed && (unnamed || probe.response.as_ref().is_some_and(|r| r.lacking));
        let forward = if lacking {
            vec![self.completed(event, &probe.kind)]
        } else {
            vec![event.raw.clone()]
        };
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

/// Checks a whole Response object, completes what it lacks with `request`'s settings (its
/// bytes as they came when it lacks nothing), and reads its usage; `None` when it is not one.
pub fn whole(body: &Bytes, request: &Map<String, Value>) -> Option<(Bytes, Option<Usage>)> {
    let Value::Object(mut response) = serde_json::from_slice(body).ok()? else {
        return None;
    };
    if response.get("object").and_then(Value::as_str) != Some("response") {
        return None;
    }
    let usage = response.get("usage").and_then(usage_counts);
    let unnamed = spec::continues(request)
        && response
            .get("previous_response_id")
            .is_none_or(Value::is_null);
    if !unnamed && !spec::lacks_any(&response) {
        return Some((body.clone(), usage));
    }
    spec::complete(&mut response, request);
    Some((Bytes::from(Value::Object(response).to_string()), usage))
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
    use serde_json::json;

    /// A Response holding every field, with `extra` over them.
    fn response(extra: Value) -> Value {
        let mut response = Map::new();
        for field in spec::ECHOED.iter().chain(&spec::STATE) {
            response.insert((*field).into(), spec::unset(field));
        }
        response.insert("object".into(), json!("response"));
        for (field, value) in extra.as_object().into_iter().flatten() {
            response.insert(field.clone(), value.clone());
        }
        Value::Object(response)
    }

    fn response_event(kind: &str, sequence: u64, response: Value) -> SseEvent {
        let data = json!({"type": kind, "sequence_number": sequence, "response": response});
        event(Some(kind), &data.to_string())
    }

    #[test]
    fn forwards_events_and_turns_a_failure_into_an_error_event() {
        let created = response_event("response.created", 0, response(json!({"usage": null})));
        let completed = response_event(
            "response.completed",
            1,
            response(json!({"usage": {"input_tokens": 4, "output_tokens": 2}})),
        );
        let (frames, state, usage) = run(
            &mut Passthrough::new(Bytes::new()),
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
        let mut passthrough = Passthrough::new(Bytes::new());
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
            run(&mut Passthrough::new(Bytes::new()), &[], true).1,
            StreamState::Truncated
        );
    }

    #[test]
    fn a_response_lacking_fields_is_completed_from_the_request() {
        let request = Bytes::from(r#"{"model":"m","input":"Hi","max_tool_calls":2}"#);
        let mut lacking =
            response(json!({"temperature": 0.2, "tools": [{"type": "function", "name": "f"}]}));
        for field in ["max_tool_calls", "service_tier", "completed_at"] {
            lacking.as_object_mut().unwrap().remove(field);
        }
        let created = response_event("response.created", 0, lacking.clone());
        let delta = event(
            Some("response.output_text.delta"),
            r#"{"type":"response.output_text.delta","sequence_number":1,"delta":"Hi"}"#,
        );
        let (frames, state, _) = run(
            &mut Passthrough::new(request.clone()),
            &[created, delta.clone()],
            false,
        );
        assert_eq!(state, StreamState::Open);
        assert_eq!(
            frames[1], delta.raw,
            "an event with no Response is as it came"
        );
        let sent = &payloads(&frames)[0];
        assert_eq!(sent["type"], "response.created");
        assert_eq!(sent["sequence_number"], 0);
        let completed = sent["response"].as_object().unwrap();
        assert!(!spec::lacks_any(completed));
        assert_eq!(completed["max_tool_calls"], 2, "the request's setting");
        assert_eq!(completed["service_tier"], "default");
        assert_eq!(completed["temperature"], 0.2, "the provider's own");
        assert_eq!(completed["tools"][0]["strict"], Value::Null);

        let body = Bytes::from(lacking.to_string());
        let settings = request_settings(&request);
        let (sent, _) = whole(&body, &settings).unwrap();
        let sent: Value = serde_json::from_slice(&sent).unwrap();
        assert_eq!(sent["max_tool_calls"], 2);
        let complete = Bytes::from(format!(" {} ", response(json!({}))));
        assert_eq!(
            whole(&complete, &settings).unwrap().0,
            complete,
            "as it came"
        );
        assert!(whole(&Bytes::from("[]"), &settings).is_none());
    }
}
