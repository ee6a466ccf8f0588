//! Responses API answers in the cache. A kept Response object is served under an id of its
//! own (a hit is a new response, which the caller's conversation state then holds), as JSON
//! or replayed as the Responses stream events; a stream's answer is the Response its
//! `response.completed` event carries.

use bytes::Bytes;
use serde_json::{Map, Value, json};

use crate::providers::responses::object::{item_id, unix_now};
use crate::providers::responses::spec;
use crate::providers::stream::named_event;

/// The kept Response as this hit's own: a fresh id, made now, echoing this request's
/// `store` (which the key leaves out). `None` when it is not one.
pub fn fresh(kept: &[u8], store: bool) -> Option<Value> {
    let mut response: Value = serde_json::from_slice(kept).ok()?;
    let object = response.as_object_mut()?;
    // One kept by an earlier release may lack what a Response now holds.
    if spec::lacks_any(object) {
        spec::complete(object, &Map::new());
    }
    let now = unix_now();
    object.insert("id".into(), json!(item_id("resp")));
    object.insert("created_at".into(), json!(now));
    // Only completed Responses are kept.
    object.insert("completed_at".into(), json!(now));
    object.insert("store".into(), json!(store));
    Some(response)
}

/// Whether a Response is one to keep: completed, not incomplete, failed or cancelled.
pub fn complete(response: &Value) -> bool {
    response["object"] == "response"
        && response["status"] == "completed"
        && response["output"].is_array()
}

/// A Response as the events a stream of it sends: created and in progress, each output item
/// added, its content whole in one delta, done, and completed.
pub fn replay(response: &Value) -> Option<Bytes> {
    let output = response["output"].as_array()?;
    let mut events = Events::default();
    let mut start = response.clone();
    start["status"] = json!("in_progress");
    start["output"] = json!([]);
    if let Some(start) = start.as_object_mut() {
        // Not known yet: left out, as the stream of a served answer leaves it (see `spec`).
        start.remove("usage");
        start.insert("completed_at".into(), Value::Null);
    }
    events.push("response.created", json!({"response": start}));
    events.push("response.in_progress", json!({"response": start}));
    for (index, item) in output.iter().enumerate() {
        let mut added = item.clone();
        added["status"] = json!("in_progress");
        match item["type"].as_str() {
            Some("message") => {
                added["content"] = json!([]);
                events.push(
                    "response.output_item.added",
                    json!({"output_index": index, "item": added}),
                );
                let parts = item["content"].as_array().map_or(&[][..], Vec::as_slice);
                for (part_index, part) in parts.iter().enumerate() {
                    events.part(&item["id"], index, part_index, part);
                }
            }
            Some("function_call") => {
                added["arguments"] = json!("");
                events.push(
                    "response.output_item.added",
                    json!({"output_index": index, "item": added}),
                );
                let at = json!({"item_id": item["id"], "output_index": index});
                events.push(
                    "response.function_call_arguments.delta",
                    with(&at, json!({"delta": item["arguments"]})),
                );
                events.push(
                    "response.function_call_arguments.done",
                    with(
                        &at,
                        json!({"name": item["name"], "arguments": item["arguments"]}),
                    ),
                );
            }
            // Items with no deltas of their own (reasoning, tool results) arrive whole.
            _ => events.push(
                "response.output_item.added",
                json!({"output_index": index, "item": item}),
            ),
        }
        events.push(
            "response.output_item.done",
            json!({"output_index": index, "item": item}),
        );
    }
    events.push("response.completed", json!({"response": response}));
    Some(Bytes::from(events.out))
}

/// Events as they are written, each with the next `sequence_number`.
#[derive(Default)]
struct Events {
    out: Vec<u8>,
    sequence: u64,
}

impl Events {
    fn push(&mut self, kind: &str, mut event: Value) {
        event["type"] = json!(kind);
        event["sequence_number"] = json!(self.sequence);
        self.sequence += 1;
        self.out.extend_from_slice(&named_event(kind, &event));
    }

    /// One content part of message `id`: added empty, its text in one delta, done.
    fn part(&mut self, id: &Value, index: usize, part_index: usize, part: &Value) {
        let at = json!({"item_id": id, "output_index": index, "content_index": part_index});
        let (empty, delta) = match part["type"].as_str() {
            Some("output_text") => (
                json!({"type": "output_text", "text": "", "annotations": []}),
                Some((
                    "response.output_text",
                    json!({"delta": part["text"], "logprobs": []}),
                    json!({"text": part["text"], "logprobs": []}),
                )),
            ),
            Some("refusal") => (
                json!({"type": "refusal", "refusal": ""}),
                Some((
                    "response.refusal",
                    json!({"delta": part["refusal"]}),
                    json!({"refusal": part["refusal"]}),
                )),
            ),
            _ => (part.clone(), None),
        };
        self.push(
            "response.content_part.added",
            with(&at, json!({"part": empty})),
        );
        if let Some((kind, delta, done)) = delta {
            self.push(&format!("{kind}.delta"), with(&at, delta));
            self.push(&format!("{kind}.done"), with(&at, done));
        }
        self.push(
            "response.content_part.done",
            with(&at, json!({"part": part})),
        );
    }
}

