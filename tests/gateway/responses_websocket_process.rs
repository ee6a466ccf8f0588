//! Responses over WebSocket on the real process, measured from outside: memory stays bounded
//! while clients send messages over the cap, and SIGTERM lets a turn in flight finish before
//! the socket closes with 1001.

use futures_util::{SinkExt, StreamExt};
use serde_json::{Value, json};
use switchyard::fake::FakeHandle;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;

use super::logqueue::rss_kib;
use super::process::{Served, TempDir, serve};
use super::support::*;

fn start(dir: &TempDir, fake: &FakeHandle, server: &str) -> Served {
    let config = dir.0.join("switchyard.toml");
    let text = format!(
        "[server]\nlisten = \"127.0.0.1:0\"\n{server}\n{}{}",
        provider("up", fake),
        route("r", &[("up", "m")], ""),
    );
    std::fs::write(&config, test_config_text(&text)).unwrap();
    serve(&dir.0, &config)
}

async fn open(
    served: &Served,
) -> tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>> {
    let url = format!("{}/v1/responses", served.url.replacen("http", "ws", 1));
    tokio_tungstenite::connect_async(url).await.unwrap().0
}

/// The code of the close frame the socket ends with.
async fn close_code(
    socket: &mut tokio_tungstenite::WebSocketStream<
        tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>,
    >,
) -> (Option<CloseCode>, Vec<Value>) {
    let mut events = Vec::new();
    loop {
        match socket.next().await {
            Some(Ok(Message::Close(frame))) => return (frame.map(|f| f.code), events),
            Some(Ok(Message::Text(text))) => events.push(serde_json::from_str(&text).unwrap()),
            Some(Ok(_)) => {}
            _ => return (None, events),
        }
    }
}

#[tokio::test]
async fn memory_stays_bounded_under_oversize_messages() {
    let fake = scripted("up", []).await;
    let dir = TempDir::new();
    let served = start(&dir, &fake, "max_body_bytes = 65536");
    let pid = served.child.id();
    let oversize =
        json!({"type": "response.create", "model": "r", "input": "x".repeat(1 << 20)}).to_string();
    let round = |count: usize| {
        let (served, oversize) = (&served, oversize.clone());
        async move {
            for _ in 0..count {
                let mut socket = open(served).await;
                let _ = socket.send(Message::text(oversize.clone())).await;
                let (code, _) = close_code(&mut socket).await;
                assert_eq!(code, Some(CloseCode::Size));
            }
        }
    };
    // Warm up: the allocator's arenas and the runtime's buffers reach their working size.
    round(30).await;
    let before = rss_kib(pid);
    round(300).await;
    let after = rss_kib(pid);
    eprintln!("rss before {before} KiB, after {after} KiB");
    // 300 MiB were sent at it; a gateway that buffered them would grow by that.
    assert!(
        after.saturating_sub(before) < 16 * 1024,
        "RSS grew from {before} KiB to {after} KiB"
    );
    assert_eq!(fake.calls(), 0);
}

#[tokio::test]
async fn sigterm_lets_a_turn_in_flight_finish_then_closes_with_1001() {
    let fake = scripted("up", []).await;
    let dir = TempDir::new();
    let served = start(&dir, &fake, "drain_delay = \"0s\"");
    let mut socket = open(&served).await;
    fake.hold();
    let create = json!({"type": "response.create", "model": "r", "input": "Hi"});
    socket
        .send(Message::text(create.to_string()))
        .await
        .unwrap();
    fake.wait_until(|stats| stats.calls >= 1).await;
    served.signal("TERM");
    served.wait_for_line(&["shutting down"]);
    fake.release();
    let (code, events) = close_code(&mut socket).await;
    let last = events.last().expect("the turn's events");
    assert_eq!(last["type"], "response.completed", "{events:?}");
    assert_eq!(code, Some(CloseCode::Away));
}
