//! The fake's Bedrock shape: the Converse API (`POST /model/{modelId}/converse`), ConverseStream
//! (`…/converse-stream`, in AWS's event stream framing), InvokeModel for embedding models
//! (`invoke`), Bedrock's error answers, and, when the fake is given AWS credentials, a SigV4
//! check of every Bedrock request; `issuer` hands those credentials out as STS and ECS do.
//!
//! A stream's events carry Bedrock's padding member `p` (as real ones do) so a reader must
//! ignore members it does not know. `error_after` sends an exception message: the type named
//! at the start of `error_message` (`"throttlingException: Too many tokens"`) when it is one
//! ConverseStream can send, else `serviceUnavailableException`, the counterpart of the other
//! shapes' "overloaded".

mod eventstream;
pub mod invoke;
pub mod issuer;
mod sigv4;

use std::time::{SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use serde_json::{Value, json};

use super::answer::Completion;

pub use eventstream::CONTENT_TYPE as EVENTSTREAM;
pub use issuer::AwsIssuer;

/// The `x-amzn-ErrorType` namespace of Bedrock's own errors.
const BEDROCK_ERRORS: &str = "http://internal.amazon.com/coral/com.amazon.bedrock/";

/// The namespace of the errors AWS's front door answers before Bedrock sees a request (a bad
/// signature, an unknown key), as real answers name it.
const CORAL_ERRORS: &str = "http://internal.amazon.com/coral/com.amazon.coral.service/";

/// The exceptions ConverseStream sends mid-stream, each with what it says by default.
const STREAM_EXCEPTIONS: [(&str, &str); 5] = [
    (
        "serviceUnavailableException",
        "Bedrock is unable to process your request.",
    ),
    (
        "throttlingException",
        "Too many tokens, please wait before trying again.",
    ),
    (
        "internalServerException",
        "The server encountered an internal error.",
    ),
    (
        "modelStreamErrorException",
        "The model stream encountered an error.",
    ),
    ("validationException", "The request is invalid."),
];

/// Filler for the padding member `p`: Bedrock pads events to hide their lengths.
const PADDING: &str = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";

/// An error answer in Bedrock's shape.
#[derive(Debug, PartialEq, Eq)]
pub struct ErrorAnswer {
    pub status: u16,
    /// The `x-amzn-ErrorType` header: `Type:namespace`.
    pub error_type: String,
    /// `{"message": …}`.
    pub body: String,
}

/// The error type Bedrock answers `status` with.
pub fn error_type(status: u16) -> &'static str {
    match status {
        403 => "AccessDeniedException",
        404 => "ResourceNotFoundException",
        408 => "ModelTimeoutException",
        424 => "ModelErrorException",
        429 => "ThrottlingException",
        503 => "ServiceUnavailableException",
        // Bedrock answers no other 4xx; a script that asks for one gets the client's error,
        // as every other shape does.
        400..=499 => "ValidationException",
        _ => "InternalServerException",
    }
}

/// The `x-amzn-ErrorType` header for an error status.
pub fn error_type_header(status: u16) -> String {
    format!("{}:{BEDROCK_ERRORS}", error_type(status))
}

/// The AWS identity a fake accepts on Bedrock requests.
pub struct AwsAccount {
    credentials: sigv4::Credentials,
}

impl AwsAccount {
    /// The identity with these credentials; `session_token` for temporary ones.
    pub fn new(access_key_id: &str, secret_access_key: &str, session_token: Option<&str>) -> Self {
        AwsAccount {
            credentials: sigv4::Credentials {
                access_key_id: access_key_id.to_owned(),
                secret_access_key: secret_access_key.to_owned(),
                session_token: session_token.map(str::to_owned),
            },
        }
    }

    /// Checks a request's SigV4 signature now; the answer AWS would refuse it with, if any.
    pub fn check(&self, parts: &http::request::Parts, body: &[u8]) -> Result<(), ErrorAnswer> {
        let mut headers: Vec<(String, String)> = parts
            .headers
            .iter()
            .map(|(name, value)| {
                let value = String::from_utf8_lossy(value.as_bytes()).into_owned();
                (name.as_str().to_owned(), value)
            })
            .collect();
        // HTTP/2 names the host in the URI (`:authority`), not in a header.
        if !parts.headers.contains_key(http::header::HOST)
            && let Some(authority) = parts.uri.authority()
        {
            headers.push(("host".into(), authority.as_str().to_owned()));
        }
        let request = sigv4::Request {
            method: parts.method.as_str(),
            path: parts.uri.path(),
            query: parts.uri.query().unwrap_or(""),
            headers: &headers,
            body,
        };
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs() as i64);
        sigv4::verify(&request, &self.credentials, "bedrock", now).map_err(refusal)
    }
}

/// The answer to a refused signature, as AWS words each refusal.
fn refusal(refusal: sigv4::Refusal) -> ErrorAnswer {
    let (status, kind, message) = match refusal {
        sigv4::Refusal::Missing => (
            403,
            "MissingAuthenticationTokenException",
            "Missing Authentication Token".to_owned(),
        ),
        sigv4::Refusal::Incomplete(why) => (403, "IncompleteSignatureException", why),
        sigv4::Refusal::UnknownKey => (
            403,
            "UnrecognizedClientException",
            "The security token included in the request is invalid.".to_owned(),
        ),
        sigv4::Refusal::Invalid(why) => (403, "InvalidSignatureException", why),
    };
    ErrorAnswer {
        status,
        error_type: format!("{kind}:{CORAL_ERRORS}"),
        body: json!({ "message": message }).to_string(),
    }
}

