//! Upstream answers too large to hold, endless streams, and request bodies refused on their
//! declared length.

use std::time::Duration;

use serde_json::Value;
use switchyard::fake::Behavior;
use switchyard::router::FailureClass;
use switchyard::telemetry::Outcome;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::spawned::{Spawned, patient_client};
use crate::gateway::logqueue::TempDb;
use crate::gateway::support::*;

const BOUND: Duration = Duration::from_secs(20);
const HUNDRED_MB: u64 = 100 * 1024 * 1024;

fn two_steps(
    primary: &switchyard::fake::FakeHandle,
    secondary: &switchyard::fake::FakeHandle,
) -> TestGateway {
    TestGateway::new()
        .provider("primary", primary)
        .provider("secondary", secondary)
        .route("r", &[("primary", "model-a"), ("secondary", "model-b")], "")
        .with(OBSERVABILITY)
}

#[tokio::test]
async fn a_hundred_megabyte_answer_is_an_oversized_attempt_not_an_allocation() {
    let primary = scripted("primary", [Behavior::huge(HUNDRED_MB)]).await;
    let secondary = scripted("secondary", []).await;
    // The metrics are counted as the log writer takes each record, off the request's path.
    // With `fsync` durability an answer leaves only once the writer has taken its record,
    // so the answer is the event to wait on. Its journal is a file of the test's, removed
    // when the test ends however it ends.
    let journal = TempDb::new("oversized-journal");
    let gateway = Spawned::start(
        "max_upstream_body_bytes = 1048576",
        &two_steps(&primary, &secondary)
            .with("[log]\ndurability = \"fsync\"\n")
            .set("spill_path", journal.0.display().to_string())
            .raw_text(),
        None,
    );
    let client = patient_client(BOUND);
    let send = || async {
        client
            .post(format!("{}/v1/chat/completions", gateway.url()))
            .json(&chat("r"))
            .send()
            .await
            .expect("the gateway answers")
    };
    // One request first, so what a first request costs anyway is in the baseline.
    primary.set_script(switchyard::fake::Script {
        behaviors: vec![Behavior::ok()],
        ..Default::default()
    });
    assert_eq!(send().await.status(), 200);
    primary.set_script(switchyard::fake::Script {
        behaviors: vec![Behavior::huge(HUNDRED_MB)],
        ..Default::default()
    });
    let peak_before = gateway.status_kb("VmHWM");

    let response = send().await;
    assert_eq!(response.status(), 200);
    assert_eq!(header(&response, "x-switchyard-step"), "1");
    let body: Value = response.json().await.unwrap();
    assert_eq!(content(&body), "Hello from secondary!");
    let grown_kb = gateway.status_kb("VmHWM").saturating_sub(peak_before);
    assert!(
        grown_kb < 24 * 1024,
        "peak memory grew by {grown_kb} kB for a 100 MB answer"
    );
    // Already counted: the answer waited for its record (see the `[log]` section above).
    let metrics = client
        .get(format!("{}/metrics", gateway.url()))
        .bearer_auth(METRICS_TOKEN)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let oversized =
        |l: &str| l.starts_with("switchyard_attempts_total") && l.contains("result=\"oversized\"");
    assert!(
        metrics.lines().any(oversized),
        "the attempt is counted as oversized:\n{metrics}"
    );
}

#[tokio::test]
async fn a_declared_length_over_the_cap_fails_the_attempt_on_its_headers() {
    let primary = scripted(
        "primary",
        [Behavior::huge(HUNDRED_MB).header("content-length", &HUNDRED_MB.to_string())],
    )
    .await;
    let secondary = scripted("secondary", []).await;
    let gateway = two_steps(&primary, &secondary).start().await;
    let response = post(&gateway, &chat("r")).await;
    assert_eq!(response.status(), 200);
    let id = header(&response, "x-switchyard-request-id").to_owned();
    let row = record(&gateway, &id).await;
    assert_eq!(row.attempts[0].failure, Some(FailureClass::Oversized));
    assert_eq!(row.outcome, Outcome::Fallback);
}

