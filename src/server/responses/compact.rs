//! `POST /v1/responses/compact`, as the Open Responses specification defines it: the
//! conversation (the turns stored under `previous_response_id`, this key's only, then
//! `input`) summarised by the route's chain, and answered as a `response.compaction` object:
//! the conversation's user messages, then one `compaction` item whose `encrypted_content`
//! is the summary sealed under the master key and bound to the caller's key.
//!
//! The summary is asked for as an ordinary Responses request, which `client_api` hands to
//! `chat::handle`: the same limits, budgets, chain, cache and log row as any other. A later
//! request whose input carries the item gets the summary opened back into a developer
//! message ([`open_items`]), which every step can read, a translated one or one the request
//! is passed through to (OpenAI cannot open what the gateway sealed).

use axum::body::Body;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::Response;
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use bytes::Bytes;
use serde_json::{Map, Value, json};

use super::{scope, state};
use crate::auth::Caller;
use crate::keys::vault::{Sealed, Vault};
use crate::providers::{ClientFormat, ClientRequest, Operation, RequestBody};
use crate::server::AppState;
use crate::server::endpoint::Endpoint;
use crate::server::error::{ApiError, BodyError};
use crate::server::refusal::refuse;
use crate::telemetry::{RecordGuard, RequestRecord};

/// The endpoint's path.
pub const PATH: &str = "/v1/responses/compact";

/// The endpoint as `client_api` lists it; `client_api` serves it through [`ask`].
pub const COMPACT: Endpoint = Endpoint {
    format: ClientFormat::OpenAi,
    operation: Operation::Responses,
    check: check_compact,
};

/// Every field of a compact request: the specification's, and those OpenAI's SDK sends
/// besides. Any other is refused.
const KNOWN_FIELDS: &[&str] = &[
    "model",
    "input",
    "previous_response_id",
    "instructions",
    "prompt_cache_key",
    "prompt_cache_retention",
    "prompt_cache_options",
    "service_tier",
    "image",
];

/// What the vault binds a compaction item to, beside the key's scope. A `/` cannot be in a
/// provider's name, so no provider secret shares the binding.
const SEALED_FOR: &str = "switchyard/compaction";

/// How an item's `encrypted_content` says the gateway sealed it; others are left alone.
const PREFIX: &str = "sy-cmp-1.";

/// AES-GCM's nonce and tag: a sealed summary is never shorter.
const NONCE_BYTES: usize = 12;
const TAG_BYTES: usize = 16;

/// The request the summary is written for, after the conversation.
const SUMMARY_PROMPT: &str = "You are performing a CONTEXT CHECKPOINT COMPACTION. Summarize the \
conversation above for a model that will continue it without seeing it: the user's goals and \
constraints, what has been decided and done, facts and results established (names, values, \
files, tool results), the current state of the work, and what remains to do. Be concise but \
complete. Write only the summary.";

/// What the opened summary is introduced with, in the context of a later turn.
const SUMMARY_PREFACE: &str =
    "The conversation before this point was compacted. A summary of it follows.";

/// A compact request's fields; the conversation is only read once the caller is known.
fn check_compact(request: &RequestBody) -> Result<bool, ApiError> {
    if let Some(why) = request.tree_error() {
        return Err(ApiError::InvalidJson(why.to_owned()));
    }
    if let Some(field) = request
        .keys()
        .map(String::as_str)
        .find(|field| !KNOWN_FIELDS.contains(field))
    {
        return Err(ApiError::UnknownField(field.to_owned()));
    }
    let string_or_null = |field: &'static str| {
        if matches!(
            request.get(field),
            None | Some(Value::Null | Value::String(_))
        ) {
            Ok(())
        } else {
            Err(ApiError::InvalidRequest {
                message: format!("`{field}` must be a string"),
                param: Some(field),
            })
        }
    };
    string_or_null("previous_response_id")?;
    string_or_null("instructions")?;
    let input = request.get("input");
    if !matches!(
        input,
        None | Some(Value::Null | Value::String(_) | Value::Array(_))
    ) {
        return Err(ApiError::InvalidRequest {
            message: "`input` must be a string or an array of input items".into(),
            param: Some("input"),
        });
    }
    let previous = request.get("previous_response_id");
    if matches!(input, None | Some(Value::Null)) && matches!(previous, None | Some(Value::Null)) {
        return Err(ApiError::InvalidRequest {
            message: "there is nothing to compact: send `input`, `previous_response_id` or both"
                .into(),
            param: Some("input"),
        });
    }
    Ok(false)
}

