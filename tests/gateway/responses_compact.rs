//! `POST /v1/responses/compact`: a stored conversation compacts into its user messages and
//! one sealed `compaction` item, asked of the route's chain like any request; the next turn
//! continues from the compacted window with the summary in place of the history, on a
//! translated step and on one the request is passed through to; and neither the item nor
//! the stored turns serve another virtual key.

use serde_json::{Value, json};
use switchyard::fake::{Behavior, FakeHandle};
use switchyard::server::Gateway;

use super::responses::{output_text, responses_provider};
use super::support::*;

const SUMMARY: &str = "SUMMARY: Ada plans a trip to Oslo in May; hotel booked.";

/// Route `r` over one provider: chat-only when not `passthrough`.
async fn one_provider(fake: &FakeHandle, passthrough: bool, extra: &str) -> Gateway {
    TestGateway::new()
        .with(&responses_provider("openai", "p", fake, passthrough))
        .route("r", &[("p", "m")], "")
        .with(extra)
        .start()
        .await
}

async fn send(gateway: &Gateway, path: &str, key: Option<&str>, body: &Value) -> reqwest::Response {
    let mut builder = client().post(format!("{}{path}", gateway.url())).json(body);
    if let Some(key) = key {
        builder = builder.bearer_auth(key);
    }
    builder.send().await.unwrap()
}

/// Three stored turns, each continuing the last; the last turn's id.
async fn three_turns(gateway: &Gateway, key: Option<&str>) -> String {
    let mut previous = Value::Null;
    for said in ["I am Ada.", "I go to Oslo in May.", "The hotel is booked."] {
        let body = json!({"model": "r", "input": said, "previous_response_id": previous});
        let response = send(gateway, "/v1/responses", key, &body).await;
        assert_eq!(response.status(), 200);
        previous = response.json::<Value>().await.unwrap()["id"].clone();
    }
    previous.as_str().unwrap().to_owned()
}

fn user_texts(output: &[Value]) -> Vec<&str> {
    output
        .iter()
        .filter(|item| item["role"] == "user")
        .map(|item| item["content"][0]["text"].as_str().unwrap())
        .collect()
}

/// Every text the upstream was sent, whatever its format: chat messages or Responses input.
fn sent_texts(sent: &Value) -> String {
    let items = sent.get("messages").or_else(|| sent.get("input")).unwrap();
    items.to_string()
}

#[tokio::test]
async fn a_long_conversation_compacts_and_continues_with_the_summary_in_place_of_its_history() {
    for passthrough in [false, true] {
        let fake = scripted(
            "p",
            [
                Behavior::ok().content("Hello Ada."),
                Behavior::ok().content("Oslo is lovely in May."),
                Behavior::ok().content("Enjoy the stay."),
                Behavior::ok().content(SUMMARY),
                Behavior::ok().content("You go to Oslo."),
            ],
        )
        .await;
        let gateway = one_provider(&fake, passthrough, "").await;
        let last = three_turns(&gateway, None).await;

        let compact =
            json!({"model": "r", "previous_response_id": last, "instructions": "Be brief."});
        let response = send(&gateway, "/v1/responses/compact", None, &compact).await;
        assert_eq!(response.status(), 200, "passthrough: {passthrough}");
        assert_eq!(header(&response, "x-switchyard-provider"), "p");
        let compacted: Value = response.json().await.unwrap();
        assert_eq!(compacted["object"], "response.compaction");
        assert!(compacted["id"].is_string());
        assert!(compacted["created_at"].is_u64());
        assert!(compacted["usage"]["input_tokens"].as_u64().unwrap() > 0);
        let output = compacted["output"].as_array().unwrap();
        assert_eq!(
            user_texts(output),
            ["I am Ada.", "I go to Oslo in May.", "The hotel is booked."]
        );
        assert_eq!(output.len(), 4, "{compacted}");
        let item = &output[3];
        assert_eq!(item["type"], "compaction");
        assert!(item["id"].as_str().unwrap().starts_with("cmp_"));
        // Opaque: the summary is nowhere in the answer.
        assert!(!compacted.to_string().contains("Oslo in May; hotel"));

        // The summary was asked of the route with the whole history.
        let asked = fake.requests()[3].json();
        let asked_texts = sent_texts(&asked);
        assert!(asked_texts.contains("Enjoy the stay."), "{asked}");
        assert!(asked_texts.contains("CONTEXT CHECKPOINT COMPACTION"));
        assert!(asked.get("previous_response_id").is_none());

        // The next turn continues from the compacted window.
        let mut input = output.clone();
        input.push(json!({"role": "user", "content": "Where do I go?"}));
        let next = json!({"model": "r", "input": input});
        let response = send(&gateway, "/v1/responses", None, &next).await;
        assert_eq!(response.status(), 200, "passthrough: {passthrough}");
        let answer: Value = response.json().await.unwrap();
        assert_eq!(output_text(&answer), "You go to Oslo.");
        let sent = fake.requests()[4].json();
        let texts = sent_texts(&sent);
        assert!(texts.contains(SUMMARY), "{sent}");
        assert!(texts.contains("Where do I go?"));
        for history in ["Hello Ada.", "Oslo is lovely in May.", "Enjoy the stay."] {
            assert!(!texts.contains(history), "{history} was sent: {sent}");
        }
        assert!(!texts.contains("\"compaction\""), "{sent}");
        assert!(!texts.contains("sy-cmp-1."), "{sent}");
    }
}

