//! `http2 = true` on a provider: requests go to it over HTTP/2 (prior knowledge on plain
//! http), many streams to one connection, up to 100 a connection, and a stream's place is
//! given back when its answer ends or its client goes away.

use std::time::Duration;

use futures_util::StreamExt;
use switchyard::fake::{Behavior, FakeHandle, FakeUpstream};
use switchyard::server::Gateway;

use super::support::*;

/// One serving thread, so the gateway's connections to the fake come from one pool.
fn config(fake: &FakeHandle, http2: bool) -> TestGateway {
    TestGateway::new()
        .with("[server]\nthreads = 1\n")
        .provider_at("up", &fake.base_url(), "key_required = false")
        .set("http2", http2)
        .route("r", &[("up", "m")], "")
}

#[tokio::test]
async fn a_provider_with_http2_is_sent_json_and_streams_over_http2() {
    let fake = scripted("up", []).await;
    let gateway = config(&fake, true).start().await;

    let answer = post(&gateway, &chat("r")).await;
    assert_eq!(answer.status(), 200);
    let answer: serde_json::Value = answer.json().await.unwrap();
    assert!(!content(&answer).is_empty(), "{answer}");

    let streamed = post(&gateway, &chat_stream("r")).await;
    assert_eq!(streamed.status(), 200);
    let events = sse_data(&streamed.text().await.unwrap());
    assert_eq!(
        events.last().map(String::as_str),
        Some("[DONE]"),
        "{events:?}"
    );
    assert!(!streamed_text(&events).is_empty(), "{events:?}");

    let requests = fake.requests();
    assert_eq!(requests.len(), 2);
    for request in &requests {
        assert_eq!(request.version, "HTTP/2.0");
        assert_eq!(request.path, "/v1/chat/completions");
    }
    // Both on one connection.
    assert_eq!(fake.stats().open_connections, 1);
}

#[tokio::test]
async fn a_provider_without_it_is_sent_http1() {
    let fake = scripted("up", []).await;
    let gateway = config(&fake, false).start().await;
    assert_eq!(post(&gateway, &chat("r")).await.status(), 200);
    assert_eq!(fake.requests()[0].version, "HTTP/1.1");
}

/// `fake`, each of whose streams stops after its first event, behind a gateway that reaches
/// it over HTTP/2; with a client and the gateway's chat URL.
async fn stalling(fake: FakeUpstream) -> (FakeHandle, Gateway, reqwest::Client, String) {
    let fake = fake
        .then(Behavior::ok().chunks(10, 0).stall_after(1))
        .start()
        .await
        .unwrap();
    let gateway = config(&fake, true).start().await;
    let url = format!("{}/v1/chat/completions", gateway.url());
    (fake, gateway, client(), url)
}

/// Opens a stream through the gateway at `url` and returns its body once its first event is
/// in; the fake holds it open after that, until the body is dropped.
async fn open_stream(
    client: &reqwest::Client,
    url: &str,
) -> impl futures_util::Stream<Item = reqwest::Result<bytes::Bytes>> {
    let response = client
        .post(url)
        .json(&chat_stream("r"))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let mut body = response.bytes_stream();
    body.next().await.expect("a first event").unwrap();
    body
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streams_share_connections_a_hundred_each_and_give_their_place_back() {
    let (fake, _gateway, client, url) = stalling(FakeUpstream::new("up")).await;

    for round in 1..=2 {
        let requests = (0..150).map(|_| open_stream(&client, &url));
        let open = futures_util::future::join_all(requests).await;
        // 150 streams open at once: a connection of 100 and one of 50. Over HTTP/1.1 it
        // would be 150 connections; had the first round's streams kept their places, the
        // second would need more connections.
        assert_eq!(fake.stats().open_connections, 2, "round {round}");
        drop(open);
        let cancelled = fake.wait_until(|s| s.streams_cancelled == 150 * round);
        tokio::time::timeout(Duration::from_secs(30), cancelled)
            .await
            .unwrap_or_else(|_| panic!("round {round}: {:?}", fake.stats()));
    }
}

/// Two providers on one fake: the same origin, so the same HTTP/2 connection.
fn two_providers(fake: &FakeHandle) -> TestGateway {
    let over_http2 = "key_required = false\nhttp2 = true";
    TestGateway::new()
        .with("[server]\nthreads = 1\n")
        .provider_at("primary", &fake.base_url(), over_http2)
        .provider_at("secondary", &fake.base_url(), over_http2)
        .route("r", &[("primary", "a"), ("secondary", "b")], "")
}

#[tokio::test]
async fn a_reset_stream_fails_over_and_its_connection_serves_on() {
    let fake = scripted("up", [Behavior::reset(), Behavior::ok()]).await;
    let gateway = two_providers(&fake).start().await;

    let answer = post(&gateway, &chat("r")).await;
    assert_eq!(answer.status(), 200);
    assert_eq!(header(&answer, "x-switchyard-step"), "1");
    let second = post(&gateway, &chat("r")).await;
    assert_eq!(header(&second, "x-switchyard-step"), "0");

    let requests = fake.requests();
    let models: Vec<String> = requests
        .iter()
        .map(|r| r.json()["model"].as_str().unwrap_or_default().to_owned())
        .collect();
    assert_eq!(models, ["a", "b", "a"]);
    assert!(requests.iter().all(|r| r.version == "HTTP/2.0"));
    // The reset ended one stream, not the connection the other requests shared.
    assert_eq!(fake.stats().open_connections, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_allows_fewer_streams_gets_more_connections() {
    let (fake, _gateway, client, url) =
        stalling(FakeUpstream::new("up").http2_max_streams(10)).await;
    // One stream first: the first connection to an origin is made before anything is known
    // of its server, so a burst could overfill it before its SETTINGS arrive.
    let first = open_stream(&client, &url).await;
    let requests = (0..24).map(|_| open_stream(&client, &url));
    // Every stream gets its first event: none waits for room on a full connection.
    let open = tokio::time::timeout(
        Duration::from_secs(30),
        futures_util::future::join_all(requests),
    )
    .await
    .unwrap_or_else(|_| panic!("streams waited for room: {:?}", fake.stats()));
    assert_eq!(fake.stats().open_connections, 3);
    drop((first, open));
}
