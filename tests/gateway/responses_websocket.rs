//! Responses over WebSocket (`GET /v1/responses`, upgraded): each `response.create` is a
//! request through the same chain as `POST /v1/responses`, its events JSON text frames; lanes
//! by `stream_id`; `previous_response_id` from the socket's memory or the key's own stored
//! turns; and the socket's caps (frame size, idle time, sockets per client), each ending as
//! docs/src/api/responses-websocket.md documents.

use futures_util::{SinkExt, StreamExt};
use serde_json::{Value, json};
use switchyard::fake::{Behavior, FakeHandle};
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::{Error as WsError, Message};

use super::support::*;

type Socket =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

/// Opens a socket on `gateway`, with `key` if given: the socket, or the HTTP refusal.
async fn open(
    gateway: &switchyard::server::Gateway,
    key: Option<&str>,
) -> Result<Socket, http::Response<Option<Vec<u8>>>> {
    let url = format!("{}/v1/responses", gateway.url().replacen("http", "ws", 1));
    let mut request = url.into_client_request().unwrap();
    if let Some(key) = key {
        let value = format!("Bearer {key}").parse().unwrap();
        request.headers_mut().insert("authorization", value);
    }
    match tokio_tungstenite::connect_async(request).await {
        Ok((socket, _)) => Ok(socket),
        Err(WsError::Http(response)) => Err(*response),
        Err(other) => panic!("the upgrade failed otherwise: {other}"),
    }
}

async fn send(socket: &mut Socket, event: Value) {
    socket.send(Message::text(event.to_string())).await.unwrap();
}

/// The next JSON event; `None` once the socket closes.
async fn next_event(socket: &mut Socket) -> Option<Value> {
    loop {
        match socket.next().await? {
            Ok(Message::Text(text)) => return Some(serde_json::from_str(&text).unwrap()),
            Ok(Message::Close(_)) | Err(_) => return None,
            Ok(_) => {}
        }
    }
}

/// Every event up to and including the turn's last (`response.completed`, `.incomplete`,
/// `.failed` or `error`).
async fn turn(socket: &mut Socket) -> Vec<Value> {
    let mut events = Vec::new();
    while let Some(event) = next_event(socket).await {
        let last = matches!(
            event["type"].as_str(),
            Some("response.completed" | "response.incomplete" | "response.failed" | "error")
        );
        events.push(event);
        if last {
            return events;
        }
    }
    panic!("the socket closed mid-turn: {events:?}");
}

fn create(input: &str) -> Value {
    json!({"type": "response.create", "model": "r", "input": input})
}

fn text_of(events: &[Value]) -> String {
    events
        .iter()
        .filter(|e| e["type"] == "response.output_text.delta")
        .map(|e| e["delta"].as_str().unwrap_or_default())
        .collect()
}

fn served_by(fake: &FakeHandle) -> TestGateway {
    TestGateway::new()
        .provider("up", fake)
        .route("r", &[("up", "m")], "")
}

#[tokio::test]
async fn a_response_streams_as_frames_and_says_what_it_cost() {
    let fake = scripted("up", [Behavior::ok().content("Hello from the socket")]).await;
    let gateway = served_by(&fake)
        .with("[[prices]]\nprovider = \"up\"\nmodel = \"m\"\ninput_per_1m = 2.0\noutput_per_1m = 10.0\n")
        .start()
        .await;
    let mut socket = open(&gateway, None).await.unwrap();
    send(&mut socket, create("Hi")).await;
    let events = turn(&mut socket).await;
    assert_eq!(events[0]["type"], "response.created", "{events:?}");
    assert_eq!(text_of(&events), "Hello from the socket");
    let completed = events.last().unwrap();
    assert_eq!(completed["type"], "response.completed", "{events:?}");
    assert!(completed.get("stream_id").is_none(), "no lane was named");
    let usage = &completed["response"]["usage"];
    let (tokens_in, tokens_out) = (
        usage["input_tokens"].as_f64().unwrap(),
        usage["output_tokens"].as_f64().unwrap(),
    );
    let expected = (tokens_in * 2.0 + tokens_out * 10.0) / 1e6;
    let cost = completed["x-switchyard-cost"].as_f64().expect("a cost");
    assert!((cost - expected).abs() < 1e-12, "{cost} against {expected}");
    // The turn's log row, named on its last event, says the same.
    let id = completed["x-switchyard-request-id"]
        .as_str()
        .expect("the row's id");
    let row = record(&gateway, id).await;
    assert_eq!(row.cost_usd, Some(cost));
    assert!(row.stream);
    assert_eq!(row.route.as_ref().map(|r| r.as_str()), Some("r"));
    // The upstream was asked for a stream, though the message never said so.
    assert_eq!(fake.requests()[0].json()["stream"], true);
}

