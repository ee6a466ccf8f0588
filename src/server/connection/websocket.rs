//! Responses over WebSocket: `GET /v1/responses` upgraded, as OpenAI's WebSocket mode.
//!
//! hyper answers the upgrade (`handshake`), then hands the socket back to the connection,
//! which serves it here (`session`) under the same roster, caps and shutdown as its HTTP
//! requests. Each `response.create` message is one request (`turn`): it goes through the
//! same handler as `POST /v1/responses` with `stream: true`, so the chain, failover before
//! the first event, limits, budgets, the cache and the log row are those of HTTP, and its
//! events come back as one JSON text frame each. `memory` keeps each lane's latest turn, so
//! `previous_response_id` continues a conversation even with `store: false`.

mod handshake;
mod memory;
mod session;
mod turn;

pub(super) use handshake::{Handoff, answer, is_upgrade};
pub(super) use session::serve;
