//! Client connections: timeouts on the head, the body and idleness, a cap on how many, and a
//! shutdown that a slow client cannot hold up.

use std::time::{Duration, Instant};

use futures_util::StreamExt;
use serde_json::Value;
use switchyard::fake::{Behavior, FakeUpstream};
use switchyard::telemetry::Outcome;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::spawned::{Spawned, patient_client};
use crate::gateway::support::*;

/// Long enough for any step below on a loaded machine; only a hang reaches it.
const BOUND: Duration = Duration::from_secs(20);

/// Reads until the peer closes; the bytes, or `None` if it stays open past `limit`.
async fn read_to_close(stream: &mut TcpStream, limit: Duration) -> Option<Vec<u8>> {
    let mut out = Vec::new();
    let reading = async {
        let mut buf = [0u8; 4096];
        loop {
            match stream.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => out.extend_from_slice(&buf[..n]),
            }
        }
    };
    tokio::time::timeout(limit, reading).await.ok()?;
    Some(out)
}

/// A POST whose head promises `length` bytes of body; the body is left to the caller.
fn post_head(path: &str, length: usize) -> String {
    format!(
        "POST {path} HTTP/1.1\r\nhost: gateway\r\ncontent-type: application/json\r\ncontent-length: {length}\r\n\r\n"
    )
}

/// Writes one byte every `interval` until the peer stops taking them.
fn drip(mut writer: tokio::net::tcp::OwnedWriteHalf, interval: Duration) {
    tokio::spawn(async move {
        loop {
            // The pause is the scenario, not a wait: a slow-loris client that keeps its body
            // just alive, which the gateway must cut all the same.
            tokio::time::sleep(interval).await;
            if writer.write_all(b" ").await.is_err() {
                return;
            }
        }
    });
}

/// A fake `up` and a gateway process serving route `r` over it, with the `[server]` lines
/// `server` and at most `nofile` descriptors.
async fn spawned_over_fake(
    server: &str,
    nofile: Option<u64>,
) -> (switchyard::fake::FakeHandle, Spawned) {
    let fake = scripted("up", []).await;
    let gateway = Spawned::start(server, &upstream_config(&fake).raw_text(), nofile);
    (fake, gateway)
}

/// Route `r` over provider `up` at `fake`.
fn upstream_config(fake: &switchyard::fake::FakeHandle) -> TestGateway {
    TestGateway::new()
        .provider("up", fake)
        .route("r", &[("up", "m")], "")
}

#[tokio::test]
async fn silent_sockets_cannot_lock_clients_out_of_a_gateway_with_few_descriptors() {
    let (_fake, gateway) = spawned_over_fake("header_timeout = \"500ms\"", Some(256)).await;
    let limits = std::fs::read_to_string(format!("/proc/{}/limits", gateway.pid())).unwrap();
    assert!(
        limits
            .lines()
            .any(|l| l.starts_with("Max open files") && l.contains(" 256 ")),
        "{limits}"
    );
    let mut silent = Vec::new();
    for _ in 0..300 {
        silent.push(TcpStream::connect(gateway.addr).await.expect("connects"));
    }

    let client = patient_client(BOUND);
    let health = client
        .get(format!("{}/healthz", gateway.url()))
        .send()
        .await
        .expect("/healthz answers");
    assert_eq!(health.status(), 200);
    let response = client
        .post(format!("{}/v1/chat/completions", gateway.url()))
        .json(&chat("r"))
        .send()
        .await
        .expect("a client is answered");
    let status = response.status().as_u16();
    let body: Value = response.json().await.unwrap();
    match status {
        200 => assert_eq!(content(&body), "Hello from up!"),
        503 => drop(error_message(&body)),
        other => panic!("neither served nor a clean 503: {other} {body}"),
    }

    // Every silent socket is closed by the gateway, not left to hold a descriptor. The close
    // a socket reads is the gateway dropping its end, which is what frees the descriptor:
    // once every one has read it, nothing is left to wait for. A gateway that kept them
    // (say, a FIN sent but the socket never dropped) holds some 300 here.
    let started = Instant::now();
    for stream in &mut silent {
        let left = BOUND.saturating_sub(started.elapsed());
        let said = read_to_close(stream, left).await.expect("closed in time");
        assert!(said.is_empty(), "a silent socket is answered with nothing");
    }
    let open = gateway.open_fds();
    assert!(open < 64, "descriptors are released: {open} open");
}

