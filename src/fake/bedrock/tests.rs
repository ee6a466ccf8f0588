//! The Bedrock shape's answers and streams, read back with an independent reader
//! (`aws-smithy-eventstream`), and the SigV4 check over real HTTP.

use bytes::Buf;
use serde_json::{Value, json};

use super::*;
use crate::fake::answer::{self, Route, Shape};
use crate::fake::{Behavior, FakeUpstream};

const PATH: &str = "/model/us.anthropic.claude-3-5-haiku-20241022-v1%3A0/converse";
const STREAM_PATH: &str = "/model/us.anthropic.claude-3-5-haiku-20241022-v1%3A0/converse-stream";

fn completion(path: &str, behavior: &Behavior) -> Completion {
    let request = json!({"messages": [{"role": "user", "content": [{"text": "Hi there"}]}]});
    Completion::new("bedrock", 0, Shape::Bedrock, path, &request, behavior)
}

/// One event or exception as read: its type (`:event-type` or `:exception-type`), its
/// `:message-type`, and its payload as JSON.
#[derive(Debug)]
struct Read {
    kind: String,
    message_type: String,
    payload: Value,
}

/// Reads every message in `bytes`, each checked (CRCs too) by smithy-rs's reader.
fn read_all(mut bytes: Bytes) -> Vec<Read> {
    let mut messages = Vec::new();
    while bytes.has_remaining() {
        let message = aws_smithy_eventstream::frame::read_message_from(&mut bytes).unwrap();
        let header = |name: &str| {
            message
                .headers()
                .iter()
                .find(|h| h.name().as_str() == name)
                .map(|h| h.value().as_string().unwrap().as_str().to_owned())
        };
        assert_eq!(header(":content-type").as_deref(), Some("application/json"));
        messages.push(Read {
            kind: header(":event-type")
                .or_else(|| header(":exception-type"))
                .unwrap(),
            message_type: header(":message-type").unwrap(),
            payload: serde_json::from_slice(message.payload()).unwrap(),
        });
    }
    messages
}

fn stream_of(completion: &Completion) -> Bytes {
    let mut frames: Vec<Bytes> = (0..completion.chunks)
        .flat_map(|i| completion.content_frames(i))
        .collect();
    frames.extend(completion.tail_frames());
    Bytes::from(frames.concat())
}

#[test]
fn converse_paths_route_to_bedrock_with_the_model_decoded() {
    assert_eq!(
        answer::route(STREAM_PATH),
        Some(Route::Chat {
            shape: Shape::Bedrock,
            path_stream: true
        })
    );
    let whole = completion(PATH, &Behavior::ok());
    assert!(!whole.stream);
    assert_eq!(whole.model, "us.anthropic.claude-3-5-haiku-20241022-v1:0");
    assert!(completion(STREAM_PATH, &Behavior::ok()).stream);
}

#[test]
fn converse_answers_text_tool_calls_stop_reason_and_usage() {
    let behavior = Behavior::ok()
        .content("Sunny in Paris")
        .tool_call("get_weather", json!({"city": "Paris"}));
    let answer = completion(PATH, &behavior).whole();
    assert_eq!(
        answer["output"]["message"]["content"],
        json!([{"text": "Sunny in Paris"},
               {"toolUse": {"toolUseId": "tooluse_fake_0", "name": "get_weather",
                            "input": {"city": "Paris"}}}])
    );
    assert_eq!(answer["stopReason"], "tool_use");
    let usage = &answer["usage"];
    assert_eq!(usage["outputTokens"], 3);
    assert_eq!(
        usage["totalTokens"].as_u64(),
        Some(usage["inputTokens"].as_u64().unwrap() + 3)
    );
    let plain = completion(PATH, &Behavior::ok()).whole();
    assert_eq!(plain["stopReason"], "end_turn");
}

