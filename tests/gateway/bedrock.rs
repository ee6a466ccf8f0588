//! Bedrock steps against a fake that speaks Converse and ConverseStream and verifies every
//! request's SigV4 signature with an implementation of its own (checked against AWS's test
//! suite, and against botocore in the SDK tests). The gateway signs with aws-sigv4, with
//! credentials aws-config reads from the provider's shared credentials file; streams come back
//! in AWS's binary eventstream framing.

use std::time::Duration;

use serde_json::{Value, json};
use switchyard::fake::{Behavior, FakeHandle, FakeUpstream};
use switchyard::server::Gateway;

use super::process::TempDir;
use super::support::*;
use super::vertex::{key_file, vertex, vertex_fake};

const KEY_ID: &str = "AKIDSWITCHYARDTEST01";
const SECRET: &str = "wJalrXUtnFEMI/K7MDENG+bPxRfiCYSWITCHYARD";
const TOKEN: &str = "IQoJb3JpZ2luX2VjEFAKESESSIONTOKENFORTESTS";
const MODEL: &str = "us.anthropic.claude-3-5-haiku-20241022-v1:0";

/// A fake Bedrock that takes only `KEY_ID`'s signatures with `TOKEN`, scripted with `script`.
async fn bedrock_fake(script: Vec<Behavior>) -> FakeHandle {
    script
        .into_iter()
        .fold(FakeUpstream::new("bedrock"), FakeUpstream::then)
        .aws_credentials(KEY_ID, SECRET, Some(TOKEN))
        .start()
        .await
        .unwrap()
}

/// A shared credentials file in `dir` whose `test` profile holds `secret`.
fn credentials_file(dir: &TempDir, secret: &str) -> String {
    let path = dir.0.join("credentials");
    let text = format!(
        "[default]\naws_access_key_id = AKIDNOTTHISONE\naws_secret_access_key = nope\n\n\
         [test]\naws_access_key_id = {KEY_ID}\naws_secret_access_key = {secret}\naws_session_token = {TOKEN}\n"
    );
    std::fs::write(&path, text).unwrap();
    path.display().to_string()
}

/// A Bedrock provider `b` at `fake`, in us-west-2, with the credentials file at `file`.
fn bedrock(fake: &FakeHandle, file: &str) -> TestGateway {
    TestGateway::new()
        .with("[[providers]]\nname = \"b\"\nkind = \"bedrock\"\n")
        .set("base_url", fake.root_url())
        .set("region", "us-west-2")
        .set("credentials_file", file)
        .set("profile", "test")
}

async fn one_route(script: Vec<Behavior>) -> (FakeHandle, Gateway, TempDir) {
    let fake = bedrock_fake(script).await;
    let dir = TempDir::new();
    let gateway = bedrock(&fake, &credentials_file(&dir, SECRET))
        .route("r", &[("b", MODEL)], "")
        .start()
        .await;
    (fake, gateway, dir)
}

#[tokio::test]
async fn converse_is_signed_with_the_profiles_credentials_and_translated() {
    let (fake, gateway, _dir) = one_route(vec![Behavior::ok().content("Hello from Bedrock")]).await;
    let mut body = chat("r");
    body["messages"] = json!([
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "hi"}
    ]);
    body["max_tokens"] = json!(50);
    let response = post(&gateway, &body).await;
    assert_eq!(response.status(), 200);
    let answer: Value = response.json().await.unwrap();
    assert_eq!(content(&answer), "Hello from Bedrock");
    assert_eq!(answer["choices"][0]["finish_reason"], "stop");
    assert!(answer["usage"]["prompt_tokens"].as_u64().unwrap() > 0);

    let request = &fake.requests()[0];
    // The model id is one percent-encoded segment; the fake checked it was signed encoded
    // again, as AWS's SDKs sign it.
    assert_eq!(
        request.path,
        "/model/us.anthropic.claude-3-5-haiku-20241022-v1%3A0/converse"
    );
    let authorization = &request.headers["authorization"];
    assert!(
        authorization.starts_with(&format!("AWS4-HMAC-SHA256 Credential={KEY_ID}/")),
        "{authorization}"
    );
    assert!(authorization.contains("/us-west-2/bedrock/aws4_request"));
    assert_eq!(request.headers["x-amz-security-token"], TOKEN);
    let sent = request.json();
    assert_eq!(sent["system"], json!([{"text": "Be brief."}]));
    assert_eq!(sent["messages"][0]["content"][0]["text"], "hi");
    assert_eq!(sent["inferenceConfig"]["maxTokens"], 50);
    assert!(sent.get("model").is_none(), "the path names the model");
}