#[tokio::test]
async fn previous_response_id_continues_from_the_sockets_memory_even_unstored() {
    let fake = scripted(
        "up",
        [
            Behavior::ok().content("Paris."),
            Behavior::ok().content("About two million."),
        ],
    )
    .await;
    let gateway = served_by(&fake).start().await;
    let mut socket = open(&gateway, None).await.unwrap();
    let mut first = create("Capital of France?");
    first["store"] = json!(false);
    send(&mut socket, first).await;
    let id = turn(&mut socket).await.last().unwrap()["response"]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let next = json!({
        "type": "response.create", "model": "r", "store": false,
        "previous_response_id": id, "input": "Its population?",
    });
    send(&mut socket, next).await;
    let events = turn(&mut socket).await;
    let completed = events.last().unwrap();
    assert_eq!(completed["type"], "response.completed", "{events:?}");
    assert_eq!(completed["response"]["previous_response_id"], id.as_str());
    // The second upstream call carried the whole conversation.
    let sent = fake.requests()[1].json();
    let said: Vec<String> = sent["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["content"].to_string())
        .collect();
    let said = said.join("\n");
    for part in ["Capital of France?", "Paris.", "Its population?"] {
        assert!(said.contains(part), "{part} missing from {said}");
    }
    // Not stored: over HTTP, the id names nothing.
    let stored = client()
        .get(format!("{}/v1/responses/{id}", gateway.url()))
        .send()
        .await
        .unwrap();
    assert_eq!(stored.status(), 404);
}

#[tokio::test]
async fn two_lanes_run_at_once_and_a_new_lane_forks_a_conversation() {
    let fake = scripted(
        "up",
        [
            Behavior::ok().content("first answer"),
            Behavior::ok().content("second answer"),
            Behavior::ok().content("forked answer"),
        ],
    )
    .await;
    let gateway = served_by(&fake).start().await;
    let mut socket = open(&gateway, None).await.unwrap();
    let mut a = create("one");
    a["stream_id"] = json!("a");
    let mut b = create("two");
    b["stream_id"] = json!("b");
    send(&mut socket, a).await;
    send(&mut socket, b).await;
    let mut completed = std::collections::BTreeMap::new();
    while completed.len() < 2 {
        let event = next_event(&mut socket).await.expect("events");
        let lane = event["stream_id"]
            .as_str()
            .expect("every event names its lane");
        assert!(lane == "a" || lane == "b", "{event}");
        if event["type"] == "response.completed" {
            completed.insert(
                lane.to_owned(),
                event["response"]["id"].as_str().unwrap().to_owned(),
            );
        }
    }
    // A third lane continues lane a's conversation, without touching lane a.
    let fork = json!({
        "type": "response.create", "model": "r", "stream_id": "c",
        "previous_response_id": completed["a"], "input": "and then?",
    });
    send(&mut socket, fork).await;
    let events = turn(&mut socket).await;
    assert!(events.iter().all(|e| e["stream_id"] == "c"), "{events:?}");
    assert_eq!(events.last().unwrap()["type"], "response.completed");
    // Lane a's conversation, not lane b's.
    let sent = fake.requests()[2].json().to_string();
    assert!(
        sent.contains("and then?") && sent.contains("\"one\""),
        "{sent}"
    );
    assert!(!sent.contains("\"two\""), "{sent}");
}

#[tokio::test]
async fn a_failing_first_step_fails_over_before_the_first_event() {
    let (primary, secondary) = primary_and_secondary([Behavior::status(503)]).await;
    let gateway = TestGateway::new()
        .provider("primary", &primary)
        .provider("secondary", &secondary)
        .route("r", &[("primary", "m"), ("secondary", "m")], "")
        .fast_retry()
        .start()
        .await;
    let mut socket = open(&gateway, None).await.unwrap();
    send(&mut socket, create("Hi")).await;
    let events = turn(&mut socket).await;
    assert!(events.iter().all(|e| e["type"] != "error"), "{events:?}");
    assert_eq!(events.last().unwrap()["type"], "response.completed");
    assert_eq!(primary.calls(), 1);
    assert_eq!(secondary.calls(), 1);
}

#[tokio::test]
async fn a_refused_turn_is_an_error_event_and_the_socket_stays_open() {
    let fake = scripted("up", [Behavior::status(400)]).await;
    let gateway = served_by(&fake).start().await;
    let mut socket = open(&gateway, None).await.unwrap();
    send(
        &mut socket,
        json!({"type": "response.create", "model": "nope", "input": "x"}),
    )
    .await;
    let events = turn(&mut socket).await;
    assert_eq!(events.len(), 1);
    assert_eq!(events[0]["type"], "error");
    assert_eq!(events[0]["status"], 404, "{events:?}");
    // A refused turn has its log row too.
    let id = events[0]["x-switchyard-request-id"]
        .as_str()
        .expect("the row's id");
    assert_eq!(record(&gateway, id).await.status, 404);
    send(&mut socket, json!({"type": "response.cancel"})).await;
    let unsupported = turn(&mut socket).await;
    assert_eq!(unsupported[0]["error"]["code"], "unsupported_event");
    send(&mut socket, create("bad upstream")).await;
    let failed = turn(&mut socket).await;
    assert_eq!(failed[0]["type"], "error");
    assert_eq!(failed[0]["status"], 400, "{failed:?}");
    send(
        &mut socket,
        json!({"type": "response.create", "model": "r", "input": "x", "background": true}),
    )
    .await;
    assert_eq!(turn(&mut socket).await[0]["error"]["param"], "background");
}

#[tokio::test]
async fn a_key_sees_only_its_own_turns_and_an_unknown_key_is_refused_at_the_upgrade() {
    let fake = scripted("up", []).await;
    let gateway = served_by(&fake)
        .with("[auth]\nrequired = true\n")
        .start()
        .await;
    let refused = open(&gateway, Some("sy-not-a-key"))
        .await
        .expect_err("refused");
    assert_eq!(refused.status(), 401);
    let body: Value = serde_json::from_slice(refused.body().as_deref().unwrap()).unwrap();
    assert_eq!(body["error"]["type"], "authentication_error", "{body}");
    assert_eq!(
        open(&gateway, None)
            .await
            .err()
            .map(|r| r.status().as_u16()),
        Some(401)
    );

    let owner = stored_key(&gateway, "ana", "default", None).await.0;
    let other = stored_key(&gateway, "bo", "default", None).await.0;
    let mut socket = open(&gateway, Some(&owner)).await.unwrap();
    send(&mut socket, create("a secret plan")).await;
    let id = turn(&mut socket).await.last().unwrap()["response"]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    // The owner continues from the store on a new socket (its memory is per socket).
    let mut again = open(&gateway, Some(&owner)).await.unwrap();
    let next = json!({"type": "response.create", "model": "r", "previous_response_id": id, "input": "go on"});
    send(&mut again, next.clone()).await;
    let continued = turn(&mut again).await;
    assert_eq!(
        continued.last().unwrap()["type"],
        "response.completed",
        "{continued:?}"
    );
    // Another key cannot.
    let mut theirs = open(&gateway, Some(&other)).await.unwrap();
    send(&mut theirs, next).await;
    let refused = turn(&mut theirs).await;
    assert_eq!(
        refused[0]["error"]["code"], "previous_response_not_found",
        "{refused:?}"
    );
    assert_eq!(fake.calls(), 2, "the other key's turn never went upstream");
}

#[tokio::test]
async fn an_oversize_message_closes_the_socket_with_1009() {
    let fake = scripted("up", []).await;
    let gateway = served_by(&fake)
        .with("[server]\nmax_body_bytes = 4096\n")
        .start()
        .await;
    let mut socket = open(&gateway, None).await.unwrap();
    let big = create(&"x".repeat(10_000));
    let _ = socket.send(Message::text(big.to_string())).await;
    let close = loop {
        match socket.next().await {
            Some(Ok(Message::Close(frame))) => break frame,
            Some(Ok(_)) => {}
            other => panic!("expected a close frame, got {other:?}"),
        }
    };
    let close = close.expect("a close frame with a code");
    assert_eq!(close.code, CloseCode::Size);
    assert!(close.reason.contains("4096"), "{}", close.reason);
    assert_eq!(fake.calls(), 0);
}

#[tokio::test]
async fn an_idle_socket_is_closed_normally_and_one_in_use_is_not() {
    let fake = scripted("up", []).await;
    let gateway = served_by(&fake)
        .with("[server]\nwebsocket_idle_timeout = \"300ms\"\n")
        .start()
        .await;
    let mut socket = open(&gateway, None).await.unwrap();
    send(&mut socket, create("Hi")).await;
    assert_eq!(
        turn(&mut socket).await.last().unwrap()["type"],
        "response.completed"
    );
    let close = loop {
        match socket.next().await {
            Some(Ok(Message::Close(frame))) => break frame.expect("a code"),
            Some(Ok(_)) => {}
            other => panic!("expected a close frame, got {other:?}"),
        }
    };
    assert_eq!(close.code, CloseCode::Normal);
    assert!(close.reason.contains("idle"), "{}", close.reason);
}

#[tokio::test]
async fn sockets_count_under_the_per_client_connection_cap() {
    let fake = scripted("up", []).await;
    let gateway = served_by(&fake)
        .with("[server]\nmax_connections_per_ip = 2\n")
        .start()
        .await;
    let mut first = open(&gateway, None).await.unwrap();
    let _second = open(&gateway, None).await.unwrap();
    let refused = open(&gateway, None).await.expect_err("a third is refused");
    assert_eq!(refused.status(), 503);
    let body: Value = serde_json::from_slice(refused.body().as_deref().unwrap()).unwrap();
    assert_eq!(body["error"]["code"], "too_many_connections", "{body}");
    // The first is still served.
    send(&mut first, create("Hi")).await;
    assert_eq!(
        turn(&mut first).await.last().unwrap()["type"],
        "response.completed"
    );
}

/// A client that stops reading mid-stream is let go once a frame has waited an idle timeout:
/// its turn ends, and the upstream stream with it, rather than holding both for ever.
#[tokio::test]
async fn a_client_that_stops_reading_is_let_go() {
    // 32 KiB a repeated piece, so the buffers fill after a few hundred events.
    let piece = "x".repeat(64 * 1024);
    let endless = Behavior::endless(0).content(&piece).chunks(2, 0);
    let fake = scripted("up", [endless]).await;
    let gateway = served_by(&fake)
        .with("[server]\nidle_timeout = \"300ms\"\n")
        .start()
        .await;
    // A small receive window, so the gateway's writes back up after a few events.
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.set_recv_buffer_size(4096).unwrap();
    let address = gateway.url().trim_start_matches("http://").parse().unwrap();
    let stream = socket.connect(address).await.unwrap();
    let url = format!("{}/v1/responses", gateway.url().replacen("http", "ws", 1));
    let stream = tokio_tungstenite::MaybeTlsStream::Plain(stream);
    let (mut socket, _) = tokio_tungstenite::client_async(url, stream).await.unwrap();
    send(&mut socket, create("Talk for ever")).await;
    // Nothing more is read: the socket's buffers fill, then the gateway's writer waits.
    let cancelled = fake.wait_until(|stats| stats.streams_cancelled >= 1);
    tokio::time::timeout(std::time::Duration::from_secs(60), cancelled)
        .await
        .expect("the upstream stream was let go");
    drop(socket);
}