#[test]
fn a_stream_sends_its_events_in_bedrocks_order() {
    let behavior = Behavior::ok()
        .content("Hello from Bedrock")
        .chunks(3, 0)
        .tool_call("get_weather", json!({"city": "Paris", "unit": "C"}));
    let events = read_all(stream_of(&completion(STREAM_PATH, &behavior)));
    let kinds: Vec<&str> = events.iter().map(|e| e.kind.as_str()).collect();
    assert_eq!(
        kinds,
        [
            "messageStart",
            "contentBlockDelta",
            "contentBlockDelta",
            "contentBlockDelta",
            "contentBlockStop",
            "contentBlockStart",
            "contentBlockDelta",
            "contentBlockDelta",
            "contentBlockStop",
            "messageStop",
            "metadata",
        ]
    );
    assert!(events.iter().all(|e| e.message_type == "event"));
    assert_eq!(events[0].payload, json!({"role": "assistant"}));
    let text: String = events[1..4]
        .iter()
        .map(|e| e.payload["delta"]["text"].as_str().unwrap())
        .collect();
    assert_eq!(text, "Hello from Bedrock");
    assert_eq!(events[5].payload["contentBlockIndex"], 1);
    assert_eq!(
        events[5].payload["start"]["toolUse"],
        json!({"toolUseId": "tooluse_fake_0", "name": "get_weather"})
    );
    let input: String = events[6..8]
        .iter()
        .map(|e| e.payload["delta"]["toolUse"]["input"].as_str().unwrap())
        .collect();
    assert_eq!(
        serde_json::from_str::<Value>(&input).unwrap(),
        json!({"city": "Paris", "unit": "C"})
    );
    assert_eq!(events[9].payload["stopReason"], "tool_use");
    assert_eq!(events[10].payload["usage"]["outputTokens"], 3);
    assert_eq!(events[10].payload["metrics"]["latencyMs"], 1);
    // Padding a reader must ignore, as real Bedrock sends.
    assert!(events[1].payload["p"].is_string());
    assert!(events[9].payload["p"].is_string());
}

#[test]
fn stream_errors_are_exceptions_named_by_their_message() {
    let whole = completion(STREAM_PATH, &Behavior::ok());
    let cases = [
        (
            None,
            "serviceUnavailableException",
            "Bedrock is unable to process your request.",
        ),
        (
            Some("throttlingException: Slow down"),
            "throttlingException",
            "Slow down",
        ),
        (
            Some("modelStreamErrorException"),
            "modelStreamErrorException",
            "The model stream encountered an error.",
        ),
        (
            Some("key sk-123 failed"),
            "serviceUnavailableException",
            "key sk-123 failed",
        ),
    ];
    for (message, kind, said) in cases {
        let read = read_all(whole.stream_error(message));
        assert_eq!(read.len(), 1);
        assert_eq!(read[0].kind, kind, "{message:?}");
        assert_eq!(read[0].message_type, "exception");
        assert_eq!(read[0].payload, json!({"message": said}));
    }
}

#[test]
fn a_malformed_event_fails_its_checksum() {
    let broken = completion(STREAM_PATH, &Behavior::ok()).bedrock_malformed_event();
    assert!(aws_smithy_eventstream::frame::read_message_from(broken).is_err());
}

#[test]
fn error_statuses_name_bedrocks_types() {
    assert_eq!(
        error_type_header(429),
        "ThrottlingException:http://internal.amazon.com/coral/com.amazon.bedrock/"
    );
    for (status, kind) in [
        (400, "ValidationException"),
        (424, "ModelErrorException"),
        (502, "InternalServerException"),
    ] {
        assert_eq!(error_type(status), kind);
    }
    assert_eq!(
        answer::error_body(Shape::Bedrock, 503),
        r#"{"message":"fake upstream answered 503"}"#
    );
}

/// A request to `fake` signed for `key`/`secret`, the signature from this module's own
/// signer: what is tested is the HTTP side (headers, host, the path as received).
fn signed(
    fake: &crate::fake::FakeHandle,
    path: &str,
    key: &str,
    secret: &str,
) -> reqwest::RequestBuilder {
    let body = r#"{"messages":[{"role":"user","content":[{"text":"Hi"}]}]}"#;
    signed_body(fake, path, (key, secret), body)
}