#[tokio::test]
async fn a_stream_arrives_in_eventstream_frames_and_leaves_as_chunks() {
    let script = vec![
        Behavior::ok().content("one two three four").chunks(4, 0),
        Behavior::ok().content("for anthropic").chunks(2, 0),
    ];
    let (fake, gateway, _dir) = one_route(script).await;
    let mut body = chat_stream("r");
    body["stream_options"] = json!({"include_usage": true});
    let response = post(&gateway, &body).await;
    assert_eq!(response.status(), 200);
    let text = response.text().await.unwrap();
    let events = sse_data(&text);
    assert_eq!(streamed_text(&events), "one two three four");
    assert_eq!(events.last().map(String::as_str), Some("[DONE]"));
    let usage: Value = serde_json::from_str(&events[events.len() - 2]).unwrap();
    assert!(usage["usage"]["completion_tokens"].as_u64().unwrap() > 0);
    assert!(fake.requests()[0].path.ends_with("/converse-stream"));

    // An Anthropic client gets Anthropic's events from the same stream.
    let response = post_to(&gateway, "/v1/messages", &message("r", true)).await;
    assert_eq!(response.status(), 200);
    let events = sse_events(&response.text().await.unwrap());
    assert_eq!(anthropic_text(&events), "for anthropic");
    assert_eq!(events.last().unwrap().0, "message_stop");
}

#[tokio::test]
async fn tool_calls_come_back_whole_and_streamed() {
    let call = || Behavior::ok().tool_call("get_weather", json!({"city": "Paris"}));
    let (_fake, gateway, _dir) = one_route(vec![call(), call()]).await;
    let mut body = chat("r");
    body["tools"] = json!([{"type": "function", "function": {
        "name": "get_weather", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}
    }}]);
    let answer: Value = post(&gateway, &body).await.json().await.unwrap();
    let calls = &answer["choices"][0]["message"]["tool_calls"];
    assert_eq!(calls[0]["function"]["name"], "get_weather");
    let arguments: Value =
        serde_json::from_str(calls[0]["function"]["arguments"].as_str().unwrap()).unwrap();
    assert_eq!(arguments, json!({"city": "Paris"}));
    assert_eq!(answer["choices"][0]["finish_reason"], "tool_calls");

    body["stream"] = json!(true);
    let text = post(&gateway, &body).await.text().await.unwrap();
    let chunks: Vec<Value> = sse_data(&text)
        .iter()
        .filter_map(|d| serde_json::from_str(d).ok())
        .collect();
    let streamed: String = chunks
        .iter()
        .filter_map(|c| c.pointer("/choices/0/delta/tool_calls/0/function/arguments"))
        .filter_map(Value::as_str)
        .collect();
    assert_eq!(
        serde_json::from_str::<Value>(&streamed).unwrap(),
        json!({"city": "Paris"})
    );
}

#[tokio::test]
async fn wrong_credentials_are_refused_and_the_chain_moves_on() {
    let fake = bedrock_fake(vec![]).await;
    let openai = scripted("openai", []).await;
    let dir = TempDir::new();
    let gateway = bedrock(&fake, &credentials_file(&dir, "not-the-secret"))
        .provider("openai", &openai)
        .route("r", &[("b", MODEL), ("openai", "gpt")], "")
        .start()
        .await;
    let response = post(&gateway, &chat("r")).await;
    assert_eq!(response.status(), 200);
    assert_eq!(header(&response, "x-switchyard-step"), "1");
    assert_eq!(fake.calls(), 1, "the fake refused one signed request");
    let id = header(&response, "x-request-id").to_owned();
    let row = record(&gateway, &id).await;
    let shown = format!("{row:?}");
    assert!(
        !shown.contains("not-the-secret") && !shown.contains(TOKEN),
        "{shown}"
    );
}