/// What to do with a compact request.
pub enum Ask {
    /// Answered already: a refusal, with its log row.
    Answered(Response),
    /// Let the Responses endpoint judge this body: it answers a caller who is not
    /// recognised, or a body that could not be read, exactly as for any request.
    AsIs(Result<Bytes, BodyError>),
    /// Send this Responses request for the summary, then answer with [`Compaction::answer`].
    Summarize(Compaction, Bytes),
}

/// A compaction under way: whose it is, and the user messages it keeps.
pub struct Compaction {
    scope: String,
    user_messages: Vec<Value>,
}

/// Reads a compact request and writes the Responses request that asks for its summary.
pub async fn ask(state: &AppState, headers: &HeaderMap, body: Result<Bytes, BodyError>) -> Ask {
    let Ok(bytes) = body else {
        return Ask::AsIs(body);
    };
    let Ok(caller) = state.authenticate(headers).await else {
        return Ask::AsIs(Ok(bytes));
    };
    match summary_request(state, &caller, bytes).await {
        Ok((compaction, request)) => Ask::Summarize(compaction, request),
        Err(error) => Ask::Answered(refused(state, &caller, error)),
    }
}

async fn summary_request(
    state: &AppState,
    caller: &Caller,
    bytes: Bytes,
) -> Result<(Compaction, Bytes), ApiError> {
    let request = RequestBody::parse(bytes).map_err(|e| ApiError::InvalidJson(e.to_string()))?;
    check_compact(&request)?;
    let conversation = conversation(state, caller, request.tree()).await?;
    let mut input = conversation.clone();
    input.push(json!({"type": "message", "role": "user", "content": SUMMARY_PROMPT}));
    let mut summary = Map::new();
    if let Some(model) = request.get("model") {
        summary.insert("model".into(), model.clone());
    }
    if let Some(instructions) = request.get("instructions").filter(|i| !i.is_null()) {
        summary.insert("instructions".into(), instructions.clone());
    }
    summary.insert("input".into(), Value::Array(input));
    // The summary is the compaction's, not a turn a later `previous_response_id` names.
    summary.insert("store".into(), Value::Bool(false));
    let compaction = Compaction {
        scope: scope(caller),
        user_messages: conversation.iter().filter_map(user_message).collect(),
    };
    Ok((compaction, Bytes::from(Value::Object(summary).to_string())))
}

/// The whole conversation: the stored turns `previous_response_id` names (this caller's
/// only) and `input`, rebuilt as for any Responses request. Compaction items in it stay
/// sealed; the summary request opens them as any request does.
async fn conversation(
    state: &AppState,
    caller: &Caller,
    request: &Map<String, Value>,
) -> Result<Vec<Value>, ApiError> {
    let mut turns = Map::new();
    for field in ["previous_response_id", "input"] {
        if let Some(value) = request.get(field) {
            turns.insert(field.into(), value.clone());
        }
    }
    let mut rebuilt = ClientRequest {
        format: ClientFormat::OpenAi,
        operation: Operation::Responses,
        body: turns.into(),
        anthropic_beta: None,
        forwarded: Vec::new(),
    };
    // Its plan, what to store after, is dropped: nothing of the compaction is stored.
    state::before(state, caller, &mut rebuilt).await?;
    Ok(match rebuilt.body.get("input") {
        Some(Value::Array(items)) => items.clone(),
        _ => Vec::new(),
    })
}

/// A user message of the conversation, in the form an output item has.
fn user_message(item: &Value) -> Option<Value> {
    let is_message = matches!(
        item.get("type").and_then(Value::as_str),
        None | Some("message")
    );
    if !is_message || item.get("role").and_then(Value::as_str) != Some("user") {
        return None;
    }
    let content = match item.get("content")? {
        Value::String(text) => json!([{"type": "input_text", "text": text}]),
        Value::Array(parts) => Value::Array(parts.clone()),
        _ => return None,
    };
    Some(json!({"type": "message", "role": "user", "content": content}))
}

/// A refusal of the compact request, with its log row.
fn refused(state: &AppState, caller: &Caller, error: ApiError) -> Response {
    let id = uuid::Uuid::now_v7().to_string();
    let mut guard = RecordGuard::new(state.telemetry.clone(), RequestRecord::new(id, false));
    let record = guard.record();
    record.user = Some(String::from(&*caller.user));
    record.key_id = caller.key.as_ref().map(|key| key.id.clone());
    refuse(guard, error, ClientFormat::OpenAi)
}

