//! Spend budgets: reserved at admission, exact under concurrency (in one gateway and across
//! three on one Redis), settled at the reported usage, kept whole when a stream breaks.
//!
//! The fake's usage is deterministic: a completion costs one token a word of its content, and
//! the price table makes prompts free and output $0.001 a token, so a request asking for
//! `max_tokens = N` reserves exactly N × 1000 micro-dollars.

use futures_util::future::join_all;
use serde_json::{Value, json};
use switchyard::fake::{Behavior, FakeHandle};
use switchyard::server::Gateway;

use super::support::*;

/// Five words: five output tokens, $0.005.
const FIVE_WORDS: &str = "one two three four five";

/// Route `r` to the fake's model `m` (priced), route `u` to its model `free-m` (unpriced),
/// and the anonymous caller's role `default` with a daily budget of `per_day` dollars.
pub fn config(fake: &FakeHandle, per_day: f64) -> TestGateway {
    TestGateway::new()
        .provider("up", fake)
        .route("r", &[("up", "m")], "")
        .route("u", &[("up", "free-m")], "")
        .with("[[prices]]\nprovider = \"up\"\nmodel = \"m\"\ninput_per_1m = 0.0\noutput_per_1m = 1000.0\n")
        .with("[[roles]]\nname = \"default\"\n")
        .set("budget_per_day", per_day)
        .with(OBSERVABILITY)
}

pub fn ask(model: &str, max_tokens: u64) -> Value {
    json!({"model": model, "max_tokens": max_tokens, "messages": [{"role": "user", "content": "Hi"}]})
}

pub async fn five_word_fake() -> FakeHandle {
    scripted("up", [Behavior::ok().content(FIVE_WORDS)]).await
}

/// Sends `count` requests at once, round-robin over `gateways`; the 200s and the 402s.
pub async fn burst(gateways: &[&Gateway], body: &Value, count: usize) -> (usize, usize) {
    let client = client();
    let requests = (0..count).map(|i| {
        client
            .post(format!(
                "{}/v1/chat/completions",
                gateways[i % gateways.len()].url()
            ))
            .json(body)
            .send()
    });
    let statuses: Vec<u16> = join_all(requests)
        .await
        .into_iter()
        .map(|r| r.expect("the gateway answers").status().as_u16())
        .collect();
    let ok = statuses.iter().filter(|s| **s == 200).count();
    let refused = statuses.iter().filter(|s| **s == 402).count();
    assert_eq!(ok + refused, count, "{statuses:?}");
    (ok, refused)
}

