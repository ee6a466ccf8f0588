//! Response objects complete to the Open Responses specification: every field its
//! `ResponseResource` requires, whether the gateway translated the answer or a provider that
//! speaks the Responses API made it, in the whole answer, in the stream events that carry the
//! Response, and in `GET /v1/responses/{id}`; and function tools echoed in the full form of
//! OpenAI's `FunctionTool`, even when sent without `strict` or `parameters`.

use serde_json::{Value, json};
use switchyard::fake::{Behavior, FakeHandle};

use super::responses::{create, output_text, responses_provider};
use super::support::*;

/// `ResponseResource`'s required fields, less `user` and `usage`: OpenAI's own schema types
/// those as a string and an object, never null, so the gateway leaves them out when the
/// request sent no `user` and while the usage is unknown (src/providers/responses/spec.rs).
const REQUIRED: [&str; 30] = [
    "id",
    "object",
    "created_at",
    "completed_at",
    "status",
    "incomplete_details",
    "model",
    "previous_response_id",
    "instructions",
    "output",
    "error",
    "tools",
    "tool_choice",
    "truncation",
    "parallel_tool_calls",
    "text",
    "top_p",
    "presence_penalty",
    "frequency_penalty",
    "top_logprobs",
    "temperature",
    "reasoning",
    "max_output_tokens",
    "max_tool_calls",
    "store",
    "background",
    "service_tier",
    "metadata",
    "safety_identifier",
    "prompt_cache_key",
];

/// A function tool as clients often send it: no `strict`, no `parameters`.
fn loose_tool() -> Value {
    json!({"type": "function", "name": "clock", "description": "The time now"})
}

fn assert_complete(response: &Value, what: &str) {
    let missing: Vec<&str> = REQUIRED
        .iter()
        .copied()
        .filter(|field| response.get(field).is_none())
        .collect();
    assert!(missing.is_empty(), "{what} lacks {missing:?}: {response}");
}

/// The Response objects of a stream's events that carry one, by event name.
fn carried(events: &[(String, Value)]) -> Vec<(String, Value)> {
    events
        .iter()
        .filter(|(_, data)| data.get("response").is_some())
        .map(|(name, data)| (name.clone(), data["response"].clone()))
        .collect()
}

async fn retrieve(gateway: &switchyard::server::Gateway, id: &str) -> Value {
    let url = format!("{}/v1/responses/{id}", gateway.url());
    let response = client().get(url).send().await.unwrap();
    assert_eq!(response.status(), 200);
    response.json().await.unwrap()
}

/// Route `r` to `fake` of `kind`, passed through when `passthrough`.
async fn served_by(
    kind: &str,
    fake: &FakeHandle,
    passthrough: bool,
) -> switchyard::server::Gateway {
    TestGateway::new()
        .with(&responses_provider(kind, "p", fake, passthrough))
        .route("r", &[("p", "m")], "")
        .start()
        .await
}

#[tokio::test]
async fn a_translated_response_holds_every_required_field_and_whole_tools() {
    let fake = scripted("compat", []).await;
    let gateway = served_by("anthropic", &fake, false).await;
    let body = json!({"model": "r", "input": "What time is it?", "tools": [loose_tool()]});
    let answer: Value = create(&gateway, &body).await.json().await.unwrap();
    assert_complete(&answer, "the whole answer");
    assert_eq!(answer["presence_penalty"], 0.0);
    assert_eq!(answer["frequency_penalty"], 0.0);
    assert_eq!(answer["top_logprobs"], 0);
    assert_eq!(answer["background"], false);
    assert_eq!(answer["service_tier"], "default");
    assert_eq!(answer["max_tool_calls"], Value::Null);
    assert_eq!(answer["safety_identifier"], Value::Null);
    assert_eq!(answer["prompt_cache_key"], Value::Null);
    assert!(answer["completed_at"].is_u64(), "{answer}");
    // The chat translation sends no `strict`, and chat's default is non-strict.
    assert_eq!(
        answer["tools"],
        json!([{"type": "function", "name": "clock", "description": "The time now",
                "parameters": null, "strict": false}])
    );
    let stored = retrieve(&gateway, answer["id"].as_str().unwrap()).await;
    assert_complete(&stored, "the stored answer");
    assert_eq!(stored["tools"], answer["tools"]);

    let mut streamed = body.clone();
    streamed["stream"] = json!(true);
    let events = sse_events(&create(&gateway, &streamed).await.text().await.unwrap());
    let carried = carried(&events);
    let names: Vec<&str> = carried.iter().map(|(name, _)| name.as_str()).collect();
    assert_eq!(
        names,
        [
            "response.created",
            "response.in_progress",
            "response.completed"
        ]
    );
    for (name, response) in &carried {
        assert_complete(response, name);
        assert_eq!(response["tools"], answer["tools"], "{name}");
    }
    assert_eq!(carried[0].1["completed_at"], Value::Null);
}

/// A Responses provider that leaves out what the specification requires and echoes its
/// tool as sent: what it did send is kept, the rest is filled in from the request.
fn minimal_response(status: &str, tools: &Value) -> Value {
    json!({"id": "resp_minimal", "object": "response", "created_at": 1_700_000_000,
           "status": status, "model": "m", "output": [], "tools": tools,
           "temperature": 0.2, "service_tier": "flex"})
}