/// [`signed`] with a body of the test's own.
fn signed_body(
    fake: &crate::fake::FakeHandle,
    path: &str,
    (key, secret): (&str, &str),
    body: &'static str,
) -> reqwest::RequestBuilder {
    let amz_date = sigv4::amz(
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_secs() as i64,
    );
    let host = fake.addr().to_string();
    let headers = vec![
        ("content-type".to_owned(), "application/json".to_owned()),
        ("host".to_owned(), host),
        ("x-amz-date".to_owned(), amz_date.clone()),
    ];
    let request = sigv4::Request {
        method: "POST",
        path,
        query: "",
        headers: &headers,
        body: body.as_bytes(),
    };
    let authorization = sigv4::Authorization {
        access_key_id: key,
        date: &amz_date[..8],
        region: "us-east-1",
        service: "bedrock",
        signed_headers: vec!["content-type", "host", "x-amz-date"],
        signature: "",
    };
    let signature = sigv4::signing(&request, &authorization, secret).signature();
    let value = format!(
        "AWS4-HMAC-SHA256 Credential={key}/{}/us-east-1/bedrock/aws4_request, \
         SignedHeaders=content-type;host;x-amz-date, Signature={signature}",
        &amz_date[..8]
    );
    reqwest::Client::new()
        .post(format!("{}{path}", fake.root_url()))
        .header("content-type", "application/json")
        .header("x-amz-date", amz_date)
        .header("authorization", value)
        .body(body)
}

fn error_type_of(response: &reqwest::Response) -> String {
    let value = response.headers()["x-amzn-errortype"].to_str().unwrap();
    value.split(':').next().unwrap().to_owned()
}

#[tokio::test]
async fn signed_requests_pass_and_others_are_refused_as_aws_does() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let fake = FakeUpstream::new("bedrock")
        .aws_credentials("AKIDFAKE", "fake-secret", None)
        .then(Behavior::ok())
        .then(Behavior::ok())
        .then(Behavior::ok())
        .then(Behavior::ok().content("Signed and sealed"))
        .then(
            Behavior::ok()
                .chunks(2, 0)
                .error_after(1)
                .error_message("throttlingException: Rate exceeded"),
        )
        .then(Behavior::status(429))
        .start()
        .await
        .unwrap();

    let unsigned = reqwest::Client::new()
        .post(format!("{}{PATH}", fake.root_url()))
        .body("{}")
        .send()
        .await
        .unwrap();
    assert_eq!(unsigned.status(), 403);
    assert_eq!(
        error_type_of(&unsigned),
        "MissingAuthenticationTokenException"
    );

    let stranger = signed(&fake, PATH, "AKIDOTHER", "fake-secret")
        .send()
        .await
        .unwrap();
    assert_eq!(stranger.status(), 403);
    assert_eq!(error_type_of(&stranger), "UnrecognizedClientException");

    let forged = signed(&fake, PATH, "AKIDFAKE", "not-the-secret")
        .send()
        .await
        .unwrap();
    assert_eq!(forged.status(), 403);
    assert_eq!(error_type_of(&forged), "InvalidSignatureException");
    let message: Value = forged.json().await.unwrap();
    assert!(
        message["message"].as_str().unwrap().contains("%253A0"),
        "{message}"
    );

    let answer = signed(&fake, PATH, "AKIDFAKE", "fake-secret")
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), 200);
    let answer: Value = answer.json().await.unwrap();
    assert_eq!(
        answer["output"]["message"]["content"][0]["text"],
        "Signed and sealed"
    );

    let stream = signed(&fake, STREAM_PATH, "AKIDFAKE", "fake-secret")
        .send()
        .await
        .unwrap();
    assert_eq!(stream.headers()["content-type"], EVENTSTREAM);
    let events = read_all(stream.bytes().await.unwrap());
    let last = events.last().unwrap();
    assert_eq!(
        (last.kind.as_str(), last.message_type.as_str()),
        ("throttlingException", "exception")
    );
    assert_eq!(last.payload["message"], "Rate exceeded");
    assert_eq!(events.len(), 3, "messageStart, one delta, the exception");

    let throttled = signed(&fake, PATH, "AKIDFAKE", "fake-secret")
        .send()
        .await
        .unwrap();
    assert_eq!(throttled.status(), 429);
    assert_eq!(error_type_of(&throttled), "ThrottlingException");
    assert_eq!(fake.calls(), 6, "refusals take their behaviour too");
    assert_eq!(fake.requests().len(), 6);
}

const TITAN: &str = "/model/amazon.titan-embed-text-v2%3A0/invoke";
const COHERE: &str = "/model/cohere.embed-english-v3/invoke";

