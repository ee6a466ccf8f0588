//! Two things a new user should not have to write by hand: an OpenAI-compatible vendor's
//! quirks (`compat = "..."`: the body adjusted as the vendor takes it, or a 400 naming what it
//! cannot carry), and the price of a well-known model (a budget works with no `[[prices]]`).

use serde_json::{Value, json};

use super::support::*;

#[tokio::test]
async fn a_mistral_step_gets_mistrals_names_and_none_of_the_fields_it_rejects() {
    let fake = scripted("mistral", []).await;
    let gateway = TestGateway::new()
        .provider("m", &fake)
        .set("compat", "mistral")
        .route("r", &[("m", "mistral-large-latest")], "")
        .start()
        .await;
    let body = json!({"model": "r", "max_completion_tokens": 50, "seed": 7, "user": "u-1",
        "messages": [{"role": "developer", "content": "Be brief."},
                     {"role": "user", "content": "Hi", "name": "ann"}]});
    assert_eq!(post(&gateway, &body).await.status(), 200);
    let sent = fake.requests()[0].json();
    assert_eq!(sent["max_tokens"], 50);
    assert_eq!(sent["random_seed"], 7);
    for gone in ["max_completion_tokens", "seed", "user"] {
        assert!(sent.get(gone).is_none(), "{gone} was sent");
    }
    assert_eq!(sent["messages"][0]["role"], "system");
    assert!(sent["messages"][1].get("name").is_none());

    let mut streamed = body.clone();
    streamed["stream"] = json!(true);
    streamed["stream_options"] = json!({"include_usage": true});
    let response = post(&gateway, &streamed).await;
    assert_eq!(response.status(), 200);
    assert!(response.text().await.unwrap().contains("[DONE]"));
    assert!(fake.requests()[1].json().get("stream_options").is_none());

    let mut logprobs = body;
    logprobs["logprobs"] = json!(true);
    let refused = post(&gateway, &logprobs).await;
    assert_eq!(refused.status(), 400);
    let error: Value = refused.json().await.unwrap();
    assert_eq!(error["error"]["param"], "logprobs");
    assert_eq!(fake.requests().len(), 2, "a refused request is not sent");
}

#[tokio::test]
async fn an_unknown_preset_is_refused_at_load_with_the_names_it_could_be() {
    let text = TestGateway::new()
        .with("[[providers]]\nname = \"x\"\nkind = \"openai\"\ncompat = \"grok\"\n")
        .text();
    let errors = match switchyard::config::Config::parse(&text) {
        Err(switchyard::config::ConfigError::Invalid(errors)) => errors,
        other => panic!("{other:?}"),
    };
    let message = errors[0].to_string();
    assert!(
        message.starts_with("providers[0].compat: `grok` is not one of `groq`, `mistral`"),
        "{message}"
    );
}

#[tokio::test]
async fn a_budget_works_on_a_well_known_model_that_prices_does_not_name() {
    let fake = scripted("openai", []).await;
    let gateway = TestGateway::new()
        .provider("openai", &fake)
        .route("r", &[("openai", "gpt-4o-mini")], "")
        .with("[[roles]]\nname = \"default\"\n")
        .set("budget_per_day", 1.0)
        .start()
        .await;
    let body =
        json!({"model": "r", "max_tokens": 1000, "messages": [{"role": "user", "content": "Hi"}]});
    let response = post(&gateway, &body).await;
    // Without a price a budget refuses the model (402); gpt-4o-mini's is shipped.
    assert_eq!(response.status(), 200);
    let remaining: f64 = header(&response, "x-switchyard-budget-remaining")
        .parse()
        .unwrap();
    // At most 1,000 output tokens at $0.60 a million, and a few input tokens, reserved.
    assert!((0.9993..1.0).contains(&remaining), "{remaining}");
}

#[tokio::test]
async fn a_model_a_reload_routes_to_takes_its_shipped_price_at_once() {
    let fake = scripted("openai", []).await;
    let config = |model: &str| {
        TestGateway::new()
            .provider("openai", &fake)
            .route("r", &[("openai", model)], "")
            .with("[[roles]]\nname = \"default\"\n")
            .set("budget_per_day", 1.0)
    };
    let running = super::reload::FromFile::start(&config("gpt-4o-mini")).await;
    running.rewrite(&config("gpt-4.1-nano"));
    let (status, answer) = running.reload().await;
    assert_eq!(status, 200);
    assert_eq!(answer["needs_restart"], json!([]), "{answer}");
    let body =
        json!({"model": "r", "max_tokens": 10, "messages": [{"role": "user", "content": "Hi"}]});
    // Unpriced, a budget would refuse it (402).
    assert_eq!(post(&running.gateway, &body).await.status(), 200);
}
