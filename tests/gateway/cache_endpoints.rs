//! The response cache on the Responses API: a kept Response served as JSON and replayed as
//! events, each hit a response of its own that a later turn can continue, and a turn that
//! continues another never read from the cache.

use serde_json::{Value, json};
use switchyard::fake::FakeHandle;
use switchyard::server::Gateway;

use super::responses::{create, output_text, responses_provider};
use super::support::*;

/// Route `r` over `fake` (passed the Responses API itself when `passthrough`), whose
/// answers every caller shares.
async fn caching(fake: &FakeHandle, passthrough: bool) -> Gateway {
    TestGateway::new()
        .with(&responses_provider("openai", "p", fake, passthrough))
        .route(
            "r",
            &[("p", "m")],
            "cache = { ttl = \"1h\", scope = \"shared\" }",
        )
        .start()
        .await
}

fn ask(stream: bool) -> Value {
    json!({"model": "r", "instructions": "Be brief.", "input": "Hello there", "stream": stream})
}

/// The `x-switchyard-cache` header and the JSON body of one create.
async fn created(gateway: &Gateway, body: &Value) -> (String, Value) {
    let response = create(gateway, body).await;
    assert_eq!(response.status(), 200);
    let cache = header(&response, "x-switchyard-cache").to_owned();
    (cache, response.json().await.unwrap())
}

/// The `x-switchyard-cache` header and the named events of one streamed create.
async fn streamed(gateway: &Gateway, body: &Value) -> (String, Vec<(String, Value)>) {
    let response = create(gateway, body).await;
    assert_eq!(response.status(), 200);
    let cache = header(&response, "x-switchyard-cache").to_owned();
    (cache, sse_events(&response.text().await.unwrap()))
}

#[tokio::test]
async fn a_kept_response_is_a_response_of_its_own_that_a_later_turn_continues() {
    for passthrough in [false, true] {
        let fake = scripted("p", []).await;
        let gateway = caching(&fake, passthrough).await;
        let (cache, first) = created(&gateway, &ask(false)).await;
        assert_eq!(cache, "miss");
        let (cache, hit) = created(&gateway, &ask(false)).await;
        assert_eq!(cache, "hit", "passthrough: {passthrough}");
        assert_ne!(hit["id"], first["id"], "a hit has an id of its own");
        assert_eq!(hit["output"], first["output"]);
        assert_eq!(hit["usage"], first["usage"]);
        assert_eq!(fake.calls(), 1);

        // The hit's turn was stored for the caller: the next turn continues from it, and is
        // never itself read from the cache.
        let next = json!({"model": "r", "input": "And then?", "previous_response_id": hit["id"]});
        let (cache, _) = created(&gateway, &next).await;
        assert_eq!(cache, "bypass");
        let (cache, _) = created(&gateway, &next).await;
        assert_eq!(cache, "bypass");
        assert_eq!(fake.calls(), 3);
        let sent = fake.requests()[1].json();
        let said = sent.to_string();
        assert!(
            said.contains("Hello there") && said.contains(&output_text(&hit)),
            "the earlier turn was sent along: {sent}"
        );
    }
}

#[tokio::test]
async fn a_streamed_response_is_kept_and_served_to_json_and_replayed_to_streams() {
    for passthrough in [false, true] {
        let fake = scripted("p", []).await;
        let gateway = caching(&fake, passthrough).await;
        let (cache, events) = streamed(&gateway, &ask(true)).await;
        assert_eq!(cache, "miss");
        let (last, completed) = events.last().unwrap();
        assert_eq!(last, "response.completed", "passthrough: {passthrough}");
        let kept = &completed["response"];

        let (cache, whole) = created(&gateway, &ask(false)).await;
        assert_eq!(cache, "hit", "passthrough: {passthrough}");
        assert_eq!(whole["output"], kept["output"]);
        assert_eq!(whole["usage"], kept["usage"]);

        let (cache, replayed) = streamed(&gateway, &ask(true)).await;
        assert_eq!(cache, "hit");
        let names: Vec<&str> = replayed.iter().map(|(name, _)| name.as_str()).collect();
        assert_eq!(names.first(), Some(&"response.created"));
        assert_eq!(names.last(), Some(&"response.completed"));
        let text: String = replayed
            .iter()
            .filter(|(name, _)| name == "response.output_text.delta")
            .filter_map(|(_, event)| event["delta"].as_str())
            .collect();
        assert_eq!(text, output_text(kept));
        let replayed = &replayed.last().unwrap().1["response"];
        assert_eq!(replayed["output"], kept["output"]);
        assert_eq!(replayed["usage"], kept["usage"]);
        assert_ne!(replayed["id"], kept["id"]);
        assert_eq!(fake.calls(), 1);
    }
}

#[tokio::test]
async fn a_legacy_completion_streamed_is_kept_and_served_to_json_and_replayed_to_streams() {
    let fake = scripted("p", []).await;
    let gateway = TestGateway::new()
        .provider("p", &fake)
        .route("r", &[("p", "m")], "cache = { ttl = \"1h\" }")
        .start()
        .await;
    let ask = |stream: bool| {
        json!({"model": "r", "prompt": "Once upon a time", "max_tokens": 8, "stream": stream,
               "stream_options": if stream { json!({"include_usage": true}) } else { json!(null) }})
    };
    let text_of = |events: &[String]| -> String {
        events
            .iter()
            .filter(|data| *data != "[DONE]")
            .filter_map(|data| serde_json::from_str::<Value>(data).ok())
            .filter_map(|chunk| chunk["choices"][0]["text"].as_str().map(str::to_owned))
            .collect()
    };
    let miss = post_to(&gateway, "/v1/completions", &ask(true)).await;
    assert_eq!(header(&miss, "x-switchyard-cache"), "miss");
    let streamed = text_of(&sse_data(&miss.text().await.unwrap()));
    assert!(!streamed.is_empty());

    let hit = post_to(&gateway, "/v1/completions", &ask(false)).await;
    assert_eq!(header(&hit, "x-switchyard-cache"), "hit");
    let whole: Value = hit.json().await.unwrap();
    assert_eq!(whole["object"], "text_completion");
    assert_eq!(whole["choices"][0]["text"], streamed.as_str());
    assert!(whole["usage"]["completion_tokens"].as_u64().unwrap() > 0);

    let replayed = post_to(&gateway, "/v1/completions", &ask(true)).await;
    assert_eq!(header(&replayed, "x-switchyard-cache"), "hit");
    let events = sse_data(&replayed.text().await.unwrap());
    assert_eq!(events.last().map(String::as_str), Some("[DONE]"));
    assert_eq!(text_of(&events), streamed);
    let usage: Value = serde_json::from_str(&events[events.len() - 2]).unwrap();
    assert_eq!(
        usage["usage"], whole["usage"],
        "the usage chunk it asked for"
    );
    assert_eq!(fake.calls(), 1);
}