#[tokio::test]
async fn invoke_embeds_signed_requests_in_each_familys_body() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let fake = FakeUpstream::new("bedrock")
        .aws_credentials("AKIDFAKE", "fake-secret", None)
        .then(Behavior::ok())
        .then(Behavior::ok())
        .then(Behavior::ok())
        .then(Behavior::status(429))
        .start()
        .await
        .unwrap();
    let key = ("AKIDFAKE", "fake-secret");
    let titan = signed_body(&fake, TITAN, key, r#"{"inputText":"Hello","dimensions":4}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(titan.status(), 200);
    let titan: Value = titan.json().await.unwrap();
    assert_eq!(
        titan,
        json!({"embedding": [5.0, 0.5, -0.25, 5.0], "inputTextTokenCount": 1})
    );

    let body = r#"{"texts":["a","bb"],"input_type":"search_query"}"#;
    let cohere: Value = signed_body(&fake, COHERE, key, body)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(
        cohere["embeddings"],
        json!([[1.0, 0.5, -0.25], [2.0, 0.5, -0.25]])
    );
    assert_eq!(cohere["texts"], json!(["a", "bb"]));

    let forged = signed_body(&fake, TITAN, ("AKIDFAKE", "wrong"), r#"{"inputText":"x"}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(forged.status(), 403);
    assert_eq!(error_type_of(&forged), "InvalidSignatureException");

    let throttled = signed_body(&fake, COHERE, key, body).send().await.unwrap();
    assert_eq!(throttled.status(), 429);
    assert_eq!(error_type_of(&throttled), "ThrottlingException");
    assert_eq!(
        fake.calls(),
        4,
        "a refused signature takes its behaviour, as converse's"
    );
}

#[tokio::test]
async fn the_issuer_hands_out_the_accounts_credentials_outside_the_script() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let fake = FakeUpstream::new("bedrock")
        .aws_credentials("AKIDFAKE", "fake-secret", None)
        .aws_credential_issuer("oidc-token", std::time::Duration::from_secs(3600))
        .then(Behavior::ok().content("first behaviour"))
        .start()
        .await
        .unwrap();
    let client = reqwest::Client::new();
    let assume = |token: &str| {
        let form = url::form_urlencoded::Serializer::new(String::new())
            .append_pair("Action", "AssumeRoleWithWebIdentity")
            .append_pair("Version", "2011-06-15")
            .append_pair("RoleArn", "arn:aws:iam::123456789012:role/bedrock")
            .append_pair("RoleSessionName", "test")
            .append_pair("WebIdentityToken", token)
            .finish();
        client
            .post(fake.root_url())
            .header("content-type", "application/x-www-form-urlencoded")
            .body(form)
    };
    let granted = assume("oidc-token").send().await.unwrap();
    assert_eq!(granted.status(), 200);
    assert_eq!(granted.headers()["content-type"], "text/xml");
    let xml = granted.text().await.unwrap();
    assert!(xml.contains("<AccessKeyId>AKIDFAKE</AccessKeyId>"), "{xml}");
    // STS always issues a session token; without one of the account's, a made-up one.
    assert!(
        xml.contains("<SessionToken>fake-issued-session-token</SessionToken>"),
        "{xml}"
    );
    let refused = assume("not-the-token").send().await.unwrap();
    assert_eq!(refused.status(), 400);
    assert!(
        refused
            .text()
            .await
            .unwrap()
            .contains("<Code>InvalidIdentityToken</Code>")
    );

    fake.set_credential_lifetime(std::time::Duration::from_secs(30));
    let container: Value = client
        .get(format!("{}/ecs-credentials", fake.root_url()))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(container["SecretAccessKey"], "fake-secret");
    let expires = humantime::parse_rfc3339(container["Expiration"].as_str().unwrap()).unwrap();
    assert!(expires <= SystemTime::now() + std::time::Duration::from_secs(31));

    let stats = fake.stats();
    assert_eq!(
        (stats.credential_requests, stats.credentials_issued),
        (3, 2)
    );
    assert_eq!(fake.credentials_issued(), 2);
    assert_eq!((fake.calls(), fake.requests().len()), (0, 0));
    let answer: Value = signed(&fake, PATH, "AKIDFAKE", "fake-secret")
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(
        answer["output"]["message"]["content"][0]["text"], "first behaviour",
        "the script starts at the first Bedrock request"
    );
}
