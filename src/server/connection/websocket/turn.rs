//! One `response.create` on a socket: sent through the handler of `POST /v1/responses` as a
//! stream, its events relayed as JSON text frames.

use std::net::IpAddr;

use axum::http::{HeaderMap, HeaderName, StatusCode, header};
use axum::response::Response;
use bytes::Bytes;
use serde_json::{Map, Value, json};
use tokio::sync::mpsc;
use tokio_tungstenite::tungstenite::Message;

use super::memory::Memory;
use crate::auth::Caller;
use crate::providers::sse::SseReader;
use crate::server::error::ApiError;
use crate::server::{AppState, chat, response_cache, responses, stamp};

/// What every turn on one socket shares.
pub struct Socket {
    pub state: AppState,
    pub caller: Caller,
    pub headers: HeaderMap,
    pub peer: IpAddr,
    pub memory: Memory,
    /// Frames to the client, in order; the writer owns the socket's sending half.
    pub out: mpsc::Sender<Message>,
}

/// The extension field of `response.completed` that carries its price in US dollars, as
/// `x-switchyard-cost` does on a whole answer over HTTP.
pub const COST_FIELD: &str = "x-switchyard-cost";

/// The extension field of a turn's last event (`response.completed`, `.incomplete`,
/// `.failed`, or `error`) that names its log row, as `x-switchyard-request-id` does over HTTP.
pub const REQUEST_ID_FIELD: &str = "x-switchyard-request-id";

/// Serves one `response.create` (its `type` and `stream_id` taken off) on `lane`.
pub async fn run(socket: &Socket, lane: Option<&str>, mut create: Map<String, Value>) {
    let relay = Relay { socket, lane };
    let continued = match continue_conversation(socket, &mut create).await {
        Ok(continued) => continued,
        Err(refusal) => return relay.error(refusal).await,
    };
    if let Some(refusal) = transport_fields(&mut create) {
        return relay.error(refusal).await;
    }
    let input = match create.get("input") {
        Some(Value::Array(items)) => items.clone(),
        _ => Vec::new(),
    };
    let body = Bytes::from(Value::Object(create).to_string());
    let response = chat::handle(
        &socket.state,
        socket.peer,
        &socket.headers,
        Ok(body),
        &responses::RESPONSES,
    )
    .await;
    let streamed = response
        .headers()
        .get(header::CONTENT_TYPE)
        .is_some_and(|t| t.as_bytes().starts_with(b"text/event-stream"));
    let request_id = response
        .headers()
        .get(stamp::REQUEST_ID)
        .and_then(|id| id.to_str().ok())
        .map(str::to_owned);
    if response.status() != StatusCode::OK || !streamed {
        return relay.refused(response, request_id).await;
    }
    let price = Price::of(&response);
    let mut events = SseReader::new(
        response.into_body().into_data_stream(),
        socket.state.config().server.max_upstream_body_bytes,
    );
    while let Ok(Some(event)) = events.next_event().await {
        let Ok(Value::Object(mut event)) = serde_json::from_str::<Value>(event.data()) else {
            continue;
        };
        let kind = event
            .get("type")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let terminal = matches!(kind, "response.completed" | "response.incomplete");
        let completed = kind == "response.completed";
        let last = terminal || matches!(kind, "response.failed" | "error");
        if let Some(Value::Object(response)) = event.get_mut("response") {
            if let Some(previous) = &continued {
                // Sent as a whole input, the turn's Response would name no previous one.
                response.insert(
                    "previous_response_id".into(),
                    Value::String(previous.clone()),
                );
            }
            if terminal {
                remember(socket, lane, &input, response);
            }
        }
        if completed && let Some(cost) = price.cost(socket, &event) {
            event.insert(COST_FIELD.into(), json!(cost));
        }
        if let (true, Some(id)) = (last, &request_id) {
            event.insert(REQUEST_ID_FIELD.into(), Value::String(id.clone()));
        }
        if !relay.send(event).await {
            return;
        }
    }
}

/// Replaces `previous_response_id` with the whole conversation it names, from the socket's
/// memory or else the store (the caller's own turns only), so any step can serve the next
/// turn and a `store: false` turn can be continued. The id it named, if any.
async fn continue_conversation(
    socket: &Socket,
    create: &mut Map<String, Value>,
) -> Result<Option<String>, Value> {
    let previous = match create.remove("previous_response_id") {
        None | Some(Value::Null) => return Ok(None),
        Some(Value::String(previous)) => previous,
        Some(_) => {
            return Err(error_event(
                400,
                "invalid_request_error",
                None,
                "`previous_response_id` must be a string",
                Some("previous_response_id"),
            ));
        }
    };
    let earlier = match socket.memory.conversation(&previous) {
        Some(kept) => kept.as_ref().clone(),
        None => {
            let scope = responses::scope(&socket.caller);
            match responses::earlier_turns(&socket.state, &previous, &scope).await {
                Ok(items) => items,
                Err(ApiError::Missing(_)) => {
                    return Err(error_event(
                        400,
                        "invalid_request_error",
                        Some("previous_response_not_found"),
                        &format!(
                            "no response with id `{previous}` is on this socket or stored \
                             for this key: send the whole input with no `previous_response_id`"
                        ),
                        Some("previous_response_id"),
                    ));
                }
                Err(other) => return Err(from_api_error(other)),
            }
        }
    };
    let mut input = earlier;
    match create.remove("input") {
        Some(Value::String(text)) => {
            input.push(json!({"type": "message", "role": "user", "content": text}));
        }
        Some(Value::Array(items)) => input.extend(items),
        _ => {}
    }
    create.insert("input".into(), Value::Array(input));
    Ok(Some(previous))
}