#[tokio::test]
async fn a_silent_socket_waits_header_timeout_and_an_idle_one_idle_timeout() {
    let gateway = Spawned::start(
        "header_timeout = \"300ms\"\nidle_timeout = \"1500ms\"",
        "",
        None,
    );
    let opened = Instant::now();
    let mut silent = TcpStream::connect(gateway.addr).await.unwrap();
    let mut idle = TcpStream::connect(gateway.addr).await.unwrap();
    // Before the request is sent, so surely before the server's idle time starts.
    let sent = Instant::now();
    idle.write_all(b"GET /healthz HTTP/1.1\r\nhost: gateway\r\n\r\n")
        .await
        .unwrap();
    let mut answer = [0u8; 1024];
    let n = idle.read(&mut answer).await.unwrap();
    assert!(answer[..n].starts_with(b"HTTP/1.1 200"));

    read_to_close(&mut silent, BOUND)
        .await
        .expect("the silent socket is closed");
    assert!(opened.elapsed() >= Duration::from_millis(300));
    read_to_close(&mut idle, BOUND)
        .await
        .expect("the idle socket is closed");
    assert!(
        sent.elapsed() >= Duration::from_millis(1500),
        "a kept-alive connection gets idle_timeout, not header_timeout"
    );
}

#[tokio::test]
async fn a_head_begun_on_a_kept_alive_connection_gets_header_timeout_not_idle_timeout() {
    let gateway = Spawned::start(
        "header_timeout = \"300ms\"\nidle_timeout = \"60s\"",
        "",
        None,
    );
    let mut kept = TcpStream::connect(gateway.addr).await.unwrap();
    kept.write_all(b"GET /healthz HTTP/1.1\r\nhost: gateway\r\n\r\n")
        .await
        .unwrap();
    let mut answer = [0u8; 1024];
    let n = kept.read(&mut answer).await.unwrap();
    assert!(answer[..n].starts_with(b"HTTP/1.1 200"));
    // The next head begins and stops: from its first byte, the connection has
    // header_timeout, not what was left of the idle connection's 60 s.
    let begun = Instant::now();
    kept.write_all(b"GET /healthz HTTP/1.1\r\n").await.unwrap();
    read_to_close(&mut kept, BOUND)
        .await
        .expect("closed after header_timeout, long before idle_timeout");
    assert!(begun.elapsed() >= Duration::from_millis(300));
}

#[tokio::test]
async fn a_slow_drip_body_is_cut_after_body_timeout() {
    let gateway = Spawned::start("body_timeout = \"500ms\"", "", None);
    let stream = TcpStream::connect(gateway.addr).await.unwrap();
    let (mut reader, mut writer) = stream.into_split();
    writer
        .write_all(post_head("/v1/chat/completions", 10_000).as_bytes())
        .await
        .unwrap();
    drip(writer, Duration::from_millis(50));
    let mut answer = Vec::new();
    let read = tokio::time::timeout(BOUND, reader.read_to_end(&mut answer)).await;
    assert!(read.is_ok(), "the dripping request is never cut");
    let answer = String::from_utf8_lossy(&answer);
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    assert!(answer.contains("\"code\":\"body_timeout\""), "{answer}");
}