/// The start of a stream answer of `bytes` bytes: a prelude announcing one message that long,
/// so the padding after it never makes a whole message.
pub fn huge_prefix(bytes: u64) -> Bytes {
    let total = u32::try_from(bytes).unwrap_or(u32::MAX);
    Bytes::copy_from_slice(&eventstream::prelude(total, 0))
}

/// `value` with a padding member `p` of a length that varies with `seed`.
fn padded(mut value: Value, seed: usize) -> Value {
    value["p"] = json!(&PADDING[..1 + seed * 7 % (PADDING.len() - 1)]);
    value
}

fn event(name: &str, payload: &Value) -> Bytes {
    eventstream::event(name, payload.to_string().as_bytes())
}

/// `text` cut in two on a character boundary: a tool's input arrives in pieces.
fn halves(text: &str) -> [&str; 2] {
    let mut middle = text.len() / 2;
    while !text.is_char_boundary(middle) {
        middle += 1;
    }
    [&text[..middle], &text[middle..]]
}

impl Completion {
    fn bedrock_stop(&self) -> &'static str {
        if self.tool_calls.is_empty() {
            "end_turn"
        } else {
            "tool_use"
        }
    }

    fn bedrock_usage(&self) -> Value {
        let output = self.completion_tokens();
        json!({"inputTokens": self.prompt_tokens, "outputTokens": output,
               "totalTokens": self.prompt_tokens + output})
    }

    /// Converse's answer.
    pub fn bedrock_whole(&self) -> Value {
        let mut content = vec![json!({"text": self.content})];
        content.extend(self.tool_calls.iter().enumerate().map(|(i, call)| {
            json!({"toolUse": {"toolUseId": self.call_id(i), "name": call.name,
                               "input": call.arguments}})
        }));
        json!({
            "output": {"message": {"role": "assistant", "content": content}},
            "stopReason": self.bedrock_stop(),
            "usage": self.bedrock_usage(),
            "metrics": {"latencyMs": 1},
        })
    }

    /// The events for content piece `i`; the first also opens the message. Real Bedrock may
    /// open a text block with `contentBlockStart`; the fake, like most answers, does not.
    pub fn bedrock_content_frames(&self, i: usize, piece: &str) -> Vec<Bytes> {
        let mut frames = Vec::new();
        if i == 0 {
            frames.push(event("messageStart", &json!({"role": "assistant"})));
        }
        let delta = json!({"contentBlockIndex": 0, "delta": {"text": piece}});
        frames.push(event("contentBlockDelta", &padded(delta, i)));
        frames
    }

    /// The events after the text: its block closed, each tool call as a block of its own, the
    /// stop reason, and the usage.
    pub fn bedrock_tail_frames(&self) -> Vec<Bytes> {
        let stop = |index: usize| {
            event(
                "contentBlockStop",
                &padded(json!({"contentBlockIndex": index}), index),
            )
        };
        let mut frames = vec![stop(0)];
        for (i, call) in self.tool_calls.iter().enumerate() {
            let index = i + 1;
            let start = json!({"contentBlockIndex": index, "start": {"toolUse": {
                "toolUseId": self.call_id(i), "name": call.name}}});
            frames.push(event("contentBlockStart", &padded(start, index)));
            let input = call.arguments.to_string();
            for part in halves(&input) {
                let delta =
                    json!({"contentBlockIndex": index, "delta": {"toolUse": {"input": part}}});
                frames.push(event("contentBlockDelta", &padded(delta, index)));
            }
            frames.push(stop(index));
        }
        let message_stop = json!({"stopReason": self.bedrock_stop()});
        frames.push(event("messageStop", &padded(message_stop, 3)));
        let metadata = json!({"usage": self.bedrock_usage(), "metrics": {"latencyMs": 1}});
        frames.push(event("metadata", &padded(metadata, 5)));
        frames
    }

    /// An exception message: the type `message` starts with (`"throttlingException: …"`)
    /// when it names one ConverseStream sends, else `serviceUnavailableException`.
    pub fn bedrock_stream_error(&self, message: Option<&str>) -> Bytes {
        let (kind, default) = STREAM_EXCEPTIONS[0];
        let named = message.and_then(|message| {
            STREAM_EXCEPTIONS.iter().find_map(|&(kind, default)| {
                let rest = message.strip_prefix(kind)?;
                let said = rest
                    .strip_prefix(':')
                    .map(str::trim)
                    .filter(|s| !s.is_empty());
                (rest.is_empty() || rest.starts_with(':')).then(|| (kind, said.unwrap_or(default)))
            })
        });
        let (kind, said) = named.unwrap_or((kind, message.unwrap_or(default)));
        eventstream::exception(kind, json!({ "message": said }).to_string().as_bytes())
    }

    /// An event whose message CRC is wrong: a reader must refuse it.
    pub fn bedrock_malformed_event(&self) -> Bytes {
        let mut frame = event(
            "contentBlockDelta",
            &json!({"contentBlockIndex": 0,
                                                          "delta": {"text": "broken"}}),
        )
        .to_vec();
        if let Some(last) = frame.last_mut() {
            *last ^= 0xff;
        }
        Bytes::from(frame)
    }
}

#[cfg(test)]
mod tests;