/// `fields` added to the object `at`.
fn with(at: &Value, fields: Value) -> Value {
    let mut event = at.clone();
    if let (Some(event), Value::Object(fields)) = (event.as_object_mut(), fields) {
        event.extend(fields);
    }
    event
}

/// A Responses stream's answer: the Response of its `response.completed` event.
#[derive(Default)]
pub struct Completed {
    response: Option<Value>,
}

impl Completed {
    /// Reads one event; false once the stream cannot end in a whole answer.
    pub fn event(&mut self, event: &Value) -> bool {
        match event["type"].as_str() {
            Some("response.completed") => {
                self.response = Some(event["response"].clone());
                true
            }
            Some("error" | "response.failed" | "response.incomplete") => false,
            _ => true,
        }
    }

    pub fn whole(self) -> Option<Value> {
        self.response.filter(complete)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::providers::stream::testing::{names, payloads};

    fn kept() -> Value {
        json!({
            "id": "resp_1", "object": "response", "created_at": 7, "completed_at": 8,
            "status": "completed", "model": "m", "error": null,
            "output": [
                {"id": "msg_1", "type": "message", "role": "assistant", "status": "completed",
                 "content": [{"type": "output_text", "text": "Looking.", "annotations": []}]},
                {"id": "fc_1", "type": "function_call", "call_id": "call_1", "name": "weather",
                 "arguments": "{\"city\":\"Oslo\"}", "status": "completed"}
            ],
            "usage": {"input_tokens": 3, "output_tokens": 5, "total_tokens": 8}
        })
    }

    #[test]
    fn a_hit_is_a_response_of_its_own() {
        let kept = kept();
        let hit = fresh(kept.to_string().as_bytes(), false).unwrap();
        assert_eq!(hit["store"], false);
        assert_ne!(hit["id"], kept["id"]);
        assert!(hit["id"].as_str().unwrap().starts_with("resp_"));
        assert!(hit["created_at"].as_u64().unwrap() > 7);
        assert_eq!(hit["completed_at"], hit["created_at"]);
        assert_eq!(hit["output"], kept["output"]);
        assert_eq!(
            hit["service_tier"], "default",
            "completed where it lacks a field"
        );
        assert_eq!(fresh(b"[1]", true), None);
    }

    #[test]
    fn a_response_replays_as_the_documented_events_with_its_usage() {
        let stream = replay(&kept()).unwrap();
        let frames = std::slice::from_ref(&stream);
        assert_eq!(
            names(frames),
            [
                "response.created",
                "response.in_progress",
                "response.output_item.added",
                "response.content_part.added",
                "response.output_text.delta",
                "response.output_text.done",
                "response.content_part.done",
                "response.output_item.done",
                "response.output_item.added",
                "response.function_call_arguments.delta",
                "response.function_call_arguments.done",
                "response.output_item.done",
                "response.completed"
            ]
        );
        let events = payloads(frames);
        let sequence: Vec<u64> = events
            .iter()
            .map(|e| e["sequence_number"].as_u64().unwrap())
            .collect();
        assert_eq!(sequence, (0..13).collect::<Vec<_>>());
        assert_eq!(events[0]["response"]["status"], "in_progress");
        assert_eq!(events[0]["response"]["output"], json!([]));
        assert_eq!(events[4]["delta"], "Looking.");
        assert_eq!(events[9]["delta"], "{\"city\":\"Oslo\"}");
        assert_eq!(events[12]["response"], kept());

        let mut completed = Completed::default();
        assert!(events.iter().all(|event| completed.event(event)));
        assert_eq!(completed.whole(), Some(kept()), "and reads back whole");
    }

    #[test]
    fn only_a_completed_response_is_kept() {
        let mut incomplete = kept();
        incomplete["status"] = json!("incomplete");
        assert!(!complete(&incomplete));
        assert!(complete(&kept()));
        let mut cut = Completed::default();
        assert!(cut.event(&json!({"type": "response.created"})));
        assert_eq!(cut.whole(), None, "no completed event");
        let mut failed = Completed::default();
        assert!(!failed.event(&json!({"type": "response.failed"})));
    }
}