#[tokio::test]
async fn sigterm_ends_within_shutdown_grace_despite_a_dripping_client_and_an_endless_stream() {
    let fake = scripted("up", [Behavior::endless(20)]).await;
    let store = std::env::temp_dir().join(format!("switchyard-grace-{}.db", uuid::Uuid::now_v7()));
    let mut gateway = Spawned::start(
        "shutdown_grace = \"500ms\"\nbody_timeout = \"1m\"",
        &upstream_config(&fake)
            .with("[store]\n")
            .set("url", format!("sqlite://{}", store.display()))
            .with("[retry]\nrequest_deadline = \"1m\"\n")
            .raw_text(),
        None,
    );
    let response = client()
        .post(format!("{}/v1/chat/completions", gateway.url()))
        .json(&chat_stream("r"))
        .send()
        .await
        .unwrap();
    let mut body = response.bytes_stream();
    let mut text = String::from_utf8_lossy(&body.next().await.unwrap().unwrap()).into_owned();
    let stream = TcpStream::connect(gateway.addr).await.unwrap();
    let (_reader, mut writer) = stream.into_split();
    writer
        .write_all(post_head("/v1/chat/completions", 10_000).as_bytes())
        .await
        .unwrap();
    drip(writer, Duration::from_millis(50));

    gateway.terminate();
    let rest = async {
        while let Some(Ok(chunk)) = body.next().await {
            text.push_str(&String::from_utf8_lossy(&chunk));
        }
    };
    assert!(
        tokio::time::timeout(BOUND, rest).await.is_ok(),
        "the stream never ends"
    );
    let last = sse_data(&text).pop().unwrap_or_default();
    let last: Value = serde_json::from_str(&last).unwrap_or(Value::Null);
    assert_eq!(last["error"]["code"], "shutting_down", "{text}");
    let status = gateway.exit_within(BOUND).await.expect("the gateway exits");
    assert!(status.success(), "{status:?}");
    // The stream's row was flushed before the process ended.
    let logs = gateway.command(&["logs", "--json"]);
    for suffix in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{}{suffix}", store.display()));
    }
    let row = logs
        .lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .find(|row| row["error"] == "shutting_down")
        .unwrap_or_else(|| panic!("no row for the cut stream in {logs}"));
    assert_eq!(row["partial"], true, "{row}");
}

#[tokio::test]
async fn over_max_connections_a_client_gets_a_503_and_healthz_still_answers() {
    let fake = slow_streams().await;
    let gateway = upstream_config(&fake)
        .with("[server]\nmax_connections = 2\nheader_timeout = \"30s\"\n")
        .start()
        .await;
    // Both connections busy with a stream: none is idle to make room (an idle one would
    // close for the newcomer), so the next client is over the cap.
    let held = busy_streams(&gateway, 2).await;

    let client = patient_client(BOUND);
    let response = client
        .post(format!("{}/v1/chat/completions", gateway.url()))
        .json(&chat("r"))
        .send()
        .await
        .expect("an answer, not a hang");
    assert_eq!(response.status(), 503);
    assert!(!header(&response, "retry-after").is_empty());
    let id = header(&response, "x-switchyard-request-id").to_owned();
    let body: Value = response.json().await.unwrap();
    assert!(error_message(&body).contains("connection"), "{body}");
    let messages = client
        .post(format!("{}/v1/messages", gateway.url()))
        .json(&message("r", false))
        .send()
        .await
        .unwrap();
    assert_eq!(messages.status(), 503);
    let body: Value = messages.json().await.unwrap();
    assert_eq!(body["type"], "error", "Anthropic's shape: {body}");
    let health = client
        .get(format!("{}/healthz", gateway.url()))
        .send()
        .await
        .unwrap();
    assert_eq!(health.status(), 200);
    assert_eq!(
        fake.calls(),
        2,
        "only the two held streams reached the upstream"
    );
    let row = record(&gateway, &id).await;
    assert_eq!((row.status, row.outcome), (503, Outcome::Rejected));
    drop(held);
}

#[tokio::test]
async fn a_client_that_never_reads_its_stream_is_let_go() {
    // The upstream sends as fast as it can; the client reads nothing, so the gateway's
    // writes stall and the stream cannot reach its own deadline check.
    let fake = scripted("up", [Behavior::endless(0).content(&"x".repeat(3 << 20))]).await;
    let gateway = upstream_config(&fake)
        .with("[server]\nbody_timeout = \"300ms\"\nidle_timeout = \"300ms\"\n")
        .with("[retry]\nrequest_deadline = \"2s\"\n")
        .start()
        .await;
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.set_recv_buffer_size(4096).unwrap();
    let mut stream = socket.connect(gateway.addr()).await.unwrap();
    let body = serde_json::to_string(&chat_stream("r")).unwrap();
    stream
        .write_all(format!("{}{body}", post_head("/v1/chat/completions", body.len())).as_bytes())
        .await
        .unwrap();
    let asked = tokio::time::timeout(BOUND, fake.wait_until(|stats| stats.calls == 1));
    assert!(asked.await.is_ok(), "the request reaches the upstream");
    let let_go = tokio::time::timeout(BOUND, gateway.wait_connections(|open| *open == 0));
    assert!(let_go.await.is_ok(), "the connection is held forever");
    drop(stream);
}

