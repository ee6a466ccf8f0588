//! The Responses API's state in the gateway's store: `previous_response_id` across turns
//! served by different providers, `GET` / `DELETE /v1/responses/{id}`, `store: false`, and
//! each virtual key seeing only its own responses.

use serde_json::{Value, json};
use switchyard::fake::{Behavior, FakeHandle};

use super::responses::{chain, create, output_text, request};
use super::support::*;

/// Route `r` over model `m` of provider `name`, at `fake`.
fn served_by(name: &str, fake: &FakeHandle) -> TestGateway {
    TestGateway::new()
        .provider(name, fake)
        .route("r", &[(name, "m")], "")
}

async fn issue_key(gateway: &switchyard::server::Gateway, user: &str) -> String {
    stored_key(gateway, user, "default", None).await.0
}

async fn send(
    gateway: &switchyard::server::Gateway,
    method: reqwest::Method,
    path: &str,
    key: Option<&str>,
    body: Option<&Value>,
) -> reqwest::Response {
    let mut builder = client().request(method, format!("{}{path}", gateway.url()));
    if let Some(key) = key {
        builder = builder.bearer_auth(key);
    }
    if let Some(body) = body {
        builder = builder.json(body);
    }
    builder.send().await.unwrap()
}

#[tokio::test]
async fn previous_response_id_works_when_another_provider_serves_the_next_turn() {
    for stream in [false, true] {
        // Turn 1 is served by the Responses provider; turn 2 by the Anthropic fallback.
        let primary = scripted(
            "primary",
            [
                Behavior::ok().content("Oslo is sunny."),
                Behavior::status(500),
            ],
        )
        .await;
        let secondary = scripted("secondary", []).await;
        let gateway = chain(&primary, "anthropic", &secondary, "").await;
        let mut first = json!({"model": "r", "input": "Weather in Oslo?", "stream": stream});
        let response = create(&gateway, &first).await;
        assert_eq!(header(&response, "x-switchyard-provider"), "primary");
        let id = if stream {
            let events = sse_events(&response.text().await.unwrap());
            events.last().unwrap().1["response"]["id"]
                .as_str()
                .unwrap()
                .to_owned()
        } else {
            response.json::<Value>().await.unwrap()["id"]
                .as_str()
                .unwrap()
                .to_owned()
        };
        first = json!({"model": "r", "input": "And tomorrow?", "previous_response_id": id, "stream": stream});
        let response = create(&gateway, &first).await;
        assert_eq!(response.status(), 200);
        assert_eq!(header(&response, "x-switchyard-provider"), "secondary");
        let sent = secondary.requests()[0].json();
        let said: Vec<(String, String)> = sent["messages"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| {
                (
                    m["role"].as_str().unwrap().to_owned(),
                    m["content"][0]["text"].as_str().unwrap_or("").to_owned(),
                )
            })
            .collect();
        assert_eq!(
            said,
            [
                ("user".into(), "Weather in Oslo?".into()),
                ("assistant".into(), "Oslo is sunny.".into()),
                ("user".into(), "And tomorrow?".into()),
            ],
            "stream: {stream}"
        );
        // The passthrough step never sees the gateway's state field.
        assert!(
            primary.requests()[1]
                .json()
                .get("previous_response_id")
                .is_none()
        );
    }
}

#[tokio::test]
async fn a_turn_served_by_a_translated_step_continues_on_a_responses_provider() {
    let primary = scripted("primary", [Behavior::status(500), Behavior::ok()]).await;
    let secondary = scripted("secondary", [Behavior::ok().content("Hi, Ada.")]).await;
    let gateway = chain(&primary, "anthropic", &secondary, "").await;
    let first: Value = create(&gateway, &json!({"model": "r", "input": "I am Ada."}))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(output_text(&first), "Hi, Ada.");
    let next = json!({"model": "r", "input": "Who am I?", "previous_response_id": first["id"]});
    let response = create(&gateway, &next).await;
    assert_eq!(header(&response, "x-switchyard-provider"), "primary");
    let sent = primary.requests()[1].json();
    let input = sent["input"].as_array().unwrap();
    assert_eq!(input.len(), 3, "{sent}");
    assert_eq!(input[0]["content"], "I am Ada.");
    assert_eq!(input[1]["content"][0]["text"], "Hi, Ada.");
    assert_eq!(input[2]["content"], "Who am I?");
}

