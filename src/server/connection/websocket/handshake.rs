//! The upgrade: RFC 6455's handshake on `GET /v1/responses`, and the virtual key checked
//! before the socket opens, so a refused client gets an HTTP answer in the API's shape.

use std::net::IpAddr;

use axum::body::Body;
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use tokio_tungstenite::tungstenite::handshake::derive_accept_key;

use crate::auth::Caller;
use crate::providers::ClientFormat;
use crate::server::AppState;
use crate::server::admission;
use crate::server::error::ApiError;
use crate::server::refusal::unauthenticated;
use crate::telemetry::{RecordGuard, RequestRecord};

/// The path whose `GET` may be upgraded.
const PATH: &str = "/v1/responses";

/// What the socket is served with once hyper hands it over.
pub struct Handoff {
    pub state: AppState,
    pub caller: Caller,
    /// The upgrade's headers, less the handshake's own: each turn is sent with them, so its
    /// key, client hints and trace context are the upgrade's.
    pub headers: HeaderMap,
    pub peer: IpAddr,
}

/// Whether a request asks to open a Responses WebSocket.
pub fn is_upgrade<B>(request: &http::Request<B>) -> bool {
    request.method() == Method::GET
        && request.uri().path() == PATH
        && request
            .headers()
            .get(header::UPGRADE)
            .is_some_and(|value| value.as_bytes().eq_ignore_ascii_case(b"websocket"))
}

/// Answers an upgrade: `101 Switching Protocols` with what to serve the socket with, or the
/// HTTP refusal (a bad handshake, an unknown key), logged as any refused request is.
pub async fn answer(
    state: AppState,
    peer: IpAddr,
    headers: &HeaderMap,
) -> (Response, Option<Handoff>) {
    let accept = match accept_key(headers) {
        Ok(accept) => accept,
        Err(refusal) => return (*refusal, None),
    };
    let id = uuid::Uuid::now_v7().to_string();
    let mut guard = RecordGuard::new(state.telemetry.clone(), RequestRecord::new(id, false));
    let caller = match admission::authenticate(&state, headers, &mut guard).await {
        Ok(caller) => caller,
        Err(error) => {
            let refusal = unauthenticated(&state, peer, guard, error, ClientFormat::OpenAi);
            return (refusal, None);
        }
    };
    // The socket itself is no request: each `response.create` on it has its own row.
    guard.discard();
    let mut response = Response::new(Body::empty());
    *response.status_mut() = StatusCode::SWITCHING_PROTOCOLS;
    let answer = response.headers_mut();
    answer.insert(header::UPGRADE, HeaderValue::from_static("websocket"));
    answer.insert(header::CONNECTION, HeaderValue::from_static("Upgrade"));
    answer.insert(header::SEC_WEBSOCKET_ACCEPT, accept);
    let handoff = Handoff {
        state,
        caller,
        headers: turn_headers(headers),
        peer,
    };
    (response, Some(handoff))
}

/// `Sec-WebSocket-Accept` for a well-formed version-13 handshake.
fn accept_key(headers: &HeaderMap) -> Result<HeaderValue, Box<Response>> {
    let upgrading = headers
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(','))
        .any(|token| token.trim().eq_ignore_ascii_case("upgrade"));
    let key = headers.get(header::SEC_WEBSOCKET_KEY);
    let (true, Some(key)) = (upgrading, key) else {
        return Err(Box::new(
            ApiError::InvalidRequest {
                message: "a WebSocket upgrade needs `Connection: Upgrade` and `Sec-WebSocket-Key`"
                    .into(),
                param: None,
            }
            .into_response(),
        ));
    };
    if headers.get(header::SEC_WEBSOCKET_VERSION) != Some(&HeaderValue::from_static("13")) {
        // RFC 6455, 4.4: the versions the server speaks, with a 426.
        let mut refusal = ApiError::InvalidRequest {
            message: "only WebSocket version 13 is served".into(),
            param: None,
        }
        .into_response();
        *refusal.status_mut() = StatusCode::UPGRADE_REQUIRED;
        refusal.headers_mut().insert(
            header::SEC_WEBSOCKET_VERSION,
            HeaderValue::from_static("13"),
        );
        return Err(Box::new(refusal));
    }
    HeaderValue::from_str(&derive_accept_key(key.as_bytes())).map_err(|_| {
        let failed = ApiError::Internal("the gateway could not answer the WebSocket handshake");
        Box::new(failed.into_response())
    })
}

/// The headers a turn is sent with: the upgrade's, less those of the handshake and of the
/// upgrade's own (empty) body, with the JSON body's type.
fn turn_headers(headers: &HeaderMap) -> HeaderMap {
    let mut turn = headers.clone();
    for name in [
        header::CONNECTION,
        header::UPGRADE,
        header::SEC_WEBSOCKET_KEY,
        header::SEC_WEBSOCKET_VERSION,
        header::SEC_WEBSOCKET_EXTENSIONS,
        header::SEC_WEBSOCKET_PROTOCOL,
        header::CONTENT_LENGTH,
        header::TRANSFER_ENCODING,
    ] {
        turn.remove(name);
    }
    turn.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    turn
}