/// The names of the process's threads (`/proc/<pid>/task/*/comm`, cut at 15 characters).
fn thread_names(pid: u32) -> Vec<String> {
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).expect("the process is alive");
    tasks
        .filter_map(|task| std::fs::read_to_string(task.ok()?.path().join("comm")).ok())
        .map(|name| name.trim().to_owned())
        .collect()
}

#[tokio::test]
async fn connections_are_served_on_as_many_threads_as_configured() {
    let (_fake, gateway) = spawned_over_fake("threads = 3", None).await;
    // Clients of their own, so each request comes on a connection of its own.
    let requests = (0..6).map(|_| {
        let url = format!("{}/v1/chat/completions", gateway.url());
        async move {
            let response = patient_client(BOUND)
                .post(url)
                .json(&chat("r"))
                .send()
                .await
                .expect("answered");
            assert_eq!(response.status(), 200);
        }
    });
    futures_util::future::join_all(requests).await;
    let serving = thread_names(gateway.pid())
        .into_iter()
        .filter(|name| name.starts_with("switchyard-serv"))
        .count();
    assert_eq!(serving, 3, "{:?}", thread_names(gateway.pid()));
}

/// On SIGTERM a connection that has not sent a whole request holds no work: a half-sent head
/// and a half-sent body are closed at once, not waited on for the whole `shutdown_grace`.
#[tokio::test]
async fn sigterm_closes_half_sent_requests_at_once() {
    let (fake, mut gateway) = spawned_over_fake(
        "shutdown_grace = \"5m\"\nheader_timeout = \"5m\"\nbody_timeout = \"5m\"",
        None,
    )
    .await;
    // A head without its end, and a whole head with 100 of its 10,000 body bytes.
    let mut half_head = TcpStream::connect(gateway.addr).await.unwrap();
    half_head
        .write_all(b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\n")
        .await
        .unwrap();
    let mut half_body = TcpStream::connect(gateway.addr).await.unwrap();
    half_body
        .write_all(post_head("/v1/chat/completions", 10_000).as_bytes())
        .await
        .unwrap();
    half_body.write_all(&[b' '; 100]).await.unwrap();
    // Both have reached the gateway once a whole request on a third connection is served.
    let served = client()
        .post(format!("{}/v1/chat/completions", gateway.url()))
        .json(&chat("r"))
        .send()
        .await
        .unwrap();
    assert_eq!(served.status(), 200);

    gateway.terminate();
    let status = gateway
        .exit_within(BOUND)
        .await
        .expect("the gateway exits long before its 5-minute grace");
    assert!(status.success(), "{status:?}");
    assert_eq!(fake.calls(), 1);
}

/// SIGTERM turns `/readyz` to 503 at once, while the listener keeps accepting and serving for
/// `drain_delay`, so a load balancer sees the 503 and stops sending before any connection is
/// refused; then the gateway stops and exits.
#[tokio::test]
async fn sigterm_turns_readyz_503_and_keeps_serving_through_the_drain_delay() {
    let (_fake, mut gateway) = spawned_over_fake("drain_delay = \"3s\"", None).await;
    let client = client();
    let ready = client
        .get(format!("{}/readyz", gateway.url()))
        .send()
        .await
        .unwrap();
    assert_eq!(ready.status(), 200);
    gateway.terminate();
    // The signal lands at some point: ask until /readyz says so, each time on a new
    // connection, as a load balancer's checks come.
    let mut seen = None;
    for _ in 0..10_000 {
        let fresh = fresh_client();
        let answer = fresh
            .get(format!("{}/readyz", gateway.url()))
            .send()
            .await
            .expect("still accepting while /readyz says 503");
        if answer.status() == 503 {
            seen = Some(answer.text().await.unwrap());
            break;
        }
    }
    let body = seen.expect("/readyz turned 503");
    assert!(body.contains("draining"), "{body}");
    // Still within the drain delay: a new connection is accepted and its request served.
    let fresh = fresh_client();
    let served = fresh
        .post(format!("{}/v1/chat/completions", gateway.url()))
        .json(&chat("r"))
        .send()
        .await
        .expect("accepted during the drain delay");
    assert_eq!(served.status(), 200);
    let status = gateway.exit_within(BOUND).await.expect("the gateway exits");
    assert!(status.success(), "{status:?}");
}

/// A fake whose every answer streams for 5 s, so a request on it stays busy.
async fn slow_streams() -> switchyard::fake::FakeHandle {
    FakeUpstream::new("up")
        .then(Behavior::ok().chunks(100, 50))
        .cycle()
        .start()
        .await
        .unwrap()
}

/// `count` streams in flight on route `r`, each on a connection of its own and past its
/// first event: connections that are busy, not idle.
async fn busy_streams(
    gateway: &switchyard::server::Gateway,
    count: usize,
) -> Vec<impl futures_util::Stream<Item = reqwest::Result<bytes::Bytes>>> {
    let mut streams = Vec::new();
    for _ in 0..count {
        let response = fresh_client()
            .post(format!("{}/v1/chat/completions", gateway.url()))
            .json(&chat_stream("r"))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 200);
        let mut body = Box::pin(response.bytes_stream());
        futures_util::StreamExt::next(&mut body)
            .await
            .unwrap()
            .unwrap();
        streams.push(body);
    }
    streams
}