/// The chain `bedrock → vertex → openai` moves past Bedrock on each of its failure classes,
/// and past Vertex's 503, whole and streamed; a throttled Bedrock is retried in place.
#[tokio::test]
async fn bedrock_then_vertex_then_openai_fails_over_on_each_class() {
    let not_ready = Behavior::status(429).header(
        "x-amzn-ErrorType",
        "ModelNotReadyException:http://internal.amazon.com/coral/com.amazon.bedrock/",
    );
    let failures = [
        ("service unavailable", Behavior::status(503)),
        ("internal error", Behavior::status(500)),
        ("model timeout", Behavior::status(408)),
        ("model not ready", not_ready),
        ("model error", Behavior::status(424)),
        (
            "mid-stream before the first token",
            Behavior::ok().error_after(0),
        ),
    ];
    let dir = TempDir::new();
    let vertex_fake = vertex_fake(Duration::from_secs(3600), vec![Behavior::status(503)]).await;
    for (name, failure) in failures {
        let fake = bedrock_fake(vec![failure]).await;
        let openai = scripted("openai", []).await;
        let gateway = vertex(&vertex_fake, &key_file(&dir, &vertex_fake))
            .with(&bedrock(&fake, &credentials_file(&dir, SECRET)).raw_text())
            .provider("openai", &openai)
            .route(
                "r",
                &[("b", MODEL), ("v", "gemini-2.5-flash"), ("openai", "gpt")],
                "",
            )
            .start()
            .await;
        // An exception in a stream fails streams only.
        let modes: &[bool] = if name.starts_with("mid-stream") {
            &[true]
        } else {
            &[false, true]
        };
        for &stream in modes {
            let body = if stream { chat_stream("r") } else { chat("r") };
            let response = post(&gateway, &body).await;
            assert_eq!(response.status(), 200, "{name}, stream {stream}");
            assert_eq!(
                header(&response, "x-switchyard-step"),
                "2",
                "{name}, stream {stream}"
            );
            if stream {
                let text = response.text().await.unwrap();
                assert!(text.contains("[DONE]"), "{name}: {text}");
            }
        }
        assert_eq!(openai.calls(), modes.len(), "{name}");
    }
    let throttled = bedrock_fake(vec![Behavior::status(429), Behavior::ok()]).await;
    let gateway = bedrock(&throttled, &credentials_file(&dir, SECRET))
        .fast_retry()
        .route("r", &[("b", MODEL)], "")
        .start()
        .await;
    let response = post(&gateway, &chat("r")).await;
    assert_eq!(response.status(), 200);
    assert_eq!(
        throttled.calls(),
        2,
        "a ThrottlingException is retried in place"
    );
}

#[tokio::test]
async fn an_exception_after_the_first_token_ends_the_stream_with_an_error() {
    let script = vec![
        Behavior::ok()
            .content("partial answer here")
            .chunks(3, 0)
            .error_after(2)
            .error_message("modelStreamErrorException: the model stopped"),
    ];
    let (_fake, gateway, _dir) = one_route(script).await;
    let response = post(&gateway, &chat_stream("r")).await;
    assert_eq!(response.status(), 200);
    let text = response.text().await.unwrap();
    assert!(text.contains("the model stopped"), "{text}");
    assert!(
        !text.contains("[DONE]"),
        "a broken stream does not end as a whole one"
    );
}