#[tokio::test]
async fn an_event_over_max_sse_event_bytes_fails_the_attempt() {
    let primary = scripted("primary", [Behavior::huge(8 * 1024 * 1024)]).await;
    let secondary = scripted("secondary", []).await;
    let gateway = two_steps(&primary, &secondary)
        .with("[server]\nmax_sse_event_bytes = 65536\n")
        .start()
        .await;
    let response = post(&gateway, &chat_stream("r")).await;
    assert_eq!(response.status(), 200);
    assert_eq!(header(&response, "x-switchyard-step"), "1");
    let id = header(&response, "x-switchyard-request-id").to_owned();
    let text = response.text().await.unwrap();
    assert_eq!(streamed_text(&sse_data(&text)), "Hello from secondary!");
    let row = record(&gateway, &id).await;
    assert_eq!(row.attempts[0].failure, Some(FailureClass::Oversized));
}

#[tokio::test]
async fn an_endless_stream_ends_at_the_request_deadline_with_an_error_event() {
    let fake = scripted("up", [Behavior::endless(20)]).await;
    let gateway = TestGateway::new()
        .provider("up", &fake)
        .route("r", &[("up", "m")], "")
        .with("[retry]\nrequest_deadline = \"1s\"\nattempt_timeout = \"1s\"\n")
        .start()
        .await;
    let response = post(&gateway, &chat_stream("r")).await;
    assert_eq!(response.status(), 200);
    let id = header(&response, "x-switchyard-request-id").to_owned();
    let text = tokio::time::timeout(BOUND, response.text())
        .await
        .expect("the stream ends")
        .expect("and ends properly");
    let last = sse_data(&text).pop().unwrap_or_default();
    let last: Value = serde_json::from_str(&last).unwrap_or(Value::Null);
    assert_eq!(last["error"]["code"], "deadline", "{text}");
    let row = record(&gateway, &id).await;
    assert_eq!(row.outcome, Outcome::Error);
    assert!(row.partial);
    assert_eq!(row.error.as_deref(), Some("deadline"));
}

/// Sends a head promising `length` bytes and no body; the answer, read to its end.
async fn answer_to_a_promise(
    gateway: &switchyard::server::Gateway,
    path: &str,
    length: usize,
) -> String {
    let mut stream = TcpStream::connect(gateway.addr()).await.unwrap();
    let head = format!(
        "POST {path} HTTP/1.1\r\nhost: gateway\r\ncontent-type: application/json\r\ncontent-length: {length}\r\nconnection: close\r\n\r\n"
    );
    stream.write_all(head.as_bytes()).await.unwrap();
    let mut answer = Vec::new();
    tokio::time::timeout(BOUND, stream.read_to_end(&mut answer))
        .await
        .expect("answered on the head alone")
        .unwrap();
    String::from_utf8_lossy(&answer).into_owned()
}

/// A gateway in front of one fake that refuses request bodies over 1 KiB.
async fn one_step_with_a_1_kib_body_cap()
-> (switchyard::fake::FakeHandle, switchyard::server::Gateway) {
    let fake = scripted("up", []).await;
    let gateway = TestGateway::new()
        .with("[server]\nmax_body_bytes = 1024\n")
        .provider("up", &fake)
        .route("r", &[("up", "m")], "")
        .start()
        .await;
    (fake, gateway)
}