impl Compaction {
    /// The served summary as a `response.compaction` object; an answer that is not a
    /// summary (an error, the chain's or a refusal) goes back as it is.
    pub async fn answer(self, vault: &Vault, response: Response) -> Response {
        if response.status() != StatusCode::OK {
            return response;
        }
        let (mut parts, body) = response.into_parts();
        // The gateway made or checked this body itself, within `max_upstream_body_bytes`.
        let Ok(bytes) = axum::body::to_bytes(body, usize::MAX).await else {
            return Response::from_parts(parts, Body::empty());
        };
        let Ok(served) = serde_json::from_slice::<Value>(&bytes) else {
            return Response::from_parts(parts, Body::from(bytes));
        };
        let summary = summary_text(&served);
        let Ok(sealed) = vault.seal(SEALED_FOR, &self.scope, &summary) else {
            return ApiError::Internal("the compaction summary could not be sealed")
                .into_response_for(ClientFormat::OpenAi);
        };
        let mut output = self.user_messages;
        output.push(json!({
            "type": "compaction",
            "id": format!("cmp_{}", uuid::Uuid::now_v7().simple()),
            "encrypted_content": encode(&sealed),
        }));
        let compacted = json!({
            "id": served.get("id").cloned().unwrap_or(Value::Null),
            "object": "response.compaction",
            "created_at": served.get("created_at").cloned().unwrap_or_else(|| json!(now_secs())),
            "output": output,
            "usage": served.get("usage").cloned().unwrap_or_else(
                || json!({"input_tokens": 0, "output_tokens": 0, "total_tokens": 0})),
        });
        parts.headers.remove(header::CONTENT_LENGTH);
        parts.headers.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        Response::from_parts(parts, Body::from(compacted.to_string()))
    }
}

/// The text of a Response object's output messages.
fn summary_text(response: &Value) -> String {
    let output = response.get("output").and_then(Value::as_array);
    output
        .into_iter()
        .flatten()
        .filter(|item| item.get("type").and_then(Value::as_str) == Some("message"))
        .filter_map(|item| item.get("content").and_then(Value::as_array))
        .flatten()
        .filter(|part| part.get("type").and_then(Value::as_str) == Some("output_text"))
        .filter_map(|part| part.get("text").and_then(Value::as_str))
        .collect()
}

fn now_secs() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |since| since.as_secs())
}

fn encode(sealed: &Sealed) -> String {
    let mut bytes = sealed.nonce.clone();
    bytes.extend_from_slice(&sealed.ciphertext);
    format!("{PREFIX}{}", URL_SAFE_NO_PAD.encode(bytes))
}

fn decode(content: &str) -> Option<Sealed> {
    let bytes = URL_SAFE_NO_PAD.decode(content.strip_prefix(PREFIX)?).ok()?;
    if bytes.len() < NONCE_BYTES + TAG_BYTES {
        return None;
    }
    let (nonce, ciphertext) = bytes.split_at(NONCE_BYTES);
    Some(Sealed {
        nonce: nonce.to_vec(),
        ciphertext: ciphertext.to_vec(),
    })
}

/// The `encrypted_content` of a compaction item the gateway sealed, if `item` is one.
fn gateways_compaction(item: &Value) -> Option<&str> {
    if item.get("type").and_then(Value::as_str) != Some("compaction") {
        return None;
    }
    item.get("encrypted_content")
        .and_then(Value::as_str)
        .filter(|content| content.starts_with(PREFIX))
}