#[tokio::test]
async fn a_validation_error_is_the_clients_400_in_its_own_shape() {
    let refused = Behavior::status(400).body(r#"{"message":"messages.0: bad field"}"#);
    let (_fake, gateway, _dir) = one_route(vec![refused]).await;
    let response = post(&gateway, &chat("r")).await;
    assert_eq!(response.status(), 400);
    let body: Value = response.json().await.unwrap();
    assert_eq!(error_message(&body), "messages.0: bad field");
    // What Converse cannot carry is refused before it is sent, naming the field.
    let mut body = chat("r");
    body["n"] = json!(2);
    let response = post(&gateway, &body).await;
    assert_eq!(response.status(), 400);
    let error: Value = response.json().await.unwrap();
    assert_eq!(error["error"]["param"], "n");
}

#[tokio::test]
async fn a_budget_works_on_a_bedrock_model_with_its_shipped_price() {
    let fake = bedrock_fake(vec![]).await;
    let dir = TempDir::new();
    let gateway = bedrock(&fake, &credentials_file(&dir, SECRET))
        .route("r", &[("b", MODEL)], "")
        .with("[[roles]]\nname = \"default\"\n")
        .set("budget_per_day", 1.0)
        .start()
        .await;
    let body =
        json!({"model": "r", "max_tokens": 1000, "messages": [{"role": "user", "content": "Hi"}]});
    let response = post(&gateway, &body).await;
    // Without a price a budget refuses the model (402); this inference profile's is shipped.
    assert_eq!(response.status(), 200);
    let remaining: f64 = header(&response, "x-switchyard-budget-remaining")
        .parse()
        .unwrap();
    // At most 1,000 output tokens at $4 a million, and a few input tokens, reserved.
    assert!((0.9955..1.0).contains(&remaining), "{remaining}");
}

#[tokio::test]
async fn the_responses_api_is_served_over_converse_whole_and_streamed() {
    use super::responses::{create, output_text, request};
    let script = vec![
        Behavior::ok().content("a Response"),
        Behavior::ok().content("a streamed Response").chunks(3, 0),
    ];
    let (fake, gateway, _dir) = one_route(script).await;
    let response = create(&gateway, &request("r")).await;
    assert_eq!(response.status(), 200);
    let answer: Value = response.json().await.unwrap();
    assert_eq!(answer["object"], "response");
    assert_eq!(output_text(&answer), "a Response");
    assert_eq!(
        fake.requests()[0].json()["system"],
        json!([{"text": "Be brief."}])
    );

    let mut body = request("r");
    body["stream"] = json!(true);
    let text = create(&gateway, &body).await.text().await.unwrap();
    let events = sse_events(&text);
    let deltas: String = events
        .iter()
        .filter(|(name, _)| name == "response.output_text.delta")
        .filter_map(|(_, data)| data["delta"].as_str())
        .collect();
    assert_eq!(deltas, "a streamed Response");
    assert_eq!(events.last().unwrap().0, "response.completed");
}

/// An answer that echoes the credentials (AWS's refusal of a signature quotes the canonical
/// request, session token and all) reaches the client and the log scrubbed.
#[tokio::test]
async fn credentials_echoed_in_an_answer_are_scrubbed() {
    let echo = format!(r#"{{"message":"x-amz-security-token:{TOKEN} with {SECRET}"}}"#);
    let (_fake, gateway, _dir) = one_route(vec![Behavior::status(400).body(&echo)]).await;
    let response = post(&gateway, &chat("r")).await;
    assert_eq!(response.status(), 400);
    let id = header(&response, "x-request-id").to_owned();
    let text = response.text().await.unwrap();
    assert!(text.contains("x-amz-security-token:[redacted]"), "{text}");
    assert!(!text.contains(SECRET), "{text}");
    let row = format!("{:?}", record(&gateway, &id).await);
    assert!(!row.contains(TOKEN) && !row.contains(SECRET), "{row}");
}

/// OpenAI embeddings through a Bedrock step: InvokeModel in Titan's body (one text, its
/// dimensions) and in Cohere's (a batch), signed, and read back as OpenAI's list.
#[tokio::test]
async fn embeddings_are_invoked_in_titans_and_coheres_bodies() {
    let fake = bedrock_fake(vec![]).await;
    let dir = TempDir::new();
    let gateway = bedrock(&fake, &credentials_file(&dir, SECRET))
        .route("titan", &[("b", "amazon.titan-embed-text-v2:0")], "")
        .route("cohere", &[("b", "cohere.embed-english-v3")], "")
        .start()
        .await;
    let titan = json!({"model": "titan", "input": "Hello there", "dimensions": 4});
    let response = post_to(&gateway, "/v1/embeddings", &titan).await;
    assert_eq!(response.status(), 200);
    let answer: Value = response.json().await.unwrap();
    assert_eq!(
        answer["data"][0]["embedding"],
        json!([11.0, 0.5, -0.25, 11.0])
    );
    assert_eq!(answer["usage"]["prompt_tokens"], 2);
    let sent = &fake.requests()[0];
    assert_eq!(sent.path, "/model/amazon.titan-embed-text-v2%3A0/invoke");
    assert_eq!(
        sent.json(),
        json!({"inputText": "Hello there", "dimensions": 4})
    );

    let cohere = json!({"model": "cohere", "input": ["a", "bcd"]});
    let answer: Value = post_to(&gateway, "/v1/embeddings", &cohere)
        .await
        .json()
        .await
        .unwrap();
    let vectors: Vec<&Value> = answer["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| &d["embedding"])
        .collect();
    assert_eq!(
        vectors,
        [&json!([1.0, 0.5, -0.25]), &json!([3.0, 0.5, -0.25])]
    );
    assert_eq!(
        fake.requests()[1].json(),
        json!({"texts": ["a", "bcd"], "input_type": "search_document"})
    );
}
