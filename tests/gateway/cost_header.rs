//! `x-switchyard-cost`: what a whole (non-streamed) answer cost in US dollars, at the
//! configured or shipped prices, the same figure its log row records. A stream's cost is
//! known only at its end, after the headers: it is in the log alone.

use serde_json::{Value, json};

use super::support::*;

const COST: &str = "x-switchyard-cost";

/// The header's figure, checked against the request's log row.
async fn cost_of(gateway: &switchyard::server::Gateway, response: &reqwest::Response) -> f64 {
    let cost: f64 = header(response, COST).parse().expect("a cost in dollars");
    let row = record_of(gateway, response).await;
    assert_eq!(row.cost_usd, Some(cost), "the log and the header agree");
    cost
}

#[tokio::test]
async fn a_whole_answer_says_what_it_cost_as_its_log_row_does() {
    let fake = scripted("up", []).await;
    let gateway = TestGateway::new()
        .provider("up", &fake)
        .route("r", &[("up", "m")], "")
        .route("free", &[("up", "unpriced")], "")
        .with("[[prices]]\nprovider = \"up\"\nmodel = \"m\"\ninput_per_1m = 2.0\noutput_per_1m = 10.0\n")
        .start()
        .await;
    let response = post(&gateway, &chat("r")).await;
    assert_eq!(response.status(), 200);
    let cost = cost_of(&gateway, &response).await;
    let row = record_of(&gateway, &response).await;
    let (tokens_in, tokens_out) = (row.tokens_in.unwrap(), row.tokens_out.unwrap());
    let expected = (tokens_in as f64 * 2.0 + tokens_out as f64 * 10.0) / 1e6;
    assert!((cost - expected).abs() < 1e-12, "{cost} against {expected}");

    // The Responses API and Anthropic's Messages, through the same chain.
    let answer = post_to(
        &gateway,
        "/v1/responses",
        &json!({"model": "r", "input": "Hi"}),
    )
    .await;
    assert!(cost_of(&gateway, &answer).await > 0.0);
    let message = post_to(&gateway, "/v1/messages", &message("r", false)).await;
    assert!(cost_of(&gateway, &message).await > 0.0);

    // A stream's usage comes at its end: its cost is in the log only.
    let streamed = post(&gateway, &chat_stream("r")).await;
    assert_eq!(header(&streamed, COST), "");
    let id = header(&streamed, "x-switchyard-request-id").to_owned();
    streamed.text().await.unwrap();
    assert!(record(&gateway, &id).await.cost_usd.unwrap() > 0.0);

    // A model with no price has no cost to tell, in the header or the log.
    let unpriced = post(&gateway, &chat("free")).await;
    assert_eq!(unpriced.status(), 200);
    assert_eq!(header(&unpriced, COST), "");
    assert_eq!(record_of(&gateway, &unpriced).await.cost_usd, None);
}

#[tokio::test]
async fn a_well_known_model_is_costed_at_its_shipped_price() {
    let fake = scripted("openai", []).await;
    let gateway = TestGateway::new()
        .provider("openai", &fake)
        .route("r", &[("openai", "gpt-4o-mini")], "")
        .start()
        .await;
    let response = post(&gateway, &chat("r")).await;
    assert!(cost_of(&gateway, &response).await > 0.0);
    let body: Value = response.json().await.unwrap();
    assert!(body["usage"]["completion_tokens"].as_u64().unwrap() > 0);
}