#[tokio::test]
async fn compaction_is_a_request_with_its_own_log_row_and_the_routes_errors() {
    let fake = scripted(
        "p",
        [Behavior::ok().content(SUMMARY), Behavior::status(400)],
    )
    .await;
    let gateway = one_provider(&fake, false, "").await;
    let compact = json!({"model": "r", "input": [{"role": "user", "content": "Hi"}]});
    let response = send(&gateway, "/v1/responses/compact", None, &compact).await;
    assert_eq!(response.status(), 200);
    let row = record_of(&gateway, &response).await;
    assert_eq!(
        row.route.map(|route| route.0.to_string()).as_deref(),
        Some("r")
    );
    assert_eq!(row.status, 200);
    // The route's refusal is the client's answer, in the API's error shape.
    let response = send(&gateway, "/v1/responses/compact", None, &compact).await;
    assert_eq!(response.status(), 400);
    let body: Value = response.json().await.unwrap();
    assert!(body["error"].is_object(), "{body}");
    // The request's own mistakes, named.
    for (body, param) in [
        (json!({"model": "r"}), "input"),
        (
            json!({"model": "r", "input": "x", "stream": true}),
            "stream",
        ),
        (
            json!({"model": "r", "input": "x", "instructions": 3}),
            "instructions",
        ),
    ] {
        let response = send(&gateway, "/v1/responses/compact", None, &body).await;
        assert_eq!(response.status(), 400, "{body}");
        let error: Value = response.json().await.unwrap();
        assert_eq!(error["error"]["param"], param, "{error}");
    }
    let response = send(
        &gateway,
        "/v1/responses/compact",
        None,
        &json!({"input": "x"}),
    )
    .await;
    assert_eq!(response.status(), 400);
    let unknown = json!({"model": "r", "previous_response_id": "resp_nope"});
    let response = send(&gateway, "/v1/responses/compact", None, &unknown).await;
    assert_eq!(response.status(), 404);
    assert_eq!(fake.requests().len(), 2, "refusals reach no upstream");
    // Its other methods are answered as any client API path's.
    let url = format!("{}/v1/responses/compact", gateway.url());
    let response = client().get(url).send().await.unwrap();
    assert_eq!(response.status(), 405);
    assert_eq!(header(&response, "allow"), "POST");
}

#[tokio::test]
async fn a_compaction_and_its_stored_turns_serve_only_their_own_key() {
    let fake = scripted("p", []).await;
    let gateway = one_provider(
        &fake,
        false,
        "[auth]\nrequired = true\n[[roles]]\nname = \"default\"\n",
    )
    .await;
    let owner = stored_key(&gateway, "ana", "default", None).await.0;
    let other = stored_key(&gateway, "bo", "default", None).await.0;
    gateway.keys_current().await;
    let last = three_turns(&gateway, Some(&owner)).await;

    // Another key cannot compact the owner's stored turns.
    let compact = json!({"model": "r", "previous_response_id": last});
    let response = send(&gateway, "/v1/responses/compact", Some(&other), &compact).await;
    assert_eq!(response.status(), 404);
    let response = send(&gateway, "/v1/responses/compact", None, &compact).await;
    assert_eq!(response.status(), 401);

    let response = send(&gateway, "/v1/responses/compact", Some(&owner), &compact).await;
    assert_eq!(response.status(), 200);
    let compacted: Value = response.json().await.unwrap();
    let item = compacted["output"]
        .as_array()
        .unwrap()
        .last()
        .unwrap()
        .clone();
    let next =
        |item: Value| json!({"model": "r", "input": [item, {"role": "user", "content": "Go on."}]});

    // Nor use its compaction item, nor an altered one.
    let sent_before = fake.requests().len();
    let response = send(&gateway, "/v1/responses", Some(&other), &next(item.clone())).await;
    assert_eq!(response.status(), 400);
    let error: Value = response.json().await.unwrap();
    assert_eq!(error["error"]["param"], "input", "{error}");
    let message = error["error"]["message"].as_str().unwrap();
    assert!(message.contains("input[0].encrypted_content"), "{message}");
    let mut altered = item.clone();
    let content = altered["encrypted_content"].as_str().unwrap();
    let flipped = if content.ends_with('A') { 'B' } else { 'A' };
    altered["encrypted_content"] = json!(format!("{}{flipped}", &content[..content.len() - 1]));
    let response = send(&gateway, "/v1/responses", Some(&owner), &next(altered)).await;
    assert_eq!(response.status(), 400);
    assert_eq!(
        fake.requests().len(),
        sent_before,
        "refusals reach no upstream"
    );

    // The owner continues.
    let response = send(&gateway, "/v1/responses", Some(&owner), &next(item)).await;
    assert_eq!(response.status(), 200);
}