/// Opens each compaction item the gateway sealed in the request's input into the summary
/// it holds, as a developer message. One that does not open for `scope` (made for another
/// key, or altered) is refused. Compaction items of other makers are left as they are:
/// OpenAI reads its own, and a translated step refuses them.
pub fn open_items(vault: &Vault, scope: &str, request: &mut ClientRequest) -> Result<(), ApiError> {
    let sealed_any = match request.body.get("input") {
        Some(Value::Array(items)) => items.iter().any(|item| gateways_compaction(item).is_some()),
        _ => false,
    };
    if !sealed_any {
        return Ok(());
    }
    let mut body = request.body.tree().clone();
    if let Some(Value::Array(items)) = body.get_mut("input") {
        for (i, item) in items.iter_mut().enumerate() {
            let Some(content) = gateways_compaction(item) else {
                continue;
            };
            let summary = decode(content)
                .and_then(|sealed| vault.open(SEALED_FOR, scope, &sealed).ok())
                .ok_or_else(|| ApiError::InvalidRequest {
                    message: format!(
                        "`input[{i}].encrypted_content` does not open: this compaction item was made for another virtual key, or altered"
                    ),
                    param: Some("input"),
                })?;
            *item = json!({
                "type": "message",
                "role": "developer",
                "content": format!("{SUMMARY_PREFACE}\n\n{}", summary.expose()),
            });
        }
    }
    request.body = body.into();
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::keys::vault::KeySource;

    fn vault(byte: u8) -> Vault {
        Vault::from_bytes(&[byte; 32], KeySource::Ephemeral)
    }

    fn request(input: Value) -> ClientRequest {
        let mut body = Map::new();
        body.insert("input".into(), input);
        ClientRequest {
            format: ClientFormat::OpenAi,
            operation: Operation::Responses,
            body: body.into(),
            anthropic_beta: None,
            forwarded: Vec::new(),
        }
    }

    fn item(vault: &Vault, scope: &str, summary: &str) -> Value {
        let sealed = vault.seal(SEALED_FOR, scope, summary).unwrap();
        json!({"type": "compaction", "id": "cmp_1", "encrypted_content": encode(&sealed)})
    }

    #[test]
    fn a_sealed_item_opens_into_its_summary_for_its_own_key_only() {
        let key = vault(7);
        let sealed = item(&key, "key-a", "Ada wants Oslo's weather.");
        let mut own = request(json!([{"role": "user", "content": "Hi"}, sealed.clone()]));
        open_items(&key, "key-a", &mut own).unwrap();
        let opened = &own.body.get("input").unwrap()[1];
        assert_eq!(opened["role"], "developer");
        let text = opened["content"].as_str().unwrap();
        assert!(text.ends_with("Ada wants Oslo's weather."), "{text}");

        let mut other = request(json!([sealed.clone()]));
        let refused = open_items(&key, "key-b", &mut other).unwrap_err();
        assert!(refused.to_string().contains("input[0].encrypted_content"));
        let mut other_master = request(json!([sealed]));
        assert!(open_items(&vault(8), "key-a", &mut other_master).is_err());
    }

    #[test]
    fn an_altered_item_is_refused_and_anothers_item_is_left_alone() {
        let key = vault(7);
        let sealed = item(&key, "key-a", "summary");
        let content = sealed["encrypted_content"].as_str().unwrap();
        let mut bytes = URL_SAFE_NO_PAD.decode(&content[PREFIX.len()..]).unwrap();
        let last = bytes.len() - 1;
        bytes[last] ^= 1;
        let altered = format!("{PREFIX}{}", URL_SAFE_NO_PAD.encode(bytes));
        for content in [altered.as_str(), "sy-cmp-1.!!", "sy-cmp-1.AAAA"] {
            let mut request =
                request(json!([{"type": "compaction", "encrypted_content": content}]));
            assert!(
                open_items(&key, "key-a", &mut request).is_err(),
                "{content}"
            );
        }
        let openais = json!([{"type": "compaction", "encrypted_content": "gAAAAB..."}]);
        let mut request = request(openais.clone());
        open_items(&key, "key-a", &mut request).unwrap();
        assert_eq!(request.body.get("input"), Some(&openais));
    }

    #[test]
    fn the_conversations_user_messages_are_kept_in_output_form() {
        let kept: Vec<Value> = [
            json!({"role": "user", "content": "Hi"}),
            json!({"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Hello"}]}),
            json!({"type": "message", "role": "user", "content": [{"type": "input_text", "text": "More"}]}),
            json!({"type": "function_call_output", "call_id": "c", "output": "x"}),
        ]
        .iter()
        .filter_map(user_message)
        .collect();
        assert_eq!(
            kept,
            [
                json!({"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Hi"}]}),
                json!({"type": "message", "role": "user", "content": [{"type": "input_text", "text": "More"}]}),
            ]
        );
    }

    #[test]
    fn a_compact_request_needs_something_to_compact_and_known_fields() {
        let check = |body: Value| {
            check_compact(&RequestBody::parse(Bytes::from(body.to_string())).unwrap())
        };
        assert!(check(json!({"model": "m", "input": "x"})).is_ok());
        assert!(check(json!({"model": "m", "previous_response_id": "resp_1"})).is_ok());
        assert!(matches!(
            check(json!({"model": "m"})),
            Err(ApiError::InvalidRequest {
                param: Some("input"),
                ..
            })
        ));
        assert!(matches!(
            check(json!({"model": "m", "input": "x", "stream": true})),
            Err(ApiError::UnknownField(field)) if field == "stream"
        ));
        assert!(matches!(
            check(json!({"model": "m", "input": 3})),
            Err(ApiError::InvalidRequest {
                param: Some("input"),
                ..
            })
        ));
    }
}