#[tokio::test]
async fn a_declared_content_length_over_max_body_bytes_is_refused_on_the_head() {
    let (fake, gateway) = one_step_with_a_1_kib_body_cap().await;
    let openai = answer_to_a_promise(&gateway, "/v1/chat/completions", 1_000_000).await;
    assert!(openai.starts_with("HTTP/1.1 413"), "{openai}");
    assert!(openai.contains("\"code\":\"body_too_large\""), "{openai}");
    let id = openai
        .lines()
        .find_map(|l| l.strip_prefix("x-switchyard-request-id: "))
        .expect("the refusal names its log row")
        .to_owned();
    assert_eq!(record(&gateway, &id).await.status, 413);

    let anthropic = answer_to_a_promise(&gateway, "/v1/messages", 1_000_000).await;
    assert!(anthropic.starts_with("HTTP/1.1 413"), "{anthropic}");
    assert!(anthropic.contains("\"type\":\"error\""), "{anthropic}");
    assert_eq!(fake.calls(), 0);
}

/// A client that sends its whole body before it reads (as Python's `http.client` and most
/// simple clients do) gets the 413, not a broken pipe: the gateway answers on the head, then
/// takes and drops the rest of the body before it closes ("lingering close").
#[tokio::test]
async fn a_client_that_sends_its_whole_refused_body_still_reads_the_413() {
    let (fake, gateway) = one_step_with_a_1_kib_body_cap().await;
    // Far more than the socket buffers hold, so the upload is still going when the 413 is
    // written: closing on it then resets the connection.
    let length = 16 * 1024 * 1024;
    let mut stream = TcpStream::connect(gateway.addr()).await.unwrap();
    let head = format!(
        "POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n\
         content-length: {length}\r\n\r\n"
    );
    let exchange = async {
        stream.write_all(head.as_bytes()).await?;
        stream.write_all(&vec![b' '; length]).await?;
        let mut answer = Vec::new();
        stream.read_to_end(&mut answer).await?;
        Ok::<_, std::io::Error>(String::from_utf8_lossy(&answer).into_owned())
    };
    let answer = tokio::time::timeout(BOUND, exchange)
        .await
        .expect("answered within the bound")
        .expect("the whole body was taken and the answer read");
    assert!(answer.starts_with("HTTP/1.1 413"), "{answer}");
    assert_eq!(fake.calls(), 0);
}

/// A chunked body has no declared length to refuse on the head: it is read up to the cap,
/// the 413 goes out at once, and the connection closes without taking any more of it, where
/// it used to linger and take up to 64 MiB more. The client's upload of 20 MB fails part way.
#[tokio::test]
async fn a_chunked_body_over_the_cap_is_answered_at_the_cap_and_read_no_further() {
    let (fake, gateway) = one_step_with_a_1_kib_body_cap().await;
    let stream = TcpStream::connect(gateway.addr()).await.unwrap();
    let (mut reader, mut writer) = stream.into_split();
    let head = "POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n\
                transfer-encoding: chunked\r\n\r\n";
    writer.write_all(head.as_bytes()).await.unwrap();
    const CHUNK: usize = 64 * 1024;
    const CHUNKS: usize = 320;
    // Up to 20 MB in 64 KiB chunks; how much went before a write was refused.
    let upload = tokio::spawn(async move {
        let chunk = vec![b' '; CHUNK];
        let frame = [
            format!("{CHUNK:x}\r\n").into_bytes(),
            chunk,
            b"\r\n".to_vec(),
        ]
        .concat();
        let mut sent = 0;
        for _ in 0..CHUNKS {
            if writer.write_all(&frame).await.is_err() {
                break;
            }
            sent += CHUNK;
        }
        sent
    });
    let mut first = vec![0; 12];
    tokio::time::timeout(BOUND, reader.read_exact(&mut first))
        .await
        .expect("answered within the bound")
        .unwrap();
    assert_eq!(&first, b"HTTP/1.1 413");
    let sent = tokio::time::timeout(BOUND, upload)
        .await
        .expect("the upload ends within the bound")
        .unwrap();
    assert!(
        sent < CHUNK * CHUNKS,
        "all {sent} bytes were taken after a 413 at 1 KiB"
    );
    assert_eq!(fake.calls(), 0);
}