#[tokio::test]
async fn a_passed_through_response_is_completed_and_keeps_what_the_provider_sent() {
    let tools = json!([loose_tool()]);
    let mut whole = minimal_response("completed", &tools);
    whole["output"] = json!([{"id": "msg_1", "type": "message", "role": "assistant",
        "status": "completed", "content": [{"type": "output_text", "text": "Noon.", "annotations": []}]}]);
    whole["usage"] = json!({"input_tokens": 5, "output_tokens": 2, "total_tokens": 7,
        "input_tokens_details": {"cached_tokens": 0}, "output_tokens_details": {"reasoning_tokens": 0}});
    let stream = [
        ("response.created", minimal_response("in_progress", &tools)),
        ("response.completed", whole.clone()),
    ]
    .iter()
    .enumerate()
    .map(|(i, (name, response))| {
        let data = json!({"type": name, "sequence_number": i, "response": response});
        format!("event: {name}\ndata: {data}\n\n")
    })
    .collect::<String>();
    let fake = scripted(
        "p",
        [
            Behavior::ok().body(&whole.to_string()),
            Behavior::ok().body(&stream),
        ],
    )
    .await;
    let gateway = served_by("openai", &fake, true).await;
    let body = json!({"model": "r", "input": "What time is it?", "tools": tools,
                      "safety_identifier": "user-7", "max_tool_calls": 3});
    let answer: Value = create(&gateway, &body).await.json().await.unwrap();
    assert_complete(&answer, "the whole answer");
    assert_eq!(output_text(&answer), "Noon.");
    assert_eq!(answer["temperature"], 0.2, "the provider's value is kept");
    assert_eq!(answer["service_tier"], "flex");
    assert_eq!(answer["safety_identifier"], "user-7", "the request's value");
    assert_eq!(answer["max_tool_calls"], 3);
    assert_eq!(
        answer["presence_penalty"], 0.0,
        "the specification's default"
    );
    assert_eq!(answer["completed_at"], Value::Null);
    // Filled where the provider left them out; what it said of the tool is kept.
    assert_eq!(
        answer["tools"],
        json!([{"type": "function", "name": "clock", "description": "The time now",
                "parameters": null, "strict": null}])
    );
    let stored = retrieve(&gateway, "resp_minimal").await;
    assert_complete(&stored, "the stored answer");

    let mut streamed = body.clone();
    streamed["stream"] = json!(true);
    let events = sse_events(&create(&gateway, &streamed).await.text().await.unwrap());
    let carried = carried(&events);
    assert_eq!(carried.len(), 2, "{events:?}");
    for (name, response) in &carried {
        assert_complete(response, name);
        assert_eq!(response["temperature"], 0.2, "{name}");
        assert_eq!(response["tools"], answer["tools"], "{name}");
    }
    assert_eq!(events.last().unwrap().1["sequence_number"], 1);
}

/// What a provider sends whole is forwarded as its own bytes: nothing parsed is written back.
#[tokio::test]
async fn a_complete_passed_through_response_is_forwarded_as_it_came() {
    let fake = scripted("p", []).await;
    let gateway = served_by("openai", &fake, true).await;
    let first: Value = create(&gateway, &json!({"model": "r", "input": "Hi"}))
        .await
        .json()
        .await
        .unwrap();
    assert_complete(&first, "the fake's answer, completed");
    let mut complete = first.clone();
    complete["id"] = json!("resp_complete");
    complete["usage"]["input_tokens_details"]["cache_write_tokens"] = json!(0);
    // Spacing of its own, which no serializer would write back.
    let text = complete.to_string().replacen('{', "{ ", 1);
    let fake = scripted("p", [Behavior::ok().body(&text)]).await;
    let gateway = served_by("openai", &fake, true).await;
    let response = create(&gateway, &json!({"model": "r", "input": "Hi"})).await;
    assert_eq!(response.text().await.unwrap(), text);
}

/// A provider that speaks the Responses API is sent the whole conversation in place of
/// `previous_response_id`, so it answers with that field null: the gateway names the turn the
/// client continued, in the whole answer and in the stream's Responses.
#[tokio::test]
async fn a_passed_through_turn_names_the_turn_it_continued() {
    let primary = scripted("primary", []).await;
    let secondary = scripted("secondary", []).await;
    let gateway = super::responses::chain(&primary, "anthropic", &secondary, "").await;
    let first = create(&gateway, &json!({"model": "r", "input": "Hi"})).await;
    assert_eq!(header(&first, "x-switchyard-provider"), "primary");
    let id = first.json::<Value>().await.unwrap()["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let next = json!({"model": "r", "input": "And?", "previous_response_id": id});
    let whole: Value = create(&gateway, &next).await.json().await.unwrap();
    assert_eq!(whole["previous_response_id"], id.as_str(), "{whole}");
    let mut streamed = next.clone();
    streamed["stream"] = json!(true);
    let events = sse_events(&create(&gateway, &streamed).await.text().await.unwrap());
    let carrying: Vec<&Value> = events
        .iter()
        .filter_map(|(_, e)| e.get("response"))
        .collect();
    assert!(carrying.len() >= 2, "{events:?}");
    for response in carrying {
        assert_eq!(response["previous_response_id"], id.as_str(), "{response}");
    }
    // The provider itself was never sent the id: it got the whole input.
    let sent = primary.requests().last().unwrap().json();
    assert!(
        sent.get("previous_response_id").is_none_or(Value::is_null),
        "{sent}"
    );
}
