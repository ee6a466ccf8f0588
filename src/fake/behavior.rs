//! What a fake upstream does with one request, and the script of them it follows.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// One scripted answer. Every field has a default, so `{}` is a healthy 200.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Behavior {
    /// The status to answer with; 200 when unset.
    pub status: Option<u16>,
    /// Extra response headers, such as `retry-after`.
    pub headers: BTreeMap<String, String>,
    /// How long to wait before sending the headers.
    pub delay_ms: u64,
    /// A raw body to send instead of a generated one.
    pub body: Option<String>,
    /// The completion's text; the fake's default greeting when unset.
    pub content: Option<String>,
    /// How many content chunks a stream has; 3 when unset.
    pub chunks: Option<usize>,
    /// The pause between stream chunks; for a whole JSON answer, the body drips out in
    /// `chunks` pieces this far apart.
    pub chunk_interval_ms: u64,
    /// Stream: how long after the headers the first event comes.
    pub first_event_delay_ms: u64,
    /// Stream: drop the connection after this many content chunks.
    pub drop_after: Option<usize>,
    /// Stream: stop sending, but keep the connection open, after this many content chunks.
    pub stall_after: Option<usize>,
    /// Send a body that does not parse (a stream: a broken event after `chunks` chunks).
    pub malformed: bool,
    /// Close the connection without answering.
    pub reset: bool,
    /// Function calls the answer makes, after its text.
    pub tool_calls: Vec<FakeToolCall>,
    /// Stream: send the provider's own in-stream error event after this many content
    /// chunks (Anthropic's `overloaded_error`, for one), then close.
    pub error_after: Option<usize>,
    /// Stream: the message of that error event, instead of the shape's default. Bedrock's
    /// exception type is named at its start (`"throttlingException: Too many tokens"`);
    /// without one it is `serviceUnavailableException`.
    pub error_message: Option<String>,
    /// A 200 whose body is this many bytes of padding, made as it is sent (a stream: one
    /// event that never ends), to test how much of an answer the gateway will read.
    pub body_bytes: Option<u64>,
    /// Stream: never end; after the first content chunk, repeat one every `chunk_interval_ms`.
    pub endless: bool,
}

/// A function call a scripted answer makes.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FakeToolCall {
    pub name: String,
    /// The call's arguments, a JSON object.
    pub arguments: serde_json::Value,
}

impl Behavior {
    /// A healthy 200.
    pub fn ok() -> Behavior {
        Behavior::default()
    }

    /// An error status with the fake's default OpenAI-shaped error body.
    pub fn status(status: u16) -> Behavior {
        Behavior {
            status: Some(status),
            ..Behavior::default()
        }
    }

    /// Adds a response header.
    pub fn header(mut self, name: &str, value: &str) -> Behavior {
        self.headers.insert(name.to_owned(), value.to_owned());
        self
    }

    /// Waits before the headers.
    pub fn delay_ms(mut self, delay: u64) -> Behavior {
        self.delay_ms = delay;
        self
    }

    /// Replaces the body.
    pub fn body(mut self, body: &str) -> Behavior {
        self.body = Some(body.to_owned());
        self
    }

    /// Sets the completion text.
    pub fn content(mut self, content: &str) -> Behavior {
        self.content = Some(content.to_owned());
        self
    }

    /// Streams `chunks` content chunks, `interval_ms` apart.
    pub fn chunks(mut self, chunks: usize, interval_ms: u64) -> Behavior {
        self.chunks = Some(chunks);
        self.chunk_interval_ms = interval_ms;
        self
    }

    /// Sends a stream's headers at once but its first event only after `delay` ms.
    pub fn first_event_after(mut self, delay: u64) -> Behavior {
        self.first_event_delay_ms = delay;
        self
    }

    /// Drops the connection after `chunks` content chunks.
    pub fn drop_after(mut self, chunks: usize) -> Behavior {
        self.drop_after = Some(chunks);
        self
    }

    /// Goes silent after `chunks` content chunks.
    pub fn stall_after(mut self, chunks: usize) -> Behavior {
        self.stall_after = Some(chunks);
        self
    }

    /// Adds a function call to the answer.
    pub fn tool_call(mut self, name: &str, arguments: serde_json::Value) -> Behavior {
        self.tool_calls.push(FakeToolCall {
            name: name.to_owned(),
            arguments,
        });
        self
    }

    /// Sends the provider's in-stream error event after `chunks` content chunks.
    pub fn error_after(mut self, chunks: usize) -> Behavior {
        self.error_after = Some(chunks);
        self
    }

    /// Says `message` in the in-stream error event (to echo a key, say).
    pub fn error_message(mut self, message: &str) -> Behavior {
        self.error_message = Some(message.to_owned());
        self
    }

    /// Answers 200 with `bytes` bytes of padding.
    pub fn huge(bytes: u64) -> Behavior {
        Behavior {
            body_bytes: Some(bytes),
            ..Behavior::default()
        }
    }

    /// Streams forever, one content chunk every `interval_ms`.
    pub fn endless(interval_ms: u64) -> Behavior {
        Behavior {
            endless: true,
            chunk_interval_ms: interval_ms,
            ..Behavior::default()
        }
    }

    /// Sends a body that does not parse.
    pub fn malformed() -> Behavior {
        Behavior {
            malformed: true,
            ..Behavior::default()
        }
    }

    /// Closes the connection without an answer.
    pub fn reset() -> Behavior {
        Behavior {
            reset: true,
            ..Behavior::default()
        }
    }

    /// OpenAI's answer to a prompt longer than the model's context.
    pub fn context_length_exceeded() -> Behavior {
        Behavior::status(400).body(
            r#"{"error":{"message":"This model's maximum context length is 8192 tokens.","type":"invalid_request_error","param":"messages","code":"context_length_exceeded"}}"#,
        )
    }
}

/// What happens after the last scripted behaviour.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ScriptMode {
    /// The last behaviour repeats forever.
    #[default]
    Sequence,
    /// The script starts over.
    Cycle,
}

/// A fake's behaviours, one per request, in order.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Script {
    pub behaviors: Vec<Behavior>,
    pub mode: ScriptMode,
}

impl Script {
    /// The behaviour for the `call`-th request (0-based).
    pub fn behavior_for(&self, call: usize) -> Behavior {
        let count = self.behaviors.len();
        if count == 0 {
            return Behavior::ok();
        }
        let index = match self.mode {
            ScriptMode::Sequence => call.min(count - 1),
            ScriptMode::Cycle => call % count,
        };
        self.behaviors[index].clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sequence_repeats_its_last_behavior_and_cycle_starts_over() {
        let mut script = Script {
            behaviors: vec![Behavior::status(500), Behavior::ok()],
            mode: ScriptMode::Sequence,
        };
        let statuses: Vec<_> = (0..4).map(|i| script.behavior_for(i).status).collect();
        assert_eq!(statuses, [Some(500), None, None, None]);
        script.mode = ScriptMode::Cycle;
        let statuses: Vec<_> = (0..4).map(|i| script.behavior_for(i).status).collect();
        assert_eq!(statuses, [Some(500), None, Some(500), None]);
    }

    #[test]
    fn scripts_parse_from_json() {
        let script: Script = serde_json::from_str(
            r#"{"behaviors":[{"status":429,"headers":{"retry-after":"1"}},{}],"mode":"cycle"}"#,
        )
        .unwrap();
        assert_eq!(
            script.behaviors[0],
            Behavior::status(429).header("retry-after", "1")
        );
        assert_eq!(script.mode, ScriptMode::Cycle);
    }
}