/// Opens a connection and completes one `/healthz` on it, leaving it idle and kept alive;
/// `None` when the gateway did not answer within `limit`.
async fn idle_keep_alive(addr: std::net::SocketAddr, limit: Duration) -> Option<TcpStream> {
    let mut stream = TcpStream::connect(addr).await.ok()?;
    stream
        .write_all(b"GET /healthz HTTP/1.1\r\nhost: x\r\n\r\n")
        .await
        .ok()?;
    let mut head = [0u8; 12];
    let read = tokio::time::timeout(
        limit,
        tokio::io::AsyncReadExt::read_exact(&mut stream, &mut head),
    );
    match read.await {
        Ok(Ok(_)) if &head == b"HTTP/1.1 200" => Some(stream),
        _ => None,
    }
}

/// With `ulimit -n 256`, one client holding 225 idle keep-alive connections used to leave a
/// legitimate request waiting until it timed out. A full gateway now closes the connection
/// idle longest to make room, so the request is served.
#[tokio::test]
async fn idle_keep_alives_cannot_lock_clients_out_of_a_gateway_with_few_descriptors() {
    let (_fake, gateway) = spawned_over_fake("idle_timeout = \"10m\"", Some(256)).await;
    let mut held = Vec::new();
    for _ in 0..225 {
        if let Some(stream) = idle_keep_alive(gateway.addr, Duration::from_secs(2)).await {
            held.push(stream);
        }
    }
    assert!(
        held.len() >= 80,
        "only {} connections were served",
        held.len()
    );
    let request = fresh_client()
        .post(format!("{}/v1/chat/completions", gateway.url()))
        .json(&chat("r"))
        .send();
    let response = tokio::time::timeout(BOUND, request)
        .await
        .expect("answered within the bound")
        .expect("a client is answered");
    assert_eq!(response.status(), 200);
    drop(held);
}

/// `[server] max_connections_per_ip`: an address at its cap makes room from its own idle
/// connections; with none idle, its next connection is refused with a 503.
#[tokio::test]
async fn an_address_at_its_cap_makes_room_from_its_own_idle_connections_or_is_refused() {
    let fake = slow_streams().await;
    let gateway = upstream_config(&fake)
        .with("[server]\nmax_connections_per_ip = 2\nidle_timeout = \"10m\"\nheader_timeout = \"10m\"\n")
        .start()
        .await;
    let first = idle_keep_alive(gateway.addr(), BOUND)
        .await
        .expect("served");
    let _second = idle_keep_alive(gateway.addr(), BOUND)
        .await
        .expect("served");
    // Two idle: the third is served, the idlest (the first) closes to make room.
    let _third = idle_keep_alive(gateway.addr(), BOUND)
        .await
        .expect("served");
    // What it reads is the rest of its one answer, then the close.
    read_to_close(&mut { first }, BOUND)
        .await
        .expect("the idlest closed");
    // Two streams in flight (busy, not idle) on fresh connections: the next one is refused.
    drop((_second, _third));
    let _streams = busy_streams(&gateway, 2).await;
    let refused = fresh_client()
        .post(format!("{}/v1/chat/completions", gateway.url()))
        .json(&chat("r"))
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status(), 503);
}