/// The dollars a gateway's `/metrics` says were settled against budgets.
pub async fn settled_dollars(gateway: &Gateway) -> f64 {
    metrics_text(&gateway.url(), METRICS_TOKEN)
        .await
        .lines()
        .filter(|line| line.starts_with("switchyard_budget_spend_usd_total{"))
        .filter_map(|line| line.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifty_concurrent_requests_against_a_budget_for_twenty_admit_exactly_twenty() {
    let fake = five_word_fake().await;
    // Twenty reservations of $0.005 fit in $0.102; a twenty-first does not.
    let gateway = config(&fake, 0.102).start().await;
    assert_eq!(burst(&[&gateway], &ask("r", 5), 50).await, (20, 30));
    assert_eq!(fake.calls(), 20, "the refused never reached the provider");
    let settled = settled_dollars(&gateway).await;
    assert!((settled - 0.1).abs() < 1e-9, "{settled}");
    assert!(settled <= 0.102);
}

#[tokio::test]
async fn settling_returns_the_unused_part_to_the_next_requests() {
    let fake = scripted("up", [Behavior::ok().content("two words")]).await;
    // Each request reserves $0.010 and costs $0.002: by reservations alone two fit in
    // $0.025; settled, eight do (the eighth reserves on top of $0.014 spent).
    let gateway = config(&fake, 0.025).start().await;
    let mut admitted = 0;
    loop {
        let response = post(&gateway, &ask("r", 10)).await;
        if response.status() == 402 {
            break;
        }
        assert_eq!(response.status(), 200);
        let left = header(&response, "x-switchyard-budget-remaining").to_owned();
        assert_eq!(left, format!("0.{:06}", 25_000 - 2_000 * admitted - 10_000));
        admitted += 1;
        assert!(admitted < 20, "the budget never ran out");
    }
    assert_eq!(admitted, 8);
}

#[tokio::test]
async fn a_stream_cut_mid_way_keeps_its_whole_reservation() {
    let fake = scripted(
        "up",
        [
            Behavior::ok()
                .content(FIVE_WORDS)
                .chunks(5, 50)
                .drop_after(2),
            Behavior::ok().content(FIVE_WORDS),
        ],
    )
    .await;
    let gateway = config(&fake, 0.025).start().await;
    let mut body = ask("r", 10);
    body["stream"] = json!(true);
    let cut = post(&gateway, &body).await;
    assert_eq!(cut.status(), 200);
    assert_eq!(header(&cut, "x-switchyard-budget-remaining"), "0.015000");
    let text = cut.text().await.unwrap();
    assert!(text.contains("error"), "the cut is told: {text}");
    // The cut stream's $0.010 stays spent; this request reserves $0.010 more.
    let next = post(&gateway, &ask("r", 10)).await;
    assert_eq!(next.status(), 200);
    assert_eq!(header(&next, "x-switchyard-budget-remaining"), "0.005000");
    let kept = metrics_text(&gateway.url(), METRICS_TOKEN).await;
    assert!(
        kept.contains("switchyard_budget_reservations_kept_total 1"),
        "{kept}"
    );
}

#[tokio::test]
async fn a_whole_stream_settles_at_its_usage() {
    let fake = five_word_fake().await;
    let gateway = config(&fake, 0.025).start().await;
    let mut body = ask("r", 10);
    body["stream"] = json!(true);
    let stream = post(&gateway, &body).await;
    assert_eq!(stream.status(), 200);
    assert!(stream.text().await.unwrap().contains("[DONE]"));
    // Settled at five tokens ($0.005), not the $0.010 reserved.
    let next = post(&gateway, &ask("r", 10)).await;
    assert_eq!(header(&next, "x-switchyard-budget-remaining"), "0.010000");
}

#[tokio::test]
async fn a_request_over_what_is_left_gets_a_402_before_any_upstream_call() {
    let fake = five_word_fake().await;
    // The first reserves $0.010 and settles at $0.005; the next $0.010 does not fit $0.014.
    let gateway = config(&fake, 0.014).start().await;
    assert_eq!(post(&gateway, &ask("r", 10)).await.status(), 200);
    let calls = fake.calls();
    let refused = post(&gateway, &ask("r", 10)).await;
    assert_eq!(refused.status(), 402);
    let retry_after: u64 = header(&refused, "retry-after").parse().unwrap();
    assert!((1..=86_400).contains(&retry_after), "{retry_after}");
    let body: Value = refused.json().await.unwrap();
    let message = error_message(&body);
    assert_eq!(body["error"]["code"], "budget_exceeded");
    assert_eq!(body["error"]["type"], "insufficient_quota");
    assert!(message.contains("$0.014000 daily budget"), "{message}");
    assert!(message.contains("T00:00:00Z"), "{message}");
    assert_eq!(fake.calls(), calls, "refused before any upstream call");
    let id = header(
        &post(&gateway, &ask("r", 10)).await,
        "x-switchyard-request-id",
    )
    .to_owned();
    let row = record(&gateway, &id).await;
    assert_eq!(
        (row.status, row.error.as_deref()),
        (402, Some("budget_exceeded"))
    );
}

#[tokio::test]
async fn a_request_that_could_never_fit_says_so_distinctly() {
    let fake = five_word_fake().await;
    let gateway = config(&fake, 0.005).start().await;
    let refused = post(&gateway, &ask("r", 6)).await;
    assert_eq!(refused.status(), 402);
    assert_eq!(header(&refused, "retry-after"), "", "waiting never helps");
    let body: Value = refused.json().await.unwrap();
    assert_eq!(body["error"]["code"], "budget_too_small");
    assert!(error_message(&body).contains("never fit"));
    assert_eq!(fake.calls(), 0);
    assert_eq!(post(&gateway, &ask("r", 5)).await.status(), 200);
}

#[tokio::test]
async fn an_unpriced_model_is_refused_by_default_and_admitted_when_free() {
    let fake = five_word_fake().await;
    let strict = config(&fake, 1.0).start().await;
    let refused = post(&strict, &ask("u", 5)).await;
    assert_eq!(refused.status(), 402);
    let body: Value = refused.json().await.unwrap();
    assert_eq!(body["error"]["code"], "model_unpriced");
    assert!(error_message(&body).contains("up/free-m"));
    assert_eq!(fake.calls(), 0);

    let lenient = config(&fake, 1.0)
        .with("[budgets]\nunpriced = \"free\"\n")
        .start()
        .await;
    let admitted = post(&lenient, &ask("u", 5)).await;
    assert_eq!(admitted.status(), 200);
    assert_eq!(
        header(&admitted, "x-switchyard-budget-remaining"),
        "1.000000"
    );
}

#[tokio::test]
async fn an_anthropic_client_gets_its_own_error_shape() {
    let fake = five_word_fake().await;
    let gateway = config(&fake, 0.1).start().await;
    // `message` asks for 256 tokens: $0.256, more than the whole budget.
    let refused = post_to(&gateway, "/v1/messages", &message("r", false)).await;
    assert_eq!(refused.status(), 402);
    let body: Value = refused.json().await.unwrap();
    assert_eq!(body["type"], "error");
    assert_eq!(body["error"]["type"], "billing_error");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("never fit")
    );
    assert_eq!(fake.calls(), 0);
}

#[tokio::test]
async fn callers_without_a_budget_see_no_header_and_no_refusal() {
    let fake = five_word_fake().await;
    let gateway = TestGateway::new()
        .provider("up", &fake)
        .route("u", &[("up", "free-m")], "")
        .with("[[roles]]\nname = \"default\"\n")
        .start()
        .await;
    let response = post(&gateway, &ask("u", 100_000)).await;
    assert_eq!(response.status(), 200);
    assert_eq!(header(&response, "x-switchyard-budget-remaining"), "");
}

/// A key without budgets of its own has its role's (`key_budgets.rs` tests a key's own).
#[tokio::test]
async fn a_keys_spend_is_counted_apart_and_shown_by_key() {
    let fake = five_word_fake().await;
    let gateway = config(&fake, 1.0).start().await;
    let (key, id) = stored_key(&gateway, "ann", "default", None).await;
    let bearer = format!("Bearer {key}");
    let with_key = [("authorization", bearer.as_str())];
    let admitted = post_with(&gateway, &ask("r", 5), &with_key).await;
    assert_eq!(admitted.status(), 200);
    assert_eq!(
        header(&admitted, "x-switchyard-budget-remaining"),
        "0.995000"
    );
    // Without the key, the user's own budget: untouched by the key's spend.
    let anonymous = post(&gateway, &ask("r", 5)).await;
    assert_eq!(
        header(&anonymous, "x-switchyard-budget-remaining"),
        "0.995000"
    );
    let never = post_with(&gateway, &ask("r", 2_000), &with_key).await;
    assert_eq!(never.status(), 402);

    let card: Value = observe(&gateway, "/v1/scorecard")
        .await
        .json()
        .await
        .unwrap();
    let spend = &card["budget_spend"];
    assert_eq!(spend["keys"][&id], 0.005, "{spend}");
    assert_eq!(spend["routes"]["r"], 0.01, "{spend}");
    assert_eq!(spend["roles"]["default"], 0.01, "{spend}");
    let metrics = metrics_text(&gateway.url(), METRICS_TOKEN).await;
    let by_key = format!("switchyard_budget_key_spend_usd_total{{key=\"{id}\"}} 0.005");
    assert!(metrics.contains(&by_key), "{metrics}");
    assert!(
        metrics.contains("switchyard_budget_refused_total{reason=\"budget_too_small\"} 1"),
        "{metrics}"
    );
}