/// The fields WebSocket mode answers for itself: every turn streams, and none runs in the
/// background. A refusal if the message asks otherwise.
fn transport_fields(create: &mut Map<String, Value>) -> Option<Value> {
    if create.get("background") == Some(&Value::Bool(true)) {
        return Some(error_event(
            400,
            "invalid_request_error",
            None,
            "`background` is not served over WebSocket: every response streams on the socket",
            Some("background"),
        ));
    }
    create.remove("background");
    create.insert("stream".into(), Value::Bool(true));
    if let Some(Value::String(text)) = create.get("input").cloned() {
        let message = json!({"type": "message", "role": "user", "content": text});
        create.insert("input".into(), Value::Array(vec![message]));
    }
    None
}

/// Keeps a finished turn in the socket's memory: its whole input, then its output.
fn remember(socket: &Socket, lane: Option<&str>, input: &[Value], response: &Map<String, Value>) {
    let Some(id) = response.get("id").and_then(Value::as_str) else {
        return;
    };
    let mut items = input.to_vec();
    if let Some(Value::Array(output)) = response.get("output") {
        items.extend(output.iter().cloned());
    }
    socket.memory.keep(lane.unwrap_or_default(), id, items);
}

/// The served deployment, read off the answer's headers, which a stream's cost is priced
/// against once its usage is known. None for a cache hit, whose row has no cost either.
struct Price {
    served: Option<(String, String)>,
}

impl Price {
    fn of(response: &Response) -> Price {
        let headers = response.headers();
        let text = |name: &HeaderName| headers.get(name).and_then(|v| v.to_str().ok());
        let hit = text(&response_cache::CACHE) == Some("hit");
        let served = match (hit, text(&stamp::PROVIDER), text(&stamp::MODEL)) {
            (false, Some(provider), Some(model)) => Some((provider.to_owned(), model.to_owned())),
            _ => None,
        };
        Price { served }
    }

    /// What a `response.completed` event's usage cost, priced as its log row is.
    fn cost(&self, socket: &Socket, event: &Map<String, Value>) -> Option<f64> {
        let (provider, model) = self.served.as_ref()?;
        let usage = event.get("response")?.get("usage")?;
        let tokens = |field: &str| usage.get(field).and_then(Value::as_u64);
        let (tokens_in, tokens_out) = (tokens("input_tokens"), tokens("output_tokens"));
        if tokens_in.is_none() && tokens_out.is_none() {
            return None;
        }
        let telemetry = &socket.state.telemetry;
        let (tokens_in, tokens_out) = (tokens_in.unwrap_or(0), tokens_out.unwrap_or(0));
        telemetry.price(provider, model, tokens_in, tokens_out)
    }
}

/// Sends a turn's events on its lane.
struct Relay<'a> {
    socket: &'a Socket,
    lane: Option<&'a str>,
}

impl Relay<'_> {
    /// False once the socket is gone.
    async fn send(&self, mut event: Map<String, Value>) -> bool {
        if let Some(lane) = self.lane {
            event.insert("stream_id".into(), Value::String(lane.to_owned()));
        }
        let frame = Message::text(Value::Object(event).to_string());
        self.socket.out.send(frame).await.is_ok()
    }

    async fn error(&self, event: Value) {
        if let Value::Object(event) = event {
            self.send(event).await;
        }
    }

    /// A turn the handler refused or failed before its stream began (its chain exhausted,
    /// a limit, a bad field): its HTTP error as an `error` event with its status.
    async fn refused(&self, response: Response, request_id: Option<String>) {
        let status = response.status().as_u16();
        let limit = self.socket.state.config().server.max_upstream_body_bytes;
        let body = axum::body::to_bytes(response.into_body(), limit).await;
        let error = body
            .ok()
            .and_then(|bytes| serde_json::from_slice::<Value>(&bytes).ok())
            .and_then(|mut body| body.get_mut("error").map(Value::take))
            .unwrap_or_else(|| json!({"type": "api_error", "message": "the request failed"}));
        let mut event = json!({"type": "error", "status": status, "error": error});
        if let Some(id) = request_id {
            event[REQUEST_ID_FIELD] = Value::String(id);
        }
        self.error(event).await;
    }
}

/// An `error` event, as OpenAI's WebSocket mode sends one.
pub fn error_event(
    status: u16,
    kind: &str,
    code: Option<&str>,
    message: &str,
    param: Option<&str>,
) -> Value {
    json!({
        "type": "error",
        "status": status,
        "error": {"type": kind, "code": code, "message": message, "param": param},
    })
}

fn from_api_error(error: ApiError) -> Value {
    let status = error.status().as_u16();
    let code = error.kind();
    error_event(status, "api_error", Some(code), &error.to_string(), None)
}