#[tokio::test]
async fn stored_responses_are_retrieved_and_deleted_by_their_own_key_only() {
    let fake = scripted("p", []).await;
    let gateway = served_by("p", &fake)
        .with("[auth]\nrequired = true\n[[roles]]\nname = \"default\"\n")
        .start()
        .await;
    let owner = issue_key(&gateway, "ana").await;
    let other = issue_key(&gateway, "bo").await;
    gateway.keys_current().await;
    let response = send(
        &gateway,
        reqwest::Method::POST,
        "/v1/responses",
        Some(&owner),
        Some(&request("r")),
    )
    .await;
    let answer: Value = response.json().await.unwrap();
    let path = format!("/v1/responses/{}", answer["id"].as_str().unwrap());

    let got = send(&gateway, reqwest::Method::GET, &path, Some(&owner), None).await;
    assert_eq!(got.status(), 200);
    assert_eq!(got.json::<Value>().await.unwrap(), answer);
    for (method, key) in [
        (reqwest::Method::GET, Some(other.as_str())),
        (reqwest::Method::DELETE, Some(other.as_str())),
    ] {
        let refused = send(&gateway, method, &path, key, None).await;
        assert_eq!(refused.status(), 404);
        error_message(&refused.json().await.unwrap());
    }
    let next = json!({"model": "r", "input": "more", "previous_response_id": answer["id"]});
    let refused = send(
        &gateway,
        reqwest::Method::POST,
        "/v1/responses",
        Some(&other),
        Some(&next),
    )
    .await;
    assert_eq!(
        refused.status(),
        404,
        "another key cannot continue the conversation"
    );
    assert_eq!(
        send(&gateway, reqwest::Method::GET, &path, None, None)
            .await
            .status(),
        401
    );

    let deleted = send(&gateway, reqwest::Method::DELETE, &path, Some(&owner), None).await;
    assert_eq!(deleted.status(), 200);
    assert_eq!(deleted.json::<Value>().await.unwrap()["deleted"], true);
    assert_eq!(
        send(&gateway, reqwest::Method::GET, &path, Some(&owner), None)
            .await
            .status(),
        404
    );
}

#[tokio::test]
async fn store_false_keeps_nothing() {
    let fake = scripted("p", []).await;
    let gateway = served_by("p", &fake).start().await;
    let mut body = request("r");
    body["store"] = json!(false);
    let answer: Value = create(&gateway, &body).await.json().await.unwrap();
    let path = format!("/v1/responses/{}", answer["id"].as_str().unwrap());
    assert_eq!(
        send(&gateway, reqwest::Method::GET, &path, None, None)
            .await
            .status(),
        404
    );
    let next = json!({"model": "r", "input": "more", "previous_response_id": answer["id"]});
    assert_eq!(create(&gateway, &next).await.status(), 404);
}

#[tokio::test]
async fn the_demos_responses_line_is_served_by_its_fallback_step() {
    let demo = switchyard::demo::start("127.0.0.1:0".parse().unwrap())
        .await
        .unwrap();
    let url = demo.gateway.url();
    let instructions = switchyard::demo::instructions(&url, &demo.gateway.admin_url());
    let line = instructions
        .lines()
        .find(|line| line.contains("/v1/responses"))
        .expect("the demo prints a /v1/responses line");
    let body = line.rsplit_once("-d '").unwrap().1.trim_end_matches('\'');
    let body: Value = serde_json::from_str(body).unwrap();
    let response = client()
        .post(format!("{url}/v1/responses"))
        .header("x-switchyard-force-fallback", "true")
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(header(&response, "x-switchyard-step"), "1");
    assert_eq!(header(&response, "x-switchyard-outcome"), "fallback");
    let answer: Value = response.json().await.unwrap();
    assert_eq!(output_text(&answer), "Hello from the fallback provider.");
    assert_eq!(
        demo.secondary.requests().last().unwrap().path,
        "/v1/responses"
    );
}

#[tokio::test]
async fn an_item_reference_to_a_stored_output_item_reaches_a_translated_step_as_the_item() {
    let fake = scripted(
        "compat",
        [
            Behavior::ok()
                .content("")
                .tool_call("weather", json!({"city": "Oslo"})),
            Behavior::ok(),
        ],
    )
    .await;
    let gateway = served_by("compat", &fake).start().await;
    let tools = json!([{"type": "function", "name": "weather", "parameters": {"type": "object"}}]);
    let first: Value = create(
        &gateway,
        &json!({"model": "r", "input": "Weather?", "tools": tools}),
    )
    .await
    .json()
    .await
    .unwrap();
    let call = &first["output"][0];
    assert_eq!(call["type"], "function_call");
    // As the Vercel AI SDK sends a stored item back: by reference.
    let next = json!({"model": "r", "tools": tools, "input": [
        {"role": "user", "content": "Weather?"},
        {"type": "item_reference", "id": call["id"]},
        {"type": "function_call_output", "call_id": call["call_id"], "output": "sunny"},
    ]});
    let response = create(&gateway, &next).await;
    assert_eq!(response.status(), 200, "{}", response.text().await.unwrap());
    let sent = fake.requests()[1].json();
    assert_eq!(
        sent["messages"][1]["tool_calls"][0]["function"]["name"],
        "weather"
    );
    assert_eq!(sent["messages"][2]["role"], "tool");
}

/// A translated stream's terminal event comes in one frame with the text's last delta and
/// the items' ends: it is found there, and the turn stored, so the next can continue it.
#[tokio::test]
async fn a_translated_streamed_turn_is_stored() {
    let fake = scripted("compat", []).await;
    let gateway = served_by("compat", &fake).start().await;
    let body = json!({"model": "r", "input": "hi", "stream": true});
    let response = send(
        &gateway,
        reqwest::Method::POST,
        "/v1/responses",
        None,
        Some(&body),
    )
    .await;
    let events = sse_events(&response.text().await.unwrap());
    let id = events.last().unwrap().1["response"]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let path = format!("/v1/responses/{id}");
    let stored = send(&gateway, reqwest::Method::GET, &path, None, None).await;
    assert_eq!(stored.status(), 200);
}
